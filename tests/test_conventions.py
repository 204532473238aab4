"""Conventions across libraries: every table cell backed by a run or a source line.

The page docs/efficiency/conventions.md holds a table whose rows are conventions
(window, causal alignment, log-sum-exp base, GQA mapping, RoPE pairing, mask
polarity, fully masked rows, soft cap, sinks, default scale) and whose columns
are libraries. A cell is backed by a test here, which runs the library on the
CPU (SDPA, flex_attention, transformers' masking utilities and eager attention)
or, for a GPU-only library, the mask or score function written from the cited
source line, against a dense softmax written in this file; or by a footnote
that cites a source line. ``test_every_cell_names_a_test_or_a_source`` parses
the page and fails on a cell that names neither or names a missing test.
"""

from __future__ import annotations

import inspect
import math
import pathlib
import re
import sys

import pytest
import torch
import torch.nn.functional as F

from snippets.efficiency import conventions as cv

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "efficiency" / "conventions.md"
F64 = torch.float64


def dense(q, k, v, keep=None, scale=None, bias=None):
    """The reference: softmax(scale q k^T + bias) v over the kept keys, and its LSE."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = torch.einsum("...nd,...md->...nm", q, k) * scale
    if bias is not None:
        s = s + bias
    if keep is not None:
        s = s.masked_fill(~keep, -math.inf)
    top = s.amax(-1, keepdim=True)
    top = torch.where(torch.isneginf(top), torch.zeros_like(top), top)  # an empty row
    e = torch.exp(s - top)
    total = e.sum(-1, keepdim=True)
    w = torch.where(total > 0, e / total.clamp(min=1e-300), torch.zeros_like(e))
    return w @ v, (top + torch.log(total)).squeeze(-1)


def qkv(b=2, h=4, h_kv=None, n=5, m=7, d=8, d_v=None, seed=0):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    q = torch.randn(b, h, n, d, generator=g, dtype=F64)
    k = torch.randn(b, h_kv or h, m, d, generator=g, dtype=F64)
    v = torch.randn(b, h_kv or h, m, d_v or d, generator=g, dtype=F64)
    return q, k, v


def fa_mask(n, m, left, right):
    """FlashAttention's window, from its docstring: keys in
    [i + M - N - left, i + M - N + right] inclusive, -1 = unbounded
    (flash_attn/flash_attn_interface.py lines 1187-1189)."""
    mask = torch.zeros(n, m, dtype=torch.bool)
    for i in range(n):
        for j in range(m):
            lo = -math.inf if left < 0 else i + m - n - left
            hi = math.inf if right < 0 else i + m - n + right
            mask[i, j] = lo <= j <= hi
    return mask


def flex():
    from torch.nn.attention import flex_attention as fa
    return fa


# ----------------------------------------------------------------------------
# Window inclusivity
# ----------------------------------------------------------------------------


def test_flash_window_keeps_w_plus_one_keys():
    """FlashAttention 2/3 and varlen: window_size=(W, 0) reads W + 1 keys."""
    for w in (0, 1, 3, 6):
        mask = fa_mask(9, 9, w, 0)
        assert mask.sum(-1).max().item() == w + 1
        assert torch.equal(mask, cv.band_mask(9, 9, left=w, right=0))
    assert cv.flash_window(4) == (3, 0)
    assert cv.window_from_flash((3, 0)) == 4
    keys = fa_mask(9, 9, *cv.flash_window(4)).sum(-1)
    assert keys.max().item() == 4


def test_flashinfer_window_left_keeps_w_plus_one_keys():
    """FlashInfer's mask (variants.cuh line 89): kv + qo_len + window_left >= kv_len + qo."""
    n, m, w = 4, 10, 3
    mask = torch.tensor([[kv + n + w >= m + i and kv <= i + m - n for kv in range(m)]
                         for i in range(n)])
    assert torch.equal(mask, cv.band_mask(n, m, left=w, right=0))
    assert mask.sum(-1).tolist() == [w + 1] * n


def test_transformers_sliding_window_keeps_w_keys():
    """transformers: sliding_window_overlay keeps kv > q - W: W keys, own included."""
    mu = pytest.importorskip("transformers.masking_utils")
    w, n = 3, 8
    mask = mu.sdpa_mask(batch_size=1, q_length=n, kv_length=n, allow_is_causal_skip=False,
                        mask_function=mu.sliding_window_causal_mask_function(w))[0, 0]
    assert torch.equal(mask, cv.band_mask(n, n, left=w - 1, right=0))
    assert mask.sum(-1).max().item() == w
    q, k, v = qkv(n=n, m=n)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    ref, _ = dense(q, k, v, cv.band_mask(n, n, left=cv.flash_window(w)[0], right=0))
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)


