"""bench/linear_forms.py runs at tiny sizes and times every form it promises."""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "bench"))

import linear_forms  # noqa: E402


def test_smoke_run_times_every_triple_and_mla(capsys):
    results = linear_forms.main(["--smoke"])
    for name in ("linear attention", "GLA", "DeltaNet", "Gated DeltaNet", "SSD"):
        assert set(results[name]) == {"recurrent", "parallel", "chunked"}
        assert all(t > 0 for t in results[name].values())
    assert [m for m, *_ in results["MLA"]] == [16, 64]
    assert "chunked / recurrent" in capsys.readouterr().out


def test_linear_chunked_equals_the_cumulative_sum_form():
    import torch

    q, k, v = (torch.randn(1, 2, 20, 4, dtype=torch.float64) for _ in range(3))
    want = linear_forms.linear_attention(q, k, v, causal=True)
    torch.testing.assert_close(linear_forms.linear_chunked(q, k, v), want)
    torch.testing.assert_close(linear_forms.linear_recurrent(q, k, v), want)
