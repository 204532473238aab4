"""MkDocs hook: draw the teaching pages' figures at build time.

A page asks for a figure with an image whose address starts ``figure:``::

    ![Causal mask for N = M = 6: the lower triangle is allowed](figure:masks/causal)

``docs/figures/masks.py`` defines ``causal(style)``, which draws with
matplotlib (the snippets' own functions compute what is drawn) and returns a
``matplotlib.figure.Figure``. Every public function of a ``docs/figures/*.py``
file is a figure. Each is rendered twice to SVG, with the light and the dark
palette's ink on a transparent background, cropped to a box that holds every
label (a long title is never cut at the edge), and the page gets both images with
Material's ``#only-light`` / ``#only-dark`` fragments, so a reader sees the one
drawn for the palette in use.

* The rendered SVGs are cached per script, keyed by the script, every local
  module it imports (transitively: the snippets it draws with, ``_style.py``),
  every file of ``docs/data/`` that one of those names (the dependency closure
  of ``hooks/field_guide_hooks/closure.py``, shared with the examples) (``models.yaml``, read
  through ``hooks/models_table.py``), the matplotlib and Python versions. The cache sits in
  ``$FIELD_GUIDE_FIGURE_CACHE``, else in a ``figures`` folder of the example
  cache (``$FIELD_GUIDE_EXAMPLE_CACHE`` or ``.cache/examples``).
* Drawing happens in the build process, one figure after another: torch is
  already loaded there, and a second process would pay for importing it again.
* A figure that raises, a Python warning that a figure script (or a snippet it
  draws with) causes, a page that names a figure no script defines, and an
  image without alternative text each fail the build with one line naming the
  file and the figure. A figure no page shows is a warning (a strict build
  fails on it).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import io
import json
import logging
import os
import pathlib
import re
import shutil
import sys
import threading
import time
import traceback
import warnings

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.utils import get_relative_url

# MkDocs loads hooks by path: shared helpers live in a package next to this file.
_HOOKS = str(pathlib.Path(__file__).resolve().parent)
if _HOOKS not in sys.path:
    sys.path.append(_HOOKS)

from field_guide_hooks import closure, heap, torch_threads  # noqa: E402

log = logging.getLogger("mkdocs.hooks.figures")

HOOK_VERSION = "2"  # bump to invalidate every cached figure
FIGURES_DIR = "figures"
PALETTES = ("light", "dark")
REFERENCE = re.compile(r"!\[(?P<alt>[^\]]*)\]\(figure:(?P<script>[A-Za-z][\w-]*)/(?P<name>[A-Za-z]\w*)\)")

_state: dict = {}


def cache_key(script: pathlib.Path, roots: list[pathlib.Path], environment: str) -> str:
    """Hash of the figure script, the local modules it imports, the data files
    they name and the environment."""
    header = f"figures-hook={HOOK_VERSION}\n{environment}\n"
    return closure.cache_key(script, roots, header, data=True)


def _environment() -> str:
    return f"python={sys.version}\nmatplotlib={importlib.metadata.version('matplotlib')}"


class FigureError(Exception):
    """One figure failed: the message is one line."""


class _WarningsFail:
    """Turn a Python warning that the figure code causes into an error.

    A warning counts when the drawing thread's stack passes through one of
    ``own`` (the figure scripts, the snippets they draw with): a tensor handed
    to matplotlib, a deprecated argument. Warnings from elsewhere (another
    thread of the build, a library talking to itself) are shown as usual.
    """

    def __init__(self, *own: pathlib.Path):
        self.own = tuple(str(path) + os.sep for path in own)
        self.thread = threading.current_thread()

    def __enter__(self):
        self._saved = warnings.catch_warnings()
        self._saved.__enter__()
        original = warnings.showwarning
        warnings.simplefilter("always")

        def show(message, category, filename, lineno, file=None, line=None):
            if threading.current_thread() is self.thread and any(
                frame.filename.startswith(self.own) for frame in traceback.extract_stack()[:-1]
            ):
                where = os.path.basename(filename)
                raise category(f"{message} (warned at {where}:{lineno}; the build treats it as an error)")
            original(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        return self

    def __exit__(self, *exc):
        return self._saved.__exit__(*exc)


def figure_functions(module) -> dict[str, object]:
    """The figures a script defines: its public functions, in file order."""
    return {
        name: value
        for name, value in vars(module).items()
        if callable(value) and not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
        and getattr(value, "__code__", None) is not None
    }


def render_script(script: pathlib.Path, target: pathlib.Path) -> list[str]:
    """Draw every figure of ``script`` in both palettes into the folder ``target``."""
    import matplotlib

    figures_dir = str(script.parent)
    if figures_dir not in sys.path:
        sys.path.insert(0, figures_dir)
    # A fresh copy of the shared style, so an edited _style.py takes effect.
    # list(): the example threads import while figures draw, so the dict moves.
    own_modules = [n for n, m in list(sys.modules.items())
                   if str(getattr(m, "__file__", "") or "").startswith(figures_dir + os.sep)]
    for name in own_modules:
        sys.modules.pop(name, None)
    name = f"field_guide_figure_{script.stem}"
    spec = importlib.util.spec_from_file_location(name, script)
    module = importlib.util.module_from_spec(spec)
    own = (script.parent, script.parents[2] / "snippets")  # docs/figures, snippets
    try:
        with _WarningsFail(*own):
            spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - reported as one line
        raise FigureError(f"docs/{FIGURES_DIR}/{script.name} failed to import: {type(exc).__name__}: {exc}") from None
    style = importlib.import_module("_style") if (script.parent / "_style.py").is_file() else None
    functions = figure_functions(module)
    if not functions:
        raise FigureError(f"docs/{FIGURES_DIR}/{script.name} defines no figure (no public function)")
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for fname, function in functions.items():
        for palette in PALETTES:
            palette_style = style.Style(palette) if style is not None else palette
            try:
                with _WarningsFail(*own), matplotlib.rc_context(palette_style.rc if style is not None else {}):
                    fig = function(palette_style)
                    buffer = io.StringIO()
                    # A tight box grows the canvas to hold every label: a long
                    # title is never cut at the figure's edge.
                    fig.savefig(buffer, format="svg", transparent=True, metadata={"Date": None},
                                bbox_inches="tight", pad_inches=0.04)
            except Exception as exc:  # noqa: BLE001 - reported as one line
                shutil.rmtree(tmp, ignore_errors=True)
                message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                raise FigureError(
                    f"docs/{FIGURES_DIR}/{script.name}:{fname} ({palette}) failed: {type(exc).__name__}: {message}"
                ) from None
            (tmp / f"{fname}-{palette}.svg").write_text(buffer.getvalue(), encoding="utf-8")
    (tmp / "index.json").write_text(json.dumps(list(functions)), encoding="utf-8")
    if target.exists():  # a concurrent build drew the same figures
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        try:
            tmp.rename(target)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return list(functions)


def _cache_dir(root: pathlib.Path) -> pathlib.Path:
    if os.environ.get("FIELD_GUIDE_FIGURE_CACHE"):
        return pathlib.Path(os.environ["FIELD_GUIDE_FIGURE_CACHE"])
    return closure.cache_root(root) / "figures"


def render_all(docs_dir: pathlib.Path, root: pathlib.Path) -> dict[str, pathlib.Path]:
    """Render the stale scripts; return ``"script/name-palette"`` -> SVG path."""
    scripts_dir = docs_dir / FIGURES_DIR
    scripts = sorted(p for p in scripts_dir.glob("*.py") if not p.name.startswith("_"))
    cache = _cache_dir(root)
    cache.mkdir(parents=True, exist_ok=True)
    environment = _environment()
    roots = [root, scripts_dir]
    started = time.perf_counter()
    drawn = 0
    svgs: dict[str, pathlib.Path] = {}
    failures: list[str] = []
    targets = {script: cache / f"{script.stem}-{cache_key(script, roots, environment)[:20]}" for script in scripts}
    # A cold build draws every script: settle the heap (field_guide_hooks/heap.py)
    # first and after each script, so the drawing's collections skip the
    # build's imports and the scripts drawn before. A rebuild after one edit
    # draws one or two scripts, where a settle would cost more than it saves;
    # the first build of a process settles anyway, so that its rebuilds'
    # collections skip the imports.
    stale = sum(not (target / "index.json").is_file() for target in targets.values())
    settle = stale > 2 or not heap.settled()
    if settle:
        heap.settle()
    for script, target in targets.items():
        if not (target / "index.json").is_file():
            try:
                with torch_threads.one_thread():
                    render_script(script, target)
                if settle:
                    heap.settle()
                drawn += 1
            except FigureError as exc:
                log.warning("figures: %s", exc)
                failures.append(str(exc))
                continue
        for fname in json.loads((target / "index.json").read_text(encoding="utf-8")):
            for palette in PALETTES:
                svgs[f"{script.stem}/{fname}-{palette}"] = target / f"{fname}-{palette}.svg"
    if failures:
        raise PluginError(f"{len(failures)} figure(s) failed: " + "; ".join(failures))
    _prune(cache, {path.parent for path in svgs.values()})
    log.info(
        "figures: %d of %d scripts drawn (%d cached), %d SVG files, in %.1f s",
        drawn, len(scripts), len(scripts) - drawn, len(svgs), time.perf_counter() - started,
    )
    return svgs


STALE_AFTER_S = 7 * 24 * 3600


def _prune(cache: pathlib.Path, wanted: set[pathlib.Path]) -> None:
    """Drop drawings no build has used for a week. Not sooner: builds of other
    branches may share the cache, and deleting what one of them is about to
    copy would break it."""
    now = time.time()
    for folder in cache.iterdir():
        if folder in wanted:
            os.utime(folder)  # used now
        elif folder.is_dir() and now - folder.stat().st_mtime > STALE_AFTER_S:
            shutil.rmtree(folder, ignore_errors=True)


# ----------------------------------------------------------------------------
# MkDocs events
# ----------------------------------------------------------------------------
def on_files(files: Files, config) -> Files:
    root = pathlib.Path(config.config_file_path).resolve().parent
    svgs = render_all(pathlib.Path(config.docs_dir), root)
    _state["svgs"] = svgs
    _state["used"] = set()
    for file in list(files):  # the scripts draw the figures; they are not pages
        if file.src_uri.startswith(f"{FIGURES_DIR}/"):
            files.remove(file)
    for key, path in svgs.items():
        files.append(File.generated(config, f"{FIGURES_DIR}/{key}.svg", abs_src_path=str(path)))
    return files


def figure_markdown(alt: str, script: str, name: str, page_uri: str) -> str:
    """Both palettes' images of one figure, as Markdown relative to the page."""
    images = []
    for palette in PALETTES:
        href = get_relative_url(f"{FIGURES_DIR}/{script}/{name}-{palette}.svg", page_uri)
        images.append(f"![{alt}]({href}#only-{palette}){{ .fg-drawn }}")
    return "".join(images)


