"""Tests for snippets/modern/attention_sinks.py, with torch alone.

Oracles: the sink identity softmax([s, b])[:M] @ V = (softmax(s) @ V) *
sigmoid(logsumexp(s) - b), with the plain output from
F.scaled_dot_product_attention and the logsumexp from torch.logsumexp;
the StreamingLLM mask written entry by entry; dense attention with that mask
and RoPE at the original positions; dense attention over the kept tokens
re-numbered from 0 (the positions StreamingLLM assigns). The comparison with
Hugging Face's GptOssAttention is in tests/test_modern_transformers.py.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from snippets.modern.modern_block import DecoderAttention
from snippets.modern.attention_sinks import (
    LearnedSinks,
    SinkCache,
    apply_rotary,
    rotary_tables,
    sink_attention,
    sink_window_mask,
    streaming_attention,
)
from tolerance import assert_within_baseline


def qkv(b=2, h=3, n=5, m=7, d=4, dtype=torch.float64, seed=0, spread=1.0):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    q = torch.randn(b, h, n, d, generator=g, dtype=dtype) * spread
    k = torch.randn(b, h, m, d, generator=g, dtype=dtype) * spread
    v = torch.randn(b, h, m, d, generator=g, dtype=dtype)
    return q, k, v


def sdpa_with_sink(q, k, v, sinks, mask):
    """PyTorch's SDPA with the sink as one more key: a zero key whose float-mask
    bias is the sink logit, and a zero value, all in q's dtype."""
    b, h, n, _ = q.shape
    k = torch.cat([k, k.new_zeros(b, h, 1, k.shape[-1])], dim=-2)  # (B, H, M+1, d)
    v = torch.cat([v, v.new_zeros(b, h, 1, v.shape[-1])], dim=-2)  # (B, H, M+1, d_v)
    bias = torch.zeros(mask.shape, dtype=q.dtype).masked_fill(~mask, float("-inf"))
    sink = sinks.to(q.dtype).view(h, 1, 1).expand(h, n, 1)  # (H, N, 1)
    bias = torch.cat([bias.expand(h, n, -1), sink], dim=-1)  # (H, N, M+1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


def random_mask(n, m, seed=1, keep_first=True):
    mask = torch.rand(n, m, generator=torch.Generator(device=torch.get_default_device()).manual_seed(seed)) > 0.4
    if keep_first:
        mask[:, 0] = True
    return mask


# --- the learned sink ---------------------------------------------------------------


@pytest.mark.parametrize("use_mask", [False, True])
def test_sink_identity(use_mask):
    """softmax over [scores, sink], sink column dropped = plain output * sigmoid(lse - sink)."""
    q, k, v = qkv()
    sinks = torch.tensor([-1.0, 0.5, 2.0], dtype=torch.float64)
    mask = random_mask(5, 7) if use_mask else None
    scores = q @ k.transpose(-2, -1) / 2.0  # d = 4
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    plain = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)  # (B, H, N, 1)
    expected = plain * torch.sigmoid(lse - sinks.view(1, 3, 1, 1))
    assert_close(sink_attention(q, k, v, sinks, attn_mask=mask), expected, rtol=1e-12, atol=1e-12)


def test_sink_identity_with_the_weights_written_out():
    """The same output from the weights e^s / (sum e^s + e^b), summed by hand."""
    q, k, v = qkv(b=1, h=2, n=3, m=4)
    sinks = torch.tensor([0.3, -0.8], dtype=torch.float64)
    scores = q @ k.transpose(-2, -1) / 2.0
    weights = scores.exp() / (scores.exp().sum(-1, keepdim=True) + sinks.exp().view(1, 2, 1, 1))
    assert_close(sink_attention(q, k, v, sinks), weights @ v, rtol=1e-12, atol=1e-12)
    assert (weights.sum(-1) < 1).all()


def test_very_negative_sink_is_plain_attention():
    q, k, v = qkv()
    sinks = torch.full((3,), -1e4, dtype=torch.float64)
    assert_close(sink_attention(q, k, v, sinks), F.scaled_dot_product_attention(q, k, v), rtol=1e-12, atol=1e-12)