def test_transformers_bidirectional_window_keeps_2w_plus_1_keys():
    """transformers: the bidirectional overlay keeps |q - kv| <= W, 2W + 1 keys;
    its flash path passes (W - 1, W - 1), 2W - 1 keys (modeling_flash_attention_utils
    line 692)."""
    mu = pytest.importorskip("transformers.masking_utils")
    w, n = 2, 9
    mask = mu.sdpa_mask(batch_size=1, q_length=n, kv_length=n, allow_is_causal_skip=False,
                        mask_function=mu.sliding_window_bidirectional_mask_function(w))[0, 0]
    assert mask.sum(-1).max().item() == 2 * w + 1
    assert torch.equal(mask, cv.band_mask(n, n, left=w, right=w))
    assert fa_mask(n, n, w - 1, w - 1).sum(-1).max().item() == 2 * w - 1


def test_flex_mask_mod_decides_the_window():
    """flex_attention has no window argument: `q - kv < W` in a mask_mod is W keys."""
    fa = flex()
    n, w = 16, 3
    q, k, v = qkv(b=1, h=2, n=n, m=n)
    block = fa.create_block_mask(lambda b, h, i, j: (j <= i) & (i - j < w), None, None, n, n,
                                 device="cpu")
    out = fa.flex_attention(q, k, v, block_mask=block)
    ref, _ = dense(q, k, v, cv.band_mask(n, n, left=w - 1, right=0))
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)


def test_window_off_by_one_changes_the_output():
    """The trap measured: passing W where W - 1 was meant reads one key more."""
    n, w = 12, 4
    q, k, v = qkv(b=1, h=1, n=n, m=n)
    meant, _ = dense(q, k, v, cv.band_mask(n, n, left=w - 1, right=0))
    passed, _ = dense(q, k, v, cv.band_mask(n, n, left=w, right=0))
    gap = (meant - passed).abs().max().item()
    assert gap > 0.05
    assert (meant - passed)[..., :w, :].abs().max().item() < 1e-15  # first W rows agree


# ----------------------------------------------------------------------------
# Causal alignment
# ----------------------------------------------------------------------------


def test_sdpa_is_causal_is_upper_left():
    q, k, v = qkv(n=3, m=7)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ref, _ = dense(q, k, v, cv.band_mask(3, 7, align="upper_left"))
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    lower, _ = dense(q, k, v, cv.band_mask(3, 7))
    assert (out - lower).abs().max() > 0.1


def test_flash_causal_docstring_examples_are_lower_right():
    """The two masks drawn in flash_attn_func's docstring (lines 1175-1184)."""
    assert cv.band_mask(2, 5).int().tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    assert cv.band_mask(5, 2).int().tolist() == [[0, 0], [0, 0], [0, 0], [1, 0], [1, 1]]
    assert torch.equal(fa_mask(5, 2, -1, 0), cv.band_mask(5, 2))


def test_flashinfer_causal_is_lower_right():
    """FlashInfer (prefill.cuh lines 1575-1576): masked when kv > q + kv_len - qo_len."""
    n, m = 3, 8
    mask = torch.tensor([[not kv > i + m - n for kv in range(m)] for i in range(n)])
    assert torch.equal(mask, cv.band_mask(n, m))


def test_flex_raw_indices_are_upper_left():
    """A flex mask_mod `kv <= q` compares raw indices: upper left when N != M."""
    fa = flex()
    q, k, v = qkv(b=1, h=2, n=3, m=6)
    block = fa.create_block_mask(lambda b, h, i, j: j <= i, None, None, 3, 6, device="cpu")
    out = fa.flex_attention(q, k, v, block_mask=block)
    ref, _ = dense(q, k, v, cv.band_mask(3, 6, align="upper_left"))
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    shifted = fa.create_block_mask(lambda b, h, i, j: j <= i + 3, None, None, 3, 6,
                                   device="cpu")
    ref, _ = dense(q, k, v, cv.band_mask(3, 6))
    torch.testing.assert_close(fa.flex_attention(q, k, v, block_mask=shifted), ref,
                               atol=1e-12, rtol=0)


def test_transformers_causal_with_cache_offset_is_lower_right():
    """sdpa_mask works on absolute positions: with q_offset = M - N it is lower right."""
    mu = pytest.importorskip("transformers.masking_utils")
    n, m = 2, 6
    mask = mu.sdpa_mask(batch_size=1, q_length=n, kv_length=m, q_offset=m - n,
                        allow_is_causal_skip=False)[0, 0]
    assert torch.equal(mask, cv.band_mask(n, m))
    no_offset = mu.sdpa_mask(batch_size=1, q_length=n, kv_length=m,
                             allow_is_causal_skip=False)[0, 0]
    assert torch.equal(no_offset, cv.band_mask(n, m, align="upper_left"))


