"""Gated linear attention: recurrent, parallel and chunked forms are one function."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from snippets.linear.gated_linear_attention import gla_chunked, gla_parallel, gla_recurrent, gla_step

F64 = dict(atol=1e-12, rtol=1e-12)


def _inputs(b=2, h=3, n=23, d_k=5, d_v=4, dtype=torch.float64, seed=0):
    gen = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    q = torch.randn(b, h, n, d_k, generator=gen, dtype=dtype)
    k = torch.randn(b, h, n, d_k, generator=gen, dtype=dtype)
    v = torch.randn(b, h, n, d_v, generator=gen, dtype=dtype)
    # log-decays between log(0.3) and 0: some channels forget fast, some barely
    g = torch.rand(b, h, n, d_k, generator=gen, dtype=dtype) * torch.log(torch.tensor(0.3, dtype=dtype))
    return q, k, v, g


def paper_recurrence(q, k, v, g, scale):
    """S_t = Diag(alpha_t) S_{t-1} + k_t v_t^T, o_t = S_t^T q_t, with explicit diagonal matrices."""
    b, h, n, d_k = q.shape
    s = torch.zeros(b, h, d_k, v.shape[-1], dtype=q.dtype)
    outs = []
    for t in range(n):
        s = torch.diag_embed(torch.exp(g[..., t, :])) @ s + torch.einsum("bhi,bhj->bhij", k[..., t, :], v[..., t, :])
        outs.append(torch.einsum("bhij,bhi->bhj", s, q[..., t, :]) * scale)
    return torch.stack(outs, dim=-2)


@pytest.mark.parametrize("n", [1, 7, 23])
def test_recurrent_matches_the_papers_recurrence(n):
    q, k, v, g = _inputs(n=n)
    assert_close(gla_recurrent(q, k, v, g), paper_recurrence(q, k, v, g, 5 ** -0.5), **F64)


@pytest.mark.parametrize("n", [1, 7, 23])
def test_parallel_equals_recurrent(n):
    q, k, v, g = _inputs(n=n)
    assert_close(gla_parallel(q, k, v, g), gla_recurrent(q, k, v, g), **F64)


@pytest.mark.parametrize("chunk_size", [1, 4, 5, 64])
def test_chunked_equals_recurrent(chunk_size):
    q, k, v, g = _inputs()
    assert_close(gla_chunked(q, k, v, g, chunk_size=chunk_size), gla_recurrent(q, k, v, g), **F64)


def test_no_decay_is_unnormalised_causal_linear_attention():
    q, k, v, g = _inputs()
    a = (q @ k.transpose(-2, -1)).tril() * 0.5  # (B, H, N, N)
    zero = torch.zeros_like(g)
    for form in (gla_parallel, gla_chunked, gla_recurrent):
        assert_close(form(q, k, v, zero, scale=0.5), a @ v, **F64)


def test_decay_forgets_the_past():
    # With alpha = 0 everywhere except nothing, each output sees only its own token.
    q, k, v, _ = _inputs()
    g = torch.full_like(q, -torch.inf).nan_to_num(neginf=-1e4)
    own = (q * k).sum(-1, keepdim=True) * v * 5 ** -0.5
    assert_close(gla_chunked(q, k, v, g, chunk_size=4), own, **F64)


def test_decoding_steps_continue_the_parallel_form():
    q, k, v, g = _inputs(n=12)
    ref = gla_parallel(q, k, v, g)
    state = None
    for t in range(12):
        out, state = gla_step(q[..., t, :], k[..., t, :], v[..., t, :], g[..., t, :], state)
        assert state.shape == (2, 3, 5, 4)
        assert_close(out, ref[..., t, :], **F64)


def test_causal_future_tokens_change_nothing():
    q, k, v, g = _inputs()
    out = gla_chunked(q, k, v, g, chunk_size=4)
    q2, k2, v2 = (t.clone() for t in (q, k, v))
    for t in (q2, k2, v2):
        t[..., 10:, :] += 1.0
    assert_close(gla_chunked(q2, k2, v2, g, chunk_size=4)[..., :10, :], out[..., :10, :], **F64)


def _long_inputs(dtype, n=512):
    """Long inputs whose cumulative log-decays reach the hundreds, rounded to ``dtype``."""
    q, k, v, g = _inputs(b=1, h=2, n=n, d_k=8, d_v=8, dtype=torch.float32, seed=3)
    g = g * 1.5  # log(0.3) * 1.5 per step at most: sum(g) over 512 tokens is about -460
    return tuple(t.to(dtype) for t in (q, k, v, g))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("form", [gla_recurrent, gla_parallel, gla_chunked])
def test_half_precision_is_float32_rounded(dtype, form):
    """In half precision each form equals its float32 computation on the same rounded
    inputs, to a few units of the dtype's rounding: the state is kept in float32."""
    inputs = _long_inputs(dtype)
    assert inputs[3].float().sum(-2).min() < -300
    ref = form(*(t.float() for t in inputs))
    out = form(*inputs)
    assert out.dtype == dtype and torch.isfinite(out).all()
    eps = torch.finfo(dtype).eps
    assert_close(out.float(), ref, rtol=2 * eps, atol=2 * eps * ref.abs().mean().item())


