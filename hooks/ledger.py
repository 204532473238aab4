"""MkDocs hook: the equivalence ledger page and the "proven" badges.

The identities are the functions in ``tests/identities/`` that the test suite
asserts (``tests/test_ledger.py``). The build runs the same functions, in a
process that starts with the build, and renders what they measured:

* ``docs/ledger.md`` holds ``<!-- ledger -->``, replaced by one table per area:
  the claim, the largest error measured, dtype, device, torch version, and
  links to the teaching page and the test.
* Measurements are kept per identities file (``ledger/`` in
  ``$FIELD_GUIDE_EXAMPLE_CACHE`` or ``.cache/examples``), keyed by the bytes of
  that file and of every project file it imports, directly or through others
  (``hooks/field_guide_hooks/closure.py``, shared with the other caches),
  plus ``docs/data/`` and the torch and transformers versions: a build after an edit re-measures
  only the files the edit can change, and a second build of the same sources
  (ProperDocs, the offline build) measures nothing again.
* A teaching page puts a line ``:proven: KEY`` right after the code it
  concerns; it becomes a one-line badge with the claim and the measured error,
  linking to the ledger entry. A badge naming a key the registry lacks fails
  the build, and so does an identity that breaks its tolerance.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.metadata
import json
import logging
import os
import pathlib
import posixpath
import re
import subprocess
import sys
import tempfile
import types

from mkdocs.exceptions import PluginError

# MkDocs loads hooks by path: the shared rooms live in a package next to this file.
if str(pathlib.Path(__file__).resolve().parent) not in sys.path:
    sys.path.append(str(pathlib.Path(__file__).resolve().parent))

from field_guide_hooks import closure, heap  # noqa: E402

log = logging.getLogger("mkdocs.hooks.ledger")

ROOT = pathlib.Path(__file__).resolve().parents[1]
LEDGER_PAGE = "ledger.md"
BADGE = re.compile(r"^(?P<indent>[ \t]*):proven:[ \t]+(?P<key>[a-z0-9][a-z0-9-]*)[ \t]*$", re.M)
AREA_TITLES = {
    "foundations": "Foundations", "attention": "Attention", "architecture": "Architecture",
    "modern": "Modern decoder", "efficiency": "Efficiency", "linear": "Beyond dense softmax",
    "distributed": "Beyond one device", "history": "History",
}

_state: dict = {}


def _closure(path: pathlib.Path) -> list[pathlib.Path]:
    """``path`` and every project file it imports, at any depth (imports inside
    functions count)."""
    return sorted([path, *closure.local_dependencies(path, [ROOT, ROOT / "tests"])])


def _fingerprint(path: pathlib.Path, versions: str) -> str:
    digest = hashlib.sha256(versions.encode())
    # Data files too: a test helper an identity imports may read the census.
    for source in _closure(path) + sorted((ROOT / "docs" / "data").glob("*.*")):
        digest.update(str(source.relative_to(ROOT)).encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()


def _versions() -> str:
    """The installed versions the measurements depend on, read without importing them."""
    found = []
    for name in ("torch", "transformers", "numpy"):
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name} absent")
    return ", ".join(found)


def _cache_dir() -> pathlib.Path:
    return closure.cache_root(ROOT) / "ledger"


def _meta(ident) -> dict:
    """What the page needs of an identity besides its measurement."""
    return {"claim": ident.claim, "page": ident.page, "tol": ident.tol, "test": ident.test}


def _kept(path: pathlib.Path, stamp: str) -> dict | None:
    """The record of one identities file, if it was made from the same sources."""
    try:
        kept = json.loads((_cache_dir() / f"{path.stem}.json").read_text(encoding="utf-8"))
        if kept["fingerprint"] == stamp and sorted(kept["registry"]) == sorted(kept["results"]):
            return kept
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def _measure_file(identities, path: pathlib.Path, keys: list[str], versions: str) -> dict:
    """The measurements of one identities file, from the cache when its sources are unchanged."""
    stamp = _fingerprint(path, versions)
    kept = _kept(path, stamp)
    if kept is None or sorted(kept["results"]) != sorted(keys):
        kept = _record(identities, path, keys, stamp)
    return {k: identities.Measurement(**v) for k, v in kept["results"].items()}


def _record(identities, path: pathlib.Path, keys: list[str], stamp: str) -> dict:
    """Measure ``keys`` of one identities file and keep the record under ``stamp``."""
    kept = {
        "fingerprint": stamp,
        "registry": {k: _meta(identities.IDENTITIES[k]) for k in keys},
        "results": {k: dataclasses.asdict(identities.measure(identities.IDENTITIES[k])) for k in keys},
    }
    record = _cache_dir() / f"{path.stem}.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    scratch = record.with_suffix(f".{os.getpid()}.tmp")
    scratch.write_text(json.dumps(kept), encoding="utf-8")
    scratch.replace(record)
    return kept


def _run_all() -> dict:
    """Every identity's claim and measurement, as JSON for the page. A file whose
    sources are unchanged is read from its record without being imported, so a
    build that changed no proof imports neither torch nor the identities."""
    versions = _versions()
    registry: dict[str, dict] = {}
    results: dict[str, dict] = {}
    reused = 0
    for path in sorted((ROOT / "tests" / "identities").glob("*.py")):
        if path.stem == "__init__":
            continue
        stamp = _fingerprint(path, versions)
        kept = _kept(path, stamp)
        if kept is not None:
            reused += len(kept["results"])
        else:
            for folder in (ROOT, ROOT / "tests"):
                if str(folder) not in sys.path:
                    sys.path.insert(0, str(folder))
            identities = importlib.import_module("identities")
            importlib.import_module(f"identities.{path.stem}")
            heap.settle()  # the measurements' collections skip what the imports loaded
            prefix = f"tests/identities/{path.name}::"
            keys = [k for k, i in identities.IDENTITIES.items() if i.test.startswith(prefix)]
            kept = _record(identities, path, keys, stamp)
        twice = set(kept["registry"]) & set(registry)
        if twice:
            raise ValueError(f"identity keys registered twice: {sorted(twice)}")
        registry.update(kept["registry"])
        results.update(kept["results"])
    return {"registry": registry, "results": results, "reused": reused}


def _stop() -> None:
    child = _state.get("child")
    if child is not None and child.poll() is None:
        child.kill()
        child.wait()
    for name in ("out", "log"):
        if name in _state:
            pathlib.Path(_state[name]).unlink(missing_ok=True)


# Under ``mkdocs serve``, the next build's measuring process is started as
# soon as one build has its ledger: it imports torch (about two seconds) and
# waits for a line on its standard input, then measures. An edit made in the
# meantime is seen, since it imports the identities and snippets only then.
_spare: dict = {"keep": False}


def _own_code() -> tuple:
    """What the measuring process runs of the hooks themselves: a spare started
    before an edit to them is not used."""
    here = pathlib.Path(__file__).resolve()
    return tuple(p.stat().st_mtime_ns for p in (here, here.parent / "field_guide_hooks" / "closure.py"))


def _spawn(waiting: bool) -> dict:
    fd, out = tempfile.mkstemp(prefix="ledger-", suffix=".json")
    os.close(fd)
    log_fd, log_path = tempfile.mkstemp(prefix="ledger-", suffix=".log")
    args = ["--wait", out] if waiting else [out]
    # One thread: the identities' tensors are small, and the process shares the
    # cores with the build and the example kernels. With a thread per core,
    # OpenMP's threads spin while they wait for each other on busy cores: a cold
    # build measured 29 s of CPU in this process against 9 s with one thread.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    with os.fdopen(log_fd, "wb") as log_file:
        child = subprocess.Popen(
            [sys.executable, str(pathlib.Path(__file__).resolve()), *args], cwd=ROOT, env=env,
            stdin=subprocess.PIPE if waiting else subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT)
    return {"child": child, "out": out, "log": log_path, "code": _own_code()}


def _drop_spare(spare: dict | None = None) -> None:
    """Stop ``spare`` (by default the one waiting) and remove its files."""
    spare = spare if spare is not None else _spare.pop("ready", None)
    if spare is not None:
        spare["child"].kill()
        spare["child"].wait()
        for name in ("out", "log"):
            pathlib.Path(spare[name]).unlink(missing_ok=True)


def on_startup(command, dirty: bool) -> None:
    _spare["keep"] = command == "serve"


def on_config(config):
    # A separate process, not a thread: torch.compile and inspect parse source
    # with ``ast`` while the build's own hooks do, and CPython 3.11's AST
    # constructor keeps one recursion counter for all threads ("AST
    # constructor recursion depth mismatch" when two threads parse at once).
    _stop()
    _state.clear()
    spare = _spare.pop("ready", None)
    if spare is not None and spare["child"].poll() is None and spare["code"] == _own_code():
        spare["child"].stdin.write(b"go\n")
        spare["child"].stdin.close()
        _state.update(child=spare["child"], out=spare["out"], log=spare["log"])
    else:
        if spare is not None:
            _drop_spare(spare)
        _state.update({k: v for k, v in _spawn(waiting=False).items() if k != "code"})
    return config


def on_shutdown():
    _stop()
    _drop_spare()


def _ledger():
    if "registry" not in _state:
        code = _state["child"].wait()
        if code != 0:
            log_text = pathlib.Path(_state["log"]).read_text(encoding="utf-8", errors="replace")
            tail = "\n".join(log_text.strip().splitlines()[-15:])
            raise PluginError(f"the equivalence ledger could not be measured (exit {code}):\n{tail}")
        found = json.loads(pathlib.Path(_state["out"]).read_text(encoding="utf-8"))
        _state["registry"] = {k: types.SimpleNamespace(**v) for k, v in found["registry"].items()}
        _state["results"] = {k: types.SimpleNamespace(**v) for k, v in found["results"].items()}
        measured = len(found["results"]) - found["reused"]
        log.info(f"ledger: {len(found['results'])} identities, {measured} measured, "
                 f"{found['reused']} reused from the cache")
        _stop()
        if _spare["keep"] and "ready" not in _spare:
            _spare["ready"] = _spawn(waiting=True)
    registry, results = _state["registry"], _state["results"]
    broken = [f"{k}: error {r.error:.3g} > {registry[k].tol:.3g}" for k, r in results.items()
              if r.error is not None and not r.error <= registry[k].tol]
    if broken:
        raise PluginError("identities that do not hold: " + "; ".join(broken))
    return registry, results


def _error_text(result) -> str:
    if result.error is None:
        return f"not measured in this build ({result.why_not})"
    if result.error == 0:
        return "exactly 0"
    return f"{result.error:.1e}"


def _rel(page, target: str) -> str:
    return posixpath.relpath(target, posixpath.dirname(page.file.src_uri) or ".")


def _table(page, registry, results) -> str:
    out = []
    by_area: dict[str, list[str]] = {}
    for key, ident in registry.items():
        by_area.setdefault(ident.page.split("/", 1)[0], []).append(key)
    total = sum(r.error is not None for r in results.values())
    first = next(iter(results.values()), None)
    out.append(f"{len(registry)} identities, {total} measured on the CPU for the sources of this build"
               + (f" with torch {first.torch}." if first else "."))
    out.append("")
    for area in [a for a in AREA_TITLES if a in by_area] + sorted(set(by_area) - set(AREA_TITLES)):
        out.append(f"## {AREA_TITLES.get(area, area.title())}")
        out.append("")
        out.append("| Identity | Largest error | dtype | device | torch | Page | Test |")
        out.append("|---|---|---|---|---|---|---|")
        for key in sorted(by_area[area]):
            ident, r = registry[key], results[key]
            claim = ident.claim.replace("|", "\\|")
            out.append(f'| <span id="{key}"></span>{claim} | {_error_text(r)} | {r.dtype} | {r.device} '
                       f"| {r.torch} | [page]({_rel(page, ident.page)}) | `{ident.test}` |")
        out.append("")
    return "\n".join(out)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri == LEDGER_PAGE:
        if "<!-- ledger -->" not in markdown:
            raise PluginError(f"{LEDGER_PAGE} must hold the placeholder <!-- ledger -->")
        registry, results = _ledger()
        markdown = markdown.replace("<!-- ledger -->", _table(page, registry, results))
    if not BADGE.search(markdown):
        return markdown
    registry, results = _ledger()

    def badge(m: re.Match) -> str:
        key, indent = m.group("key"), m.group("indent")
        if key not in registry:
            raise PluginError(f"{page.file.src_uri}: the badge ':proven: {key}' names no identity in "
                              f"tests/identities/ (known: {len(registry)})")
        ident, r = registry[key], results[key]
        link = _rel(page, LEDGER_PAGE) + f"#{key}"
        where = f" ({r.dtype}, {r.device}, torch {r.torch})" if r.error is not None else ""
        return (f'{indent}<p class="fg-proven" markdown>**Proven:** {ident.claim}; largest error '
                f"{_error_text(r)}{where}. [Ledger entry]({link})</p>")

    return BADGE.sub(badge, markdown)


if __name__ == "__main__":
    # ``python hooks/ledger.py OUT``: what on_config starts; writes the JSON to OUT.
    # ``python hooks/ledger.py --wait OUT``: the spare of ``mkdocs serve``, which
    # imports torch first and measures once a line arrives (none: it exits).
    if sys.argv[1] == "--wait":
        import torch  # every identity imports it; an edit to the site cannot change it

        # Into the log: the spare is ready, and on how many threads it will measure.
        print(f"waiting; torch threads: {torch.get_num_threads()}", flush=True)
        if not sys.stdin.readline():
            sys.exit(0)
    pathlib.Path(sys.argv[-1]).write_text(json.dumps(_run_all()), encoding="utf-8")
    heap.release()  # exit as usual: bindings that count their objects at exit see them freed
