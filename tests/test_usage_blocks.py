"""Usage blocks on the pages work in the project a reader copies a file into.

The README tells a reader to copy one snippet file into their project. A code
block on a page that imports that file must therefore import it by its own
name (``from multi_head import MultiHeadAttention``), never through this
repository's package (``from snippets.attention.multi_head import ...``).

* Every Python block on every Markdown page is read; one that imports
  ``snippets.`` fails.
* A *usage block* imports a snippet by its file name. It runs in a temporary
  folder that holds a copy of that file and nothing else of the repository
  (the other usage blocks' folders included), with only torch and the
  standard library installed around it.
* A block that cannot run by design is a *sketch*: it holds a ``...``
  placeholder (``q, k, v = ...``) or its title says "not run". A sketch is
  compiled, and the names it imports must exist in the file.

All runnable blocks run in one child process (torch is imported once), each
in its own folder with a fresh namespace.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SNIPPETS = ROOT / "snippets"

OPEN_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
TITLE = re.compile(r'title="([^"]*)"')
INCLUDE = re.compile(r'^\s*--8<--\s')


@dataclasses.dataclass
class Block:
    page: str  # "attention/multi-head.md"
    line: int  # 1-based line of the opening fence
    title: str
    code: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def python_blocks(md: pathlib.Path) -> list[Block]:
    """The fenced Python blocks of a page, dedented (they may sit in tabs or folds)."""
    lines = md.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        match = OPEN_FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, info = match.group("indent"), match.group("fence"), match.group("info")
        body, j = [], i + 1
        while j < len(lines):
            stripped = lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip()
            if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]).strip():
                break
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
            j += 1
        language = re.match(r"\{?\s*\.?([\w+-]*)", info).group(1).lower()
        if language in ("python", "py", "python3", "pycon"):
            title = TITLE.search(info)
            blocks.append(Block(md.relative_to(DOCS).as_posix(), i + 1, title.group(1) if title else "",
                                textwrap.dedent("\n".join(body)) + "\n"))
        i = j + 1
    return blocks


def all_blocks() -> list[Block]:
    return [block for md in sorted(DOCS.rglob("*.md")) for block in python_blocks(md)]


def snippet_by_stem() -> dict[str, list[pathlib.Path]]:
    found: dict[str, list[pathlib.Path]] = {}
    for path in sorted(SNIPPETS.rglob("*.py")):
        if not path.name.startswith("_") and "__pycache__" not in path.parts:
            found.setdefault(path.stem, []).append(path)
    return found


def imported_modules(code: str) -> dict[str, set[str]]:
    """Top-level module -> names imported from it (empty for ``import x``)."""
    found: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.setdefault(alias.name, set())
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.setdefault(node.module, set()).update(alias.name for alias in node.names)
    return found


def snippet_files_of(block: Block) -> list[pathlib.Path]:
    """The snippet files a block imports by their own names. Two files with one
    name (``block.py``): the one in the page's own area."""
    stems = snippet_by_stem()
    area = block.page.split("/")[0]
    chosen = []
    for module in imported_modules(block.code):
        candidates = stems.get(module, [])
        if candidates:
            same_area = [p for p in candidates if p.parent.name == area]
            chosen.append((same_area or candidates)[0])
    return chosen


def is_sketch(block: Block) -> bool:
    if "not run" in block.title.lower():
        return True
    return any(isinstance(n, ast.Constant) and n.value is Ellipsis for n in ast.walk(ast.parse(block.code)))


def usage_blocks() -> list[Block]:
    found = []
    for block in all_blocks():
        if INCLUDE.match(block.code.strip().splitlines()[0] if block.code.strip() else ""):
            continue  # an included snippet section, not a usage block
        try:
            ast.parse(block.code)
        except SyntaxError:
            continue  # test_every_python_block_parses names it
        if snippet_files_of(block):
            found.append(block)
    return found


