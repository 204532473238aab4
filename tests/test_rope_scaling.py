"""Long-context RoPE without any library: the papers' equations written out
independently, the properties each scaling promises, and NoPE's counting layer.

The comparison with ``transformers`` lives in tests/test_rope_transformers.py.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from snippets.attention.rotary import apply_rotary, rotary_tables
from snippets.modern.long_context_rope import (
    ROPE_TYPES,
    ScaledRotaryEmbedding,
    apply_partial_rotary,
    dynamic_ntk_base,
    linear_scaling,
    llama3_scaling,
    nope_positions,
    ntk_aware_base,
    rope_frequencies,
    rope_inv_freq,
    rotary_angles,
    rotary_dims,
    yarn_attention_factor,
    yarn_ramp,
    yarn_scaling,
)

# Llama 3.1's released RoPE: d = 128, rope_theta 500000, factor 8, 1, 4, 8192.
LLAMA31 = dict(base=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
               original_max_position_embeddings=8192)


def _x(b=2, h=3, n=6, d=8, dtype=torch.float64, seed=0):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    return torch.randn(b, h, n, d, generator=g, dtype=dtype)


def turns_in_window(inv_freq: torch.Tensor, length: int) -> torch.Tensor:
    """r(i) = L / wavelength_i: how many full turns plane i makes in L tokens (YaRN eq. 17)."""
    return length * inv_freq.double() / (2 * math.pi)


# --- the base and partial rotary ------------------------------------------------


@pytest.mark.parametrize("d_rot,base", [(8, 10000.0), (128, 500000.0), (64, 1e6)])
def test_frequencies_are_the_roformer_formula(d_rot, base):
    got = rope_frequencies(d_rot, base)
    want = torch.tensor([base ** (-2 * i / d_rot) for i in range(d_rot // 2)], dtype=torch.float32)
    assert got.dtype == torch.float32 and got.shape == (d_rot // 2,)
    assert_close(got, want)
    # A larger base slows every plane but the first: longer wavelengths.
    assert (rope_frequencies(d_rot, base * 10)[1:] < got[1:]).all()


def test_default_path_is_the_guides_rope():
    """Full rotary with default frequencies is exactly the RoPE page's half-split rotation."""
    x = _x(n=7, d=8)
    inv_freq, scale = rope_inv_freq(8)
    cos, sin = rotary_angles(inv_freq, torch.arange(7))
    c_ref, s_ref = (t.float() for t in rotary_tables(torch.arange(7), 8))
    assert scale == 1.0
    assert_close(cos, c_ref)
    assert_close(sin, s_ref)
    assert_close(apply_partial_rotary(x, cos, sin), apply_rotary(x, c_ref, s_ref))


def test_rotary_dims():
    assert rotary_dims(64) == 64
    assert rotary_dims(96, 0.25) == 24  # GPT-NeoX-20B: 6144 / 64 heads, a quarter rotated
    assert rotary_dims(64, 0.5) == 32


