"""The teaching pages' figures: drawn by hooks/figures.py from docs/figures/*.py.

Every teaching page shows at least one figure with alternative text, in both
palettes; the cache follows the code a figure draws with; a figure that fails
fails the build with one line.
"""

from __future__ import annotations

import html
import importlib.util
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT

DOCS = ROOT / "docs"
TEACHING = sorted(
    [DOCS / "index.md", DOCS / "notation.md"]
    + [p for area in ("foundations", "attention", "architecture", "modern", "efficiency", "linear", "distributed",
                      "history")
       for p in (DOCS / area).glob("*.md")]
)
IMG = re.compile(r"<img\b[^>]*>")


def load_hook():
    spec = importlib.util.spec_from_file_location("hook_figures_under_test", ROOT / "hooks" / "figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def built_page(site: pathlib.Path, md: pathlib.Path) -> pathlib.Path:
    rel = md.relative_to(DOCS).with_suffix("")
    return site / "index.html" if rel.as_posix() == "index" else site / rel / "index.html"


def _attr(tag: str, name: str) -> str | None:
    found = re.search(rf'\b{name}="([^"]*)"', tag)
    return html.unescape(found.group(1)) if found else None


@pytest.mark.site
@pytest.mark.parametrize("md", TEACHING, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_every_teaching_page_shows_a_drawn_figure_in_both_palettes(site_dir, md):
    page = built_page(site_dir, md)
    drawn = [tag for tag in IMG.findall(page.read_text(encoding="utf-8")) if "fg-drawn" in (_attr(tag, "class") or "")]
    assert drawn, f"{md.relative_to(DOCS)} shows no figure drawn by hooks/figures.py"
    palettes = {}
    for tag in drawn:
        alt, src = _attr(tag, "alt"), _attr(tag, "src")
        assert alt and len(alt) > 30, f"{md.name}: figure {src} has no real alternative text: {alt!r}"
        path, _, fragment = src.partition("#")
        assert fragment in ("only-light", "only-dark"), src
        svg = (page.parent / path).resolve()
        assert svg.is_file(), f"{md.name}: {src} is not in the built site"
        head = svg.read_text(encoding="utf-8")[:400]
        assert "<svg" in head, f"{svg} is not an SVG file"
        palettes.setdefault(path.replace("-light.svg", "").replace("-dark.svg", ""), set()).add(fragment)
    for figure, seen in palettes.items():
        assert seen == {"only-light", "only-dark"}, f"{md.name}: {figure} is shown in {seen} only"


@pytest.mark.site
def test_figures_are_drawn_in_each_palettes_ink(site_dir):
    """The dark copy is not the light one: its text is light, the light copy's dark."""
    light = site_dir / "figures" / "foundations" / "mask_kinds-light.svg"
    dark = site_dir / "figures" / "foundations" / "mask_kinds-dark.svg"
    sys.path.insert(0, str(DOCS / "figures"))
    try:
        from _style import COLOURS
    finally:
        sys.path.remove(str(DOCS / "figures"))
    light_text, dark_text = light.read_text(encoding="utf-8"), dark.read_text(encoding="utf-8")
    assert COLOURS["light"]["ink"] in light_text and COLOURS["light"]["ink"] not in dark_text
    assert COLOURS["dark"]["ink"] in dark_text and COLOURS["dark"]["ink"] not in light_text
    # Transparent background: the page's own colour shows through.
    for text in (light_text, dark_text):
        background = re.search(r'<g id="patch_1">\s*<path [^>]*style="([^"]*)"', text)
        assert background and background.group(1) == "fill: none", background


def test_cache_key_follows_the_script_and_the_snippets_it_draws_with(tmp_path):
    hook = load_hook()
    (tmp_path / "snippets" / "area").mkdir(parents=True)
    (tmp_path / "snippets" / "__init__.py").write_text("")
    (tmp_path / "snippets" / "area" / "__init__.py").write_text("")
    used = tmp_path / "snippets" / "area" / "masks.py"
    unused = tmp_path / "snippets" / "area" / "other.py"
    used.write_text("def mask():\n    return 1\n")
    unused.write_text("X = 1\n")
    figures = tmp_path / "docs" / "figures"
    figures.mkdir(parents=True)
    style = figures / "_style.py"
    style.write_text("INK = 'black'\n")
    script = figures / "masks.py"
    script.write_text("import _style\nfrom snippets.area.masks import mask\n\ndef grid(s):\n    return mask()\n")
    roots = [tmp_path, figures]
    key = lambda: hook.cache_key(script, roots, "env")  # noqa: E731
    first = key()
    unused.write_text("X = 2\n")
    assert key() == first, "a snippet the figure does not import must not redraw it"
    used.write_text("def mask():\n    return 2\n")
    second = key()
    assert second != first, "a snippet the figure draws with must redraw it"
    style.write_text("INK = 'white'\n")
    third = key()
    assert third != second, "the shared style must redraw it"
    script.write_text(script.read_text() + "# edited\n")
    assert key() != third, "an edit to the figure script must redraw it"
    assert hook.cache_key(script, roots, "other matplotlib") != key()


def test_cache_key_follows_the_data_files_a_figure_reads(tmp_path):
    """A figure drawn from docs/data/models.yaml, through a module that names it, redraws when it changes."""
    hook = load_hook()
    (tmp_path / "docs" / "data").mkdir(parents=True)
    data, other = tmp_path / "docs" / "data" / "models.yaml", tmp_path / "docs" / "data" / "other.yaml"
    data.write_text("models: [a]\n")
    other.write_text("x: 1\n")
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "reader.py").write_text("DATA = 'docs/data/models.yaml'\n")
    figures = tmp_path / "docs" / "figures"
    figures.mkdir()
    script = figures / "models.py"
    script.write_text("from tables.reader import DATA\n\ndef sizes(s):\n    return DATA\n")
    roots = [tmp_path, figures]
    first = hook.cache_key(script, roots, "env")
    other.write_text("x: 2\n")
    assert hook.cache_key(script, roots, "env") == first, "a data file no module names must not redraw it"
    data.write_text("models: [a, b]\n")
    assert hook.cache_key(script, roots, "env") != first, "the data file it reads must redraw it"


def test_cache_key_follows_the_gpu_results_a_figure_draws(tmp_path):
    """A figure that names bench/results redraws when a results file is added or
    changed; a figure that does not name it never does."""
    hook = load_hook()
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    (results / "gpu-2030-01-01.json").write_text("{}\n")
    figures = tmp_path / "docs" / "figures"
    figures.mkdir(parents=True)
    gpu = figures / "gpu.py"
    gpu.write_text('"""Drawn from bench/results."""\n\ndef speed(s):\n    return None\n')
    plain = figures / "plain.py"
    plain.write_text("def shape(s):\n    return None\n")
    roots = [tmp_path, figures]
    first, untouched = hook.cache_key(gpu, roots, "env"), hook.cache_key(plain, roots, "env")
    (results / "gpu-2030-01-02.json").write_text("{}\n")
    second = hook.cache_key(gpu, roots, "env")
    assert second != first, "a new results file must redraw it"
    (results / "gpu-2030-01-01.json").write_text('{"rows": []}\n')
    assert hook.cache_key(gpu, roots, "env") != second, "a changed results file must redraw it"
    assert hook.cache_key(plain, roots, "env") == untouched


def _mini_project(tmp_path: pathlib.Path, script: str, page: str) -> pathlib.Path:
    """A site with only the figures hook: one page, one figure script."""
    project = tmp_path / "project"
    (project / "docs" / "figures").mkdir(parents=True)
    (project / "docs" / "figures" / "demo.py").write_text(textwrap.dedent(script))
    (project / "docs" / "index.md").write_text(textwrap.dedent(page))
    (project / "mkdocs.yml").write_text(
        f"site_name: demo\nstrict: true\nhooks:\n  - {ROOT / 'hooks' / 'figures.py'}\n"
        "markdown_extensions:\n  - attr_list\n"
    )
    return project


def _build(project: pathlib.Path, tmp_path: pathlib.Path):
    env = {**os.environ, "FIELD_GUIDE_FIGURE_CACHE": str(tmp_path / "cache"), "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "out")],
        cwd=project, env=env, capture_output=True, text=True, timeout=120,
    )
    return result.returncode, result.stdout + result.stderr


GOOD = """\
    from matplotlib.figure import Figure

    def square(s):
        fig = Figure(figsize=(1, 1))
        fig.add_subplot().plot([0, 1], [0, 1])
        return fig
"""


def test_a_drawn_figure_reaches_the_page(tmp_path):
    project = _mini_project(tmp_path, GOOD, "# Demo\n\n![A rising line from 0 to 1](figure:demo/square)\n")
    code, log = _build(project, tmp_path)
    assert code == 0, log[-3000:]
    page = (tmp_path / "out" / "index.html").read_text()
    assert 'src="figures/demo/square-light.svg#only-light"' in page
    assert 'src="figures/demo/square-dark.svg#only-dark"' in page
    assert (tmp_path / "out" / "figures" / "demo" / "square-dark.svg").is_file()
    assert not (tmp_path / "out" / "figures" / "demo.py").exists(), "the scripts are not published"


def test_a_failing_figure_fails_the_build_with_one_line(tmp_path):
    broken = GOOD.replace("fig.add_subplot()", "raise ZeroDivisionError('broken on purpose')\n        fig.add_subplot()")
    code, log = _build(_mini_project(tmp_path, broken, "![A rising line](figure:demo/square)\n"), tmp_path)
    assert code != 0, log[-3000:]
    line = "docs/figures/demo.py:square (light) failed: ZeroDivisionError: broken on purpose"
    # One line as it happens, and the build's error names it again.
    assert len([entry for entry in log.splitlines() if line in entry]) == 2, log[-3000:]
    assert f"1 figure(s) failed: {line}" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


class _Page:
    def __init__(self, src_uri: str):
        self.file = type("F", (), {"src_uri": src_uri})()


@pytest.mark.parametrize(
    "markdown, message",
    [
        ("![](figure:demo/square)", "index.md: figure:demo/square has no alternative text"),
        ("![ ](figure:demo/square)", "index.md: figure:demo/square has no alternative text"),
        ("![A line](figure:demo/circle)", "index.md: figure:demo/circle is not defined"),
    ],
)
def test_a_page_that_names_a_figure_wrongly_fails(markdown, message):
    from mkdocs.exceptions import PluginError

    hook = load_hook()
    hook._state.update(svgs={"demo/square-light": "x", "demo/square-dark": "x"}, used=set())
    with pytest.raises(PluginError, match=re.escape(message)):
        hook.on_page_markdown(markdown, _Page("index.md"), None, None)


def test_a_figure_no_page_shows_is_a_warning(caplog):
    hook = load_hook()
    hook._state.update(svgs={"demo/square-light": "x", "demo/square-dark": "x"}, used=set())
    assert hook.on_page_markdown("![A line](figure:demo/square)", _Page("a/b.md"), None, None).count("![A line](") == 2
    hook.on_env(None, None, None)
    assert not [r for r in caplog.records if "shown on no page" in r.getMessage()]
    hook._state["used"] = set()
    hook.on_env(None, None, None)
    assert [r for r in caplog.records if r.getMessage() == "figures: docs/figures/demo.py:square is shown on no page"]


def test_figures_draw_on_one_torch_thread_and_give_the_others_back(tmp_path, monkeypatch):
    """The build shares the cores with the example kernels: a figure computes
    on one thread (a second one only spins while it waits for a core), and the
    build's own thread count is restored afterwards."""
    import torch

    hook = load_hook()
    docs = tmp_path / "docs"
    (docs / "figures").mkdir(parents=True)
    (docs / "figures" / "threads.py").write_text(textwrap.dedent("""\
        import torch
        from matplotlib.figure import Figure

        def count(s):
            fig = Figure(figsize=(1, 1))
            fig.text(0.1, 0.5, f"threads {torch.get_num_threads()}")
            return fig
    """))
    monkeypatch.setenv("FIELD_GUIDE_FIGURE_CACHE", str(tmp_path / "cache"))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        svgs = hook.render_all(docs, tmp_path)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    for palette in hook.PALETTES:
        drawn = svgs[f"threads/count-{palette}"].read_text()
        assert "threads 1" in drawn, palette
