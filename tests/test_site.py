"""The site itself: a strict, cold build whose pages carry the tested code, the
executed examples and nothing from another host."""

from __future__ import annotations

import html
import importlib.util
import pathlib
import re
import shutil
import textwrap

import pytest

import browser_support as bs
from conftest import ROOT

pytestmark = pytest.mark.site

DOCS = ROOT / "docs"
EXAMPLES = sorted(p for p in (DOCS / "examples").glob("*.py") if not p.name.startswith("_"))
INCLUDE = re.compile(r'^[ \t]*--8<--[ \t]+"([^":]+)(?::([A-Za-z][\w-]*))?"', re.M)


def page_path(site, src: str) -> pathlib.Path:
    stem = src.rsplit(".", 1)[0]
    if stem.endswith("index"):
        return site.path / f"{stem}.html"
    return site.path / stem / "index.html"


def text_of(path: pathlib.Path) -> str:
    raw = path.read_text(encoding="utf-8")
    raw = re.sub(r"<(script|style)\b.*?</\1>", " ", raw, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", raw))


def load_hook(name: str):
    spec = importlib.util.spec_from_file_location(f"hook_{name}", ROOT / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------- the build ----
def test_build_is_strict_and_warning_free(built_site):
    assert "WARNING" not in built_site.log, built_site.log
    assert "Aborted" not in built_site.log


def test_every_markdown_page_is_built(built_site):
    for md in DOCS.rglob("*.md"):
        src = md.relative_to(DOCS).as_posix()
        assert page_path(built_site, src).is_file(), f"{src} was not built"


def test_included_code_is_on_the_page(built_site):
    text = text_of(page_path(built_site, "foundations/scaled-dot-product.md"))
    assert "def scaled_dot_product_attention(" in text
    assert "def causal_mask(" in text
    assert "torch.softmax(scores, dim=-1).masked_fill(~allowed, 0.0)" in text


def test_no_section_markers_or_include_lines_leak(built_site):
    for page in built_site.path.rglob("*.html"):
        raw = page.read_text(encoding="utf-8")
        assert "--8&lt;--" not in raw and "--8<--" not in raw, f"{page} shows a snippet marker"


def test_every_include_names_an_existing_section():
    """Independent of the build: each `--8<-- "file:section"` on a page exists."""
    for md in DOCS.rglob("*.md"):
        for file, section in INCLUDE.findall(md.read_text(encoding="utf-8")):
            source = ROOT / "snippets" / file
            assert source.is_file(), f"{md.relative_to(ROOT)} includes missing {file}"
            if section:
                text = source.read_text(encoding="utf-8")
                assert f"[start:{section}]" in text and f"[end:{section}]" in text, (
                    f"{md.relative_to(ROOT)} includes {file}:{section}, which has no such section"
                )


def test_snippet_files_are_downloadable(built_site):
    published = built_site.path / "snippets" / "foundations" / "scaled_dot_product.py"
    assert published.read_bytes() == (ROOT / "snippets/foundations/scaled_dot_product.py").read_bytes()
    raw = page_path(built_site, "foundations/scaled-dot-product.md").read_text(encoding="utf-8")
    assert 'href="../../snippets/foundations/scaled_dot_product.py"' in raw


def test_footer_states_torch_version_and_device(built_site):
    import torch

    for src in ("index.md", "foundations/scaled-dot-product.md"):
        text = text_of(page_path(built_site, src))
        assert f"torch {torch.__version__}" in text and "on cpu" in text


# -------------------------------------------------------------- examples ----
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_executed(built_site, example):
    page = built_site.path / "examples" / example.stem / "index.html"
    raw = page.read_text(encoding="utf-8")
    assert "jp-OutputArea-output" in raw, f"{example.name} has no output"
    assert "Traceback (most recent call last)" not in raw
    assert 'alt="No description has been provided for this image"' not in raw
    assert (built_site.path / "examples" / example.name).read_bytes() == example.read_bytes()


def test_example_figure_and_printed_shapes(built_site):
    raw = (built_site.path / "examples" / "scaled_dot_product" / "index.html").read_text(encoding="utf-8")
    figures = [html.unescape(a) for a in re.findall(r'<img\b[^>]*\balt="([^"]+)"[^>]*\bsrc="data:image/png;base64,', raw)]
    assert figures and all(len(alt) > 30 for alt in figures), figures
    assert "Professor" in figures[0]
    text = text_of(built_site.path / "examples" / "scaled_dot_product" / "index.html")
    assert "out (2, 4, 6, 16) weights (2, 4, 6, 9)" in text


def test_links_in_examples_are_rewritten(built_site):
    raw = (built_site.path / "examples" / "softmax_saturation" / "index.html").read_text(encoding="utf-8")
    assert 'href="../../foundations/scaled-dot-product/#why-divide-by-sqrtd"' in raw
    assert ".md" not in re.findall(r'href="([^"]*foundations[^"]*)"', raw)[0]


# --------------------------------------------------------------- offline ----
LOADED = [
    re.compile(r'<(?:script|img|iframe|source|audio|video|embed|track)\b[^>]*\bsrc="((?:https?:)?//[^"]+)"', re.I),
    re.compile(r'<link\b(?=[^>]*\brel="(?:stylesheet|preload|modulepreload|icon|prefetch|preconnect|dns-prefetch|manifest)")[^>]*\bhref="((?:https?:)?//[^"]+)"', re.I),
    re.compile(r'@import\s+(?:url\()?["\']?((?:https?:)?//[^"\')\s]+)', re.I),
    re.compile(r'url\(\s*["\']?((?:https?:)?//[^"\')\s]+)', re.I),
    re.compile(r'import\(\s*["\']((?:https?:)?//[^"\']+)', re.I),
]


def test_no_page_loads_anything_from_another_host(built_site):
    offenders = []
    for path in list(built_site.path.rglob("*.html")) + list(built_site.path.rglob("*.css")):
        raw = path.read_text(encoding="utf-8", errors="replace")
        for pattern in LOADED:
            for url in pattern.findall(raw):
                if not re.match(r"^(?:https?:)?//(?:localhost|127\.0\.0\.1)[:/]", url) and "www.w3.org" not in url:
                    offenders.append(f"{path.relative_to(built_site.path)}: {url}")
    assert not offenders, "\n".join(offenders[:20])


def test_math_renderer_is_served_by_the_site(built_site):
    for asset in ("vendor/katex/katex.min.js", "vendor/katex/katex.min.css",
                  "vendor/katex/contrib/auto-render.min.js", "vendor/katex/LICENSE"):
        assert (built_site.path / asset).is_file(), asset
    css = (built_site.path / "vendor/katex/katex.min.css").read_text()
    for font in re.findall(r"url\((fonts/[^)]+\.woff2)\)", css):
        assert (built_site.path / "vendor/katex" / font).is_file(), font
    raw = page_path(built_site, "foundations/scaled-dot-product.md").read_text(encoding="utf-8")
    assert 'class="arithmatex"' in raw


# --------------------------------------------------- the example machinery ----
def test_cache_key_follows_the_code_an_example_imports(tmp_path):
    hook = load_hook("examples")
    (tmp_path / "snippets" / "area").mkdir(parents=True)
    (tmp_path / "snippets" / "__init__.py").write_text("")
    (tmp_path / "snippets" / "area" / "__init__.py").write_text("")
    used = tmp_path / "snippets" / "area" / "used.py"
    helper = tmp_path / "snippets" / "area" / "helper.py"
    unused = tmp_path / "snippets" / "area" / "unused.py"
    used.write_text("from snippets.area.helper import h\nX = 1\n")
    helper.write_text("def h():\n    return 1\n")
    unused.write_text("Y = 1\n")
    example = tmp_path / "ex.py"
    example.write_text("from snippets.area import used\nprint(used.X)\n")
    key = lambda: hook.cache_key(example, [tmp_path], "env")  # noqa: E731
    first = key()
    unused.write_text("Y = 2\n")
    assert key() == first, "an unrelated snippet must not invalidate the example"
    used.write_text("from snippets.area.helper import h\nX = 2\n")
    second = key()
    assert second != first, "a snippet the example imports must invalidate it"
    helper.write_text("def h():\n    return 2\n")
    assert key() != second, "a module imported by an imported module must invalidate it"
    assert hook.cache_key(example, [tmp_path], "other torch") != key()


def _run_two_in_one_kernel(root: pathlib.Path, tmp_path: pathlib.Path, first: str, second: str):
    """Run the example sources ``first`` then ``second`` in one kernel, as a
    worker does; return the second's executed notebook and what it printed."""
    import nbformat

    hook = load_hook("examples")
    kernel = hook.Kernel(root, 1)
    try:
        for name, source in (("first", first), ("second", second)):
            example = tmp_path / f"{name}.py"
            example.write_text(source)
            kernel.run(example, tmp_path / f"{name}.ipynb")
    finally:
        kernel.close()
    nb = nbformat.read(tmp_path / "second.ipynb", as_version=4)
    return nb, "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))


def test_examples_sharing_a_kernel_start_clean(tmp_path):
    """A worker's kernel runs several examples; none may see another's state,
    and each still shows its figures."""
    nb, printed = _run_two_in_one_kernel(
        ROOT, tmp_path,
        "# %%\nimport torch, matplotlib\nimport matplotlib.pyplot as plt\n"
        "leftover = 1\ntorch.set_num_threads(2)\ntorch.set_default_dtype(torch.float64)\n"
        "matplotlib.rcParams['lines.linewidth'] = 9.0\n"
        "# %%\n# alt: A line drawn by the first example.\nplt.plot([1, 2]);\n",
        "# %%\nimport torch, matplotlib\nimport matplotlib.pyplot as plt\n"
        "print('leftover' in globals(), torch.get_num_threads(), torch.get_default_dtype(),"
        " matplotlib.rcParams['lines.linewidth'], len(plt.get_fignums()))\n"
        "# %%\n# alt: A line drawn by the second example.\nplt.plot([2, 1]);\n",
    )
    assert printed.strip() == "False 1 torch.float32 1.5 0", printed
    assert nb.cells[0].execution_count == 1, "the hidden reset cell must not shift the numbering"
    assert nb.metadata["field_guide"]["alts"] == ["A line drawn by the second example."]


def test_an_example_starts_with_the_kernel_frozen_and_the_last_ones_garbage_gone(tmp_path):
    """The reset between examples collects the previous example's garbage, then
    freezes what survives (torch, matplotlib): an example's collections, and
    the next reset's, walk only the objects made since (0.33 s of CPU per
    example before, 0.03 s after)."""
    _, printed = _run_two_in_one_kernel(
        ROOT, tmp_path,
        "# %%\nimport builtins, weakref\nclass Node:\n    pass\n"
        "node = Node()\nnode.itself = node  # a cycle: only the collector frees it\n"
        "builtins.field_guide_probe = weakref.ref(node)\n",
        "# %%\nimport builtins, gc\n"
        "print(builtins.field_guide_probe() is None, gc.get_freeze_count() > 100_000)\n",
    )
    assert printed.split() == ["True", "True"], printed


def test_reset_unloads_only_the_projects_own_modules(tmp_path, monkeypatch):
    """A virtual environment inside the clone (``.venv``) puts torch under the
    repository root: the reset between examples must leave such modules loaded
    and re-import only snippets/, bench/ and docs/examples/."""
    (tmp_path / "snippets").mkdir()
    (tmp_path / "snippets" / "__init__.py").write_text("")
    (tmp_path / "snippets" / "probe.py").write_text("VALUE = 1\n")
    site_packages = tmp_path / ".venv" / "lib" / "site-packages"
    site_packages.mkdir(parents=True)
    (site_packages / "vendored_lib.py").write_text("LOADS = []\n")
    monkeypatch.setenv("PYTHONPATH", str(site_packages))
    _, printed = _run_two_in_one_kernel(
        tmp_path, tmp_path,
        "# %%\nimport vendored_lib, snippets.probe\nvendored_lib.LOADS.append(1)\n",
        "# %%\nimport sys\nprint('vendored_lib' in sys.modules, 'snippets.probe' in sys.modules)\n"
        "import vendored_lib\nprint(vendored_lib.LOADS)\n",
    )
    assert printed.split() == ["True", "False", "[1]"], printed


def test_an_alt_text_without_its_figure_fails(tmp_path):
    hook = load_hook("examples")
    example = tmp_path / "lost.py"
    example.write_text("# %%\n# alt: A figure that never appears.\nprint('no figure here')\n")
    kernel = hook.Kernel(ROOT, 1)
    try:
        with pytest.raises(ValueError, match=r"has an '# alt: \.\.\.' comment but drew no figure"):
            kernel.run(example, tmp_path / "lost.ipynb")
    finally:
        kernel.close()


def test_notebook_css_keeps_only_rules_that_can_match():
    hook = load_hook("examples")
    css = (
        ":root{--jp-x:1px}/* note */.jp-Cell .jp-Output{color:red}.jp-Widget{color:blue}"
        ".jp-Cell,.jp-Slider{margin:0}pre{tab-size:4}"
        "@media (max-width:600px){.jp-Cell{padding:0}.jp-Widget{padding:1px}}"
        "@media print{.jp-Widget{display:none}}@font-face{font-family:x;src:url(a.woff2)}"
        ".jp-Cell :is(.jp-Output,.jp-Widget) p{margin:1px}:is(.jp-Widget,.jp-Slider) i{margin:2px}"
    )
    pruned = hook.prune_css(css, {"jp-Cell", "jp-Output"})
    assert ":root{--jp-x:1px}" in pruned and "pre{tab-size:4}" in pruned
    assert ".jp-Cell .jp-Output{color:red}" in pruned
    assert ".jp-Cell{margin:0}" in pruned, "a selector list keeps its matching parts"
    assert "@media (max-width:600px){.jp-Cell{padding:0}}" in pruned
    assert "jp-Widget" not in pruned and "jp-Slider" not in pruned and "@media print" not in pruned
    assert "@font-face" in pruned and "note" not in pruned
    # Commas inside :is(...) do not split the selector list.
    assert ".jp-Cell :is(.jp-Output,.jp-Widget) p{margin:1px}" not in pruned  # .jp-Widget is unused
    assert "margin:2px" not in pruned and pruned.count("{") == pruned.count("}")


def test_notebook_css_is_shared_and_small(built_site):
    sheets = list((built_site.path / "assets" / "stylesheets").glob("notebook-*.css"))
    assert len(sheets) == 1, sheets
    assert sheets[0].stat().st_size < 250_000
    raw = (built_site.path / "examples" / "scaled_dot_product" / "index.html").read_text(encoding="utf-8")
    assert f'href="../../assets/stylesheets/{sheets[0].name}"' in raw
    assert "<style" not in raw.split('<div class="md-content"', 1)[1].split("</article>", 1)[0]


def test_a_failing_example_fails_the_build(tmp_path, built_site):
    # The figures and the explorer's model do not depend on the examples: start
    # from the session build's drawings so this build spends its time on the point.
    for part in ("figures", "explorer", "ledger"):
        if (built_site.cache / part).is_dir():
            shutil.copytree(built_site.cache / part, tmp_path / "cache" / part)
    project = tmp_path / "project"
    common = shutil.ignore_patterns(".git", ".venv", ".cache", "site", "__pycache__")

    def ignore(folder, names):  # docs/examples only: hooks/ has a package named examples too
        skipped = set(common(folder, names))
        return skipped | ({"examples"} if pathlib.Path(folder) == DOCS else set())

    shutil.copytree(ROOT, project, ignore=ignore)
    (project / "docs" / "examples").mkdir()
    shutil.copy(DOCS / "examples" / "_plotting.py", project / "docs" / "examples")
    (project / "docs" / "examples" / "broken.py").write_text(
        textwrap.dedent(
            """\
            # %% [markdown]
            # # A broken example

            # %%
            print("before")
            raise RuntimeError("this example is broken on purpose")
            """
        )
    )
    config = (project / "mkdocs.yml").read_text()
    config = re.sub(r"\n  - Executed examples:\n(?:      - .*\n)+", "\n", config)
    (project / "mkdocs.yml").write_text(config)
    for md in (project / "docs").rglob("*.md"):  # links into the removed examples
        md.write_text(re.sub(r"\]\((?:\.\./)*examples/[^)]+\)", "](#)", md.read_text()))
    result = _build_project(project, tmp_path)
    assert result.returncode != 0
    # One readable line as it happens (progress counts the failure too) ...
    lines = [line for line in result.log.splitlines() if "broken.py FAILED" in line]
    assert len(lines) == 1, result.log[-3000:]
    assert lines[0].endswith("broken.py FAILED in cell 2: RuntimeError: this example is broken on purpose"), lines
    assert "[1/1]" in lines[0]
    # ... and a short summary at the end, with no terminal colour codes.
    assert "1 executed example(s) failed" in result.log
    assert "\x1b[" not in result.log
    assert len(result.log.splitlines()) < 80, f"{len(result.log.splitlines())} lines of log for one failure"


def _build_project(project: pathlib.Path, tmp_path: pathlib.Path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "FIELD_GUIDE_EXAMPLE_CACHE": str(tmp_path / "cache"), "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "out")],
        cwd=project, env=env, capture_output=True, text=True, timeout=600,
    )
    result.log = result.stdout + result.stderr
    return result


FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)(?P<attrs>[^\n]*)\n(?P<body>.*?)^(?P=indent)```", re.M | re.S)


def test_pages_include_project_code_instead_of_pasting_it():
    """A Python block on a page is an include from snippets/, a few usage
    lines, or a longer block titled "Usage: ..." that wires tested snippets
    together; anything else belongs in snippets/ where it is tested."""
    pasted = []
    for md in DOCS.rglob("*.md"):
        for match in FENCE.finditer(md.read_text(encoding="utf-8")):
            if match.group("lang") not in ("python", "py", "pycon"):
                continue
            lines = [line for line in match.group("body").splitlines() if line.strip()]
            if all(INCLUDE.match(line) for line in lines):
                continue
            if re.search(r'title="Usage: ', match.group("attrs")):
                continue
            if len(lines) > 6:
                pasted.append(f"{md.relative_to(ROOT)}: a {len(lines)}-line Python block starting {lines[0].strip()!r}")
    assert not pasted, "\n".join(pasted)


# ------------------------------------------------------ a first hour --------
def test_console_is_quiet_by_default(built_site):
    """The build prints a few lines, not two per notebook; examples report
    progress one line each when the output is not a terminal."""
    log = built_site.log
    assert "Converting notebook" not in log and "Cache miss" not in log, log[:3000]
    assert "end of life" not in log  # NO_MKDOCS_2_WARNING, as the README sets it
    assert re.search(r"examples: \[\d+/\d+\] \w+\.py ran in", log), log[:3000]
    assert len(log.splitlines()) < 25 + len(EXAMPLES), f"{len(log.splitlines())} lines:\n{log[:3000]}"


def test_progress_is_one_line_on_a_terminal(monkeypatch):
    import io

    examples_hook = load_hook("examples")
    monkeypatch.delenv("FIELD_GUIDE_VERBOSE", raising=False)

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    screen = Terminal()
    progress = examples_hook.Progress(3, stream=screen)
    for i, name in enumerate(["a_long_example_name.py", "b.py", "c.py"], 1):
        progress.step(f"[{i}/3] {name} ran in 1.0 s")
    progress.close()
    text = screen.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n"), repr(text)
    last = text.rsplit("\r", 1)[1]
    assert last.startswith("INFO    -  examples: [3/3] c.py") and len(last.rstrip()) < len(last), repr(last)
    monkeypatch.setenv("FIELD_GUIDE_VERBOSE", "1")
    assert not examples_hook.Progress(3, stream=Terminal()).live


def test_no_line_of_prose_starts_with_punctuation():
    """A comma or full stop that opens a source line after math reads as
    stranded; keep it on the formula's line."""
    found = []
    for md in DOCS.rglob("*.md"):
        lines = md.read_text(encoding="utf-8").splitlines()
        fenced = False
        for number, line in enumerate(lines, 1):
            if line.lstrip().startswith(("```", "~~~")):
                fenced = not fenced
            previous = lines[number - 2].rstrip() if number > 1 else ""
            after_math = previous.endswith(("$", "\\)", "\\]")) or "</span>" in previous[-8:]
            if not fenced and after_math and re.match(r"\s*[,.;:](\s|$)", line):
                found.append(f"{md.relative_to(ROOT)}:{number}: {line.strip()[:40]}")
    assert not found, found


def test_search_index_reads_math_as_text(built_site):
    import json

    index = json.loads((built_site.path / "search" / "search_index.json").read_text(encoding="utf-8"))
    texts = [doc["title"] + " " + doc["text"] for doc in index["docs"]]
    raw = [t[max(0, m.start() - 30): m.end() + 30] for t in texts for m in re.finditer(r"\\[()\[\]]", t)]
    assert not raw, raw[:5]
    assert any("√d" in t for t in texts), "the formula for the scale, \\sqrt{d}, is no longer read as √d"
    # A title match outranks any number of matches in text: "flash" finds
    # the section that explains what FlashAttention adds to the online softmax.
    tiled = [doc["title"] for doc in index["docs"] if doc["location"].startswith("efficiency/tiled-attention/")]
    assert any("FlashAttention" in title for title in tiled), tiled


def test_tex_to_text_reads_common_formulas():
    pages_hook = load_hook("pages")
    read = pages_hook.plain_search_text
    assert read(r"divides by \(\sqrt{d}\)") == "divides by √d"
    assert read(r"\(\mathrm{softmax}(QK^\top / \sqrt{d_k})V\)") == "softmax(QKᵀ / √(d_k))V"
    assert read(r"\[\frac{a}{bc}\]") == "a/(bc)"
    assert read(r"\(N &lt; M\), cost $O(N^2)$") == "N &lt; M, cost O(N^2)"
    assert read("costs $5 and $6") == "costs $5 and $6"  # prices are not math


def test_example_pages_offer_a_zip_that_runs_alone(built_site):
    import zipfile

    for example in EXAMPLES:
        archive = built_site.path / "examples" / f"{example.stem}.zip"
        assert archive.is_file(), f"{archive.name} was not written"
        raw = page_path(built_site, f"examples/{example.stem}.md").read_text(encoding="utf-8")
        assert f'href="../{example.stem}.zip" download' in raw, f"examples/{example.stem}/ has no zip link"
        with zipfile.ZipFile(archive) as opened:
            assert f"{example.stem}/{example.name}" in opened.namelist()


# ---------------------------------------------------------------- search ----
def rank_pages(index: dict, query: str) -> list[str]:
    """Pages in the order a lunr search like Material's ranks them: each term
    of the query matches the index tokens it starts (the separator and fields
    of the index's own config), a field's matches count by its boost and by how
    rare the term is, an entry's own boost scales it (examples carry 0.5), and
    a page ranks by its best entry. Material's worker (lunr) also stems words;
    tests/test_browser.py types the same queries into the real search box."""
    import math

    config = index["config"]
    split = re.compile(config["separator"])
    fields = {name: spec.get("boost", 1.0) for name, spec in config["fields"].items()}
    docs = index["docs"]

    def tokens(text) -> list[str]:
        text = " ".join(text) if isinstance(text, list) else str(text or "")
        return [t.lower() for t in split.split(text) if t]

    tokenised = [{name: tokens(doc.get(name)) for name in fields} for doc in docs]
    scores: dict[str, float] = {}
    for term in tokens(query):
        holders = [i for i, doc in enumerate(tokenised) if any(t.startswith(term) for ts in doc.values() for t in ts)]
        if not holders:
            continue
        idf = math.log(1 + (len(docs) - len(holders) + 0.5) / (len(holders) + 0.5))
        for i in holders:
            tf = {name: sum(t.startswith(term) for t in ts) for name, ts in tokenised[i].items()}
            score = docs[i].get("boost", 1.0) * sum(fields[name] * idf * n / (1.2 + n) for name, n in tf.items() if n)
            page = docs[i]["location"].split("#")[0]
            scores[page] = max(scores.get(page, 0.0), score)
    return sorted(scores, key=scores.get, reverse=True)


@pytest.mark.parametrize("query", list(bs.TYPED_SEARCHES))
def test_search_index_finds_the_forms_people_type(built_site, query):
    import json

    index = json.loads((built_site.path / "search" / "search_index.json").read_text(encoding="utf-8"))
    assert "keywords" in index["config"]["fields"], "the keywords field is not in the search config"
    ranked = rank_pages(index, query)
    wanted = bs.TYPED_SEARCHES[query]
    assert ranked and ranked[0] in wanted, f"search {query!r}: top pages {ranked[:5]}, wanted one of {wanted}"


def test_search_keywords_come_from_titles_and_the_config():
    pages_hook = load_hook("pages")
    assert pages_hook.title_keywords("DeltaNet and Gated DeltaNet") == ["deltanet"]
    assert pages_hook.title_keywords("FlexAttention: every mask as a function") == ["flexattention"]
    assert pages_hook.title_keywords("Grouped-query and multi-query attention") == ["groupedquery", "multiquery"]
    assert pages_hook.title_keywords("The KV cache") == []


def test_mkdocs_serve_keeps_kernels_that_import_an_edited_snippet_afresh(tmp_path):
    """Under ``mkdocs serve`` a kernel outlives the build that used it; the
    next build's example must still see the snippet as it is now, and run with
    the threads that build gives it, below the build's priority. A spare
    kernel starts warm."""
    hook = load_hook("examples")
    (tmp_path / "snippets").mkdir()
    (tmp_path / "snippets" / "__init__.py").write_text("")
    probe = tmp_path / "snippets" / "probe.py"
    probe.write_text("VALUE = 1\n")
    example = tmp_path / "reads.py"
    example.write_text(
        "# %%\nimport os, pathlib, torch, snippets.probe\n"
        "group = pathlib.Path('/proc/self/autogroup')\n"
        "print(snippets.probe.VALUE, torch.get_num_threads(), os.getpriority(os.PRIO_PROCESS, 0),\n"
        "      group.read_text().split()[-1] if group.exists() else '-')\n"
    )
    warmed = tmp_path / "warmed.py"
    warmed.write_text("# %%\nimport sys\nprint('torch.fx.experimental.symbolic_shapes' in sys.modules)\n")
    import nbformat

    def printed(name: str) -> str:
        nb = nbformat.read(tmp_path / name, as_version=4)
        return "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", [])).strip()

    pool = hook.KernelPool()
    pool.keep = True
    try:
        kernel = pool.take(tmp_path, 1)
        kernel.run(example, tmp_path / "first.ipynb")
        pool.give_back(kernel)
        assert pool.idle == [kernel]
        probe.write_text("VALUE = 2\n")  # the edit
        again = pool.take(tmp_path, 2)
        assert again is kernel, "the kept kernel was not reused"
        again.run(example, tmp_path / "second.ipynb")
        pool.give_back(again)
        pool.idle.clear()
        kernel.close()
        pool.top_up(tmp_path, 1).join(timeout=120)
        assert len(pool.idle) == 1
        pool.idle[0].run(warmed, tmp_path / "warmed.ipynb")
    finally:
        pool.close()
    # The cells run below the build process (kernels.lower_priority).
    nice = hook.KERNEL_NICE
    group = nice if pathlib.Path("/proc/self/autogroup").exists() else "-"
    assert printed("first.ipynb") == f"1 1 {nice} {group}" and printed("second.ipynb") == f"2 2 {nice} {group}"
    assert printed("warmed.ipynb") == "True", "the spare kernel did not warm up"
    assert not pool.idle and not kernel.alive()
    # Outside `mkdocs serve` a kernel closes when its build is done.
    plain = hook.KernelPool()
    kernel = plain.take(tmp_path, 1)
    plain.give_back(kernel)
    assert not plain.idle and not kernel.alive() and plain.top_up(tmp_path, 1) is None


