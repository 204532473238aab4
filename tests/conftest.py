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


# ----------------------------------------------------------------------------
# Devices: every unit test runs once per device torch sees here (CPU always;
# CUDA and MPS when present). Inside a test, torch's default device is that
# device, so tensors and modules the test builds without `device=` land there;
# a test that needs the name asks for the `device` fixture.
# ----------------------------------------------------------------------------
import torch  # noqa: E402

# Triton's interpreter runs Triton kernels on CPU tensors (tests/test_flash_triton.py),
# but only if TRITON_INTERPRET is set before triton is first imported: its standard
# library (tl.max, tl.sum, ...) is decorated then. Where a CUDA device is present the
# compiled kernels are tested instead, and the variable stays unset.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

DEVICES_ENV = "FIELD_GUIDE_TEST_DEVICES"
# Modules that test the site, the files or the machine rather than tensor code:
# they run once, on the CPU.
HOST_ONLY = {
    "test_site", "test_browser", "test_setup", "test_snippets_standalone",
    "test_references", "test_timeline", "test_device", "test_figures",
    "test_context_parallel",  # gloo processes on the CPU
    "test_explorer",  # the build's model is trained on the CPU
    "test_downloads",  # unpacked examples run in child processes
}


def present_devices() -> list[str]:
    """``cpu``, then ``cuda`` and ``mps`` when torch can use them; the
    ``FIELD_GUIDE_TEST_DEVICES`` variable (comma-separated) narrows the list."""
    found = ["cpu"]
    if torch.cuda.is_available():
        found.append("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    wanted = [w.strip() for w in os.environ.get(DEVICES_ENV, "").split(",") if w.strip()]
    unknown = [w for w in wanted if w not in ("cpu", "cuda", "mps")]
    if unknown:
        raise pytest.UsageError(f"{DEVICES_ENV} names unknown devices {unknown}; use cpu, cuda, mps")
    return [d for d in found if d in wanted] if wanted else found


DEVICES = present_devices()


def pytest_report_header(config):
    return f"devices under test: {', '.join(DEVICES)} (torch {torch.__version__})"


def pytest_generate_tests(metafunc):
    if "device" in metafunc.fixturenames:
        module = metafunc.module.__name__.rsplit(".", 1)[-1]
        devices = ["cpu"] if module in HOST_ONLY else DEVICES
        metafunc.parametrize("device", devices, scope="function")


@pytest.fixture(autouse=True)
def _tensors_on_device(device):
    """Make ``device`` torch's default for the test. The CPU is torch's own
    default, so nothing is switched there (switching costs every op a Python
    call)."""
    if device == "cpu":
        yield
        return
    torch.set_default_device(device)
    try:
        yield
    finally:
        torch.set_default_device("cpu")


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for every browser test of the session: Playwright's
    sync API runs one instance per thread, so the test files share it."""
    import browser_support as bs

    executable = bs.chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        bs.missing(bs.PLAYWRIGHT_MISSING)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, headless=True, args=bs.CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()
