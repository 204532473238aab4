"""Tests for snippets/attention/cross_attention.py.

Oracle: F.scaled_dot_product_attention on the module's own projections
(queries from x, keys and values from the context) and the equation written
out. Properties: different lengths and widths; padded context tokens never
change real outputs; dropout only in training; the fast path agrees; finite
outputs in low precision; gradcheck in float64; every error message matched.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from snippets.attention.cross_attention import CrossAttention
from tolerance import assert_within_baseline


def _t(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype)


def _model(*args, **kwargs):
    torch.manual_seed(0)
    return CrossAttention(*args, **kwargs).eval()


def _oracle(m, x, context, attn_mask=None):
    q = F.linear(x, m.q_proj.weight, m.q_proj.bias)
    k = F.linear(context, m.k_proj.weight, m.k_proj.bias)
    v = F.linear(context, m.v_proj.weight, m.v_proj.bias)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
    return m.out_proj(out), torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)


@pytest.mark.parametrize("d_k,d_v", [(None, None), (4, 6)])
def test_matches_sdpa_different_lengths_and_widths(d_k, d_v):
    m = _model(8, 5, d_k, d_v)  # queries 8 wide, context 5 wide
    x, context = _t(2, 3, 8), _t(2, 7, 5, seed=1)  # N = 3, M = 7
    out, weights = m(x, context)
    want, want_w = _oracle(m, x, context)
    assert out.shape == (2, 3, 8) and weights.shape == (2, 3, 7)
    assert_close(out, want)
    assert_close(weights, want_w)
    assert_close(weights.sum(-1), torch.ones(2, 3))
    fast, none = m(x, context, need_weights=False)
    assert none is None
    assert_close(fast, out)


def test_queries_do_not_see_each_other():
    # Changing one query token changes only its own output row.
    m = _model(8, 5)
    x, context = _t(1, 4, 8), _t(1, 6, 5, seed=1)
    out, _ = m(x, context)
    changed = x.clone()
    changed[:, 2] += 3.0
    out2, _ = m(changed, context)
    keep = [0, 1, 3]
    assert_close(out2[:, keep], out[:, keep])
    assert not torch.allclose(out2[:, 2], out[:, 2])


@pytest.mark.parametrize("need_weights", [True, False])
def test_padded_keys_never_change_real_outputs(need_weights):
    m = _model(8, 5)
    x, context = _t(2, 3, 8), _t(2, 6, 5, seed=1)
    key_mask = torch.tensor([[True] * 6, [True] * 2 + [False] * 4])
    out, weights = m(x, context, key_mask=key_mask, need_weights=need_weights)
    noisy = context.clone()
    noisy[1, 2:] = _t(4, 5, seed=2) * 50
    out2, _ = m(x, noisy, key_mask=key_mask, need_weights=need_weights)
    assert_close(out2, out)
    # The same as if the padding had never been there.
    assert_close(out[1:], m(x[1:], context[1:, :2])[0])
    if need_weights:
        assert (weights[1, :, 2:] == 0).all()


@pytest.mark.parametrize("need_weights", [True, False])
def test_padded_keys_stay_out_at_huge_scores(need_weights):
    # W_k = -W_q and the first context token of each sequence is the first query
    # token, so query 0 scores -|q_0|^2 / sqrt(d) (about -1e9 and below for inputs
    # of 1e5, float32) against key 0, the only real key of sequence 1. The padded
    # keys are then set to -10 times that token: they score +10 |q_0|^2 / sqrt(d)
    # and carry huge values. With -inf masking nothing moves; a fill of -1e4 (or
    # -1e9) would give query 0 to the padding.
    m = _model(8)
    with torch.no_grad():
        m.k_proj.weight.copy_(-m.q_proj.weight)
        m.k_proj.bias.copy_(-m.q_proj.bias)
    x, context = _t(2, 3, 8) * 1e5, _t(2, 5, 8, seed=1) * 1e5
    context[:, 0] = x[:, 0]
    key_mask = torch.tensor([[True, True, True, False, False], [True, False, False, False, False]])
    out, weights = m(x, context, key_mask=key_mask, need_weights=need_weights)
    hidden = context.clone()
    hidden[~key_mask] = -10 * x[:, :1].expand(2, 5, 8)[~key_mask]
    moved, _ = m(x, hidden, key_mask=key_mask, need_weights=need_weights)
    assert torch.isfinite(out).all()
    assert_close(moved, out, rtol=1e-5, atol=1e-5 * out.abs().max().item())
    if need_weights:
        assert torch.equal(weights[1, 0], torch.eye(5)[0])


def test_all_padding_gives_zero_attention():
    m = _model(8, 5, project_out=False)
    x, context = _t(2, 3, 8), _t(2, 4, 5, seed=1)
    key_mask = torch.tensor([[True] * 4, [False] * 4])
    for need_weights in (True, False):
        out, _ = m(x, context, key_mask=key_mask, need_weights=need_weights)
        assert torch.isfinite(out).all()
        assert_close(out[1], torch.zeros(3, 8))


def test_dropout_only_in_training():
    torch.manual_seed(0)
    m = CrossAttention(8, 5, dropout=0.5)
    x, context = _t(2, 3, 8), _t(2, 4, 5, seed=1)
    m.eval()
    a, _ = m(x, context)
    assert_close(a, m(x, context)[0])
    assert_close(a, m(x, context, need_weights=False)[0])
    m.train()
    torch.manual_seed(1)
    assert not torch.allclose(m(x, context)[0], a)
    torch.manual_seed(1)
    assert not torch.allclose(m(x, context, need_weights=False)[0], a)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_finite_for_large_inputs(dtype):
    m = _model(16, 12, 8, 8).to(dtype)
    x, context = (_t(2, 3, 16) * 200).to(dtype), (_t(2, 5, 12, seed=1) * 200).to(dtype)
    for need_weights in (True, False):
        out, _ = m(x, context, need_weights=need_weights)
        assert out.dtype == dtype and torch.isfinite(out).all()


@pytest.mark.parametrize("need_weights", [True, False])
def test_float16_beyond_its_range_matches_float64(need_weights):
    # Inputs of 1000: q . k reaches ~1e6, far past float16's 65504, so the
    # scores must be formed in float32. The reference is attention in float64
    # on the module's own float16 projections, with a padded context token.
    m = _model(16, 12, 8, 8).half()
    x, context = (_t(2, 3, 16) * 1000).half(), (_t(2, 5, 12, seed=1) * 1000).half()
    key_mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    out, _ = m(x, context, key_mask=key_mask, need_weights=need_weights)
    q = m.q_proj(x).double()
    k, v = m.k_proj(context).double(), m.v_proj(context).double()
    assert (q @ k.transpose(-2, -1)).abs().max() > 65504
    attended = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask[:, None, :])
    want = F.linear(attended, m.out_proj.weight.double(), m.out_proj.bias.double())
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    assert_close(out.double(), want, rtol=1e-2, atol=1e-2 * want.abs().max().item())
    # PyTorch in float16 on the same float16 projections: SDPA, then out_proj.
    low = (m.q_proj(x), m.k_proj(context), m.v_proj(context))
    baseline = m.out_proj(F.scaled_dot_product_attention(*low, attn_mask=key_mask[:, None, :]))
    ratio = assert_within_baseline(out, baseline, want)
    print(f"cross-attention float16 past 65504: ratio {ratio:.3g}")


def test_gradcheck_float64():
    m = _model(4, 3, 2, 2).double()
    x = _t(1, 2, 4, dtype=torch.float64).requires_grad_()
    context = _t(1, 3, 3, dtype=torch.float64, seed=1).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, c: m(a, c)[0], (x, context))


def test_errors():
    m = _model(8, 5)
    x, context = _t(2, 3, 8), _t(2, 4, 5, seed=1)
    with pytest.raises(ValueError, match=r"d_context must be a positive int, got 0"):
        CrossAttention(8, 0)
    with pytest.raises(ValueError, match=r"dropout must be a float in \[0, 1\), got -0.1"):
        CrossAttention(8, dropout=-0.1)
    with pytest.raises(ValueError, match=r"context must be \(B, L, 5\) with B = 2, .* got \(\(3, 4, 5\)"):
        m(x, _t(3, 4, 5))
    with pytest.raises(ValueError, match=r"context must be \(B, L, 5\) with B = .*; got \(\(2, 4, 8\),"):
        m(x, _t(2, 4, 8))
    with pytest.raises(ValueError, match=r"x must be \(B, L, 8\) with B = .*; got \(\(2, 3, 5\),"):
        m(_t(2, 3, 5), context)
    with pytest.raises(ValueError, match=r"context must be \(B, L, 5\) with B = .*; got \(\(4, 5\),"):
        m(x, _t(4, 5))
    with pytest.raises(ValueError, match=r"context must be \(B, L, 5\) with B = .*; got <class 'list'>"):
        m(x, [[0.0]])
    with pytest.raises(ValueError, match=r"context must be \(B, L, 5\) with B = .*; got .*torch.float64"):
        m(x, context.double())
    with pytest.raises(ValueError, match=r"key_mask \(True = real\) must be None or \(\(\d, \d\), torch.bool, .* got \(\(2, 4\), torch.float32"):
        m(x, context, key_mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match=r"key_mask \(True = real\) must be None or \(\(\d, \d\), torch.bool, .* got \(\(2, 4\), torch.int32"):
        m(x, context, key_mask=torch.ones(2, 4, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"key_mask \(True = real\) must be None or \(\(\d, \d\), torch.bool, .* got \(\(2, 3\), torch.bool"):
        m(x, context, key_mask=torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"key_mask \(True = real\) must be None or \(\(\d, \d\), torch.bool, .* got \(\(4,\), torch.bool"):
        m(x, context, key_mask=torch.ones(4, dtype=torch.bool))


def test_exercise_context_equal_to_x_is_self_attention():
    from snippets.attention.self_attention import SelfAttention

    m = _model(8, None, 4, 6)
    own = SelfAttention(8, 4, 6)
    own.load_state_dict(m.state_dict())
    x = _t(2, 5, 8)
    assert_close(m(x, x)[0], own(x)[0])
    assert_close(m(x, x)[1], own(x)[1])


def test_matches_single_head_multihead_attention_with_kdim():
    # The page's nn.MultiheadAttention tab: one head, kdim = vdim = d_context,
    # and key_padding_mask = ~key_mask.
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 1, kdim=5, vdim=5, batch_first=True).eval()
    m = _model(8, 5)
    with torch.no_grad():
        bias_q, bias_k, bias_v = mha.in_proj_bias.chunk(3)
        for proj, weight, bias in (
            (m.q_proj, mha.q_proj_weight, bias_q),
            (m.k_proj, mha.k_proj_weight, bias_k),
            (m.v_proj, mha.v_proj_weight, bias_v),
        ):
            proj.weight.copy_(weight)
            proj.bias.copy_(bias)
        m.out_proj.load_state_dict(mha.out_proj.state_dict())
        x, context = _t(2, 3, 8), _t(2, 6, 5, seed=1)
        key_mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
        want, want_w = mha(x, context, context, key_padding_mask=~key_mask)
        out, weights = m(x, context, key_mask=key_mask)
    assert_close(out, want)
    assert_close(weights, want_w)


def test_errors_for_module_dtype_and_devices():
    m = _model(8, 5)
    x, context = _t(2, 3, 8), _t(2, 4, 5, seed=1)
    with pytest.raises(ValueError, match=r"x must be \(B, L, 8\) with B = .*; got .*torch.float64"):
        m(x.double(), context.double())
    with pytest.raises(ValueError, match=r"x must be \(B, L, 8\) with B = .*; got .*meta"):
        m(x.to("meta"), context.to("meta"))
    with pytest.raises(ValueError, match=r"context must be \(B, L, 5\) with B = .*; got .*meta"):
        m(x, context.to("meta"))
    with pytest.raises(ValueError, match=r"key_mask \(True = real\) must be None or \(\(\d, \d\), torch.bool, .* got .*meta"):
        m(x, context, key_mask=torch.ones(2, 4, dtype=torch.bool, device="meta"))
    with pytest.raises(ValueError, match=r"key_mask \(True = real\) must be None or \(\(\d, \d\), torch.bool, .* got \[True\]"):
        m(x, context, key_mask=[True])
    with pytest.raises(ValueError, match=r"dropout must be a float in \[0, 1\), got None"):
        CrossAttention(8, dropout=None)
