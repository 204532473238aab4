"""Sparse attention: each branch is dense attention when it keeps every key; the calculator counts what the masks keep."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from snippets.linear.sparse_attention import (
    causal_keys,
    compressed_attention,
    dense_decode_cost,
    dsa_decode_cost,
    lightning_indexer,
    attend_masked,
    nsa_attention,
    nsa_decode_cost,
    selection_mask,
    window_keys,
    topk_mask,
    topk_sparse_attention,
)

F64 = dict(atol=1e-12, rtol=1e-12)


def _qkv(b=2, h=3, n=37, m=None, d=8, dtype=torch.float64, seed=0):
    gen = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    m = n if m is None else m
    q = torch.randn(b, h, n, d, generator=gen, dtype=dtype)
    k = torch.randn(b, h, m, d, generator=gen, dtype=dtype)
    v = torch.randn(b, h, m, d, generator=gen, dtype=dtype)
    return q, k, v


def dense(q, k, v):
    n, m = q.shape[2], k.shape[2]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_keys(n, m, q.device))


@pytest.mark.parametrize("n, m", [(37, 37), (5, 37)])
def test_topk_keeping_every_key_is_dense_attention(n, m):
    q, k, v = _qkv(n=n, m=m)
    scores = torch.randn(2, n, m, dtype=torch.float64)
    assert_close(topk_sparse_attention(q, k, v, scores, m), dense(q, k, v), **F64)
    assert_close(topk_sparse_attention(q, k, v, scores, 10 * m), dense(q, k, v), **F64)


def test_topk_keeps_the_highest_scores_among_visible_keys():
    scores = torch.randn(2, 20, 20, dtype=torch.float64)
    mask = topk_mask(scores, 5)
    allowed = causal_keys(20, 20)
    assert not (mask & ~allowed).any(), "a future key was selected"
    assert (mask.sum(-1) == torch.clamp(torch.arange(1, 21), max=5)).all()
    for i in range(5, 20):
        visible = scores[:, i, : i + 1]
        kept_min = scores[:, i].masked_fill(~mask[:, i], torch.inf).min(-1).values
        dropped_max = visible.masked_fill(mask[:, i, : i + 1], -torch.inf).max(-1).values
        assert (kept_min >= dropped_max).all()


def test_lightning_indexer_is_the_weighted_relu_sum():
    gen = torch.Generator(device=torch.get_default_device()).manual_seed(1)
    q_idx = torch.randn(2, 6, 4, 3, generator=gen, dtype=torch.float64)
    k_idx = torch.randn(2, 9, 3, generator=gen, dtype=torch.float64)
    w = torch.randn(2, 6, 4, generator=gen, dtype=torch.float64)
    got = lightning_indexer(q_idx, k_idx, w)
    for t in range(6):
        for s in range(9):
            want = sum(w[:, t, j] * torch.clamp((q_idx[:, t, j] * k_idx[:, s]).sum(-1), min=0) for j in range(4))
            assert_close(got[:, t, s], want, **F64)


def test_compressed_branch_with_blocks_of_one_is_dense_attention():
    q, k, v = _qkv()
    assert_close(compressed_attention(q, k, v, 1)[0], dense(q, k, v), **F64)


def test_compressed_branch_sees_only_complete_blocks_and_empty_rows_are_zero():
    q, k, v = _qkv(n=12)
    out, weights = compressed_attention(q, k, v, 4)
    assert (out[:, :, :3] == 0).all()  # queries 0-2: no block is complete yet
    assert (weights[:, :, 3:7, 1:] == 0).all() and (weights[:, :, 3:7, 0] == 1).all()
    assert_close(weights.sum(-1)[:, :, 3:], torch.ones(2, 3, 9, dtype=torch.float64), **F64)


@pytest.mark.parametrize("n, m", [(37, 37), (6, 37)])
def test_selection_of_every_block_is_dense_attention(n, m):
    q, k, v = _qkv(n=n, m=m)
    _, weights = compressed_attention(q, k, v, 4)
    mask = selection_mask(weights, n, m, 4, n_select=100)
    assert_close(attend_masked(q, k, v, mask.unsqueeze(1)), dense(q, k, v), **F64)


def test_selection_always_keeps_the_querys_own_block():
    q, k, v = _qkv(n=40)
    _, weights = compressed_attention(q, k, v, 8)
    mask = selection_mask(weights, 40, 40, 8, n_select=1)  # room for one block: the own block
    own = torch.arange(40).unsqueeze(-1) // 8 == torch.arange(40) // 8
    assert torch.equal(mask, (own & causal_keys(40, 40)).expand_as(mask))
    mask = selection_mask(weights, 40, 40, 8, n_select=2)
    assert (mask | ~(own & causal_keys(40, 40))).all()
    assert (mask.sum(-1)[:, 8:] > (torch.arange(8, 40) % 8 + 1)).all()  # and one more block


def test_window_as_long_as_the_sequence_is_dense_attention():
    q, k, v = _qkv()
    assert_close(attend_masked(q, k, v, window_keys(37, 37, 37)), dense(q, k, v), **F64)
    assert (window_keys(37, 37, 5).sum(-1) == torch.clamp(torch.arange(1, 38), max=5)).all()


@pytest.mark.parametrize("branch", [1, 2], ids=["selected", "window"])
def test_nsa_gated_to_one_full_branch_is_dense_attention(branch):
    q, k, v = _qkv()
    gates = torch.zeros(2, 3, 37, 3, dtype=torch.float64)
    gates[..., branch] = 1.0
    assert_close(nsa_attention(q, k, v, gates, block=4, n_select=100, window=37), dense(q, k, v), **F64)


def test_nsa_mixes_its_branches_with_the_gates():
    q, k, v = _qkv()
    gates = torch.rand(2, 3, 37, 3, dtype=torch.float64)
    out_cmp, w = compressed_attention(q, k, v, 4)
    out_slc = attend_masked(q, k, v, selection_mask(w, 37, 37, 4, 2).unsqueeze(1))
    out_win = attend_masked(q, k, v, window_keys(37, 37, 6))
    want = gates[..., :1] * out_cmp + gates[..., 1:2] * out_slc + gates[..., 2:] * out_win
    assert_close(nsa_attention(q, k, v, gates, block=4, n_select=2, window=6), want, **F64)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_finite(dtype):
    q, k, v = (t.to(dtype) * 30 for t in _qkv(n=33))
    scores = torch.randn(2, 33, 33).to(dtype)
    assert torch.isfinite(topk_sparse_attention(q, k, v, scores, 4)).all()
    out = nsa_attention(q, k, v, torch.rand(2, 3, 33, 3).to(dtype), block=4, n_select=2, window=5)
    assert out.dtype == dtype and torch.isfinite(out).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("form", ["masked", "topk", "compressed", "nsa"])
def test_half_precision_is_float32_rounded(dtype, form):
    """Each branch in half precision equals its float32 computation on the same rounded
    inputs to a few units of the dtype's rounding, over 300 keys at moderate scores."""
    q, k, v = (t.to(dtype) for t in _qkv(b=1, h=2, n=300, d=16, dtype=torch.float32))
    index = torch.randn(1, 300, 300).to(dtype)
    gates = torch.rand(1, 2, 300, 3).to(dtype)
    call = {
        "masked": lambda q, k, v: attend_masked(q, k, v, causal_keys(300, 300)),
        "topk": lambda q, k, v: topk_sparse_attention(q, k, v, index.to(q.dtype), 64),
        "compressed": lambda q, k, v: compressed_attention(q, k, v, 16)[0],
        "nsa": lambda q, k, v: nsa_attention(q, k, v, gates.to(q.dtype), block=16, n_select=4,
                                             window=32),
    }[form]
    ref = call(q.float(), k.float(), v.float())
    out = call(q, k, v)
    assert out.dtype == dtype
    eps = torch.finfo(dtype).eps
    assert_close(out.float(), ref, rtol=2 * eps, atol=2 * eps * ref.abs().mean().item())


