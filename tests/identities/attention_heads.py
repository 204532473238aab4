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
