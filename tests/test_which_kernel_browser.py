"""The which-kernel form (docs/efficiency/which-kernel.md) against the Python.

docs/javascripts/which_kernel.js ports the decision of
snippets/efficiency/sdpa_probe.py to the reader's browser. These tests open the
built page in headless Chromium and, for a seeded sample of cases drawn from
every value each control offers (selects and checkboxes read from the page,
numbers from lists that straddle every threshold of the rules), set the
controls and read the form's answer: the backend, the order tried and every
backend's refusals (sentence and source) must equal ``choose_backend``'s, the
``nn.MultiheadAttention`` route must equal ``mha_route``'s, and a malformed
case must give ``_check_case``'s message. One case goes through the visible
controls with Playwright's clicks and typing, one page is read from
``file://``, and the form's script and style stay within a budget.
"""

from __future__ import annotations

import json
import pathlib
import random

import pytest

import browser_support as bs
from snippets.efficiency import sdpa_probe as P
from snippets.efficiency.sdpa_probe import choose_backend, mha_route

pytestmark = pytest.mark.browser

PAGE = "efficiency/which-kernel/"
READY = "() => document.querySelector('.fg-which-kernel[data-fg-ready]') !== null"
SAMPLE = 20_000
SCRIPT_BUDGET = 20_000  # bytes, uncompressed: the form's script and style
OWN = ("which_kernel.js", "which-kernel.css")

# Numbers the form takes as typed text; each list straddles the thresholds of
# the rules (N = 1, M = 1, N != M; d at 8 and 4 alignment, 128, 192, 224, 256;
# dropout at multiples of 1/16 and not).
NUMBERS = {
    "n": [1, 2, 127, 128, 1000], "m": [1, 2, 127, 128, 1000],
    "d": [4, 8, 12, 16, 64, 80, 100, 128, 136, 160, 192, 200, 224, 232, 256, 264, 320],
    "d_v": [4, 8, 12, 64, 128, 192, 256, 320],
    "h": [1, 2, 4, 6, 8, 12, 32], "h_kv": [1, 2, 3, 4, 8],
    "dropout": [0.0, 0.0625, 0.1, 0.25, 0.3, 0.5, 0.9375],
}
MALFORMED = {"n": [0, 2.5], "m": [0], "d": [0, 7.5], "d_v": [-4], "h": [0], "h_kv": [0],
             "dropout": [1.0, -0.25, 1.5]}


# ----------------------------------------------------------------------------
# The Python's answer for what the controls hold
# ----------------------------------------------------------------------------
def python_case(form: dict) -> dict:
    """The case ``choose_backend`` takes for the controls' values: the device
    select names "cpu" or a compute capability "major.minor"; cuDNN is "" (none)
    or the number ``torch.backends.cudnn.version()`` reports."""
    case = {k: v for k, v in form.items() if k != "machine"}
    gpu = form["machine"]
    case["device"] = "cpu" if gpu == "cpu" else "cuda"
    case["sm"] = None if gpu == "cpu" else tuple(int(x) for x in gpu.split("."))
    case["cuda"] = int(form["cuda"])
    case["cudnn"] = int(form["cudnn"]) if form["cudnn"] else None
    case["dropout"] = float(form["dropout"])
    return case


def where(source) -> str:
    """How the form names a rule's source: the function, or file:line."""
    file, place, _quote = source
    if isinstance(place, int):
        return f"{pathlib.PurePosixPath(file.split(' ')[0]).name}:{place}"
    return place


def python_answer(case: dict) -> tuple[dict, bool]:
    """The form's state as the Python gives it (the bool is kept for the
    callers: it was True when cuDNN "none" had to be asked as 0)."""
    try:
        chosen, route = choose_backend(case), mha_route(case)
        patched = False
    except ValueError as error:
        return {"error": str(error)}, False
    return {
        "backend": chosen["backend"],
        "order": list(chosen["order"]),
        "refused": {b: [[why, where(src)] for why, src in chosen["refused"][b]] for b in P.BACKENDS},
        "mha": {"route": route["route"], "backend": route["backend"], "why": route["why"],
                "at": where(route["source"])},
    }, patched


# ----------------------------------------------------------------------------
# The sample
# ----------------------------------------------------------------------------
def form_cases(controls: dict, count: int = SAMPLE, seed: int = 0) -> list[dict]:
    """``count`` settings of every control, seeded: selects and checkboxes take
    each value the page offers, numbers come from NUMBERS; half the cases have
    d_v = d (else flash refuses nearly all), H_kv is H or a divisor of it in
    most, and about 3 % hold one malformed number (H_kv != H without
    enable_gqa, or not dividing H, is malformed too: about a fifth in all)."""
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        form = {key: rng.choice(values) for key, values in controls.items()}
        form.update({key: rng.choice(values) for key, values in NUMBERS.items()})
        if rng.random() < 0.5:
            form["d_v"] = form["d"]
        pick = rng.random()
        if pick < 0.45:
            form["h_kv"] = form["h"]
        elif pick < 0.9:
            form["h_kv"] = rng.choice([k for k in range(1, form["h"] + 1) if form["h"] % k == 0])
        if rng.random() < 0.03:
            key = rng.choice(sorted(MALFORMED))
            form[key] = rng.choice(MALFORMED[key])
        cases.append(form)
    return cases


