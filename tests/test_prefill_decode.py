"""Prefill equals decode, for every snippet that keeps a cache or a recurrent state.

Proves: for each decoding path registered in tests/prefill_decode_registry.py
(KV caches dynamic, static, paged and prefix-shared; H2O eviction at a full
budget; linear attention's RNN step; the online softmax; the lower-right cached
mask; RoPE with an offset, plain and scaled; MLA's latent cache, naive and
absorbed; the StreamingLLM sink cache; the delta rule, gated, GLA, KDA, RWKV-7's
generalised rule and Mamba-2's step; DSA and NSA one query at a time; GPT's
decode loop; RNNsearch's greedy decoder), the outputs produced through the
snippet's own cache/state/step API equal its full forward pass, in float64 to
1e-10 and in float32 to ``F32`` below; the harness rejects the decode that
aligns the causal triangle to the upper left (``cached_decode_wrong``); every
snippet that the coverage rule flags is registered or named as a gap.

The coverage rule (``flags_cache``), read from each file's syntax tree: a snippet
keeps a cache or state when it defines, at top level, a public function, or a
public method of a public class, that takes a parameter named one of
``CACHE_PARAMS``, or is named ``step``/``decode`` or ends in ``_step``/``_decode``;
or a public class whose name ends in ``Cache`` or that defines ``update``.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest
import torch

from prefill_decode_registry import CASES, GAPS, common_mistakes, scaled_rope

ROOT = Path(__file__).resolve().parents[1]
SNIPPETS = ROOT / "snippets"

F64 = dict(atol=1e-10, rtol=1e-10)
# float32: on the CPU every case measured at most 3.6e-7 apart (outputs of size ~1-4;
# float64: at most 9e-16). 1e-5 leaves a margin for other CPUs and for GPU kernels.
F32 = dict(atol=1e-5, rtol=1e-5)
TOLERANCES = {torch.float64: F64, torch.float32: F32}

CACHE_PARAMS = {"cache", "kv_cache", "past", "past_key_values", "state", "states",
                "initial_state"}
STEP_NAMES = {"step", "decode"}


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def assert_prefill_equals_decode(full, decode, tol) -> None:
    """Both outputs finite, of one shape, and equal within ``tol``, output by output."""
    with torch.no_grad():
        want, got = _as_tuple(full()), _as_tuple(decode())
    assert len(want) == len(got)
    for w, g in zip(want, got):
        assert w.shape == g.shape, (w.shape, g.shape)
        assert torch.isfinite(w).all() and torch.isfinite(g).all()
        torch.testing.assert_close(g, w, **tol)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_prefill_equals_decode(case, dtype, device):
    if dtype == torch.float64 and device == "mps":
        pytest.skip("MPS has no float64")
    full, decode = case.build(dtype, 0)
    assert case.module in sys.modules  # the case exercises the file it names
    assert_prefill_equals_decode(full, decode, TOLERANCES[dtype])


def test_harness_rejects_the_upper_left_causal_decode():
    """The snippet's own wrong decode (is_causal with N < M) must not pass."""
    full, decode = common_mistakes("cached_decode_wrong")(torch.float64, 0)
    with pytest.raises(AssertionError):
        assert_prefill_equals_decode(full, decode, F64)


def test_dynamic_ntk_cache_differs_beyond_the_original_length():
    """The registered dynamic case stays within the original length, and must: past
    it, dynamic NTK picks frequencies from the current length, so keys cached at
    earlier lengths were rotated differently from a fresh full pass."""
    rope = scaled_rope(rope_type="dynamic", factor=4.0, original_max_position_embeddings=4)
    full, decode = rope(torch.float64, 0)
    with pytest.raises(AssertionError):
        assert_prefill_equals_decode(full, decode, F64)


# ----------------------------------------------------------------------------
# Coverage: a snippet that keeps a cache is registered or named as a gap.
# ----------------------------------------------------------------------------
def _public(name: str) -> bool:
    return not name.startswith("_")


def _takes_cache(fn: ast.FunctionDef) -> bool:
    a = fn.args
    names = {p.arg for p in a.posonlyargs + a.args + a.kwonlyargs}
    step = fn.name in STEP_NAMES or fn.name.endswith(("_step", "_decode"))
    return bool(names & CACHE_PARAMS) or step


def flags_cache(path: Path) -> list[str]:
    """The definitions in ``path`` that make it a snippet with a cache or state."""
    hits = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef) and _public(node.name) and _takes_cache(node):
            hits.append(node.name)
        elif isinstance(node, ast.ClassDef) and _public(node.name):
            methods = [m for m in node.body if isinstance(m, ast.FunctionDef)]
            if node.name.endswith("Cache") or any(m.name == "update" for m in methods):
                hits.append(node.name)
            hits += [f"{node.name}.{m.name}" for m in methods
                     if (_public(m.name) or m.name == "__init__") and _takes_cache(m)]
    return hits


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def flagged_modules() -> dict[str, list[str]]:
    files = sorted(p for p in SNIPPETS.glob("*/*.py") if p.name != "__init__.py")
    return {_module(p): hits for p in files if (hits := flags_cache(p))}


def test_every_snippet_with_a_cache_is_registered_or_a_named_gap():
    covered = {c.module for c in CASES} | {g.module for g in GAPS}
    missing = {m: hits for m, hits in flagged_modules().items() if m not in covered}
    assert not missing, (
        "these snippets keep a cache or state but are neither in CASES nor GAPS of "
        f"tests/prefill_decode_registry.py: {missing}")


def test_the_gaps_are_named_and_still_needed():
    """Each gap names its reason, is flagged by the rule, and has no case."""
    assert [g.name for g in GAPS] == ["hybrids_memory"]  # the gaps, by name
    flagged, registered = flagged_modules(), {c.module for c in CASES}
    for gap in GAPS:
        assert gap.reason.strip() and gap.module in flagged, gap
        assert gap.module not in registered, gap


def test_registry_is_consistent():
    names = [c.name for c in CASES] + [g.name for g in GAPS]
    assert len(names) == len(set(names))
    for entry in [*CASES, *GAPS]:
        assert (ROOT / Path(*entry.module.split("."))).with_suffix(".py").is_file(), entry
        importlib.import_module(entry.module)


def test_the_rule_flags_what_it_should():
    """The rule sees the known caches, and not files without one."""
    flagged = flagged_modules()
    for module in ("snippets.efficiency.kv_cache", "snippets.modern.latent_attention",
                   "snippets.linear.kimi_delta_attention", "snippets.efficiency.static_cache",
                   "snippets.efficiency.paged_kv_cache", "snippets.modern.attention_sinks"):
        assert module in flagged, module
    for module in ("snippets.foundations.masks", "snippets.attention.multi_head"):
        assert module not in flagged, module
