"""Tests for snippets/attention/causal.py.

Oracle: F.scaled_dot_product_attention(is_causal=True) on the module's own
projections (N == M here, where PyTorch's upper-left triangle and the site's
lower-right one coincide). Properties: output at position t never changes when
tokens after t change; any length works; dropout only in training; the fast
path agrees with the explicit one; padded keys are ignored; finite outputs in
low precision; gradcheck in float64; every error message matched.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from snippets.attention.causal import CausalSelfAttention, causal_mask
from tolerance import assert_within_baseline


def _x(b=2, n=6, d=8, dtype=torch.float32, seed=0):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    return torch.randn(b, n, d, generator=g, dtype=dtype)


def _model(*args, **kwargs):
    torch.manual_seed(0)
    return CausalSelfAttention(*args, **kwargs).eval()


def _oracle(m, x):
    q = F.linear(x, m.q_proj.weight, m.q_proj.bias)
    k = F.linear(x, m.k_proj.weight, m.k_proj.bias)
    v = F.linear(x, m.v_proj.weight, m.v_proj.bias)
    return m.out_proj(F.scaled_dot_product_attention(q, k, v, is_causal=True))


@pytest.mark.parametrize("d_k,d_v", [(None, None), (4, 6)])
def test_matches_sdpa_is_causal(d_k, d_v):
    m = _model(8, d_k, d_v)
    x = _x()
    out, weights = m(x)
    assert_close(out, _oracle(m, x))
    assert weights.shape == (2, 6, 6)
    assert_close(weights.sum(-1), torch.ones(2, 6))
    assert (weights.triu(diagonal=1) == 0).all()


def test_fast_path_agrees_and_returns_no_weights():
    m = _model(8, 4, 6)
    x = _x()
    key_mask = torch.tensor([[True] * 6, [False] * 2 + [True] * 4])
    fast, none = m(x, key_mask=key_mask, need_weights=False)
    slow, _ = m(x, key_mask=key_mask)
    assert none is None
    assert_close(fast, slow)


@pytest.mark.parametrize("need_weights", [True, False])
def test_future_tokens_never_change_the_past(need_weights):
    m = _model(8)
    x = _x(n=7)
    out, _ = m(x, need_weights=need_weights)
    for t in range(7):
        changed = x.clone()
        changed[:, t + 1 :] = torch.randn_like(changed[:, t + 1 :]) * 5
        out2, _ = m(changed, need_weights=need_weights)
        assert_close(out2[:, : t + 1], out[:, : t + 1])
        if t + 1 < 7:
            assert not torch.allclose(out2[:, t + 1 :], out[:, t + 1 :])


@pytest.mark.parametrize("n", [1, 3, 40])
def test_any_length(n):
    m = _model(8)
    out, weights = m(_x(b=1, n=n))
    assert out.shape == (1, n, 8) and weights.shape == (1, n, n)


def test_dropout_only_in_training():
    torch.manual_seed(0)
    m = CausalSelfAttention(8, dropout=0.5)
    x = _x()
    m.eval()
    a, wa = m(x)
    b, wb = m(x)
    fast, _ = m(x, need_weights=False)
    assert_close(a, b)
    assert_close(a, fast)
    assert_close(a, _oracle(m, x))
    m.train()
    torch.manual_seed(1)
    c, wc = m(x)
    assert not torch.allclose(c, a)
    assert_close(wc, wa)  # the returned weights are taken before dropout
    torch.manual_seed(1)
    d, _ = m(x, need_weights=False)
    assert not torch.allclose(d, a)


def test_dropout_scales_kept_weights():
    # With project_out off and v = identity-like, dropped weights show up
    # directly: every entry of a dropped row is 0 or weight / (1 - p).
    torch.manual_seed(0)
    m = CausalSelfAttention(4, dropout=0.5, bias=False, project_out=False).train()
    with torch.no_grad():
        m.v_proj.weight.copy_(torch.eye(4))
    x = torch.eye(4).unsqueeze(0)  # token t is e_t, so out[t, j] = dropped weight (t, j)
    torch.manual_seed(3)
    out, weights = m(x)
    kept = out != 0
    assert_close(out[kept], (weights / 0.5)[kept])


def test_padded_keys_never_change_real_outputs():
    m = _model(8)
    x = _x(b=1, n=6)
    key_mask = torch.tensor([[True] * 4 + [False] * 2])
    out, weights = m(x, key_mask=key_mask)
    changed = x.clone()
    changed[:, 4:] = 100.0
    out2, _ = m(changed, key_mask=key_mask)
    assert_close(out2[:, :4], out[:, :4])
    assert (weights[..., 4:] == 0).all()
    assert_close(out[:, :4], m(x[:, :4])[0])


@pytest.mark.parametrize("need_weights", [True, False])
def test_left_padding_is_ignored(need_weights):
    # With padding on the left, real tokens come after pad tokens, so only the
    # key mask keeps them from attending to the padding.
    m = _model(8)
    x = _x(b=1, n=6)
    key_mask = torch.tensor([[False, False, True, True, True, True]])
    out, _ = m(x, key_mask=key_mask, need_weights=need_weights)
    assert_close(out[:, 2:], m(x[:, 2:])[0])
    changed = x.clone()
    changed[:, :2] = -50.0
    assert_close(m(changed, key_mask=key_mask, need_weights=need_weights)[0][:, 2:], out[:, 2:])


@pytest.mark.parametrize("need_weights", [True, False])
def test_future_and_padding_stay_out_at_huge_scores(need_weights):
    # W_k = -W_q (and b_k = -b_q) makes k_t = -q_t, so a token scores
    # -|q_t|^2 / sqrt(d) against itself: about -1e9 and below for inputs of 1e5,
    # in float32. Token 0 of sequence 0 and the first real token of sequence 1
    # (left padded) may see only themselves. The keys they must not see are then
    # set to -10 times their own input: those keys score +10 |q|^2 / sqrt(d) and
    # carry values of 1e6. With -inf masking the outputs do not move; a fill of
    # -1e4 (or -1e9) would give those rows to the hidden keys.
    m = _model(8)
    with torch.no_grad():
        m.k_proj.weight.copy_(-m.q_proj.weight)
        m.k_proj.bias.copy_(-m.q_proj.bias)
    x = _x(n=6) * 1e5
    key_mask = torch.tensor([[True] * 6, [False] * 5 + [True]])
    out, weights = m(x, key_mask=key_mask, need_weights=need_weights)
    hidden = x.clone()
    hidden[0, 3:] = -10 * x[0, 0]  # the future of tokens 0..2
    hidden[1, :5] = -10 * x[1, 5]  # the left padding
    moved, _ = m(hidden, key_mask=key_mask, need_weights=need_weights)
    assert torch.isfinite(out).all() and torch.isfinite(moved).all()
    assert_close(moved[0, :3], out[0, :3], rtol=1e-5, atol=1e-5 * out.abs().max().item())
    assert_close(moved[1, 5], out[1, 5], rtol=1e-5, atol=1e-5 * out.abs().max().item())
    if need_weights:
        assert torch.equal(weights[0, 0], torch.eye(6)[0])
        assert torch.equal(weights[1, 5], torch.eye(6)[5])


def test_causal_mask_is_lower_right_aligned():
    assert torch.equal(causal_mask(2, 4), torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]]).bool())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_finite_for_large_inputs(dtype):
    m = _model(16, 8, 8).to(dtype)
    x = (_x(d=16) * 200).to(dtype)
    for need_weights in (True, False):
        out, _ = m(x, need_weights=need_weights)
        assert out.dtype == dtype and torch.isfinite(out).all()


@pytest.mark.parametrize("need_weights", [True, False])
def test_float16_beyond_its_range_matches_float64(need_weights):
    # Inputs of 1000: q . k reaches ~1e6, far past float16's 65504, so the
    # scores must be formed in float32. The reference is causal attention in
    # float64 on the module's own float16 projections.
    m = _model(16, 8, 8).half()
    x = (_x(d=16) * 1000).half()
    out, _ = m(x, need_weights=need_weights)
    q, k, v = (proj(x).double() for proj in (m.q_proj, m.k_proj, m.v_proj))
    assert (q @ k.transpose(-2, -1)).abs().max() > 65504
    attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    want = F.linear(attended, m.out_proj.weight.double(), m.out_proj.bias.double())
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    assert_close(out.double(), want, rtol=1e-2, atol=1e-2 * want.abs().max().item())
    # PyTorch in float16 on the same float16 projections: SDPA, then out_proj.
    low = tuple(proj(x) for proj in (m.q_proj, m.k_proj, m.v_proj))
    baseline = m.out_proj(F.scaled_dot_product_attention(*low, is_causal=True))
    ratio = assert_within_baseline(out, baseline, want)
    print(f"causal float16 past 65504: ratio {ratio:.3g}")


def test_gradcheck_float64():
    m = _model(4, 3, 2).double()
    x = _x(b=1, n=3, d=4, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: m(t)[0], (x,))


def test_errors():
    m = _model(8)
    with pytest.raises(ValueError, match=r"dropout must be a float in \[0, 1\), got 1.0"):
        CausalSelfAttention(8, dropout=1.0)
    with pytest.raises(ValueError, match=r"d_v must be a positive int, got -2"):
        CausalSelfAttention(8, 4, -2)
    with pytest.raises(ValueError, match=r"x must be \(B, L, 8\) with B = .*; got \(\(6, 8\),"):
        m(torch.ones(6, 8))
    with pytest.raises(ValueError, match=r"x must be \(B, L, 8\) with B = .*; got \(\(1, 6, 4\),"):
        m(torch.ones(1, 6, 4))
    with pytest.raises(ValueError, match=r"x must be \(B, L, 8\) with B = .*; got \(\(1, 6, 8\), torch.int64"):
        m(torch.ones(1, 6, 8, dtype=torch.long))
    x = _x()
    with pytest.raises(ValueError, match=r"key_mask \(True = real\) must be None or \(\(\d, \d\), torch.bool, .* got \(\(2, 6\), torch.float32"):
        m(x, key_mask=torch.ones(2, 6))
    with pytest.raises(ValueError, match=r"key_mask \(True = real\) must be None or \(\(\d, \d\), torch.bool, .* got \(\(2, 6\), torch.int64"):
        m(x, key_mask=torch.ones(2, 6, dtype=torch.long))
    with pytest.raises(ValueError, match=r"key_mask \(True = real\) must be None or \(\(\d, \d\), torch.bool, .* got \(\(2, 5\), torch.bool"):
        m(x, key_mask=torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"key_mask \(True = real\) must be None or \(\(\d, \d\), torch.bool, .* got \(\(6,\), torch.bool"):
        m(x, key_mask=torch.ones(6, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"key_mask \(True = real\) must be None or \(\(\d, \d\), torch.bool, .* got \[True\]"):
        m(x, key_mask=[True])


def test_exercise_first_token_sees_only_itself():
    m = _model(8)
    x = _x()
    out, weights = m(x)
    assert_close(weights[:, 0, 0], torch.ones(2))
    assert_close(out[:, 0], m.out_proj(m.v_proj(x[:, 0])))


def test_exercise_last_row_equals_full_self_attention():
    # The last token may see everything, so its row is unmasked self-attention.
    from snippets.attention.self_attention import SelfAttention

    m = _model(8, 4, 6)
    full = SelfAttention(8, 4, 6)
    full.load_state_dict(m.state_dict())  # same parameter names, same shapes
    x = _x()
    out, weights = m(x)
    out_full, weights_full = full(x)
    assert_close(out[:, -1], out_full[:, -1])
    assert_close(weights[:, -1], weights_full[:, -1])
    assert not torch.allclose(out[:, 0], out_full[:, 0])


def test_errors_for_module_dtype_and_devices():
    m = _model(8)
    x = _x()
    with pytest.raises(ValueError, match=r"x must be \(B, L, 8\) with B = .*; got .*torch.float64"):
        m(x.double())
    with pytest.raises(ValueError, match=r"x must be \(B, L, 8\) with B = .*; got .*meta"):
        m(x.to("meta"))
    with pytest.raises(ValueError, match=r"key_mask \(True = real\) must be None or \(\(\d, \d\), torch.bool, .* got .*meta"):
        m(x, key_mask=torch.ones(2, 6, dtype=torch.bool, device="meta"))
    with pytest.raises(ValueError, match=r"dropout must be a float in \[0, 1\), got '0.1'"):
        CausalSelfAttention(8, dropout="0.1")
