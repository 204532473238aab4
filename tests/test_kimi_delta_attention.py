"""Kimi Delta Attention: the definition, its chunked form, transformers' reference, its off switch."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from snippets.linear.delta_rule import delta_rule_recurrent
from snippets.linear.kimi_delta_attention import kda_chunked, kda_recurrent, kda_step
from transformers_support import require_transformers

F64 = dict(atol=1e-12, rtol=1e-12)


def _inputs(b=2, h=3, n=23, d_k=5, d_v=4, dtype=torch.float64, seed=0, decay=1.0):
    gen = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    q = torch.randn(b, h, n, d_k, generator=gen, dtype=dtype)
    k = F.normalize(torch.randn(b, h, n, d_k, generator=gen, dtype=dtype), dim=-1)
    v = torch.randn(b, h, n, d_v, generator=gen, dtype=dtype)
    beta = torch.rand(b, h, n, generator=gen, dtype=dtype)
    g = -decay * torch.rand(b, h, n, d_k, generator=gen, dtype=dtype)  # one per channel
    return q, k, v, beta, g


def definition(q, k, v, beta, g, scale, state=None):
    """S_t = (I - beta_t k_t k_t^T) Diag(alpha_t) S_{t-1} + beta_t k_t v_t^T, as matrices."""
    b, h, n, d_k = q.shape
    s = torch.zeros(b, h, d_k, v.shape[-1], dtype=q.dtype) if state is None else state
    eye = torch.eye(d_k, dtype=q.dtype)
    outs = []
    for t in range(n):
        kt, bt = k[..., t, :], beta[..., t, None, None]
        transition = (eye - bt * kt.unsqueeze(-1) * kt.unsqueeze(-2)) @ torch.diag_embed(g[..., t, :].exp())
        s = transition @ s + bt * kt.unsqueeze(-1) * v[..., t, :].unsqueeze(-2)
        outs.append(torch.einsum("bhij,bhi->bhj", s, q[..., t, :]) * scale)
    return torch.stack(outs, dim=-2), s


def test_recurrent_matches_the_definition():
    q, k, v, beta, g = _inputs()
    out, state = kda_recurrent(q, k, v, beta, g)
    want, want_state = definition(q, k, v, beta, g, 5 ** -0.5)
    assert_close(out, want, **F64)
    assert_close(state, want_state, **F64)


@pytest.mark.parametrize("chunk_size", [1, 4, 7, 23, 64])
@pytest.mark.parametrize("n", [1, 9, 23])
def test_chunked_equals_recurrent(chunk_size, n):
    q, k, v, beta, g = _inputs(n=n)
    out, state = kda_chunked(q, k, v, beta, g, chunk_size=chunk_size)
    want, want_state = kda_recurrent(q, k, v, beta, g)
    assert_close(out, want, **F64)
    assert_close(state, want_state, **F64)


def test_an_initial_state_carries_over_and_splitting_the_sequence_changes_nothing():
    q, k, v, beta, g = _inputs(n=20)
    whole, whole_state = kda_recurrent(q, k, v, beta, g)
    first, state = kda_chunked(*(t[:, :, :12] for t in (q, k, v, beta, g)), chunk_size=5)
    second, last = kda_chunked(*(t[:, :, 12:] for t in (q, k, v, beta, g)), chunk_size=5,
                               initial_state=state)
    assert_close(torch.cat([first, second], dim=2), whole, **F64)
    assert_close(last, whole_state, **F64)
    rec, rec_state = kda_recurrent(*(t[:, :, 12:] for t in (q, k, v, beta, g)), initial_state=state)
    assert_close(rec, second, **F64)
    assert_close(rec_state, last, **F64)


def test_steps_equal_the_recurrence():
    q, k, v, beta, g = _inputs(n=9)
    state = torch.zeros(2, 3, 5, 4, dtype=torch.float64)
    outs = []
    for t in range(9):
        out, state = kda_step(q[:, :, t], k[:, :, t], v[:, :, t], beta[:, :, t], g[:, :, t], state)
        outs.append(out)
    want, want_state = kda_recurrent(q, k, v, beta, g)
    assert_close(torch.stack(outs, dim=2), want, **F64)
    assert_close(state, want_state, **F64)


@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_one_gate_for_every_channel_is_gated_deltanet(form):
    """The off switch: the same decay in every key channel is Gated DeltaNet's scalar gate."""
    q, k, v, beta, _ = _inputs(n=17)
    g = -torch.rand(2, 3, 17, dtype=torch.float64)
    channels = g.unsqueeze(-1).expand(-1, -1, -1, 5)
    out = kda_recurrent(q, k, v, beta, channels)[0] if form == "recurrent" \
        else kda_chunked(q, k, v, beta, channels, chunk_size=4)[0]
    assert_close(out, delta_rule_recurrent(q, k, v, beta, g), **F64)
    zero = torch.zeros_like(channels)  # and no decay at all is DeltaNet
    assert_close(kda_recurrent(q, k, v, beta, zero)[0], delta_rule_recurrent(q, k, v, beta), **F64)


