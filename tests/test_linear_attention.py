"""Linear attention equals its quadratic form; the recurrent step equals the parallel form."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from snippets.efficiency.linear_attention import (
    feature_map,
    linear_attention,
    linear_attention_step,
)

SNIPPET = Path(__file__).resolve().parents[1] / "snippets" / "efficiency" / "linear_attention.py"


def _phi(x):
    # elu(x) + 1 written from its definition: x + 1 for x > 0, exp(x) otherwise.
    return torch.where(x > 0, x + 1.0, torch.exp(x))


def quadratic_linear_attention(q, k, v, causal=False, eps=1e-6):
    """The paper's equation (4) with sim(q, k) = phi(q) . phi(k), as an N x M matrix."""
    a = torch.einsum("...nd,...md->...nm", _phi(q), _phi(k))  # (..., N, M)
    if causal:
        n, m = q.shape[-2], k.shape[-2]
        i = torch.arange(n).unsqueeze(-1) + (m - n)
        j = torch.arange(m)
        a = a * (j <= i)
    return torch.einsum("...nm,...me->...ne", a, v) / (a.sum(-1, keepdim=True) + eps)


def _qkv(b=2, h=3, n=7, m=7, d=4, d_v=5, dtype=torch.float32, seed=0):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    q = torch.randn(b, h, n, d, generator=g, dtype=dtype)
    k = torch.randn(b, h, m, d, generator=g, dtype=dtype)
    v = torch.randn(b, h, m, d_v, generator=g, dtype=dtype)
    return q, k, v


def test_feature_map_is_elu_plus_one_and_positive():
    x = torch.linspace(-30, 5, 101)
    assert_close(feature_map(x), _phi(x))
    assert (feature_map(x) >= 0).all()
    # Positive wherever float32 can tell exp(x) apart from 0 after adding 1.
    assert (feature_map(torch.linspace(-15, 5, 101)) > 0).all()


@pytest.mark.parametrize("n, m", [(7, 7), (3, 9), (9, 4)])
def test_non_causal_equals_quadratic_form(n, m):
    q, k, v = _qkv(n=n, m=m)
    got = linear_attention(q, k, v)
    assert got.shape == (2, 3, n, 5)
    assert_close(got, quadratic_linear_attention(q, k, v))


@pytest.mark.parametrize("n, m", [(7, 7), (3, 9), (1, 6)])
def test_causal_equals_masked_quadratic_form(n, m):
    q, k, v = _qkv(n=n, m=m)
    assert_close(linear_attention(q, k, v, causal=True), quadratic_linear_attention(q, k, v, causal=True))


def test_eps_is_added_to_the_normaliser():
    q, k, v = _qkv()
    assert_close(linear_attention(q, k, v, eps=0.5), quadratic_linear_attention(q, k, v, eps=0.5))
    assert_close(
        linear_attention(q, k, v, causal=True, eps=0.5),
        quadratic_linear_attention(q, k, v, causal=True, eps=0.5),
    )


def test_recurrent_step_equals_parallel_causal_form():
    q, k, v = _qkv(n=8, m=8)
    state = None
    outs = []
    for t in range(8):
        out_t, state = linear_attention_step(q[..., t, :], k[..., t, :], v[..., t, :], state)
        outs.append(out_t)
        assert state[0].shape == (2, 3, 4, 5) and state[1].shape == (2, 3, 4)
    assert_close(torch.stack(outs, dim=-2), linear_attention(q, k, v, causal=True))


@pytest.mark.parametrize("causal", [False, True])
def test_weights_are_normalised(causal):
    # A constant value vector comes back unchanged: the weights of each query sum to 1.
    q, k, _ = _qkv()
    v = torch.full((2, 3, 7, 5), 3.0)
    assert_close(linear_attention(q, k, v, causal=causal, eps=0.0), v[..., :7, :])


def test_causal_output_unchanged_when_future_changes():
    q, k, v = _qkv(n=9, m=9)
    out = linear_attention(q, k, v, causal=True)
    k2, v2, q2 = k.clone(), v.clone(), q.clone()
    for t in (q2, k2, v2):
        t[..., 5:, :] = torch.randn_like(t[..., 5:, :])
    assert_close(linear_attention(q2, k2, v2, causal=True)[..., :5, :], out[..., :5, :])


def test_it_is_not_softmax_attention():
    q, k, v = _qkv()
    assert not torch.allclose(linear_attention(q, k, v), F.scaled_dot_product_attention(q, k, v), atol=1e-3)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_finite_and_accurate_in_low_precision(dtype, causal):
    q, k, v = _qkv(n=64, m=64)
    # Huge inputs: phi(q) can round to exactly 0, and eps keeps 0 / 0 away.
    big = linear_attention((q * 1000).to(dtype), (k * 1000).to(dtype), (v * 100).to(dtype), causal=causal)
    assert big.dtype == dtype and torch.isfinite(big).all()
    # Moderate inputs: a long sum of keys, still close to the float64 equation.
    q, k, v = (q * 3).to(dtype), (k * 3).to(dtype), (v * 100).to(dtype)
    out = linear_attention(q, k, v, causal=causal)
    ref = quadratic_linear_attention(q.double(), k.double(), v.double(), causal=causal)
    assert_close(out.double(), ref, atol=0.5, rtol=2e-2)


@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck_float64(causal):
    q, k, v = (t.requires_grad_() for t in _qkv(b=1, h=1, n=4, m=4, d=3, d_v=2, dtype=torch.float64))
    assert torch.autograd.gradcheck(lambda q, k, v: linear_attention(q, k, v, causal=causal), (q, k, v))


# --- validation ----------------------------------------------------------------


