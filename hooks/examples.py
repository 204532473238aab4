"""MkDocs hook: execute docs/examples/*.py before mkdocs-jupyter renders them.

Why a hook and not mkdocs-jupyter's own ``execute: true``: mkdocs-jupyter keys
its cache on the notebook text alone, so an edit to a snippet the example
imports would leave stale output on the page; it runs one notebook at a time;
and it lets a failing cell, a figure without alternative text or a broken link
pass. The executed notebooks are stored in ``.cache/examples`` (or
``$FIELD_GUIDE_EXAMPLE_CACHE``); mkdocs-jupyter renders them with
``execute: false``.

This file holds the MkDocs events only. The work is done in rooms of
``hooks/field_guide_hooks/examples/``, one per job:

* ``state``: what one build holds, in one object (``STATE``);
* ``kernels``: the kernel pool that runs the examples, the cache key, the
  progress line;
* ``notebook_html``: the executed pages' HTML (alternative texts, links, table
  of contents, the shared notebook stylesheet);
* ``bundles``: the zip of each example and the project files it imports.

``mkdocs build -v`` or ``FIELD_GUIDE_VERBOSE=1`` shows every line that
mkdocs-jupyter and the runs print.
"""

from __future__ import annotations

import logging
import pathlib
import posixpath
import sys

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

# MkDocs loads hooks by path: the rooms live in a package next to this file.
_HOOKS = str(pathlib.Path(__file__).resolve().parent)
if _HOOKS not in sys.path:
    sys.path.append(_HOOKS)

from field_guide_hooks.examples import notebook_html
from field_guide_hooks.examples.bundles import bundle_files, write_bundle  # noqa: F401
from field_guide_hooks.examples.kernels import (  # noqa: F401
    KERNEL_NICE,
    POOL,
    ExampleError,
    Kernel,
    KernelPool,
    Progress,
    cache_key,
    expected_order,
    start_examples,
    verbose,
)
from field_guide_hooks.examples.notebook_html import prune_css  # noqa: F401
from field_guide_hooks.examples.state import EXAMPLES_DIR, STATE

# mkdocs-jupyter logs two INFO lines per notebook on every build.
NOISY_LOGGERS = ("mkdocs.mkdocs-jupyter", "mkdocs.plugins.mkdocs_jupyter")


def on_startup(command, dirty: bool) -> None:
    # Under `mkdocs serve`, kernels stay warm between builds (kernels.KernelPool).
    POOL.keep = command == "serve"


def on_shutdown() -> None:
    POOL.close()


def on_config(config):
    notebook_html.share_compiled_templates()
    if not verbose():
        for name in NOISY_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
    return config


@event_priority(100)  # before mkdocs-jupyter wraps the notebook files
def on_files(files: Files, config) -> Files:
    # The examples run in the background from here on; the first example page
    # (on_pre_page) waits for them.
    # Meanwhile the other hooks' on_files (the figures, the explorer's model) run.
    STATE.reset()
    STATE.executed, STATE.finish = start_examples(config)
    for file in list(files):
        if not file.src_uri.startswith(f"{EXAMPLES_DIR}/"):
            continue
        name = posixpath.basename(file.src_uri)
        if file.src_uri.endswith(".py") or name.startswith("_") or name == "__pycache__":
            files.remove(file)
        if name in STATE.executed:
            # The page keeps the example's own path (so Markdown links to
            # examples/x.py resolve) but reads the executed notebook.
            files.append(File.generated(config, file.src_uri, abs_src_path=str(STATE.executed[name])))
            STATE.sources[file.src_uri] = file.abs_src_path
    return files


@event_priority(100)  # before mkdocs-jupyter reads the notebook
def on_pre_page(page, config, files: Files):
    # The Markdown pages, which on_nav puts first, are rendered while the
    # examples still run; each example page then waits for its own example.
    # Once one has failed, the next page waits for the rest and fails the
    # build, instead of rendering every page first.
    if STATE.is_example(page) and not STATE.failed():
        STATE.ready(page)
    if STATE.failed():
        STATE.wait()
    return page


def on_nav(nav, config, files: Files):
    # mkdocs-jupyter wraps each notebook File in a proxy whose own
    # ``abs_src_path`` (a cached property) is recomputed from ``src_dir``, which
    # a generated File lacks; pin it to the executed notebook.
    examples = [file for file in files if file.src_uri in STATE.sources]
    # MkDocs renders the pages in the order of `files`. The example pages go
    # last, so every other page renders while the examples still run, and in
    # the order their runs are expected to end, so each renders soon after.
    order = {name: i for i, name in enumerate(STATE.order())}
    examples.sort(key=lambda file: order.get(posixpath.basename(file.src_uri), len(order)))
    for file in examples:
        file.__dict__["abs_src_path"] = str(STATE.executed[posixpath.basename(file.src_uri)])
        files.remove(file)
        files.append(file)
    return nav


def on_page_markdown(markdown: str, page, config, files: Files) -> str:
    # An example repeats its topic's words in code and output; rank the page
    # that teaches the topic first, the example after it.
    if STATE.is_example(page):
        page.meta.setdefault("search", {"boost": 0.5})
    return markdown


def on_page_content(html_text: str, page, config, files: Files) -> str:
    if not STATE.is_example(page):
        return html_text
    import nbformat

    nb = nbformat.read(page.file.abs_src_path, as_version=4)
    alts = list(nb.metadata.get("field_guide", {}).get("alts", []))
    html_text = notebook_html.name_figures(html_text, page, alts)
    html_text = notebook_html.rewrite_links(html_text, page, files, STATE)
    html_text = notebook_html.externalise(html_text, page, STATE)
    notebook_html.follow_headings(page.toc, html_text)
    return notebook_html.download_note(page) + html_text


def on_env(env, config, files: Files):
    STATE.wait()  # a build whose navigation shows no example still waits (and fails) here
    notebook_html.check_anchors(STATE)
    return env


def on_post_page(output: str, page, config) -> str:
    if STATE.is_example(page):
        notebook_html.collect_classes(output, STATE)
    return output


def on_post_build(config) -> None:
    notebook_html.write_stylesheets(pathlib.Path(config.site_dir), STATE)
    site = pathlib.Path(config.site_dir) / EXAMPLES_DIR
    site.mkdir(parents=True, exist_ok=True)
    root = pathlib.Path(config.config_file_path).resolve().parent
    for src_uri, source in STATE.sources.items():
        (site / posixpath.basename(src_uri)).write_bytes(pathlib.Path(source).read_bytes())
        write_bundle(pathlib.Path(source), root, site / (pathlib.Path(src_uri).stem + ".zip"))