# ----------------------------------------------------------------------------
# Log-sum-exp base
# ----------------------------------------------------------------------------


def test_flex_lse_is_natural():
    fa = flex()
    q, k, v = qkv(b=1, h=2, n=4, m=6)
    out, aux = fa.flex_attention(q, k, v, return_aux=fa.AuxRequest(lse=True))
    _, lse = dense(q, k, v)
    torch.testing.assert_close(aux.lse, lse, atol=1e-12, rtol=0)


def test_flashinfer_lse_is_base2_from_source():
    """FlashInfer's state (state.cuh line 45): lse = m + log2(d) over logits scaled by
    sm_scale * log2(e) (variants.cuh line 54); lse_to_natural brings it back."""
    q, k, v = qkv(b=1, h=2, n=4, m=6)
    s = torch.einsum("...nd,...md->...nm", q, k) * (8 ** -0.5) * math.log2(math.e)
    m = s.amax(-1)
    d = torch.exp2(s - m[..., None]).sum(-1)
    lse2 = m + torch.log2(d)
    _, lse = dense(q, k, v)
    torch.testing.assert_close(cv.lse_to_natural(lse2), lse, atol=1e-12, rtol=0)
    torch.testing.assert_close(cv.lse_to_base2(lse), lse2, atol=1e-12, rtol=0)
    gap = (lse2 - lse).abs().max().item()  # read as natural, it is off by a factor 1/ln 2
    assert gap > 0.5


def test_merging_partials_needs_the_right_base():
    """Two halves merged by their LSEs give the full output only in base e."""
    q, k, v = qkv(b=1, h=1, n=3, m=8)
    full, _ = dense(q, k, v)
    (o1, l1), (o2, l2) = dense(q, k[..., :4, :], v[..., :4, :]), dense(q, k[..., 4:, :],
                                                                       v[..., 4:, :])

    def merge(l1, l2):
        w = torch.softmax(torch.stack([l1, l2]), 0)[..., None]
        return w[0] * o1 + w[1] * o2

    torch.testing.assert_close(merge(l1, l2), full, atol=1e-12, rtol=0)
    wrong = merge(cv.lse_to_base2(l1), cv.lse_to_base2(l2))
    assert (wrong - full).abs().max() > 1e-3


# ----------------------------------------------------------------------------
# GQA head mapping
# ----------------------------------------------------------------------------


def test_sdpa_enable_gqa_is_repeat_interleave():
    q, k, v = qkv(h=6, h_kv=2)
    out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    ref, _ = dense(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1))
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    other, _ = dense(q, k.repeat(1, 3, 1, 1), v.repeat(1, 3, 1, 1))
    assert (out - other).abs().max() > 0.1


def test_flex_enable_gqa_is_repeat_interleave():
    fa = flex()
    q, k, v = qkv(b=1, h=4, h_kv=2)
    out = fa.flex_attention(q, k, v, enable_gqa=True)
    ref, _ = dense(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1))
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)


def test_transformers_repeat_kv_is_repeat_interleave():
    sdpa = pytest.importorskip("transformers.integrations.sdpa_attention")
    _, k, _ = qkv(h=2)
    assert torch.equal(sdpa.repeat_kv(k, 3), k.repeat_interleave(3, 1))