def test_the_example_pages_render_after_every_other_page(tmp_path):
    """MkDocs renders pages in the order of its files, and an example page
    waits for its example: the other pages go first, so they render while the
    examples run."""
    from mkdocs.structure.files import File, Files

    hook = load_hook("examples")
    site = str(tmp_path / "site")
    names = ["index.md", "examples/masks.py", "foundations/masks.md", "examples/alibi.py", "zz.md"]
    files = Files([File(name, str(tmp_path), site, True) for name in names])
    hook.STATE.reset()
    hook.STATE.sources = {"examples/masks.py": "masks.py", "examples/alibi.py": "alibi.py"}
    hook.STATE.executed = {"masks.py": tmp_path / "masks.ipynb", "alibi.py": tmp_path / "alibi.ipynb"}
    try:
        hook.on_nav(None, None, files)
    finally:
        hook.STATE.reset()
    assert [f.src_uri for f in files] == ["index.md", "foundations/masks.md", "zz.md", "examples/masks.py",
                                          "examples/alibi.py"]
    assert files.get_file_from_path("examples/alibi.py").abs_src_path == str(tmp_path / "alibi.ipynb")


def test_an_example_page_waits_for_its_own_example_only():
    """Each example page renders as soon as its own run ends; the pages come
    in the order the runs are expected to end (``expected_order``: handed out
    longest first to the kernels, with the durations last measured)."""
    import types

    hook = load_hook("examples")
    assert hook.expected_order(["long", "b", "c", "d"], 2, {"long": 5.0, "b": 1.0, "c": 1.5}) == [
        "b", "c", "d", "long"]  # d, never measured, counts one second
    assert hook.expected_order(["long", "b"], 1, {"long": 5.0, "b": 1.0}) == ["long", "b"]
    page = types.SimpleNamespace(file=types.SimpleNamespace(src_uri="examples/masks.py"))
    asked, waited = [], []

    def finish():
        waited.append(True)

    finish.failed = lambda: False
    finish.ready = asked.append
    hook.STATE.reset()
    hook.STATE.finish = finish
    hook.STATE.sources = {"examples/masks.py": "masks.py"}
    try:
        assert hook.on_pre_page(page, None, None) is page
    finally:
        hook.STATE.reset()
    assert asked == ["masks.py"] and not waited


