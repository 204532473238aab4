"""RWKV-7's generalised delta rule: its definition and the rules it contains."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from snippets.linear.delta_rule import delta_rule_recurrent
from snippets.linear.gated_linear_attention import gla_recurrent
from snippets.linear.generalised_delta_rule import generalised_delta_recurrent
from snippets.linear.kimi_delta_attention import kda_recurrent

F64 = dict(atol=1e-12, rtol=1e-12)


def _inputs(b=2, h=3, n=19, d_k=5, d_v=4, dtype=torch.float64, seed=0):
    gen = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    r = torch.randn(b, h, n, d_k, generator=gen, dtype=dtype)
    k = F.normalize(torch.randn(b, h, n, d_k, generator=gen, dtype=dtype), dim=-1)
    v = torch.randn(b, h, n, d_v, generator=gen, dtype=dtype)
    w = -torch.rand(b, h, n, d_k, generator=gen, dtype=dtype)
    a_in = torch.rand(b, h, n, d_k, generator=gen, dtype=dtype)  # in-context learning rate
    return r, k, v, w, a_in


def definition(r, k, v, w, a, b, scale):
    """S_t = (Diag(e^w_t) + b_t a_t^T) S_{t-1} + k_t v_t^T with explicit (d_k, d_k) matrices."""
    s = torch.zeros(*r.shape[:2], r.shape[-1], v.shape[-1], dtype=r.dtype)
    outs = []
    for t in range(r.shape[2]):
        transition = torch.diag_embed(w[:, :, t].exp()) + b[:, :, t, :, None] * a[:, :, t, None, :]
        s = transition @ s + k[:, :, t, :, None] * v[:, :, t, None, :]
        outs.append(torch.einsum("bhij,bhi->bhj", s, r[:, :, t]) * scale)
    return torch.stack(outs, dim=2), s


def test_matches_the_definition_with_rwkv7s_vectors():
    """RWKV-7 reads with a = -k and writes back with b = k * a_in."""
    r, k, v, w, a_in = _inputs()
    out, state = generalised_delta_recurrent(r, k, v, w, -k, k * a_in)
    want, want_state = definition(r, k, v, w, -k, k * a_in, 1.0)
    assert_close(out, want, **F64)
    assert_close(state, want_state, **F64)


def test_no_transition_is_gated_linear_attention():
    r, k, v, w, _ = _inputs()
    zero = torch.zeros_like(k)
    out = generalised_delta_recurrent(r, k, v, w, zero, zero, scale=5 ** -0.5)[0]
    assert_close(out, gla_recurrent(r, k, v, w), **F64)


@pytest.mark.parametrize("gated", [False, True], ids=["deltanet", "gated-deltanet"])
def test_a_is_minus_k_and_b_is_beta_k_gives_the_delta_rule(gated):
    r, k, v, _, _ = _inputs()
    beta = torch.rand(2, 3, 19, dtype=torch.float64)
    g = -torch.rand(2, 3, 19, dtype=torch.float64) if gated else torch.zeros(2, 3, 19, dtype=torch.float64)
    bk = beta.unsqueeze(-1) * k
    # (I - beta k k^T) alpha S + beta k v^T = (alpha I - beta k (alpha k)^T) S + (beta k) v^T
    w = g.unsqueeze(-1).expand_as(k)
    out = generalised_delta_recurrent(r, bk, v, w, -(w.exp() * k), bk, scale=5 ** -0.5)[0]
    assert_close(out, delta_rule_recurrent(r, k, v, beta, g if gated else None), **F64)


def test_a_channel_wise_decay_gives_kimi_delta_attention():
    r, k, v, w, _ = _inputs()
    beta = torch.rand(2, 3, 19, dtype=torch.float64)
    bk = beta.unsqueeze(-1) * k
    out, state = generalised_delta_recurrent(r, bk, v, w, -(w.exp() * k), bk, scale=5 ** -0.5)
    want, want_state = kda_recurrent(r, k, v, beta, w)
    assert_close(out, want, **F64)
    assert_close(state, want_state, **F64)


def test_an_initial_state_carries_over():
    r, k, v, w, a_in = _inputs(n=12)
    a, b = -k, k * a_in
    whole, whole_state = generalised_delta_recurrent(r, k, v, w, a, b)
    first, state = generalised_delta_recurrent(*(t[:, :, :5] for t in (r, k, v, w, a, b)))
    second, last = generalised_delta_recurrent(*(t[:, :, 5:] for t in (r, k, v, w, a, b)),
                                               initial_state=state)
    assert_close(torch.cat([first, second], dim=2), whole, **F64)
    assert_close(last, whole_state, **F64)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_stays_near_float32(dtype):
    r, k, v, w, a_in = _inputs(b=1, h=2, n=128, d_k=8, d_v=8, dtype=torch.float32)
    inputs = [t.to(dtype) for t in (r, k, v, w, -k, k * a_in)]
    ref = generalised_delta_recurrent(*(t.float() for t in inputs))[0]
    out = generalised_delta_recurrent(*inputs)[0]
    assert out.dtype == dtype and torch.isfinite(out).all()
    assert (out.float() - ref).abs().max() <= 4 * torch.finfo(dtype).eps * ref.abs().max()


def test_gradients_pass_gradcheck():
    r, k, v, w, a_in = _inputs(b=1, h=1, n=4, d_k=3, d_v=2)
    inputs = tuple(t.requires_grad_() for t in (r, k, v, w, -k, k * a_in))  # six leaves
    assert torch.autograd.gradcheck(lambda *x: generalised_delta_recurrent(*x)[0], inputs)


def test_bad_input_is_named():
    r, k, v, w, a_in = _inputs(n=4)
    a, b = -k, k * a_in
    with pytest.raises(TypeError, match=r"r must be a floating \(B, H, N, d_k\) tensor"):
        generalised_delta_recurrent(r[..., 0], k, v, w, a, b)
    with pytest.raises(ValueError, match=r"b must be a floating \(2, 3, 4, 5\) tensor on r's"):
        generalised_delta_recurrent(r, k, v, w, a, b[..., :3])
    with pytest.raises(ValueError, match=r"v must be a floating \(2, 3, 4, d_v\) tensor"):
        generalised_delta_recurrent(r, k, v[:, :, :2], w, a, b)
    with pytest.raises(ValueError, match="a must be .* on r's device and dtype, got torch.float32"):
        generalised_delta_recurrent(r, k, v, w, a.float(), b)
    with pytest.raises(ValueError, match="w holds log decays and must be <= 0, got"):
        generalised_delta_recurrent(r, k, v, -w, a, b)
    with pytest.raises(ValueError, match=r"initial_state must be a floating \(2, 3, 5, 4\) tensor"):
        generalised_delta_recurrent(r, k, v, w, a, b, initial_state=torch.zeros(2, 3, 4, 4))
    with pytest.raises(ValueError, match="scale must be a finite number > 0, got 0"):
        generalised_delta_recurrent(r, k, v, w, a, b, scale=0)
