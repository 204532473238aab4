"""Shared fixtures: one strict, cold build of the whole site per test session."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import subprocess
import sys
import threading
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


def shared_dir(tmp_path_factory) -> pathlib.Path:
    """A folder every xdist worker of this run sees (the run's own temporary
    root), or this process's temporary root when the tests run in one process."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def build_once(tmp_path_factory, name: str, *, extra_env=None, cache: pathlib.Path | None = None) -> BuiltSite:
    """Build the site once per test run, however many xdist workers ask: the
    first takes a file lock and builds, the others wait on the lock and read
    what it recorded."""
    from filelock import FileLock

    base = shared_dir(tmp_path_factory) / name
    record = base / "build.json"
    with FileLock(str(base) + ".lock"):
        if record.is_file():
            data = json.loads(record.read_text(encoding="utf-8"))
            return BuiltSite(pathlib.Path(data["path"]), data["log"], data["seconds"], data["returncode"],
                             pathlib.Path(data["cache"]))
        base.mkdir(parents=True, exist_ok=True)
        site = build_site(base / "site", cache or base / "example-cache", cwd=base, extra_env=extra_env)
        record.write_text(json.dumps({**dataclasses.asdict(site), "path": str(site.path), "cache": str(site.cache)}),
                          encoding="utf-8")
        print(f"\n{name}: {site.seconds:.1f} s")
        return site


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> BuiltSite:
    """The site built cold (empty example cache, so every example executes),
    from a working directory other than the repository root; one build per
    run, shared by every worker."""
    site = build_once(tmp_path_factory, "build")
    if site.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed:\n{site.log[-6000:]}")
    return site


# The tests that read the built site fall into three groups; xdist hands each
# group to one worker, longest first, so two workers share them (both wait for
# the one build, conftest's build_once) and the unit tests fill in around them.
# Within a group, session fixtures (one Chromium, one visit of every page,
# ``page_reports``, read by test_browser.py and test_browser_layout.py) are
# made once.
SITE_GROUPS = {
    "test_browser.py": "site-pages",
    "test_browser_layout.py": "site-pages",  # reads page_reports too
    "test_explorer.py": "site-widgets",
    "test_calculator_browser.py": "site-widgets",
    "test_which_kernel_browser.py": "site-widgets",
    "test_browser_deadlines.py": "site-widgets",  # one more use of that worker's Chromium
}
# Tests of test_browser.py that do not read page_reports and cost a build of
# their own: with the other builds (ProperDocs, the failing example), off the
# worker that visits every page, the longest chain of the run.
SITE_TEST_GROUPS = {
    "test_offline_build_reads_from_the_file_system": "site-build",
    "test_offline_explorer_and_playground_from_the_file_system": "site-build",
}
# Unit-test files whose module-scoped fixture costs seconds (subprocesses, gloo
# worlds, a trained model): each runs on one worker, so the fixture is made
# once, not once per worker that happens to draw one of its tests.
MODULE_GROUPS = {
    "test_usage_blocks.py", "test_context_parallel.py", "test_take_the_code.py",
    "test_downloads.py", "test_explorer.py", "test_history_training.py",
}


@pytest.fixture(scope="session")
def site_dir(request) -> pathlib.Path:
    """The built site the browser tests read: ``FIELD_GUIDE_BUILT_SITE`` when it
    is set (an existing build), else this run's cold build."""
    override = os.environ.get("FIELD_GUIDE_BUILT_SITE")
    if override:
        return pathlib.Path(override)
    return request.getfixturevalue("built_site").path


@pytest.fixture(scope="session")
def base_url(site_dir) -> str:
    """``site_dir`` served over HTTP on this machine, for the session."""
    import browser_support as bs

    with bs.serve(site_dir) as url:
        yield url


@pytest.fixture(scope="session")
def pages(site_dir) -> list[str]:
    """URL paths of every built page."""
    import browser_support as bs

    found = bs.built_pages(site_dir)
    assert found, f"no pages under {site_dir}"
    return found


@pytest.fixture(scope="session")
def page_reports(browser, base_url, pages):
    """One visit of every page, for every per-page check of test_browser.py and
    the layout checks of test_browser_layout.py (both in group site-pages)."""
    import test_browser

    return test_browser.visit_every_page(browser, base_url, pages)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """Each test that reads the built site joins its own group (SITE_TEST_GROUPS)
    or its file's (SITE_GROUPS, "site-build" for the rest); the unit tests
    share out one by one, except the files of MODULE_GROUPS, each kept whole
    on one worker."""
    for item in items:
        if item.get_closest_marker("site") or item.get_closest_marker("browser"):
            group = SITE_TEST_GROUPS.get(getattr(item, "originalname", item.name),
                                         SITE_GROUPS.get(item.path.name, "site-build"))
            item.add_marker(pytest.mark.xdist_group(group))
        elif item.path.name in MODULE_GROUPS:
            item.add_marker(pytest.mark.xdist_group(f"module-{item.path.stem}"))


