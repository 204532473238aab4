"""Identities proven for the attention pages on heads and positions: multi-head,
grouped-query, rotary, ALiBi and the common mistakes."""

from __future__ import annotations

import math

import torch

from identities import identity
from snippets.attention import rotary

PAGE_ROPE = "attention/rotary.md"


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64)


# --- rotary -----------------------------------------------------------------------


@identity("rope-interleaved-is-the-paper-matrix",
          "apply_rotary with interleaved pairs equals the paper's block-diagonal rotation "
          "R_t, written out entry by entry",
          page=PAGE_ROPE, tol=1e-12)
def rope_interleaved_is_the_paper_matrix():
    n, d = 7, 8
    x = _randn(2, 3, n, d)
    ours = rotary.apply_rotary(x, *rotary.rotary_tables(torch.arange(n), d), interleaved=True)
    rows = []
    for t in range(n):
        r = torch.zeros(d, d, dtype=torch.float64)
        for i in range(d // 2):
            a = t * 10000.0 ** (-2 * i / d)
            r[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor(
                [[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=torch.float64)
        rows.append(x[..., t, :] @ r.T)
    return ours, torch.stack(rows, dim=-2)


@identity("rope-scores-depend-on-offset",
          "RoPE scores depend only on the offset between positions: every position shifted "
          "by 137 gives the same q k^T",
          page=PAGE_ROPE, tol=1e-10)
def rope_scores_depend_on_offset():
    q, k = _randn(2, 3, 5, 8), _randn(2, 3, 5, 8)
    pos = torch.tensor([0, 3, 4, 9, 20])

    def scores(shift):
        cos, sin = rotary.rotary_tables(pos + shift, 8)
        qr, kr = rotary.apply_rotary(q, cos, sin), rotary.apply_rotary(k, cos, sin)
        return qr @ kr.transpose(-2, -1)

    return scores(137), scores(0)


@identity("rope-pairings-agree-after-permutation",
          "Interleaved and half-split RoPE give the same scores once q and k (the rows of "
          "W^Q and W^K) are permuted evens-then-odds",
          page=PAGE_ROPE, tol=1e-12)
def rope_pairings_agree_after_permutation():
    d = 8
    q, k = _randn(2, 3, 6, d), _randn(2, 3, 6, d)
    cos, sin = rotary.rotary_tables(torch.arange(6), d)
    perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])

    def scores(q, k, interleaved):
        qr = rotary.apply_rotary(q, cos, sin, interleaved=interleaved)
        return qr @ rotary.apply_rotary(k, cos, sin, interleaved=interleaved).transpose(-2, -1)

    return scores(q[..., perm], k[..., perm], False), scores(q, k, True)


@identity("rope-decode-equals-full-pass",
          "RotaryEmbedding on the last query alone, with every key, rotates it as the full "
          "pass does (lower-right alignment)",
          page=PAGE_ROPE, tol=0.0)
def rope_decode_equals_full_pass():
    rope = rotary.RotaryEmbedding(8)
    q, k = _randn(1, 2, 6, 8), _randn(1, 2, 6, 8)
    q_full, _ = rope(q, k, offset=3)
    q_last, _ = rope(q[..., -1:, :], k, offset=3)
    return q_last, q_full[..., -1:, :]


# --- multi-head -------------------------------------------------------------------

PAGE_MHA = "attention/multi-head.md"


def _torch_mha(d_model=16, n_heads=4, **kw):
    from torch import nn

    mha = nn.MultiheadAttention(d_model, n_heads, batch_first=True, **kw).double().eval()
    with torch.no_grad():  # torch starts biases at zero: random ones prove they are copied
        mha.in_proj_bias.normal_()
        mha.out_proj.bias.normal_()
    return mha


@identity("mha-equals-torch-multihead",
          "MultiHeadAttention equals nn.MultiheadAttention with its weights copied in "
          "(self-attention, a causal mask and padded keys, masks converted to True = blocked)",
          page=PAGE_MHA, tol=1e-12)
def mha_equals_torch_multihead():
    from snippets.attention.multi_head import MultiHeadAttention

    theirs = _torch_mha()
    ours = MultiHeadAttention.from_torch(theirs)
    x = _randn(2, 6, 16)
    key_mask = torch.ones(2, 6, dtype=torch.bool)
    key_mask[1, 4:] = False
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    out, _ = ours(x, attn_mask=causal, key_mask=key_mask)
    ref, _ = theirs(x, x, x, attn_mask=~causal, key_padding_mask=~key_mask, need_weights=False)
    return out, ref


@identity("mha-cross-kdim-vdim-equals-torch",
          "MultiHeadAttention with kdim and vdim (three projections) equals "
          "nn.MultiheadAttention on cross-attention, weights returned per head and averaged",
          page=PAGE_MHA, tol=1e-12)
def mha_cross_kdim_vdim_equals_torch():
    from snippets.attention.multi_head import MultiHeadAttention

    theirs = _torch_mha(kdim=5, vdim=7)
    ours = MultiHeadAttention.from_torch(theirs)
    query, key, value = _randn(2, 4, 16), _randn(2, 6, 5), _randn(2, 6, 7)
    out, weights = ours(query, key, value, need_weights=True)
    ref, ref_weights = theirs(query, key, value, need_weights=True)
    return torch.cat([out.flatten(), weights.mean(1).flatten()]), torch.cat(
        [ref.flatten(), ref_weights.flatten()])


@identity("mha-fast-path-equals-written-out",
          "MultiHeadAttention's F.scaled_dot_product_attention path equals its written-out "
          "kernel, with a float mask, padded keys, a lower-right causal mask and an empty row",
          page=PAGE_MHA, tol=1e-12)
def mha_fast_path_equals_written_out():
    from snippets.attention.multi_head import MultiHeadAttention

    mha = MultiHeadAttention(16, 4).double().eval()
    query, memory = _randn(2, 4, 16), _randn(2, 6, 16)
    key_mask = torch.ones(2, 6, dtype=torch.bool)
    key_mask[1, :] = False  # the second sequence has no real key: its rows give zeros
    float_mask = _randn(2, 1, 4, 6)
    kw = dict(attn_mask=float_mask, key_mask=key_mask, is_causal=True)
    fast, _ = mha(query, memory, **kw)
    slow, _ = mha(query, memory, **kw, need_weights=True)
    return fast, slow


# --- grouped-query ----------------------------------------------------------------

PAGE_GQA = "attention/grouped-query.md"


def _gqa(n_kv_heads, d_model=16, n_heads=4):
    from snippets.attention.grouped_query import GroupedQueryAttention

    return GroupedQueryAttention(d_model, n_heads, n_kv_heads).double().eval()


def _heads(x, h):
    b, n, _ = x.shape
    return x.view(b, n, h, -1).transpose(1, 2)  # (B, N, h d) -> (B, h, N, d)


@identity("gqa-equals-mha-on-repeated-heads",
          "GroupedQueryAttention's written-out grouped kernel equals multi-head attention on "
          "key/value heads copied G times with repeat_kv, causal",
          page=PAGE_GQA, tol=1e-12)
def gqa_equals_mha_on_repeated_heads():
    from snippets.attention.grouped_query import repeat_kv

    m = _gqa(2)
    x = _randn(2, 5, 16)
    ours, _ = m(x, is_causal=True, need_weights=True)
    q = _heads(m.q_proj(x), 4)
    k, v = (repeat_kv(_heads(p(x), 2), 2) for p in (m.k_proj, m.v_proj))
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    scores = (q @ k.transpose(-2, -1) / math.sqrt(4)).masked_fill(~causal, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v  # (B, H, N, d)
    return ours, m.out_proj(out.transpose(1, 2).reshape(2, 5, 16))


@identity("gqa-equals-sdpa-enable-gqa",
          "GroupedQueryAttention's written-out kernel equals "
          "F.scaled_dot_product_attention(..., enable_gqa=True) on its projected heads, "
          "with padded keys",
          page=PAGE_GQA, tol=1e-12)
def gqa_equals_sdpa_enable_gqa():
    import torch.nn.functional as F

    m = _gqa(2)
    x, memory = _randn(2, 3, 16), _randn(2, 6, 16)
    key_mask = torch.ones(2, 6, dtype=torch.bool)
    key_mask[0, 4:] = False
    ours, _ = m(x, memory, key_mask=key_mask, need_weights=True)
    q = _heads(m.q_proj(x), 4)
    k, v = _heads(m.k_proj(memory), 2), _heads(m.v_proj(memory), 2)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask[:, None, None, :],
                                         enable_gqa=True)
    return ours, m.out_proj(out.transpose(1, 2).reshape(2, 3, 16))


@identity("gqa-with-one-kv-head-is-multi-query",
          "GroupedQueryAttention with H_kv = 1 is multi-query attention: every query head "
          "reads the one key/value head, written out with broadcasting",
          page=PAGE_GQA, tol=1e-12)
def gqa_with_one_kv_head_is_multi_query():
    m = _gqa(1)
    x = _randn(2, 5, 16)
    ours, _ = m(x)  # the fast path
    q = _heads(m.q_proj(x), 4)  # (B, H, N, d)
    k, v = m.k_proj(x).unsqueeze(1), m.v_proj(x).unsqueeze(1)  # (B, 1, N, d): one head
    out = torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1) @ v
    return ours, m.out_proj(out.transpose(1, 2).reshape(2, 5, 16))


@identity("gqa-full-heads-equals-torch-multihead",
          "GroupedQueryAttention.from_torch with H_kv = H equals nn.MultiheadAttention "
          "(nothing pooled), on the fast path and the written-out path",
          page=PAGE_GQA, tol=1e-12)
def gqa_full_heads_equals_torch_multihead():
    from snippets.attention.grouped_query import GroupedQueryAttention

    theirs = _torch_mha()
    ours = GroupedQueryAttention.from_torch(theirs, 4)
    x = _randn(2, 5, 16)
    ref, _ = theirs(x, x, x, need_weights=False)
    fast, slow = ours(x)[0], ours(x, need_weights=True)[0]
    return torch.stack([fast, slow]), torch.stack([ref, ref])


# --- ALiBi ------------------------------------------------------------------------

PAGE_ALIBI = "attention/alibi.md"


@identity("alibi-bias-is-the-written-equation",
          "alibi_bias equals -m_h (i + M - N - j) written entry by entry, -inf on future keys, "
          "with the paper's slopes 2^(-8h/H)",
          page=PAGE_ALIBI, tol=0.0)
def alibi_bias_is_the_written_equation():
    from snippets.attention.alibi import alibi_bias, alibi_slopes

    h, n, m = 8, 3, 5
    slopes = alibi_slopes(h, dtype=torch.float64)
    want = torch.empty(h, n, m, dtype=torch.float64)
    for head in range(h):
        for i in range(n):
            for j in range(m):
                dist = i + (m - n) - j
                slope = 2.0 ** (-8.0 * (head + 1) / h)
                want[head, i, j] = -slope * dist if dist >= 0 else float("-inf")
    ours = alibi_bias(slopes, n, m)

    def split(t):  # -inf - -inf is NaN: compare where the -inf are, and the finite rest
        return torch.stack([torch.isneginf(t).double(), t.masked_fill(torch.isinf(t), 0.0)])

    return split(ours), split(want)


@identity("alibi-equals-sdpa-with-float-mask",
          "alibi_attention equals softmax(q k^T / sqrt(d) + bias) v written out, and "
          "F.scaled_dot_product_attention given the bias as a float mask (N < M)",
          page=PAGE_ALIBI, tol=1e-12)
def alibi_equals_sdpa_with_float_mask():
    import torch.nn.functional as F

    from snippets.attention.alibi import alibi_attention, alibi_bias, alibi_slopes

    q, k, v = _randn(2, 4, 3, 8), _randn(2, 4, 6, 8), _randn(2, 4, 6, 8)
    slopes = alibi_slopes(4, dtype=torch.float64)
    bias = alibi_bias(slopes, 3, 6)
    written = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8) + bias, dim=-1) @ v
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    ours = alibi_attention(q, k, v, slopes)
    return torch.stack([ours, ours]), torch.stack([written, sdpa])


