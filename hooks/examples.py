"""MkDocs hook: execute docs/examples/*.py before mkdocs-jupyter renders them.

Why a hook and not mkdocs-jupyter's own ``execute: true``:

* mkdocs-jupyter keys its cache on the notebook text alone, so an edit to a
  snippet the example imports would leave stale output on the page. Here the key
  covers the example, every local module it imports (transitively), the
  plotting helper, the Python and torch versions and the device.
* Examples run two at a time (the build machine has two cores). Each worker
  keeps one kernel, started in the repository root with ``snippets``
  importable (no page shows a ``sys.path`` line; the build works from any
  working directory), and runs its examples one after another after a reset
  cell that the page never shows: importing torch once per worker instead of
  once per example saves about two seconds of CPU per example.
* A failing cell fails the build with the cell's traceback; so does a Python
  warning that a cell or the project's own code causes (a tensor handed to
  matplotlib, a deprecated argument), named with its cell. Every figure must
  carry alternative text (a ``# alt: ...`` comment in its cell), and links in
  the examples' Markdown are rewritten to built URLs and checked like links on
  Markdown pages.

The executed notebooks are stored in ``.cache/examples`` (or
``$FIELD_GUIDE_EXAMPLE_CACHE``); mkdocs-jupyter renders them with
``execute: false``.

The console stays short: mkdocs-jupyter's two lines per notebook ("Converting
notebook", "Cache miss") are hidden, and the examples report one progress line
that updates in place on a terminal (one line per example elsewhere, so CI logs
stay readable). ``mkdocs build -v`` or ``FIELD_GUIDE_VERBOSE=1`` shows it all.

Each example page links to a zip of the example and the project files it
imports (``snippets/...``), laid out so that it runs where it is unpacked.
"""

from __future__ import annotations

import ast
import hashlib
import html
import importlib.metadata
import logging
import os
import pathlib
import posixpath
import re
import shutil
import sys
import tempfile
import threading
import time

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files
from mkdocs.utils import get_relative_url

log = logging.getLogger("mkdocs.hooks.examples")
# mkdocs-jupyter logs two INFO lines per notebook on every build.
NOISY_LOGGERS = ("mkdocs.mkdocs-jupyter", "mkdocs.plugins.mkdocs_jupyter")


def verbose() -> bool:
    """Details on the console: ``mkdocs build -v`` or ``FIELD_GUIDE_VERBOSE=1``."""
    flag = os.environ.get("FIELD_GUIDE_VERBOSE", "").strip().lower() not in ("", "0", "false", "no", "off")
    return flag or logging.getLogger("mkdocs").getEffectiveLevel() <= logging.DEBUG


class Progress:
    """``examples: [i/n] name ran in s``: one line rewritten in place on a
    terminal, plain log lines otherwise (or when ``verbose()``)."""

    def __init__(self, total: int, stream=None):
        self.total, self.stream = total, stream if stream is not None else sys.stderr
        self.live = not verbose() and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.width = 0  # length of the line on screen, to blank it out

    def step(self, text: str) -> None:
        if not self.live:
            log.info("examples: %s", text)
            return
        line = f"INFO    -  examples: {text}"
        self.stream.write("\r" + line.ljust(self.width))
        self.stream.flush()
        self.width = len(line)

    def interrupt(self) -> None:
        """End the live line, so that a warning starts on a line of its own."""
        if self.live and self.width:
            self.stream.write("\n")
            self.stream.flush()
            self.width = 0

    def close(self) -> None:
        self.interrupt()