def top_level_names(path: pathlib.Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


# ----------------------------------------------------------------------------
# Running: one child process, one folder and one namespace per block.
# ----------------------------------------------------------------------------
RUNNER = r"""
import contextlib, io, json, os, sys, traceback
jobs = json.loads(sys.stdin.read())
base_path = [p for p in sys.path if p]
base_modules = set(sys.modules)
results = {}
for job in jobs:
    os.chdir(job["dir"])
    sys.path[:] = [job["dir"], *base_path]
    for name in [n for n in sys.modules if n not in base_modules]:
        module = sys.modules[name]
        if str(getattr(module, "__file__", "") or "").startswith(job["tmp"]):
            del sys.modules[name]
    try:
        import torch
        torch.manual_seed(0)
        torch.set_default_dtype(torch.float32)
    except ImportError:
        pass
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(job["code"], job["name"], "exec"), {"__name__": "__main__"})
        results[job["id"]] = None
    except BaseException:
        results[job["id"]] = traceback.format_exc(limit=-3)
print("@@RESULTS@@" + json.dumps(results))
"""


@pytest.fixture(scope="module")
def run_results(tmp_path_factory) -> dict[str, str | None]:
    """Block id -> None when it ran, else the tail of its traceback."""
    tmp = tmp_path_factory.mktemp("usage")
    jobs = []
    for index, block in enumerate(b for b in usage_blocks() if not is_sketch(b)):
        folder = tmp / f"block{index}"
        folder.mkdir()
        for path in snippet_files_of(block):
            (folder / path.name).write_bytes(path.read_bytes())
        jobs.append({"id": block.id, "dir": str(folder), "tmp": str(tmp), "code": block.code,
                     "name": f"<{block.id}>"})
    if not jobs:
        return {}
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
    env["MPLBACKEND"] = "Agg"
    # tiny blocks: one thread, so the runner does not fight the xdist workers for cores
    env["OMP_NUM_THREADS"] = "1"
    result = subprocess.run(
        [sys.executable, "-I", "-c", RUNNER], input=json.dumps(jobs), capture_output=True, text=True,
        cwd=tmp, env=env, timeout=600,
    )
    marker = result.stdout.rfind("@@RESULTS@@")
    assert marker >= 0, f"the runner died:\n{result.stderr[-3000:]}"
    return json.loads(result.stdout[marker + len("@@RESULTS@@"):])


def _ids(blocks):
    return [b.id for b in blocks]


BLOCKS = all_blocks()
USAGE = usage_blocks()


@pytest.mark.parametrize("block", BLOCKS, ids=_ids(BLOCKS))
def test_no_block_imports_the_repository_package(block):
    modules = imported_modules(block.code) if _parses(block) else {}
    bad = sorted(m for m in modules if m == "snippets" or m.startswith("snippets."))
    assert not bad, (
        f"docs/{block.id}: imports {bad}; a reader copies the file into their project, "
        "so import it by its own name (from multi_head import MultiHeadAttention)"
    )


def _parses(block: Block) -> bool:
    try:
        ast.parse(block.code)
    except SyntaxError:
        return False
    return True


@pytest.mark.parametrize("block", USAGE, ids=_ids(USAGE))
def test_usage_block_imports_names_its_file_defines(block):
    for path in snippet_files_of(block):
        wanted = imported_modules(block.code).get(path.stem, set())
        missing = sorted(wanted - top_level_names(path) - {"*"})
        assert not missing, f"docs/{block.id}: {path.name} defines no {missing}"


@pytest.mark.parametrize("block", USAGE, ids=_ids(USAGE))
def test_usage_block_runs_next_to_a_copy_of_its_file(block, run_results):
    if is_sketch(block):
        compile(block.code, block.id, "exec")
        return
    error = run_results.get(block.id, "not run")
    assert error is None, (
        f"docs/{block.id} ({block.title or 'untitled'}) failed next to a copy of "
        f"{', '.join(p.name for p in snippet_files_of(block))}:\n{error}"
    )


def test_the_parser_finds_blocks_in_tabs_and_folds(tmp_path, monkeypatch):
    page = tmp_path / "area" / "p.md"
    page.parent.mkdir()
    page.write_text(
        '# P\n\n=== "Tab"\n\n    ```python title="Usage: in a tab"\n    from masks import causal_mask\n'
        "    x = 1\n    ```\n\n```python\n--8<-- \"area/x.py:kernel\"\n```\n\n"
        '??? note "Fold"\n\n    ```py\n    q, k, v = ...\n    ```\n'
    )
    monkeypatch.setattr(sys.modules[__name__], "DOCS", tmp_path)
    blocks = python_blocks(page)
    assert [b.line for b in blocks] == [5, 10, 16]
    assert blocks[0].title == "Usage: in a tab" and blocks[0].code == "from masks import causal_mask\nx = 1\n"
    assert is_sketch(blocks[2]) and not is_sketch(blocks[0])
