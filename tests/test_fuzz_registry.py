"""Every public callable of snippets/ has a fuzz entry in its area's test file."""

from __future__ import annotations

import importlib
import pathlib

from fuzz_support import FUZZ, NOT_FUZZED, SWEPT, public_callables

AREA_FILES = sorted(p.stem for p in pathlib.Path(__file__).parent.glob("test_fuzz_*.py")
                    if p.stem != "test_fuzz_registry")


def test_every_public_callable_is_fuzzed():
    for name in AREA_FILES:
        importlib.import_module(name)  # registers that area's entries
    public = set(public_callables())
    assert public, "found no public callables in snippets/"
    missing = sorted(public - set(FUZZ) - set(NOT_FUZZED))
    assert not missing, f"public callables with no fuzz entry (add one to tests/test_fuzz_<area>.py): {missing}"
    stale = sorted((set(FUZZ) | set(NOT_FUZZED)) - public)
    assert not stale, f"fuzz entries that name no public callable: {stale}"
    unswept = sorted(set(FUZZ) - SWEPT)
    assert not unswept, (f"fuzz entries that no test runs (their file's fuzz_tests(...) prefixes "
                         f"leave them out): {unswept}")
