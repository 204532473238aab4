"""RoPE: the paper's rotation, relative-position scores, and the two pairings."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from snippets.attention.rotary import RotaryEmbedding, apply_rotary, rotary_cache

SNIPPET = Path(__file__).resolve().parents[1] / "snippets" / "attention" / "rotary.py"


def _x(b=2, h=3, n=6, d=8, dtype=torch.float64, seed=0):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    return torch.randn(b, h, n, d, generator=g, dtype=dtype)


def paper_rotation(t: int, d: int, base: float = 10000.0) -> torch.Tensor:
    """The block-diagonal matrix R_{Theta, t} of the paper, theta_i = base^(-2(i-1)/d), i = 1..d/2."""
    r = torch.zeros(d, d, dtype=torch.float64)
    for i in range(1, d // 2 + 1):
        a = t * base ** (-2 * (i - 1) / d)
        r0 = 2 * (i - 1)
        r[r0, r0], r[r0, r0 + 1] = math.cos(a), -math.sin(a)
        r[r0 + 1, r0], r[r0 + 1, r0 + 1] = math.sin(a), math.cos(a)
    return r


def _perm(d):
    # Interleaved planes (0,1),(2,3).. -> half-split planes (i, i + d/2).
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


def test_cache_values():
    cos, sin = rotary_cache(5, 6, dtype=torch.float64)
    assert cos.shape == sin.shape == (5, 3)
    for t in range(5):
        for i in range(3):
            assert cos[t, i].item() == pytest.approx(math.cos(t * 10000 ** (-2 * i / 6)))
            assert sin[t, i].item() == pytest.approx(math.sin(t * 10000 ** (-2 * i / 6)))


def test_interleaved_matches_the_paper_rotation_matrix():
    x = _x(n=7, d=8)
    cos, sin = rotary_cache(7, 8, dtype=torch.float64)
    got = apply_rotary(x, cos, sin, interleaved=True)
    want = torch.stack([x[..., t, :] @ paper_rotation(t, 8).T for t in range(7)], dim=-2)
    assert_close(got, want)


def test_position_zero_is_the_identity():
    x = _x(n=1)
    cos, sin = rotary_cache(4, 8, dtype=torch.float64)
    for interleaved in (True, False):
        assert_close(apply_rotary(x, cos, sin, interleaved=interleaved), x)


@pytest.mark.parametrize("interleaved", [True, False])
def test_norms_preserved(interleaved):
    x = _x(n=9)
    cos, sin = rotary_cache(9, 8, dtype=torch.float64)
    rotated = apply_rotary(x, cos, sin, interleaved=interleaved)
    assert_close(rotated.norm(dim=-1), x.norm(dim=-1))
    assert not torch.allclose(rotated[..., 1:, :], x[..., 1:, :])


@pytest.mark.parametrize("interleaved", [True, False])
def test_scores_depend_only_on_relative_position(interleaved):
    q, k = _x(n=5, seed=1), _x(n=5, seed=2)
    cos, sin = rotary_cache(200, 8, dtype=torch.float64)
    pos = torch.tensor([0, 1, 2, 3, 4])
    shift = 137

    def scores(offset):
        q_r = apply_rotary(q, cos, sin, positions=pos + offset, interleaved=interleaved)
        k_r = apply_rotary(k, cos, sin, positions=pos + offset, interleaved=interleaved)
        return q_r @ k_r.transpose(-2, -1)

    assert_close(scores(shift), scores(0))
    # ... and q at position p against k at position r equals the same pair at p + s, r + s.
    one_q, one_k = q[..., :1, :], k[..., :1, :]
    p, r = 9, 4
    def pair(p, r):
        qq = apply_rotary(one_q, cos, sin, positions=torch.tensor([p]), interleaved=interleaved)
        kk = apply_rotary(one_k, cos, sin, positions=torch.tensor([r]), interleaved=interleaved)
        return (qq * kk).sum(-1)
    assert_close(pair(p + 50, r + 50), pair(p, r))
    assert not torch.allclose(pair(p, r), pair(p, r + 1))


def test_attention_output_invariant_to_shifting_the_whole_sequence():
    q, k, v = _x(n=6, seed=3), _x(n=6, seed=4), _x(n=6, seed=5)
    cos, sin = rotary_cache(64, 8, dtype=torch.float64)
    def attend(start):
        pos = torch.arange(start, start + 6)
        qr = apply_rotary(q, cos, sin, positions=pos)
        kr = apply_rotary(k, cos, sin, positions=pos)
        return F.scaled_dot_product_attention(qr, kr, v, is_causal=True)
    assert_close(attend(40), attend(0))


def test_the_two_pairings_differ_by_a_permutation_of_dimensions():
    d = 8
    x = _x(n=6, d=d)
    cos, sin = rotary_cache(6, d, dtype=torch.float64)
    perm = _perm(d)
    inter = apply_rotary(x, cos, sin, interleaved=True)
    half = apply_rotary(x[..., perm], cos, sin, interleaved=False)
    assert_close(half, inter[..., perm])
    # So q.k scores agree when q and k are permuted the same way ...
    q, k = _x(n=6, seed=1), _x(n=6, seed=2)
    s_inter = apply_rotary(q, cos, sin, interleaved=True) @ apply_rotary(k, cos, sin, interleaved=True).transpose(-2, -1)
    s_half = apply_rotary(q[..., perm], cos, sin) @ apply_rotary(k[..., perm], cos, sin).transpose(-2, -1)
    assert_close(s_half, s_inter)
    # ... but not without the permutation: the layouts are not interchangeable.
    s_wrong = apply_rotary(q, cos, sin) @ apply_rotary(k, cos, sin).transpose(-2, -1)
    assert not torch.allclose(s_wrong, s_inter)


def test_batched_positions():
    x = _x(b=2, n=4)
    cos, sin = rotary_cache(20, 8, dtype=torch.float64)
    pos = torch.tensor([[0, 1, 2, 3], [10, 11, 12, 13]])
    got = apply_rotary(x, cos, sin, positions=pos)
    for b in range(2):
        assert_close(got[b], apply_rotary(x[b], cos, sin, positions=pos[b]))


def test_module_decoding_matches_full_sequence():
    rope = RotaryEmbedding(8)
    q, k = _x(n=6, dtype=torch.float32, seed=1), _x(n=6, dtype=torch.float32, seed=2)
    q_full, k_full = rope(q, k)
    cos, sin = rotary_cache(6, 8)
    assert_close(q_full, apply_rotary(q, cos, sin))
    assert_close(k_full, apply_rotary(k, cos, sin))
    # The last token alone, with all six keys (a KV cache): lower-right alignment.
    q_last, k_again = rope(q[..., -1:, :], k)
    assert_close(q_last, q_full[..., -1:, :])
    assert_close(k_again, k_full)
    # A longer input grows the cache instead of failing.
    long_q = _x(n=40, dtype=torch.float32)
    q_long, _ = rope(long_q, long_q, offset=3)
    cos, sin = rotary_cache(43, 8)
    assert_close(q_long, apply_rotary(long_q, cos, sin, positions=torch.arange(3, 43)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("interleaved", [True, False])
def test_low_precision(dtype, interleaved):
    x = _x(n=8, dtype=torch.float32) * 1000
    cos, sin = rotary_cache(8, 8)
    got = apply_rotary(x.to(dtype), cos, sin, interleaved=interleaved)
    assert got.dtype == dtype and torch.isfinite(got).all()
    want = apply_rotary(x.to(dtype).float(), cos, sin, interleaved=interleaved)
    assert_close(got.float(), want, atol=1.0, rtol=1e-2)


def test_gradcheck_float64():
    x = _x(b=1, h=1, n=3, d=4).requires_grad_()
    cos, sin = rotary_cache(3, 4, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda x: apply_rotary(x, cos, sin, interleaved=True), (x,))
    assert torch.autograd.gradcheck(lambda x: apply_rotary(x, cos, sin), (x,))


# --- validation ----------------------------------------------------------------


def test_cache_validation():
    with pytest.raises(ValueError, match=r"n_positions must be a non-negative int, got -1"):
        rotary_cache(-1, 8)
    with pytest.raises(ValueError, match=r"d_head must be an even int >= 2, got 7"):
        rotary_cache(4, 7)
    with pytest.raises(ValueError, match=r"base must be a number > 1, got 1.0"):
        rotary_cache(4, 8, base=1.0)
    with pytest.raises(ValueError, match=r"d_head must be an even int >= 2, got 5"):
        RotaryEmbedding(5)


def test_apply_validation():
    x = _x(n=4)
    cos, sin = rotary_cache(4, 8)
    with pytest.raises(TypeError, match=r"x must be a torch.Tensor, got list"):
        apply_rotary([1.0], cos, sin)
    with pytest.raises(TypeError, match=r"sin must be a torch.Tensor, got NoneType"):
        apply_rotary(x, cos, None)
    with pytest.raises(TypeError, match=r"x must have a floating dtype, got torch.int64"):
        apply_rotary(x.long(), cos, sin)
    with pytest.raises(ValueError, match=r"x must have at least 2 dimensions"):
        apply_rotary(torch.randn(8), cos, sin)
    with pytest.raises(ValueError, match=r"cos and sin must both be \(P, d/2\) = \(P, 3\) for a head of width d=6"):
        apply_rotary(x[..., :6], cos, sin)
    with pytest.raises(TypeError, match=r"positions must hold integers, got torch.float32"):
        apply_rotary(x, cos, sin, positions=torch.arange(4.0))
    with pytest.raises(ValueError, match=r"positions must be \(N,\) or \(B, N\) with N=4, got \(3,\)"):
        apply_rotary(x, cos, sin, positions=torch.arange(3))
    with pytest.raises(ValueError, match=r"positions must be >= 0, got a minimum of -1"):
        apply_rotary(x, cos, sin, positions=torch.tensor([-1, 0, 1, 2]))
    with pytest.raises(ValueError, match=r"positions must be < 4, the length of the cos/sin cache \(build it with n_positions > 5\), got a maximum of 5"):
        apply_rotary(x, cos, sin, positions=torch.arange(2, 6))


def test_module_validation():
    rope = RotaryEmbedding(8)
    x = _x(n=4, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"offset must be a non-negative int, got -2"):
        rope(x, x, offset=-2)
    with pytest.raises(ValueError, match=r"q may not be longer than k, got N=4 and M=2"):
        rope(x, x[..., :2, :])


# --- the file stands alone ------------------------------------------------------




# --- exercises on docs/attention/rotary.md ------------------------------------------


def test_exercise_wavelengths_of_the_planes():
    # Plane i turns by theta_i per position: wavelength 2 pi / theta_i.
    cos, sin = rotary_cache(2, 128, dtype=torch.float64)
    theta = torch.atan2(sin[1], cos[1])  # the angle after one position
    wavelength = 2 * math.pi / theta
    assert wavelength[0].item() == pytest.approx(2 * math.pi)
    assert wavelength[-1].item() == pytest.approx(2 * math.pi * 10000 ** (126 / 128))
    assert 54_000 < wavelength[-1].item() < 55_000


def test_exercise_converting_a_projection_between_pairings():
    # A q projection trained with interleaved RoPE runs with half-split RoPE
    # once its output rows (per head) are permuted.
    d, d_model = 8, 8
    g = torch.Generator(device=torch.get_default_device()).manual_seed(7)
    w_q = torch.randn(d, d_model, generator=g, dtype=torch.float64)
    w_k = torch.randn(d, d_model, generator=g, dtype=torch.float64)
    x = torch.randn(1, 1, 5, d_model, generator=g, dtype=torch.float64)
    cos, sin = rotary_cache(5, d, dtype=torch.float64)
    perm = _perm(d)
    def scores(wq, wk, interleaved):
        q = apply_rotary(x @ wq.T, cos, sin, interleaved=interleaved)
        k = apply_rotary(x @ wk.T, cos, sin, interleaved=interleaved)
        return q @ k.transpose(-2, -1)
    assert_close(scores(w_q[perm], w_k[perm], False), scores(w_q, w_k, True))


def test_apply_errors_for_devices_dtypes_and_positions():
    x = _x(n=4)
    cos, sin = rotary_cache(6, 8, dtype=torch.float64)
    with pytest.raises(TypeError, match=r"cos must have a floating dtype, got torch.int64"):
        apply_rotary(x, cos.long(), sin)
    with pytest.raises(ValueError, match=r"sin must be on x's device cpu, got meta"):
        apply_rotary(x, cos, sin.to("meta"))
    with pytest.raises(TypeError, match=r"positions must be a torch.Tensor or None, got list"):
        apply_rotary(x, cos, sin, positions=[0, 1, 2, 3])
    with pytest.raises(ValueError, match=r"positions must be on x's device cpu, got meta"):
        apply_rotary(x, cos, sin, positions=torch.arange(4, device="meta"))
    with pytest.raises(ValueError, match=r"positions of shape \(B, N\) need x of shape \(B, H, N, d\) with "
                                         r"the same B, got positions \(3, 4\) and x \(2, 3, 4, 8\)"):
        apply_rotary(x, cos, sin, positions=torch.arange(4).expand(3, 4))
    with pytest.raises(ValueError, match=r"positions of shape \(B, N\) need x of shape \(B, H, N, d\) "
                                         r"with the same B, got positions \(2, 4\) and x \(2, 4, 8\)"):
        apply_rotary(x[:, 0], cos, sin, positions=torch.arange(4).expand(2, 4))
    with pytest.raises(TypeError, match=r"dtype must be a floating torch.dtype, got torch.int64"):
        rotary_cache(4, 8, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"base must be a number > 1, got '1e4'"):
        rotary_cache(4, 8, base="1e4")


def test_module_errors_for_one_dimensional_and_mismatched_inputs():
    rope = RotaryEmbedding(8)
    x = _x(n=4)
    with pytest.raises(ValueError, match=r"q must have shape \(\.\.\., length, d_head\) with d_head=8, got shape \(8,\)"):
        rope(torch.randn(8), torch.randn(8))
    with pytest.raises(ValueError, match=r"k must have shape \(\.\.\., length, d_head\) with d_head=8, got shape \(2, 3, 4, 6\)"):
        rope(x, x[..., :6])
    with pytest.raises(TypeError, match=r"k must be a torch.Tensor, got list"):
        rope(x, [1.0])
    with pytest.raises(TypeError, match=r"q must have a floating dtype, got torch.int64"):
        rope(x.long(), x)
    with pytest.raises(TypeError, match=r"q and k must share one dtype, got torch.float64 and torch.float32"):
        rope(x, x.float())
    with pytest.raises(ValueError, match=r"q and k must be on one device, got cpu and meta"):
        rope(x, x.to("meta"))