def test_a_failed_example_stops_the_build_at_the_next_page():
    """A build whose example has failed stops at the next page (after the
    other runs end, so every failure is reported), not after rendering all."""
    import types

    from mkdocs.exceptions import PluginError

    hook = load_hook("examples")
    page = types.SimpleNamespace(file=types.SimpleNamespace(src_uri="foundations/masks.md"))
    waited = []

    def finish():
        waited.append(True)
        raise PluginError("1 executed example(s) failed")

    finish.failed = lambda: False
    hook.STATE.reset()
    hook.STATE.finish = finish
    assert hook.on_pre_page(page, None, None) is page and not waited, "waited with nothing failed"
    finish.failed = lambda: True
    with pytest.raises(PluginError, match="example"):
        hook.on_pre_page(page, None, None)
    assert waited == [True]
    hook.STATE.reset()


def test_abbreviations_explain_themselves_on_pages_and_in_docstrings(built_site):
    """Every term of docs/includes/abbreviations.txt gets its hover text on a
    Markdown page and inside the API reference's converted docstrings."""
    glossary = load_hook("pages").abbreviations(DOCS / "includes" / "abbreviations.txt")
    assert "SDPA" in glossary and len(glossary) >= 10
    for src in ("foundations/scaled-dot-product.md", "api/efficiency.md"):
        page = page_path(built_site, src).read_text(encoding="utf-8")
        titles = {html.unescape(t) for t in re.findall(r'<abbr title="([^"]*)">SDPA</abbr>', page)}
        assert titles == {glossary["SDPA"]}, src
    docstrings = page_path(built_site, "api/efficiency.md").read_text(encoding="utf-8")
    assert re.search(r'<div class="doc-md-description">(?:(?!</div>).)*<abbr title=', docstrings, re.S), \
        "no docstring of the API reference carries a hover text"


