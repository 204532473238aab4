"""Tests for snippets/attention/self_attention.py.

Oracle: F.scaled_dot_product_attention applied to the module's own projections
(computed here with F.linear), and the weights written out as
softmax(q k^T / sqrt(d_k)). Properties: rows sum to 1, masks honoured, finite
outputs in low precision, gradcheck in float64; every error message matched.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from snippets.attention.self_attention import SelfAttention
from tolerance import assert_within_baseline


def _x(b=2, n=5, d=8, dtype=torch.float32, seed=0):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    return torch.randn(b, n, d, generator=g, dtype=dtype)


def _oracle(m: SelfAttention, x, attn_mask=None):
    q = F.linear(x, m.q_proj.weight, m.q_proj.bias)
    k = F.linear(x, m.k_proj.weight, m.k_proj.bias)
    v = F.linear(x, m.v_proj.weight, m.v_proj.bias)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return out, weights


@pytest.mark.parametrize("d_k,d_v,bias", [(None, None, True), (4, 6, False), (3, 8, True)])
def test_matches_sdpa_with_projections(d_k, d_v, bias):
    torch.manual_seed(0)
    m = SelfAttention(8, d_k, d_v, bias=bias)
    x = _x()
    out, weights = m(x)
    want, want_w = _oracle(m, x)
    assert out.shape == (2, 5, 8) and weights.shape == (2, 5, 5)
    assert_close(out, m.out_proj(want))
    assert_close(weights, want_w)
    assert_close(weights.sum(-1), torch.ones(2, 5))
    assert (m.q_proj.bias is None) == (not bias)


def test_without_output_projection_returns_d_v_wide():
    torch.manual_seed(0)
    m = SelfAttention(8, 4, 6, project_out=False)
    x = _x()
    out, _ = m(x)
    assert out.shape == (2, 5, 6)
    assert_close(out, _oracle(m, x)[0])


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_masks_match_sdpa(kind):
    torch.manual_seed(0)
    m = SelfAttention(8, 4, 4)
    x = _x(n=4)
    mask = torch.tensor(
        [[True, False, True, True], [True, True, False, False],
         [False, False, False, True], [True, True, True, True]]
    )
    if kind == "float":
        mask = torch.zeros(4, 4).masked_fill(~mask, float("-inf")) + 0.3 * torch.randn(4, 4)
    out, weights = m(x, attn_mask=mask)
    assert_close(out, m.out_proj(_oracle(m, x, mask)[0]))
    if kind == "bool":
        assert (weights[..., ~mask] == 0).all()


def test_masked_keys_stay_out_at_huge_scores():
    # W_k = -W_q (b_k = -b_q): token t scores -|q_t|^2 / sqrt(d) against itself,
    # about -1e9 and below for inputs of 1e5 (float32). Token 0 may see only
    # itself; every other token is then set to -10 x_0, so it scores
    # +10 |q_0|^2 / sqrt(d) against query 0 and carries a huge value. With -inf
    # masking token 0's output does not move; a fill of -1e4 (or -1e9) would
    # hand it to the masked keys.
    torch.manual_seed(0)
    m = SelfAttention(8)
    with torch.no_grad():
        m.k_proj.weight.copy_(-m.q_proj.weight)
        m.k_proj.bias.copy_(-m.q_proj.bias)
    x = _x(n=5) * 1e5
    mask = torch.rand(2, 5, 5, generator=torch.Generator(device=torch.get_default_device()).manual_seed(1)) > 0.5
    mask |= torch.eye(5, dtype=torch.bool)
    mask[:, 0] = torch.eye(5, dtype=torch.bool)[0]
    out, weights = m(x, attn_mask=mask)
    hidden = x.clone()
    hidden[:, 1:] = -10 * x[:, :1]
    moved, _ = m(hidden, attn_mask=mask)
    assert torch.isfinite(out).all() and torch.isfinite(moved).all()
    assert_close(moved[:, 0], out[:, 0], rtol=1e-5, atol=1e-5 * out.abs().max().item())
    assert (weights[~mask] == 0).all() and torch.equal(weights[:, 0, 0], torch.ones(2))


def test_fully_masked_row_gives_zeros_before_out_proj():
    torch.manual_seed(0)
    m = SelfAttention(8, project_out=False)
    mask = torch.ones(2, 3, 3, dtype=torch.bool)
    mask[1, 2] = False
    out, weights = m(_x(n=3), attn_mask=mask)
    assert torch.isfinite(out).all()
    assert_close(out[1, 2], torch.zeros(8))
    assert_close(weights[1, 2], torch.zeros(3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_finite_for_large_inputs(dtype):
    torch.manual_seed(0)
    m = SelfAttention(16, 8, 8).to(dtype)
    x = (_x(d=16) * 200).to(dtype)
    out, weights = m(x)
    assert out.dtype == dtype
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()


def test_float16_beyond_its_range_matches_float64():
    # Inputs of 1000: q . k reaches ~1e6, far past float16's 65504, so the
    # scores must be formed in float32. The reference is attention in float64
    # on the module's own float16 projections.
    torch.manual_seed(0)
    m = SelfAttention(16, 8, 8).half()
    x = (_x(d=16) * 1000).half()
    out, weights = m(x)
    q, k, v = (proj(x).double() for proj in (m.q_proj, m.k_proj, m.v_proj))
    assert (q @ k.transpose(-2, -1)).abs().max() > 65504
    want_weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8), dim=-1)
    want = F.linear(want_weights @ v, m.out_proj.weight.double(), m.out_proj.bias.double())
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    assert_close(out.double(), want, rtol=1e-2, atol=1e-2 * want.abs().max().item())
    assert_close(weights.double(), want_weights, rtol=0, atol=1e-2)
    # PyTorch in float16 on the same float16 projections: SDPA, then out_proj.
    low = tuple(proj(x) for proj in (m.q_proj, m.k_proj, m.v_proj))
    baseline = m.out_proj(F.scaled_dot_product_attention(*low))
    ratio = assert_within_baseline(out, baseline, want)
    print(f"self-attention float16 past 65504: ratio {ratio:.3g}")


def test_gradcheck_float64():
    torch.manual_seed(0)
    m = SelfAttention(4, 3, 2).double()
    x = _x(b=1, n=3, d=4, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: m(t)[0], (x,))


def test_errors():
    m = SelfAttention(8)
    with pytest.raises(ValueError, match=r"d_model must be a positive int, got 0"):
        SelfAttention(0)
    with pytest.raises(ValueError, match=r"d_k must be a positive int, got 2.5"):
        SelfAttention(8, 2.5)
    with pytest.raises(ValueError, match=r"x must be \(B, L, 8\) with B = .*; got <class 'list'>"):
        m([[1.0]])
    with pytest.raises(ValueError, match=r"x must be \(B, L, 8\) with B = .*; got \(\(1, 2, 8\), torch.int64"):
        m(torch.ones(1, 2, 8, dtype=torch.long))
    with pytest.raises(ValueError, match=r"x must be \(B, L, 8\) with B = .*; got \(\(5, 8\),"):
        m(torch.ones(5, 8))
    with pytest.raises(ValueError, match=r"x must be \(B, L, 8\) with B = .*; got \(\(1, 5, 7\),"):
        m(torch.ones(1, 5, 7))
    x = _x(n=3)
    with pytest.raises(ValueError, match=r"attn_mask must be bool \(True = may attend\) or torch.float32, on cpu, broadcasting to \(2, 3, 3\); got \(\(3, 3\), torch.int64"):
        m(x, attn_mask=torch.ones(3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"attn_mask must be .* broadcasting to \(2, 3, 3\); got \(\(3, 4\), torch.bool"):
        m(x, attn_mask=torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"attn_mask must be .* broadcasting to \(2, 3, 3\); got \(\(1, 2, 3, 3\),"):
        m(x, attn_mask=torch.ones(1, 2, 3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"attn_mask must be .*; got \[\[True\]\]"):
        m(x, attn_mask=[[True]])


def test_exercise_parameter_count():
    m = SelfAttention(8, 4, 6)
    assert sum(p.numel() for p in m.parameters()) == (8 * 4 + 4) * 2 + (8 * 6 + 6) + (6 * 8 + 8) == 182


def test_exercise_identity_projections_give_scaled_naive_attention():
    m = SelfAttention(5, bias=False, project_out=False)
    with torch.no_grad():
        for proj in (m.q_proj, m.k_proj, m.v_proj):
            proj.weight.copy_(torch.eye(5))
    x = _x(d=5)
    scores = x @ x.transpose(-2, -1) / math.sqrt(5)
    assert_close(m(x)[0], torch.softmax(scores, dim=-1) @ x)


def test_errors_for_module_dtype_and_devices():
    torch.manual_seed(0)
    m = SelfAttention(8)
    x = _x()
    with pytest.raises(ValueError, match=r"x must be \(B, L, 8\) with B = .*; got \(\(2, 5, 8\), torch.float64"):
        m(x.double())
    with pytest.raises(ValueError, match=r"x must be \(B, L, 8\) with B = .*; got .*meta"):
        m(x.to("meta"))
    with pytest.raises(ValueError, match=r"attn_mask must be .* on cpu, .* got .*meta"):
        m(x, attn_mask=torch.ones(5, 5, dtype=torch.bool, device="meta"))
