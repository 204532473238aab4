"""Mamba-2's SSD: recurrence, masked attention with a 1-semiseparable mask, and chunks are one function."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from snippets.linear.gated_linear_attention import gla_parallel
from snippets.linear.state_space_duality import ssd_attention, ssd_chunked, ssd_mask, ssd_recurrent

F64 = dict(atol=1e-12, rtol=1e-12)


def _inputs(bsz=2, h=3, n=23, d=4, d_state=6, dtype=torch.float64, seed=0):
    gen = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    x = torch.randn(bsz, h, n, d, generator=gen, dtype=dtype)
    dt = torch.rand(bsz, h, n, generator=gen, dtype=dtype) * 0.5  # softplus outputs in Mamba-2
    a = -torch.rand(h, generator=gen, dtype=dtype) * 2 - 0.1  # A = -exp(A_log) < 0
    b = torch.randn(bsz, h, n, d_state, generator=gen, dtype=dtype)
    c = torch.randn(bsz, h, n, d_state, generator=gen, dtype=dtype)
    return x, dt, a, b, c


@pytest.mark.parametrize("n", [1, 8, 23])
def test_attention_form_equals_recurrence(n):
    args = _inputs(n=n)
    assert_close(ssd_attention(*args), ssd_recurrent(*args), **F64)


@pytest.mark.parametrize("chunk_size", [1, 4, 5, 8, 64])
def test_chunked_equals_recurrence(chunk_size):
    args = _inputs()
    assert_close(ssd_chunked(*args, chunk_size=chunk_size), ssd_recurrent(*args), **F64)


def test_mask_is_the_product_of_decays():
    _, dt, a, _, _ = _inputs(n=9)
    decay = torch.exp(dt * a[:, None])  # a_t, (B, H, N)
    mask = ssd_mask(dt, a)
    for t in range(9):
        for s in range(9):
            want = torch.prod(decay[..., s + 1 : t + 1], dim=-1) if s <= t else torch.zeros_like(decay[..., 0])
            assert_close(mask[..., t, s], want, **F64)


def test_mask_is_one_semiseparable():
    # Every block that lies on or below the diagonal has rank 1: L[t, s] = exp(cum_t) exp(-cum_s).
    _, dt, a, _, _ = _inputs(n=12)
    mask = ssd_mask(dt, a)[0, 0]
    for split in range(1, 12):
        block = mask[split:, : split + 1]
        assert torch.linalg.matrix_rank(block).item() == 1
    # the mask as a whole is full rank (lower triangular with ones on the diagonal)
    assert torch.linalg.matrix_rank(mask).item() == 12


def test_ssd_is_gated_linear_attention_with_one_decay_per_head():
    x, dt, a, b, c = _inputs()
    g = (dt * a[:, None]).unsqueeze(-1).expand_as(b)  # the same log-decay on every state channel
    assert_close(gla_parallel(c, b, dt.unsqueeze(-1) * x, g.contiguous(), scale=1.0), ssd_attention(x, dt, a, b, c), **F64)


def test_causal_future_tokens_change_nothing():
    x, dt, a, b, c = _inputs()
    out = ssd_chunked(x, dt, a, b, c, chunk_size=4)
    x2, dt2 = x.clone(), dt.clone()
    x2[..., 10:, :] += 1.0
    dt2[..., 10:] = 0.3
    assert_close(ssd_chunked(x2, dt2, a, b, c, chunk_size=4)[..., :10, :], out[..., :10, :], **F64)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("form", [ssd_recurrent, ssd_attention, ssd_chunked])
def test_half_precision_is_float32_rounded(dtype, form):
    """In half precision each form equals its float32 computation on the same rounded
    inputs, to a few units of the dtype's rounding, over 512 tokens whose cumulative
    log-decays reach the hundreds."""
    inputs = tuple(t.to(dtype) for t in _inputs(bsz=1, h=2, n=512, d=8, d_state=8,
                                                  dtype=torch.float32, seed=4))
    x, dt, a, b, c = inputs
    assert (dt.float() * a.float()[:, None]).sum(-1).min() < -100
    ref = form(*(t.float() for t in inputs))
    out = form(*inputs)
    assert out.dtype == dtype and torch.isfinite(out).all()
    eps = torch.finfo(dtype).eps
    assert_close(out.float(), ref, rtol=2 * eps, atol=2 * eps * ref.abs().mean().item())


def test_gradients_flow_through_the_chunked_form():
    inputs = tuple(t.requires_grad_() for t in _inputs(bsz=1, h=1, n=4, d=1, d_state=2))
    assert torch.autograd.gradcheck(lambda *a: ssd_chunked(*a, chunk_size=3), inputs)


def test_bad_input_is_named():
    x, dt, a, b, c = _inputs(n=4)
    with pytest.raises(ValueError, match=r"A must be <= 0 and dt >= 0 .* min dt -"):
        ssd_attention(x, -dt - 0.1, a, b, c)
    with pytest.raises(ValueError, match=rf"A must be <= 0 and dt >= 0 .* got max A {(-a).max().item():.3g} "):
        ssd_attention(x, dt, -a, b, c)
    with pytest.raises(ValueError, match=r"A must be a floating \(3\) tensor on dt's device"):
        ssd_recurrent(x, dt, a[:1], b, c)
    with pytest.raises(ValueError, match=r"dt must be a floating \(2, 3, 4\) tensor on x's"):
        ssd_chunked(x, dt[..., :2], a, b, c)
    with pytest.raises(ValueError, match=r"c must be a floating \(2, 3, 4, 6\) tensor on b's"):
        ssd_attention(x, dt, a, b, c[..., :2])
    with pytest.raises(TypeError, match=r"x must be a floating \(B, H, N, d\) tensor"):
        ssd_attention(x[0], dt, a, b, c)
    with pytest.raises(TypeError, match="c must be a floating .* got None"):
        ssd_attention(x, dt, a, b, None)
    with pytest.raises(TypeError, match="b must be a floating .* got torch.int64"):
        ssd_attention(x, dt, a, b.long(), c)
    with pytest.raises(ValueError, match="chunk_size must be an int >= 1, got -2"):
        ssd_chunked(x, dt, a, b, c, chunk_size=-2)


def test_dtypes_devices_and_the_mask_inputs_are_named():
    x, dt, a, b, c = _inputs(n=4)
    with pytest.raises(ValueError, match=r"A must be .* on dt's device and dtype, got torch.float32"):
        ssd_attention(x.double(), dt.double(), a.float(), b.double(), c.double())
    with pytest.raises(ValueError, match=r"c must be .* on b's device and dtype, got .* on meta"):
        ssd_recurrent(x.cpu(), dt.cpu(), a.cpu(), b.cpu(), c.to("meta"))
    with pytest.raises(TypeError, match=r"dt must be a floating \(B, H, N\) tensor .* got \[0.1\]"):
        ssd_mask([0.1], a)
    with pytest.raises(TypeError, match=r"A must be a floating .* got torch.int64"):
        ssd_mask(dt, a.long())
    with pytest.raises(TypeError, match=r"dt must be a floating \(B, H, N\) tensor"):
        ssd_mask(dt[0, 0], a)
    with pytest.raises(ValueError, match=r"A must be a floating \(3\) tensor .* got torch.float64 \(2,\)"):
        ssd_mask(dt, torch.zeros(2, dtype=dt.dtype))
    with pytest.raises(ValueError, match=r"A must be .* dt's device and dtype, got torch.float32"):
        ssd_mask(dt.double(), a.float())
    with pytest.raises(ValueError, match=r"A must be .* dt's device and dtype, got .* on meta"):
        ssd_mask(dt.cpu(), a.to("meta"))
