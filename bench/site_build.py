"""Time the site build: one cold build, then a rebuild under `mkdocs serve`.

    python bench/site_build.py

1. Cold: `mkdocs build --strict` into a fresh folder with an empty example
   cache, so every example executes (the worst case: a fresh clone or CI).
2. Warm serve: start `mkdocs serve`, wait for its first build, append a line
   to one Markdown page and time until the server reports the rebuilt site
   ("Reloading browsers"); then restore the page.

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


def serve_rebuild(tmp: pathlib.Path) -> tuple[float, float]:
    env = {**os.environ, "FIELD_GUIDE_EXAMPLE_CACHE": str(tmp / "cache"), "NO_MKDOCS_2_WARNING": "1"}
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mkdocs", "serve", "-f", str(ROOT / "mkdocs.yml"), "-a", f"127.0.0.1:{port}"],
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

    original = PAGE.read_text(encoding="utf-8")
    try:
        start = time.perf_counter()
        wait_for(r"Serving on", 600)
        first = time.perf_counter() - start
        time.sleep(2)  # let the watcher settle
        edited = time.perf_counter()
        PAGE.write_text(original + "\n<!-- benchmark edit -->\n", encoding="utf-8")
        done = wait_for(r"Reloading browsers", 300)
        return first, done - edited
    finally:
        PAGE.write_text(original, encoding="utf-8")
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as name:
        tmp = pathlib.Path(name)
        cold = cold_build(tmp)
        print(f"cold build (every example executed): {cold:.1f} s   target < 90 s")
        first, rebuild = serve_rebuild(tmp)
        print(f"mkdocs serve, first build (examples cached): {first:.1f} s")
        print(f"mkdocs serve, rebuild after one Markdown edit: {rebuild:.1f} s")


if __name__ == "__main__":
    main()
