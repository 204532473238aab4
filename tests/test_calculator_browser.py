"""The config.json calculator form of docs/modern/models.md, in a real browser.

Proves: docs/javascripts/config_calculator.js, run by headless Chromium on the
built page, gives exactly (integers, to the byte and the FLOP) what
snippets/modern/config_calculator.py gives, for every census model the form
offers (hooks/config_calculator.py) and for 240 seeded random configurations
(MHA, GQA, MQA, MLA with and without an indexer key; full, sliding, chunked and
Gated DeltaNet layers, from ``layer_types`` or from the pattern fields;
shared key/value layers; a nested ``text_config``; several dtypes, batches and
token counts, up to FLOP counts past 2**53), and the same error, type and
message, for malformed configurations and arguments. Every census config gives
numbers, the cache of the models table, except Qwen3.5 27B's and Kimi Linear's,
whose linear-layer sizes the census lacks (the named error). The visible form is filled, submitted and read
back, a bad JSON shows its error, and the page works from file://.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import random

import pytest

import browser_support as bs
from snippets.modern import config_calculator as cc

pytestmark = pytest.mark.browser

PAGE = "modern/models/"
READY = "() => document.querySelector('form.fg-calc[data-fg-ready]') !== null"
SEED, RANDOM_CASES = 0, 240


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"calc_test_{name}", bs.ROOT / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hook, table = _load("config_calculator"), _load("models_table")


# ----------------------------------------------------------------------------
# The Python side, and the same call in the page
# ----------------------------------------------------------------------------
def as_text(value):
    """Every int as a decimal string (the page's BigInts come back that way)."""
    if isinstance(value, dict):
        return {k: as_text(v) for k, v in value.items()}
    return str(value)


def python(case: dict) -> dict:
    """{"cache": ..., "flops": ...}, each a result or {"error": [type, message]}."""
    config = json.loads(case["config"])
    out = {}
    for name, call in (("cache", lambda: cc.cache_from_config(config, case["tokens"], case["kv"],
                                                               state_dtype_bytes=case["state"],
                                                               batch=case["batch"])),
                       ("flops", lambda: cc.flops_from_config(config, case["tokens"]))):
        try:
            out[name] = as_text(call())
        except (ValueError, TypeError) as error:
            out[name] = {"error": [type(error).__name__, str(error)]}
    return out


IN_PAGE = """cases => {
  const calc = window.fgConfigCalculator;
  const text = v => typeof v === "object" ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, text(x)]))
                                          : String(v);
  const run = f => { try { return text(f()); } catch (e) { return {error: [e.name, e.message]}; } };
  return cases.map(c => {
    const config = calc.parse(c.config);
    return {cache: run(() => calc.cache(config, c.tokens, c.kv, c.state, c.batch)),
            flops: run(() => calc.flops(config, c.tokens))};
  });
}"""


def compare(page, cases: list[dict]) -> int:
    """Run every case in the page and in Python; return how many gave numbers."""
    got = bs.run_js(page, IN_PAGE, cases)
    numbers = 0
    for case, ours in zip(cases, got):
        want = python(case)
        assert ours == want, (case, ours, want)
        numbers += "error" not in want["cache"]
    return numbers


def case(config, tokens=32768, kv=2, state=4, batch=1) -> dict:
    return {"config": json.dumps(config), "tokens": tokens, "kv": kv, "state": state, "batch": batch}


# ----------------------------------------------------------------------------
# Random configurations (seeded)
# ----------------------------------------------------------------------------
def random_config(rng: random.Random) -> tuple[dict, set[str]]:
    """One config.json the calculator can read, and the features it exercises."""
    features = set()
    n, h = rng.randint(1, 64), rng.choice([1, 2, 4, 8, 12, 16, 32, 40, 64, 128])
    cfg = {"num_hidden_layers": n, "num_attention_heads": h}
    if rng.random() < 0.25:  # latent attention
        features.add("mla")
        cfg.update(kv_lora_rank=rng.choice([64, 256, 512]), qk_rope_head_dim=rng.choice([0, 32, 64]),
                   qk_nope_head_dim=rng.choice([0, 64, 128]), v_head_dim=rng.choice([64, 128, 256]))
        if rng.random() < 0.4:
            cfg["index_head_dim"] = 128
            features.add("indexer")
    else:
        h_kv = rng.choice([h, 1] + [g for g in (2, 4, 8) if h % g == 0])
        features.add("mha" if h_kv == h else "mqa" if h_kv == 1 else "gqa")
        if rng.random() < 0.8:
            cfg["num_key_value_heads"] = h_kv
        if rng.random() < 0.7:
            cfg["head_dim"] = rng.choice([32, 64, 80, 128, 256])
        else:
            cfg["hidden_size"] = h * rng.choice([32, 64, 128]) + rng.choice([0, 0, 7])  # floor division
            features.add("hidden_size")
    layout = rng.choice(["full", "sliding", "sliding_off", "pattern", "interval", "types"])
    window = rng.choice([1, 128, 1024, 4096])
    if layout == "sliding":
        cfg["sliding_window"] = window
    elif layout == "sliding_off":
        cfg.update(sliding_window=window, use_sliding_window=False)
    elif layout == "pattern":
        cfg.update(sliding_window=window, sliding_window_pattern=rng.randint(1, 8))
    elif layout == "interval":
        cfg["full_attention_interval"] = rng.randint(1, 6)
    elif layout == "types":
        kinds = rng.sample(cc.KINDS, rng.randint(1, 4))
        cfg["layer_types"] = [rng.choice(kinds) for _ in range(n)]
        cfg.update(sliding_window=window, attention_chunk_size=rng.choice([3, 8192]))
    if layout in ("interval", "types") or rng.random() < 0.2:
        cfg.update(linear_num_key_heads=rng.choice([8, 16]), linear_num_value_heads=rng.choice([16, 32, 48]),
                   linear_key_head_dim=128, linear_value_head_dim=rng.choice([64, 128]),
                   linear_conv_kernel_dim=rng.choice([2, 4]))
    if rng.random() < 0.2:
        cfg["num_kv_shared_layers"] = rng.randint(0, n)
        features.add("shared")
    types = cc._read(cfg)["types"]
    features |= {t for t in types}
    if rng.random() < 0.2:
        cfg = {"architectures": ["SomethingForConditionalGeneration"], "text_config": cfg}
        features.add("text_config")
    return cfg, features


def random_cases(count: int = RANDOM_CASES, seed: int = SEED) -> tuple[list[dict], set[str]]:
    rng = random.Random(seed)
    cases, seen = [], set()
    for _ in range(count):
        cfg, features = random_config(rng)
        tokens = rng.choice([1, 2, 3, 127, 128, 129, 1023, 1024, 1025, 4096, 8191, 8192, 8193, 32768,
                             131072, 1_000_000, 10_000_000])
        cases.append(case(cfg, tokens, kv=rng.choice([1, 2, 4]), state=rng.choice([2, 4]),
                          batch=rng.choice([1, 1, 3, 8])))
        seen |= features
    return cases, seen


# Malformed input: each must give the Python's error, type and message alike.
BASE = {"num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 8}
BAD_CONFIGS = [
    "[1]", "null", '"config"', "3.5",
    '{"num_attention_heads": 4}',
    json.dumps({**BASE, "num_key_value_heads": 0}),
    json.dumps({**BASE, "head_dim": 2.5}),
    '{"num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 8.0}',  # a float, even if whole
    json.dumps({**BASE, "head_dim": True}),
    json.dumps({**BASE, "head_dim": "128"}),
    json.dumps({**BASE, "head_dim": "it's"}),
    json.dumps({**BASE, "head_dim": None}),
    json.dumps({**BASE, "layer_types": ["full_attention"]}),
    json.dumps({**BASE, "layer_types": ["full_attention", "mamba"]}),
    json.dumps({**BASE, "layer_types": ["full_attention", ["x"]]}),
    json.dumps({**BASE, "layer_types": ["full_attention", {"x": 1}]}),
    json.dumps({**BASE, "layer_types": "full_attention"}),
    json.dumps({**BASE, "layer_types": {"a": [1, None, False]}}),
    json.dumps({**BASE, "layer_types": ["sliding_attention"] * 2}),
    json.dumps({**BASE, "layer_types": ["chunked_attention"] * 2}),
    json.dumps({**BASE, "layer_types": ["linear_attention"] * 2}),
    json.dumps({**BASE, "kv_lora_rank": 4}),
    json.dumps({**BASE, "kv_lora_rank": 4, "qk_rope_head_dim": 0, "qk_nope_head_dim": 0}),
    json.dumps({**BASE, "num_kv_shared_layers": -1}),
    json.dumps({**BASE, "compress_ratios": [0, 4]}),
    json.dumps({**BASE, "full_attention_interval": -1}),
    json.dumps({**BASE, "full_attention_interval": 0, "sliding_window_pattern": 0}),
    json.dumps({"text_config": {"num_hidden_layers": 1}, "num_attention_heads": 4}),
]
# Odd but read without an error: the page must follow the Python's truth tests and slices.
EDGE_CONFIGS = [
    json.dumps({**BASE, "head_dim": None, "hidden_size": 3}),  # 3 // 4: zero wide, no cache
    json.dumps({**BASE, "num_kv_shared_layers": 5}),  # types[:2 - 5]: a slice from the end
    json.dumps({**BASE, "compress_ratios": []}),  # empty: false
    json.dumps({**BASE, "sliding_window": 0, "sliding_window_pattern": 2}),  # window 0: no sliding
    json.dumps({**BASE, "sliding_window": 4, "use_sliding_window": 0}),  # 0 is not False
    json.dumps({**BASE, "text_config": [1]}),  # not a dict: the top level is read
]
BAD_ARGUMENTS = [dict(tokens=0), dict(tokens=-3), dict(kv=0), dict(state=0), dict(batch=0)]


def error_cases() -> list[dict]:
    out = [{**case(BASE), "config": text} for text in BAD_CONFIGS]
    return out + [{**case(BASE), **kwargs} for kwargs in BAD_ARGUMENTS]


def edge_cases() -> list[dict]:
    return [{**case(BASE, tokens), "config": text} for text in EDGE_CONFIGS for tokens in (1, 5)]


# ----------------------------------------------------------------------------
# Fixtures: the built site, served and read from the disk; the session's Chromium
# ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def calculator(browser, base_url):
    """The models page, served over HTTP, with the form started."""
    from test_browser import DESKTOP, new_page, open_page

    context, page, guard = new_page(browser, viewport=DESKTOP)
    open_page(page, base_url + PAGE)
    page.wait_for_function(READY)
    yield page, guard
    context.close()


# ----------------------------------------------------------------------------
# The page's numbers against the Python's
# ----------------------------------------------------------------------------
def test_random_configs_equal_the_python(calculator):
    page, guard = calculator
    cases, seen = random_cases()
    assert len(cases) >= 200
    assert seen >= {"mha", "gqa", "mqa", "mla", "indexer", "hidden_size", "shared", "text_config",
                    *cc.KINDS}, seen
    assert compare(page, cases) == len(cases)  # every random config gives numbers
    flops = [cc.flops_from_config(json.loads(c["config"]), c["tokens"])["prefill_total"] for c in cases]
    assert max(flops) > 2**53  # past what a float holds exactly
    assert not guard.console and not guard.off_host, (guard.console, guard.off_host)


def test_errors_equal_the_pythons(calculator):
    page, _ = calculator
    assert compare(page, error_cases()) == 0  # every cache refused (flops takes no dtype or batch)
    assert compare(page, edge_cases()) == len(edge_cases())


def test_every_census_model_equals_the_python_and_the_table(calculator):
    page, _ = calculator
    entries = hook.census()
    rows = {m["name"]: m for m in table.load_models()}
    assert sorted(set(rows) - {e["name"] for e in entries}) == ["DeepSeek-V4-Flash", "DeepSeek-V4-Pro"]
    # Every row gives numbers but the two whose linear-layer sizes the census lacks
    # (Qwen3.5's Gated DeltaNet sizes; Kimi Linear's KDA layers, which are not read).
    unread = sorted(e["name"] for e in entries if None in e["config"].values())
    assert unread == ["Kimi Linear 48B-A3B", "Qwen3.5 27B"]
    assert all(e["config"]["v_head_dim"] == rows[e["name"]]["v_head_dim"]["value"]
               for e in entries if "kv_lora_rank" in e["config"])
    # What the census leaves null does not enter the softmax cache: any stand-in will do.
    filled = [{k: 1 if v is None else v for k, v in e["config"].items()} for e in entries]
    configs = [e["config"] for e in entries] + filled
    cases = [case(c, tokens, kv) for c in configs for tokens in (1, *table.LENGTHS) for kv in (1, 2)]
    assert compare(page, cases) == len(cases) - 8 * len(unread)
    for entry, config in zip(entries, filled):
        model = rows[entry["name"]]
        assert cc._read(config)["types"] == table.layer_types(model), entry["name"]
        for length in table.LENGTHS:
            ours = cc.cache_from_config(config, length)
            assert sum(ours["bytes"][k] for k in cc.SOFTMAX) == table.cache_bytes(model, length), entry["name"]
    assert hook.census()[[e["name"] for e in entries].index("Qwen3-Next 80B-A3B")]["config"][
        "linear_num_value_heads"] == 32  # from docs/data/hybrids.yaml, not null


# ----------------------------------------------------------------------------
# The visible form
# ----------------------------------------------------------------------------
def read_output(page) -> dict[str, int]:
    cells = page.eval_on_selector_all(".fg-calc [data-role=output] [data-key]",
                                      "els => els.map(e => [e.dataset.key, e.dataset.value])")
    return {k: int(v) for k, v in cells}


def expected_output(config: dict, tokens: int, kv: int) -> dict[str, int]:
    c, f = cc.cache_from_config(config, tokens, kv), cc.flops_from_config(config, tokens)
    out = {"per_token": c["per_token"], "total": c["total"], "layers.shared": c["layers"]["shared"],
           "prefill_total": f["prefill_total"], "decode_total": f["decode_total"],
           "bytes_per_token.total": sum(c["bytes_per_token"].values())}
    for kind in cc.KINDS:
        out.update({f"layers.{kind}": c["layers"][kind], f"bytes.{kind}": c["bytes"][kind],
                    f"bytes_per_token.{kind}": c["bytes_per_token"].get(kind, 0),
                    f"prefill.{kind}": f["prefill"][kind], f"decode.{kind}": f["decode"][kind]})
    return out


HYBRID = {"text_config": {"num_hidden_layers": 12, "num_attention_heads": 8, "num_key_value_heads": 2,
                          "head_dim": 64, "layer_types": ["linear_attention", "sliding_attention",
                                                          "chunked_attention", "full_attention"] * 3,
                          "sliding_window": 512, "attention_chunk_size": 1000, "num_kv_shared_layers": 2,
                          "linear_num_key_heads": 4, "linear_num_value_heads": 8, "linear_key_head_dim": 32,
                          "linear_value_head_dim": 48, "linear_conv_kernel_dim": 4}}


def test_the_visible_form_typed_and_pressed(calculator):
    page, _ = calculator
    form = page.locator("form.fg-calc")
    form.locator("[data-role=config]").fill(json.dumps(HYBRID, indent=2))
    form.locator("[data-role=tokens]").fill("3001")
    form.locator("[data-role=dtype]").select_option("1")
    form.get_by_role("button", name="Compute").click()
    assert read_output(page) == expected_output(HYBRID, 3001, 1)
    text = form.locator("[data-role=output]").inner_text()
    assert "bytes after 3001 tokens" in text and "shared" in text
    # A census model, picked from the list, fills the editor with its config.
    form.locator("[data-role=model]").select_option(label="Gemma 3 27B")
    config = json.loads(form.locator("[data-role=config]").input_value())
    assert read_output(page) == expected_output(config, 3001, 1)
    assert read_output(page)["total"] * 2 == table.cache_bytes(
        next(m for m in table.load_models() if m["name"] == "Gemma 3 27B"), 3001)


def test_bad_json_and_a_missing_field_show_their_errors(calculator):
    page, _ = calculator
    form = page.locator("form.fg-calc")
    output = form.locator("[data-role=output]")
    form.locator("[data-role=config]").fill('{"num_hidden_layers": 2,}')
    form.get_by_role("button", name="Compute").click()
    assert output.get_attribute("data-error") == ""
    assert output.inner_text().startswith("config.json is not valid JSON: ")
    assert page.locator(".fg-calc [data-role=output] table").count() == 0
    form.locator("[data-role=config]").fill('{"num_attention_heads": 4}')
    form.get_by_role("button", name="Compute").click()
    assert output.inner_text() == "ValueError: config['num_hidden_layers'] must be an int >= 1, got None"
    form.locator("[data-role=config]").fill(json.dumps(BASE))
    form.locator("[data-role=tokens]").fill("1.5")
    form.get_by_role("button", name="Compute").click()
    assert output.inner_text() == "ValueError: tokens must be an int >= 1, got '1.5'"
    form.locator("[data-role=tokens]").fill("32768")


def test_the_form_works_from_the_file_system(browser, site_dir):
    from test_browser import new_page

    context, page, guard = new_page(browser, allow_file=True)
    try:
        page.goto((site_dir / PAGE / "index.html").as_uri(), wait_until="load")
        page.wait_for_function(READY)
        form = page.locator("form.fg-calc")
        default = json.loads(form.locator("[data-role=config]").input_value())
        assert read_output(page) == expected_output(default, 32768, 2)  # shown on arrival
        assert read_output(page)["total"] == 4096 * (10 * 32768 + 52 * 1024) * 2  # Gemma 3 27B
        assert compare(page, random_cases(20, seed=1)[0]) == 20
        form.locator("[data-role=model]").select_option(label="Qwen3-Next 80B-A3B")
        config = json.loads(form.locator("[data-role=config]").input_value())
        assert read_output(page) == expected_output(config, 32768, 2)
        assert read_output(page)["total"] == 883163136  # the page's usage block
        assert not guard.off_host, guard.off_host
    finally:
        context.close()


def test_after_instant_navigation(browser, base_url):
    """Material swaps the page in place: the form still starts (document$)."""
    from test_browser import DESKTOP, new_page, open_page

    context, page, guard = new_page(browser, viewport=DESKTOP)
    try:
        open_page(page, base_url + "modern/local-global/")
        bs.run_js(page, "window.__sameDocument = true")
        page.locator('.md-content a[href$="models/"]').first.click()
        page.wait_for_url(base_url + PAGE + "**")
        page.wait_for_function(READY)
        assert bs.run_js(page, "window.__sameDocument === true"), "instant navigation is off: the test checks nothing"
        assert read_output(page)["total"] == 4096 * (10 * 32768 + 52 * 1024) * 2
        assert not guard.console, guard.console
    finally:
        context.close()


SCRIPT_BUDGET, CENSUS_BUDGET = 16_000, 8_000  # bytes, uncompressed, on the one page that loads them


def test_page_weight(site_dir):
    script = (site_dir / "javascripts" / "config_calculator.js").stat().st_size
    html = (site_dir / PAGE / "index.html").read_text(encoding="utf-8")
    start = html.index('<script type="application/json" class="fg-calc-census">')
    census = html.index("</script>", start) - start
    print(f"\ncalculator: script {script / 1e3:.1f} kB, census {census / 1e3:.1f} kB")
    assert script <= SCRIPT_BUDGET and census <= CENSUS_BUDGET, (script, census)
    assert "config_calculator.js" in html
    loaders = [p.parent.relative_to(site_dir).as_posix() for p in site_dir.rglob("index.html")
               if "config_calculator.js" in p.read_text(encoding="utf-8")]
    assert loaders == [PAGE.strip("/")], f"pages that load the calculator's script: {loaders}"