def pytest_xdist_node_collection_finished(node, ids):
    """Under ``--dist loadgroup`` an xdist worker suffixes each grouped test's id
    with ``@group``, and the scheduler sends a group to one worker by that
    suffix. If a pytest or xdist release stops doing that, every group is
    scattered and its session fixtures (the visit of every page, Chromium) are
    made again on every worker: stop the run with a reason instead."""
    if node.config.getvalue("dist") != "loadgroup":
        return
    # Files whose every test is marked site or browser (module-level pytestmark).
    whole = {"test_browser.py", "test_site.py", "test_properdocs.py", "test_calculator_browser.py",
             "test_which_kernel_browser.py"}
    grouped = [i for i in ids if pathlib.PurePosixPath(i.split("::")[0]).name in whole]
    if grouped and not any("@" in i for i in grouped):
        raise RuntimeError(
            f"pytest {pytest.__version__} with this pytest-xdist does not group tests under --dist loadgroup "
            f"({grouped[0]} has no @group suffix): pin the versions in requirements.txt")


# A test still running long after any test should have ended says so by name
# on the console (a worker's own stderr, which pytest does not capture), with
# what the browser visit was doing: faulthandler_timeout's stacks say where a
# thread waits, but not which test, and not inside Playwright's greenlet.
SLOW_TEST_S = 900
_running: dict[str, object] = {}
_console: list[int] = []  # a copy of stderr taken in pytest_configure, before capture resumes


def pytest_runtest_logstart(nodeid, location):
    _running.update(nodeid=nodeid, since=time.monotonic(), next_note=SLOW_TEST_S)


def pytest_runtest_logfinish(nodeid, location):
    _running.clear()


def _note_slow_tests() -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    while True:
        time.sleep(10)
        now = dict(_running)
        if not now or time.monotonic() - now["since"] < now["next_note"]:
            continue
        doing = getattr(sys.modules.get("browser_support"), "PROGRESS", {})
        note = (f"\n[{worker}] still running after {time.monotonic() - now['since']:.0f} s: {now['nodeid']}"
                + (f" ({', '.join(f'{k}: {v}' for k, v in doing.items())})" if doing else "") + "\n")
        os.write(_console[0], note.encode())
        if _running.get("nodeid") == now["nodeid"]:
            _running["next_note"] = now["next_note"] + SLOW_TEST_S


def pytest_sessionstart(session):
    # In an xdist worker or a run in one process; xdist's controller only relays.
    config = session.config
    if _console and (hasattr(config, "workerinput") or not config.pluginmanager.getplugin("dsession")):
        threading.Thread(target=_note_slow_tests, name="slow-test-note", daemon=True).start()


def pytest_configure(config):
    """Under xdist each worker gets an equal share of the cores for torch's own
    threads, so two workers on two cores do not each start two threads. Also
    keeps a copy of stderr for the slow-test note: capture is suspended while
    plugins configure."""
    _console[:] = [os.dup(2)]
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if workers > 1:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


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

# Hypothesis: no per-example deadline (a busy machine or a second xdist worker
# slows an example without making it wrong); each worker draws its own examples.
try:
    from hypothesis import settings as _hypothesis_settings
except ImportError:  # the tests that need it say so themselves
    pass
else:
    _hypothesis_settings.register_profile("field-guide", deadline=None, print_blob=True)
    _hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "field-guide"))

DEVICES_ENV = "FIELD_GUIDE_TEST_DEVICES"
# Modules that test the site, the files or the machine rather than tensor code:
# they run once, on the CPU.
HOST_ONLY = {
    "test_site", "test_browser", "test_setup", "test_snippets_standalone",
    "test_references", "test_timeline", "test_device", "test_figures",
    "test_context_parallel",  # gloo processes on the CPU
    "test_explorer",  # the build's model is trained on the CPU
    "test_downloads",  # unpacked examples run in child processes
    "test_browser_layout", "test_calculator_browser", "test_which_kernel_browser",  # the browser's own JS
    "test_browser_deadlines",  # Playwright's deadlines
    "test_build_warnings",  # the figure scripts run on the CPU, as the build runs them
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


def on_this_device(pattern, device: torch.device):
    """An expected error message written for the CPU, read for ``device``: the
    snippets name the device their tensors are on ("on cpu", "device(type='cpu')"),
    which on a GPU is "on cuda:0"."""
    if not isinstance(pattern, str) or device.type == "cpu":
        return pattern
    return (pattern.replace("on cpu", f"on {device}")
            .replace(r"device\(type='cpu'\)", re.escape(repr(device))))


@pytest.fixture(autouse=True)
def _tensors_on_device(device):
    """Make ``device`` torch's default for the test. The CPU is torch's own
    default, so nothing is switched there (switching costs every op a Python
    call). Elsewhere ``pytest.raises(..., match=...)`` reads a message written
    for the CPU as naming this device (``on_this_device``)."""
    if device == "cpu":
        yield
        return
    torch.set_default_device(device)
    here = torch.empty(0).device  # with its index: cuda:0
    raises = pytest.raises

    def raises_here(*args, match=None, **kwargs):
        return raises(*args, match=on_this_device(match, here), **kwargs)

    pytest.raises = raises_here
    # cuDNN runs float32 convolutions and RNNs in TF32 (10 mantissa bits) by
    # default; the tests hold float32 results to float32's tolerances
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = tf32
        pytest.raises = raises
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
        launched = playwright.chromium.launch(executable_path=executable, headless=True, args=bs.chromium_args(executable))
        try:
            yield launched
        finally:
            launched.close()
