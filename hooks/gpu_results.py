"""MkDocs hook: the performance page shows the newest committed GPU measurement.

``docs/efficiency/performance.md`` holds the marker ``<!-- gpu-results -->``;
it is replaced by the tables of the newest ``bench/results/gpu-*.json`` (written
by ``bench/gpu.py`` on a CUDA machine, with its provenance), or by a plain
sentence saying that no GPU measurement has been recorded yet. The site builds
on a CPU: it renders what was measured, it never measures.
"""

from __future__ import annotations

import pathlib
import sys

MARKER = "<!-- gpu-results -->"


def on_page_markdown(markdown, page, config, files):
    if MARKER not in markdown:
        return markdown
    root = pathlib.Path(config.config_file_path).resolve().parent
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from bench.gpu import render_latest

    return markdown.replace(MARKER, render_latest(root / "bench" / "results"))