def test_fully_masked_row_goes_to_the_sink_and_returns_zeros():
    q, k, v = qkv(n=3, m=4)
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[1] = False
    sinks = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    qr = q.clone().requires_grad_()
    out = sink_attention(qr, k, v, sinks, attn_mask=mask)
    assert torch.equal(out[..., 1, :], torch.zeros_like(out[..., 1, :]))
    out.sum().backward()
    assert torch.isfinite(qr.grad).all() and torch.isfinite(sinks.grad).all()


def test_sink_gradcheck():
    q, k, v = qkv(b=1, h=2, n=3, m=3, d=2)
    sinks = torch.tensor([0.1, -0.4], dtype=torch.float64)
    mask = random_mask(3, 3)
    inputs = tuple(t.clone().requires_grad_() for t in (q, k, v, sinks))
    assert torch.autograd.gradcheck(lambda a, b, c, s: sink_attention(a, b, c, s, attn_mask=mask), inputs)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("spread", [60.0, 2.0])  # scores in the thousands; of a few units
def test_sink_half_precision_large_logits(dtype, spread):
    q, k, v = qkv(dtype=torch.float32, spread=spread)
    sinks = torch.tensor([5.0, 0.0, -5.0])
    out = sink_attention(q.to(dtype), k.to(dtype), v.to(dtype), sinks.to(dtype), attn_mask=random_mask(5, 7))
    assert out.dtype == dtype and torch.isfinite(out).all()
    ref = sink_attention(q.to(dtype).float(), k.to(dtype).float(), v.to(dtype).float(), sinks, attn_mask=random_mask(5, 7))
    assert_close(out.float(), ref, rtol=3e-2, atol=3e-2)
    low = tuple(t.to(dtype) for t in (q, k, v, sinks))
    exact = sink_attention(*(t.double() for t in low), attn_mask=random_mask(5, 7))
    baseline = sdpa_with_sink(*low, random_mask(5, 7))
    assert_close(sdpa_with_sink(*(t.double() for t in low), random_mask(5, 7)), exact)  # same math
    # One ulp of slack at spread 60 only: the rows are one-hot and SDPA may be exact.
    ratio = assert_within_baseline(out, baseline, exact, slack=1.0 if spread > 10 else 0.0)
    print(f"sinks {dtype} spread {spread}: ratio {ratio:.3g}")


def test_learned_sinks_plug_into_decoder_attention():
    torch.manual_seed(0)
    plain = DecoderAttention(8, 2).double()
    sunk = DecoderAttention(8, 2, attend=LearnedSinks(2, init=-1e4)).double()
    sunk.load_state_dict(plain.state_dict(), strict=False)
    x = torch.randn(1, 4, 8, dtype=torch.float64)
    assert_close(sunk(x), plain(x), rtol=1e-12, atol=1e-12)
    with torch.no_grad():
        sunk.attend.sinks.fill_(1.0)
    assert not torch.allclose(sunk(x), plain(x))
    assert [n for n, _ in sunk.named_parameters() if "sinks" in n] == ["attend.sinks"]


def test_exercise_half_weight_sink():
    """Exercise 2: a sink logit equal to logsumexp(scores) halves the output."""
    q, k, v = qkv(b=1, h=1, n=1, m=6)
    scores = q @ k.transpose(-2, -1) / 2.0
    sink = torch.logsumexp(scores, dim=-1).view(1)
    assert_close(sink_attention(q, k, v, sink), F.scaled_dot_product_attention(q, k, v) / 2, rtol=1e-12, atol=1e-12)


def test_exercise_share_of_equal_scores():
    """Exercise 3: M equal scores s and a sink b leave sigmoid(s + ln M - b) to the tokens."""
    m, s, b = 6, 0.7, 2.5
    q = torch.tensor([2 * s, 0.0, 0.0, 0.0], dtype=torch.float64).view(1, 1, 1, 4)  # scale 1/2: score = s
    k = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64).expand(1, 1, m, 4)
    v = torch.ones(1, 1, m, 1, dtype=torch.float64)  # the output is the tokens' total weight
    share = sink_attention(q, k, v, torch.tensor([b], dtype=torch.float64)).item()
    assert share == pytest.approx(1 / (1 + math.exp(b - s - math.log(m))), rel=1e-12)


# --- StreamingLLM: the mask and the cache -------------------------------------------


