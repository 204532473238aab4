"""The API reference: one page per area, written from the snippets' docstrings.

``hooks/api_reference.py`` writes ``api/<area>.md`` from the files present in
``snippets/<area>/`` and mkdocstrings renders them. The unit tests read the
pages the hook writes (no build); the site test reads the built pages and
requires every public callable of every snippet's ``__all__`` on its area's
page, under the heading mkdocstrings gives it (``id="snippets.<area>.<module>.<name>"``).
"""

from __future__ import annotations

import ast
import functools
import importlib
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SNIPPETS = ROOT / "snippets"
DOCS = ROOT / "docs"

sys.path.append(str(ROOT / "hooks"))
from field_guide_hooks import api_reference as ref  # noqa: E402


def snippet_files() -> list[pathlib.Path]:
    return sorted(
        p for p in SNIPPETS.rglob("*.py") if not p.name.startswith("_") and "__pycache__" not in p.parts
    )


def module_name(path: pathlib.Path) -> str:
    return "snippets." + path.relative_to(SNIPPETS).with_suffix("").as_posix().replace("/", ".")


def literal_all(path: pathlib.Path) -> list[str]:
    """``__all__`` as written in the file (read independently of the hook)."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return []


def public_callables(path: pathlib.Path) -> list[str]:
    """The names of ``__all__`` that are callable once the module is imported."""
    module = importlib.import_module(module_name(path))
    return [name for name in module.__all__ if callable(getattr(module, name))]


@functools.cache
def collected() -> dict:
    return ref.collect(ROOT, DOCS)


# ------------------------------------------------------------ no build ----
def test_every_area_folder_gets_a_page_and_every_file_a_section():
    by_area = collected()
    folders = sorted(p.name for p in SNIPPETS.iterdir() if (p / "__init__.py").is_file())
    assert sorted(by_area) == folders
    listed = {f.rel for files in by_area.values() for f in files}
    for path in snippet_files():
        rel = path.relative_to(SNIPPETS).as_posix()
        if "/" in rel:
            assert rel in listed, f"snippets/{rel} has no section in the API reference"


@pytest.mark.parametrize("path", snippet_files(), ids=lambda p: p.relative_to(SNIPPETS).as_posix())
def test_each_exported_name_has_an_entry_and_private_helpers_none(path):
    by_area = collected()
    rel = path.relative_to(SNIPPETS).as_posix()
    found = [(area, f) for area, files in by_area.items() for f in files if f.rel == rel]
    if "/" not in rel and not found:
        pytest.skip(f"snippets/{rel} is taught on no page")
    (area, file), = found
    page = ref.area_markdown(area, area, [file], DOCS)
    entries = re.findall(r"^::: (\S+)$", page, flags=re.MULTILINE)
    for name in public_callables(path):
        assert f"{module_name(path)}.{name}" in entries, f"{name} of snippets/{rel} has no entry"
    assert not [e for e in entries if e.rsplit(".", 1)[1].startswith("_")], entries
    assert set(literal_all(path)) <= set(file.names) | set(file.others)


def test_sections_link_to_the_teaching_page_and_the_file():
    by_area = collected()
    files = {f.rel: (area, f) for area, fs in by_area.items() for f in fs}
    area, file = files["attention/multi_head.py"] if "attention/multi_head.py" in files else next(iter(files.values()))
    page = ref.area_markdown(area, area, [file], DOCS)
    assert f"](../snippets/{file.rel})" in page
    if file.pages:
        assert f"](../{file.pages[0]})" in page
        # The page named after the file comes first.
        stem = pathlib.PurePosixPath(file.rel).stem
        named = [p for p in file.pages if pathlib.PurePosixPath(p).stem.replace("-", "_") == stem]
        assert not named or file.pages[0] == named[0]


def test_teaching_page_is_found_from_the_include_lines(tmp_path):
    docs = tmp_path / "docs"
    (docs / "area").mkdir(parents=True)
    (docs / "area" / "other.md").write_text('# Other\n\n```python\n--8<-- "area/foo_bar.py:kernel"\n```\n')
    (docs / "area" / "foo-bar.md").write_text('# Foo bar\n\n    --8<-- "area/foo_bar.py"\n')
    (docs / "index.md").write_text("# Home\n")
    pages = ref.including_pages(docs)
    assert pages == {"area/foo_bar.py": ["area/foo-bar.md", "area/other.md"]}
    assert ref.teaching_first("area/foo_bar.py", ["area/other.md", "area/foo-bar.md"])[0] == "area/foo-bar.md"
    assert ref.page_title(docs / "area" / "foo-bar.md") == "Foo bar"


def test_names_bound_by_unpacking_are_listed_not_rendered(tmp_path):
    source = tmp_path / "m.py"
    source.write_text('__all__ = ["f", "C", "X", "PAD", "BOS"]\nPAD, BOS = 0, 1\nX = 3\n'
                      "def f():\n    pass\nclass C:\n    pass\ndef _g():\n    pass\n")
    assert ref.exported_names(source) == ["f", "C", "X", "PAD", "BOS"]
    assert ref.documented_names(source) - {"__all__"} == {"f", "C", "X", "_g"}


def test_area_titles_come_from_the_navigation():
    nav = [{"Home": "index.md"}, {"Modern decoder": [{"A": "modern/a.md"}, {"B": "modern/b.md"}]}]
    assert ref.nav_titles(nav, ["modern", "history"]) == {"modern": "Modern decoder", "history": "History"}


# ----------------------------------------------------------- the built site ----
@pytest.mark.site
def test_every_public_callable_is_on_its_area_page(built_site):
    missing = []
    for path in snippet_files():
        rel = path.relative_to(SNIPPETS).as_posix()
        if "/" in rel:
            pages = [built_site.path / "api" / rel.split("/")[0] / "index.html"]
        else:  # a top-level file sits on the page of the area that teaches it
            pages = sorted((built_site.path / "api").glob("*/index.html"))
        html = "".join(p.read_text(encoding="utf-8") for p in pages)
        for name in public_callables(path):
            if f'id="{module_name(path)}.{name}"' not in html:
                missing.append(f"{module_name(path)}.{name}")
    assert not missing, f"not on their area's API reference page: {missing}"


@pytest.mark.site
def test_reference_pages_are_searchable_and_link_back(built_site):
    index = (built_site.path / "search" / "search_index.json").read_text(encoding="utf-8")
    assert "api/attention/" in index
    page = (built_site.path / "api" / "attention" / "index.html").read_text(encoding="utf-8")
    assert 'href="../../snippets/attention/' in page, "no link to a snippet file"
    assert re.search(r'href="\.\./\.\./attention/[\w-]+/"', page), "no link to a teaching page"
    # Parameters and returns come from the Google docstrings.
    assert "doc-section" in page or "Parameters" in page
