"""Log-linear attention: Fenwick buckets, three forms, the paper's equation, the reductions."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from snippets.linear.gated_linear_attention import gla_parallel
from snippets.linear.log_linear_attention import (
    fenwick_levels,
    log_linear_chunked,
    log_linear_mask,
    log_linear_parallel,
    log_linear_recurrent,
    log_linear_step,
)

F64 = dict(atol=1e-12, rtol=1e-12)


def _inputs(b=2, h=3, n=23, d_k=5, d_v=4, dtype=torch.float64, seed=0, levels=None, decay=1.0):
    gen = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    q = torch.randn(b, h, n, d_k, generator=gen, dtype=dtype)
    k = torch.randn(b, h, n, d_k, generator=gen, dtype=dtype)
    v = torch.randn(b, h, n, d_v, generator=gen, dtype=dtype)
    g = -decay * torch.rand(b, h, n, generator=gen, dtype=dtype)  # one decay per head
    levels = (n - 1).bit_length() + 1 if levels is None else levels
    lam = torch.rand(b, h, n, levels, generator=gen, dtype=dtype) * 2
    return q, k, v, g, lam


def buckets(t):
    """The paper's partition of keys 0 .. t for query t, from the bucket boundaries:
    level 0 is {t}; level l >= 1 exists when bit l - 1 of t is set and holds the
    2^(l-1) keys just below t - (t mod 2^(l-1))."""
    out = {0: [t]}
    for level in range(1, t.bit_length() + 1):
        if t % (1 << level) >= 1 << (level - 1):
            end = t - t % (1 << (level - 1))
            out[level] = list(range(end - (1 << (level - 1)), end))
    return out


def definition(q, k, v, g, lam, scale):
    """o_t = scale sum_l lam_t^(l) sum_{s in bucket l} (a_{s+1} ... a_t) (q_t . k_s) v_s."""
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    for t in range(q.shape[2]):
        for level, keys in buckets(t).items():
            for s in keys:
                decay = torch.exp(g[:, :, s + 1 : t + 1].sum(dim=-1))  # (B, H)
                dot = (q[:, :, t] * k[:, :, s]).sum(dim=-1)  # (B, H)
                weight = lam[:, :, t, level] * decay * dot * scale
                out[:, :, t] += weight[..., None] * v[:, :, s]
    return out


def test_levels_match_the_bucket_boundaries():
    n = 40
    levels = fenwick_levels(n)
    want = torch.full((n, n), -1, dtype=torch.int64)
    for t in range(n):
        for level, keys in buckets(t).items():
            want[t, keys] = level
    assert torch.equal(levels, want)


@pytest.mark.parametrize("t", range(0, 70))
def test_each_key_in_exactly_one_of_popcount_plus_one_buckets(t):
    parts = buckets(t)
    keys = sorted(s for part in parts.values() for s in part)
    assert keys == list(range(t + 1))  # a partition of the prefix: no key twice, none missing
    assert len(parts) == bin(t).count("1") + 1
    for level, part in parts.items():
        assert len(part) == (1 if level == 0 else 1 << (level - 1))
    row = fenwick_levels(t + 1)[t]
    assert len(set(row.tolist())) == bin(t).count("1") + 1


def test_bucket_bound_is_tight_at_two_to_the_m_minus_one():
    for t in range(1, 300):
        count = len(set(fenwick_levels(t + 1)[t].tolist()))
        assert count <= math.floor(math.log2(t)) + 2
        assert (count == math.floor(math.log2(t)) + 2) == ((t + 1) & t == 0)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 9, 100, 1000])
def test_a_length_n_sequence_uses_ceil_log2_n_plus_one_levels(n):
    used = fenwick_levels(n).max().item() + 1
    assert used == math.ceil(math.log2(n)) + 1


@pytest.mark.parametrize("n", [1, 6, 16, 23])
def test_parallel_equals_the_papers_equation_written_out(n):
    q, k, v, g, lam = _inputs(n=n)
    assert_close(log_linear_parallel(q, k, v, g, lam), definition(q, k, v, g, lam, 5 ** -0.5),
                 **F64)


def test_mask_is_the_weighted_decay():
    _, _, _, g, lam = _inputs(n=13)
    m = log_linear_mask(g, lam)
    for t in range(13):
        for level, keys in buckets(t).items():
            for s in keys:
                want = lam[:, :, t, level] * torch.exp(g[:, :, s + 1 : t + 1].sum(-1))
                assert_close(m[:, :, t, s], want, **F64)
    assert (m.triu(1) == 0).all()


@pytest.mark.parametrize("n", [1, 2, 7, 16, 33])
def test_recurrent_equals_parallel(n):
    q, k, v, g, lam = _inputs(n=n)
    assert_close(log_linear_recurrent(q, k, v, g, lam), log_linear_parallel(q, k, v, g, lam), **F64)


@pytest.mark.parametrize("chunk_size", [1, 2, 4, 8, 64])
@pytest.mark.parametrize("n", [1, 5, 16, 37])
def test_chunked_equals_parallel(chunk_size, n):
    q, k, v, g, lam = _inputs(n=n)
    out = log_linear_chunked(q, k, v, g, lam, chunk_size=chunk_size)
    assert_close(out, log_linear_parallel(q, k, v, g, lam), **F64)


def test_steps_equal_the_recurrence_and_keep_popcount_plus_one_states():
    q, k, v, g, lam = _inputs(n=20)
    states, outs = None, []
    for t in range(20):
        out, states = log_linear_step(q[:, :, t], k[:, :, t], v[:, :, t], g[:, :, t],
                                      lam[:, :, t], states, position=t)
        outs.append(out)
        live = (states.abs().amax(dim=(0, 1, 3, 4)) > 0).sum().item()
        assert live == bin(t).count("1") + 1  # the Fenwick rule, O(log t) states
    assert_close(torch.stack(outs, dim=2), log_linear_recurrent(q, k, v, g, lam), **F64)


def test_extra_levels_are_ignored():
    q, k, v, g, lam = _inputs(n=9, levels=7)
    short = lam[..., :5]
    assert_close(log_linear_parallel(q, k, v, g, lam), log_linear_parallel(q, k, v, g, short), **F64)
    assert_close(log_linear_chunked(q, k, v, g, lam, chunk_size=4),
                 log_linear_recurrent(q, k, v, g, short), **F64)


@pytest.mark.parametrize("form", ["parallel", "recurrent", "chunked"])
def test_all_weights_one_is_gated_linear_attention(form):
    """Every lambda 1: gated linear attention with one decay per head (GLA's gate
    convention, b = cumsum(g), decay exp(b_t - b_s), with g repeated over the key channels)."""
    q, k, v, g, lam = _inputs(n=29)
    ones = torch.ones_like(lam)
    fn = {"parallel": log_linear_parallel, "recurrent": log_linear_recurrent,
          "chunked": lambda *a: log_linear_chunked(*a, chunk_size=4)}[form]
    want = gla_parallel(q, k, v, g.unsqueeze(-1).expand_as(q).contiguous())
    assert_close(fn(q, k, v, g, ones), want, **F64)
    assert (fn(q, k, v, g, lam) - want).abs().max() > 1e-2  # the weights do something


def test_all_weights_one_and_no_decay_is_causal_linear_attention():
    q, k, v, g, lam = _inputs(n=29)
    ones, zero = torch.ones_like(lam), torch.zeros_like(g)
    plain = 0.5 * (q @ k.transpose(-2, -1)).tril() @ v  # unnormalised causal linear attention
    assert_close(log_linear_parallel(q, k, v, zero, ones, scale=0.5), plain, **F64)
    assert_close(log_linear_recurrent(q, k, v, zero, ones, scale=0.5), plain, **F64)
    # with a decay the same weights are gated, not plain, linear attention
    assert (log_linear_parallel(q, k, v, g, ones, scale=0.5) - plain).abs().max() > 1e-2


def test_one_level_on_reads_one_bucket():
    q, k, v, g, lam = _inputs(n=16)
    only = torch.zeros_like(lam)
    only[..., 3] = 1.0
    out = log_linear_parallel(q, k, v, g, only, scale=1.0)
    want = torch.zeros_like(out)
    for t in range(16):
        for s in buckets(t).get(3, []):
            weight = torch.exp(g[:, :, s + 1 : t + 1].sum(-1)) * (q[:, :, t] * k[:, :, s]).sum(-1)
            want[:, :, t] += weight[..., None] * v[:, :, s]
    assert_close(out, want, **F64)


def test_causal_future_tokens_change_nothing():
    q, k, v, g, lam = _inputs(n=16)
    out = log_linear_chunked(q, k, v, g, lam, chunk_size=4)
    k2, v2, g2, lam2 = k.clone(), v.clone(), g.clone(), lam.clone()
    for t in (k2, v2, lam2):
        t[:, :, 10:] = torch.randn_like(t[:, :, 10:])
    g2[:, :, 10:] = -5 * torch.rand_like(g2[:, :, 10:])
    out2 = log_linear_chunked(q, k2, v2, g2, lam2, chunk_size=4)
    assert_close(out2[:, :, :10], out[:, :, :10], **F64)
    assert (out2[:, :, 10:] - out[:, :, 10:]).abs().max() > 1e-3


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_stays_near_float32_on_long_decays(dtype):
    """N = 256 with log decays summing to about -256: finite, and within a few of its
    own roundings of the float32 result on the same rounded inputs."""
    q, k, v, g, lam = _inputs(b=1, h=2, n=256, d_k=8, d_v=8, dtype=torch.float32, decay=2.0)
    rounded = [t.to(dtype) for t in (q, k, v, g, lam)]
    ref = log_linear_parallel(*(t.float() for t in rounded))
    assert g.sum(dim=2).min() < -200
    eps = torch.finfo(dtype).eps
    forms = (log_linear_parallel, log_linear_recurrent,
             lambda *a: log_linear_chunked(*a, chunk_size=32))
    for form in forms:
        out = form(*rounded)
        assert out.dtype == dtype and torch.isfinite(out).all()
        assert (out.float() - ref).abs().max() <= 4 * eps * ref.abs().max()


def test_gradients_pass_gradcheck():
    inputs = tuple(t.requires_grad_() for t in _inputs(b=1, h=1, n=6, d_k=3, d_v=2))
    assert torch.autograd.gradcheck(lambda *a: log_linear_chunked(*a, chunk_size=2), inputs)
    assert torch.autograd.gradcheck(log_linear_recurrent, inputs)
    assert torch.autograd.gradcheck(log_linear_parallel, inputs)


def test_bad_input_is_named():
    q, k, v, g, lam = _inputs(n=5)
    with pytest.raises(TypeError, match=r"q must be a floating \(B, H, N, d_k\) tensor"):
        log_linear_parallel(q[..., 0], k, v, g, lam)
    with pytest.raises(ValueError, match=r"k must be a floating \(2, 3, 5, 5\) tensor"):
        log_linear_parallel(q, k[..., :3], v, g, lam)
    with pytest.raises(ValueError, match=r"v must be a floating \(2, 3, 5, d_v\) tensor"):
        log_linear_recurrent(q, k, v[:, :, :3], g, lam)
    with pytest.raises(ValueError, match=r"g must be a floating \(2, 3, 5\) tensor on q's"):
        log_linear_chunked(q, k, v, g[..., :4], lam)
    with pytest.raises(ValueError, match=r"lam must be a floating \(2, 3, 5, L\) tensor"):
        log_linear_parallel(q, k, v, g, lam.float())
    with pytest.raises(ValueError, match="g holds log-decays, must be <= 0, got"):
        log_linear_parallel(q, k, v, -g, lam)
    with pytest.raises(ValueError, match="lam needs at least 4 levels for 5 tokens, got 3"):
        log_linear_recurrent(q, k, v, g, lam[..., :3])
    with pytest.raises(ValueError, match="chunk_size must be a power of two, got 6"):
        log_linear_chunked(q, k, v, g, lam, chunk_size=6)
    with pytest.raises(ValueError, match="scale must be None or a finite float > 0"):
        log_linear_parallel(q, k, v, g, lam, scale=0.0)
    with pytest.raises(ValueError, match="n must be an int >= 1, got 0"):
        fenwick_levels(0)
    one = [t[:, :, 0] for t in (q, k, v, g, lam)]
    with pytest.raises(ValueError, match="position must be an int >= 0, got -1"):
        log_linear_step(*one, position=-1)
    with pytest.raises(ValueError, match="lam needs at least 5 levels for 9 tokens, got 4"):
        log_linear_step(*one, position=8)
    with pytest.raises(ValueError, match=r"states must be a floating \(2, 3, 4, 5, 4\)"):
        log_linear_step(*one, torch.zeros(2, 3, 4, 4, 5, dtype=torch.float64), position=1)
    with pytest.raises(TypeError, match=r"g must be a floating \(B, H, N\) tensor"):
        log_linear_mask(g[0], lam)


# ---------------------------------------------------------------- exercises


def test_exercise_the_buckets_of_query_twelve():
    row = fenwick_levels(13)[12]
    parts = {level: torch.nonzero(row == level).flatten().tolist() for level in set(row.tolist())}
    assert parts == {0: [12], 3: [8, 9, 10, 11], 4: list(range(8))}


def test_exercise_a_thousand_tokens():
    levels = fenwick_levels(1000)
    assert levels.max().item() + 1 == 11  # level weights
    counts = [len(set(levels[t, : t + 1].tolist())) for t in range(1000)]
    assert max(counts) == 10 and counts.index(10) == 511


def test_exercise_levels_up_to_two_are_no_sliding_window():
    levels = fenwick_levels(9)
    read = {t: [s for s in range(t + 1) if 0 <= levels[t, s] <= 2] for t in (6, 7, 8)}
    assert read == {6: [4, 5, 6], 7: [4, 5, 6, 7], 8: [8]}
