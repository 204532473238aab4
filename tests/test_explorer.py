"""The attention explorer (docs/explorer.md) and the softmax playground.

hooks/explorer.py trains the tiny GPT and exports each layer's per-head
queries and keys; docs/javascripts/explorer.js computes the weights in the
browser. These tests retrain the same model (deterministic: one CPU thread,
one seed), check the export is that model's queries and keys, and check that
the weights the page shows equal, to 1e-6, both the model's own attention
(``MultiHeadAttention(need_weights=True)`` with the guide's masks) and the
guide's ``scaled_dot_product_attention`` run on the exported numbers. The
browser tests (marker ``browser``) also drive the widgets with the mouse and
the keyboard, measure what the page loads, and save screenshots to
``test-artifacts/screenshots``.
"""

from __future__ import annotations

import base64
import importlib.util
import math
import pathlib
import re

import pytest
import torch

import browser_support as bs
from snippets.efficiency.sliding_window import sliding_window_mask
from snippets.linear.block_sparse_attention import moba_attention, moba_block_choice
from snippets.linear.softmax_that_forgets import forgetting_attention
from snippets.foundations.masks import causal_mask, padding_mask
from snippets.foundations.scaled_dot_product import scaled_dot_product_attention

SCRIPT_BUDGET = 150_000  # bytes: the explorer's own script, style and data, uncompressed
EXPLORER = "explorer/"
PLAYGROUND = "foundations/scaled-dot-product/"
SCREENSHOTS = bs.ARTIFACTS / "screenshots"


def _hook():
    spec = importlib.util.spec_from_file_location("field_guide_explorer_hook", bs.ROOT / "hooks" / "explorer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hook = _hook()


@pytest.fixture(scope="module")
def trained():
    return hook.train()


def _decode(text: str, heads: int, n: int, d: int) -> torch.Tensor:
    values = torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.float32)
    return values.reshape(heads, n, d).to(torch.float64)


