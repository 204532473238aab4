"""No browser wait without a deadline.

``bs.run_js`` stands in for Playwright's ``page.evaluate`` (which waits for
ever on a promise that never settles or a page that stops answering), and the
visit of every page makes a page that passed a deadline once more, alone,
before it fails.

The last tests hold the visit's own machinery to what it says: which Chromium
runs and with which flags, and that the phone check sees inside closed folds.
"""

from __future__ import annotations

import ast
import time

import pytest

import browser_support as bs
import test_browser


@pytest.mark.browser
def test_run_js_returns_what_evaluate_returns_and_gives_up_on_a_stuck_page(browser):
    from playwright.sync_api import TimeoutError as StuckPage

    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_content("<p id=x>seven</p>")
        assert bs.run_js(page, "document.getElementById('x').textContent") == "seven"
        assert bs.run_js(page, "n => n * 6", 7) == 42
        assert bs.run_js(page, "async ([a, b]) => a + b", [2, 3]) == 5
        # A falsy value is a result, not a reason to wait.
        for falsy in ("0", "false", "null", "''", "undefined"):
            assert bs.run_js(page, f"() => {falsy}", timeout_ms=2_000) in (0, False, None, "")
        assert bs.run_js(page, "window.__mark = 1") == 1
        assert bs.run_js(page, "() => window.__mark") == 1  # called once, in the page
        assert bs.run_js_on(page.locator("#x"), "(el, suffix) => el.textContent + suffix", "!") == "seven!"
        assert bs.run_js_on(page.locator("#x").element_handle(), "el => el.id") == "x"
        for stuck in ("() => new Promise(() => {})", "() => { while (true) {} }"):
            start = time.perf_counter()
            with pytest.raises(StuckPage):
                bs.run_js(page, stuck, timeout_ms=1_000)
            assert time.perf_counter() - start < 20, stuck
    finally:
        context.close()


def _fake_report(path: str) -> test_browser.PageReport:
    report = test_browser.PageReport(
        path=path or "/", off_host=[], console=[], failed=[], transfer=1, raw_transfer=1,
        lcp_ms=1.0, lcp_tries=1, math={}, images=[], phone={"scroll": 0})
    report.search_bytes = (1, 1)
    return report


def test_a_page_that_passes_a_deadline_is_visited_again_once(monkeypatch):
    from playwright.sync_api import TimeoutError as StuckPage

    misses = {"start": {"c/": 1}, "finish": {"b/": 1}}
    calls: list[tuple[str, str]] = []
    recorded: dict = {}

    class FakeTab:
        made: list = []

        def __init__(self, browser):
            self.closed = False
            FakeTab.made.append(self)

        def close(self):
            self.closed = True

    def start(tab, base_url, path, axe_source):
        calls.append(("start", path))
        assert not tab.closed, "a closed tab was handed a visit"
        if misses["start"].get(path, 0) > 0:
            misses["start"][path] -= 1
            tab.close()  # as _start_visit does when its page is stuck
            raise StuckPage(f"Timeout 60000ms exceeded ({path} start)")
        return _fake_report(path), tab

    def finish(report, tab):
        calls.append(("finish", report.path))
        if misses["finish"].get(report.path, 0) > 0:
            misses["finish"][report.path] -= 1
            tab.close()
            raise StuckPage(f"Timeout 60000ms exceeded ({report.path} finish)")

    monkeypatch.setattr(test_browser, "_start_visit", start)
    monkeypatch.setattr(test_browser, "_finish_visit", finish)
    monkeypatch.setattr(test_browser, "_record", lambda key, value: recorded.update({key: value}))
    monkeypatch.setattr(test_browser, "AXE_KEY_PAGES", [])

    reports = test_browser.visit_every_page(None, "http://127.0.0.1:1/", ["a/", "b/", "c/", "d/"], tab=FakeTab)
    assert list(reports) == ["a/", "b/", "c/", "d/"]
    # Pages share two tabs; a stuck one is replaced, and every tab is closed at the end.
    assert all(t.closed for t in FakeTab.made), "a tab was left open"
    # Two tabs, and a fresh one for each retry (b/ and c/): four in all.
    assert len(FakeTab.made) == 4, len(FakeTab.made)
    assert calls.count(("start", "b/")) == 2 and calls.count(("start", "c/")) == 2
    assert calls.count(("finish", "a/")) == 1 and calls.count(("finish", "d/")) == 1
    assert set(recorded["pages"]["visited_again"]) == {"b/", "c/"}
    assert "b/ finish" in recorded["pages"]["visited_again"]["b/"]

    # A page that misses its deadline twice fails the visit, naming the wait.
    misses["finish"]["b/"] = 2
    with pytest.raises(StuckPage, match="b/ finish"):
        test_browser.visit_every_page(None, "http://127.0.0.1:1/", ["a/", "b/"], tab=FakeTab)


def test_no_browser_test_calls_evaluate_directly():
    """Every script a browser test runs in a page goes through bs.run_js or
    bs.run_js_on, so none of them can wait without a deadline."""
    found = []
    for path in sorted(bs.ROOT.joinpath("tests").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "evaluate":
                found.append(f"{path.name}:{node.lineno}")
    assert not found, f"evaluate() without a deadline (use bs.run_js / bs.run_js_on): {found}"


def test_the_headless_shell_is_preferred_and_only_the_full_browser_is_told_its_mode(monkeypatch):
    installed: dict[str, str] = {}
    monkeypatch.setattr(bs.shutil, "which", installed.get)
    installed.update({"chromium": "/usr/bin/chromium", "chromium-headless-shell": "/usr/bin/chromium-headless-shell"})
    assert bs.chromium_path() == "/usr/bin/chromium-headless-shell"
    del installed["chromium-headless-shell"]
    assert bs.chromium_path() == "/usr/bin/chromium"
    assert "--headless=new" not in bs.chromium_args("/usr/bin/chromium-headless-shell")
    assert bs.chromium_args("/usr/bin/chromium")[0] == "--headless=new"
    assert set(bs.chromium_args("/usr/bin/chromium")) - {"--headless=new"} == set(bs.CHROMIUM_ARGS)


@pytest.mark.browser
def test_the_phone_check_sees_what_a_closed_fold_holds(browser):
    """The visit measures a page at a phone's width last, with every fold and
    tab opened by the layout check before it: something too wide for a phone
    inside a closed fold counts."""
    def phone_of(body: str) -> dict:
        tab = test_browser.Tab(browser)
        try:
            tab.page.set_content(f'<div class="md-main">{body}</div>')
            report = test_browser.PageReport(path="/", off_host=[], console=[], failed=[], transfer=0,
                                             raw_transfer=0, lcp_ms=None, lcp_tries=1, math={}, images=[],
                                             phone={})
            test_browser._finish_visit(report, tab)
            assert tab.page.viewport_size == test_browser.PHONE
            return report.phone
        finally:
            tab.close()

    fold = "<details><summary>More</summary>{}</details>"
    wide = phone_of(fold.format('<div style="width: 900px">a table a phone cannot hold</div>'))
    assert wide["scroll"] > test_browser.PHONE["width"] and wide["offenders"] == ["div"], wide
    narrow = phone_of(fold.format("<p>short</p>"))
    assert narrow["scroll"] <= narrow["client"] and not narrow["offenders"], narrow
