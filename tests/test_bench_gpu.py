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


def test_decoding_may_part_from_the_reference_only_at_a_tie():
    """A token changed where the logits are far apart fails; identical tokens pass."""
    from snippets.efficiency.kv_cache import TinyDecoder, generate

    torch.manual_seed(0)
    model = TinyDecoder(500, 64, 4, 2, max_len=48).eval().to(torch.bfloat16)
    prompt = torch.randint(0, 500, (1, 16))
    reference = generate(model, prompt, 24)
    same = gpu.decode_check(model, reference, reference, 16)
    assert set(same) == {"against", "same_tokens", "ok"} and same["same_tokens"] == 1.0 and same["ok"] is True
    wrong = reference.clone()
    wrong[0, 20] = (wrong[0, 20] + 1) % 500
    check = gpu.decode_check(model, wrong, reference, 16)
    assert not check["ok"] and check["agree_until"] == 4 and check["gap"] > check["tol"] > 0
    # give another token the same output row as the reference's token at that
    # step: the two tie exactly, and a run that takes the other one passes
    t = int(reference[0, 20])
    u = (t + 1) % 500
    with torch.no_grad():
        model.head.weight[u] = model.head.weight[t]
        if model.head.bias is not None:
            model.head.bias[u] = model.head.bias[t]
    reference = generate(model, prompt, 24)
    assert int(reference[0, 20]) in (t, u)
    other = reference.clone()
    other[0, 20] = u + t - int(reference[0, 20])
    tied = gpu.decode_check(model, other, reference, 16)
    assert tied["ok"] and tied["gap"] == 0.0 and tied["agree_until"] == 4


def test_the_gpu_run_is_planned_cheapest_first_and_a_cut_run_says_what_it_missed(smoke):
    names = [name for name, _ in gpu.plan_gpu_steps(torch.device("cpu"), [4096, 8192, 16384], 1)]
    assert names == ["attention N=4096", "window N=4096", "decode float32", "decode bfloat16",
                     "decode, CPU at a reduced size", "attention N=8192", "window N=8192",
                     "attention N=16384", "window N=16384"]
    cut = {**smoke, "steps": {"planned": names, "done": names[:-1]}}
    assert "This run stopped before it measured: window N=16384." in gpu.render_markdown(cut)
    whole = {**smoke, "steps": {"planned": names, "done": names}}
    assert "stopped before" not in gpu.render_markdown(whole)


def test_compiled_flex_raises_at_the_recompile_limit_instead_of_falling_back():
    saved = {k: getattr(torch._dynamo.config, k) for k in
             ("recompile_limit", "accumulated_recompile_limit", "fail_on_recompile_limit_hit")}
    try:
        gpu.compiled_flex()
        assert torch._dynamo.config.fail_on_recompile_limit_hit is True
        assert torch._dynamo.config.recompile_limit >= 64
    finally:
        for k, v in saved.items():
            setattr(torch._dynamo.config, k, v)
