"""Every identity in the equivalence ledger holds to its stated tolerance.

The same functions feed the ledger page and the "proven" badges at build time
(``hooks/ledger.py``); here each must hold, and the registry must be large
enough that the ledger page means something.
"""

from __future__ import annotations

import math
import pathlib
import re
import time

import pytest

from identities import IDENTITIES, ROOT_DOCS, load_all, measure, missing_needs

IDENTITIES = load_all()


@pytest.mark.parametrize("key", sorted(IDENTITIES))
def test_identity_holds(key):
    ident = IDENTITIES[key]
    missing = missing_needs(ident)
    if missing:
        from transformers_support import IN_CI  # skip locally, fail under CI=true

        (pytest.fail if IN_CI else pytest.skip)(f"{key} needs {', '.join(missing)}")
    result = measure(ident)
    assert result.error is not None and math.isfinite(result.error), f"{key}: error {result.error}"
    assert result.error <= ident.tol, f"{key}: {ident.claim}: error {result.error:.3g} > tolerance {ident.tol:.3g}"


@pytest.mark.parametrize("key", sorted(IDENTITIES))
def test_identity_names_a_real_page(key):
    ident = IDENTITIES[key]
    assert (ROOT_DOCS / ident.page).is_file(), f"{key}: page {ident.page} does not exist"
    assert re.fullmatch(r"[a-z0-9][a-z0-9-]*", key), f"{key}: keys are lower-case words joined by hyphens"