@pytest.mark.parametrize(
    "text, message",
    [
        ("*[SDPA]: Scaled dot-product attention\nSDPA is attention\n", "abbreviations.txt:2: expected"),
        ("*[GQA]: Grouped-query\n\n*[GQA]: again\n", "abbreviations.txt:3: 'GQA' is defined twice"),
        ("*[MLA]:\n", "abbreviations.txt:1: expected"),
    ],
)
def test_a_malformed_abbreviation_fails_the_build(tmp_path, text, message):
    from mkdocs.exceptions import PluginError

    path = tmp_path / "abbreviations.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PluginError, match=re.escape(message)):
        load_hook("pages").abbreviations(path)


def test_abbreviations_are_read_into_the_glossary(tmp_path):
    path = tmp_path / "abbreviations.txt"
    path.write_text("*[KV]: Keys and values\n\n*[MQA]: Multi-query attention: one K/V head\n", encoding="utf-8")
    assert load_hook("pages").abbreviations(path) == {
        "KV": "Keys and values", "MQA": "Multi-query attention: one K/V head"}


def test_notebook_templates_are_compiled_once_per_process(tmp_path):
    """mkdocs-jupyter makes new nbconvert exporters for every notebook; with
    the shared bytecode cache the second notebook compiles no template, and its
    page is the same as without the cache."""
    import sys

    import nbformat
    from mkdocs_jupyter import nbconvert2
    from nbconvert.exporters.templateexporter import TemplateExporter

    sys.path.append(str(ROOT / "hooks"))
    from field_guide_hooks.examples import notebook_html

    notebook = tmp_path / "demo.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Demo\n\nSome *text*."),
        nbformat.v4.new_code_cell("print(1 + 1)", outputs=[nbformat.v4.new_output("stream", text="2\n")]),
    ]), notebook)
    original = TemplateExporter._create_environment
    try:
        plain = nbconvert2.nb2html(str(notebook), allow_errors=False)
        notebook_html.share_compiled_templates()
        notebook_html.share_compiled_templates()  # a second call changes nothing
        assert TemplateExporter._create_environment.field_guide_shared
        first = nbconvert2.nb2html(str(notebook), allow_errors=False)
        compiled, hits = len(notebook_html.TEMPLATES.code), notebook_html.TEMPLATES.hits
        second = nbconvert2.nb2html(str(notebook), allow_errors=False)
    finally:
        TemplateExporter._create_environment = original
    assert compiled > 0
    assert len(notebook_html.TEMPLATES.code) == compiled, "the second notebook compiled a template again"
    assert notebook_html.TEMPLATES.hits >= hits + compiled
    assert plain == first == second