def test_flash_gqa_docstring_example_is_repeat_interleave():
    """'head 0, 1, 2 of Q will attention to head 0 of K, V' (line 1172); FlashInfer
    (prefill.cuh line 1574): qo_head = kv_head * group_size + r."""
    assert [h // (6 // 2) for h in range(6)] == [0, 0, 0, 1, 1, 1]
    assert [kv * 3 + r for kv in range(2) for r in range(3)] == list(range(6))


def test_gqa_permutation_runs_a_repeat_model_on_an_interleave_kernel():
    q, k, v = qkv(h=6, h_kv=2)
    trained, _ = dense(q, k.repeat(1, 3, 1, 1), v.repeat(1, 3, 1, 1))
    perm = cv.gqa_head_permutation(6, 2)
    kernel = F.scaled_dot_product_attention(q[:, perm], k, v, enable_gqa=True)
    torch.testing.assert_close(kernel[:, perm.argsort()], trained, atol=1e-12, rtol=0)
    assert sorted(perm.tolist()) == list(range(6))
    assert (kernel - trained).abs().max() > 0.1  # without the permutation: wrong heads


# ----------------------------------------------------------------------------
# RoPE pairing
# ----------------------------------------------------------------------------


def _angles(n, d, base=10000.0):
    inv = base ** (-torch.arange(0, d, 2, dtype=F64) / d)  # (d / 2,)
    return torch.arange(n, dtype=F64)[:, None] * inv  # (N, d / 2)


def rope_interleaved(x):
    """Pairs (2i, 2i + 1): the GPT-J layout, FlashAttention's rotary_interleaved=True."""
    a = _angles(x.shape[-2], x.shape[-1])
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.stack([x1 * a.cos() - x2 * a.sin(), x1 * a.sin() + x2 * a.cos()], -1)
    return out.flatten(-2)


def test_transformers_rotate_half_is_half_split():
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    q, k, _ = qkv(n=6, m=6)
    a = _angles(6, 8)
    cos, sin = torch.cat([a.cos(), a.cos()], -1), torch.cat([a.sin(), a.sin()], -1)
    hq, hk = llama.apply_rotary_pos_emb(q, k, cos[None], sin[None])
    order = cv.rope_half_split_order(8)
    torch.testing.assert_close(hq, rope_interleaved(q[..., order.argsort()])[..., order],
                               atol=1e-12, rtol=0)
    # the same sign: x1 cos - x2 sin in the first half, x2 cos + x1 sin in the second
    torch.testing.assert_close(hq[..., :4], q[..., :4] * a.cos() - q[..., 4:] * a.sin(),
                               atol=1e-12, rtol=0)
    scores = hq @ hk.transpose(-1, -2)
    qi, ki = (rope_interleaved(t[..., order.argsort()]) for t in (q, k))
    torch.testing.assert_close(qi @ ki.transpose(-1, -2), scores, atol=1e-12, rtol=0)


def test_rope_layout_mixup_changes_the_scores():
    """The trap: half-split weights run through an interleaved rotation."""
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    q, k, _ = qkv(n=6, m=6)
    a = _angles(6, 8)
    cos, sin = torch.cat([a.cos(), a.cos()], -1), torch.cat([a.sin(), a.sin()], -1)
    hq, hk = llama.apply_rotary_pos_emb(q, k, cos[None], sin[None])
    wrong = rope_interleaved(q) @ rope_interleaved(k).transpose(-1, -2)
    assert (wrong - hq @ hk.transpose(-1, -2)).abs().max() > 0.5


# ----------------------------------------------------------------------------
# Mask polarity and fully masked rows
# ----------------------------------------------------------------------------


def test_sdpa_bool_true_keeps_and_float_adds():
    q, k, v = qkv(n=4, m=6)
    keep = torch.rand(4, 6, generator=torch.Generator(device=torch.get_default_device()).manual_seed(1)) > 0.4
    keep[:, 0] = True
    ref, _ = dense(q, k, v, keep)
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=keep), ref,
                               atol=1e-12, rtol=0)
    add = torch.zeros(4, 6, dtype=F64).masked_fill(~keep, -math.inf)
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=add), ref,
                               atol=1e-12, rtol=0)


def test_sdpa_fully_masked_row_is_zero_on_cpu():
    q, k, v = qkv(n=3, m=5)
    keep = torch.ones(3, 5, dtype=torch.bool)
    keep[1] = False
    for dtype in (F64, torch.float32):
        out = F.scaled_dot_product_attention(*(t.to(dtype) for t in (q, k, v)), attn_mask=keep)
        assert out[..., 1, :].abs().max().item() == 0


def test_flex_mask_mod_true_keeps_and_empty_rows_are_zero():
    fa = flex()
    q, k, v = qkv(b=1, h=2, n=3, m=5)
    block = fa.create_block_mask(lambda b, h, i, j: (j <= i + 2) & (i != 1), None, None, 3, 5,
                                 device="cpu")
    out, aux = fa.flex_attention(q, k, v, block_mask=block, return_aux=fa.AuxRequest(lse=True))
    keep = cv.band_mask(3, 5).clone()
    keep[1] = False
    ref, _ = dense(q, k, v, keep)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    assert out[..., 1, :].abs().max().item() == 0
    assert torch.isneginf(aux.lse[..., 1]).all()