def test_bad_inputs():
    q, k, v = _qkv()
    with pytest.raises(TypeError, match=r"q must be floating, 2\+ dims like q, got \[0.0\]"):
        linear_attention([0.0], k, v)
    with pytest.raises(TypeError, match=r"v must be floating, .* got \(torch.int64"):
        linear_attention(q, k, v.long())
    with pytest.raises(TypeError, match=r"k must be floating, 2\+ dims like q, got .*\(4,\)\)"):
        linear_attention(q, torch.randn(4), v)
    with pytest.raises(TypeError, match=r"k must be floating, .* got \(torch.float32"):
        linear_attention(q.double(), k, v)
    with pytest.raises(ValueError, match=r"q must be \(\.\.\., N, d\), k \(\.\.\., M, d\), .* got q \(2, 3, 7, 2\)"):
        linear_attention(q[..., :2], k, v)
    with pytest.raises(ValueError, match=r"q must be .* got q \(2, 3, 7, 4\), k \(2, 3, 7, 4\), v \(2, 3, 3, 5\)"):
        linear_attention(q, k, v[..., :3, :])
    with pytest.raises(ValueError, match=r"eps must be a float >= 0, got -1"):
        linear_attention(q, k, v, eps=-1.0)
    with pytest.raises(ValueError, match=r"q must be .*, N <= M if causal; got q \(2, 3, 7, 4\), k \(2, 3, 3, 4\)"):
        linear_attention(q, k[..., :3, :], v[..., :3, :], causal=True)


def test_bad_state():
    q, k, v = _qkv()
    _, state = linear_attention_step(q[..., 0, :], k[..., 0, :], v[..., 0, :])
    with pytest.raises(ValueError, match=r"state must be \(S, z\) with \[\(\(2, 3, 4, 2\), torch.float32"):
        linear_attention_step(q[..., 0, :], k[..., 0, :], v[..., 0, :2], state)


# --- the file stands alone ------------------------------------------------------




# --- exercises on docs/efficiency/linear-attention.md -----------------------------


def test_exercise_weight_matrix_has_rank_at_most_d():
    # The N x N matrix phi(Q) phi(K)^T (before normalising) has rank <= d:
    # linear attention cannot express, e.g., the identity pattern when N > d.
    q, k, _ = _qkv(b=1, h=1, n=16, m=16, d=4)
    a = _phi(q[0, 0].double()) @ _phi(k[0, 0].double()).T
    weights = a / a.sum(-1, keepdim=True)
    assert torch.linalg.matrix_rank(weights).item() <= 4
    assert torch.linalg.matrix_rank(torch.softmax(q[0, 0] @ k[0, 0].T, dim=-1).double()).item() > 4


def test_exercise_eps_guards_queries_whose_features_round_to_zero():
    # A query with all entries below about -17 has phi(q) == 0 in float32.
    q, k, v = _qkv(n=3, m=3)
    q[..., 1, :] = -40.0
    assert (feature_map(q[..., 1, :]) == 0).all()
    assert torch.isfinite(linear_attention(q, k, v)).all()
    assert torch.isnan(linear_attention(q, k, v, eps=0.0)[..., 1, :]).all()


def test_errors_for_leading_dims_devices_and_the_feature_map():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"q must be \(\.\.\., N, d\), .* got q \(2, 3, 7, 4\), k \(3, 1, 7, 4\)"):
        linear_attention(q, k[:1, :1].expand(3, 1, -1, -1), v)
    with pytest.raises(TypeError, match=r"k must be floating, 2\+ dims like q, got \(torch.float32, device\(type='meta'\)"):
        linear_attention(q, k.to("meta"), v)
    with pytest.raises(TypeError, match=r"x must be a floating tensor, got \[1.0\]"):
        feature_map([1.0])
    with pytest.raises(TypeError, match=r"x must be a floating tensor, got torch.int64"):
        feature_map(torch.arange(3))


def test_step_errors():
    q, k, v = (t[..., 0, :] for t in _qkv())
    _, state = linear_attention_step(q, k, v)
    with pytest.raises(TypeError, match=r"v must be floating, 1\+ dims like q, got \[1.0\]"):
        linear_attention_step(q, k, [1.0])
    with pytest.raises(TypeError, match=r"k must be floating, .* got \(torch.int64"):
        linear_attention_step(q, k.long(), v)
    with pytest.raises(TypeError, match=r"q must be floating, 1\+ dims like q, got .*\(\)\)"):
        linear_attention_step(q[0, 0, 0], k, v)
    with pytest.raises(TypeError, match=r"k must be floating, .* got \(torch.float64"):
        linear_attention_step(q, k.double(), v)
    with pytest.raises(TypeError, match=r"v must be floating, .* got \(torch.float32, device\(type='meta'\)"):
        linear_attention_step(q, k, v.to("meta"))
    with pytest.raises(ValueError, match=r"q must be .* \(one step: no N, M\).*; "
                                         r"got q \(2, 3, 4\), k \(2, 2, 4\)"):
        linear_attention_step(q, k[:, :2], v)
    with pytest.raises(ValueError, match=r"eps must be a float >= 0, got 'x'"):
        linear_attention_step(q, k, v, eps="x")
    with pytest.raises(ValueError, match=r"state must be \(S, z\) with .* got 3"):
        linear_attention_step(q, k, v, 3)
    with pytest.raises(ValueError, match=r"state must be \(S, z\) with .* got \[1, 2\]"):
        linear_attention_step(q, k, v, (1, 2))
    with pytest.raises(ValueError, match=r"state must be \(S, z\) with .* got .*\(\(2, 3, 4\), torch.float64"):
        linear_attention_step(q, k, v, (state[0], state[1].double()))