def on_page_markdown(markdown: str, page, config, files: Files) -> str:
    svgs = _state.get("svgs", {})

    def replace(match: re.Match) -> str:
        alt, script, name = match.group("alt").strip(), match.group("script"), match.group("name")
        where = f"{page.file.src_uri}: figure:{script}/{name}"
        if not alt:
            raise PluginError(f"{where} has no alternative text; write what the figure shows between [ and ]")
        if f"{script}/{name}-light" not in svgs:
            raise PluginError(f"{where} is not defined: docs/{FIGURES_DIR}/{script}.py has no function {name}()")
        _state["used"].add(f"{script}/{name}")
        return figure_markdown(alt, script, name, page.file.src_uri)

    return REFERENCE.sub(replace, markdown)


def on_startup(command, dirty: bool) -> None:
    _state["dirty"] = dirty
    if command == "serve":
        # The first build of `mkdocs serve` usually finds every figure cached;
        # the first edit that redraws one would then pay for importing
        # matplotlib's figure and SVG modules. Import them while the server idles.
        threading.Thread(target=_import_drawing, name="field-guide-matplotlib", daemon=True).start()


def _import_drawing() -> None:
    import matplotlib.backends.backend_svg  # noqa: F401
    import matplotlib.figure  # noqa: F401


def on_env(env, config, files: Files):
    if _state.get("dirty"):
        return env  # `mkdocs serve --dirty` reads only the pages an edit changed
    defined = {key.rsplit("-", 1)[0] for key in _state.get("svgs", {})}
    for unused in sorted(defined - _state.get("used", set())):
        log.warning("figures: docs/%s/%s.py:%s is shown on no page", FIGURES_DIR, *unused.split("/"))
    return env