def test_zero_empty_rows_keeps_the_other_rows():
    """Only rows with no key left change: a partly masked row keeps its output."""
    q, k, v = qkv(n=3, m=5)
    keep = torch.ones(3, 5, dtype=torch.bool)
    keep[0, 3:], keep[1] = False, False
    out, _ = dense(q, k, v, bias=torch.zeros(3, 5, dtype=F64).masked_fill(~keep, -1e300))
    zeroed = cv.zero_empty_rows(out, keep)
    assert zeroed[..., 1, :].abs().max().item() == 0 and out[..., 1, :].abs().max() > 0
    assert torch.equal(zeroed[..., [0, 2], :], out[..., [0, 2], :])


def test_transformers_sdpa_mask_true_keeps():
    mu = pytest.importorskip("transformers.masking_utils")
    pad = torch.tensor([[True, True, True, False]])  # the last key is padding
    mask = mu.sdpa_mask(batch_size=1, q_length=4, kv_length=4, attention_mask=pad,
                        mask_function=mu.bidirectional_mask_function,
                        allow_is_causal_skip=False)[0, 0]
    assert mask[:, :3].all() and not mask[:, 3].any()
    eager = mu.eager_mask(batch_size=1, q_length=4, kv_length=4, attention_mask=pad,
                          mask_function=mu.bidirectional_mask_function, dtype=F64)[0, 0]
    assert (eager[:, :3] == 0).all() and (eager[:, 3] == torch.finfo(F64).min).all()


def test_transformers_eager_mask_empty_row_is_the_mean_of_values():
    """A finite `finfo.min` fill: a row with no key left averages every value."""
    mu = pytest.importorskip("transformers.masking_utils")
    pad = torch.zeros(1, 4, dtype=torch.bool)  # nothing to attend to
    bias = mu.eager_mask(batch_size=1, q_length=2, kv_length=4, attention_mask=pad,
                         mask_function=mu.bidirectional_mask_function, dtype=F64)
    q, k, v = qkv(b=1, h=2, n=2, m=4)
    out, _ = dense(q, k, v, bias=bias)
    torch.testing.assert_close(out, v.mean(-2, keepdim=True).expand_as(out), atol=1e-12,
                               rtol=0)
    zeroed = cv.zero_empty_rows(out, bias > torch.finfo(F64).min)
    assert zeroed.abs().max().item() == 0


# ----------------------------------------------------------------------------
# Soft cap, sinks, default scale
# ----------------------------------------------------------------------------


def test_transformers_gemma2_cap_after_scale_before_mask():
    gemma2 = pytest.importorskip("transformers.models.gemma2.modeling_gemma2")
    q, k, v = qkv(n=4, m=4)
    keep = cv.band_mask(4, 4)
    bias = torch.zeros(4, 4, dtype=F64).masked_fill(~keep, -math.inf)
    module = torch.nn.Module()
    module.num_key_value_groups, module.head_dim, module.training = 1, 8, False
    out, _ = gemma2.eager_attention_forward(module, q, k, v, bias, scaling=0.3, softcap=2.0)
    scores = cv.soft_capped_scores(q, k, cap=2.0, scale=0.3)
    ref = torch.softmax(scores.masked_fill(~keep, -math.inf), -1) @ v
    # Gemma 2's eager softmax runs in float32: agreement to float32's rounding
    torch.testing.assert_close(out, ref.transpose(1, 2), atol=1e-6, rtol=0)
    before = 2.0 * torch.tanh(torch.einsum("...nd,...md->...nm", q, k) / 2.0) * 0.3
    wrong = torch.softmax(before.masked_fill(~keep, -math.inf), -1) @ v
    assert (wrong.transpose(1, 2) - out).abs().max() > 0.05


def test_flex_score_mod_sees_scaled_scores():
    """A tanh cap in score_mod acts after the scale: Gemma 2's order."""
    fa = flex()
    q, k, v = qkv(b=1, h=2, n=4, m=4)
    out = fa.flex_attention(q, k, v, score_mod=lambda s, b, h, i, j: 2.0 * torch.tanh(s / 2.0))
    ref = torch.softmax(cv.soft_capped_scores(q, k, cap=2.0), -1) @ v
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)


def test_flash_softcap_from_source_is_after_the_scale():
    """FA2 flash_api.cpp lines 130-133 and FA3's mainloop line 543, FlashInfer
    variants.cuh lines 48-49 and 73: tanh(s * scale / cap) * cap, exp with cap * log2 e."""
    q, k, _ = qkv()
    s, scale, cap = torch.einsum("...nd,...md->...nm", q, k), 0.4, 3.0
    pre = scale / cap  # params.softcap / soft_cap_pre_tanh_scale
    post = cap * math.log2(math.e)  # params.scale_softmax_log2 / sm_scale_log2
    kernel = torch.tanh(s * pre) * post  # the exponent, in base 2
    torch.testing.assert_close(kernel / math.log2(math.e),
                               cv.soft_capped_scores(q, k, cap=cap, scale=scale),
                               atol=1e-12, rtol=0)


