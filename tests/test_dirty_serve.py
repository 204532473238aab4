"""``mkdocs serve --dirty`` rebuilds a page when a snippet it includes changes
(hooks/dirty_serve.py), and leaves the API reference alone when none did."""

from __future__ import annotations

import importlib.util
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _hook():
    spec = importlib.util.spec_from_file_location("dirty_serve_hook", ROOT / "hooks" / "dirty_serve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _project(tmp_path: pathlib.Path):
    """A tiny project: one page that includes a snippet, one that does not, an
    API page generated as text, the ledger page; every output built at t = 1000."""
    from mkdocs.config import load_config
    from mkdocs.structure.files import File, Files

    for name, text in {
        "docs/page.md": 'Text.\n\n```python\n--8<-- "area/x.py:kernel"\n```\n',
        "docs/plain.md": "No code here.\n",
        "docs/models.md": "A table.\n\n<!-- models:attention -->\n",
        "docs/data/models.yaml": "models: []\n",
        "docs/ledger.md": "<!-- ledger -->\n",
        "snippets/area/x.py": "# --8<-- [start:kernel]\nx = 1\n# --8<-- [end:kernel]\n",
        "snippets/other/y.py": "y = 2\n",
        "mkdocs.yml": "site_name: t\n",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    config = load_config(config_file=str(tmp_path / "mkdocs.yml"))
    files = Files([File(name, config.docs_dir, config.site_dir, config.use_directory_urls)
                   for name in ("page.md", "plain.md", "ledger.md", "models.md")])
    api = File("api/area.md", None, config.site_dir, config.use_directory_urls)
    api.content_string = "::: snippets.area.x\n"  # generated text, as hooks/api_reference.py makes
    files.append(api)
    for file in files:
        out = pathlib.Path(file.abs_dest_path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("built")
        os.utime(out, (1000, 1000))
    for path in [*(tmp_path / "docs").rglob("*.md"), tmp_path / "docs" / "data" / "models.yaml"]:
        os.utime(path, (500, 500))
    for path in (tmp_path / "snippets").rglob("*.py"):
        os.utime(path, (500, 500))
    return config, files


def _modified(files) -> dict[str, bool]:
    return {f.src_uri: f.is_modified() for f in files}


def test_included_snippets_reads_the_include_lines():
    hook = _hook()
    text = 'a\n```python\n--8<-- "area/x.py:kernel"\n```\n  --8<-- "b/y.py"\n--8<-- "notes.md"\n'
    assert hook.included_snippets(text, pathlib.Path("s")) == [pathlib.Path("s/area/x.py"),
                                                              pathlib.Path("s/b/y.py")]


# (file touched after the build, or None; dirty; which pages count as changed)
CASES = {
    "nothing changed: only the ledger": (
        None, True, {"page.md": False, "plain.md": False, "ledger.md": True, "models.md": False,
                     "api/area.md": False}),
    "a snippet: the pages that show it and its area's API page": (
        "snippets/area/x.py", True, {"page.md": True, "plain.md": False, "ledger.md": True,
                                     "models.md": False, "api/area.md": True}),
    "another area's snippet: nothing of this area": (
        "snippets/other/y.py", True, {"page.md": False, "plain.md": False, "ledger.md": True,
                                      "models.md": False, "api/area.md": False}),
    "a data file: the pages filled from it": (
        "docs/data/models.yaml", True, {"page.md": False, "plain.md": False, "ledger.md": True,
                                        "models.md": True, "api/area.md": False}),
    # Without --dirty MkDocs' own rule stands: generated text always counts as
    # changed, a file by its own mtime.
    "no --dirty: MkDocs decides": (
        "snippets/area/x.py", False, {"page.md": False, "plain.md": False, "ledger.md": False,
                                      "models.md": False, "api/area.md": True}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_what_counts_as_changed(tmp_path, case):
    touched, dirty, expected = CASES[case]
    hook = _hook()
    config, files = _project(tmp_path)
    if touched:
        os.utime(tmp_path / touched, (2000, 2000))
    hook.on_startup(command="serve", dirty=dirty)
    hook.on_files(files, config)
    assert _modified(files) == expected


def test_an_example_still_executing_counts_as_changed(tmp_path):
    from mkdocs.structure.files import File

    hook = _hook()
    config, files = _project(tmp_path)
    notebook = tmp_path / "cache" / "x-0123.ipynb"  # the new notebook, not written yet
    example = File("examples/x.py", None, config.site_dir, config.use_directory_urls)
    example.abs_src_path = str(notebook)
    pathlib.Path(example.abs_dest_path).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(example.abs_dest_path).write_text("built")  # the page of the last build
    files.append(example)
    hook.on_startup(command="serve", dirty=True)
    hook.on_files(files, config)
    assert example.is_modified() is True