def test_channels_decay_separately():
    """A channel whose gate is 0 keeps its memory while another forgets: a scalar gate cannot."""
    q, k, v, beta, g = _inputs(n=12)
    g = torch.zeros_like(g)
    g[..., 0] = -30.0  # channel 0 forgets at once
    out = kda_recurrent(q, k, v, beta, g)[0]
    mean = g.mean(-1, keepdim=True).expand_as(g)  # the same total decay, spread evenly
    assert (out - kda_recurrent(q, k, v, beta, mean)[0]).abs().max() > 1e-2


def test_causal_future_tokens_change_nothing():
    q, k, v, beta, g = _inputs(n=16)
    out = kda_chunked(q, k, v, beta, g, chunk_size=4)[0]
    v2, g2 = v.clone(), g.clone()
    v2[:, :, 10:] = torch.randn_like(v2[:, :, 10:])
    g2[:, :, 10:] = -5 * torch.rand_like(g2[:, :, 10:])
    out2 = kda_chunked(q, k, v2, beta, g2, chunk_size=4)[0]
    assert_close(out2[:, :, :10], out[:, :, :10], **F64)
    assert (out2[:, :, 10:] - out[:, :, 10:]).abs().max() > 1e-3


def _transformers_kda():
    require_transformers()
    from transformers.models.kimi_linear import modeling_kimi_linear as kimi

    return kimi.recurrent_kimi_delta_attention, kimi.chunk_kimi_delta_attention


