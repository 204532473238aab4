"""ALiBi: the paper's slopes, a bias that depends only on i - j, and attention with it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from huge_scores import signed_qk
from snippets.attention.alibi import alibi_attention, alibi_bias, alibi_slopes
from tolerance import assert_within_baseline

SNIPPET = Path(__file__).resolve().parents[1] / "snippets" / "attention" / "alibi.py"


def _qkv(b=2, h=4, n=6, m=6, d=8, dtype=torch.float64, seed=0):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    return (
        torch.randn(b, h, n, d, generator=g, dtype=dtype),
        torch.randn(b, h, m, d, generator=g, dtype=dtype),
        torch.randn(b, h, m, d, generator=g, dtype=dtype),
    )


def reference_bias(slopes, n, m):
    """-m * (distance) on past keys, -inf on future keys, entry by entry."""
    h = slopes.shape[0]
    out = torch.empty(h, n, m, dtype=torch.float64)
    for head in range(h):
        for i in range(n):
            pos = i + m - n
            for j in range(m):
                out[head, i, j] = -slopes[head].item() * (pos - j) if j <= pos else -math.inf
    return out


def reference_attention(q, k, v, slopes):
    """softmax(q k^T / sqrt(d) + bias) v, written out."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + reference_bias(slopes, q.shape[-2], k.shape[-2])
    return torch.softmax(scores, dim=-1) @ v


def test_slopes_for_8_heads_are_the_papers():
    assert alibi_slopes(8).tolist() == [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256]


def test_slopes_for_16_heads_interleave_the_8_head_ones():
    # 2^(-0.5), 2^(-1), ...: the 8-head slopes are every other 16-head slope.
    s16 = alibi_slopes(16, dtype=torch.float64)
    assert_close(s16, torch.tensor([2 ** (-0.5 * h) for h in range(1, 17)], dtype=torch.float64))
    assert_close(s16[1::2], alibi_slopes(8, dtype=torch.float64))


@pytest.mark.parametrize("h", [1, 2, 3, 5, 6, 7, 12, 24])
def test_slopes_for_any_head_count_follow_the_papers_rule(h):
    # Nearest power of 2 below, then the odd-numbered slopes of twice as many heads.
    p = 2 ** int(math.floor(math.log2(h)))
    first = [2 ** (-8 * i / p) for i in range(1, p + 1)]
    extra = [2 ** (-8 * i / (2 * p)) for i in range(1, 2 * p + 1, 2)][: h - p]
    assert_close(alibi_slopes(h, dtype=torch.float64), torch.tensor(first + extra, dtype=torch.float64))


def test_slopes_for_12_heads_explicitly():
    got = alibi_slopes(12, dtype=torch.float64)
    want = [2 ** -1, 2 ** -2, 2 ** -3, 2 ** -4, 2 ** -5, 2 ** -6, 2 ** -7, 2 ** -8,
            2 ** -0.5, 2 ** -1.5, 2 ** -2.5, 2 ** -3.5]
    assert_close(got, torch.tensor(want, dtype=torch.float64))


@pytest.mark.parametrize("n, m", [(5, 5), (2, 7), (1, 4)])
def test_bias_equals_independent_bias(n, m):
    slopes = alibi_slopes(4, dtype=torch.float64)
    got = alibi_bias(slopes, n, m)
    assert got.shape == (4, n, m)
    assert_close(got, reference_bias(slopes, n, m))


def test_bias_depends_only_on_i_minus_j():
    slopes = alibi_slopes(4)
    bias = alibi_bias(slopes, 9, 9)
    for offset in range(-8, 9):
        diag = torch.diagonal(bias, offset=-offset, dim1=-2, dim2=-1)  # entries with i - j = offset
        assert (diag == diag[..., :1]).all(), offset
    # the lower-right rows of a short query block are rows of the full matrix
    assert torch.equal(alibi_bias(slopes, 3, 9), bias[:, -3:, :])


def test_non_causal_is_symmetric():
    slopes = alibi_slopes(2, dtype=torch.float64)
    bias = alibi_bias(slopes, 5, 5, causal=False)
    assert torch.isfinite(bias).all()
    assert_close(bias, bias.transpose(-2, -1))
    assert_close(bias[1, 4, 0], -slopes[1] * 4)