def test_partial_rotary_rotates_the_first_dims_and_passes_the_rest():
    d, r = 16, 4
    x = _x(n=9, d=d)
    inv_freq, _ = rope_inv_freq(d, partial_rotary_factor=r / d)
    assert inv_freq.shape == (r // 2,)
    cos, sin = rotary_angles(inv_freq, torch.arange(9))
    out = apply_partial_rotary(x, cos, sin)
    assert torch.equal(out[..., r:], x[..., r:])  # the tail carries no position
    # ... and the head is a full RoPE of a width-r head, planes (i, i + r/2) inside it.
    c_ref, s_ref = rotary_tables(torch.arange(9), r)
    assert_close(out[..., :r], apply_rotary(x[..., :r].contiguous(), c_ref, s_ref))
    assert not torch.allclose(out[..., 1:, :r], x[..., 1:, :r])


def test_partial_rotary_scores_are_relative_and_the_tail_is_position_blind():
    d, r = 12, 4
    q, k = _x(n=5, d=d, seed=1), _x(n=5, d=d, seed=2)
    inv_freq, _ = rope_inv_freq(d, partial_rotary_factor=r / d)

    def scores(start):
        cos, sin = rotary_angles(inv_freq, torch.arange(start, start + 5))
        return apply_partial_rotary(q, cos, sin) @ apply_partial_rotary(k, cos, sin).transpose(-2, -1)

    assert_close(scores(123), scores(0), atol=1e-5, rtol=1e-5)  # depends on offsets only
    tail = q[..., r:] @ k[..., r:].transpose(-2, -1)  # the unrotated part, the same at any offset
    cos, sin = rotary_angles(inv_freq, torch.arange(5))
    head = apply_partial_rotary(q, cos, sin)[..., :r] @ apply_partial_rotary(k, cos, sin)[..., :r].transpose(-2, -1)
    assert_close(scores(0), head + tail)


# --- linear (position interpolation) ------------------------------------------------


def test_interpolation_divides_the_positions():
    """PI (Chen et al. 2023, eq. 4's f'(x, m) = f(x, m L / L')): theta / s at m is theta at m / s."""
    s = 4.0
    inv_freq = rope_frequencies(16)
    m = torch.arange(0, 64)
    scaled = rotary_angles(linear_scaling(inv_freq, s), m)
    moved = rotary_angles(inv_freq, m.double() / s)
    assert_close(scaled[0], moved[0])
    assert_close(scaled[1], moved[1])
    # The s L positions of the longer window turn every plane less than L positions did.
    L = 16
    assert (((s * L - 1) * linear_scaling(inv_freq, s)) < L * inv_freq).all()


def test_linear_type_divides_every_frequency():
    base_freq, _ = rope_inv_freq(32)
    scaled, scale = rope_inv_freq(32, rope_type="linear", factor=6.0)
    assert scale == 1.0
    assert_close(scaled * 6.0, base_freq)


# --- NTK-aware and dynamic ----------------------------------------------------------


@pytest.mark.parametrize("s,r", [(2.0, 16), (8.0, 128), (16.0, 64)])
def test_ntk_aware_keeps_the_fastest_plane_and_slows_the_slowest_by_s(s, r):
    b = 10000.0
    new_base = ntk_aware_base(b, s, r)
    assert new_base == pytest.approx(b * s ** (r / (r - 2)))  # YaRN eq. 16
    before, after = rope_frequencies(r, b).double(), rope_frequencies(r, new_base).double()
    ratio = before / after
    assert ratio[0].item() == pytest.approx(1.0)
    assert ratio[-1].item() == pytest.approx(s, rel=1e-5)
    i = torch.arange(r // 2, dtype=torch.float64)
    assert_close(ratio, s ** (2 * i / (r - 2)), rtol=1e-5, atol=0)  # the pressure spread over the planes


@pytest.mark.parametrize("seq_len", [0, 1, 100, 255, 256])
def test_dynamic_is_the_default_inside_the_original_window(seq_len):
    default, _ = rope_inv_freq(32)
    dynamic, scale = rope_inv_freq(32, rope_type="dynamic", factor=4.0, original_max_position_embeddings=256,
                                   seq_len=seq_len)
    assert scale == 1.0
    assert torch.equal(dynamic, default)
    assert dynamic_ntk_base(10000.0, 4.0, seq_len, 256, 32) == 10000.0


def test_dynamic_beyond_the_window():
    L, r = 256, 32
    # With factor 1 the scale is the paper's s = l' / L (YaRN section 3.3).
    for length in (257, 512, 1000):
        dyn, _ = rope_inv_freq(r, rope_type="dynamic", factor=1.0, original_max_position_embeddings=L,
                               seq_len=length)
        assert_close(dyn, rope_frequencies(r, 10000.0 * (length / L) ** (r / (r - 2))))
    # Longer inputs, slower planes; the fastest plane never moves.
    slowest = [rope_inv_freq(r, rope_type="dynamic", factor=2.0, original_max_position_embeddings=L,
                             seq_len=n)[0] for n in (300, 600, 1200)]
    assert slowest[0][-1] > slowest[1][-1] > slowest[2][-1]
    assert slowest[0][0] == slowest[2][0] == 1.0


def test_dynamic_module_rescales_per_call_and_breaks_a_stale_cache():
    L, d = 8, 8
    rope = ScaledRotaryEmbedding(d, rope_type="dynamic", factor=2.0, original_max_position_embeddings=L)
    plain = ScaledRotaryEmbedding(d)
    q, k = _x(n=L, d=d, seed=3), _x(n=20, d=d, seed=4)
    assert_close(rope(q, k[..., :L, :])[1], plain(q, k[..., :L, :])[1])  # within L: plain RoPE
    _, k_long = rope(q, k)  # 20 > L: new frequencies for every key
    inv_freq, _ = rope_inv_freq(d, rope_type="dynamic", factor=2.0, original_max_position_embeddings=L, seq_len=20)
    cos, sin = rotary_angles(inv_freq, torch.arange(20))
    assert_close(k_long, apply_partial_rotary(k, cos, sin))
    # Keys cached after rotation at length L are not the keys of length 20:
    # the page's pitfall (cache keys before RoPE, or do not use dynamic scaling with a cache).
    assert not torch.allclose(k_long[..., :L, :], plain(q, k[..., :L, :])[1])


# --- YaRN ------------------------------------------------------------------------------


YARN_CASES = [
    dict(d_rot=128, base=10000.0, factor=16.0, original_length=4096),  # Yarn-Llama-2 64k
    dict(d_rot=64, base=150000.0, factor=32.0, original_length=4096, truncate=False),  # gpt-oss's form
    dict(d_rot=64, base=10000.0, factor=4.0, original_length=512, beta_fast=16.0, beta_slow=2.0),
]


@pytest.mark.parametrize("case", YARN_CASES)
def test_yarn_ramp_is_monotone_and_bounded(case):
    kw = {k: v for k, v in case.items() if k != "factor"}
    ramp = yarn_ramp(kw.pop("d_rot"), kw.pop("base"), kw.pop("original_length"), **kw)
    assert ((ramp >= 0) & (ramp <= 1)).all()
    assert (ramp[1:] >= ramp[:-1]).all()  # fast planes first, slow planes last
    assert ramp[0] == 0 and ramp[-1] == 1


@pytest.mark.parametrize("case", YARN_CASES)
def test_yarn_keeps_fast_planes_and_interpolates_slow_ones(case):
    """Outside [beta_slow, beta_fast] turns, NTK-by-parts is YaRN eq. 20 exactly."""
    c = dict(case)
    d_rot, base, s, L = c.pop("d_rot"), c.pop("base"), c.pop("factor"), c.pop("original_length")
    beta_fast, beta_slow = c.get("beta_fast", 32.0), c.get("beta_slow", 1.0)
    theta = rope_frequencies(d_rot, base)
    got = yarn_scaling(d_rot, base, s, L, **c)
    r = turns_in_window(theta, L)
    fast, slow = r > beta_fast, r < beta_slow
    assert fast.any() and slow.any()
    assert torch.equal(got[fast], theta[fast])  # high frequencies untouched
    assert_close(got[slow], theta[slow] / s)  # low frequencies: position interpolation
    # Between them, somewhere in [theta / s, theta], and never faster than the original.
    assert (got <= theta * (1 + 1e-6)).all() and (got >= theta / s * (1 - 1e-6)).all()


def test_yarn_ramp_against_the_papers_ramp_in_turns():
    """The paper's gamma(r) is linear in the turns r; the released code is linear in
    the plane index. They agree at the ends and both stay between theta / s and theta."""
    d_rot, base, s, L = 128, 10000.0, 16.0, 4096
    theta = rope_frequencies(d_rot, base).double()
    r = turns_in_window(theta, L)
    gamma = ((r - 1.0) / (32.0 - 1.0)).clamp(0, 1)  # eq. 18, alpha = 1, beta = 32
    paper = (1 - gamma) * theta / s + gamma * theta  # eq. 20
    code = yarn_scaling(d_rot, base, s, L).double()
    ends = (r > 32.0) | (r < 1.0)
    assert_close(code[ends], paper[ends].float().double(), rtol=1e-6, atol=0)
    assert not torch.allclose(code, paper)  # the middle differs: a documented choice, not a bug


@pytest.mark.parametrize("case", YARN_CASES)
def test_yarn_ramp_is_linear_in_the_log_of_the_turns(case):
    """ln r(i) is linear in i, so the code's ramp (linear in i between the planes
    where r = beta_fast and r = beta_slow) is linear in ln r; rounding the ends
    outwards (truncate) only widens it."""
    d_rot, base, L = case["d_rot"], case["base"], case["original_length"]
    beta_fast, beta_slow = case.get("beta_fast", 32.0), case.get("beta_slow", 1.0)
    log_r = turns_in_window(rope_frequencies(d_rot, base), L).log()
    want = ((math.log(beta_fast) - log_r) / (math.log(beta_fast) - math.log(beta_slow))).clamp(0, 1)
    exact = yarn_ramp(d_rot, base, L, beta_fast=beta_fast, beta_slow=beta_slow, truncate=False)
    assert_close(exact.double(), want, rtol=0, atol=1e-5)
    rounded = yarn_ramp(d_rot, base, L, beta_fast=beta_fast, beta_slow=beta_slow, truncate=True)
    assert not torch.allclose(rounded, exact)
    assert ((rounded == 0) <= (exact == 0)).all() and ((rounded == 1) <= (exact == 1)).all()


@pytest.mark.parametrize("s,want", [(1.0, 1.0), (0.5 * 2, 1.0), (16.0, 1 + 0.1 * math.log(16.0)),
                                    (math.e ** 10, 2.0)])
def test_yarn_attention_factor_is_eq_22(s, want):
    assert yarn_attention_factor(s) == pytest.approx(want)


def test_yarn_attention_factor_scales_scores_by_its_square():
    inv_freq, m = rope_inv_freq(16, rope_type="yarn", factor=16.0, original_max_position_embeddings=64)
    assert m == pytest.approx(1 + 0.1 * math.log(16))
    q, k = _x(n=5, d=16, seed=5), _x(n=5, d=16, seed=6)
    cos1, sin1 = rotary_angles(inv_freq, torch.arange(5))
    cosm, sinm = rotary_angles(inv_freq, torch.arange(5), attention_factor=m)
    s1 = apply_partial_rotary(q, cos1, sin1) @ apply_partial_rotary(k, cos1, sin1).transpose(-2, -1)
    sm = apply_partial_rotary(q, cosm, sinm) @ apply_partial_rotary(k, cosm, sinm).transpose(-2, -1)
    assert_close(sm, m**2 * s1, rtol=1e-5, atol=1e-6)
    # DeepSeek's ratio of two coefficients: equal coefficients cancel.
    assert yarn_attention_factor(40.0, 1.0, 1.0) == 1.0
    assert yarn_attention_factor(40.0, 1.0, 0.5) == pytest.approx((0.1 * math.log(40) + 1) / (0.05 * math.log(40) + 1))


# --- Llama 3 ---------------------------------------------------------------------------


def llama3_by_turns(theta, s, low, high, L):
    """Llama 3.1's rule restated: a ramp linear in the turns r = L / wavelength, from
    r = low_freq_factor (divide by s) to r = high_freq_factor (keep)."""
    r = turns_in_window(theta, L)
    gamma = ((r - low) / (high - low)).clamp(0, 1)
    return ((1 - gamma) * theta.double() / s + gamma * theta.double()).float()


@pytest.mark.parametrize("d,base,s,L", [(128, 500000.0, 8.0, 8192), (64, 500000.0, 32.0, 8192),
                                        (32, 10000.0, 4.0, 256)])
def test_llama3_equals_the_ramp_in_turns(d, base, s, L):
    theta = rope_frequencies(d, base)
    got = llama3_scaling(theta, s, original_length=L)
    assert_close(got, llama3_by_turns(theta, s, 1.0, 4.0, L))


def test_llama3_bands_of_the_released_config():
    theta = rope_frequencies(128, 500000.0)
    got, scale = rope_inv_freq(128, rope_type="llama3", **LLAMA31)
    wavelength = 2 * math.pi / theta
    short, long = wavelength < 8192 / 4, wavelength > 8192 / 1
    middle = ~short & ~long
    assert scale == 1.0
    assert torch.equal(got[short], theta[short])  # wavelengths under 2048 tokens: untouched
    assert_close(got[long], theta[long] / 8)  # over 8192 tokens: divided by 8
    assert ((got[middle] < theta[middle]) & (got[middle] > theta[middle] / 8)).all()
    ratio = theta / got
    assert (ratio[1:] >= ratio[:-1] - 1e-6).all()  # slower planes are slowed more


# --- the dispatcher, the module, precision --------------------------------------------


def test_every_type_gives_float32_frequencies_of_the_rotated_width():
    for rope_type in ROPE_TYPES:
        inv_freq, scale = rope_inv_freq(64, rope_type=rope_type, factor=4.0, partial_rotary_factor=0.5,
                                        original_max_position_embeddings=128)
        assert inv_freq.shape == (16,) and inv_freq.dtype == torch.float32
        assert (inv_freq > 0).all() and scale >= 1.0


def test_module_decoding_matches_the_full_pass():
    rope = ScaledRotaryEmbedding(16, rope_type="yarn", factor=8.0, original_max_position_embeddings=32,
                                 partial_rotary_factor=0.5)
    q, k = _x(n=6, d=16, dtype=torch.float32, seed=7), _x(n=6, d=16, dtype=torch.float32, seed=8)
    q_full, k_full = rope(q, k)
    q_last, _ = rope(q[..., -1:, :], k)
    assert_close(q_last, q_full[..., -1:, :])
    q_off, _ = rope(q[..., :1, :], k[..., :1, :], offset=5)  # a token at position 5
    cos, sin = rotary_angles(rope.inv_freq, torch.tensor([5]), attention_factor=rope.attention_factor)
    assert_close(q_off, apply_partial_rotary(q[..., :1, :], cos, sin))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_finite_at_long_positions(dtype):
    inv_freq, scale = rope_inv_freq(128, rope_type="llama3", **LLAMA31)
    positions = torch.tensor([0, 1, 65535, 131071])
    cos, sin = rotary_angles(inv_freq, positions, attention_factor=scale)
    x = _x(b=1, h=2, n=4, d=128, dtype=torch.float32) * 100
    got = apply_partial_rotary(x.to(dtype), cos, sin)
    assert got.dtype == dtype and torch.isfinite(got).all()
    assert_close(got.float(), apply_partial_rotary(x.to(dtype).float(), cos, sin), atol=1.0, rtol=1e-2)
    rope = ScaledRotaryEmbedding(16, rope_type="yarn", factor=32.0, original_max_position_embeddings=64)
    q = _x(b=1, h=2, n=4, d=16, dtype=torch.float32).to(dtype) * 100
    out = rope(q, q, offset=2000)
    assert all(t.dtype == dtype and torch.isfinite(t).all() for t in out)


def test_gradcheck_float64():
    x = _x(b=1, h=1, n=3, d=6).requires_grad_()
    cos, sin = rotary_angles(rope_frequencies(4), torch.arange(3))
    assert torch.autograd.gradcheck(lambda x: apply_partial_rotary(x, cos.double(), sin.double()), (x,))


# --- NoPE --------------------------------------------------------------------------------


def test_a_causal_layer_without_positions_counts():
    tokens = torch.tensor([[0, 7, 7, 7, 7, 7, 7, 7], [0, 3, 9, 4, 1, 8, 2, 5]])
    got = nope_positions(tokens, bos_id=0)
    assert_close(got, torch.arange(8.0).expand(2, 8), rtol=0, atol=1e-4)
    # Without the causal mask every token sees all eight: no position comes out.
    assert_close(nope_positions(tokens, bos_id=0, causal=False), torch.full((2, 8), 7.0), rtol=0, atol=1e-4)
    long = torch.cat([torch.zeros(1, 1, dtype=torch.long), torch.ones(1, 999, dtype=torch.long)], dim=1)
    assert torch.equal(nope_positions(long, bos_id=0).round(), torch.arange(1000.0)[None])


def _nope_layer(x, causal):
    """One attention layer with content-only projections and no position at all."""
    g = torch.Generator(device=torch.get_default_device()).manual_seed(11)
    w_q, w_k, w_v = (torch.randn(x.shape[-1], x.shape[-1], generator=g, dtype=x.dtype) for _ in range(3))
    q, k, v = ((x @ w)[:, None] for w in (w_q, w_k, w_v))  # (B, 1, N, D)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)[:, 0] + x  # with a residual


def test_bidirectional_nope_cannot_tell_order_but_causal_nope_can():
    x = _x(b=1, h=1, n=6, d=4, seed=9)[:, 0]  # (B, N, D)
    perm = torch.tensor([0, 3, 1, 5, 2, 4])
    # Bidirectional: outputs just move with their tokens (permutation equivariant).
    assert_close(_nope_layer(x[:, perm], causal=False), _nope_layer(x, causal=False)[:, perm])
    # Causal: the same token at another place sees another prefix, so its output changes.
    assert not torch.allclose(_nope_layer(x[:, perm], causal=True), _nope_layer(x, causal=True)[:, perm])


# --- validation ----------------------------------------------------------------------


def test_validation_messages():
    with pytest.raises(ValueError, match=r"d_rot must be an even int >= 2, got 7"):
        rope_frequencies(7)
    with pytest.raises(ValueError, match=r"d_rot must be an even int >= 2, got 0"):
        rope_frequencies(0)
    with pytest.raises(ValueError, match=r"base must be a finite number > 1.0, got 1.0"):
        rope_frequencies(8, 1.0)
    with pytest.raises(ValueError, match=r"partial_rotary_factor must be in \(0, 1\].*got 1.5"):
        rotary_dims(64, 1.5)
    with pytest.raises(ValueError, match=r"partial_rotary_factor must be in \(0, 1\], int\(d_head \* it\) even >= 2 for d_head=10, got 0.3"):
        rotary_dims(10, 0.3)
    with pytest.raises(ValueError, match=r"rope_type must be one of \('default', 'linear', 'dynamic', 'yarn', "
                                         r"'llama3'\), got 'longrope'"):
        rope_inv_freq(64, rope_type="longrope")
    with pytest.raises(ValueError, match=r"factor must be a finite number >= 1.0, got 0.5"):
        rope_inv_freq(64, rope_type="linear", factor=0.5)
    with pytest.raises(ValueError, match=r"original_length must be an int >= 1, got None"):
        rope_inv_freq(64, rope_type="yarn", factor=4.0)
    with pytest.raises(ValueError, match=r"original_length must be an int >= 1, got 0"):
        rope_inv_freq(64, rope_type="llama3", factor=4.0, original_max_position_embeddings=0)
    with pytest.raises(ValueError, match=r"attention_factor must be a finite number > 0.0, got -1.0"):
        rotary_angles(rope_frequencies(4), torch.arange(4), attention_factor=-1.0)
    with pytest.raises(ValueError, match=r"beta_fast must be a finite number >= 32.0, got 8.0"):
        yarn_ramp(64, 10000.0, 128, beta_fast=8.0, beta_slow=32.0)
    with pytest.raises(ValueError, match=r"high_freq_factor must be a finite number >= 4.0, got 1.0"):
        llama3_scaling(rope_frequencies(8), 8.0, low_freq_factor=4.0, high_freq_factor=1.0)
    with pytest.raises(ValueError, match=r"inv_freq must be a tensor \(floating dtype, rank in \(1,\)\) on one device, got \[1.0\]"):
        linear_scaling([1.0], 2.0)
    with pytest.raises(ValueError, match=r"d_rot must be an even int >= 4, got 2"):
        ntk_aware_base(10000.0, 2.0, 2)
    with pytest.raises(ValueError, match=r"d_rot must be an even int >= 4, got 5"):
        ntk_aware_base(10000.0, 2.0, 5)
    with pytest.raises(ValueError, match=r"d_rot must be an even int >= 4, got 7"):
        dynamic_ntk_base(10000.0, 2.0, 64, 16, 7)
    with pytest.raises(ValueError, match=r"inv_freq must be a tensor \(floating .*, got torch.int64 \(4,\)"):
        linear_scaling(torch.arange(4), 2.0)
    with pytest.raises(ValueError, match=r"inv_freq must be a tensor \(floating .*, got torch.float32 \(2, 2\)"):
        llama3_scaling(torch.ones(2, 2), 8.0, original_length=64)
    with pytest.raises(ValueError, match=r"mscale must be a finite number >= 0.0, got -1.0"):
        yarn_attention_factor(4.0, -1.0, 1.0)
    with pytest.raises(ValueError, match=r"mscale_all_dim must be a finite number >= 0.0, got '1'"):
        yarn_attention_factor(4.0, 1.0, "1")


def test_apply_validation_messages():
    x = _x(n=4, d=8)
    cos, sin = rotary_angles(rope_frequencies(4), torch.arange(4))
    with pytest.raises(ValueError, match=r"positions must be a tensor \(real dtype, rank in \(1, 2\)\) .*got torch.bool"):
        rotary_angles(rope_frequencies(4), torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"inv_freq must be a tensor \(floating .*, got torch.float32 \(2, 2\)"):
        rotary_angles(torch.ones(2, 2), torch.arange(4))
    with pytest.raises(ValueError, match=r"inv_freq must be a tensor \(floating .*, got torch.bool \(2,\)"):
        rotary_angles(torch.ones(2, dtype=torch.bool), torch.arange(4))
    with pytest.raises(ValueError, match=r"cos must be a tensor \(floating .*, got torch.int64"):
        apply_partial_rotary(x, cos.long(), sin)
    with pytest.raises(ValueError, match=r"sin must be .* on cpu, got .* on meta"):
        apply_partial_rotary(x, cos, sin.to("meta"))
    bcos, bsin = rotary_angles(rope_frequencies(4), torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"B=2, N=4, r <= d=8, got \(3, 4, 2\), \(3, 4, 2\)"):
        apply_partial_rotary(x, bcos, bsin)
    with pytest.raises(ValueError, match=r"x must be a tensor \(floating .*, got None"):
        apply_partial_rotary(None, cos, sin)
    with pytest.raises(ValueError, match=r"x must be a tensor \(floating dtype, rank in \(4,\)\) .*got torch.int64"):
        apply_partial_rotary(x.long(), cos, sin)
    with pytest.raises(ValueError, match=r"cos and sin must be \(N, r/2\) or \(B, N, r/2\), B=2, N=3, r <= d=8"):
        apply_partial_rotary(x[..., :3, :], cos, sin)
    with pytest.raises(ValueError, match=r"B=2, N=4, r <= d=2, got \(4, 2\)"):
        apply_partial_rotary(x[..., :2], cos, sin)
    rope = ScaledRotaryEmbedding(8)
    with pytest.raises(ValueError, match=r"offset must be an int >= 0, got -1"):
        rope(x, x, offset=-1)
    with pytest.raises(ValueError, match=r"must have N <= M, d=8, got \(2, 3, 4, 8\), \(2, 3, 2, 8\)"):
        rope(x, x[..., :2, :])
    with pytest.raises(ValueError, match=r"must have N <= M, d=8, got \(2, 3, 4, 6\),"):
        rope(x[..., :6], x)
    with pytest.raises(ValueError, match=r"q must be a tensor \(floating .*, got \[1.0\]"):
        rope([1.0], x)
    with pytest.raises(ValueError, match=r"k must be a tensor \(floating dtype, rank in \(4,\)\) .*got torch.float64 \(4, 8\)"):
        rope(x, x[0, 0])
    with pytest.raises(ValueError, match=r"k must be .* on cpu, got .* on meta"):
        rope(x, x.to("meta"))
    with pytest.raises(ValueError, match=r"bos_id must be an int >= 0, got '0'"):
        nope_positions(torch.tensor([[0, 1, 2]]), bos_id="0")
    with pytest.raises(ValueError, match=r"tokens must hold bos_id=0 first in each row and only there, "
                                         r"got it at \(row, column\) \[\[0, 1\]\]"):
        nope_positions(torch.tensor([[1, 0, 2]]), bos_id=0)
    with pytest.raises(ValueError, match=r"got it at \(row, column\) \[\[0, 0\], \[1, 0\], \[1, 1\]\]"):
        nope_positions(torch.tensor([[0, 1, 2], [0, 0, 2]]), bos_id=0)
    with pytest.raises(ValueError, match=r"tokens must be a tensor \(integer dtype, rank in \(2,\)\) .*got torch.float32"):
        nope_positions(torch.zeros(1, 3), bos_id=0)


# --- exercises on docs/modern/long-context-rope.md ------------------------------------


def test_exercise_llama31_planes_kept_blended_and_divided():
    theta = rope_frequencies(128, 500000.0)
    got, _ = rope_inv_freq(128, rope_type="llama3", **LLAMA31)
    kept = torch.isclose(got, theta, rtol=0, atol=0)
    divided = torch.isclose(got, theta / 8, rtol=1e-6, atol=0)
    assert kept.sum().item() == 29 and divided.sum().item() == 29
    assert (~kept & ~divided).sum().item() == 6
    assert kept[:29].all() and divided[35:].all()  # planes 0-28 kept, 29-34 blended, 35-63 divided


def test_exercise_ntk_aware_middle_and_last_plane():
    theta = rope_frequencies(128, 10000.0).double()
    scaled = rope_frequencies(128, ntk_aware_base(10000.0, 8.0, 128)).double()
    assert (theta[32] / scaled[32]).item() == pytest.approx(8 ** (64 / 126), rel=1e-5)
    assert (theta[32] / scaled[32]).item() == pytest.approx(2.8755, abs=1e-4)
    assert (theta[63] / scaled[63]).item() == pytest.approx(8.0, rel=1e-5)


def test_exercise_yarn_attention_factor_for_16x():
    m = yarn_attention_factor(16.0)
    assert m == pytest.approx(1.2773, abs=1e-4)
    assert m**2 == pytest.approx(1.6314, abs=1e-4)


def test_exercise_swapping_two_tokens_under_nope():
    """Swap tokens 1 and 2: one causal NoPE layer changes only outputs 1 and 2;
    a second layer carries the change to every later token."""
    x = _x(b=1, h=1, n=6, d=4, seed=10)[:, 0]
    swapped = x[:, [0, 2, 1, 3, 4, 5]]
    one, one_swapped = _nope_layer(x, True), _nope_layer(swapped, True)
    assert_close(one_swapped[:, 3:], one[:, 3:])  # same prefix set, same query: same output
    assert_close(one_swapped[:, 0], one[:, 0])
    assert not torch.allclose(one_swapped[:, 1], one[:, 2])  # token 2 moved up and lost a key
    two, two_swapped = _nope_layer(one, True), _nope_layer(one_swapped, True)
    assert not torch.allclose(two_swapped[:, 3:], two[:, 3:])
