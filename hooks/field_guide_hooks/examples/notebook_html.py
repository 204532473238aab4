"""The executed notebooks' HTML, as mkdocs-jupyter renders it, made into site pages.

* Figures get the alternative text of their cell's ``# alt: ...`` comment.
* Links in the examples' Markdown are rewritten to built URLs and checked like
  links on Markdown pages (mkdocs-jupyter neither rewrites nor validates them).
* The table of contents follows the headings on the page: mkdocs-jupyter reads
  headings from its own Markdown rendering, which drops inline code, so an
  entry like "An SDPA mask passed to `nn.MultiheadAttention`" lost its code and
  pointed at an anchor no heading has.
* nbconvert's loaders of MathJax and mermaid (from a CDN) are dropped (the
  site's KaTeX typesets the notebooks), and its stylesheet (about 600 kB per
  page) moves to one shared file, pruned to the rules the pages can match.
* mkdocs-jupyter makes two nbconvert exporters per notebook (the page and its
  table of contents), and each compiles nbconvert's Jinja templates afresh.
  ``share_compiled_templates`` gives every exporter one in-memory bytecode
  cache, keyed by each template's name and text, so a template is compiled once
  per build process: converting the 37 executed notebooks took 6.0 s of CPU
  with a compile per exporter and 3.2 s with the shared cache.
"""

from __future__ import annotations

import hashlib
import html
import logging
import pathlib
import posixpath
import re

import jinja2
from mkdocs.utils import get_relative_url

from field_guide_hooks.examples.state import EXAMPLES_DIR, LOGGER, ExamplesBuild

log = logging.getLogger(LOGGER)

PLACEHOLDER_ALT = "No description has been provided for this image"
HREF = re.compile(r'(<a\s[^>]*?href=")([^"]*)(")')
# nbconvert's template loads MathJax and mermaid from a CDN; KaTeX served by the
# site typesets the notebooks instead, and no example draws a mermaid diagram.
MATHJAX_BLOCK = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.DOTALL)
SCRIPT_BLOCK = re.compile(r"<script\b[^>]*>.*?</script>", re.DOTALL)
STYLE_BLOCK = re.compile(r"<style\b[^>]*>(.*?)</style>", re.DOTALL)
NOTEBOOK_CSS = "assets/stylesheets/notebook-{}.css"
HEADING = re.compile(r'<h([1-6]) id="([^"]+)">(.*?)</h\1>', re.DOTALL)
ANCHOR_LINK = re.compile(r'<a class="anchor-link"[^>]*>.*?</a>', re.DOTALL)


def name_figures(html_text: str, page, alts: list[str]) -> str:
    """Give each figure the alternative text written in its cell."""
    placeholder = f'alt="{PLACEHOLDER_ALT}"'
    if html_text.count(placeholder) != len(alts):
        log.warning(
            "Example '%s' shows %d figure(s) but %d alternative text(s) were found",
            page.file.src_uri, html_text.count(placeholder), len(alts),
        )
    for alt in alts:
        html_text = html_text.replace(placeholder, f'alt="{html.escape(alt, quote=True)}"', 1)
    return html_text


def rewrite_links(html_text: str, page, files, state: ExamplesBuild) -> str:
    """Relative ``.md``/``.py`` links to built URLs; anchors are checked later (``check_anchors``)."""

    def rewrite(match: re.Match) -> str:
        href = html.unescape(match.group(2))
        if not href or href.startswith(("#", "/", "data:", "mailto:")) or re.match(r"^[a-z][a-z0-9+.-]*:", href):
            return match.group(0)
        path, _, anchor = href.partition("#")
        target_uri = posixpath.normpath(posixpath.join(posixpath.dirname(page.file.src_uri), path))
        target = files.get_file_from_path(target_uri)
        if target is None:
            log.warning(
                "Example '%s' contains a link to '%s', which is not found among the documentation files.",
                page.file.src_uri, href,
            )
            return match.group(0)
        if anchor:
            state.links.append((page.file.src_uri, target, anchor))
        url = get_relative_url(target.url, page.url) + (f"#{anchor}" if anchor else "")
        return match.group(1) + html.escape(url, quote=True) + match.group(3)

    return HREF.sub(rewrite, html_text)


def check_anchors(state: ExamplesBuild) -> None:
    """Warn (a strict build fails) for each link to an anchor its page lacks."""
    for src, target, anchor in state.links:
        page = getattr(target, "page", None)
        content = getattr(page, "content", "") or ""
        if f'id="{anchor}"' not in content:
            log.warning(
                "Example '%s' links to '%s#%s', but that page has no anchor '#%s'.",
                src, target.src_uri, anchor, anchor,
            )


def heading_text(inner_html: str) -> str:
    """A heading's words as a table of contents shows them: tags dropped, code kept."""
    text = re.sub(r"<[^>]+>", "", ANCHOR_LINK.sub("", inner_html))
    return html.escape(html.unescape(text).strip(), quote=False)


def follow_headings(toc, html_text: str) -> None:
    """Point each table-of-contents entry at the heading it stands for, with its words.

    The entries come in the order of the page's headings; each takes the
    heading's ``id`` and text. An entry with no heading of its level left is
    kept as it is (a strict check in the browser tests reports it)."""
    headings = [(int(level), anchor, heading_text(inner)) for level, anchor, inner in HEADING.findall(html_text)]
    position = 0

    def walk(items) -> None:
        nonlocal position
        for item in items:
            for index in range(position, len(headings)):
                level, anchor, text = headings[index]
                if level == item.level:
                    item.id, item.title = anchor, text or item.title
                    position = index + 1
                    break
            walk(item.children)

    walk(toc)


