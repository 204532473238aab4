"""MkDocs hook: build facts in every footer, and downloadable snippet files.

* ``config.extra.build`` records the torch version and the device the examples
  ran on; ``overrides/partials/copyright.html`` prints it on every page.
* The abbreviations of ``docs/includes/abbreviations.txt`` (``*[GQA]: ...``)
  become the glossary of Python-Markdown's ``abbr``, so every page, and every
  docstring the API reference converts, shows their hover text. Appending the
  file to each conversion instead (pymdownx.snippets' ``auto_append``) cost
  2.4 ms per conversion, and the API reference converts about 1,500
  docstring parts: 3.6 s of a build.
* Every file under ``snippets/`` is published at ``<site>/snippets/...``; a page
  that includes a snippet section gets a link to the whole file right after
  its "The code" heading (or at its end), so a reader can take it in one click.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import logging
import os
import pathlib
import platform
import re
import sys

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files
from mkdocs.utils import get_relative_url

# MkDocs loads hooks by path: the shared rooms live in a package next to this file.
if str(pathlib.Path(__file__).resolve().parent) not in sys.path:
    sys.path.append(str(pathlib.Path(__file__).resolve().parent))

from field_guide_hooks import closure  # noqa: E402
from field_guide_hooks.api_reference import INCLUDE  # noqa: E402  (the include lines)

log = logging.getLogger("mkdocs.hooks.pages")

CODE_HEADING = re.compile(r"^## The code[^\n]*\n", re.M)


def _root(config) -> pathlib.Path:
    return pathlib.Path(config.config_file_path).resolve().parent


ABBREVIATIONS = pathlib.Path("docs", "includes", "abbreviations.txt")
ABBREVIATION = re.compile(r"\*\[(?P<term>[^\]]+)\]:[ \t]*(?P<text>\S.*)")


def abbreviations(path: pathlib.Path) -> dict[str, str]:
    """The abbreviations ``*[TERM]: hover text`` of ``path``, one per line;
    blank lines are skipped and any other line fails the build."""
    glossary: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        match = ABBREVIATION.fullmatch(line.rstrip())
        if match is None:
            raise PluginError(f"{path.name}:{number}: expected '*[TERM]: hover text', got {line!r}")
        if match["term"] in glossary:
            raise PluginError(f"{path.name}:{number}: {match['term']!r} is defined twice")
        glossary[match["term"]] = match["text"]
    return glossary


@event_priority(200)  # first: the examples hook keys its cache on the device
def on_config(config):
    root = _root(config)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from snippets.foundations.devices import pick_device  # the same choice the examples make

    import torch

    device = pick_device()
    os.environ.setdefault("FIELD_GUIDE_DEVICE", device.type)
    build = {
        "torch": importlib.metadata.version("torch"),
        "device": device.type if device.type != "cuda" else torch.cuda.get_device_name(device),
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "date": datetime.date.today().isoformat(),
    }
    config.extra["build"] = build
    config.mdx_configs["abbr"] = {**config.mdx_configs.get("abbr", {}),
                                  "glossary": abbreviations(root / ABBREVIATIONS)}
    log.info(
        "build: torch %s on %s, Python %s, %d threads",
        build["torch"], build["device"], build["python"], build["threads"],
    )
    return config


def on_files(files: Files, config) -> Files:
    snippets = _root(config) / "snippets"
    for path in sorted(snippets.rglob("*.py")):
        if path.name == "__init__.py" or "__pycache__" in path.parts:
            continue
        uri = "snippets/" + path.relative_to(snippets).as_posix()
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def snippet_needs(path: pathlib.Path) -> list[str]:
    """The packages a snippet file imports beyond the standard library, read from its imports."""
    found = {name.split(".")[0] for name in closure.imported_names(path.read_text())}
    return sorted(name for name in found
                  if name not in sys.stdlib_module_names and name != "__future__")


def _needs_words(needs: list[str]) -> str:
    names = {"torch": "PyTorch", "triton": "Triton"}
    words = [names.get(n, n) for n in needs] or ["only the standard library"]
    return ("only " if len(words) == 1 and needs else "") + " and ".join(words)


def on_page_markdown(markdown: str, page, config, files: Files) -> str:
    included = sorted(set(INCLUDE.findall(markdown)))
    if not included:
        return markdown
    links = []
    for rel in included:
        uri = f"snippets/{rel}"
        if files.get_file_from_path(uri) is None:
            continue  # pymdownx.snippets reports the missing file itself
        href = get_relative_url(uri, page.file.src_uri)
        needs = snippet_needs(_root(config) / "snippets" / rel)
        links.append(f"[`{uri}`]({href}){{ download }} (needs {_needs_words(needs)})")
    if not links:
        return markdown
    note = (
        '\n!!! abstract "Take the code"\n\n'
        f"    The code on this page is tested; download the whole file: {', '.join(links)}.\n\n"
    )
    match = CODE_HEADING.search(markdown)
    if match:
        return markdown[: match.end()] + note + markdown[match.end():]
    return markdown + "\n" + note


# ----------------------------------------------------------------------------
# Search: previews in plain text instead of TeX source
# ----------------------------------------------------------------------------
# The search index holds each section's text as the page's HTML has it, so math
# arrives as TeX source (\(\mathrm{softmax}(QK^\top)\)) and the previews under
# each search result show it raw. The index gets a plain-text reading of each
# formula instead; its words stay searchable.
TEX_SYMBOLS = {
    "times": "×", "top": "ᵀ", "cdot": "·", "in": "∈", "infty": "∞", "sum": "Σ", "prod": "Π",
    "ell": "ℓ", "dots": "…", "ldots": "…", "cdots": "⋯", "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥",
    "ne": "≠", "neq": "≠", "approx": "≈", "to": "→", "rightarrow": "→", "leftarrow": "←", "circ": "∘",
    "mid": "|", "pm": "±", "gg": "≫", "ll": "≪", "lfloor": "⌊", "rfloor": "⌋", "lceil": "⌈", "rceil": "⌉",
    "lVert": "‖", "rVert": "‖", "odot": "⊙", "otimes": "⊗", "propto": "∝", "sim": "∼", "partial": "∂",
    "nabla": "∇", "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ϵ", "varepsilon": "ε",
    "zeta": "ζ", "eta": "η", "theta": "θ", "kappa": "κ", "lambda": "λ", "mu": "μ", "nu": "ν", "xi": "ξ",
    "pi": "π", "rho": "ρ", "sigma": "σ", "tau": "τ", "phi": "φ", "varphi": "φ", "chi": "χ", "psi": "ψ",
    "omega": "ω", "Gamma": "Γ", "Delta": "Δ", "Theta": "Θ", "Lambda": "Λ", "Sigma": "Σ", "Phi": "Φ",
    "Psi": "Ψ", "Omega": "Ω", "bmod": "mod", "quad": " ", "qquad": " ",
}
TEX_DROPPED = {"left", "right", "big", "Big", "bigg", "Bigg", "textstyle", "displaystyle", "limits", "nolimits"}
TEX_ARGUMENT_FIRST = re.compile(r"\\(?:begin|end)\{[^{}]*\}")
TEX_FRACTION = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
TEX_ROOT = re.compile(r"\\sqrt\s*\{([^{}]*)\}")
TEX_COMMAND = re.compile(r"\\([A-Za-z]+)|\\(.)")
TEX_SPANS = re.compile(
    r"\\\((.+?)\\\)|\\\[(.+?)\\\]|\$\$(.+?)\$\$|(?<![\w$\\])\$(?=[^\s$])([^$\n]{1,300}?)(?<=[^\s\\])\$(?![\w$])",
    re.S,
)


TEX_ACCENTS = {"bar", "hat", "tilde", "vec", "mathrel", "operatorname"}


def _grouped(text: str) -> str:
    """``text`` itself when it is one character, else in parentheses."""
    return text if len(text) <= 1 else f"({text})"


def tex_to_text(tex: str) -> str:
    """A plain-text reading of a TeX formula: ``\\sqrt{d}`` becomes ``√d``,
    ``\\mathrm{softmax}(QK^\\top)`` becomes ``softmax(QKᵀ)``."""
    text = TEX_ARGUMENT_FIRST.sub(" ", tex)
    for _ in range(5):  # innermost first: nested fractions and roots
        previous = text
        text = TEX_FRACTION.sub(lambda m: f"{_grouped(m.group(1))}/{_grouped(m.group(2))}", text)
        text = TEX_ROOT.sub(lambda m: f"√{_grouped(m.group(1))}", text)
        if text == previous:
            break

    def command(match: re.Match) -> str:
        name, char = match.group(1), match.group(2)
        if name is None:  # \, \; \! \{ ...
            return {",": " ", ";": " ", ":": " ", "!": "", "\\": " "}.get(char, char)
        if name in TEX_DROPPED or name in TEX_ACCENTS or name.startswith(("math", "text", "over", "under")):
            return ""  # \mathrm{x} -> {x}; the braces go below
        return TEX_SYMBOLS.get(name, name)  # \exp, \max, \log read as words

    text = TEX_COMMAND.sub(command, text)
    # "&" aligns columns in TeX; "&lt;" and the like are the page's own escapes.
    text = re.sub(r"&(?!(?:[A-Za-z]+|#\d+);)", " ", text.replace("^ᵀ", "ᵀ").replace("&amp;", " "))
    text = re.sub(r"[{}]", "", text)
    return re.sub(r"\s+", " ", text).strip()


def plain_search_text(text: str) -> str:
    """``text`` with every ``\\(...\\)``, ``\\[...\\]``, ``$$...$$`` and
    ``$...$`` span replaced by :func:`tex_to_text` of its content."""
    return TEX_SPANS.sub(lambda m: tex_to_text(next(g for g in m.groups() if g is not None)), text)


# ----------------------------------------------------------------------------
# Search: the forms people type
# ----------------------------------------------------------------------------
# The search splits "DeltaNet" into "delta" and "net" (the separator in
# mkdocs.yml breaks camel case so that "FlashAttention" finds "flash"), so the
# run-together form a reader types, "deltanet", matched nothing. Each page's
# own entry in the index gets a hidden field, ``keywords`` (boosted in
# mkdocs.yml's search config, never shown in a result): the lower-case
# run-together form of every camel-case or hyphenated word of a Markdown
# page's title (not an executed example's, which would compete with it), plus
# the abbreviations listed for it under ``extra.search_keywords`` in mkdocs.yml
# or in its front matter (``search: {keywords: [...]}``).
TITLE_WORD = re.compile(r"[A-Za-z]+(?:-[A-Za-z]+)+|[A-Za-z]*[a-z][A-Z][A-Za-z]*")

_keywords: dict[str, list[str]] = {}  # page URL -> its keywords, filled per page


def title_keywords(title: str) -> list[str]:
    """``"DeltaNet and Gated DeltaNet"`` -> ``["deltanet"]``; ``"Grouped-query
    attention"`` -> ``["groupedquery"]``."""
    return list(dict.fromkeys(word.replace("-", "").lower() for word in TITLE_WORD.findall(title)))


