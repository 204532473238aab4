"""Proof for bench/gpu.py and the performance page's rendering of its files.

Proves: the CPU smoke run goes through every section (attention, window,
decoding), pairs each speed row with a passing check against the MATH backend
and writes JSON whose provenance names this machine's versions and commit;
without CUDA the full run exits non-zero and writes nothing; the validator
names what a file lacks; targets are ratios of the rows of one run; the page
renders the newest gpu-*.json, or says that none has been recorded.
"""

from __future__ import annotations

import datetime
import json
import re

import pytest
import torch

from bench import gpu


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "smoke.json"
    assert gpu.main(["--cpu-smoke", "--out", str(out)]) == 0
    return json.loads(out.read_text(encoding="utf-8"))


def test_cpu_smoke_rows_checks_and_provenance(smoke):
    gpu.validate_results(smoke)
    assert smoke["kind"] == "cpu-smoke" and smoke["targets"] == []
    assert {r["section"] for r in smoke["rows"]} == {"attention", "window", "decode"}
    for row in smoke["rows"]:
        assert row["ms"] > 0 and row["check"]["ok"], row
    methods = {(r["section"], r["method"]) for r in smoke["rows"]}
    assert ("decode", "static cache, eager") in methods and ("attention", "SDPA MATH") in methods
    p = smoke["provenance"]
    assert p["torch"] == torch.__version__ and p["device"].startswith("CPU")
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?|unknown", p["commit"]), p["commit"]
    assert datetime.datetime.fromisoformat(p["date"]).date() == datetime.datetime.now(datetime.timezone.utc).date()


def test_without_cuda_it_refuses_and_writes_nothing(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(gpu, "RESULTS", tmp_path)
    assert gpu.main([]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_validator_names_what_is_missing(smoke):
    broken = json.loads(json.dumps(smoke))
    del broken["provenance"]["cudnn"]
    with pytest.raises(ValueError, match=r"results\['provenance'\] lacks \['cudnn'\]"):
        gpu.validate_results(broken)
    broken = json.loads(json.dumps(smoke))
    broken["rows"][1]["check"] = {"ok": True}
    with pytest.raises(ValueError, match=r"results\['rows'\]\[1\]\['check'\] must name what it was checked against"):
        gpu.validate_results(broken)
    broken = json.loads(json.dumps(smoke))
    del broken["rows"][0]["ms"]
    with pytest.raises(ValueError, match=r"results\['rows'\]\[0\] lacks \['ms'\]"):
        gpu.validate_results(broken)
    with pytest.raises(ValueError, match=r"results\['schema'\] must be 1, got 7"):
        gpu.validate_results({**smoke, "schema": 7})
    with pytest.raises(ValueError, match=r"results\['rows'\] must be a non-empty list"):
        gpu.validate_results({**smoke, "rows": []})
    with pytest.raises(ValueError, match=r"results must be a dict, got list"):
        gpu.validate_results([])


def test_targets_are_ratios_within_one_run():
    def row(method, ms, **extra):
        return {"section": "attention", "method": method, "dtype": "bfloat16", "pass": "fwd", "causal": False,
                "shape": {"B": 4, "H": 16, "N": 4096, "M": 4096, "d": 128}, "ms": ms, "check": {}, **extra}

    rows = [row("Triton (this site)", 2.0), row("SDPA default", 2.2), row("SDPA FLASH", 2.0)]
    found = {t["target"]: t for t in gpu.targets(rows)}
    vs_default = found["Triton fwd / SDPA default, d=128, N=4096"]
    assert vs_default["ratio"] == pytest.approx(1.1) and vs_default["met"]
    vs_flash = found["Triton fwd / SDPA FLASH, d=128, N=4096"]
    assert vs_flash["ratio"] == pytest.approx(1.0) and not vs_flash["met"]
    assert "Triton fwd+bwd / SDPA default, d=128, N=4096" not in found  # no rows, no ratio


def test_page_renders_newest_file_or_says_none(smoke, tmp_path):
    assert gpu.render_latest(tmp_path) == gpu.NO_GPU_YET + "\n"
    assert "No GPU measurement has been recorded yet" in gpu.NO_GPU_YET
    for date, name in (("2030-01-02", "Older GPU"), ("2030-03-04", "Newer GPU")):
        data = json.loads(json.dumps(smoke))
        data["provenance"]["device"] = name
        gpu.write_results(data, tmp_path / f"gpu-{date}.json")
    text = gpu.render_latest(tmp_path)
    assert "**Newer GPU**" in text and "Older GPU" not in text and "gpu-2030-03-04.json" in text
    assert "| SDPA MATH | fwd |" in text and "static cache, eager" in text


def test_committed_results_are_valid():
    for path in sorted(gpu.RESULTS.glob("gpu-*.json")):
        gpu.validate_results(json.loads(path.read_text(encoding="utf-8")))


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present: the pass would run")
def test_gpu_pass_without_cuda_says_so_and_writes_nothing(tmp_path):
    """bench/gpu_pass.sh, the one command for a GPU machine, refuses cleanly here."""
    import os
    import subprocess
    import sys

    before = sorted(gpu.RESULTS.glob("gpu-*.json"))
    result = subprocess.run(
        ["bash", str(gpu.ROOT / "bench" / "gpu_pass.sh")],
        env={**os.environ, "PYTHON": sys.executable, "GPU_PASS_OUT": str(tmp_path / "out")},
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no CUDA device" in result.stderr
    assert sorted(gpu.RESULTS.glob("gpu-*.json")) == before and not (tmp_path / "out").exists()
