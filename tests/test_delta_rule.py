"""DeltaNet and Gated DeltaNet: recurrent, parallel (triangular solve) and chunked forms are one function."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from snippets.linear.delta_rule import (
    delta_rule_chunked,
    delta_rule_parallel,
    delta_rule_recurrent,
    delta_rule_step,
)

F64 = dict(atol=1e-12, rtol=1e-12)


def _inputs(b=2, h=3, n=23, d_k=5, d_v=4, dtype=torch.float64, seed=0):
    gen = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    q = torch.randn(b, h, n, d_k, generator=gen, dtype=dtype)
    k = F.normalize(torch.randn(b, h, n, d_k, generator=gen, dtype=dtype), dim=-1)  # as the models do
    v = torch.randn(b, h, n, d_v, generator=gen, dtype=dtype)
    beta = torch.rand(b, h, n, generator=gen, dtype=dtype)
    g = torch.rand(b, h, n, generator=gen, dtype=dtype) * torch.log(torch.tensor(0.5, dtype=dtype))
    return q, k, v, beta, g


def paper_recurrence(q, k, v, beta, g, scale):
    """S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, o_t = S_t^T q_t: matrices as written."""
    b, h, n, d_k = q.shape
    s = torch.zeros(b, h, d_k, v.shape[-1], dtype=q.dtype)
    eye = torch.eye(d_k, dtype=q.dtype)
    outs = []
    for t in range(n):
        kt, bt = k[..., t, :], beta[..., t, None, None]
        alpha = 1.0 if g is None else torch.exp(g[..., t, None, None])
        s = alpha * (eye - bt * kt.unsqueeze(-1) * kt.unsqueeze(-2)) @ s + bt * kt.unsqueeze(-1) * v[..., t, :].unsqueeze(-2)
        outs.append(torch.einsum("bhij,bhi->bhj", s, q[..., t, :]) * scale)
    return torch.stack(outs, dim=-2)


@pytest.mark.parametrize("gated", [False, True], ids=["deltanet", "gated"])
def test_recurrent_matches_the_papers_recurrence(gated):
    q, k, v, beta, g = _inputs()
    g = g if gated else None
    assert_close(delta_rule_recurrent(q, k, v, beta, g), paper_recurrence(q, k, v, beta, g, 5 ** -0.5), **F64)


@pytest.mark.parametrize("gated", [False, True], ids=["deltanet", "gated"])
@pytest.mark.parametrize("n", [1, 9, 23])
def test_parallel_equals_recurrent(gated, n):
    q, k, v, beta, g = _inputs(n=n)
    g = g if gated else None
    assert_close(delta_rule_parallel(q, k, v, beta, g), delta_rule_recurrent(q, k, v, beta, g), **F64)


@pytest.mark.parametrize("gated", [False, True], ids=["deltanet", "gated"])
@pytest.mark.parametrize("chunk_size", [1, 4, 7, 64])
def test_chunked_equals_recurrent(gated, chunk_size):
    q, k, v, beta, g = _inputs()
    g = g if gated else None
    assert_close(delta_rule_chunked(q, k, v, beta, g, chunk_size=chunk_size), delta_rule_recurrent(q, k, v, beta, g), **F64)


def test_beta_one_overwrites_where_linear_attention_adds():
    # One key written twice with two values: the delta rule keeps the second;
    # plain linear attention (beta applied to v only, no removal) keeps the sum.
    k = F.normalize(torch.randn(1, 1, 4, dtype=torch.float64), dim=-1)
    v1, v2 = torch.randn(1, 1, 3, dtype=torch.float64), torch.randn(1, 1, 3, dtype=torch.float64)
    one = torch.ones(1, 1, dtype=torch.float64)
    _, s = delta_rule_step(k, k, v1, one)
    out, s = delta_rule_step(k, k, v2, one, state=s, scale=1.0)
    assert_close(out, v2, **F64)
    assert not torch.allclose(out, v1 + v2)


def test_decoding_steps_continue_the_parallel_form():
    q, k, v, beta, g = _inputs(n=10)
    ref = delta_rule_parallel(q, k, v, beta, g)
    state = None
    for t in range(10):
        out, state = delta_rule_step(q[..., t, :], k[..., t, :], v[..., t, :], beta[..., t], g[..., t], state)
        assert state.shape == (2, 3, 5, 4)
        assert_close(out, ref[..., t, :], **F64)


def test_causal_future_tokens_change_nothing():
    q, k, v, beta, g = _inputs()
    out = delta_rule_chunked(q, k, v, beta, g, chunk_size=4)
    v2, beta2 = v.clone(), beta.clone()
    v2[..., 10:, :] += 1.0
    beta2[..., 10:] = 0.9
    assert_close(delta_rule_chunked(q, k, v2, beta2, g, chunk_size=4)[..., :10, :], out[..., :10, :], **F64)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_finite_and_close(dtype):
    q, k, v, beta, g = _inputs(n=40, dtype=torch.float32)
    ref = delta_rule_parallel(*(t.double() for t in (q, k, v, beta, g)))
    for form in (delta_rule_parallel, delta_rule_chunked, delta_rule_recurrent):
        out = form(*(t.to(dtype) for t in (q, k, v, beta, g)))
        assert out.dtype == dtype and torch.isfinite(out).all()
        assert_close(out.double(), ref, atol=0.05, rtol=0.05)


def test_gradients_flow_through_the_chunked_form():
    inputs = tuple(t.requires_grad_() for t in _inputs(b=1, h=1, n=4, d_k=2, d_v=1))
    assert torch.autograd.gradcheck(lambda *a: delta_rule_chunked(*a, chunk_size=3), inputs)


def test_bad_input_is_named():
    q, k, v, beta, g = _inputs(n=4)
    with pytest.raises(ValueError, match="g holds log-decays"):
        delta_rule_parallel(q, k, v, beta, -g)
    with pytest.raises(ValueError, match=r"beta must be a floating \(2, 3, 4\) tensor"):
        delta_rule_parallel(q, k, v, beta[..., :2], g)
    with pytest.raises(ValueError, match=r"g must be a floating \(2, 3, 4\) tensor"):
        delta_rule_chunked(q, k, v, beta, g[..., :2])
    with pytest.raises(ValueError, match=r"k must be a floating \(2, 3, 4, 5\) tensor on q's"):
        delta_rule_parallel(q, k[..., :2], v, beta, g)
    with pytest.raises(ValueError, match=r"v must be a floating \(2, 3, 4, d_v\) tensor"):
        delta_rule_parallel(q, k, v[..., :2, :], beta, g)
    with pytest.raises(ValueError, match="beta must be .* q's device and dtype, got torch.float32"):
        delta_rule_parallel(q, k, v, beta.float(), g)
    with pytest.raises(TypeError, match="beta must be a floating .* tensor .* got 0.5"):
        delta_rule_parallel(q, k, v, 0.5, g)
    with pytest.raises(TypeError, match="v must be a floating .* got torch.int64"):
        delta_rule_parallel(q, k, v.long(), beta, g)
    with pytest.raises(ValueError, match="chunk_size must be an int >= 1, got 0"):
        delta_rule_chunked(q, k, v, beta, g, chunk_size=0)
    with pytest.raises(TypeError, match=r"state must be a floating \(2, 3, 5, 4\) tensor"):
        delta_rule_step(q[..., 0, :], k[..., 0, :], v[..., 0, :], beta[..., 0], None,
                        torch.zeros(2, dtype=q.dtype))


def test_devices_scale_and_one_token_inputs_are_named():
    q, k, v, beta, g = _inputs(n=4)
    with pytest.raises(ValueError, match=r"beta must be .* on q's device and dtype, got .* on meta"):
        delta_rule_parallel(q.cpu(), k.cpu(), v.cpu(), beta.to("meta"), g.cpu())
    with pytest.raises(ValueError, match=r"scale must be None or a finite float > 0, got nan"):
        delta_rule_chunked(q, k, v, beta, g, scale=float("nan"))
    step = [q[..., 0, :], k[..., 0, :], v[..., 0, :], beta[..., 0]]
    with pytest.raises(TypeError, match=r"beta must be a floating \(2, 3\) tensor"):
        delta_rule_step(*step[:3], beta[0, 0, 0])
    state = torch.zeros(*step[1].shape, step[2].shape[-1], dtype=q.dtype)
    with pytest.raises(TypeError, match=r"state must be a floating .* got torch.bool"):
        delta_rule_step(*step, g[..., 0], state.bool())
    with pytest.raises(ValueError, match=r"state must be a floating .* on q's device, got .* on meta"):
        delta_rule_step(*(t.cpu() for t in step), None, state.to("meta"))