def test_chunked_form_never_overflows_at_fast_decays():
    """exp of a difference with s before t only: a decay of e^-40 per token in a chunk
    of 32 would overflow float32 if the chunk were factored as e^b times e^-b."""
    q, k, v, g = _inputs(n=70, dtype=torch.float32)
    g = torch.full_like(g, -40.0)
    out = gla_chunked(q, k, v, g, chunk_size=32, sub_chunk_size=8)
    own = (q * k).sum(-1, keepdim=True) * v * 5 ** -0.5
    assert torch.isfinite(out).all()
    assert_close(out, own, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("chunk_size, sub", [(8, 2), (16, 4), (12, 3), (32, None)])
def test_secondary_chunking_equals_recurrent(chunk_size, sub):
    q, k, v, g = _inputs(n=37)
    got = gla_chunked(q, k, v, g, chunk_size=chunk_size, sub_chunk_size=sub)
    assert_close(got, gla_recurrent(q, k, v, g), **F64)


def test_gradients_flow_through_the_chunked_form():
    q, k, v, g = (t.requires_grad_() for t in _inputs(b=1, h=1, n=4, d_k=2, d_v=1))
    assert torch.autograd.gradcheck(lambda *a: gla_chunked(*a, chunk_size=3), (q, k, v, g))


def test_bad_input_is_named():
    q, k, v, g = _inputs(n=4)
    with pytest.raises(ValueError, match="g holds log-decays"):
        gla_parallel(q, k, v, -g)
    with pytest.raises(ValueError, match=r"k must be a floating \(2, 3, 4, 5\) tensor on q's"):
        gla_parallel(q, k[..., :3], v, g)
    with pytest.raises(ValueError, match=r"v must be a floating \(2, 3, 4, d_v\) tensor"):
        gla_chunked(q, k, v[..., :2, :], g)
    with pytest.raises(ValueError, match="k must be .* q's device and dtype, got torch.float64"):
        gla_parallel(q.float(), k, v, g)
    with pytest.raises(TypeError, match=r"q must be a floating .* tensor .* got \[1.0\]"):
        gla_parallel([1.0], k, v, g)
    with pytest.raises(TypeError, match="q must be a floating .* got torch.int64"):
        gla_parallel(q.long(), k, v, g)
    with pytest.raises(TypeError, match=r"q must be a floating \(B, H, N, d_k\) tensor"):
        gla_parallel(q[0, 0, 0], k, v, g)
    with pytest.raises(ValueError, match="chunk_size and sub_chunk_size must be ints >= 1.* got 0"):
        gla_chunked(q, k, v, g, chunk_size=0)
    with pytest.raises(ValueError, match="the second dividing the first, got 8 and 3"):
        gla_chunked(q, k, v, g, chunk_size=8, sub_chunk_size=3)
    with pytest.raises(TypeError, match=r"state must be a floating \(2, 3, 5, 4\) tensor"):
        gla_step(q[..., 0, :], k[..., 0, :], v[..., 0, :], g[..., 0, :], torch.zeros(1, dtype=q.dtype))


def test_devices_scale_and_one_token_inputs_are_named():
    q, k, v, g = _inputs(n=4)
    with pytest.raises(ValueError, match=r"g must be .* on q's device and dtype, got .* on meta"):
        gla_parallel(q.cpu(), k.cpu(), v.cpu(), g.to("meta"))
    with pytest.raises(ValueError, match=r"scale must be None or a finite float > 0, got -1.0"):
        gla_recurrent(q, k, v, g, scale=-1.0)
    step = [t[..., 0, :] for t in (q, k, v, g)]
    with pytest.raises(TypeError, match=r"k must be a floating .* got \[1.0\]"):
        gla_step(step[0], [1.0], step[2], step[3])
    with pytest.raises(TypeError, match=r"g must be a floating \(2, 3, 5\) tensor"):
        gla_step(*step[:3], g[0, 0, 0, 0])
    state = torch.zeros(*step[1].shape, step[2].shape[-1], dtype=q.dtype)
    with pytest.raises(TypeError, match=r"state must be a floating .* got torch.int64"):
        gla_step(*step, state.long())
    with pytest.raises(TypeError, match=r"state must be a floating .* got \[0.0\]"):
        gla_step(*step, [0.0])
    with pytest.raises(ValueError, match=r"state must be a floating .* q's device, got .* on meta"):
        gla_step(*(t.cpu() for t in step), state.to("meta"))
