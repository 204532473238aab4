"""Running the examples: one Jupyter kernel per worker, a pool of workers.

* Examples run two at a time (the build machine has two cores). Each worker
  keeps one kernel, started in the repository root with ``snippets``
  importable (no page shows a ``sys.path`` line; the build works from any
  working directory), and runs its examples one after another after a reset
  cell that the page never shows: importing torch once per worker instead of
  once per example saves about two seconds of CPU per example.
* A failing cell fails the build with the cell's traceback, and every figure
  must carry alternative text (a ``# alt: ...`` comment in its cell).
* The executed notebooks are cached, keyed on the example, every local module
  it imports (transitively, ``field_guide_hooks.closure``), the plotting
  helper, the Python and torch versions and the device.
* The console stays short: one progress line that updates in place on a
  terminal (one line per example elsewhere, so CI logs stay readable).
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import pathlib
import re
import shutil
import sys
import tempfile
import threading
import time

from mkdocs.exceptions import PluginError

from field_guide_hooks import closure
from field_guide_hooks.examples.state import EXAMPLES_DIR, HOOK_VERSION, LOGGER

log = logging.getLogger(LOGGER)


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


ALT_COMMENT = re.compile(r"^\s*#\s*alt:\s*(.+?)\s*$", re.MULTILINE)


def cache_key(example: pathlib.Path, roots: list[pathlib.Path], environment: str) -> str:
    """Hash of the example, its local imports and the environment that runs it."""
    return closure.cache_key(example, roots, f"hook={HOOK_VERSION}\n{environment}\n")


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
# holds torch there, and unloading torch crashes the kernel). Last, the garbage
# is collected and what survives is frozen (field_guide_hooks/heap.py): the
# example's own collections, and the next reset's, then skip torch and the rest.
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
import gc as _gc
_gc.collect(); _gc.freeze()
del _s, _m, _p, _t, _n, _w, _tb, _th, _fail_on_own_warning, _gc
"""


ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class ExampleError(Exception):
    """An example's cell raised: ``summary`` is one line, ``detail`` the tail of
    the traceback, both free of terminal colour codes."""

    def __init__(self, summary: str, detail: str = ""):
        super().__init__(summary)
        self.summary, self.detail = summary, detail

    @classmethod
    def from_notebook(cls, nb, exc: Exception) -> ExampleError:
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


# How far below the build process the kernels run. The build process draws the
# figures and renders every page, one after another: the longest chain of the
# build. The examples fill the cores it leaves.
KERNEL_NICE = 10


def lower_priority(pid: int) -> None:
    """Run process ``pid`` (a kernel that has just started) at ``KERNEL_NICE``.

    jupyter_client starts each kernel in a session of its own, and Linux's
    autogroup scheduler shares the CPU between sessions before processes: on
    two cores, three kernels took three quarters of the machine and left the
    build process half a core, so a cold build drew its figures in 63 s
    instead of 29 s. The session's own nice value (``/proc/PID/autogroup``)
    lowers the kernel's share; the process's nice value does the same where
    there is no autogroup. The kernel's threads and the processes it starts
    inherit it. Where neither exists (Windows), nothing changes.
    """
    try:
        os.setpriority(os.PRIO_PROCESS, pid, KERNEL_NICE)
    except (AttributeError, OSError):
        pass
    try:
        pathlib.Path(f"/proc/{pid}/autogroup").write_text(f"{KERNEL_NICE}\n")
    except OSError:
        pass


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
        lower_priority(self.km.provisioner.process.pid)

    def _execute(self, nb) -> None:
        """Run ``nb`` in this kernel after the hidden reset cell (left in place)."""
        import nbformat
        from nbclient import NotebookClient

        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        own = tuple(str(self.root / sub) + os.sep for sub in OWN_MODULE_DIRS)
        nb.cells.insert(0, nbformat.v4.new_code_cell(RESET_CELL.format(own=own, threads=self.threads)))
        client = NotebookClient(nb, km=self.km, timeout=600, kernel_name="python3", allow_errors=False)
        try:
            client.execute()
        except Exception as exc:  # noqa: BLE001 - re-raised as one readable error
            raise ExampleError.from_notebook(nb, exc) from None
        finally:
            if client.kc is not None:
                client.kc.stop_channels()

    def warm(self) -> None:
        """Import what every example imports (torch, matplotlib's inline
        backend), so that the next example starts at once."""
        import nbformat

        self._execute(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
            # broadcast_shapes imports torch's symbolic shapes (sympy) on its first call.
            "import matplotlib.pyplot as _p, torch as _t\n_p.figure(); _p.close('all')\n"
            "_t.broadcast_shapes((1,), (1,))")]))

    def alive(self) -> bool:
        return self.km.is_alive()

    def run(self, example: pathlib.Path, target: pathlib.Path) -> float:
        import jupytext
        import nbformat

        start = time.perf_counter()
        nb = jupytext.read(example)
        self._execute(nb)
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


