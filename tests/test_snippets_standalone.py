"""Every snippet file is copyable: torch + standard library only, runs alone,
and a helper repeated across files is repeated word for word."""

from __future__ import annotations

import ast
import json
import pathlib
import re
import subprocess
import sys
import textwrap
from collections import defaultdict

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SNIPPETS = sorted(
    p for p in (ROOT / "snippets").rglob("*.py") if p.name != "__init__.py" and "__pycache__" not in p.parts
)
SECTION = re.compile(r"#\s*--8<--\s*\[(start|end):([A-Za-z][\w-]*)\]")


def test_there_are_snippets():
    assert len(SNIPPETS) >= 2


@pytest.mark.parametrize("path", SNIPPETS, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_only_torch_and_stdlib(path):
    allowed = set(sys.stdlib_module_names) | {"torch", "__future__"}
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.split(".")[0] not in allowed]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                bad.append("." * node.level + (node.module or ""))
            elif node.module.split(".")[0] not in allowed:
                bad.append(node.module)
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}; a snippet may import only torch and the standard library"


@pytest.mark.parametrize("path", SNIPPETS, ids=lambda p: str(p.relative_to(ROOT)))
def test_sections_are_balanced_and_named(path):
    open_sections: list[str] = []
    names = []
    for kind, name in SECTION.findall(path.read_text(encoding="utf-8")):
        if kind == "start":
            assert name not in open_sections, f"section {name!r} opened twice"
            open_sections.append(name)
            names.append(name)
        else:
            assert name in open_sections, f"section {name!r} ends without a start"
            open_sections.remove(name)
    assert not open_sections, f"sections never closed: {open_sections}"
    assert len(names) == len(set(names)), f"duplicate section names in {path.name}: {names}"


def test_each_snippet_runs_copied_alone(tmp_path):
    """Copy each file into its own empty folder and import it there, in a Python
    that sees neither this repository nor PYTHONPATH (``-I``)."""
    jobs = []
    for i, path in enumerate(SNIPPETS):
        folder = tmp_path / f"project{i}"
        folder.mkdir()
        target = folder / path.name
        target.write_bytes(path.read_bytes())
        jobs.append(str(target))
    script = textwrap.dedent(
        """
        import importlib.util, json, sys, traceback
        failures = {}
        for i, file in enumerate(json.loads(sys.argv[1])):
            sys.path.insert(0, file.rsplit("/", 1)[0])
            try:
                spec = importlib.util.spec_from_file_location(f"copied_{i}", file)
                module = importlib.util.module_from_spec(spec)
                sys.modules[spec.name] = module  # as an import would (dataclasses need it)
                spec.loader.exec_module(module)
            except Exception:
                failures[file] = traceback.format_exc(limit=3)
            finally:
                sys.path.pop(0)
        assert "snippets" not in sys.modules, "the repository leaked into the isolated run"
        print(json.dumps(failures))
        """
    )
    result = subprocess.run(
        [sys.executable, "-I", "-c", script, json.dumps(jobs)],
        cwd=tmp_path, capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, result.stderr
    failures = json.loads(result.stdout.strip().splitlines()[-1])
    assert not failures, "\n\n".join(f"{k}:\n{v}" for k, v in failures.items())


def _top_level_functions(path: pathlib.Path) -> dict[str, str]:
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    return {
        node.name: ast.get_source_segment(source, node)
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.ClassDef))
    }


# Same name, deliberately different code (the reason is the value).
DIFFERENT_ON_PURPOSE: dict[str, str] = {}


def test_repeated_helpers_are_identical():
    """A helper that two snippet files both define (so each runs alone) must be
    the same code in both, or the copies drift apart."""
    by_name: dict[str, dict[str, str]] = defaultdict(dict)
    for path in SNIPPETS:
        for name, code in _top_level_functions(path).items():
            by_name[name][str(path.relative_to(ROOT))] = code
    drifted = {
        name: sorted(copies)
        for name, copies in by_name.items()
        if len(copies) > 1 and len(set(copies.values())) > 1 and name not in DIFFERENT_ON_PURPOSE
    }
    assert not drifted, f"helpers whose copies differ: {drifted}"


def test_helper_sections_are_identical():
    """A section named after the one helper it holds (``causal_mask``, say) may
    be copied into several files; every copy must match the others."""
    texts: dict[str, dict[str, str]] = defaultdict(dict)
    for path in SNIPPETS:
        source = path.read_text(encoding="utf-8")
        helpers = _top_level_functions(path)
        for match in re.finditer(r"#\s*--8<--\s*\[start:([A-Za-z][\w-]*)\]\n(.*?)#\s*--8<--\s*\[end:\1\]", source, re.S):
            name, body = match.group(1), match.group(2)
            if name in helpers and helpers[name] in body:
                texts[name][str(path.relative_to(ROOT))] = body
    drifted = {n: sorted(c) for n, c in texts.items() if len(c) > 1 and len(set(c.values())) > 1}
    assert not drifted, f"same-named helper sections with different code: {drifted}"
