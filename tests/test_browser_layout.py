"""Nothing is cut off at 1280 px, and every table-of-contents entry leads somewhere.

Headless Chromium opens every built page at 1280 x 900 (both of Material's
sidebars shown), opens every fold and shows every tab, and measures:

* display equations (``.katex-display``), code blocks (``pre > code``),
  tables and figure images: none may be wider than the box it sits in (its
  ``scrollWidth`` against its container's ``clientWidth``), so no reader has
  to scroll sideways to read a line of code or the end of an equation;
* the table of contents: every entry has words and links to an element that
  exists on the page.

The measurement (``browser_support.LAYOUT_JS``) is taken during the one visit
of every page that ``tests/test_browser.py`` makes (the ``page_reports``
fixture in conftest.py), after axe-core has finished with the page. One test
per check, each listing every page and element that fails. The last test (no
browser) pins the repair of the executed examples' tables of contents in
``hooks/field_guide_hooks/examples/notebook_html.py``.
``FIELD_GUIDE_BUILT_SITE=/path/to/site`` reads an existing build instead of
building one.
"""

from __future__ import annotations

import pytest

import browser_support as bs


@pytest.fixture(scope="session")
def layout_reports(page_reports) -> dict[str, dict]:
    """Page URL path -> what ``browser_support.LAYOUT_JS`` found there, taken
    during the one visit of every page (``page_reports`` in conftest.py)."""
    return {("" if path == "/" else path): report.layout for path, report in page_reports.items()}


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
    assert set(layout_reports) == set(bs.built_pages(site_dir))
    assert all("wide" in r and "toc" in r for r in layout_reports.values()), "a page was not measured"


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
