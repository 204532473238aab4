"""The API reference pages, written from the snippet files present at build time.

One page per area (``api/<area>.md``): for each file of ``snippets/<area>/``, a
section named after the file, with links to the page that teaches it and to
the file itself, then one mkdocstrings entry (``::: snippets.<area>.<module>.<name>``)
per name of the file's ``__all__`` (its public faces, classes and constants).
mkdocstrings renders them from the Google docstrings (Args, Returns, Shape);
private helpers (``_check_...``) never appear.

Nothing here names a module: a file renamed, added or removed changes the page
at the next build. A top-level file (``snippets/device.py``) goes on the page of
the area whose page teaches it.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import re

from .closure import parse  # one syntax tree per text, shared with the caches

API_DIR = "api"
INCLUDE = re.compile(r'^[ \t]*--8<--[ \t]+"([^":]+\.py)(?::[A-Za-z][\w-]*)?"[ \t]*$', re.MULTILINE)
TITLE = re.compile(r"^#[ \t]+(.+?)[ \t]*$", re.MULTILINE)


@dataclasses.dataclass
class SnippetFile:
    """One snippet file and what its reference section needs."""

    rel: str  # "attention/multi_head.py", relative to snippets/
    names: list[str]  # its __all__, in order, that mkdocstrings can render
    others: list[str]  # the rest of its __all__ (constants bound by unpacking)
    pages: list[str]  # docs pages that include it, the page named after it first

    @property
    def module(self) -> str:
        return "snippets." + self.rel.removesuffix(".py").replace("/", ".")


def exported_names(path: pathlib.Path) -> list[str]:
    """The file's ``__all__`` (a literal list or tuple); without one, its public
    top-level functions and classes."""
    tree = parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            try:
                return [str(v) for v in ast.literal_eval(node.value)]
            except ValueError:  # built by an expression: fall back to the definitions
                break
    return [
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_")
    ]


def documented_names(path: pathlib.Path) -> set[str]:
    """Top-level names griffe can document: functions, classes and constants
    bound by a plain assignment (``X = ...`` or ``X: int = ...``). A name bound
    by unpacking (``PAD, BOS = 0, 1``) or imported is not among them."""
    names: set[str] = set()
    for node in parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def areas(snippets: pathlib.Path) -> list[str]:
    """The area folders of ``snippets/`` (packages), sorted."""
    return sorted(p.name for p in snippets.iterdir() if p.is_dir() and (p / "__init__.py").is_file())


def including_pages(docs: pathlib.Path) -> dict[str, list[str]]:
    """Snippet file (relative to ``snippets/``) -> the docs pages that include a
    section of it, as source URIs (``attention/multi-head.md``), sorted."""
    found: dict[str, set[str]] = {}
    for md in docs.rglob("*.md"):
        uri = md.relative_to(docs).as_posix()
        if uri.startswith(f"{API_DIR}/"):
            continue
        for rel in INCLUDE.findall(md.read_text(encoding="utf-8")):
            found.setdefault(rel, set()).add(uri)
    return {rel: sorted(pages) for rel, pages in found.items()}


def teaching_first(rel: str, pages: list[str]) -> list[str]:
    """Order the pages that include ``rel``: the page named after the file, then
    the pages of the file's own area, then the rest."""
    stem = pathlib.PurePosixPath(rel).stem
    area = rel.split("/")[0] if "/" in rel else None

    def rank(uri: str) -> tuple[int, str]:
        page = pathlib.PurePosixPath(uri)
        if page.stem.replace("-", "_") == stem:
            return (0, uri)
        if area is not None and page.parts[0] == area:
            return (1, uri)
        return (2, uri)

    return sorted(pages, key=rank)


def page_title(md: pathlib.Path) -> str:
    """A page's first level-one heading (its title), else its file name."""
    text = md.read_text(encoding="utf-8")
    match = TITLE.search(re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.DOTALL))
    return match.group(1) if match else md.stem.replace("-", " ")


