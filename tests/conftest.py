"""Shared fixtures: one strict, cold build of the whole site per test session."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@dataclasses.dataclass
class BuiltSite:
    path: pathlib.Path
    log: str
    seconds: float
    returncode: int
    cache: pathlib.Path


def build_site(target: pathlib.Path, cache: pathlib.Path, *, cwd: pathlib.Path = ROOT, extra_env=None) -> BuiltSite:
    """Run the project's one build command, ``mkdocs build --strict``."""
    env = {**os.environ, "FIELD_GUIDE_EXAMPLE_CACHE": str(cache), "NO_MKDOCS_2_WARNING": "1", **(extra_env or {})}
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(target)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=900,
    )
    return BuiltSite(target, result.stdout + result.stderr, time.perf_counter() - start, result.returncode, cache)


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> BuiltSite:
    """The site built cold (empty example cache, so every example executes),
    from a working directory other than the repository root."""
    base = tmp_path_factory.mktemp("build")
    site = build_site(base / "site", base / "example-cache", cwd=base)
    print(f"\nsite build: {site.seconds:.1f} s")
    if site.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed:\n{site.log[-6000:]}")
    return site