def test_transformers_gpt_oss_sinks_in_denominator_only():
    oss = pytest.importorskip("transformers.models.gpt_oss.modeling_gpt_oss")
    q, k, v = qkv(h=4, h_kv=2, n=5, m=5)
    sinks = torch.tensor([0.5, -1.0, 2.0, 0.0], dtype=F64)
    module = torch.nn.Module()
    module.num_key_value_groups, module.sinks, module.training = 2, sinks, False
    keep = cv.band_mask(5, 5)
    bias = torch.zeros(5, 5, dtype=F64).masked_fill(~keep, -math.inf)
    out, weights = oss.eager_attention_forward(module, q, k, v, bias, scaling=0.35)
    k2, v2 = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    ours = cv.attention_with_sinks(q, k2, v2, sinks, attn_mask=keep, scale=0.35)
    torch.testing.assert_close(out, ours.transpose(1, 2), atol=1e-12, rtol=0)
    # the weights lose exactly the sink's share: sum_j w_ij = 1 - sigma_i
    s = torch.einsum("...nd,...md->...nm", q, k2) * 0.35
    s = s.masked_fill(~keep, -math.inf)
    share = 1 / (1 + torch.exp(torch.logsumexp(s, -1) - sinks[:, None]))
    torch.testing.assert_close(weights.sum(-1), 1 - share, atol=1e-12, rtol=0)


def test_flashinfer_sink_reference_matches():
    """FlashInfer's sink reference (tests/test_helpers/sink_attention_reference.py
    lines 23-34): the sink logit joins the row, its column is dropped."""
    q, k, v = qkv(h=2, n=3, m=6)
    sinks = torch.tensor([1.0, -0.5], dtype=F64)
    s = torch.einsum("...nd,...md->...nm", q, k) * 8 ** -0.5
    row = torch.cat([s, sinks[:, None, None].expand(2, 2, 3, 1)], -1)
    ref = torch.softmax(row, -1)[..., :-1] @ v
    torch.testing.assert_close(cv.attention_with_sinks(q, k, v, sinks), ref, atol=1e-12,
                               rtol=0)


def test_sdpa_default_scale_uses_d_qk():
    q, k, v = qkv(d=16, d_v=4)
    ref, _ = dense(q, k, v, scale=16 ** -0.5)
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v), ref, atol=1e-12,
                               rtol=0)
    wrong, _ = dense(q, k, v, scale=4 ** -0.5)
    assert (wrong - ref).abs().max() > 0.05


def test_flex_default_scale_uses_d_qk():
    fa = flex()
    q, k, v = qkv(b=1, h=2, d=16, d_v=4)
    ref, _ = dense(q, k, v, scale=16 ** -0.5)
    torch.testing.assert_close(fa.flex_attention(q, k, v), ref, atol=1e-12, rtol=0)


def test_sdpa_and_flex_have_no_window_rope_softcap_or_sink_argument():
    """The n/a cells: no such parameter in the installed signatures (torch 2.13)."""
    from torch.nn.attention import varlen
    head = F.scaled_dot_product_attention.__doc__.split("->")[0]  # a builtin: no signature
    sdpa = set(re.findall(r"(\w+)=", head)) | {"query", "key", "value"}
    assert {"attn_mask", "is_causal", "scale", "enable_gqa"} <= sdpa
    fl = set(inspect.signature(flex().flex_attention).parameters)
    va = set(inspect.signature(varlen.varlen_attn).parameters)
    for params in (sdpa, fl, va):
        assert not params & {"softcap", "logits_soft_cap", "sinks", "rotary_cos",
                             "rotary_interleaved"}
    assert not sdpa & {"window_size", "return_lse", "return_aux"}
    assert not fl & {"window_size"} and "return_aux" in fl
    assert not va & {"attn_mask", "is_causal"} and {"window_size", "return_aux"} <= va


def test_varlen_source_lines_hold():
    """torch 2.13 varlen.py: causal is window (-1, 0); (W, 0) goes to flash unchanged."""
    if not torch.__version__.startswith("2.13."):  # requirements.txt pins 2.13.0
        pytest.skip(f"the page cites torch 2.13.0's lines; this is torch {torch.__version__}")
    from torch.nn.attention import varlen
    lines = pathlib.Path(varlen.__file__).read_text().splitlines()
    assert "is_causal = window_size == (-1, 0)" in lines[307 - 1]
    assert "window_size_left=window_size[0]" in lines[122 - 1]
    assert "or (W, 0) for causal attention with sliding window of size W" in lines[212 - 1]
    assert "Log-sum-exp" in lines[249 - 1]


