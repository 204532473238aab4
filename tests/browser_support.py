"""Helpers for tests/test_browser.py: find Chromium, serve a built site, read
snippet sections the way pymdownx.snippets includes them.

Kept out of conftest.py so that the rest of the suite never imports Playwright.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import http.server
import os
import pathlib
import re
import shutil
import textwrap
import threading
from typing import Iterator

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SNIPPETS = ROOT / "snippets"
ARTIFACTS = ROOT / "test-artifacts"

CHROMIUM_MISSING = (
    "Chromium is not installed: the browser tests need it "
    "(Debian/Ubuntu: `apt-get install chromium-headless-shell`, or `chromium`; .ci/run installs the first)."
)
PLAYWRIGHT_MISSING = "Playwright for Python is not installed (`pip install playwright`)."

# Headless Chromium that stays on the machine: no update checks, no sync, no
# QUIC probes, no component downloads. Playwright adds its own --user-data-dir
# (a fresh temporary profile) on every launch.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-default-browser-check",
]

LOCAL_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1"}


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no", "off")


def missing(message: str) -> None:
    """A missing browser fails in CI (where .ci/run installs it) and skips locally."""
    if in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


# The headless shell first: Chromium's engine without the browser around it,
# and Playwright's own choice for headless runs. Same Blink, same layout and
# fonts; what it leaves out is the browser's windows. The full browser, run in
# its new headless mode, still draws a window's frame and starts one more
# renderer for its own interface with every context: on two cores the visit of
# every page took 23 more seconds of CPU (179 s against 156 s), and the whole
# suite makes about 40 contexts.
SHELL = "chromium-headless-shell"
BROWSERS = (SHELL, "chromium", "chromium-browser")


def chromium_path() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    missing(CHROMIUM_MISSING)
    raise AssertionError("unreachable")


def chromium_args(executable: str) -> list[str]:
    """``CHROMIUM_ARGS``, and for the full browser its new headless mode (the
    shell has only one)."""
    return CHROMIUM_ARGS if pathlib.Path(executable).name == SHELL else ["--headless=new", *CHROMIUM_ARGS]


# ----------------------------------------------------------------------------
# Script in a page, with a deadline
# ----------------------------------------------------------------------------
JS_TIMEOUT_MS = 60_000
# What a long browser visit is doing now; conftest's slow-test note prints it.
PROGRESS: dict[str, str] = {}
_FUNCTION = re.compile(r"^\s*(async\s+)?(function\b|\([^()]*\)\s*=>|[A-Za-z_$][\w$]*\s*=>)")


def run_js(page, js: str, arg=None, *, timeout_ms: int = JS_TIMEOUT_MS):
    """``page.evaluate(js, arg)``, but never waits past ``timeout_ms``.

    Playwright's ``evaluate`` has no timeout: a promise that never settles, or
    a renderer that stops answering, holds the test (and a CI run) forever.
    ``wait_for_function``'s deadline is kept by Playwright's driver, outside
    the page, so it raises ``TimeoutError`` even when the page is stuck. ``js``
    is a function source (called once with ``arg``) or an expression, as for
    ``evaluate``; the result comes back wrapped so a falsy value still counts.
    """
    source = js if _FUNCTION.match(js) else f"() => ({js})"
    wrapped = f"async (arg) => ({{value: await ({source})(arg)}})"
    handle = page.wait_for_function(wrapped, arg=arg, timeout=timeout_ms, polling=100)
    try:
        return handle.json_value().get("value")
    finally:
        handle.dispose()


def run_js_on(target, js: str, arg=None, *, timeout_ms: int = JS_TIMEOUT_MS):
    """``target.evaluate(js, arg)`` for a Locator or an ElementHandle, with
    ``run_js``'s deadline: ``js`` is called with the element and ``arg``."""
    element = target.element_handle(timeout=timeout_ms) if hasattr(target, "element_handle") else target
    return run_js(element.owner_frame().page, f"([element, arg]) => ({js})(element, arg)", [element, arg],
                  timeout_ms=timeout_ms)


COMPRESSIBLE = {".html", ".css", ".js", ".json", ".xml", ".svg", ".txt", ".map", ".py"}


class _SiteHandler(http.server.SimpleHTTPRequestHandler):
    """A static host like the ones the site is deployed to: text is sent
    gzip-compressed when the browser asks for it (GitHub Pages does the same),
    and sitemap.xml names this server instead of ``site_url``.

    The sitemap matters: Material's instant navigation only intercepts links
    listed there, comparing scheme, host *and port*, so a site built for
    http://127.0.0.1:8000/ would fall back to full page loads on any other port.
    ``X-Raw-Length`` carries the uncompressed size for the budget report.
    """

    origin = ""
    # Every visit fetches the same scripts, stylesheets and search index: each
    # distinct body is compressed once (keyed by its hash; a rebuilt file is a
    # new body), not once per request.
    _compressed: dict[bytes, bytes] = {}

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass

    @classmethod
    def _gzip(cls, body: bytes) -> bytes:
        key = hashlib.blake2b(body, digest_size=16).digest()
        if key not in cls._compressed:
            cls._compressed[key] = gzip.compress(body, compresslevel=6, mtime=0)
        return cls._compressed[key]

    def do_GET(self):  # noqa: N802 - the base class's name
        path = pathlib.Path(self.translate_path(self.path))
        if path.is_dir():
            if not self.path.split("?")[0].endswith("/"):
                return super().do_GET()  # the redirect to ".../"
            path = path / "index.html"
        if not path.is_file() or (path.suffix not in COMPRESSIBLE and path.name != "sitemap.xml"):
            return super().do_GET()
        body = path.read_bytes()
        if path.name == "sitemap.xml":
            first = re.search(rb"<loc>([^<]+)</loc>", body)  # the home page: site_url
            if first:
                body = body.replace(first.group(1), self.origin.encode())
        raw = len(body)
        gzipped = "gzip" in self.headers.get("Accept-Encoding", "")
        if gzipped:
            body = self._gzip(body)
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Raw-Length", str(raw))
        if gzipped:
            self.send_header("Content-Encoding", "gzip")
        self.end_headers()
        self.wfile.write(body)