def download_note(page) -> str:
    """The paragraph that offers the example's zip and its source file."""
    source_name = posixpath.basename(page.file.src_uri)
    stem = source_name.removesuffix(".py")
    bundle = get_relative_url(f"{EXAMPLES_DIR}/{stem}.zip", page.url)
    source = get_relative_url(f"{EXAMPLES_DIR}/{source_name}", page.url)
    return (
        f'<p class="fg-download">Executed when this site was built. '
        f'<a href="{bundle}" download>Download it to run ({stem}.zip)</a>: the example and the '
        f'project files it imports; unpack it and run <code>python {source_name}</code> inside. '
        f'Or <a href="{source}" download>the example alone ({source_name})</a>, which needs a '
        f"copy of the repository around it.</p>"
    )


def externalise(html_text: str, page, state: ExamplesBuild) -> str:
    """Drop CDN loaders; move the notebook CSS (about 600 kB) to one shared file."""
    html_text = MATHJAX_BLOCK.sub("", html_text)
    html_text = SCRIPT_BLOCK.sub(
        lambda m: "" if re.search(r"https?://", m.group(0)) else m.group(0), html_text
    )
    css = "\n".join(STYLE_BLOCK.findall(html_text))
    if not css:
        return html_text
    digest = hashlib.sha256(css.encode()).hexdigest()[:12]
    uri = NOTEBOOK_CSS.format(digest)
    state.css[uri] = css
    html_text = STYLE_BLOCK.sub("", html_text)
    href = get_relative_url(uri, page.url)
    return f'<link rel="stylesheet" href="{href}">' + html_text


def collect_classes(output: str, state: ExamplesBuild) -> None:
    """Remember the classes a built example page uses (``prune_css`` keeps their rules)."""
    for classes in re.findall(r'class="([^"]*)"', output):
        state.classes.update(classes.split())


def _css_blocks(text: str) -> list[tuple[str, str]]:
    """Top-level ``selector { body }`` pairs of a stylesheet (nesting kept in body)."""
    blocks, i = [], 0
    while (open_at := text.find("{", i)) >= 0:
        depth, k = 0, open_at
        while k < len(text):
            depth += {"{": 1, "}": -1}.get(text[k], 0)
            if depth == 0:
                break
            k += 1
        blocks.append((text[i:open_at].strip(), text[open_at + 1 : k]))
        i = k + 1
    return blocks


def _top_level_commas(selector: str) -> list[str]:
    """Split a selector list, leaving commas inside :is(...), :not(...) alone."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(selector):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(selector[start:i])
            start = i + 1
    return parts + [selector[start:]]


def prune_css(text: str, used: set[str]) -> str:
    """Keep the rules that can match: selectors whose every class is in ``used``.

    nbconvert's stylesheet is JupyterLab's whole theme (about 600 kB); the
    example pages use a small part of it. Rules without a class (``:root``
    variables, element rules) and at-rules other than media queries are kept.
    """
    kept = []
    for selector, body in _css_blocks(re.sub(r"/\*.*?\*/", "", text, flags=re.DOTALL)):
        if selector.startswith(("@media", "@supports")):
            inner = prune_css(body, used)
            if inner.strip():
                kept.append(f"{selector}{{{inner}}}")
        elif selector.startswith("@"):
            kept.append(f"{selector}{{{body}}}")
        else:
            alive = [
                part.strip()
                for part in _top_level_commas(selector)
                if all(cls in used for cls in re.findall(r"\.(-?[A-Za-z_][\w-]*)", part))
            ]
            if alive:
                kept.append(f"{','.join(alive)}{{{body}}}")
    return "\n".join(kept)




def write_stylesheets(site_dir: pathlib.Path, state: ExamplesBuild) -> None:
    """Write each notebook stylesheet, pruned to the classes the pages use."""
    for uri, css in state.css.items():
        target = site_dir / uri
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(prune_css(css, state.classes), encoding="utf-8")


class SharedTemplates(jinja2.BytecodeCache):
    """A Jinja bytecode cache held in memory, keyed by the template's name and
    a checksum of its text (an edited template is compiled again)."""

    def __init__(self):
        self.code: dict[tuple[str, str], object] = {}
        self.hits = 0

    def load_bytecode(self, bucket) -> None:
        code = self.code.get((bucket.key, bucket.checksum))
        if code is not None:
            bucket.code = code
            self.hits += 1

    def dump_bytecode(self, bucket) -> None:
        self.code[(bucket.key, bucket.checksum)] = bucket.code


TEMPLATES = SharedTemplates()


def share_compiled_templates() -> None:
    """Give every nbconvert exporter made from now on ``TEMPLATES`` as its
    Jinja bytecode cache (once per process)."""
    from nbconvert.exporters.templateexporter import TemplateExporter

    create = TemplateExporter._create_environment
    if getattr(create, "field_guide_shared", False):
        return

    def create_environment(self):
        environment = create(self)
        environment.bytecode_cache = TEMPLATES
        return environment

    create_environment.field_guide_shared = True
    TemplateExporter._create_environment = create_environment