def page_keywords(page, config) -> list[str]:
    listed = (config.extra.get("search_keywords") or {}).get(page.file.src_uri, [])
    own = ((page.meta.get("search") or {}).get("keywords") or []) if isinstance(page.meta, dict) else []
    # Executed examples share their page's title words; only the page gets them.
    titled = title_keywords(page.title or "") if page.file.src_uri.endswith(".md") else []
    words = titled + [str(w).lower() for w in [*listed, *own]]
    return list(dict.fromkeys(words))


def on_page_context(context, page, config, nav):
    words = page_keywords(page, config)
    if words:
        _keywords[page.url] = words
    return context


def on_env(env, config, files):
    listed = config.extra.get("search_keywords") or {}
    for src in listed:
        if files.get_file_from_path(src) is None:
            log.warning("mkdocs.yml: extra.search_keywords names %s, which is not a page", src)
    return env


@event_priority(-50)  # after the search plugin writes the index (0), before the offline plugin reads it (-100)
def on_post_build(config) -> None:
    index = pathlib.Path(config.site_dir) / "search" / "search_index.json"
    if not index.is_file():
        return
    data = json.loads(index.read_text(encoding="utf-8"))
    for doc in data.get("docs", []):
        for field in ("title", "text"):
            if isinstance(doc.get(field), str):
                doc[field] = plain_search_text(doc[field])
        words = _keywords.get(doc.get("location"))
        if words:  # the page's own entry, not its sections
            doc["keywords"] = " ".join(words)
    index.write_text(json.dumps(data, separators=(",", ":"), ensure_ascii=False), encoding="utf-8")
