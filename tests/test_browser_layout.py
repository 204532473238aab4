"""Nothing is cut off at 1280 px, and every table-of-contents entry leads somewhere.

Headless Chromium opens every built page at 1280 x 900 (both of Material's
sidebars shown), opens every fold and shows every tab, and measures:

* display equations (``.katex-display``), code blocks (``pre > code``),
  tables and figure images: none may be wider than the box it sits in (its
  ``scrollWidth`` against its container's ``clientWidth``), so no reader has
  to scroll sideways to read a line of code or the end of an equation;
* the table of contents: every entry has words and links to an element that
  exists on the page.

One test per check, each listing every page and element that fails. The
last test (no browser) pins the repair of the executed examples' tables of
contents in ``hooks/field_guide_hooks/examples/notebook_html.py``.
``FIELD_GUIDE_BUILT_SITE=/path/to/site`` reads an existing build instead of
building one; ``FIELD_GUIDE_LAYOUT_PAGES=a/,b/`` narrows the pages (to try a
fix on a few).
"""

from __future__ import annotations

import os
import pathlib

import pytest

import browser_support as bs

DESKTOP = {"width": 1280, "height": 900}
SLACK_PX = 1  # sub-pixel rounding

# Shows what a reader can open (folds, other tabs), then reports every element
# wider than its box and every dead or empty table-of-contents entry.
MEASURE = r"""
() => {
  document.querySelectorAll("details").forEach(d => { d.open = true; });
  const style = document.createElement("style");
  style.textContent = ".tabbed-set > .tabbed-content > .tabbed-block { display: block !important; }";
  document.head.appendChild(style);
  // An equation is named by its TeX source, anything else by its words.
  const words = el => {
    const tex = el.querySelector("annotation");
    const text = tex ? tex.textContent : el.textContent || el.getAttribute("alt") || el.getAttribute("src") || "";
    return text.replace(/\s+/g, " ").trim().slice(0, 70);
  };
  const shown = el => el.getClientRects().length > 0;
  const wide = [];
  const measure = (kind, el, box) => {
    if (!shown(el) || !box) return;
    const over = Math.max(el.scrollWidth, el.getBoundingClientRect().width) - box.clientWidth;
    if (over > SLACK) wide.push({kind, over: Math.round(over), text: words(el)});
  };
  const content = document.querySelector(".md-content") || document.body;
  // An equation and a code block scroll inside themselves: compare with their own box.
  content.querySelectorAll(".katex-display").forEach(el => measure("equation", el, el));
  content.querySelectorAll("pre > code").forEach(el => measure("code", el, el));
  content.querySelectorAll("table").forEach(el =>
    measure("table", el, el.closest(".md-typeset__scrollwrap") || el.parentElement));
  content.querySelectorAll("img").forEach(el => measure("figure", el, el.parentElement));
  const toc = [];
  const seen = new Set();
  document.querySelectorAll(".md-nav--secondary a.md-nav__link").forEach(a => {
    // Material's instant navigation makes the links absolute: keep the page's own.
    const url = new URL(a.href, location.href);
    const href = url.hash;
    if (url.pathname !== location.pathname || !href || seen.has(href)) return;
    seen.add(href);
    const id = decodeURIComponent(href.slice(1));
    const text = a.textContent.replace(/\s+/g, " ").trim();
    if (!text) toc.push({href, problem: "no words"});
    if (!document.getElementById(id)) toc.push({href, text, problem: "no element with this id"});
  });
  return {wide, toc};
}
""".replace("SLACK", str(SLACK_PX))