class KernelPool:
    """Kernels kept between the builds of one ``mkdocs serve``: an edit that
    reruns an example finds a kernel that has already imported torch and
    matplotlib (about two seconds of CPU each), instead of starting one. Each
    example still begins with the reset cell, which drops the project's own
    modules, so an edited snippet is imported afresh. After each build the
    pool is topped up in the background to the number of workers a build
    uses. A plain ``mkdocs build`` keeps nothing: its kernels close with it."""

    def __init__(self):
        self.keep = False
        self.idle: list[Kernel] = []
        self.lock = threading.Lock()

    def take(self, root: pathlib.Path, threads: int) -> Kernel:
        with self.lock:
            while self.idle:
                kernel = self.idle.pop()
                if kernel.root == root and kernel.alive():
                    kernel.threads = threads  # the reset cell sets torch's threads from it
                    return kernel
                kernel.close()
        return Kernel(root, threads)

    def give_back(self, kernel: Kernel) -> None:
        if self.keep and kernel.alive():
            with self.lock:
                self.idle.append(kernel)
                return
        kernel.close()

    def top_up(self, root: pathlib.Path, count: int) -> threading.Thread | None:
        """Start and warm kernels in the background until ``count`` wait idle."""
        if not self.keep:
            return None

        def fill():
            while True:
                with self.lock:
                    if not self.keep or len(self.idle) >= count:
                        return
                try:
                    kernel = Kernel(root, 1)
                    kernel.warm()
                except Exception as exc:  # noqa: BLE001 - a spare kernel is an optimisation only
                    log.debug("examples: no spare kernel: %s", exc)
                    return
                self.give_back(kernel)

        thread = threading.Thread(target=fill, name="field-guide-spare-kernels", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        with self.lock:
            self.keep = False
            idle, self.idle = self.idle, []
        for kernel in idle:
            kernel.close()


POOL = KernelPool()


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


def _known_durations(cache_dir: pathlib.Path) -> dict[str, float]:
    try:
        return json.loads((cache_dir / DURATIONS).read_text())
    except (OSError, ValueError):
        return {}


def _longest_first(todo, known: dict[str, float]):

    fallback = {name: 1000.0 - i for i, name in enumerate(LONG_FIRST)}
    return sorted(todo, key=lambda job: -known.get(job[0].name, fallback.get(job[0].name, 0.0)))


def expected_order(names: list[str], workers: int, known: dict[str, float]) -> list[str]:
    """The order in which ``names``, handed out in this order to ``workers``
    kernels, are expected to finish, from their last measured durations (one
    second where none is known). The example pages are rendered in this order,
    so the build renders each page soon after its example ends."""
    free = [0.0] * max(1, workers)
    finish = {}
    for name in names:
        start = min(free)
        slot = free.index(start)
        free[slot] = finish[name] = start + known.get(name, 1.0)
    return sorted(names, key=lambda name: finish[name])


def _record_durations(cache_dir: pathlib.Path, measured: dict[str, float]) -> None:

    path = cache_dir / DURATIONS
    known = _known_durations(cache_dir)
    known.update({name: round(seconds, 2) for name, seconds in measured.items()})
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(known, indent=0, sort_keys=True))
    tmp.replace(path)


def max_workers() -> int:
    """How many examples run at once: a kernel waits on its messages part of
    the time, so one kernel more than there are cores keeps the cores busy;
    ``FIELD_GUIDE_EXAMPLE_WORKERS`` overrides."""
    wanted = os.environ.get("FIELD_GUIDE_EXAMPLE_WORKERS", "").strip()
    return max(1, int(wanted) if wanted.isdigit() else (os.cpu_count() or 1) + 1)


def start_examples(config):
    """Start executing every stale example in background threads.

    Returns ``(results, finish)``: example name -> the executed notebook it
    will be, and a function that waits for the runs, raises if one failed and
    prunes the cache. The build draws its figures while the examples run.
    ``finish.ready(name)`` waits for one example only, ``finish.order`` lists
    the examples in the order they are expected to end (the cached ones first)
    and ``finish.failed()`` says whether one has failed already.
    """
    root = pathlib.Path(config.config_file_path).resolve().parent
    examples_dir = pathlib.Path(config.docs_dir) / EXAMPLES_DIR
    cache_dir = closure.cache_root(root)
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
    most = max_workers()
    workers = max(1, min(most, len(todo)))
    log.info(
        "examples: %d of %d to execute (%d cached), %d at a time",
        len(todo), len(examples), len(examples) - len(todo), workers,
    )
    failures: list[str] = []
    progress = Progress(len(todo))
    done = 0
    lock = threading.Lock()
    started = time.perf_counter()
    known = _known_durations(cache_dir)
    pending = _longest_first(todo, known)
    measured: dict[str, float] = {}
    ended = {example.name: threading.Event() for example, _ in todo}  # set when the run ends, failed or not

    def report(example, seconds=None, error=None):
        try:
            _report(example, seconds, error)
        finally:  # after the failure is on record: a page that waited on it sees it
            ended[example.name].set()

    def _report(example, seconds, error):
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
                    kernel = POOL.take(root, threads)
                try:
                    report(example, kernel.run(example, target))
                except Exception as exc:  # noqa: BLE001 - reported below, fails the build
                    report(example, error=exc)
                    kernel.close()  # a failed example leaves no state behind
                    kernel = None
        finally:
            if kernel is not None:
                POOL.give_back(kernel)

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
        POOL.top_up(root, most)  # under `mkdocs serve`, for the next edit
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

    def ready(name: str) -> None:
        if name in ended:
            ended[name].wait()

    finish.failed = lambda: bool(failures)  # an example has failed already: the build can stop
    finish.ready = ready
    finish.order = [e.name for e in examples if e.name not in ended] + expected_order(
        [example.name for example, _ in pending], workers, known)
    return results, finish


