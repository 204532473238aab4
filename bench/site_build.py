"""Time the site build and the test suite against their targets.

    python bench/site_build.py           # cold build, rebuilds under `mkdocs serve`
    python bench/site_build.py --suite   # ... and the unit tests, then the whole suite

Targets on a quiet two-core machine: cold build <= 60 s, one-edit rebuild under
`mkdocs serve` <= 5 s, unit tests (`-m "not site and not browser"`) <= 150 s,
`python -m pytest` <= 6 min. The load average is printed next to the figures:
on a busy machine they are upper bounds.

1. Cold: `mkdocs build --strict` into a fresh folder with an empty example
   cache, so every example executes (the worst case: a fresh clone or CI).
2. Warm serve: start `mkdocs serve`, wait for its first build, append a line
   to one Markdown page and time until the server reports the rebuilt site
   ("Reloading browsers"); then the same for a comment put inside a section
   of one snippet (the examples that import it run again); then restore both.
   Each edit is then looked for in the page the server serves, so a rebuild
   that left the page stale fails the run.
3. The same under `mkdocs serve --dirty`, which rebuilds only the pages an
   edit changes (hooks/dirty_serve.py adds the pages that include an edited
   snippet, and the API reference of its area).

Both figures come from the same run on the same machine; the script prints the
machine's core count so they are read against it.
"""

from __future__ import annotations

import os
import pathlib
import queue
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "notation.md"
SNIPPET = ROOT / "snippets" / "foundations" / "scaled_dot_product.py"
SECTION = "causal_mask"  # a section of SNIPPET that SNIPPET_PAGE shows
SNIPPET_PAGE = "foundations/scaled-dot-product/"
TARGETS = {"cold": 60.0, "rebuild": 5.0, "unit": 150.0, "suite": 360.0}


def cold_build(tmp: pathlib.Path) -> float:
    env = {**os.environ, "FIELD_GUIDE_EXAMPLE_CACHE": str(tmp / "cache"), "NO_MKDOCS_2_WARNING": "1"}
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp / "site")],
        cwd=tmp, env={**env, "PYTHONDONTWRITEBYTECODE": "1"}, capture_output=True, text=True,
    )
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"cold build failed:\n{result.stderr[-3000:]}")
    executed = re.search(r"examples: executed (\d+) in ([\d.]+) s", result.stderr)
    if executed:
        print(f"  examples executed: {executed.group(1)} in {executed.group(2)} s")
    return seconds


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _served(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode("utf-8")


def serve_rebuild(tmp: pathlib.Path, dirty: bool = False) -> tuple[float, dict[str, float]]:
    env = {**os.environ, "FIELD_GUIDE_EXAMPLE_CACHE": str(tmp / "cache"), "NO_MKDOCS_2_WARNING": "1"}
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mkdocs", "serve", "-f", str(ROOT / "mkdocs.yml"), "-a", f"127.0.0.1:{port}",
         *(["--dirty"] if dirty else [])],
        cwd=tmp, env=env, stderr=subprocess.STDOUT, stdout=subprocess.PIPE, text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()

    def wait_for(pattern: str, timeout: float) -> float:
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                continue
            if re.search(pattern, line):
                return time.perf_counter()
        raise TimeoutError(pattern)

    originals = {path: path.read_text(encoding="utf-8") for path in (PAGE, SNIPPET)}
    start_marker = f"# --8<-- [start:{SECTION}]\n"
    assert start_marker in originals[SNIPPET], f"{SNIPPET} has no section {SECTION}"
    edits = {  # what to write, the page that must show it, the words to find there
        "Markdown page": (PAGE, originals[PAGE] + "\n<!-- benchmark edit 1 -->\n", "notation/",
                          "benchmark edit 1"),
        "snippet": (SNIPPET, originals[SNIPPET].replace(start_marker, start_marker + "# benchmark edit 2\n"),
                    SNIPPET_PAGE, "benchmark edit 2"),
    }
    rebuilds: dict[str, float] = {}
    try:
        start = time.perf_counter()
        wait_for(r"Serving on", 600)
        first = time.perf_counter() - start
        for name, (path, text, page, words) in edits.items():
            time.sleep(2)  # let the watcher settle
            edited = time.perf_counter()
            path.write_text(text, encoding="utf-8")
            rebuilds[name] = wait_for(r"Reloading browsers", 300) - edited
            if words not in _served(f"http://127.0.0.1:{port}/{page}"):
                raise RuntimeError(f"after the {name} edit, /{page} does not show it: the rebuild left it stale")
        return first, rebuilds
    finally:
        for path, text in originals.items():
            path.write_text(text, encoding="utf-8")
        proc.terminate()
        proc.wait(timeout=30)


def pytest_seconds(*args: str) -> float:
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=ROOT)
    if result.returncode != 0:
        print(f"  (pytest {' '.join(args)} exited {result.returncode})")
    return time.perf_counter() - start


def verdict(name: str, seconds: float) -> str:
    target = TARGETS[name]
    return f"{seconds:6.1f} s   target <= {target:.0f} s   {'met' if seconds <= target else 'NOT met'}"


def main() -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, load average {load:.1f}")
    with tempfile.TemporaryDirectory() as name:
        tmp = pathlib.Path(name)
        cold = cold_build(tmp)
        print(f"cold build (every example executed):    {verdict('cold', cold)}")
        first, rebuilds = serve_rebuild(tmp)
        print(f"mkdocs serve, first build (cached):     {first:6.1f} s")
        for what, seconds in rebuilds.items():
            print(f"mkdocs serve, rebuild after one {what + ' edit:':16s}{verdict('rebuild', seconds)}")
        first, rebuilds = serve_rebuild(tmp, dirty=True)
        print(f"mkdocs serve --dirty, first build (cached): {first:6.1f} s")
        for what, seconds in rebuilds.items():
            print(f"mkdocs serve --dirty, rebuild after one {what + ' edit:':16s}{verdict('rebuild', seconds)}")
    if "--suite" in sys.argv[1:]:
        unit = pytest_seconds("-m", "not site and not browser")
        print(f"unit tests (-m 'not site and not browser'): {verdict('unit', unit)}")
        suite = pytest_seconds()
        print(f"python -m pytest (the whole suite):     {verdict('suite', suite)}")
    if hasattr(os, "getloadavg"):
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