@pytest.mark.parametrize("n", [5, 40])
def test_equals_transformers_kimi_linear(n):
    """transformers' reference functions, (B, N, H, d) and (q, k, v, g, beta) order, float32."""
    recurrent, chunk = _transformers_kda()
    q, k, v, beta, g = _inputs(n=n, dtype=torch.float32, decay=2.0)
    bnhd = [t.transpose(1, 2) for t in (q, k, v, g, beta)]
    theirs, their_state = recurrent(*bnhd, initial_state=None, output_final_state=True)
    theirs_chunked, _ = chunk(*bnhd, chunk_size=16, output_final_state=True)
    for ours, state in (kda_recurrent(q, k, v, beta, g), kda_chunked(q, k, v, beta, g, chunk_size=16)):
        assert_close(ours, theirs.transpose(1, 2), atol=2e-5, rtol=2e-5)
        assert_close(ours, theirs_chunked.transpose(1, 2), atol=2e-5, rtol=2e-5)
        assert_close(state, their_state, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_stays_near_float32_on_long_decays(dtype):
    """N = 256 with log decays summing to about -256 per channel: the chunk differences
    stay <= 0, and the half result is within a few of its own roundings of float32."""
    q, k, v, beta, g = _inputs(b=1, h=2, n=256, d_k=8, d_v=8, dtype=torch.float32, decay=2.0)
    rounded = [t.to(dtype) for t in (q, k, v, beta, g)]
    ref = kda_recurrent(*(t.float() for t in rounded))[0]
    assert g.sum(dim=2).min() < -200
    eps = torch.finfo(dtype).eps
    for form in (kda_recurrent, lambda *a: kda_chunked(*a, chunk_size=64)):
        out = form(*rounded)[0]
        assert out.dtype == dtype and torch.isfinite(out).all()
        assert (out.float() - ref).abs().max() <= 4 * eps * ref.abs().max()


def test_gradients_pass_gradcheck():
    inputs = tuple(t.requires_grad_() for t in _inputs(b=1, h=1, n=5, d_k=3, d_v=2))
    assert torch.autograd.gradcheck(lambda *a: kda_chunked(*a, chunk_size=2)[0], inputs)
    assert torch.autograd.gradcheck(lambda *a: kda_recurrent(*a)[0], inputs)


def test_bad_input_is_named():
    q, k, v, beta, g = _inputs(n=4)
    with pytest.raises(TypeError, match=r"q must be a floating \(B, H, N, d_k\) tensor"):
        kda_recurrent(q[..., 0], k, v, beta, g)
    with pytest.raises(TypeError, match=r"g must be a floating \(2, 3, 4, 5\) tensor on q's"):
        kda_chunked(q, k, v, beta, g[..., 0])
    with pytest.raises(ValueError, match=r"beta must be a floating \(2, 3, 4\) tensor"):
        kda_recurrent(q, k, v, beta[..., :2], g)
    with pytest.raises(ValueError, match=r"k must be a floating \(2, 3, 4, 5\) tensor"):
        kda_recurrent(q, k[..., :3], v, beta, g)
    with pytest.raises(ValueError, match=r"v must be a floating \(2, 3, 4, d_v\) tensor"):
        kda_recurrent(q, k, v[:, :, :3], beta, g)
    with pytest.raises(ValueError, match="beta must be .* on q's device and dtype, got torch.float32"):
        kda_recurrent(q, k, v, beta.float(), g)
    with pytest.raises(ValueError, match="g holds log decays and must be <= 0, got"):
        kda_recurrent(q, k, v, beta, -g)
    with pytest.raises(ValueError, match=r"state must be a floating \(2, 3, 5, 4\) tensor"):
        kda_chunked(q, k, v, beta, g, initial_state=torch.zeros(2, 3, 4, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="chunk_size must be an int >= 1, got 0"):
        kda_chunked(q, k, v, beta, g, chunk_size=0)
    with pytest.raises(ValueError, match="scale must be None or a finite number > 0"):
        kda_recurrent(q, k, v, beta, g, scale=-1.0)
    with pytest.raises(TypeError, match=r"q must be a floating \(B, H, d_k\) tensor"):
        kda_step(q, k[:, :, 0], v[:, :, 0], beta[:, :, 0], g[:, :, 0],
                 torch.zeros(2, 3, 5, 4, dtype=torch.float64))


def test_exercise_a_halving_channel():
    n = 12
    k = torch.ones(1, 1, n, 1, dtype=torch.float64)
    v = torch.zeros(1, 1, n, 1, dtype=torch.float64)
    v[..., 0, 0] = 1.0
    beta = torch.zeros(1, 1, n, dtype=torch.float64)
    beta[..., 0] = 1.0
    g = torch.full((1, 1, n, 1), -math.log(2.0), dtype=torch.float64)
    held = kda_recurrent(k, k, v, beta, g, scale=1.0)[0][0, 0, :, 0]  # held[t] = 2^-t
    first = int(torch.nonzero(held < 1e-3)[0])
    assert first == 10
    assert_close(held[9], torch.tensor(2.0 ** -9, dtype=torch.float64), **F64)


def test_exercise_the_gate_goes_first():
    q, k, v, beta, g = _inputs(n=6)
    state = torch.zeros(2, 3, 5, 4, dtype=torch.float64)
    outs = []
    for t in range(6):  # the decay applied after the update instead of before
        kt, bt, vt = k[:, :, t], beta[:, :, t, None, None], v[:, :, t]
        write = state - bt * kt[..., :, None] * (kt[..., None, :] @ state) + bt * kt[..., :, None] * vt[..., None, :]
        state = g[:, :, t].exp()[..., :, None] * write
        outs.append(torch.einsum("bhij,bhi->bhj", state, q[:, :, t]) * 5 ** -0.5)
    moved = torch.stack(outs, dim=2)
    assert (moved - kda_recurrent(q, k, v, beta, g)[0]).abs().max() > 1e-2
    same = g[..., :1].expand_as(g).contiguous()  # one gate for every channel: they commute
    state, outs = torch.zeros(2, 3, 5, 4, dtype=torch.float64), []
    for t in range(6):
        kt, bt, vt = k[:, :, t], beta[:, :, t, None, None], v[:, :, t]
        decayed = same[:, :, t].exp()[..., :, None] * state
        state = decayed - bt * kt[..., :, None] * (kt[..., None, :] @ decayed) + bt * kt[..., :, None] * vt[..., None, :]
        outs.append(torch.einsum("bhij,bhi->bhj", state, q[:, :, t]) * 5 ** -0.5)
    assert_close(torch.stack(outs, dim=2), kda_recurrent(q, k, v, beta, same)[0], **F64)