def _allowed(n: int, causal: bool, window: int, padding: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The page's mask built with the guide's mask functions: (N, N) attn_mask, (1, N) key_mask."""
    allowed = causal_mask(n, n) if causal else torch.ones(n, n, dtype=torch.bool)
    if window:
        allowed = allowed & sliding_window_mask(n, window, causal=causal)
    key_mask = padding_mask(torch.tensor([n - padding]), n) if padding else None
    return allowed, key_mask


def model_weights(result, sentence: int, layer: int, causal: bool, window: int, padding: int) -> torch.Tensor:
    """(H, N, N) weights of the model's own attention module for one layer and mask."""
    ids = hook.sequences()[sentence:sentence + 1]
    x = hook.layer_inputs(result.model, ids)[layer]  # (1, N, D)
    attn_mask, key_mask = _allowed(ids.shape[1], causal, window, padding)
    with torch.no_grad():
        _, weights = result.model.layers[layer].attention(x, attn_mask=attn_mask, key_mask=key_mask, need_weights=True)
    return weights[0].double()


def exported_weights(data: dict, sentence: int, layer: int, causal: bool, window: int, padding: int) -> torch.Tensor:
    """(H, N, N) weights from the exported queries and keys, by the guide's
    scaled_dot_product_attention in float64."""
    entry = data["sentences"][sentence]
    n, heads, d = len(entry["tokens"]), data["heads"], data["d_head"]
    q = _decode(entry["layers"][layer]["q"], heads, n, d)
    k = _decode(entry["layers"][layer]["k"], heads, n, d)
    attn_mask, key_mask = _allowed(n, causal, window, padding)
    if key_mask is not None:
        attn_mask = attn_mask & key_mask  # (N, N) & (1, N): every query loses the padded keys
    _, weights = scaled_dot_product_attention(q, k, k, attn_mask=attn_mask)
    return weights


def selected_weights(data: dict, sentence: int, layer: int, case: tuple) -> torch.Tensor:
    """(H, N, N) weights under the second row of controls: the mask, AND the
    blocks the guide's ``moba_block_choice`` keeps per head, with the bias
    |i - j| log a; by the guide's scaled_dot_product_attention in float64."""
    causal, window, padding, block, top_k, gate = case
    entry = data["sentences"][sentence]
    n, heads, d = len(entry["tokens"]), data["heads"], data["d_head"]
    q = _decode(entry["layers"][layer]["q"], heads, n, d)
    k = _decode(entry["layers"][layer]["k"], heads, n, d)
    attn_mask, key_mask = _allowed(n, causal, window, padding)
    allowed = (attn_mask if key_mask is None else attn_mask & key_mask).expand(heads, n, n)
    if block:
        kept = moba_block_choice(q[None], k[None], block_size=block, top_k=top_k)[0]  # (H, N, n_b)
        allowed = allowed & kept.repeat_interleave(block, dim=-1)[..., :n]
    i, j = torch.arange(n)[:, None], torch.arange(n)
    bias = (i - j).abs().to(torch.float64) * math.log(gate)  # 0 when the gate is off
    _, weights = scaled_dot_product_attention(q, k, k, attn_mask=bias.masked_fill(~allowed, -math.inf))
    return weights


def snippet_weights(data: dict, sentence: int, layer: int, block: int, top_k: int, gate: float) -> torch.Tensor:
    """(H, N, N) weights of the causal snippets themselves, read off with v = I:
    ``moba_attention`` for a block choice, ``forgetting_attention`` for a gate."""
    entry = data["sentences"][sentence]
    n, heads, d = len(entry["tokens"]), data["heads"], data["d_head"]
    q = _decode(entry["layers"][layer]["q"], heads, n, d)[None]
    k = _decode(entry["layers"][layer]["k"], heads, n, d)[None]
    eye = torch.eye(n, dtype=torch.float64).expand(1, heads, n, n)
    if block:
        assert gate == 1
        return moba_attention(q, k, eye, block_size=block, top_k=top_k)[0]
    log_f = torch.full((1, heads, n), math.log(gate), dtype=torch.float64)
    return forgetting_attention(q, k, eye, log_f)[0]


# ----------------------------------------------------------------------------
# The export (no browser)
# ----------------------------------------------------------------------------
def test_export_holds_the_models_queries_and_keys(trained):
    data = hook.read_data_script(hook.data_script(hook.export(trained)))
    ids = hook.sequences()
    qk = hook.queries_and_keys(trained.model, ids)
    assert data["layers"] == len(qk) == 2 and data["heads"] == 4 and data["d_head"] == 16
    assert trained.accuracy > 0.9, f"the tiny GPT did not learn the task: accuracy {trained.accuracy}"
    for s, entry in enumerate(data["sentences"]):
        assert entry["ids"] == ids[s].tolist()
        n = len(entry["tokens"])
        for layer, (q, k) in enumerate(qk):
            got_q = _decode(entry["layers"][layer]["q"], 4, n, 16)
            got_k = _decode(entry["layers"][layer]["k"], 4, n, 16)
            torch.testing.assert_close(got_q, q[s].double(), rtol=0, atol=0)
            torch.testing.assert_close(got_k, k[s].double(), rtol=0, atol=0)
    # The weights from the export are the model's own, for the mask it was trained with.
    for layer in range(2):
        ours = exported_weights(data, 0, layer, True, 0, 0)
        theirs = model_weights(trained, 0, layer, True, 0, 0)
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
        assert not ours.triu(1).any(), "causal weights reach a later key"


# ----------------------------------------------------------------------------
# In the browser
# ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def chromium(browser):
    """The session's one Chromium (conftest.py): Playwright's sync API allows
    one instance per thread."""
    return browser


def _open(chromium, url: str, *, scheme: str = "light", viewport=None):
    from test_browser import DESKTOP, new_page, open_page

    context, page, guard = new_page(chromium, scheme=scheme, viewport=viewport or DESKTOP)
    open_page(page, url)
    return context, page, guard


READY = "() => document.querySelector('.fg-explorer[data-fg-ready]') !== null"
MAPS_JS = """() => [...document.querySelectorAll('.fg-explorer__map')].map(m => ({
  head: Number(m.dataset.head),
  cells: [...m.children].map(c => [Number(c.dataset.i), Number(c.dataset.j), Number(c.dataset.w)]),
}))"""
BARS_JS = """() => [...document.querySelectorAll('.fg-explorer__barrow')].map(r => ({
  head: Number(r.dataset.head), weights: [...r.children].map(b => Number(b.dataset.w)),
}))"""


def _page_weights(page, heads: int, n: int) -> torch.Tensor:
    """(H, N, N) weights read from the heatmaps (every head shown)."""
    out = torch.full((heads, n, n), float("nan"), dtype=torch.float64)
    maps = bs.run_js(page, MAPS_JS)
    assert sorted(m["head"] for m in maps) == list(range(heads)), "not every head is shown"
    for m in maps:
        for i, j, w in m["cells"]:
            out[m["head"], i, j] = w
    return out


def _screenshot(locator, name: str) -> None:
    """Save one widget to test-artifacts/screenshots, without the sticky header over it."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    bs.run_js(locator.page, "() => document.querySelector('.md-header').style.visibility = 'hidden'")
    try:
        locator.screenshot(path=str(SCREENSHOTS / name))
    finally:
        bs.run_js(locator.page, "() => document.querySelector('.md-header').style.visibility = ''")


def _choose(page, role: str, value: str) -> None:
    """Pick an option by its value (Playwright's ``value=`` also matches labels:
    the layer select's option "0" is labelled "1")."""
    select = page.locator(f".fg-explorer select[data-role={role}]")
    index = bs.run_js_on(select, "(s, v) => [...s.options].findIndex(o => o.value === v)", value)
    assert index >= 0, f"no option {value!r} in the {role} select"
    select.select_option(index=index)
    assert select.input_value() == value


def _set_mask(page, causal: bool, window: int, padding: int) -> None:
    page.set_checked(".fg-explorer input[data-role=causal]", causal)
    _choose(page, "window", str(window))
    _choose(page, "padding", str(padding))


CASES = [  # sentence, layer, causal, window, padding
    (0, 0, True, 0, 0),
    (0, 1, True, 0, 0),
    (1, 0, False, 0, 0),
    (2, 1, True, 0, 3),
    (3, 0, False, 0, 2),
    (1, 1, False, 3, 0),
    (2, 0, True, 4, 0),
    (3, 1, True, 1, 2),  # the padded queries keep no key: zero rows
]


@pytest.mark.browser
def test_page_weights_equal_the_models(chromium, base_url, site_dir, trained):
    data = hook.read_data_script((site_dir / hook.DATA_URI).read_text(encoding="utf-8"))
    assert data == hook.export(trained), (
        "the site's exported queries and keys differ from the model trained here "
        "(a site built from other code, or training that is not deterministic)"
    )
    context, page, guard = _open(chromium, base_url + EXPLORER)
    try:
        page.wait_for_function(READY)
        _choose(page, "head", "all")
        worst = 0.0
        for sentence, layer, causal, window, padding in CASES:
            _choose(page, "sentence", str(sentence))
            _choose(page, "layer", str(layer))
            _set_mask(page, causal, window, padding)
            n = len(data["sentences"][sentence]["tokens"])
            got = _page_weights(page, data["heads"], n)
            case = f"sentence {sentence}, layer {layer}, causal={causal}, window={window}, padding={padding}"
            want = model_weights(trained, sentence, layer, causal, window, padding)
            torch.testing.assert_close(got, want, rtol=0, atol=1e-6, msg=lambda m: f"{case}: page vs model: {m}")
            exact = exported_weights(data, sentence, layer, causal, window, padding)
            torch.testing.assert_close(got, exact, rtol=0, atol=1e-12, msg=lambda m: f"{case}: page vs snippet: {m}")
            worst = max(worst, (got - want).abs().max().item())
            # The bars are the selected query's row of the same weights.
            query = bs.run_js(page, "() => JSON.parse(document.querySelector('.fg-explorer').dataset.state).query")
            for row in bs.run_js(page, BARS_JS):
                assert row["weights"] == got[row["head"], query].tolist(), case
        assert exact[:, -2:].abs().sum() == 0 and got[:, -2:].abs().sum() == 0  # the last case's empty rows
        assert not guard.console and not guard.off_host, (guard.console, guard.off_host)
        print(f"\nexplorer: {len(CASES)} settings, page vs model max |diff| {worst:.1e}")
    finally:
        context.close()


SELECTION_CASES = [  # sentence, layer, (causal, window, padding, block C, top k, gate a)
    (0, 0, (True, 0, 0, 3, 2, 1.0)),
    (1, 1, (True, 0, 0, 2, 1, 1.0)),   # own block only
    (2, 0, (True, 0, 0, 4, 4, 1.0)),   # every block: the trained weights
    (3, 1, (True, 0, 0, 0, 2, 0.7)),   # FoX with a constant gate
    (0, 1, (False, 3, 2, 3, 2, 0.85)),
    (1, 0, (True, 2, 1, 2, 3, 0.6)),
]


def test_selection_reference_equals_the_snippets(trained):
    """The Python side of the selection test: the generic masked form equals
    the causal snippets (MoBA and FoX) where they apply, and all blocks kept
    equals the trained causal weights."""
    data = hook.export(trained)
    checked = 0
    for sentence, layer, case in SELECTION_CASES:
        causal, window, padding, block, top_k, gate = case
        if not (causal and window == 0 and padding == 0):
            continue
        ours = selected_weights(data, sentence, layer, case)
        torch.testing.assert_close(ours, snippet_weights(data, sentence, layer, block, top_k, gate),
                                   rtol=0, atol=1e-12)
        checked += 1
    assert checked == 4
    every = selected_weights(data, 2, 0, (True, 0, 0, 4, 4, 1.0))
    torch.testing.assert_close(every, exported_weights(data, 2, 0, True, 0, 0), rtol=0, atol=1e-12)
    own = selected_weights(data, 1, 1, (True, 0, 0, 2, 1, 1.0))
    i, j = torch.arange(13)[:, None], torch.arange(13)
    assert not own[:, (i // 2 != j // 2)].any(), "top_k = 1 read a key outside the query's own block"


@pytest.mark.browser
def test_page_selection_equals_the_snippets(chromium, base_url, site_dir, trained):
    data = hook.read_data_script((site_dir / hook.DATA_URI).read_text(encoding="utf-8"))
    assert data == hook.export(trained)
    context, page, guard = _open(chromium, base_url + EXPLORER)
    try:
        page.wait_for_function(READY)
        _choose(page, "head", "all")
        differ = 0
        for sentence, layer, case in SELECTION_CASES:
            causal, window, padding, block, top_k, gate = case
            _choose(page, "sentence", str(sentence))
            _choose(page, "layer", str(layer))
            _set_mask(page, causal, window, padding)
            _choose(page, "block", str(block))
            _choose(page, "topk", str(top_k))
            page.locator(".fg-explorer input[data-role=gate]").fill(str(gate))
            state = bs.run_js(page, "() => JSON.parse(document.querySelector('.fg-explorer').dataset.state)")
            assert state["gate"] == gate and state["block"] == block and state["topk"] == top_k, state
            n = len(data["sentences"][sentence]["tokens"])
            got = _page_weights(page, data["heads"], n)
            want = selected_weights(data, sentence, layer, case)
            torch.testing.assert_close(got, want, rtol=0, atol=1e-12, msg=lambda m: f"{case}: page vs snippet: {m}")
            # Per head, the grey cells are the keys that head's block gate dropped.
            masked = bs.run_js(page, """() => [...document.querySelectorAll('.fg-explorer__map')].map(m =>
              [...m.children].filter(c => c.classList.contains('is-masked')).length)""")
            differ += len(set(masked)) > 1
        assert differ >= 1, "no case showed heads choosing different blocks"
        assert not guard.console and not guard.off_host, (guard.console, guard.off_host)
        _screenshot(page.locator(".fg-explorer"), "explorer-selection.png")
    finally:
        context.close()


@pytest.mark.browser
def test_explorer_reacts_to_pointer_and_keyboard(chromium, base_url):
    context, page, guard = _open(chromium, base_url + EXPLORER)
    try:
        page.wait_for_function(READY)
        tokens = page.locator(".fg-explorer__token")
        assert tokens.count() == 13
        assert page.locator(".fg-explorer__map").count() == 1  # one head to start with
        pressed = "() => [...document.querySelectorAll('.fg-explorer__token')].findIndex(b => b.getAttribute('aria-pressed') === 'true')"
        readout = page.locator(".fg-explorer__readout")
        # Hover a token: it becomes the query, the readout names it.
        tokens.nth(2).hover()
        assert bs.run_js(page, pressed) == 2
        assert readout.inner_text().startswith("Query 3 ")
        # Tap another.
        tokens.nth(9).click()
        assert bs.run_js(page, pressed) == 9
        # Keyboard: arrows, Home and End move the query and the focus.
        page.keyboard.press("ArrowLeft")
        assert bs.run_js(page, pressed) == 8
        assert bs.run_js(page, "() => document.activeElement.dataset.i") == "8"
        page.keyboard.press("End")
        assert bs.run_js(page, pressed) == 12
        page.keyboard.press("Home")
        assert bs.run_js(page, pressed) == 0 and readout.inner_text().startswith("Query 1 ")
        # One tab stop for the tokens (roving tabindex), reached from the last control.
        assert page.locator(".fg-explorer__token[tabindex='0']").count() == 1
        page.locator(".fg-explorer input[data-role=gate]").focus()
        page.keyboard.press("Tab")
        assert bs.run_js(page, "() => document.activeElement.classList.contains('fg-explorer__token')")
        # Every control has a label.
        unlabelled = bs.run_js(page,
            "() => [...document.querySelectorAll('.fg-explorer select, .fg-explorer input')]"
            ".filter(c => !c.labels || c.labels.length === 0).map(c => c.outerHTML)"
        )
        assert not unlabelled, unlabelled
        assert page.locator(".fg-explorer [aria-live]").count() >= 1
        # All heads at once, chosen with the keyboard.
        page.locator(".fg-explorer select[data-role=head]").focus()
        page.keyboard.press("End")
        page.wait_for_function("() => document.querySelectorAll('.fg-explorer__map').length === 4")
        assert page.locator(".fg-explorer__barrow").count() == 4
        # Switching the mask changes what the page says changed.
        changes = page.locator(".fg-explorer__changes")
        assert changes.get_attribute("data-changed") == ""
        page.locator(".fg-explorer input[data-role=causal]").click()
        assert changes.get_attribute("data-changed") not in ("", None)
        page.locator(".fg-explorer input[data-role=causal]").click()
        _choose(page, "padding", "2")
        assert changes.get_attribute("data-changed") == "11,12"  # causal + right padding: only the padded rows
        # Clicking a heatmap row picks that query.
        page.locator(".fg-explorer__map").first.locator("[data-i='4'][data-j='0']").click()
        assert bs.run_js(page, pressed) == 4
        assert not guard.console and not guard.off_host, (guard.console, guard.off_host)
        _screenshot(page.locator(".fg-explorer"), "explorer-light.png")
    finally:
        context.close()


@pytest.mark.browser
def test_explorer_in_the_dark_palette_and_on_a_phone(chromium, base_url):
    from test_browser import OVERFLOW_JS, PHONE

    context, page, guard = _open(chromium, base_url + EXPLORER, scheme="dark", viewport=PHONE)
    try:
        page.wait_for_function(READY)
        assert bs.run_js(page, "document.body.getAttribute('data-md-color-scheme')") == "slate"
        _choose(page, "head", "all")
        page.locator(".fg-explorer__token").nth(7).click()
        phone = bs.run_js(page, OVERFLOW_JS)
        assert phone["scroll"] <= phone["client"] + 1, phone
        # The heat is Material's link colour of the dark palette, not the light one.
        heat = bs.run_js(page, "() => getComputedStyle(document.querySelector('.fg-explorer__bar')).backgroundColor")
        link = bs.run_js(page, """() => {
          const probe = document.createElement('span');
          probe.style.color = 'var(--md-typeset-a-color)';
          document.querySelector('.md-typeset').appendChild(probe);
          const colour = getComputedStyle(probe).color;
          probe.remove();
          return colour;
        }""")
        assert heat == link and heat != "rgb(64, 81, 181)", (heat, link)  # not the light palette's indigo
        assert not guard.console, guard.console
        _screenshot(page.locator(".fg-explorer"), "explorer-dark-phone.png")
    finally:
        context.close()


@pytest.mark.browser
@pytest.mark.parametrize("path, own", [(EXPLORER, ("explorer.js", "tiny-gpt.js", "explorer.css")),
                                       (PLAYGROUND, ("explorer.js", "explorer.css"))])
def test_widget_script_and_data_budget(chromium, base_url, pages_loading_explorer, path, own):
    context, page, guard = _open(chromium, base_url + path)
    try:
        loaded = {u.rsplit("/", 1)[-1]: size for u, size in guard.raw_bytes.items()}
        assert set(own) <= set(loaded), f"{path} did not load {own}: {sorted(loaded)}"
        total = sum(loaded[name] for name in own)
        print(f"\n{path}: explorer script, style and data {total / 1e3:.1f} kB (budget {SCRIPT_BUDGET / 1e3:.0f} kB)")
        assert total <= SCRIPT_BUDGET, f"{path}: {total} bytes of explorer script and data"
    finally:
        context.close()
    assert pages_loading_explorer == {EXPLORER, PLAYGROUND}


@pytest.fixture(scope="module")
def pages_loading_explorer(site_dir) -> set[str]:
    """The built pages that load the explorer's script: only those that use it."""
    found = set()
    for html in site_dir.rglob("*.html"):
        if "javascripts/explorer.js" in html.read_text(encoding="utf-8"):
            rel = html.relative_to(site_dir).as_posix()
            found.add(rel[: -len("index.html")] if rel.endswith("index.html") else rel)
    return found


@pytest.mark.browser
def test_explorer_after_instant_navigation(chromium, base_url):
    context, page, guard = _open(chromium, base_url + PLAYGROUND)
    try:
        page.wait_for_function("() => document.querySelector('.fg-softmax-playground[data-fg-ready]') !== null")
        bs.run_js(page, "window.__sameDocument = true")
        page.locator('.md-content a[href$="explorer/"]').first.click()
        # the explorer may add a section's fragment to its address once it loads
        page.wait_for_url(re.compile(re.escape(base_url + EXPLORER) + r"(#[\w-]*)?$"))
        page.wait_for_function(READY)
        assert bs.run_js(page, "window.__sameDocument === true"), "instant navigation is off: the test checks nothing"
        page.locator(".fg-explorer__token").nth(3).hover()
        assert page.locator(".fg-explorer__readout").inner_text().startswith("Query 4 ")
        assert not guard.console, guard.console
    finally:
        context.close()


PLAYGROUND_JS = """() => {
  const root = document.querySelector('.fg-softmax-playground');
  return {
    alpha: Number(root.dataset.alpha),
    weights: [...root.querySelectorAll('.fg-playground__bar')].map(b => Number(b.dataset.w)),
    max: Number(root.querySelector('[data-max]').dataset.max),
    jacobian: Number(root.querySelector('[data-jacobian]').dataset.jacobian),
    text: root.querySelector('.fg-playground__stats').textContent,
  };
}"""


def _expected(scores: list[float], alpha: float) -> tuple[torch.Tensor, float]:
    s = torch.tensor(scores, dtype=torch.float64) * alpha
    w = torch.softmax(s, dim=-1)
    jacobian = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, dim=-1), s)
    return w, torch.linalg.matrix_norm(jacobian).item()


@pytest.mark.browser
def test_playground_softmax_equals_torch(chromium, base_url):
    context, page, guard = _open(chromium, base_url + PLAYGROUND)
    try:
        page.wait_for_function("() => document.querySelector('.fg-softmax-playground[data-fg-ready]') !== null")
        inputs = page.locator(".fg-softmax-playground input[data-role=score]")
        assert inputs.count() == 5
        checked = 0
        for scores in ([2, 1, 0.5, -1, 0], [0.3, -2.5, 4, 4, 1e-3], [900, 899, -50, 3, 898.5]):
            for j, s in enumerate(scores):
                inputs.nth(j).fill(str(s))
            for slider in ("0", "-1", "1.3"):
                bs.run_js_on(page.locator(".fg-softmax-playground input[data-role=scale]"),
                    "(el, v) => { el.value = v; el.dispatchEvent(new Event('input', {bubbles: true})); }", slider)
                got = bs.run_js(page, PLAYGROUND_JS)
                want, norm = _expected(scores, got["alpha"])
                assert abs(got["alpha"] - 10 ** float(slider)) < 1e-9
                torch.testing.assert_close(torch.tensor(got["weights"], dtype=torch.float64), want, rtol=0, atol=1e-6)
                assert abs(got["max"] - want.max().item()) < 1e-6
                assert abs(got["jacobian"] - norm) < 1e-6, (scores, slider, got["jacobian"], norm)
                checked += 1
        # The keyboard moves the slider; at the top the softmax saturates.
        inputs.nth(0).fill("2")
        inputs.nth(1).fill("1")
        for j in (2, 3, 4):
            inputs.nth(j).fill("0")
        page.locator(".fg-softmax-playground input[data-role=scale]").focus()
        page.keyboard.press("Home")
        low = bs.run_js(page, PLAYGROUND_JS)
        page.keyboard.press("End")
        high = bs.run_js(page, PLAYGROUND_JS)
        assert low["alpha"] == pytest.approx(0.1) and high["alpha"] == pytest.approx(100.0)
        assert low["max"] < 0.4 < 0.999 < high["max"] and high["jacobian"] < 1e-6 < low["jacobian"]
        assert page.locator(".fg-softmax-playground [aria-live]").count() == 1
        assert not guard.console and not guard.off_host, (guard.console, guard.off_host)
        print(f"\nplayground: {checked} settings equal torch.softmax to 1e-6")
        for j, s in enumerate([3, 1, 0.5, -1, 2]):
            inputs.nth(j).fill(str(s))
        bs.run_js_on(page.locator(".fg-softmax-playground input[data-role=scale]"),
            "el => { el.value = '0.3'; el.dispatchEvent(new Event('input', {bubbles: true})); }")
        _screenshot(page.locator(".fg-softmax-playground"), "softmax-playground-light.png")
    finally:
        context.close()