def _shifted(q, k, big):
    """One more coordinate, -big on q and 1 on k: every score drops by big / sqrt(d + 1),
    which softmax ignores; only a masked key filled with a finite number would notice."""
    return (torch.cat([q, torch.full_like(q[..., :1], -big)], -1),
            torch.cat([k, torch.ones_like(k[..., :1])], -1))


@pytest.mark.parametrize("big", [1e3, 1e10])
def test_masked_keys_stay_masked_at_scores_far_below_zero(big):
    """Scores near -3e9 lie below a -1e9 fill: a finite fill would let masked keys win.
    (Scores that large keep about 1e-6 of their O(1) part in float64: tolerance 1e-4.)"""
    tol = F64 if big < 1e6 else dict(atol=1e-4, rtol=1e-4)
    q, k, v = _qkv(n=24)
    q, k = _shifted(q, k, big)
    mask = torch.rand(2, 1, 24, 24, generator=torch.Generator(device=torch.get_default_device()).manual_seed(1)) > 0.4
    mask[..., 0] = True
    assert_close(attend_masked(q, k, v, mask), F.scaled_dot_product_attention(q, k, v, attn_mask=mask), **tol)
    index = torch.randn(2, 24, 24, dtype=torch.float64)
    keep = topk_mask(index, 5).unsqueeze(1)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    assert_close(topk_sparse_attention(q, k, v, index, 5), want, **tol)
    out, weights = compressed_attention(q, k, v, 4)
    k_cmp, v_cmp = (t.unflatten(2, (6, 4)).mean(3) for t in (k, v))
    seen = (torch.arange(6) + 1) * 4 - 1 <= torch.arange(24).unsqueeze(-1)
    want = F.scaled_dot_product_attention(q, k_cmp, v_cmp, attn_mask=seen).masked_fill(
        ~seen.any(-1, keepdim=True), 0.0)
    assert_close(out, want, **tol)
    for gate, mask in ((1, selection_mask(weights, 24, 24, 4, 2).unsqueeze(1)),
                       (2, window_keys(24, 24, 5))):
        gates = torch.nn.functional.one_hot(torch.full((2, 3, 24), gate), 3).double()
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        assert_close(nsa_attention(q, k, v, gates, block=4, n_select=2, window=5), want, **tol)


