"""Proof for bench/scaling.py (the measurement code, not the measurements).

Proves: the methods the benchmark times compute the same attention (explicit,
tiled and SDPA equal; the sliding window with w >= N equals them too), so the
benchmark compares like with like; fit_slope recovers the exponent of a power
law; check_targets applies each target's threshold and skips missing data;
measure_memory returns a positive peak for the explicit formula that exceeds
one (B, H, N, N) float32 score matrix.
"""

from __future__ import annotations

import pytest
import torch

from bench import scaling


def test_methods_agree_on_small_input():
    q, k, v = scaling.make_qkv(300)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    for name in ("explicit", "tiled", "sdpa"):
        torch.testing.assert_close(scaling.METHODS[name](q, k, v), ref)
    # w = 256 < N = 300: compare with a window wide enough to be full attention
    from snippets.efficiency.sliding_window import sliding_window_attention
    torch.testing.assert_close(sliding_window_attention(q, k, v, 300), ref)


@pytest.mark.parametrize("power", [1.0, 2.0, 0.5])
def test_fit_slope_recovers_power(power):
    values = {n: 3.0 * n**power for n in (256, 512, 1024, 4096)}
    assert scaling.fit_slope(values) == pytest.approx(power)
    assert scaling.fit_slope(values, min_n=1024) == pytest.approx(power)
    assert scaling.fit_slope({1: 1.0}) != scaling.fit_slope({1: 1.0})  # NaN with one point


def test_check_targets():
    times = {"tiled": {4096: 2.0}, "sdpa": {4096: 1.0, 16384: 4.0}, "sliding window": {16384: 5.0}}
    mem = {"tiled": {4096: 10}, "explicit": {4096: 100}, "sliding window": {4096: 1, 8192: 2, 16384: 4}}
    rows = {what: (ratio, ok) for what, ratio, _, ok in
            scaling.check_targets(times, mem, {"with cache": 50.0, "without cache": 10.0})}
    assert rows["tiled / sdpa time at N=4096"] == (2.0, True)
    assert rows["tiled / explicit peak memory at N=4096"] == (0.1, True)
    assert rows["sliding window / sdpa time at N=16384"] == (1.25, False)
    assert rows["sliding window memory slope, N >= 4096"][0] == pytest.approx(1.0)
    assert rows["decode tokens/s with / without KV cache"] == (5.0, True)
    assert scaling.check_targets({}, {}, None) == []


def test_measure_memory_sees_the_score_matrix():
    mem = scaling.measure_memory([512], ["explicit"])
    score_bytes = 1 * 8 * 512 * 512 * 4  # 8 MiB
    assert mem["explicit"][512] >= score_bytes