HOOK_VERSION = "6"  # bump to invalidate every cached example
EXAMPLES_DIR = "examples"
PLACEHOLDER_ALT = "No description has been provided for this image"
ALT_COMMENT = re.compile(r"^\s*#\s*alt:\s*(.+?)\s*$", re.M)
HREF = re.compile(r'(<a\s[^>]*?href=")([^"]*)(")')
# nbconvert's template loads MathJax and mermaid from a CDN; KaTeX served by the
# site typesets the notebooks instead, and no example draws a mermaid diagram.
MATHJAX_BLOCK = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.S)
SCRIPT_BLOCK = re.compile(r"<script\b[^>]*>.*?</script>", re.S)
STYLE_BLOCK = re.compile(r"<style\b[^>]*>(.*?)</style>", re.S)
NOTEBOOK_CSS = "assets/stylesheets/notebook-{}.css"

_state: dict = {}


# ----------------------------------------------------------------------------
# Cache key: the example and everything local that it imports.
# ----------------------------------------------------------------------------
def _imported_names(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def local_dependencies(path: pathlib.Path, roots: list[pathlib.Path]) -> list[pathlib.Path]:
    """Local source files ``path`` imports, transitively, found under ``roots``."""
    seen: set[pathlib.Path] = set()
    todo = [path]
    while todo:
        current = todo.pop()
        for name in _imported_names(current.read_text(encoding="utf-8")):
            parts = name.split(".")
            for root in roots:
                candidates = [root.joinpath(*parts).with_suffix(".py"), root.joinpath(*parts, "__init__.py")]
                # Package __init__ files run on import too.
                candidates += [root.joinpath(*parts[:i], "__init__.py") for i in range(1, len(parts))]
                for candidate in candidates:
                    if candidate.is_file() and candidate not in seen and candidate != path:
                        seen.add(candidate)
                        todo.append(candidate)
    return sorted(seen)


def bundle_files(example: pathlib.Path, root: pathlib.Path) -> dict[str, pathlib.Path]:
    """What a reader needs to run ``example`` on their own: archive name -> file.

    The example sits at the top with the helpers of ``docs/examples`` it
    imports, so ``python <example>.py`` puts them on the path; the project's
    packages (``snippets/``, ``bench/``) keep their place relative to it, as
    do data files the code opens by a path written in it ("docs/data/...")."""
    examples_dir = example.parent
    files = {example.name: example}
    for dep in local_dependencies(example, [root, examples_dir]):
        files[dep.name if dep.parent == examples_dir else dep.relative_to(root).as_posix()] = dep
    for source in list(files.values()):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "/" in node.value:
                data = root / node.value
                if len(node.value) < 200 and "\n" not in node.value and data.is_file() and root in data.resolve().parents:
                    files[node.value] = data
    return files


def third_party_imports(files: list[pathlib.Path], local: set[str]) -> list[str]:
    """Top-level modules the files import that are neither local nor in the standard library."""
    names = set()
    for file in files:
        names.update(name.split(".")[0] for name in _imported_names(file.read_text(encoding="utf-8")))
    return sorted(n for n in names if n not in local and n not in sys.stdlib_module_names and n != "__future__")


def write_bundle(example: pathlib.Path, root: pathlib.Path, target: pathlib.Path) -> dict[str, pathlib.Path]:
    """Write ``target`` (a zip): the example, the files it needs, and a README."""
    import zipfile

    files = bundle_files(example, root)
    local = {name.split("/")[0].removesuffix(".py") for name in files}
    needs = third_party_imports([f for f in files.values() if f.suffix == ".py"], local)
    readme = (
        f"{example.name}: an executed example of the Attention Field Guide.\n\n"
        f"Unpack this folder anywhere and run, from inside it:\n\n    python {example.name}\n\n"
        f"It needs Python 3.10 or newer and: {', '.join(needs) or 'nothing beyond the standard library'}"
        f"{' (pip install pyyaml)' if 'yaml' in needs else ''}.\n"
        "The other files are the project's own code that the example imports, "
        "at the same relative paths as in the repository.\n"
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    stamp = (2020, 1, 1, 0, 0, 0)  # fixed dates: the same sources give the same zip
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        folder = example.stem
        archive.writestr(zipfile.ZipInfo(f"{folder}/README.txt", stamp), readme)
        for name, path in sorted(files.items()):
            archive.writestr(zipfile.ZipInfo(f"{folder}/{name}", stamp), path.read_bytes(), zipfile.ZIP_DEFLATED)
    return files


def cache_key(example: pathlib.Path, roots: list[pathlib.Path], environment: str) -> str:
    """Hash of the example, its local imports and the environment that runs it."""
    h = hashlib.sha256(f"hook={HOOK_VERSION}\n{environment}\n".encode())
    for file in [example, *local_dependencies(example, roots)]:
        h.update(f"\n--- {file.name}\n".encode())
        h.update(file.read_bytes())
    return h.hexdigest()


# ----------------------------------------------------------------------------
# Execution
# ----------------------------------------------------------------------------
def _alt_texts(nb) -> list[str]:
    """One alternative text per image output, from the cells' ``# alt:`` comments."""
    alts: list[str] = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        images = sum(
            1
            for out in cell.get("outputs", [])
            if out.get("output_type") in ("display_data", "execute_result")
            and any(key.startswith("image/") for key in out.get("data", {}))
        )
        given = ALT_COMMENT.findall(cell.source)
        if given and not images:
            raise ValueError(
                f"cell {index} has an '# alt: ...' comment but drew no figure; a figure "
                "must end the cell (or the kernel lost its inline backend)"
            )
        if not images:
            continue
        if len(given) == images:
            alts += given
        elif len(given) == 1:
            alts += [f"{given[0]} ({i + 1} of {images})" for i in range(images)] if images > 1 else given
        else:
            raise ValueError(
                f"cell {index} draws {images} figure(s) but has {len(given)} '# alt: ...' "
                "comment(s); give one per figure (or one for all)"
            )
    return alts


# Run before every example in a reused kernel, then removed from the page: a
# clean namespace, no figures, matplotlib's settings as the kernel started
# with, and the project's own modules (snippets/, bench/, docs/examples/)
# imported afresh. Everything else stays loaded, third-party modules included,
# even when they live under the repository root (a `.venv` inside the clone
# holds torch there, and unloading torch crashes the kernel).
RESET_CELL = """\
%reset -f
import sys as _s, matplotlib as _m, matplotlib.pyplot as _p, torch as _t
_p.close("all")
if not hasattr(_s, "_field_guide_rc"):
    # The backend and interactive mode belong to the inline backend, which sets
    # them after this cell; restoring them would hide every later figure.
    _s._field_guide_rc = {{
        k: v for k, v in _m.rcParams.items() if not k.startswith("backend") and k != "interactive"
    }}
_m.rcParams.update(_s._field_guide_rc)
_n = None
for _n in [n for n, mod in list(_s.modules.items()) if str(getattr(mod, "__file__", "") or "").startswith({own!r})]:
    del _s.modules[_n]
_t.set_num_threads({threads}); _t.set_default_dtype(_t.float32); _t.set_printoptions(profile="default")
import warnings as _w, traceback as _tb, threading as _th
_w.resetwarnings(); _w.simplefilter("always")
def _fail_on_own_warning(message, category, filename, lineno, file=None, line=None,
                         _show=_w._showwarning_orig, _main=_th.main_thread(), _tb=_tb, _th=_th):
    # A warning that the example's cells or the project's modules cause is an
    # error (the build fails on that cell); any other is shown as usual.
    own = {own!r}
    mine = [f for f in _tb.extract_stack()[:-1] if f.filename.startswith(own)
            or "ipykernel_" in f.filename or f.filename.startswith("<ipython-input")]
    if _th.current_thread() is _main and mine:
        where = filename.rsplit("/", 1)[-1].rsplit(chr(92), 1)[-1]
        raise category(f"{{message}} (warned at {{where}}:{{lineno}}, called from line {{mine[-1].lineno}}: "
                       f"{{mine[-1].line}}; the build treats it as an error)")
    _show(message, category, filename, lineno, file, line)
_w.showwarning = _fail_on_own_warning
del _s, _m, _p, _t, _n, _w, _tb, _th, _fail_on_own_warning
"""


ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class ExampleError(Exception):
    """An example's cell raised: ``summary`` is one line, ``detail`` the tail of
    the traceback, both free of terminal colour codes."""

    def __init__(self, summary: str, detail: str = ""):
        super().__init__(summary)
        self.summary, self.detail = summary, detail

    @classmethod
    def from_notebook(cls, nb, exc: Exception) -> "ExampleError":
        # The reset cell is cell 0 and never shown: page cells count from 1.
        for index, cell in enumerate(nb.cells):
            for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
                if out.get("output_type") == "error":
                    where = "the hidden reset cell" if index == 0 else f"cell {index}"
                    summary = f"{where}: {out.get('ename')}: {ANSI.sub('', str(out.get('evalue', ''))).strip()}"
                    trace = ANSI.sub("", "\n".join(out.get("traceback", []))).strip().splitlines()
                    return cls(summary, "\n".join(trace[-20:]))
        text = ANSI.sub("", str(exc)).strip()
        return cls(f"{type(exc).__name__}: {text.splitlines()[-1] if text else ''}", "\n".join(text.splitlines()[-20:]))


# Where the project's own importable code lives, relative to the repository root.
OWN_MODULE_DIRS = ("snippets", "bench", os.path.join("docs", EXAMPLES_DIR))


class Kernel:
    """One Jupyter kernel that runs several examples, one after another."""

    def __init__(self, root: pathlib.Path, threads: int):
        from jupyter_client.manager import KernelManager

        self.root, self.threads = root, threads
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(root), str(root / "docs" / EXAMPLES_DIR), env.get("PYTHONPATH", "")]
        ).rstrip(os.pathsep)
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
        env.setdefault("PYTHONHASHSEED", "0")
        env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
        if env.get("FIELD_GUIDE_DEVICE", "cpu") != "cuda":
            # Triton runs its kernels on CPU tensors only through its interpreter, and
            # only if this is set before triton is first imported; torch.compile and
            # FlexAttention import it, so an earlier example in this kernel may have.
            env.setdefault("TRITON_INTERPRET", "1")
        # IPC sockets in a private folder: no TCP port, so ipykernel has no
        # "running over TCP without encryption" warning to print per kernel.
        self.sockets = tempfile.mkdtemp(prefix="field-guide-kernel-")
        self.km = KernelManager(kernel_name="python3", transport="ipc", ip=os.path.join(self.sockets, "k"))
        self.km.start_kernel(env=env, cwd=str(root))

    def run(self, example: pathlib.Path, target: pathlib.Path) -> float:
        import jupytext
        import nbformat
        from nbclient import NotebookClient

        start = time.perf_counter()
        nb = jupytext.read(example)
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        own = tuple(str(self.root / sub) + os.sep for sub in OWN_MODULE_DIRS)
        reset = nbformat.v4.new_code_cell(RESET_CELL.format(own=own, threads=self.threads))
        nb.cells.insert(0, reset)
        client = NotebookClient(nb, km=self.km, timeout=600, kernel_name="python3", allow_errors=False)
        try:
            client.execute()
        except Exception as exc:  # noqa: BLE001 - re-raised as one readable error
            raise ExampleError.from_notebook(nb, exc) from None
        finally:
            if client.kc is not None:
                client.kc.stop_channels()
        nb.cells.pop(0)
        for cell in nb.cells:  # number the cells as a fresh kernel would
            if cell.cell_type == "code" and cell.get("execution_count"):
                cell.execution_count -= 1
                for out in cell.get("outputs", []):
                    if out.get("execution_count"):
                        out["execution_count"] -= 1
        nb.metadata["field_guide"] = {"alts": _alt_texts(nb), "source": example.name}
        # One temporary name per process and thread: two builds sharing a cache
        # may run the same example at once.
        tmp = target.with_suffix(f".{os.getpid()}-{threading.get_ident()}.tmp")
        nbformat.write(nb, tmp)
        tmp.replace(target)  # atomic: a concurrent build never reads half a file
        return time.perf_counter() - start

    def close(self) -> None:
        self.km.shutdown_kernel(now=True)
        shutil.rmtree(self.sockets, ignore_errors=True)