CONF = dict(n_heads=4, d_qk=16, d_v=8, kv_bytes_per_token=48)


@pytest.mark.parametrize("context", [1, 100, 4096, 200_000])
def test_dsa_cost_counts_the_keys_its_mask_keeps(context):
    cost = dsa_decode_cost(context, topk=2048, **CONF)
    assert cost.keys == min(2048, context)
    if context <= 2048:
        assert cost.attention_flops == dense_decode_cost(context, **CONF).attention_flops
    assert cost.index_flops == context * 64 * (2 * 128 + 2)


def test_cost_key_counts_match_the_masks():
    n, block, n_select, window = 64, 8, 3, 10
    q, k, v = _qkv(n=n)
    last = n - 1
    scores = torch.randn(2, n, n, dtype=torch.float64)
    assert topk_mask(scores, 20)[:, last].sum(-1).eq(dsa_decode_cost(n, topk=20, **CONF).keys).all()
    _, w = compressed_attention(q, k, v, block)
    # blocks of the compressed branch that do not overlap: length = stride = block
    cost = nsa_decode_cost(n, block=block, n_select=n_select, window=window, cmp_block=block,
                           cmp_stride=block, **CONF)
    seen = (w[:, :, last] > 0).sum(-1)  # full blocks the last query weighs
    selected = selection_mask(w, n, n, block, n_select)[:, last].sum(-1)
    windowed = window_keys(n, n, window)[last].sum()
    assert (seen + selected.unsqueeze(1) + windowed == cost.keys).all()
    assert cost.attention_flops == 2 * 4 * cost.keys * (16 + 8)


@pytest.mark.parametrize("context", [1, 31, 32, 47, 48, 4096, 131_072])
def test_nsa_cost_counts_overlapping_compression_blocks(context):
    """The paper's compression: blocks of 32 keys every 16 tokens, floor((T - 32) / 16) + 1
    summaries (about T / 16, four times the T / 64 of blocks that do not overlap)."""
    cost = nsa_decode_cost(context, **CONF)
    starts = [s for s in range(0, context, 16) if s + 32 <= context]  # complete blocks
    assert cost.keys == len(starts) + min(16 * 64, context) + min(512, context)
    if context == 131_072:
        assert len(starts) == 8191 and cost.keys - 1024 - 512 == 8191


def test_bad_input_is_named():
    q, k, v = _qkv(n=8)
    with pytest.raises(ValueError, match="topk must be an int >= 1, got 0"):
        topk_mask(torch.zeros(1, 8, 8), 0)
    with pytest.raises(ValueError, match=r"index_scores must be a floating \(2, 8, 8\) tensor"):
        topk_sparse_attention(q, k, v, torch.zeros(2, 8, 7), 2)
    with pytest.raises(ValueError, match=r"k must be a floating \(2, 3, M, 8\) tensor on q's"):
        nsa_attention(q, k[..., :4], v, torch.zeros(2, 3, 8, 3))
    with pytest.raises(ValueError, match=r"gates must be a floating \(2, 3, 8, 3\) tensor"):
        nsa_attention(q, k, v, torch.zeros(2, 3, 8, 2))
    with pytest.raises(ValueError, match="block must be an int >= 1"):
        compressed_attention(q, k, v, 0)
    with pytest.raises(ValueError, match="window must be an int >= 1"):
        window_keys(8, 8, -1)
    with pytest.raises(ValueError, match="n_select must be an int >= 1"):
        selection_mask(torch.zeros(2, 3, 8, 2), 8, 8, 4, 0)
    with pytest.raises(TypeError, match=r"q_idx must be a floating \(B, N, H_I, d_I\) tensor"):
        lightning_indexer(torch.zeros(1, 2, 3), torch.zeros(1, 2, 3), torch.zeros(1, 2))
    with pytest.raises(TypeError, match="v must be a floating .* got v"):
        topk_sparse_attention(q, k, "v", torch.zeros(2, 8, 8), 2)
    with pytest.raises(TypeError, match=r"q must be a floating \(B, H, N, d\) tensor"):
        topk_sparse_attention(q[0], k, v, torch.zeros(2, 8, 8), 2)
    with pytest.raises(TypeError, match="q must be a floating .* got torch.int64"):
        compressed_attention(q.long(), k, v, 2)
    with pytest.raises(ValueError, match="context must be an int >= 1"):
        dense_decode_cost(0, **CONF)


