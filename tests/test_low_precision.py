"""Tolerances and FP8 attention: ulps against bit patterns, the error ratio
against a kernel that is right and one that is not, FP8 scales and rotations
against float64 attention."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from snippets.efficiency import low_precision as LP
from snippets.efficiency.tiled_attention import tiled_attention
from tolerance import assert_within_baseline

E4M3 = torch.float8_e4m3fn
BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16, E4M3: torch.uint8}


# --- ulps ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", list(BITS))
def test_ulp_is_the_gap_to_the_next_number(dtype):
    """One more in the bit pattern is the next number up: the gap is one ulp."""
    torch.manual_seed(0)
    fi = torch.finfo(dtype)
    x = torch.cat([torch.rand(200) * 2 ** torch.randint(-8, 8, (200,)).float(),
                   torch.tensor([1.0, 2.0, 3.0, fi.tiny, fi.tiny / 4])]).to(dtype)
    keep = (x.float() > 0) & (x.float() < fi.max)  # E4M3 has no comparisons of its own
    x = x[keep]
    nxt = (x.view(BITS[dtype]) + 1).view(dtype)  # positive numbers: bits increase with value
    gap = nxt.double() - x.double()
    torch.testing.assert_close(LP.ulp(x.double(), dtype), gap, rtol=0, atol=0)


def test_known_ulps_and_limits():
    one = torch.tensor([1.0])
    assert LP.ulp(one, torch.bfloat16).item() == 2.0**-7
    assert LP.ulp(one, torch.float16).item() == 2.0**-10
    assert LP.ulp(one, E4M3).item() == 2.0**-3
    assert LP.ulp(torch.tensor([300.0]), E4M3).item() == 32.0  # 256 <= x < 448: steps of 32
    assert torch.finfo(E4M3).max == 448.0 and torch.finfo(torch.float8_e5m2).max == 57344.0


def test_the_cast_saturates_so_the_scale_must_come_first():
    """float8_e4m3fn has no infinity: the CPU's cast clamps to 448 (NaN stays
    NaN), CUDA's gave NaN (H200, torch 2.11). A value of 1000 comes back as 448,
    a 55 % error, or as NaN, unless it is scaled first."""
    x = torch.tensor([1000.0, -1e6, float("inf"), float("nan")])
    back = x.to(E4M3).float()
    if back.device.type == "cpu":
        assert back[:3].tolist() == [448.0, -448.0, 448.0] and back[3].isnan()
    else:
        assert ((back[:3].abs() == 448) | back[:3].isnan()).all() and back[3].isnan()
    scaled = LP.fp8_quantize(torch.tensor([[1000.0, 3.0]]))
    assert abs(scaled[0, 0].item() - 1000.0) <= 1e-4  # 448 / scale: float32's rounding only


# --- the error ratio ---------------------------------------------------------


def _rounded(dtype, n=384, seed=0):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    q, k, v = (torch.randn(2, 4, n, 64, generator=g) for _ in range(3))
    low = [t.to(dtype) for t in (q, k, v)]
    exact = F.scaled_dot_product_attention(*(t.double() for t in low))  # same rounded inputs
    return low, exact


def _exp_sum_in_low_precision(q, k, v):
    """Softmax without the max shift and with its sums in q's dtype: a real bug."""
    w = torch.exp((q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5)
    return (w / w.sum(-1, keepdim=True)) @ v


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_ratio_passes_tiled_attention_and_fails_a_low_precision_softmax(dtype):
    low, exact = _rounded(dtype)
    baseline = F.scaled_dot_product_attention(*low)
    good = LP.error_ratio(tiled_attention(*low, block_size_k=64), baseline, exact)
    bad = LP.error_ratio(_exp_sum_in_low_precision(*low), baseline, exact)
    assert good <= 2.0, f"tiled attention is {good:.2f}x PyTorch's error"
    assert bad > 2.0, f"the low-precision softmax passed: {bad:.2f}x PyTorch's error"
    assert_within_baseline(tiled_attention(*low, block_size_k=64), baseline, exact)
    with pytest.raises(AssertionError, match="times the baseline's error"):
        assert_within_baseline(_exp_sum_in_low_precision(*low), baseline, exact)


def test_error_ratio_is_the_quotient_of_the_worst_errors():
    exact = torch.zeros(3, dtype=torch.float64)
    out, base = torch.tensor([0.0, 3.0, -1.0]), torch.tensor([0.5, 0.0, -1.5])
    assert LP.error_ratio(out, base, exact) == 2.0
    assert LP.error_ratio(exact, exact, exact) == 0.0  # no error over no error: 0, not nan


# --- FP8 ---------------------------------------------------------------------


def test_fp8_rounding_is_within_half_an_ulp():
    """Round to nearest: every normal value moves at most half its ulp, 2^-4 relative."""
    torch.manual_seed(1)
    x = torch.randn(256, 32) * 10  # one (T, d) matrix: one scale
    back = LP.fp8_quantize(x)
    scale = 448.0 / x.abs().amax()  # float32, as the snippet computes it
    scaled = (x * scale).double()  # the numbers that were rounded
    err = (back.double() * scale.double() - scaled).abs()
    half = LP.ulp(scaled, E4M3) / 2
    assert (err <= half + 1e-6 * scaled.abs()).all()  # plus float32's division by the scale
    normal = scaled.abs() >= torch.finfo(E4M3).tiny
    assert ((back.double() - x.double()).abs() <= 2.0**-4 * x.double().abs() + 1e-12)[normal].all()


def test_fp8_largest_entry_is_kept_exactly():
    x = torch.randn(2, 16, 8)
    for block in (None, 4):
        back = LP.fp8_quantize(x, block=block)
        i = x.abs().argmax()
        # it maps to 448, a number of E4M3: only float32's rounding of the scale remains
        torch.testing.assert_close(back.flatten()[i], x.flatten()[i], rtol=1e-6, atol=0)


def test_per_block_scales_save_the_quiet_blocks():
    """One loud block of tokens sets a per-tensor scale that pushes the others
    into E4M3's subnormals; a scale per block keeps them at 2^-4 relative."""
    torch.manual_seed(2)
    x = torch.randn(1, 64, 32)
    x[:, :16] *= 1e5
    quiet = slice(16, None)
    rel = {}
    for block in (None, 16):
        back = LP.fp8_quantize(x, block=block)
        rel[block] = ((back - x)[:, quiet].norm() / x[:, quiet].norm()).item()
    assert rel[16] < 0.05 and rel[None] > 10 * rel[16], rel


def _outlier_qkv(outlier, seed, n=128, d=64):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    q, k, v = (torch.randn(1, 2, n, d, generator=g, dtype=torch.float64) for _ in range(3))
    q[..., 5] *= outlier  # one channel much louder than the rest, in q and k
    k[..., 5] *= outlier
    return q, k, v


def _rmse(a, b):
    return (a.double() - b).pow(2).mean().sqrt().item()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_random_hadamard_rotation_cuts_the_outlier_error(seed):
    q, k, v = _outlier_qkv(20.0, seed)
    exact = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    g = torch.Generator(device=torch.get_default_device()).manual_seed(100 + seed)
    signs = torch.randint(0, 2, (64,), generator=g) * 2 - 1
    plain = _rmse(LP.fp8_attention(q, k, v, is_causal=True), exact)
    turned = _rmse(LP.fp8_attention(q, k, v, is_causal=True,
                                    rotation=LP.hadamard(64, signs=signs, dtype=torch.float64)), exact)
    assert turned < plain / 2, f"rotated {turned:.4f} vs plain {plain:.4f}"


def test_without_outliers_the_rotation_changes_little():
    q, k, v = _outlier_qkv(1.0, 3)
    exact = F.scaled_dot_product_attention(q, k, v)
    plain = _rmse(LP.fp8_attention(q, k, v), exact)
    turned = _rmse(LP.fp8_attention(q, k, v, rotation=LP.hadamard(64, dtype=torch.float64)), exact)
    assert 0.5 < turned / plain < 2.0 and plain < 0.03


def test_the_rotation_leaves_the_scores_unchanged():
    q, k, _ = _outlier_qkv(20.0, 4)
    r = LP.hadamard(64, signs=torch.ones(64), dtype=torch.float64)
    torch.testing.assert_close(r @ r.T, torch.eye(64, dtype=torch.float64), rtol=0, atol=1e-14)
    torch.testing.assert_close((q @ r) @ (k @ r).transpose(-2, -1), q @ k.transpose(-2, -1),
                               rtol=0, atol=1e-10)
    h = LP.hadamard(8)
    torch.testing.assert_close(h.abs(), torch.full((8, 8), 8**-0.5), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fp8_attention_returns_the_input_dtype_finite(device, dtype):
    q, k, v = (torch.randn(1, 2, 32, 16, device=device).to(dtype) * 30 for _ in range(3))
    out = LP.fp8_attention(q, k, v, block=8, is_causal=True, rotation=LP.hadamard(16))
    assert out.dtype == dtype and out.device == q.device and torch.isfinite(out).all()
    assert out.shape == q.shape


def test_fp8_attention_is_causal():
    q, k, v = _outlier_qkv(1.0, 5, n=16, d=8)
    out = LP.fp8_attention(q, k, v, is_causal=True)
    k2, v2 = k.clone(), v.clone()
    k2[..., 10:, :] += 5
    v2[..., 10:, :] -= 5
    # the per-tensor scale sees the changed keys, so compare with a block that excludes them
    out_b = LP.fp8_attention(q, k, v, is_causal=True, block=8)
    out2_b = LP.fp8_attention(q, k2, v2, is_causal=True, block=8)
    torch.testing.assert_close(out_b[..., :8, :], out2_b[..., :8, :], rtol=0, atol=0)
    assert not torch.equal(out[..., 10:, :], LP.fp8_attention(q, k2, v2, is_causal=True)[..., 10:, :])


# --- the page's exercises -------------------------------------------------------


def test_exercise_ulp_of_1000():
    assert LP.ulp(torch.tensor(1000.0), torch.bfloat16).item() == 4.0
    assert torch.tensor(1001.0).to(torch.bfloat16).item() in (1000.0, 1004.0)  # at most 2 away


def test_exercise_quiet_block_step():
    scaled_max = 0.01 * 448 / 1000
    assert scaled_max < torch.finfo(E4M3).tiny  # below the smallest normal: subnormal
    step = LP.ulp(torch.tensor(scaled_max), E4M3).item()
    assert step == 2.0**-9 and round(step / scaled_max, 2) == 0.44
    x = torch.full((64, 4), 0.01)
    x[0, 0] = 1000.0
    back = LP.fp8_quantize(x)
    assert ((back[1:] - 0.01).abs() / 0.01).max() > 0.1  # the quiet entries lose their digits


# --- named errors --------------------------------------------------------------


def test_named_errors():
    q = torch.randn(1, 2, 8, 4)
    with pytest.raises(ValueError, match=r"block must be None or an int >= 1 dividing N = 8, got 3"):
        LP.fp8_attention(q, q, q, block=3)
    with pytest.raises(ValueError, match=r"k must match torch.float32 \(1, 2, 8, 4\).*got"):
        LP.fp8_attention(q, q[..., :7, :], q)
    with pytest.raises(ValueError, match=r"rotation must be None or a \(4, 4\) tensor, got"):
        LP.fp8_attention(q, q, q, rotation=torch.eye(3))
    with pytest.raises(ValueError, match=r"q must have >= 4 dims, got"):
        LP.fp8_attention(q[0], q[0], q[0])
    with pytest.raises(TypeError, match=r"q must be a floating tensor, got torch.int64"):
        LP.fp8_attention(q.long(), q, q)
    with pytest.raises(ValueError, match=r"n must be a power of two >= 1, got 12"):
        LP.hadamard(12)
    with pytest.raises(ValueError, match=r"signs must be a \(4,\) tensor of \+-1, got"):
        LP.hadamard(4, signs=torch.tensor([1, -1, 2, 1]))
    with pytest.raises(ValueError, match=r"block must be None or an int >= 1 dividing T = 8, got 0"):
        LP.fp8_quantize(q, block=0)
    with pytest.raises(ValueError, match=r"x must have >= 2 dims, got"):
        LP.fp8_quantize(torch.randn(5))
    with pytest.raises(ValueError, match=r"baseline must match .*got"):
        LP.error_ratio(q, q[0], q)
    with pytest.raises(TypeError, match=r"out must be a floating tensor, got list"):
        LP.error_ratio([1.0], q, q)
