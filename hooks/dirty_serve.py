"""MkDocs hook: ``mkdocs serve --dirty`` rebuilds what an edit changes, and only that.

MkDocs' ``--dirty`` rebuilds a page only when its own source file is newer
than its output. On this site a page's output also depends on other files, so
under ``--dirty`` (and only then) this hook widens what counts as changed:

* a Markdown page, when a snippet file it includes (``--8<-- "area/file.py:x"``)
  is newer than its output;
* an API reference page (generated text, which MkDocs would rebuild on every
  edit), only when a snippet of its area is newer than its output (the index,
  when any snippet is);
* a page with a table or form filled from ``docs/data/`` (``<!-- models:... -->``,
  ``<!-- calculator:... -->``), when a file there is newer;
* the equivalence ledger page, always (any snippet can move its numbers).

The executed examples are named by a key of their sources
(``hooks/field_guide_hooks/closure.py``), so an edit that changes one writes a
new notebook, still being executed when MkDocs asks whether the page changed:
a page whose source file does not exist yet counts as changed (the examples
hook makes the page wait for its notebook). Figures keep their addresses, and
their files are copied when they change. A plain ``mkdocs serve`` or
``mkdocs build`` is untouched.

MkDocs warns on every dirty build that navigation may be inaccurate; under
``strict: true`` that warning alone would abort the build, so it is shown as
information (every other warning still fails a strict build). The figures
hook skips its "figure shown on no page" check in a dirty build, which reads
only some pages.
"""

from __future__ import annotations

import logging
import pathlib
import re
import sys

from mkdocs.plugins import event_priority
from mkdocs.structure.files import Files

# MkDocs loads hooks by path: the shared rooms live in a package next to this file.
if str(pathlib.Path(__file__).resolve().parent) not in sys.path:
    sys.path.append(str(pathlib.Path(__file__).resolve().parent))

from field_guide_hooks.api_reference import API_DIR, INCLUDE  # noqa: E402

LEDGER_PAGE = "ledger.md"
# Placeholders that hooks fill from docs/data/ (models_table.py, config_calculator.py).
DATA_PLACEHOLDER = re.compile(r"<!--\s*(?:models|calculator):")

_state = {"dirty": False}


class _DirtyNotice(logging.Filter):
    """MkDocs' "A 'dirty' build is being performed" warning, as information."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and "'dirty' build" in record.getMessage():
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def on_startup(command, dirty: bool) -> None:
    _state["dirty"] = dirty
    build_log = logging.getLogger("mkdocs.commands.build")
    if dirty and not any(isinstance(f, _DirtyNotice) for f in build_log.filters):
        build_log.addFilter(_DirtyNotice())


def included_snippets(markdown: str, snippets: pathlib.Path) -> list[pathlib.Path]:
    """The snippet files a page includes, by its ``--8<-- "file.py:section"`` lines."""
    return [snippets / name for name in INCLUDE.findall(markdown)]


def sources_of(file, root: pathlib.Path) -> list[pathlib.Path] | None:
    """The files besides its own source that a page's output is built from;
    None where there is nothing to add (MkDocs' own test stands)."""
    snippets = root / "snippets"
    uri = file.src_uri
    if uri.startswith(f"{API_DIR}/"):
        area = pathlib.PurePosixPath(uri).stem
        return sorted((snippets if area == "index" else snippets / area).rglob("*.py"))
    if file.abs_src_path and uri.endswith(".md"):
        text = pathlib.Path(file.abs_src_path).read_text(encoding="utf-8")
        found = included_snippets(text, snippets)
        if DATA_PLACEHOLDER.search(text):
            found += sorted((root / "docs" / "data").glob("*.*"))
        return found or None
    return None


def _changed(output: pathlib.Path, sources: list[pathlib.Path]) -> bool:
    built = output.stat().st_mtime
    return any(path.is_file() and path.stat().st_mtime > built for path in sources)


@event_priority(-100)  # last: after the other hooks have added their pages
def on_files(files: Files, config) -> Files:
    if not _state["dirty"]:
        return files
    _executing(files)
    root = pathlib.Path(config.config_file_path).resolve().parent
    for file in files.documentation_pages():
        output = pathlib.Path(file.abs_dest_path)
        if not output.is_file():
            continue  # never built: MkDocs builds it
        if file.src_uri == LEDGER_PAGE:
            changed = True
        else:
            sources = sources_of(file, root)
            if sources is None:
                continue
            own = [pathlib.Path(file.abs_src_path)] if file.abs_src_path else []
            changed = _changed(output, own + sources)
        file.is_modified = (lambda value: lambda: value)(changed)
    return files


def _executing(files: Files) -> None:
    """An example whose sources changed is executing now into a new notebook
    (on_pre_page waits for it): it has changed, and its file is not there yet."""
    for file in files:
        if file.abs_src_path and not pathlib.Path(file.abs_src_path).exists():
            file.is_modified = lambda: True


@event_priority(-100)  # after mkdocs-jupyter has wrapped the notebooks and examples.py pinned them
def on_nav(nav, config, files: Files):
    if _state["dirty"]:
        _executing(files)
    return nav