# ----------------------------------------------------------------------------
# The page
# ----------------------------------------------------------------------------
def _open(browser, address: str, **options):
    from test_browser import new_page

    context, page, guard = new_page(browser, **options)
    page.goto(address, wait_until="load")
    page.wait_for_function(READY)
    return context, page, guard


CONTROLS_JS = """() => {
  const out = {};
  for (const el of document.querySelectorAll('.fg-which-kernel [data-key]')) {
    if (el.tagName === 'SELECT') out[el.dataset.key] = [...el.options].map(o => o.value);
    else if (el.type === 'checkbox') out[el.dataset.key] = [false, true];
    else out[el.dataset.key] = 'number';
  }
  return out;
}"""

# Set every control of the form to one case, as a reader would leave them, and
# read the answer the form shows (its data-state) after the change event.
RUN_JS = """(cases) => {
  const root = document.querySelector('.fg-which-kernel');
  const controls = [...root.querySelectorAll('[data-key]')];
  return cases.map(c => {
    for (const el of controls) {
      const v = c[el.dataset.key];
      if (el.type === 'checkbox') el.checked = v; else el.value = String(v);
    }
    root.dispatchEvent(new Event('change'));
    return root.dataset.state;
  });
}"""


def test_form_equals_choose_backend_on_a_seeded_sample(browser, base_url):
    context, page, guard = _open(browser, base_url + PAGE)
    try:
        controls = bs.run_js(page, CONTROLS_JS)
        numbers = sorted(k for k, v in controls.items() if v == "number")
        assert numbers == sorted(NUMBERS), numbers
        choices = {k: v for k, v in controls.items() if v != "number"}
        expected_keys = (set(P.DEFAULTS) - {"device", "sm"}) | {"machine"}
        assert set(controls) == expected_keys, set(controls) ^ expected_keys
        # the selects offer the Python's whole vocabulary
        assert set(choices["torch"]) == set(P.VERSIONS)
        assert set(choices["dtype"]) == set(P.CHOICES["dtype"])
        assert set(choices["mask"]) == set(P.CHOICES["mask"])
        cases = form_cases(choices)
        states = []
        for start in range(0, len(cases), 2000):
            states += bs.run_js(page, RUN_JS, cases[start:start + 2000])
        wrong, patched, errors, picks, fired = [], 0, 0, set(), set()
        for form, state in zip(cases, states):
            want, was_patched = python_answer(python_case(form))
            got = json.loads(state)
            patched += was_patched
            if "error" in want:
                errors += 1
            else:
                picks.add(want["backend"])
                fired |= {(b, tuple(r)) for b, rs in want["refused"].items() for r in rs}
            if got != want:
                wrong.append((form, got, want))
        print(f"\nwhich-kernel form: {len(cases)} cases against choose_backend and mha_route "
              f"({errors} malformed, {patched} with cuDNN 'none' asked as 0): {len(wrong)} differ")
        assert not wrong, wrong[:2]
        # every value of every control occurs, every backend is chosen, every rule fires
        for key, values in choices.items():
            assert {f[key] for f in cases} == set(values), key
        assert picks == set(P.BACKENDS), picks
        rules = {(b, (r.why, where(r.source))) for table in (P.CPU_RULES, P.CUDA_RULES)
                 for b, rs in table.items() for r in rs}
        # the form offers no GPU older than sm50 (the efficient kernel's floor)
        rules.discard(("EFFICIENT_ATTENTION", ("GPU outside sm50 to sm121",
                                               "check_mem_efficient_hardware_support")))
        assert fired == rules, rules ^ fired
        assert errors > 100
        assert not guard.console, guard.console
    finally:
        context.close()


