"""Sliding-window attention equals dense attention under the banded mask."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from huge_scores import assert_matches, expected_output, signed_qk
from snippets.efficiency.sliding_window import (
    sliding_window_attention,
    sliding_window_mask,
)
from tolerance import assert_within_baseline

SNIPPET = Path(__file__).resolve().parents[1] / "snippets" / "efficiency" / "sliding_window.py"


def _qkv(b=2, h=3, n=11, d=8, dtype=torch.float32, seed=0):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    return tuple(torch.randn(b, h, n, d, generator=g, dtype=dtype) for _ in range(3))


def _dense(q, k, v, window, causal):
    mask = sliding_window_mask(q.shape[-2], window, causal=causal)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


# --- the mask, against the definition written out entry by entry -------------


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("window", [1, 2, 3, 7, 20])
def test_mask_matches_definition(causal, window):
    n = 7
    mask = sliding_window_mask(n, window, causal=causal)
    assert mask.shape == (n, n) and mask.dtype == torch.bool
    for i in range(n):
        for j in range(n):
            want = (i - window < j <= i) if causal else abs(i - j) < window
            assert bool(mask[i, j]) == want, (i, j)


def test_mask_window_covering_everything_is_causal_or_full():
    n = 6
    assert torch.equal(sliding_window_mask(n, n), torch.ones(n, n).tril().bool())
    assert torch.equal(sliding_window_mask(n, n, causal=False), torch.ones(n, n, dtype=torch.bool))


# --- chunked == dense ----------------------------------------------------------


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(
    "n, window, chunk",
    [
        (11, 3, 4),  # N not divisible by the chunk
        (11, 3, 1),  # one query at a time
        (11, 1, 4),  # window 1: each query sees only itself
        (11, 11, 4),  # window == N
        (11, 50, 3),  # window > N
        (11, 4, 50),  # one chunk bigger than N
        (12, 5, 5),  # chunk == window, N divisible
        (11, 3, None),  # default chunk
    ],
)
def test_chunked_equals_dense(causal, n, window, chunk):
    q, k, v = _qkv(n=n)
    got = sliding_window_attention(q, k, v, window, causal=causal, chunk_size=chunk)
    assert got.shape == (2, 3, n, 8)
    assert_close(got, _dense(q, k, v, window, causal))


def test_window_one_returns_values():
    q, k, v = _qkv(n=9)
    assert_close(sliding_window_attention(q, k, v, 1, chunk_size=4), v)
    assert_close(sliding_window_attention(q, k, v, 1, causal=False, chunk_size=4), v)


def test_large_window_is_full_attention():
    q, k, v = _qkv(n=10)
    assert_close(
        sliding_window_attention(q, k, v, 10, chunk_size=3),
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
    )
    assert_close(
        sliding_window_attention(q, k, v, 10, causal=False, chunk_size=3),
        F.scaled_dot_product_attention(q, k, v),
    )


def test_value_width_may_differ_and_leading_dims_free():
    g = torch.Generator(device=torch.get_default_device()).manual_seed(1)
    q = torch.randn(5, 13, 4, generator=g)
    k = torch.randn(5, 13, 4, generator=g)
    v = torch.randn(5, 13, 6, generator=g)
    got = sliding_window_attention(q, k, v, 4, chunk_size=5)
    assert got.shape == (5, 13, 6)
    assert_close(got, _dense(q, k, v, 4, True))


def test_empty_sequence():
    q = torch.randn(1, 2, 0, 4)
    assert sliding_window_attention(q, q, q, 3).shape == (1, 2, 0, 4)


# --- properties ----------------------------------------------------------------


def test_keys_outside_the_window_never_matter():
    q, k, v = _qkv(n=12)
    window = 3
    out = sliding_window_attention(q, k, v, window, chunk_size=5)
    # Query 9 sees keys 7, 8, 9. Change every other key and value.
    k2, v2 = k.clone(), v.clone()
    k2[..., :7, :] += 5.0
    v2[..., :7, :] -= 5.0
    k2[..., 10:, :] += 5.0
    v2[..., 10:, :] -= 5.0
    out2 = sliding_window_attention(q, k2, v2, window, chunk_size=5)
    assert_close(out2[..., 9, :], out[..., 9, :])
    assert not torch.allclose(out2[..., 6, :], out[..., 6, :])


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("window, chunk", [(1, 3), (3, 2), (3, 4)])
def test_keys_outside_the_window_stay_out_at_huge_scores(causal, window, chunk):
    # Scores of +-3.5e9 in float32 (tests/huge_scores.py): every key outside a
    # query's band outscores the keys inside it, and a query whose band holds
    # only itself (query 0 when causal, every query when w = 1) has a single
    # allowed score of -3.5e9. Values are 1e6. Only -inf keeps the outside keys
    # at weight 0; a finite fill (-1e4, even -1e9) would hand them those rows.
    n = 8
    q, k = signed_qk(n, 8)
    q, k = q.expand(2, 2, n, 8), k.expand(2, 2, n, 8)
    v = 1e6 * torch.randn(2, 2, n, 5, generator=torch.Generator(device=torch.get_default_device()).manual_seed(4))
    out = sliding_window_attention(q, k, v, window, causal=causal, chunk_size=chunk)
    assert_matches(out, expected_output(v, sliding_window_mask(n, window, causal=causal)))
    if causal:
        assert torch.equal(out[..., 0, :], v[..., 0, :])  # query 0 sees only itself


def test_causal_output_unchanged_when_future_changes():
    q, k, v = _qkv(n=10)
    out = sliding_window_attention(q, k, v, 4, chunk_size=3)
    q2, k2, v2 = q.clone(), k.clone(), v.clone()
    for t in (q2, k2, v2):
        t[..., 6:, :] = torch.randn_like(t[..., 6:, :])
    out2 = sliding_window_attention(q2, k2, v2, 4, chunk_size=3)
    assert_close(out2[..., :6, :], out[..., :6, :])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("spread", [200.0, 3.0])  # one-hot rows; scores of a few units
def test_finite_for_large_logits(dtype, spread):
    q, k, v = _qkv(n=10, dtype=torch.float32)
    q, k, v = (q * spread).to(dtype), (k * spread).to(dtype), v.to(dtype)
    out = sliding_window_attention(q, k, v, 3, chunk_size=4)
    assert out.dtype == dtype
    assert torch.isfinite(out).all()
    ref = _dense(q.float(), k.float(), v.float(), 3, True)
    assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)
    # PyTorch's SDPA with the window as a mask, in the same dtype; at spread
    # 200 the rows are one-hot and both may be exact, hence one ulp of slack.
    exact = _dense(q.double(), k.double(), v.double(), 3, True)
    # In float32 both errors are a few ulps, where the chunked summation order
    # alone moves the ratio near 2 (2.16 measured): allow 4 there.
    factor = 4.0 if dtype == torch.float32 else 2.0
    slack = 1.0 if spread > 10 else 0.0
    ratio = assert_within_baseline(out, _dense(q, k, v, 3, True), exact, factor=factor, slack=slack)
    print(f"sliding window {dtype} spread {spread}: ratio {ratio:.3g}")


def test_gradcheck_float64():
    q, k, v = (t.requires_grad_() for t in _qkv(b=1, h=1, n=5, d=3, dtype=torch.float64))
    assert torch.autograd.gradcheck(
        lambda q, k, v: sliding_window_attention(q, k, v, 2, causal=False, chunk_size=2),
        (q, k, v),
    )


# --- validation ----------------------------------------------------------------


@pytest.mark.parametrize("window", [0, -2, 2.5])
def test_bad_window(window):
    q, k, v = _qkv(n=4)
    with pytest.raises(ValueError, match=r"window must be an int >= 1, got"):
        sliding_window_attention(q, k, v, window)
    with pytest.raises(ValueError, match=r"window must be an int >= 1, got"):
        sliding_window_mask(4, window)


def test_bad_chunk_size():
    q, k, v = _qkv(n=4)
    with pytest.raises(ValueError, match=r"chunk_size must be an int >= 1, got 0"):
        sliding_window_attention(q, k, v, 2, chunk_size=0)


def test_bad_n():
    with pytest.raises(ValueError, match=r"n must be an int >= 0, got -1"):
        sliding_window_mask(-1, 2)


def test_bad_tensors():
    q, k, v = _qkv(n=4)
    with pytest.raises(TypeError, match=r"q must be floating \(\.\.\., N, d\) like q .* got <class 'list'>"):
        sliding_window_attention([1.0], k, v, 2)
    with pytest.raises(TypeError, match=r"k must be floating .* got \(torch.int64"):
        sliding_window_attention(q, k.long(), v, 2)
    with pytest.raises(TypeError, match=r"v must be floating .* got \(torch.float32, .*\(4,\)\)"):
        sliding_window_attention(q, k, torch.randn(4), 2)
    with pytest.raises(ValueError, match=r"k must be floating .* like q .* got \(torch.float64"):
        sliding_window_attention(q, k.double(), v, 2)
    with pytest.raises(ValueError, match=r"k must be floating \(\.\.\., N, d\) like q.* \(2, 3, 4, 3\)\)"):
        sliding_window_attention(q, k[..., :3], v, 2)
    with pytest.raises(ValueError, match=r"k must be floating \(\.\.\., N, d\) like q.* \(2, 3, 3, 8\)\)"):
        sliding_window_attention(q, k[..., :3, :], v[..., :3, :], 2)


# --- the file stands alone ------------------------------------------------------




# --- exercises on docs/efficiency/sliding-window.md -------------------------------


def test_exercise_receptive_field_grows_by_window_minus_one_per_layer():
    # Stacking L causal windows of width w: the top query at position n - 1 is
    # reached by every position back to n - 1 - L (w - 1), and no further.
    n, w = 30, 4
    band = sliding_window_mask(n, w).long()
    reach = torch.eye(n, dtype=torch.long)
    for layers in range(1, 5):
        reach = (band @ reach).clamp(max=1)  # who can have influenced whom after one more layer
        seen = reach[n - 1].nonzero().flatten()
        assert seen.min().item() == n - 1 - layers * (w - 1)


def test_exercise_rolling_cache_of_w_keys_is_enough():
    # Decoding the last token needs only the last w keys and values.
    q, k, v = _qkv(n=13)
    w = 5
    full = sliding_window_attention(q, k, v, w)
    last = F.scaled_dot_product_attention(q[..., -1:, :], k[..., -w:, :], v[..., -w:, :])
    assert_close(full[..., -1:, :], last)


def test_errors_for_leading_dims_and_devices():
    q, k, v = _qkv(n=6)
    with pytest.raises(ValueError, match=r"k must be floating \(\.\.\., N, d\) like q \(v: any d_v\), "
                                         r"got \(torch.float32, device\(type='cpu'\), \(2, 2, 6, 8\)\)"):
        sliding_window_attention(q, k[:, :2], v[:, :2], 2)
    with pytest.raises(ValueError, match=r"k must be floating \(\.\.\., N, d\) like q \(v: any d_v\), "
                                         r"got \(torch.float32, device\(type='cpu'\)"):
        sliding_window_attention(q.to("meta"), k, v, 2)