def test_transformers_source_lines_hold():
    """The transformers lines the page cites (installed 5.24.0)."""
    tf = pytest.importorskip("transformers")
    if tf.__version__ != "5.24.0":  # requirements-extra.txt pins 5.24.0
        pytest.skip(f"the page cites transformers 5.24.0's lines; this is {tf.__version__}")
    base = pathlib.Path(tf.__file__).parent
    cited = {
        "modeling_flash_attention_utils.py": {692: "(sliding_window - 1, sliding_window - 1)"},
        "masking_utils.py": {97: "kv_idx > q_idx - sliding_window",
                             147: "abs(q_idx - kv_idx) <= sliding_window"},
        "models/llama/modeling_llama.py": {215: "self.scaling = self.head_dim**-0.5"},
    }
    for path, want in cited.items():
        lines = (base / path).read_text().splitlines()
        for number, text in want.items():
            assert text in lines[number - 1], (path, number)


# ----------------------------------------------------------------------------
# The converters themselves
# ----------------------------------------------------------------------------


def test_band_mask_equals_a_loop():
    for n, m, left, right, align in [(4, 9, 2, 0, "lower_right"), (6, 3, None, 1, "upper_left"),
                                     (5, 5, None, None, "lower_right"), (7, 7, 0, 0, "upper_left")]:
        off = m - n if align == "lower_right" else 0
        want = torch.tensor([[(left is None or j >= i + off - left)
                              and (right is None or j <= i + off + right) for j in range(m)]
                             for i in range(n)])
        assert torch.equal(cv.band_mask(n, m, left=left, right=right, align=align), want)


def test_rope_order_round_trips():
    order = cv.rope_half_split_order(8)
    assert order.tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    x = torch.randn(3, 8, dtype=F64)
    assert torch.equal(x[..., order][..., order.argsort()], x)


def test_finite_in_low_precision():
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        q, k, v = (t.to(dtype) * 30 for t in qkv())
        out = cv.attention_with_sinks(q, k, v, torch.zeros(4, dtype=dtype),
                                      attn_mask=cv.band_mask(5, 7))
        assert torch.isfinite(out).all()
        assert torch.isfinite(cv.soft_capped_scores(q, k, cap=50.0)).all()


def test_gradcheck():
    q, k, v = (t.requires_grad_() for t in qkv(b=1, h=2, n=3, m=4, d=4))
    sinks = torch.tensor([0.3, -0.2], dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda q, k, v, s: cv.attention_with_sinks(q, k, v, s, attn_mask=cv.band_mask(3, 4)),
        (q, k, v, sinks))
    assert torch.autograd.gradcheck(lambda q, k: cv.soft_capped_scores(q, k, cap=2.0), (q, k))


@pytest.mark.parametrize("call, match", [
    (lambda: cv.band_mask(0, 3), "n must be an int >= 1, got 0"),
    (lambda: cv.band_mask(3, 3, left=-1), "left must be an int >= 0, got -1"),
    (lambda: cv.band_mask(3, 3, align="top"), "align must be .* got 'top'"),
    (lambda: cv.flash_window(0), "window must be an int >= 1, got 0"),
    (lambda: cv.window_from_flash((3, 2)), r"window_size must be a causal \(left, 0\), got \(3, 2\)"),
    (lambda: cv.window_from_flash((-2, 0)), "window_size must be an int >= 0, got -2"),
    (lambda: cv.gqa_head_permutation(6, 4), "n_heads must be an int >= 1, a multiple of 4, got 6"),
    (lambda: cv.rope_half_split_order(5), "d must be an int >= 2, a multiple of 2, got 5"),
    (lambda: cv.soft_capped_scores(torch.ones(1, 1, 2, 4), torch.ones(1, 1, 2, 4), cap=0.0),
     "cap must be a finite number > 0, got 0.0"),
    (lambda: cv.soft_capped_scores(torch.ones(1, 1, 2, 4), torch.ones(1, 1, 2, 3), cap=1.0),
     r"k must be floating \(B, H, M, d\) like q .*got \(torch.float32, \(1, 1, 2, 3\)"),
    (lambda: cv.attention_with_sinks(*qkv(h=2), torch.zeros(3, dtype=F64)),
     r"sinks must be floating \(H\) like q .*'H': 2.*got \(torch.float64, \(3,\)"),
    (lambda: cv.attention_with_sinks(*qkv(h=2)[:2], qkv(h=2)[2][:, :, :6], torch.zeros(2, dtype=F64)),
     r"v must be floating \(B, H, M, e\) like q .*'M': 7"),
    (lambda: cv.attention_with_sinks(*qkv(h=2), torch.zeros(2, dtype=F64),
                                     attn_mask=torch.ones(5, 7)), "attn_mask must be torch.bool like q"),
    (lambda: cv.zero_empty_rows(torch.ones(2, 3), torch.ones(2, 3, dtype=torch.bool)),
     r"out must be floating \(B, H, N, e\) like out"),
])
def test_named_errors(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


# ----------------------------------------------------------------------------
# The page's table
# ----------------------------------------------------------------------------

TEST_REF = re.compile(r"tests/test_conventions\.py::(\w+)")
SOURCE_REF = re.compile(r"(lines? \d+|https://\S+)")


def _tables(text):
    """Rows of the tables under '## The table', each a list of cells."""
    part = text.split("## The table", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in part.splitlines() if line.startswith("|")]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows
            if not set(row) <= set("|-: ")]