def test_one_case_through_the_visible_form(browser, base_url):
    """A float32 call with a boolean mask on an A100, set with clicks and typing:
    the page shows the efficient kernel, each refusal in the Python's words, and
    the route of nn.MultiheadAttention."""
    context, page, guard = _open(browser, base_url + PAGE)
    try:
        form = page.locator(".fg-which-kernel")
        form.locator("select[data-key=machine]").select_option("8.0")
        form.locator("select[data-key=dtype]").select_option("float32")
        form.locator("select[data-key=mask]").select_option("bool")
        form.locator("input[data-key=d]").fill("96")
        form.locator("input[data-key=d_v]").fill("96")
        form.locator("input[data-key=dropout]").fill("0.1")
        form.locator("input[data-key=need_weights]").uncheck()
        case = {**P.DEFAULTS, "torch": "2.13", "device": "cuda", "sm": (8, 0), "cuda": 13,
                "cudnn": 91900, "dtype": "float32", "mask": "bool", "d": 96, "d_v": 96,
                "dropout": 0.1, "need_weights": False}
        want, _ = python_answer(case)
        assert want["backend"] == "EFFICIENT_ATTENTION"
        assert json.loads(form.get_attribute("data-state")) == want
        shown = form.locator(".fg-which-kernel__out").inner_text()
        assert "EFFICIENT_ATTENTION runs" in shown, shown
        for backend, reasons in want["refused"].items():
            for why, _ in reasons:
                assert why in shown, (backend, why)
        assert form.locator("[data-verdict=refuses]").count() == 1  # flash, before it
        assert mha_route(case)["why"] in shown
        assert page.locator(".fg-which-kernel [aria-live]").count() == 1
        unlabelled = bs.run_js(page,
            "() => [...document.querySelectorAll('.fg-which-kernel select, .fg-which-kernel input')]"
            ".filter(c => !c.labels || c.labels.length === 0).map(c => c.outerHTML)")
        assert not unlabelled, unlabelled
        # the CUDA-only controls switch off on the CPU
        form.locator("select[data-key=machine]").select_option("cpu")
        assert form.locator("select[data-key=cudnn]").is_disabled()
        assert "MATH runs" in form.locator(".fg-which-kernel__out").inner_text()  # dropout
        assert not guard.console, guard.console
    finally:
        context.close()


def test_form_on_a_phone_in_the_dark_palette(browser, base_url):
    """The longest source name (flash's sm86 training rule) wraps inside a
    phone's width."""
    from test_browser import OVERFLOW_JS, PHONE

    context, page, guard = _open(browser, base_url + PAGE, scheme="dark", viewport=PHONE)
    try:
        form = page.locator(".fg-which-kernel")
        form.locator("select[data-key=machine]").select_option("8.6")
        form.locator("input[data-key=d]").fill("200")
        form.locator("input[data-key=d_v]").fill("200")
        form.locator("input[data-key=requires_grad]").check()
        assert "check_requires_grad_and_head_dim_gt192" in form.inner_text()
        phone = bs.run_js(page, OVERFLOW_JS)
        assert phone["scroll"] <= phone["client"] + 1, phone
        assert not guard.console, guard.console
    finally:
        context.close()


def test_form_after_instant_navigation(browser, base_url):
    """Material swaps the page in place; the script the hook put in the content
    runs again and starts the form."""
    from test_browser import new_page, open_page

    context, page, guard = new_page(browser)
    try:
        open_page(page, base_url + "efficiency/backends/")
        bs.run_js(page, "window.__sameDocument = true")
        page.locator('.md-sidebar--primary a[href$="which-kernel/"]').first.click()
        page.wait_for_url(base_url + PAGE)
        page.wait_for_function(READY)
        assert bs.run_js(page, "window.__sameDocument === true"), "instant navigation is off"
        page.locator(".fg-which-kernel select[data-key=machine]").select_option("8.0")
        assert json.loads(page.locator(".fg-which-kernel").get_attribute("data-state"))["backend"] \
            == "FLASH_ATTENTION"  # bfloat16 on an A100
        assert not guard.console, guard.console
    finally:
        context.close()


def test_form_works_from_the_file_system(browser, site_dir):
    """The built page read from file:// (scripts load, nothing is fetched)."""
    built = site_dir / PAGE / "index.html"
    if not built.is_file():  # an offline build: no directory URLs
        built = site_dir / (PAGE.rstrip("/") + ".html")
    from test_browser import new_page

    context, page, guard = new_page(browser, allow_file=True)
    try:
        page.goto(built.as_uri(), wait_until="load")
        page.wait_for_function(READY)
        form = page.locator(".fg-which-kernel")
        form.locator("select[data-key=machine]").select_option("cpu")
        form.locator("select[data-key=dtype]").select_option("float64")
        state = json.loads(form.get_attribute("data-state"))
        case = {"torch": "2.13", "device": "cpu", "dtype": "float64", "need_weights": True}
        assert state == python_answer({**P.DEFAULTS, **case, "sm": None, "cudnn": 91900})[0]
        assert state["backend"] == "FLASH_ATTENTION"
        assert not guard.off_host, guard.off_host
        assert not [e for e in guard.console if "which_kernel" in e], guard.console
    finally:
        context.close()


def test_form_script_and_style_budget(browser, base_url, site_dir):
    context, page, guard = _open(browser, base_url + PAGE)
    try:
        loaded = {u.rsplit("/", 1)[-1]: size for u, size in guard.raw_bytes.items()}
        assert set(OWN) <= set(loaded), sorted(loaded)
        total = sum(loaded[name] for name in OWN)
        print(f"\n{PAGE}: form script and style {total / 1e3:.1f} kB "
              f"(budget {SCRIPT_BUDGET / 1e3:.0f} kB)")
        assert total <= SCRIPT_BUDGET, total
    finally:
        context.close()
    # no other page loads them
    loading = sorted(str(p.relative_to(site_dir)) for p in site_dir.rglob("*.html")
                     if "javascripts/which_kernel.js" in p.read_text(encoding="utf-8"))
    assert loading == [str(pathlib.Path(PAGE) / "index.html")], loading