@contextlib.contextmanager
def serve(directory: pathlib.Path) -> Iterator[str]:
    """Serve ``directory`` on 127.0.0.1 (a free port) from a thread; yield the base URL."""
    handler_class = type("Handler", (_SiteHandler,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler_class, directory=str(directory)))
    handler_class.origin = f"http://127.0.0.1:{server.server_address[1]}/"
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="site-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def built_pages(site: pathlib.Path) -> list[str]:
    """Every built page as a URL path relative to the site root ("" is the home page)."""
    pages = []
    for html in sorted(site.rglob("*.html")):
        rel = html.relative_to(site).as_posix()
        if rel == "404.html":
            continue
        if rel == "index.html":
            pages.append("")
        elif rel.endswith("/index.html"):
            pages.append(rel[: -len("index.html")])
        else:
            pages.append(rel)
    return pages


def page_source(url_path: str) -> pathlib.Path | None:
    """The docs/ source of a built page (Markdown page or executed example)."""
    stem = url_path.rstrip("/").removesuffix(".html") or "index"
    for candidate in (DOCS / f"{stem}.md", DOCS / stem / "index.md", DOCS / f"{stem}.py", DOCS / f"{stem}.ipynb"):
        if candidate.is_file():
            return candidate
    return None


# ----------------------------------------------------------------------------
# Snippet sections, as pymdownx.snippets (dedent_subsections: true) includes them
# ----------------------------------------------------------------------------
MARKER = re.compile(r"^\s*#\s*--8<--\s*\[(start|end):([A-Za-z][\w-]*)\]\s*$")
INCLUDE_LINE = re.compile(r'^[ \t]*--8<--[ \t]+"([^":]+)(?::([A-Za-z][\w-]*))?"[ \t]*$')
FENCE = re.compile(r"^([ \t]*)(`{3,}|~{3,})")


def snippet_section(rel: str, section: str | None) -> str:
    """The text of ``snippets/<rel>`` section ``section`` with every marker line removed."""
    lines = (SNIPPETS / rel).read_text(encoding="utf-8").splitlines()
    if section is None:
        kept = [line for line in lines if not MARKER.match(line)]
        return "\n".join(kept)
    inside = False
    kept: list[str] = []
    for line in lines:
        match = MARKER.match(line)
        if match and match.group(2) == section:
            if match.group(1) == "start":
                inside = True
            elif inside:
                break
            continue
        if inside and not match:
            kept.append(line)
    if not inside:
        raise ValueError(f"section {section!r} not found in snippets/{rel}")
    return textwrap.dedent("\n".join(kept))


def fenced_blocks(markdown: str) -> list[str | None]:
    """One entry per fenced code block of a Markdown page, in order: the text the
    reader should copy when the block only includes snippet sections, else None."""
    blocks: list[str | None] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        start = FENCE.match(lines[i])
        if not start:
            i += 1
            continue
        fence = start.group(2)
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1
        content = [line for line in body if line.strip()]
        includes = [INCLUDE_LINE.match(line) for line in content]
        if content and all(includes):
            blocks.append("\n".join(snippet_section(m.group(1), m.group(2)) for m in includes))
        else:
            blocks.append(None)
    return blocks


# ----------------------------------------------------------------------------
# Search: what a reader types and the page it must find first
# ----------------------------------------------------------------------------
# Run-together and abbreviated forms (hooks/pages.py indexes them as hidden
# keywords); tests/test_site.py ranks them against the built index, and
# tests/test_browser.py types them into the real search box.
TYPED_SEARCHES = {
    "flashattention": ["efficiency/tiled-attention/", "efficiency/flash-triton/"],
    "deltanet": ["linear/delta-rule/"],
    "flexattention": ["efficiency/flex-attention/"],
    "kvcache": ["efficiency/kv-cache/"],
    "gqa": ["attention/grouped-query/"],
    "mqa": ["attention/grouped-query/"],
    "mha": ["attention/multi-head/"],
    "multihead": ["attention/multi-head/"],
    "mla": ["modern/latent-attention/"],
    "gla": ["linear/gated-linear-attention/"],
    "sdpa": ["foundations/scaled-dot-product/"],
}


# ----------------------------------------------------------------------------
# Layout at 1280 px (tests/test_browser_layout.py), measured during the one
# visit of each page (test_browser.visit_every_page)
# ----------------------------------------------------------------------------

LAYOUT_SLACK_PX = 1  # sub-pixel rounding
TYPESET_JS = "() => !document.querySelector('.arithmatex:not([data-fg-typeset])')"

# Shows what a reader can open (folds, other tabs), then reports every element
# wider than its box and every dead or empty table-of-contents entry.
LAYOUT_JS = r"""
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
""".replace("SLACK", str(LAYOUT_SLACK_PX))