def test_every_cell_names_a_test_or_a_source():
    text = PAGE.read_text(encoding="utf-8")
    notes = dict(re.findall(r"^\[\^([\w-]+)\]:\s*(.+)$", text, re.M))
    here = sys.modules[__name__]
    rows = _tables(text)
    body = [r for r in rows if r[0] not in ("", "convention")]
    # Two tables of four libraries each, the same ten conventions in both.
    heads = [r[1:] for r in rows if r[0] == "convention"]
    assert len(heads) == 2 and len({c for h in heads for c in h}) == 8, heads
    assert len(body) == 20 and all(len(r) == 5 for r in body), [r[0] for r in body]
    assert [r[0] for r in body[:10]] == [r[0] for r in body[10:]], [r[0] for r in body]
    problems = []
    for row in body:
        for cell in row[1:]:
            marks = re.findall(r"\[\^([\w-]+)\]", cell)
            if not marks:
                problems.append(f"{row[0]!r}: {cell!r} names no test or source")
            for mark in marks:
                note = notes.get(mark)
                if note is None:
                    problems.append(f"{cell!r}: footnote {mark} is not defined")
                    continue
                tests = TEST_REF.findall(note)
                missing = [t for t in tests if not callable(getattr(here, t, None))]
                if missing:
                    problems.append(f"footnote {mark} names missing tests {missing}")
                if not tests and not SOURCE_REF.search(note):
                    problems.append(f"footnote {mark} names neither a test nor a source line")
    assert not problems, "\n".join(problems)


def test_page_trap_numbers():
    """The numbers the page prints for its traps (seed 0, float64, torch 2.13 CPU)."""
    g = torch.Generator(device=torch.get_default_device()).manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g, dtype=F64)

    n, w = 64, 8
    q, k, v = r(1, 8, n, 64), r(1, 8, n, 64), r(1, 8, n, 64)
    meant = F.scaled_dot_product_attention(q, k, v, attn_mask=cv.band_mask(n, n, left=w - 1))
    passed = F.scaled_dot_product_attention(q, k, v, attn_mask=cv.band_mask(n, n, left=w))
    assert round((meant - passed).abs().max().item(), 2) == 1.94
    lse = torch.logsumexp(q @ k.transpose(-1, -2) / 8, -1)
    assert (round(lse.mean().item(), 2), round(cv.lse_to_base2(lse).mean().item(), 2)) == (
        4.66, 6.72)
    kk, vv = r(1, 2, n, 64), r(1, 2, n, 64)
    inter = F.scaled_dot_product_attention(q, kk.repeat_interleave(4, 1),
                                           vv.repeat_interleave(4, 1))
    rep = F.scaled_dot_product_attention(q, kk.repeat(1, 4, 1, 1), vv.repeat(1, 4, 1, 1))
    gaps = (inter - rep).abs().amax((0, 2, 3))
    assert round(gaps.max().item(), 2) == 1.25
    assert (gaps == 0).tolist() == [True, False, True, False, False, True, False, True]
    q3, k3, v3 = r(1, 2, 16, 192), r(1, 2, 16, 192), r(1, 2, 16, 128)
    gap = F.scaled_dot_product_attention(q3, k3, v3) - F.scaled_dot_product_attention(
        q3, k3, v3, scale=128 ** -0.5)
    assert round(gap.abs().max().item(), 2) == 0.29


def test_exercise_window_4096():
    """A Hugging Face sliding_window of 4,096 is FlashAttention's (4095, 0)."""
    assert cv.flash_window(4096) == (4095, 0)
    assert cv.window_from_flash((4095, 0)) == 4096