def collect(root: pathlib.Path, docs: pathlib.Path) -> dict[str, list[SnippetFile]]:
    """Area -> its snippet files, each with its ``__all__`` and teaching pages."""
    snippets = root / "snippets"
    pages = including_pages(docs)
    by_area: dict[str, list[SnippetFile]] = {area: [] for area in areas(snippets)}
    for path in sorted(snippets.rglob("*.py")):
        if path.name.startswith("_") or "__pycache__" in path.parts:
            continue
        rel = path.relative_to(snippets).as_posix()
        including = teaching_first(rel, pages.get(rel, []))
        if "/" in rel:
            area = rel.split("/")[0]
        else:  # a top-level file: the area of the first page that teaches it
            area = next((p.split("/")[0] for p in including if p.split("/")[0] in by_area), None)
            if area is None:
                continue
        exported, documented = exported_names(path), documented_names(path)
        shown = [name for name in exported if name in documented]
        others = [name for name in exported if name not in documented]
        by_area.setdefault(area, []).append(SnippetFile(rel, shown, others, including))
    return by_area


def area_markdown(area: str, title: str, files: list[SnippetFile], docs: pathlib.Path) -> str:
    """The Markdown of ``api/<area>.md``: one section per file, one entry per public name."""
    lines = [
        # The teaching page ranks above its reference entries in search.
        "---",
        "search:",
        "  boost: 0.5",
        "---",
        "",
        f"# API reference: {title}",
        "",
        f"The public functions and classes of the `snippets/{area}/` files, with their "
        "arguments, returns and shapes, written from the docstrings when this site was "
        "built. The math kernels that carry each equation are shown and explained on "
        "the teaching pages; each section below links to its page and to the file, "
        "which runs when copied alone into a project that has torch.",
        "",
    ]
    for file in files:
        name = pathlib.PurePosixPath(file.rel).name
        lines += [f"## `{name}`", ""]
        links = []
        if file.pages:
            first, *others = file.pages
            links.append(f"Taught on [{page_title(docs / first)}](../{first})")
            if others:
                also = ", ".join(f"[{page_title(docs / uri)}](../{uri})" for uri in others)
                links.append(f"also used on {also}")
        links.append(f"the file: [`snippets/{file.rel}`](../snippets/{file.rel})")
        lines += ["; ".join(links) + ".", ""]
        if not file.names and not file.others:
            lines += ["This file exports no public names.", ""]
        if file.others:
            listed = ", ".join(f"`{name}`" for name in file.others)
            lines += [f"Constants it also exports: {listed} (defined in the file).", ""]
        for exported in file.names:
            lines += [f"::: {file.module}.{exported}", ""]
    return "\n".join(lines)


def index_markdown(titles: dict[str, str]) -> str:
    """The reference's landing page: one link per area page."""
    lines = [
        "# API reference",
        "",
        "One page per area, written from the docstrings of the files in `snippets/` "
        "when this site was built: every public function and class with its arguments, "
        "returns and tensor shapes (in the letters of the [notation](../notation.md)). "
        "Each file's section links to the page that teaches it.",
        "",
    ]
    lines += [f"- [{title}]({area}.md)" for area, title in titles.items()]
    return "\n".join(lines) + "\n"


def nav_titles(nav, areas_: list[str]) -> dict[str, str]:
    """Area -> the title of the navigation section whose pages live in its folder
    (``Modern decoder`` for ``modern``), else the folder name capitalised."""
    titles: dict[str, str] = {}

    def pages_of(item) -> list[str]:
        if isinstance(item, str):
            return [item]
        if isinstance(item, dict):
            return [p for value in item.values() for p in pages_of(value)]
        if isinstance(item, list):
            return [p for value in item for p in pages_of(value)]
        return []

    for entry in nav or []:
        if not isinstance(entry, dict):
            continue
        for title, value in entry.items():
            folders = {p.split("/")[0] for p in pages_of(value) if "/" in p}
            if len(folders) == 1:
                titles.setdefault(folders.pop(), title)
    return {area: titles.get(area, area.capitalize()) for area in areas_}