@pytest.mark.parametrize("n_sink, window", [(0, 3), (2, 3), (4, 1), (3, 20)])
def test_sink_window_mask_matches_definition(n_sink, window):
    n = 9
    mask = sink_window_mask(n, n, n_sink, window)
    assert mask.shape == (n, n) and mask.dtype == torch.bool
    for i in range(n):
        for j in range(n):
            assert bool(mask[i, j]) == (j <= i and (j < n_sink or i - j < window)), (i, j)


def test_sink_window_mask_is_aligned_to_the_lower_right():
    full = sink_window_mask(10, 10, 2, 3)
    assert torch.equal(sink_window_mask(4, 10, 2, 3), full[6:])


def test_cache_never_grows_past_sinks_plus_window_over_a_long_decode():
    n_sink, window, steps = 4, 6, 400
    cache = SinkCache(n_sink, window)
    g = torch.Generator(device=torch.get_default_device()).manual_seed(0)
    stream = torch.randn(1, 2, steps, 3, generator=g)
    for t in range(steps):
        cache.update(stream[..., t : t + 1, :], -stream[..., t : t + 1, :])
        assert len(cache) == min(t + 1, n_sink + window)
        assert cache.keys.shape == (1, 2, len(cache), 3)
        kept = sorted(set(range(min(n_sink, t + 1))) | set(range(max(0, t - window + 1), t + 1)))
        assert cache.positions.tolist() == kept
    assert torch.equal(cache.keys, stream[..., cache.positions, :])
    assert torch.equal(cache.values, -stream[..., cache.positions, :])
    assert cache.seen == steps


def test_exercise_paper_example():
    """Exercise 1: four sinks, a window of four; after token 9 the cache holds
    tokens [0, 1, 2, 3, 6, 7, 8, 9], which StreamingLLM numbers 0 .. 7."""
    cache = SinkCache(4, 4)
    for t in range(10):
        cache.update(torch.full((1, 1, 1, 2), float(t)), torch.zeros(1, 1, 1, 2))
    assert cache.positions.tolist() == [0, 1, 2, 3, 6, 7, 8, 9]
    assert cache.keys[0, 0, :, 0].tolist() == [0.0, 1.0, 2.0, 3.0, 6.0, 7.0, 8.0, 9.0]
    assert torch.arange(len(cache)).tolist() == list(range(8))


# --- StreamingLLM: decoding equals dense attention ------------------------------------


def rotated(x, positions):
    cos, sin = rotary_tables(positions, x.shape[-1])
    return apply_rotary(x, cos, sin)


@pytest.mark.parametrize("n_sink, window", [(2, 3), (0, 4), (4, 1)])
def test_original_positions_equal_dense_attention_under_the_mask(n_sink, window):
    q, k, v = qkv(n=14, m=14)
    got = streaming_attention(q, k, v, n_sink=n_sink, window=window, positions="original")
    pos = torch.arange(14)
    dense = F.scaled_dot_product_attention(rotated(q, pos), rotated(k, pos), v,
                                           attn_mask=sink_window_mask(14, 14, n_sink, window))
    assert_close(got, dense, rtol=1e-10, atol=1e-10)


def test_cache_positions_equal_attention_over_the_kept_tokens_renumbered():
    """StreamingLLM's numbering: at step t the kept tokens sit at 0, 1, ..., L - 1."""
    n_sink, window, n = 2, 3, 12
    q, k, v = qkv(n=n, m=n)
    got = streaming_attention(q, k, v, n_sink=n_sink, window=window, positions="cache")
    for t in range(n):
        kept = sorted(set(range(min(n_sink, t + 1))) | set(range(max(0, t - window + 1), t + 1)))
        renumbered = torch.arange(len(kept))
        keys = rotated(k[..., kept, :], renumbered)
        query = rotated(q[..., [t], :], renumbered[-1:])
        want = F.scaled_dot_product_attention(query, keys, v[..., kept, :])
        assert_close(got[..., t : t + 1, :], want, rtol=1e-10, atol=1e-10)
    original = streaming_attention(q, k, v, n_sink=n_sink, window=window, positions="original")
    full = n_sink + window
    assert_close(got[..., :full, :], original[..., :full, :], rtol=1e-10, atol=1e-10)  # nothing evicted yet
    assert not torch.allclose(got[..., full:, :], original[..., full:, :], atol=1e-4)  # numbering differs


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_streaming_half_precision_large_logits(dtype):
    q, k, v = qkv(n=8, m=8, dtype=torch.float32, spread=40.0)
    out = streaming_attention(q.to(dtype), k.to(dtype), v.to(dtype), n_sink=2, window=3)
    assert out.dtype == dtype and torch.isfinite(out).all()


