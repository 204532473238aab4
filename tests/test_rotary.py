"""RoPE: the paper's rotation, relative-position scores, and the two pairings."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from snippets.attention.rotary import RotaryEmbedding, apply_rotary, rotary_tables
import transformers_support
from tolerance import assert_within_baseline

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


def tables(n, d, start=0, **kw):
    """cos, sin for positions start .. start + n - 1."""
    return rotary_tables(torch.arange(start, start + n), d, **kw)


def rotate(x, positions, interleaved=False):
    """x rotated at the given positions, one per token."""
    cos, sin = rotary_tables(torch.as_tensor(positions), x.shape[-1])
    return apply_rotary(x, cos, sin, interleaved=interleaved)


def _perm(d):
    # Interleaved planes (0,1),(2,3).. -> half-split planes (i, i + d/2).
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


def test_table_values():
    cos, sin = tables(5, 6)
    assert cos.shape == sin.shape == (5, 3) and cos.dtype == torch.float64
    for t in range(5):
        for i in range(3):
            assert cos[t, i].item() == pytest.approx(math.cos(t * 10000 ** (-2 * i / 6)))
            assert sin[t, i].item() == pytest.approx(math.sin(t * 10000 ** (-2 * i / 6)))


def test_interleaved_matches_the_paper_rotation_matrix():
    x = _x(n=7, d=8)
    cos, sin = tables(7, 8)
    got = apply_rotary(x, cos, sin, interleaved=True)
    want = torch.stack([x[..., t, :] @ paper_rotation(t, 8).T for t in range(7)], dim=-2)
    assert_close(got, want)


def test_position_zero_is_the_identity():
    x = _x(n=1)
    cos, sin = tables(1, 8)
    for interleaved in (True, False):
        assert_close(apply_rotary(x, cos, sin, interleaved=interleaved), x)


@pytest.mark.parametrize("interleaved", [True, False])
def test_norms_preserved(interleaved):
    x = _x(n=9)
    cos, sin = tables(9, 8)
    rotated = apply_rotary(x, cos, sin, interleaved=interleaved)
    assert_close(rotated.norm(dim=-1), x.norm(dim=-1))
    assert not torch.allclose(rotated[..., 1:, :], x[..., 1:, :])


@pytest.mark.parametrize("interleaved", [True, False])
def test_scores_depend_only_on_relative_position(interleaved):
    q, k = _x(n=5, seed=1), _x(n=5, seed=2)
    pos = torch.tensor([0, 1, 2, 3, 4])
    shift = 137

    def scores(offset):
        q_r = rotate(q, pos + offset, interleaved)
        k_r = rotate(k, pos + offset, interleaved)
        return q_r @ k_r.transpose(-2, -1)

    assert_close(scores(shift), scores(0))
    # ... and q at position p against k at position r equals the same pair at p + s, r + s.
    one_q, one_k = q[..., :1, :], k[..., :1, :]
    p, r = 9, 4

    def pair(p, r):
        return (rotate(one_q, [p], interleaved) * rotate(one_k, [r], interleaved)).sum(-1)

    assert_close(pair(p + 50, r + 50), pair(p, r))
    assert not torch.allclose(pair(p, r), pair(p, r + 1))


def test_attention_output_invariant_to_shifting_the_whole_sequence():
    q, k, v = _x(n=6, seed=3), _x(n=6, seed=4), _x(n=6, seed=5)

    def attend(start):
        pos = torch.arange(start, start + 6)
        return F.scaled_dot_product_attention(rotate(q, pos), rotate(k, pos), v, is_causal=True)

    assert_close(attend(40), attend(0))


def test_the_two_pairings_differ_by_a_permutation_of_dimensions():
    d = 8
    x = _x(n=6, d=d)
    cos, sin = tables(6, d)
    perm = _perm(d)
    inter = apply_rotary(x, cos, sin, interleaved=True)
    half = apply_rotary(x[..., perm], cos, sin, interleaved=False)
    assert_close(half, inter[..., perm])
    # So q.k scores agree when q and k are permuted the same way ...
    q, k = _x(n=6, seed=1), _x(n=6, seed=2)

    def scores(q, k, interleaved):
        qr = apply_rotary(q, cos, sin, interleaved=interleaved)
        return qr @ apply_rotary(k, cos, sin, interleaved=interleaved).transpose(-2, -1)

    s_inter = scores(q, k, True)
    assert_close(scores(q[..., perm], k[..., perm], False), s_inter)
    # ... but not without the permutation: the layouts are not interchangeable.
    assert not torch.allclose(scores(q, k, False), s_inter)


def test_batched_positions():
    x = _x(b=2, n=4)
    pos = torch.tensor([[0, 1, 2, 3], [10, 11, 12, 13]])
    cos, sin = rotary_tables(pos, 8)
    assert cos.shape == (2, 4, 4)
    got = apply_rotary(x, cos, sin)
    for b in range(2):
        assert_close(got[b : b + 1], rotate(x[b : b + 1], pos[b]))


def test_partial_rotation_leaves_the_other_dimensions_alone():
    x = _x(n=5, d=8)
    cos, sin = tables(5, 4)  # r = 4 of d = 8
    got = apply_rotary(x, cos, sin)
    assert_close(got[..., 4:], x[..., 4:])
    assert_close(got[..., :4], rotate(x[..., :4].contiguous(), torch.arange(5)))


def test_float64_angles_at_large_positions():
    """Angles t * theta are formed in float64: at t = 10^6 float32 angles are off by
    up to 0.03 rad, float64 ones by 1e-10."""
    cos, _ = rotary_tables(torch.tensor([1_000_000]), 2)
    assert cos.dtype == torch.float64
    assert cos.item() == pytest.approx(math.cos(1_000_000.0), abs=1e-9)


def test_module_decoding_matches_full_sequence():
    rope = RotaryEmbedding(8)
    q, k = _x(n=6, dtype=torch.float32, seed=1), _x(n=6, dtype=torch.float32, seed=2)
    q_full, k_full = rope(q, k)
    cos, sin = tables(6, 8)
    assert_close(q_full, apply_rotary(q, cos, sin))
    assert_close(k_full, apply_rotary(k, cos, sin))
    # The last token alone, with all six keys (a KV cache): lower-right alignment.
    q_last, k_again = rope(q[..., -1:, :], k)
    assert_close(q_last, q_full[..., -1:, :])
    assert_close(k_again, k_full)
    # Any length, any offset: the tables are built for the positions asked.
    long_q = _x(n=40, dtype=torch.float32)
    q_long, _ = rope(long_q, long_q, offset=3)
    assert_close(q_long, rotate(long_q, torch.arange(3, 43)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("interleaved", [True, False])
def test_low_precision(dtype, interleaved):
    x = _x(n=8, dtype=torch.float32) * 1000
    cos, sin = tables(8, 8)
    got = apply_rotary(x.to(dtype), cos, sin, interleaved=interleaved)
    assert got.dtype == dtype and torch.isfinite(got).all()
    want = apply_rotary(x.to(dtype).float(), cos, sin, interleaved=interleaved)
    assert_close(got.float(), want, atol=1.0, rtol=1e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("interleaved", [True, False])
def test_low_precision_within_twice_hugging_faces_error(dtype, interleaved):
    """Hugging Face's RoPE in the same dtype (tables cast to it, as its models
    do) is the baseline: GPT-J's for interleaved pairs, Llama's for half-split
    pairs. Skipped without the library, except in CI."""
    if transformers_support.transformers is None and not transformers_support.IN_CI:
        pytest.skip("transformers is not installed")
    transformers_support.require_transformers()
    x = _x(n=8, dtype=torch.float32) * 1000
    cos, sin = tables(8, 8)
    got = apply_rotary(x.to(dtype), cos, sin, interleaved=interleaved)
    from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb as gptj_rope
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as llama_rope
    low = x.to(dtype)
    exact = apply_rotary(low.double(), cos.double(), sin.double(), interleaved=interleaved)
    c, s = cos.to(dtype), sin.to(dtype)  # (N, d/2)
    if interleaved:  # GPT-J takes (B, N, H, d) and tables (B, N, d/2)
        baseline = gptj_rope(low.transpose(1, 2), s.expand(2, -1, -1), c.expand(2, -1, -1)).transpose(1, 2)
    else:
        full = (torch.cat([c, c], -1).expand(2, -1, -1), torch.cat([s, s], -1).expand(2, -1, -1))
        baseline = llama_rope(low, low, *full)[0]
    # The baseline itself is right (its layout too): within one ulp of the largest entry.
    assert (baseline.double() - exact).abs().max() <= torch.finfo(dtype).eps * exact.abs().max()
    ratio = assert_within_baseline(got, baseline, exact)
    print(f"rotary {dtype} interleaved={interleaved}: ratio {ratio:.3g}")


def test_gradcheck_float64():
    x = _x(b=1, h=1, n=3, d=4).requires_grad_()
    cos, sin = tables(3, 4)
    assert torch.autograd.gradcheck(lambda x: apply_rotary(x, cos, sin, interleaved=True), (x,))
    assert torch.autograd.gradcheck(lambda x: apply_rotary(x, cos, sin), (x,))


# --- validation ----------------------------------------------------------------


def test_table_validation():
    with pytest.raises(ValueError, match=r"rotary_dim even >= 2 and base > 1, got .*rotary_dim=7"):
        tables(4, 7)
    with pytest.raises(ValueError, match=r"base > 1, got .*base=1.0"):
        tables(4, 8, base=1.0)
    with pytest.raises(ValueError, match=r"base > 1, got .*base=None"):
        tables(4, 8, base=None)
    with pytest.raises(ValueError, match=r"positions must be \(N,\) or "
                                         r"\(B, N\), .*got torch.int64 \(1, 2, 4\)"):
        rotary_tables(torch.arange(8).view(1, 2, 4), 8)
    with pytest.raises(ValueError, match=r"positions must be .*, got \[0, 1, 2\]"):
        rotary_tables([0, 1, 2], 8)
    with pytest.raises(ValueError, match=r"rotary_dim even >= 2 and base > 1, got .*rotary_dim=5"):
        RotaryEmbedding(5)


def test_a_table_shorter_than_x_is_named_not_an_index_error():
    """Four tokens and a three-row table: a ValueError naming N and the table's
    shape (once a raw IndexError, "index 3 is out of bounds")."""
    cos, sin = tables(3, 8)
    with pytest.raises(ValueError, match=r"cos must be \(N, r/2\) or \(B, N, r/2\) like cos on cpu, "
                                         r"N=4, B=2, r <= d=8, got torch.float64 \(3, 4\)"):
        apply_rotary(_x(n=4), cos, sin)
    with pytest.raises(ValueError, match=r"N=2, .*got .* \(3, 4\)"):  # nor longer
        apply_rotary(_x(n=2), cos, sin)


def test_apply_validation():
    x = _x(n=4)
    cos, sin = tables(4, 8)
    with pytest.raises(TypeError, match=r"x must be a floating tensor \(B, H, N, d\), got \[1.0\]"):
        apply_rotary([1.0], cos, sin)
    with pytest.raises(ValueError, match=r"sin must be \(N, r/2\) or \(B, N, r/2\) like cos .*, got None"):
        apply_rotary(x, cos, None)
    with pytest.raises(TypeError, match=r"x must be a floating tensor .*, got torch.int64"):
        apply_rotary(x.long(), cos, sin)
    with pytest.raises(TypeError, match=r"x must be a floating tensor .*, got torch.float32 \(8,\)"):
        apply_rotary(torch.randn(8), cos, sin)
    with pytest.raises(ValueError, match=r"B=2, r <= d=6, got .* \(4, 4\)"):
        apply_rotary(x[..., :6], cos, sin)
    with pytest.raises(ValueError, match=r"sin must be .* on cpu, .*on meta"):
        apply_rotary(x, cos, sin.to("meta"))
    with pytest.raises(ValueError, match=r"sin must be \(N, r/2\) or \(B, N, r/2\) like cos .*got .* \(4, 3\)"):
        apply_rotary(x, cos, sin[..., :3])
    with pytest.raises(ValueError, match=r"B=2, .*got .* \(3, 4, 4\)"):
        apply_rotary(x, *rotary_tables(torch.arange(4).expand(3, 4), 8))


def test_module_validation():
    rope = RotaryEmbedding(8)
    x = _x(n=4, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"offset must be an int >= 0, got N=4, M=4, offset=-2"):
        rope(x, x, offset=-2)
    with pytest.raises(ValueError, match=r"q may not be longer than k, .* got N=4, M=2, offset=0"):
        rope(x, x[..., :2, :])
    with pytest.raises(ValueError, match=r"k must be a floating tensor \(B, heads, length, 8\) on k's device, "
                                         r"got torch.float32 \(8,\)"):
        rope(torch.randn(8), torch.randn(8))
    with pytest.raises(ValueError, match=r"k must be a floating tensor \(B, heads, length, 8\) on k's device, "
                                         r"got torch.float32 \(2, 3, 4, 6\)"):
        rope(x, x[..., :6])
    with pytest.raises(ValueError, match=r"k must be a floating tensor .*, got \[1.0\]"):
        rope(x, [1.0])
    with pytest.raises(ValueError, match=r"q must be a floating tensor .*, got torch.int64"):
        rope(x.long(), x)
    with pytest.raises(ValueError, match=r"q must be .* on k's device, got torch.float32 \(2, 3, 4, 8\) on cpu"):
        rope(x, x.to("meta"))


# --- exercises on docs/attention/rotary.md ------------------------------------------


def test_exercise_wavelengths_of_the_planes():
    # Plane i turns by theta_i per position: wavelength 2 pi / theta_i.
    cos, sin = tables(2, 128)
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
    cos, sin = tables(5, d)
    perm = _perm(d)

    def scores(wq, wk, interleaved):
        q = apply_rotary(x @ wq.T, cos, sin, interleaved=interleaved)
        k = apply_rotary(x @ wk.T, cos, sin, interleaved=interleaved)
        return q @ k.transpose(-2, -1)

    assert_close(scores(w_q[perm], w_k[perm], False), scores(w_q, w_k, True))