def test_dtypes_devices_masks_and_counts_are_named():
    q, k, v = (t.cpu() for t in _qkv(n=8))
    with pytest.raises(ValueError, match=r"k must be .* on q's device and dtype, got torch.float32"):
        compressed_attention(q, k.float(), v, 2)
    with pytest.raises(ValueError, match=r"v must be .* on q's device and dtype, got .* on meta"):
        compressed_attention(q, k, v.to("meta"), 2)
    with pytest.raises(ValueError, match=r"mask must be a torch.bool tensor \(True = may attend\) .* got torch.float64"):
        attend_masked(q, k, v, torch.ones(8, 8, dtype=q.dtype))
    with pytest.raises(ValueError, match=r"broadcasts to \(2, 3, 8, 8\), got torch.bool \(8,\) on cpu"):
        attend_masked(q, k, v, torch.ones(8, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"mask must be .* on cpu .* got torch.bool \(8, 8\) on meta"):
        attend_masked(q, k, v, torch.ones(8, 8, dtype=torch.bool, device="meta"))
    with pytest.raises(ValueError, match=r"n must be an int >= 0, got -1"):
        causal_keys(-1, 4)
    with pytest.raises(ValueError, match=r"m must be an int >= 0, got 2.5"):
        window_keys(2, 2.5, 2)
    with pytest.raises(TypeError, match=r"k_idx must be a floating .* got None"):
        lightning_indexer(torch.zeros(1, 2, 3, 4), None, torch.zeros(1, 2, 3))
    with pytest.raises(ValueError, match=r"k_idx must be a floating \(1, M, 4\) tensor on q_idx's device "
                                         r"and dtype, got torch.float32 \(2, 5, 4\) on cpu"):
        lightning_indexer(torch.zeros(1, 2, 3, 4), torch.zeros(2, 5, 4), torch.zeros(1, 2, 3))
    with pytest.raises(ValueError, match=r"w must be .* on q_idx's device and dtype, got torch.float64"):
        lightning_indexer(torch.zeros(1, 2, 3, 4), torch.zeros(1, 5, 4), torch.zeros(1, 2, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"k_idx must be .* on q_idx's device and dtype, got .* on meta"):
        lightning_indexer(torch.zeros(1, 2, 3, 4), torch.zeros(1, 5, 4, device="meta"), torch.zeros(1, 2, 3))
    with pytest.raises(TypeError, match=r"index_scores must be a floating .* got torch.int64"):
        topk_mask(torch.zeros(1, 8, 8, dtype=torch.long), 2)
    with pytest.raises(TypeError, match=r"index_scores must be a floating \(B, N, M\) tensor .* got torch.float32 \(8,\)"):
        topk_mask(torch.zeros(8), 2)
    with pytest.raises(ValueError, match=r"index_scores must be .* on q's device, got .* on meta"):
        topk_sparse_attention(q, k, v, torch.zeros(2, 8, 8, device="meta"), 2)
    with pytest.raises(ValueError, match=r"gates must be .* on q's device, got .* on meta"):
        nsa_attention(q, k, v, torch.zeros(2, 3, 8, 3, device="meta"))
    with pytest.raises(ValueError, match=r"n must be an int >= 0, got 2.5"):
        selection_mask(torch.zeros(2, 3, 1, 2), 2.5, 8, 4, 1)
    with pytest.raises(ValueError, match=r"block_weights must be a floating \(B, H, 8, 2\) tensor .*, "
                                         r"got torch.float32 \(2, 3, 8, 3\)"):
        selection_mask(torch.zeros(2, 3, 8, 3), 8, 8, 4, 1)
    with pytest.raises(TypeError, match=r"block_weights must be a floating .* got torch.int64"):
        selection_mask(torch.zeros(2, 3, 8, 2, dtype=torch.long), 8, 8, 4, 1)
    with pytest.raises(ValueError, match=r"index_dim must be an int >= 1, got 0"):
        dsa_decode_cost(4096, **CONF, index_dim=0)
    with pytest.raises(ValueError, match=r"n_heads must be an int >= 1, got '8'"):
        nsa_decode_cost(4096, **{**CONF, "n_heads": "8"})
