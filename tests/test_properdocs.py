"""The same configuration builds under ProperDocs, the maintained fork of
MkDocs 1.x, strictly, with every page and example (the examples come from the
session build's cache: they run in the site's own hook, whichever builder
calls it). In CI a missing ProperDocs fails the test; locally it skips."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time

import pytest

import browser_support as bs
from conftest import ROOT

pytestmark = pytest.mark.site


def test_properdocs_builds_the_site_strictly(built_site, tmp_path):
    if importlib.util.find_spec("properdocs") is None:
        bs.missing("ProperDocs is not installed: pip install -r requirements.txt")
    target = tmp_path / "site"
    env = {**os.environ, "FIELD_GUIDE_EXAMPLE_CACHE": str(built_site.cache), "NO_MKDOCS_2_WARNING": "1",
           "DISABLE_MKDOCS_2_WARNING": "true"}
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "properdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(target)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
    )
    log = result.stdout + result.stderr
    print(f"\nProperDocs build: {time.perf_counter() - start:.1f} s")
    assert result.returncode == 0, log[-6000:]
    assert "WARNING" not in log, log[-6000:]
    built = {p.relative_to(target) for p in target.rglob("*.html")}
    reference = {p.relative_to(built_site.path) for p in built_site.path.rglob("*.html")}
    assert built == reference, f"pages only in one build: {sorted(built ^ reference)[:10]}"
    page = (target / "examples" / "scaled_dot_product" / "index.html").read_text(encoding="utf-8")
    assert "jp-OutputArea-output" in page, "the executed example has no output under ProperDocs"