# --- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: sink_attention(*qkv(), torch.zeros(2)), ValueError, r"sinks must be torch\.\w+ \(3,\).*got torch\.\w+ \(2,\)"),
        (lambda: sink_attention(torch.ones(1, 2, 3, 4, dtype=torch.long), *qkv()[1:], torch.zeros(3)), TypeError,
         r"q must be a float tensor, got torch.int64"),
        (lambda: sink_attention(*qkv(d=4)[:2], torch.ones(2, 3, 6, 4, dtype=torch.float64), torch.zeros(3)), ValueError,
         r"v must be torch\.\w+ \(2, 3, 7, None\).*got torch\.\w+ \(2, 3, 6, 4\)"),
        (lambda: sink_attention(*qkv(), torch.zeros(3), attn_mask=torch.ones(5, 7)), ValueError,
         r"attn_mask must be bool and broadcast to .* got torch.float32"),
        (lambda: sink_attention(*qkv(), torch.zeros(3), attn_mask=torch.ones(5, 6, dtype=torch.bool)), ValueError,
         r"attn_mask must be bool and broadcast to \(2, 3, 5, 7\) on cpu, got torch.bool \(5, 6\) on cpu"),
        (lambda: sink_attention(*qkv(), torch.zeros(3), attn_mask=torch.ones(3, 3, 5, 7, dtype=torch.bool)), ValueError,
         r"attn_mask must be bool and broadcast to \(2, 3, 5, 7\) on cpu, got torch.bool \(3, 3, 5, 7\)"),
        (lambda: sink_attention(*qkv()[:2], qkv()[2].float(), torch.zeros(3)), ValueError,
         r"v must be torch.float64 .* on .*, got torch.float32 .* on"),
        (lambda: sink_attention(*qkv(), torch.zeros(3, device="meta")), ValueError, r"sinks must be .* on cpu, got .* on meta"),
        (lambda: sink_attention(*qkv(), torch.zeros(3), scale=0.0), ValueError,
         r"scale must be a finite number > 0.0, got 0.0"),
        (lambda: SinkCache(2, 2).update([1.0], torch.ones(1, 1, 3, 3)), TypeError, r"k must be a float tensor, got \["),
        (lambda: SinkCache(2, 2).update(torch.ones(1, 1, 3, 3), torch.ones(1, 1, 3, 3, dtype=torch.float64)), ValueError,
         r"v must be torch.float32 .* on .*, got torch.float64 .* on"),
        (lambda: rotary_tables(torch.tensor(3), 4), ValueError, r"positions must be \(N,\) or \(B, N\)"),
        (lambda: apply_rotary(torch.ones(1, 1, 3, 4), torch.ones(3, 2, 2), torch.ones(3, 2)), ValueError,
         r"cos must be \(N, r/2\) or \(B, N, r/2\) like cos .*got .*\(3, 2, 2\)"),
        (lambda: LearnedSinks(0), ValueError, r"n_heads must be a finite number > 0.0, got 0"),
        (lambda: sink_window_mask(3, 3, -1, 2), ValueError, r"n_sink >= 0, window >= 1, got \(3, 3, -1, 2\)"),
        (lambda: sink_window_mask(3, 3, 1, 0), ValueError, r"window >= 1, got \(3, 3, 1, 0\)"),
        (lambda: sink_window_mask(4, 3, 1, 2), ValueError, r"0 <= n_queries <= n_keys, .*got \(4, 3, 1, 2\)"),
        (lambda: SinkCache(2, 0), ValueError, r"window >= 1, got n_sink=2, window=0"),
        (lambda: SinkCache(-1, 2), ValueError, r"need n_sink >= 0, .*got n_sink=-1"),
        (lambda: SinkCache(2, 2).update(torch.ones(1, 1, 2, 3), torch.ones(1, 1, 3, 3)), ValueError,
         r"v must be torch\.\w+ \(1, 1, 2, None\).*got torch\.\w+ \(1, 1, 3, 3\)"),
        (lambda: streaming_attention(*qkv(n=5, m=7), n_sink=1, window=2), ValueError,
         r"q and k must have one length N .*got 5, 7, 'cache'"),
        (lambda: streaming_attention(*qkv(n=5, m=5), n_sink=1, window=2, positions="text"), ValueError,
         r"positions be 'cache' or 'original', got 5, 5, 'text'"),
        (lambda: streaming_attention(*qkv(n=5, m=5), n_sink=1, window=2, base=1.0), ValueError,
         r"base > 1, got .*base=1.0"),
    ],
)
def test_bad_input_raises_named_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_cache_rejects_a_batch_of_another_shape():
    cache = SinkCache(1, 2)
    cache.update(torch.ones(1, 2, 1, 3), torch.ones(1, 2, 1, 3))
    with pytest.raises(ValueError, match=r"k must be torch\.\w+ \(1, 2, None, 3\).*got torch\.\w+ \(2, 2, 1, 3\)"):
        cache.update(torch.ones(2, 2, 1, 3), torch.ones(2, 2, 1, 3))
    with pytest.raises(ValueError, match=r"v must be torch\.\w+ \(1, 2, 1, 3\).*got torch\.\w+ \(1, 2, 1, 4\)"):
        cache.update(torch.ones(1, 2, 1, 3), torch.ones(1, 2, 1, 4))
    with pytest.raises(ValueError, match=r"k must be torch.float32 .* on cpu, got torch.float64 .* on cpu"):
        cache.update(torch.ones(1, 2, 1, 3, dtype=torch.float64), torch.ones(1, 2, 1, 3))
    assert len(cache) == 1  # nothing was appended by the refused updates