def _environment(config) -> str:
    build = config.extra.get("build", {})
    return "\n".join(
        [
            f"python={sys.version}",
            f"torch={build.get('torch', '')}",
            f"device={build.get('device', '')}",
            f"matplotlib={importlib.metadata.version('matplotlib')}",
        ]
    )


# Examples known to take the longest (training runs, timings, a dynamo import):
# started first, so the two workers finish together instead of one waiting on
# a long example at the end. Measured durations, kept in the cache, refine it.
LONG_FIRST = ("tiny_bert.py", "tiny_gpt.py", "performance.py", "bahdanau_translation.py", "flex_attention.py")
DURATIONS = "durations.json"


def _longest_first(todo, cache_dir: pathlib.Path):
    import json

    try:
        known = json.loads((cache_dir / DURATIONS).read_text())
    except (OSError, ValueError):
        known = {}
    fallback = {name: 1000.0 - i for i, name in enumerate(LONG_FIRST)}
    return sorted(todo, key=lambda job: -known.get(job[0].name, fallback.get(job[0].name, 0.0)))


def _record_durations(cache_dir: pathlib.Path, measured: dict[str, float]) -> None:
    import json

    path = cache_dir / DURATIONS
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    known.update({name: round(seconds, 2) for name, seconds in measured.items()})
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(known, indent=0, sort_keys=True))
    tmp.replace(path)


