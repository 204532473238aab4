"""The local code a source file depends on, the cache key built from it, and
where the caches live.

Four hooks cache what they build: the executed examples (``examples.py``), the
teaching pages' figures (``figures.py``), the explorer's trained model
(``explorer.py``) and the ledger's measurements (``ledger.py``). Each result
depends on one source file, every local module it imports (transitively, at
any depth, imports inside functions and relative imports included, package
``__init__`` files too) and, for the figures, the data files those modules
name. ``cache_key`` hashes exactly that, so an edit to a snippet re-runs what
uses it and nothing else. Every cache lives under ``cache_root``.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import pathlib


def cache_root(root: pathlib.Path) -> pathlib.Path:
    """``$FIELD_GUIDE_EXAMPLE_CACHE``, else ``.cache/examples`` in the project:
    the executed examples, and one folder each for the other caches."""
    return pathlib.Path(os.environ.get("FIELD_GUIDE_EXAMPLE_CACHE", root / ".cache" / "examples"))


@functools.lru_cache(maxsize=2048)
def parse(source: str) -> ast.Module:
    """``ast.parse``, once per distinct text: every cache key of a build reads
    the same snippets again (read the tree, never change it)."""
    return ast.parse(source)


@functools.lru_cache(maxsize=2048)
def _imports(source: str) -> tuple[tuple[str, int], ...]:
    """(module, level) for every import in ``source``, and ``module.name`` for
    each ``from module import name`` (the name may be a submodule); level > 0
    is a relative import."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            found.append((base, node.level))
            found += [(f"{base}.{alias.name}".strip("."), node.level) for alias in node.names]
    return tuple(found)


def imported_names(source: str) -> set[str]:
    """Every absolute module name ``source`` imports (``module.name`` too)."""
    return {name for name, level in _imports(source) if not level}


def local_dependencies(path: pathlib.Path, roots: list[pathlib.Path]) -> list[pathlib.Path]:
    """Local source files ``path`` imports, transitively, found under ``roots``
    (relative imports under the importer's own package)."""
    seen: set[pathlib.Path] = set()
    todo = [path]
    while todo:
        current = todo.pop()
        for name, level in _imports(current.read_text(encoding="utf-8")):
            parts = name.split(".") if name else []
            bases = roots
            if level:
                bases = [current.parents[level - 1]]
            for base in bases:
                candidates = [base.joinpath(*parts, "__init__.py")]
                if parts:
                    candidates.append(base.joinpath(*parts).with_suffix(".py"))
                # Package __init__ files run on import too.
                candidates += [base.joinpath(*parts[:i], "__init__.py") for i in range(1, len(parts))]
                for candidate in candidates:
                    if candidate.is_file() and candidate not in seen and candidate != path:
                        seen.add(candidate)
                        todo.append(candidate)
    return sorted(seen)


def data_files(sources: list[pathlib.Path], root: pathlib.Path) -> list[pathlib.Path]:
    """The files of ``docs/data/`` whose name one of ``sources`` mentions (a
    figure that draws a table of models reads it, directly or through a module),
    and the GPU results files when one of them names ``bench/results``."""
    folder = root / "docs" / "data"
    texts = [source.read_text(encoding="utf-8") for source in sources]
    found = [path for path in sorted(folder.rglob("*"))
             if path.is_file() and any(path.name in text for text in texts)] if folder.is_dir() else []
    # a figure of the GPU measurements names their folder: every results file counts
    results = root / "bench" / "results"
    if results.is_dir() and any("bench/results" in text for text in texts):
        found += sorted(results.glob("gpu-*.json"))
    return found


def cache_key(source: pathlib.Path, roots: list[pathlib.Path], header: str, *, data: bool = False) -> str:
    """SHA-256 of ``header`` (the hook's version and the environment), ``source``,
    the local modules it imports and, with ``data``, the files of ``docs/data/``
    they name (found under ``roots[0]``)."""
    h = hashlib.sha256(header.encode())
    files = [source, *local_dependencies(source, roots)]
    if data:
        files += data_files(files, roots[0])
    for file in files:
        h.update(f"\n--- {file.name}\n".encode())
        h.update(file.read_bytes())
    return h.hexdigest()