# --- planted-bug classes: extreme scores, half precision, an independent RoPE oracle ---------


def shifted_scores(q, k, shift):
    """q' = [q, shift / scale], k' = [k, 1]: every score moves by ``shift``, nothing else changes."""
    scale = q.shape[-1] ** -0.5
    q2 = torch.cat((q, torch.full_like(q[..., :1], shift / scale)), -1)
    k2 = torch.cat((k, torch.ones_like(k[..., :1])), -1)
    return q2, k2, scale


def test_sink_attention_is_shift_invariant_far_below_zero():
    """Shift every score and the sink by -1e10: softmax does not move, and a
    masked key still gets exactly nothing (a finite fill in place of -inf,
    e.g. -1e9, would now outweigh every real key)."""
    q, k, v = qkv()
    mask = random_mask(5, 7)
    sinks = torch.randn(3, dtype=torch.float64)
    want = sink_attention(q, k, v, sinks, attn_mask=mask)
    q2, k2, scale = shifted_scores(q, k, -1e10)
    got = sink_attention(q2, k2, v, sinks - 1e10, attn_mask=mask, scale=scale)
    assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("spread", [1.0, 300.0])
def test_sink_attention_half_precision_within_rounding_of_float64(dtype, spread):
    """On the same rounded inputs the half result is within twice the rounding
    error of the exact result; spread 300 gives logits beyond float16's range."""
    q, k, v = (t.to(dtype) for t in qkv(d=16, spread=spread, dtype=torch.float32))
    sinks = torch.randn(3).to(dtype)
    exact = sink_attention(q.double(), k.double(), v.double(), sinks.double())
    got = sink_attention(q, k, v, sinks).double()
    rounding = (exact.to(dtype).double() - exact).abs().max()
    assert (got - exact).abs().max() <= 2 * rounding + torch.finfo(dtype).eps


@pytest.mark.parametrize("interleaved", [False, True])
def test_the_rope_copy_equals_explicit_rotation_matrices(interleaved):
    """Independent of every other copy: each pair of dimensions turned by its own
    2 x 2 matrix at angle t * base^(-2i/d), with cos and sin from math."""
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64)
    positions = torch.tensor([0, 1, 3, 17, 250])
    cos, sin = rotary_tables(positions, 8, 100.0)
    got = apply_rotary(x, cos, sin, interleaved=interleaved)
    want = x.clone()
    for i in range(4):
        a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + 4)
        for t, p in enumerate(positions.tolist()):
            angle = p * 100.0 ** (-2 * i / 8)
            rot = torch.tensor([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]],
                               dtype=torch.float64)
            pair = torch.stack((x[..., t, a], x[..., t, b]), -1) @ rot.T
            want[..., t, a], want[..., t, b] = pair[..., 0], pair[..., 1]
    assert_close(got, want, rtol=1e-12, atol=1e-12)