def start_examples(config):
    """Start executing every stale example in background threads.

    Returns ``(results, finish)``: example name -> the executed notebook it
    will be, and a function that waits for the runs, raises if one failed and
    prunes the cache. The build draws its figures while the examples run.
    """
    root = pathlib.Path(config.config_file_path).resolve().parent
    examples_dir = pathlib.Path(config.docs_dir) / EXAMPLES_DIR
    cache_dir = pathlib.Path(os.environ.get("FIELD_GUIDE_EXAMPLE_CACHE", root / ".cache" / "examples"))
    cache_dir.mkdir(parents=True, exist_ok=True)
    roots = [root, examples_dir]
    environment = _environment(config)

    examples = sorted(p for p in examples_dir.glob("*.py") if not p.name.startswith("_"))
    results: dict[str, pathlib.Path] = {}
    todo: list[tuple[pathlib.Path, pathlib.Path]] = []
    for example in examples:
        target = cache_dir / f"{example.stem}-{cache_key(example, roots, environment)[:20]}.ipynb"
        results[example.name] = target
        if not target.exists():
            todo.append((example, target))

    cores = os.cpu_count() or 1
    # A kernel waits on its messages part of the time, so one kernel more than
    # there are cores keeps the cores busy; FIELD_GUIDE_EXAMPLE_WORKERS overrides.
    wanted = os.environ.get("FIELD_GUIDE_EXAMPLE_WORKERS", "").strip()
    workers = max(1, min(int(wanted) if wanted.isdigit() else cores + 1, len(todo)))
    log.info(
        "examples: %d of %d to execute (%d cached), %d at a time",
        len(todo), len(examples), len(examples) - len(todo), workers,
    )
    failures: list[str] = []
    progress = Progress(len(todo))
    done = 0
    lock = threading.Lock()
    started = time.perf_counter()
    pending = _longest_first(todo, cache_dir)
    measured: dict[str, float] = {}

    def report(example, seconds=None, error=None):
        nonlocal done
        with lock:
            done += 1
            if error is None:
                measured[example.name] = seconds
                progress.step(f"[{done}/{len(todo)}] {example.name} ran in {seconds:.1f} s")
                return
            progress.interrupt()
            summary = getattr(error, "summary", None) or f"{type(error).__name__}: {error}"
            detail = getattr(error, "detail", "")
            # One line now, so a long build shows the failure as it happens.
            log.warning("examples: [%d/%d] %s FAILED in %s", done, len(todo), example.name, summary)
            failures.append(f"docs/{EXAMPLES_DIR}/{example.name} failed in {summary}" + (f"\n{detail}" if detail else ""))

    def worker(jobs_of, threads):
        kernel = None
        try:
            while True:
                job = jobs_of()
                if job is None:
                    return
                example, target = job
                if kernel is None:
                    kernel = Kernel(root, threads)
                try:
                    report(example, kernel.run(example, target))
                except Exception as exc:  # noqa: BLE001 - reported below, fails the build
                    report(example, error=exc)
                    kernel.close()  # a failed example leaves no state behind
                    kernel = None
        finally:
            if kernel is not None:
                kernel.close()

    def next_job():
        with lock:
            return pending.pop(0) if pending else None

    threads = [
        threading.Thread(target=worker, args=(next_job, max(1, cores // workers)))
        for _ in range(workers)
    ]
    for thread in threads:
        thread.daemon = True  # a build stopped by an error elsewhere does not wait for them
        thread.start()

    def finish() -> None:
        for thread in threads:
            thread.join()
        progress.close()
        if measured:
            _record_durations(cache_dir, measured)
        if todo:
            log.info("examples: executed %d in %.1f s", len(todo), time.perf_counter() - started)
        if failures:
            raise PluginError(f"{len(failures)} executed example(s) failed:\n\n" + "\n\n".join(failures))

        # Keep the cache to what this build uses.
        wanted = set(results.values())
        for stale in cache_dir.glob("*.ipynb"):
            if stale not in wanted and stale.stem.rsplit("-", 1)[0] in {p.stem for p in examples}:
                stale.unlink()

    return results, finish


# ----------------------------------------------------------------------------
# MkDocs events
# ----------------------------------------------------------------------------
def on_config(config):
    if not verbose():
        for name in NOISY_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
    return config


@event_priority(100)  # before mkdocs-jupyter wraps the notebook files
def on_files(files: Files, config) -> Files:
    # The examples run in the background from here on; the first example page
    # (on_pre_page) waits for them.
    # Meanwhile the other hooks' on_files (the figures, the explorer's model) run.
    executed, _state["finish"] = start_examples(config)
    _state["executed"] = executed
    _state["links"] = []
    _state["css"] = {}
    _state["classes"] = set()
    _state["sources"] = {}
    for file in list(files):
        if not file.src_uri.startswith(f"{EXAMPLES_DIR}/"):
            continue
        name = posixpath.basename(file.src_uri)
        if file.src_uri.endswith(".py") or name.startswith("_") or name == "__pycache__":
            files.remove(file)
        if name in executed:
            # The page keeps the example's own path (so Markdown links to
            # examples/x.py resolve) but reads the executed notebook.
            files.append(File.generated(config, file.src_uri, abs_src_path=str(executed[name])))
            _state["sources"][file.src_uri] = file.abs_src_path
    return files


def _wait_for_examples() -> None:
    finish = _state.pop("finish", None)
    if finish is not None:
        finish()


@event_priority(100)  # before mkdocs-jupyter reads the notebook
def on_pre_page(page, config, files: Files):
    # The Markdown pages, which come first in the navigation, are rendered
    # while the examples still run; the first example page waits for them.
    if _is_example(page):
        _wait_for_examples()
    return page


def on_nav(nav, config, files: Files):
    # mkdocs-jupyter wraps each notebook File in a proxy whose own
    # ``abs_src_path`` (a cached property) is recomputed from ``src_dir``, which
    # a generated File lacks; pin it to the executed notebook.
    for file in files:
        if file.src_uri in _state.get("sources", {}):
            file.__dict__["abs_src_path"] = str(_state["executed"][posixpath.basename(file.src_uri)])
    return nav


def _is_example(page) -> bool:
    return page.file.src_uri in _state.get("sources", {})


def on_page_markdown(markdown: str, page, config, files: Files) -> str:
    # An example repeats its topic's words in code and output; rank the page
    # that teaches the topic first, the example after it.
    if _is_example(page):
        page.meta.setdefault("search", {"boost": 0.5})
    return markdown


def on_page_content(html_text: str, page, config, files: Files) -> str:
    if not _is_example(page):
        return html_text
    import nbformat

    nb = nbformat.read(page.file.abs_src_path, as_version=4)
    alts = list(nb.metadata.get("field_guide", {}).get("alts", []))
    placeholder = f'alt="{PLACEHOLDER_ALT}"'
    if html_text.count(placeholder) != len(alts):
        log.warning(
            "Example '%s' shows %d figure(s) but %d alternative text(s) were found",
            page.file.src_uri, html_text.count(placeholder), len(alts),
        )
    for alt in alts:
        html_text = html_text.replace(placeholder, f'alt="{html.escape(alt, quote=True)}"', 1)

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
            _state["links"].append((page.file.src_uri, target, anchor))
        url = get_relative_url(target.url, page.url) + (f"#{anchor}" if anchor else "")
        return match.group(1) + html.escape(url, quote=True) + match.group(3)

    html_text = HREF.sub(rewrite, html_text)
    html_text = _externalise(html_text, page)
    source_name = posixpath.basename(page.file.src_uri)
    stem = source_name.removesuffix(".py")
    bundle = get_relative_url(f"{EXAMPLES_DIR}/{stem}.zip", page.url)
    source = get_relative_url(f"{EXAMPLES_DIR}/{source_name}", page.url)
    note = (
        f'<p class="fg-download">Executed when this site was built. '
        f'<a href="{bundle}" download>Download it to run ({stem}.zip)</a>: the example and the '
        f'project files it imports; unpack it and run <code>python {source_name}</code> inside. '
        f'Or <a href="{source}" download>the example alone ({source_name})</a>, which needs a '
        f"copy of the repository around it.</p>"
    )
    return note + html_text


def _externalise(html_text: str, page) -> str:
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
    _state.setdefault("css", {})[uri] = css
    html_text = STYLE_BLOCK.sub("", html_text)
    href = get_relative_url(uri, page.url)
    return f'<link rel="stylesheet" href="{href}">' + html_text


def on_env(env, config, files: Files):
    _wait_for_examples()  # a build whose navigation shows no example still waits (and fails) here
    for src, target, anchor in _state.get("links", []):
        page = getattr(target, "page", None)
        content = getattr(page, "content", "") or ""
        if f'id="{anchor}"' not in content:
            log.warning(
                "Example '%s' links to '%s#%s', but that page has no anchor '#%s'.",
                src, target.src_uri, anchor, anchor,
            )
    return env


def on_post_page(output: str, page, config) -> str:
    if _is_example(page):
        for classes in re.findall(r'class="([^"]*)"', output):
            _state.setdefault("classes", set()).update(classes.split())
    return output


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
    for selector, body in _css_blocks(re.sub(r"/\*.*?\*/", "", text, flags=re.S)):
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


def on_post_build(config) -> None:
    used = _state.get("classes", set())
    for uri, css in _state.get("css", {}).items():
        target = pathlib.Path(config.site_dir) / uri
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(prune_css(css, used), encoding="utf-8")
    site = pathlib.Path(config.site_dir) / EXAMPLES_DIR
    site.mkdir(parents=True, exist_ok=True)
    root = pathlib.Path(config.config_file_path).resolve().parent
    for src_uri, source in _state.get("sources", {}).items():
        (site / posixpath.basename(src_uri)).write_bytes(pathlib.Path(source).read_bytes())
        write_bundle(pathlib.Path(source), root, site / (pathlib.Path(src_uri).stem + ".zip"))