@pytest.mark.parametrize("n, m", [(6, 6), (2, 6)])
def test_attention_equals_written_out_equation(n, m):
    q, k, v = _qkv(n=n, m=m)
    slopes = alibi_slopes(4, dtype=torch.float64)
    assert_close(alibi_attention(q, k, v, slopes), reference_attention(q, k, v, slopes))


def test_shifting_the_bias_by_a_row_constant_changes_nothing():
    # Exercise: the bias m * j (one constant per row away from -m (i - j)) gives the same weights.
    q, k, _ = _qkv()
    slopes = alibi_slopes(4, dtype=torch.float64).view(-1, 1, 1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(8)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    j = torch.arange(6, dtype=torch.float64)
    row_form = (scores + slopes * j).masked_fill(~causal, float("-inf"))
    assert_close(
        torch.softmax(row_form, dim=-1),
        torch.softmax(scores + alibi_bias(slopes.flatten(), 6, 6), dim=-1),
    )


def test_causal_output_unchanged_when_future_changes():
    q, k, v = _qkv()
    slopes = alibi_slopes(4, dtype=torch.float64)
    out = alibi_attention(q, k, v, slopes)
    k2, v2 = k.clone(), v.clone()
    k2[..., 4:, :] += 3.0
    v2[..., 4:, :] -= 3.0
    assert_close(alibi_attention(q, k2, v2, slopes)[..., :4, :], out[..., :4, :])


def test_future_keys_stay_out_at_huge_scores():
    # Scores of +-3.5e9 in float32 (tests/huge_scores.py): query 0 may see only
    # key 0, which scores -3.5e9, while every future key scores +3.5e9 and
    # carries a value of 1e6. Only -inf in the bias keeps query 0 on its own
    # value; a finite fill (-1e4, even -1e9) would hand it the future.
    n = 6
    q, k = signed_qk(n, 8)
    q, k = q.expand(2, 4, n, 8), k.expand(2, 4, n, 8)
    v = 1e6 * torch.randn(2, 4, n, 8, generator=torch.Generator(device=torch.get_default_device()).manual_seed(1))
    slopes = alibi_slopes(4)
    out = alibi_attention(q, k, v, slopes)
    assert torch.equal(out[..., 0, :], v[..., 0, :])
    k2, v2 = k.clone(), v.clone()
    k2[..., 3:, :] *= 3.0
    v2[..., 3:, :] = 1e6 * torch.randn(2, 4, n - 3, 8, generator=torch.Generator(device=torch.get_default_device()).manual_seed(2))
    moved = alibi_attention(q, k2, v2, slopes)
    assert torch.isfinite(out).all()
    assert_close(moved[..., :3, :], out[..., :3, :], rtol=1e-5, atol=1.0)


def test_float16_beyond_its_range_matches_float64():
    # q . k reaches ~1e6 here, far past float16's 65504: the scores must not be
    # formed in float16. Reference: the equation in float64 on the same inputs.
    q, k, v = _qkv(b=1, h=4, n=16, m=16, d=8, dtype=torch.float32)
    q, k, v = (q * 400).half(), (k * 400).half(), v.half()
    assert (q.double() @ k.double().transpose(-2, -1)).abs().max() > 65504
    slopes = alibi_slopes(4)
    out = alibi_attention(q, k, v, slopes)
    want = reference_attention(q.double(), k.double(), v.double(), slopes.double())
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    assert_close(out.double(), want, rtol=1e-2, atol=1e-2)
    # PyTorch's SDPA in float16 with the bias as a float16 mask (slopes times
    # distances are exact there); one ulp of slack for near one-hot rows.
    bias = reference_bias(slopes, 16, 16).half()
    baseline = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    ratio = assert_within_baseline(out, baseline, want, slack=1.0)
    print(f"alibi float16 past 65504: ratio {ratio:.3g}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_finite_in_low_precision_for_long_sequences(dtype):
    q, k, v = _qkv(b=1, h=8, n=512, m=512, d=8, dtype=torch.float32)
    slopes = alibi_slopes(8)
    out = alibi_attention((q * 30).to(dtype), (k * 30).to(dtype), v.to(dtype), slopes)
    assert out.dtype == dtype and torch.isfinite(out).all()


def test_gradcheck_float64():
    q, k, v = (t.requires_grad_() for t in _qkv(b=1, h=2, n=3, m=3, d=2))
    slopes = alibi_slopes(2, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda q, k, v: alibi_attention(q, k, v, slopes), (q, k, v))


# --- validation ----------------------------------------------------------------


def test_validation():
    with pytest.raises(ValueError, match=r"n_heads must be an int > 0, got 0"):
        alibi_slopes(0)
    with pytest.raises(ValueError, match=r"slopes must be a floating tensor \(H\), got torch.float32 \(2, 2\)"):
        alibi_bias(torch.ones(2, 2), 3, 3)
    with pytest.raises(ValueError, match=r"slopes must be a floating tensor \(H\), got \[0.5\]"):
        alibi_bias([0.5], 3, 3)
    with pytest.raises(ValueError, match=r"n_keys must be an int >= 0.*, got -1"):
        alibi_bias(alibi_slopes(2), 3, -1)
    with pytest.raises(ValueError, match=r"n_keys must be an int >= 0, M >= N = 4 when causal, got 3"):
        alibi_bias(alibi_slopes(2), 4, 3)
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"k must be a floating tensor \(2, 4, M, 8\) .*, got torch.float64 \(6, 8\)"):
        alibi_attention(q, k[0, 0], v, alibi_slopes(4))
    with pytest.raises(ValueError, match=r"slopes must be a floating tensor \(4\), got torch.float32 \(8,\)"):
        alibi_attention(q, k, v, alibi_slopes(8))
    with pytest.raises(ValueError, match=r"k must be .*, M >= N = 6 when causal, got torch.float64 \(2, 4, 5, 8\)"):
        alibi_attention(q, k[..., :5, :], v[..., :5, :], alibi_slopes(4))


# --- the file stands alone ------------------------------------------------------




def test_exercise_equal_scores_give_geometric_weights():
    # With all scores equal, the weight of a key at distance delta is
    # proportional to exp(-m * delta): ALiBi alone is a recency prior.
    n = 6
    slopes = alibi_slopes(4, dtype=torch.float64)
    q = torch.zeros(1, 4, n, 8, dtype=torch.float64)
    k = torch.randn(1, 4, n, 8, dtype=torch.float64)
    v = torch.eye(n, dtype=torch.float64).expand(1, 4, n, n)  # out row i = weights of query i
    weights = alibi_attention(q, k, v, slopes)[0, :, -1, :]  # last query, (H, M)
    delta = torch.arange(n - 1, -1, -1, dtype=torch.float64)
    want = torch.exp(-slopes.view(-1, 1) * delta)
    assert_close(weights, want / want.sum(-1, keepdim=True))


def test_attention_errors_for_heads_widths_lengths_dtypes_and_slopes():
    """The checks that run before F.scaled_dot_product_attention could fail deep inside."""
    q, k, v = _qkv()
    slopes = alibi_slopes(4)
    with pytest.raises(ValueError, match=r"k must be a floating tensor \(2, 4, M, 8\) of torch.float64 on cpu, .*"
                                         r"got torch.float64 \(2, 2, 6, 8\)"):
        alibi_attention(q, k[:, :2], v, slopes)
    with pytest.raises(ValueError, match=r"k must be .*, got torch.float64 \(2, 4, 6, 4\)"):
        alibi_attention(q, k[..., :4], v, slopes)
    with pytest.raises(ValueError, match=r"v must be a floating tensor \(2, 4, 6, d_v\) .*, got torch.float64 \(2, 4, 5, 8\)"):
        alibi_attention(q, k, v[..., :5, :], slopes)
    with pytest.raises(ValueError, match=r"q must be a floating tensor \(B, H, N, d\), got torch.int64"):
        alibi_attention(q.long(), k, v, slopes)
    with pytest.raises(ValueError, match=r"k must be a floating tensor .* of torch.float64 on cpu, .*got torch.float32"):
        alibi_attention(q, k.float(), v, slopes)
    with pytest.raises(ValueError, match=r"v must be a floating tensor .* on cpu, got torch.float64 \(2, 4, 6, 8\) on meta"):
        alibi_attention(q, k, v.to("meta"), slopes)
    with pytest.raises(ValueError, match=r"slopes must be a floating tensor \(4\), got \[0.25, "):
        alibi_attention(q, k, v, slopes.tolist())
    with pytest.raises(ValueError, match=r"slopes must be a floating tensor \(4\), got torch.int64"):
        alibi_attention(q, k, v, slopes.long())
    with pytest.raises(ValueError, match=r"dtype must be a floating torch.dtype, got torch.int64"):
        alibi_slopes(4, dtype=torch.int64)