# --- common mistakes --------------------------------------------------------------

PAGE_MISTAKES = "attention/common-mistakes.md"


@identity("cached-decode-equals-full-causal-pass",
          "Decoding the last N of M tokens with a lower-right causal mask (the mask written "
          "out, and torch's causal_lower_right) equals the last N rows of a full causal pass",
          page=PAGE_MISTAKES, tol=1e-12)
def cached_decode_equals_full_causal_pass():
    import torch.nn.functional as F

    from snippets.attention import common_mistakes as cm

    q, k, v = _randn(2, 3, 7, 8), _randn(2, 3, 7, 8), _randn(2, 3, 7, 8)
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)[..., -2:, :]
    last = q[..., -2:, :]
    return torch.stack([cm.cached_decode(last, k, v), cm.cached_decode_bias(last, k, v)]), \
        torch.stack([full, full])


@identity("sequence-first-transposed-equals-batch-first",
          "A sequence-first nn.MultiheadAttention given (B, N, D) transposed in and out equals "
          "the batch-first module with the same weights",
          page=PAGE_MISTAKES, tol=1e-12)
def sequence_first_transposed_equals_batch_first():
    from torch import nn

    from snippets.attention import common_mistakes as cm

    seq_first = nn.MultiheadAttention(16, 4).double().eval()
    batch_first = nn.MultiheadAttention(16, 4, batch_first=True).double().eval()
    batch_first.load_state_dict(seq_first.state_dict())
    x = _randn(3, 5, 16)
    return cm.mha_self_attend(seq_first, x), batch_first(x, x, x, need_weights=False)[0]
