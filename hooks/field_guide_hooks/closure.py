"""The local code a source file depends on, and the cache key built from it.

Three hooks cache what they build: the executed examples (``examples.py``), the
teaching pages' figures (``figures.py``) and the explorer's trained model
(``explorer.py``). Each result depends on one source file, every local module
it imports (transitively, package ``__init__`` files included) and, for the
figures, the data files those modules name. ``cache_key`` hashes exactly that,
so an edit to a snippet re-runs what uses it and nothing else.
"""

from __future__ import annotations

import ast
import hashlib
import pathlib


def imported_names(source: str) -> set[str]:
    """Every absolute module name ``source`` imports, and ``module.name`` for
    each ``from module import name`` (the name may be a submodule)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def local_dependencies(path: pathlib.Path, roots: list[pathlib.Path]) -> list[pathlib.Path]:
    """Local source files ``path`` imports, transitively, found under ``roots``."""
    seen: set[pathlib.Path] = set()
    todo = [path]
    while todo:
        current = todo.pop()
        for name in imported_names(current.read_text(encoding="utf-8")):
            parts = name.split(".")
            for root in roots:
                candidates = [root.joinpath(*parts).with_suffix(".py"), root.joinpath(*parts, "__init__.py")]
                # Package __init__ files run on import too.
                candidates += [root.joinpath(*parts[:i], "__init__.py") for i in range(1, len(parts))]
                for candidate in candidates:
                    if candidate.is_file() and candidate not in seen and candidate != path:
                        seen.add(candidate)
                        todo.append(candidate)
    return sorted(seen)


def data_files(sources: list[pathlib.Path], root: pathlib.Path) -> list[pathlib.Path]:
    """The files of ``docs/data/`` whose name one of ``sources`` mentions (a
    figure that draws a table of models reads it, directly or through a module)."""
    folder = root / "docs" / "data"
    if not folder.is_dir():
        return []
    texts = [source.read_text(encoding="utf-8") for source in sources]
    return [path for path in sorted(folder.rglob("*"))
            if path.is_file() and any(path.name in text for text in texts)]


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