@pytest.fixture(scope="session")
def layout_reports(browser, site_dir) -> dict[str, dict]:
    """Page URL path -> what MEASURE found there, for every built page."""
    pages = bs.built_pages(site_dir)
    wanted = [p.strip() for p in os.environ.get("FIELD_GUIDE_LAYOUT_PAGES", "").split(",") if p.strip()]
    if wanted:
        pages = [p for p in pages if p in wanted]
    reports = {}
    with bs.serve(site_dir) as base_url:
        context = browser.new_context(viewport=DESKTOP)
        try:
            page = context.new_page()
            for path in pages:
                page.goto(base_url + path, wait_until="load")
                # KaTeX typesets on load (javascripts/katex.js); wait until no raw math is left.
                page.wait_for_function(
                    "() => !document.querySelector('.arithmatex:not([data-fg-typeset])')", timeout=10_000
                )
                reports[path] = page.evaluate(MEASURE)
        finally:
            context.close()
    return reports


def _listing(reports: dict[str, dict], kinds: set[str]) -> list[str]:
    return [
        f"{path or '/'}: {item['kind']} {item['over']} px too wide: {item['text']!r}"
        for path, report in sorted(reports.items())
        for item in report["wide"]
        if item["kind"] in kinds
    ]


@pytest.mark.browser
def test_no_equation_is_wider_than_its_column(layout_reports):
    wide = _listing(layout_reports, {"equation"})
    assert not wide, f"{len(wide)} display equation(s) scroll sideways at 1280 px:\n" + "\n".join(wide)


@pytest.mark.browser
def test_no_code_block_is_wider_than_its_column(layout_reports):
    wide = _listing(layout_reports, {"code"})
    assert not wide, f"{len(wide)} code block(s) scroll sideways at 1280 px:\n" + "\n".join(wide)


@pytest.mark.browser
def test_no_table_or_figure_is_wider_than_its_column(layout_reports):
    wide = _listing(layout_reports, {"table", "figure"})
    assert not wide, f"{len(wide)} table(s) or figure(s) overflow at 1280 px:\n" + "\n".join(wide)


@pytest.mark.browser
def test_every_table_of_contents_entry_leads_somewhere(layout_reports):
    dead = [
        f"{path or '/'}: {item['href']} {item.get('text', '')!r}: {item['problem']}"
        for path, report in sorted(layout_reports.items())
        for item in report["toc"]
    ]
    assert not dead, "table-of-contents entries that lead nowhere:\n" + "\n".join(dead)


@pytest.mark.browser
def test_every_page_was_measured(layout_reports, site_dir):
    if os.environ.get("FIELD_GUIDE_LAYOUT_PAGES"):
        pytest.skip("FIELD_GUIDE_LAYOUT_PAGES narrows the pages")
    assert set(layout_reports) == set(bs.built_pages(site_dir))


def test_example_toc_follows_headings_with_inline_code():
    """mkdocs-jupyter drops inline code from the table of contents, and with it
    the anchor: the hook takes each entry's id and words from the heading."""
    import sys

    sys.path.append(str(bs.ROOT / "hooks"))
    from field_guide_hooks.examples.notebook_html import follow_headings

    class Entry:
        def __init__(self, title, id, level, children=()):
            self.title, self.id, self.level, self.children = title, id, level, list(children)

    toc = [Entry("Title", "title", 1, [Entry("1. Plain", "1-plain", 2),
                                         Entry("2. passed to", "2-passed-to", 2)])]
    html = (
        '<h1 id="title">Title<a class="anchor-link" href="#title">¶</a></h1>'
        '<h2 id="1-plain">1. Plain<a class="anchor-link" href="#1-plain">¶</a></h2>'
        '<h2 id="2-passed-to-nnmultiheadattention">2. passed to <code>nn.MultiheadAttention</code>'
        '<a class="anchor-link" href="#2-passed-to-nnmultiheadattention">¶</a></h2>'
    )
    follow_headings(toc, html)
    second = toc[0].children[1]
    assert second.id == "2-passed-to-nnmultiheadattention"
    assert second.title == "2. passed to nn.MultiheadAttention"
    assert toc[0].children[0].id == "1-plain" and toc[0].id == "title"
