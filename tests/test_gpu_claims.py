"""No efficiency page states a GPU number or GPU behaviour that nothing backs.

A sentence that names a GPU thing (a GPU, an H100, cuDNN, a CUDA graph, tensor
cores, HBM, SRAM) and states a number with a unit (ms, TB/s, TFLOP/s, %, "x
times") or a behaviour (faster, slower, launch-bound, compute-bound, "the
default", "measured") is a claim. Its paragraph must carry what backs it: an
arXiv id, a ``(source: ...)`` naming a datasheet or a file of PyTorch, or a
``gpu-json: bench/results/<file>.json`` reference to a committed benchmark
result. A sentence about what ``bench/gpu.py`` will measure is a plan, not a
claim. Until a GPU results file is committed, a measured number has nowhere to
come from, and this test says so.
"""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs" / "efficiency").glob("*.md"))

GPU = re.compile(r"\b(GPUs?|H100|H200|A100|cuDNN|CUDA graphs?|tensor cores?|HBM|SRAM|Hopper|Blackwell)\b")
NUMBER = re.compile(r"\d[\d,.]*\s*(ms|µs|us|ns|GB/s|TB/s|[TP]FLOP/?s|FLOP per byte|FLOP/byte|%|x\b|times\b)")
BEHAVIOUR = re.compile(r"\b(faster|slower|launch-bound|memory-bound|compute-bound|the default|by default|"
                       r"comes first|runs first|tries it first|outrun)\b|\bmeasured (on|at|with|by)\b|"
                       r"what (it|a GPU) measured", re.I)
BACKING = re.compile(r"arXiv:\d{4}\.\d{4,5}|[(;]\s?source:\s[^)]+\)|gpu-json:\s+(?P<json>bench/results/\S+?\.json)")
PLAN = re.compile(r"bench/gpu\.py`? (will|would) ")


def paragraphs(text: str) -> list[str]:
    """Blank-line separated blocks of prose; code fences and HTML comments dropped."""
    text = re.sub(r"(?ms)^\s*```.*?^\s*```", "", text)
    # Headings name sections, and a table's rows are backed by the prose that
    # introduces it; neither is read as a sentence.
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(("#", "|")))
    return [p for p in re.split(r"\n\s*\n", text) if p.strip()]


def unbacked_claims(text: str) -> list[str]:
    found = []
    for para in paragraphs(text):
        backing = list(BACKING.finditer(para))
        if any(m.group("json") is None or (ROOT / m.group("json")).is_file() for m in backing):
            continue
        for sentence in re.split(r"(?<=[.!?])\s+", " ".join(para.split())):
            if PLAN.search(sentence) or not GPU.search(sentence):
                continue
            if NUMBER.search(sentence) or BEHAVIOUR.search(sentence):
                found.append(sentence)
    return found


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_gpu_claims_are_backed(page):
    claims = unbacked_claims(page.read_text())
    assert not claims, f"{page.name}: GPU claims with no arXiv id, (source: ...) or committed gpu-json:\n" + \
        "\n".join(f"  - {c}" for c in claims)


def test_the_checker_flags_an_unbacked_claim_and_accepts_backing(tmp_path):
    claim = "On an H100, bfloat16 decoding measured 15x slower than float32."
    assert unbacked_claims(claim) == [claim]
    assert unbacked_claims("The tiles stay in SRAM; HBM is slower.") != []
    assert unbacked_claims(claim + " (source: NVIDIA H100 datasheet)") == []
    assert unbacked_claims(claim + " Dao (2023, arXiv:2307.08691).") == []
    assert unbacked_claims("How much faster a GPU is, bench/gpu.py will measure.") == []
    # a gpu-json reference backs a claim only when the file is committed
    assert unbacked_claims(claim + " gpu-json: bench/results/gpu-missing.json") == [claim]
    assert unbacked_claims("A GPU runs many programs at once.") == []