# ----------------------------------------------------------------------------
# The build's cache of measurements (hooks/ledger.py)
# ----------------------------------------------------------------------------
def _ledger_hook():
    import importlib.util

    spec = importlib.util.spec_from_file_location("ledger_hook_cache", ROOT_DOCS.parent / "hooks" / "ledger.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_files_fingerprint_covers_what_it_imports_at_any_depth(tmp_path, monkeypatch):
    hook = _ledger_hook()
    root = ROOT_DOCS.parent
    closure = {p.relative_to(root).as_posix() for p in hook._closure(root / "tests" / "identities" / "history.py")}
    assert {"snippets/history/bert.py", "snippets/attention/multi_head.py",
            "tests/identities/__init__.py"} <= closure, sorted(closure)
    assert not any(p.startswith("snippets/linear/") for p in closure), sorted(closure)
    # A project whose identities reach a file only through another, once inside a function.
    for name, text in {
        "tests/identities/__init__.py": "",
        "tests/identities/a.py": "from . import helper\nfrom snippets.x import f\n",
        "tests/identities/helper.py": "",
        "tests/tools.py": "import math\n",
        "snippets/x.py": "import torch\ndef f():\n    from snippets.y import g\n",
        "snippets/y.py": "import tools\n",
        "snippets/z.py": "",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(hook, "ROOT", tmp_path)
    found = {p.relative_to(tmp_path).as_posix() for p in hook._closure(tmp_path / "tests" / "identities" / "a.py")}
    assert found == {"tests/identities/a.py", "tests/identities/__init__.py", "tests/identities/helper.py",
                     "snippets/x.py", "snippets/y.py", "tests/tools.py"}, sorted(found)


def test_the_build_reuses_a_files_measurements_until_a_source_changes(tmp_path, monkeypatch):
    import identities

    hook = _ledger_hook()
    monkeypatch.setenv("FIELD_GUIDE_EXAMPLE_CACHE", str(tmp_path))
    path = ROOT_DOCS.parent / "tests" / "identities" / "foundations.py"
    keys = sorted(k for k, i in IDENTITIES.items() if i.test.startswith("tests/identities/foundations.py"))
    calls = []

    def counted(ident):
        calls.append(ident.key)
        return measure(ident)

    monkeypatch.setattr(identities, "measure", counted)
    first = hook._measure_file(identities, path, keys, "torch x")
    assert sorted(calls) == keys
    calls.clear()
    again = hook._measure_file(identities, path, keys, "torch x")
    assert calls == [] and again == first
    hook._measure_file(identities, path, keys, "torch y")  # another torch: measured again
    assert sorted(calls) == keys
    calls.clear()
    monkeypatch.setattr(hook, "_closure", lambda p: [p, ROOT_DOCS.parent / "snippets" / "foundations" / "masks.py",
                                                    ROOT_DOCS.parent / "README.md"])
    hook._measure_file(identities, path, keys, "torch y")  # another set of sources: again
    assert sorted(calls) == keys


def test_the_build_measures_in_its_own_process_and_fails_with_its_output(tmp_path, monkeypatch):
    """The measurements run in a child process (torch.compile parses source with
    ``ast``, which CPython 3.11 cannot do in two threads at once); when the
    child fails, the build fails with the end of what it printed."""
    import subprocess
    import sys

    from mkdocs.exceptions import PluginError

    hook = _ledger_hook()
    log_path, out = tmp_path / "ledger.log", tmp_path / "ledger.json"
    with log_path.open("wb") as log_file:
        child = subprocess.Popen([sys.executable, "-c", "import sys; print('planted failure'); sys.exit(3)"],
                                 stdout=log_file, stderr=subprocess.STDOUT)
    hook._state.update(child=child, out=str(out), log=str(log_path))
    with pytest.raises(PluginError, match=r"(?s)could not be measured \(exit 3\).*planted failure"):
        hook._ledger()
    # A child that succeeds hands over the registry and the results as JSON.
    result = {"registry": {"k": {"claim": "a = b", "page": "p.md", "tol": 1e-6, "test": "t.py::f"}},
              "results": {"k": {"error": 1e-3, "dtype": "float64", "device": "cpu", "torch": "x",
                                "why_not": ""}}, "reused": 1}
    out.write_text(__import__("json").dumps(result))
    hook._state.clear()
    hook._state.update(child=subprocess.Popen([sys.executable, "-c", "pass"]), out=str(out), log=str(log_path))
    with pytest.raises(PluginError, match=r"identities that do not hold: k: error 0\.001 > 1e-06"):
        hook._ledger()
    assert not out.exists() and not log_path.exists()


def test_a_build_with_unchanged_sources_imports_no_identities(tmp_path, monkeypatch):
    """The child reads every file's record (claims and measurements) when its
    sources are unchanged, without importing torch's identities again; an
    identities file whose sources changed is imported and measured alone."""
    import identities

    hook = _ledger_hook()
    monkeypatch.setenv("FIELD_GUIDE_EXAMPLE_CACHE", str(tmp_path))
    calls = []

    def fake(ident):
        calls.append(ident.key)
        return identities.Measurement(ident.key, 0.0, "float64", "cpu", "x", 0.0)

    monkeypatch.setattr(identities, "measure", fake)
    first = hook._run_all()
    assert first["reused"] == 0 and sorted(calls) == sorted(first["registry"]) == sorted(load_all())
    assert first["registry"]["sdpa-equals-pytorch"]["page"] == IDENTITIES["sdpa-equals-pytorch"].page
    calls.clear()

    def refuse(name, *args, **kwargs):
        raise AssertionError(f"imported {name} although its sources are unchanged")

    with monkeypatch.context() as m:
        m.setattr(hook.importlib, "import_module", refuse)
        again = hook._run_all()
    assert calls == [] and again == {**first, "reused": len(first["results"])}
    # A changed source re-measures only the files that import it.
    changed = ROOT_DOCS.parent / "tests" / "identities" / "foundations.py"
    monkeypatch.setattr(hook, "_closure", lambda p: [p, ROOT_DOCS.parent / "README.md"] if p == changed else
                        sorted([p, *hook.closure.local_dependencies(p, [ROOT_DOCS.parent, ROOT_DOCS.parent / "tests"])]))
    third = hook._run_all()
    assert sorted(calls) == sorted(k for k, i in IDENTITIES.items() if i.test.startswith("tests/identities/foundations.py"))
    assert third["registry"] == first["registry"]


def test_the_spare_of_mkdocs_serve_measures_what_is_there_when_told(tmp_path, monkeypatch):
    """Under ``mkdocs serve`` the next build's measuring process starts early
    and waits: what it measures must be the sources (and the records) as they
    are when the next build tells it to go, not when it started. A spare
    started before an edit to the hooks themselves is not used."""
    import identities

    hook = _ledger_hook()
    monkeypatch.setenv("FIELD_GUIDE_EXAMPLE_CACHE", str(tmp_path))
    spare = hook._spawn(waiting=True)
    try:
        deadline = time.monotonic() + 120
        while "waiting" not in pathlib.Path(spare["log"]).read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert spare["child"].poll() is None, "the spare should wait for its line"
        # One thread: the build and the example kernels share the cores with it.
        assert "waiting; torch threads: 1" in pathlib.Path(spare["log"]).read_text()
        # Written after the spare started: a record for every identities file,
        # with made-up measurements the spare can only have read from here.
        monkeypatch.setattr(identities, "measure",
                            lambda i: identities.Measurement(i.key, 0.0, "float64", "cpu", "planted", 0.0))
        planted = hook._run_all()
        hook._spare["ready"] = spare
        hook.on_config(None)
        assert hook._state["child"] is spare["child"] and "ready" not in hook._spare
        registry, results = hook._ledger()
    finally:
        hook._stop()
        hook._drop_spare()
    assert {k: r.torch for k, r in results.items()} == {k: "planted" for k in planted["results"]}
    assert sorted(registry) == sorted(planted["registry"])
    assert "ready" not in hook._spare, "a build outside `mkdocs serve` starts no spare"

    # An edit to the hooks after the spare started: it is stopped, and a fresh process measures.
    hook._spare["keep"] = True
    stale = hook._spawn(waiting=True)
    hook._spare["ready"] = stale
    monkeypatch.setattr(hook, "_own_code", lambda: ("edited",))
    try:
        hook.on_config(None)
        assert stale["child"].poll() is not None and hook._state["child"] is not stale["child"]
        hook._ledger()
        assert hook._spare["ready"]["child"].poll() is None, "under serve, the next spare waits"
    finally:
        hook._stop()
        hook._drop_spare()
