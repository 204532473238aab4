"""docs/data/models.yaml, the hook that renders it, and the calculators against it.

Proves: twenty-two models, each field a value with a source the model lists,
each source complete (repo and file, or arXiv id and place, or library file and
version), each arXiv id in docs/references.bib; a broken entry is refused with
a message that names it; every latent-attention row carries its value width
(``v_head_dim``: 128, or 256 for GLM-5), and a bad one is refused; the layer
patterns built from the data equal the
published ``layer_types`` that the transformers configs derive for the same
models (when the library is installed), DeepSeek-V4's compressed layers
included; the cache sizes the page shows equal a layer-by-layer sum written out
here, and, for nine of the 2025-26 models, a sum written from their configs'
numbers alone; the MLA models cache 576 numbers per token (DeepSeek-V3's 56.9x);
the page holds every placeholder and the rendered tables name every model with
a mark on every cell.
"""

from __future__ import annotations

import copy
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("models_table_hook", ROOT / "hooks" / "models_table.py")
hook = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hook)

MODELS = hook.load_models()
BY_NAME = {m["name"]: m for m in MODELS}
BIB = (ROOT / "docs" / "references.bib").read_text(encoding="utf-8")

try:
    import transformers
except ImportError:  # pragma: no cover - depends on the environment
    transformers = None


def test_the_models():
    assert sorted(BY_NAME) == sorted([
        "Llama 2 7B", "Llama 3.1 8B", "Llama 4 Scout", "Mistral 7B", "Gemma 2 9B", "Gemma 3 27B",
        "Qwen3 8B", "Qwen3-Next 80B-A3B", "DeepSeek-V3", "gpt-oss-120b", "OLMo 2 7B", "Kimi K2",
        # 2025-26
        "Llama 4 Maverick", "gpt-oss-20b", "OLMo 3 7B", "MiniMax M2", "Qwen3.5 27B", "DeepSeek-V3.2-Exp",
        "GLM-5", "DeepSeek-V4-Flash", "DeepSeek-V4-Pro", "Kimi Linear 48B-A3B",
    ])


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_every_cell_has_a_value_and_a_listed_source(name):
    model = BY_NAME[name]
    for field, _ in hook.COLUMNS:
        cell = model[field]
        assert cell["value"] not in (None, ""), field
        assert cell["source"] in model["sources"], field
    for key, source in model["sources"].items():
        for part in hook.SOURCE_KINDS[key]:
            assert str(source[part]).strip(), (key, part)
        if key == "paper":
            assert re.fullmatch(r"\d{4}\.\d{5}", source["arxiv"])
            assert f"eprint        = {{{source['arxiv']}}}" in BIB, f"{name}: arXiv:{source['arxiv']} not in references.bib"
        if key == "code":
            assert source["repo"] == "huggingface/transformers"
            assert (Path(transformers.__file__).parent.parent / source["file"].removeprefix("src/")).exists() \
                if transformers else True


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda m: m["heads"].pop("source"), r"heads must be \{value: \.\.\., source: \.\.\.\}"),
        (lambda m: m["heads"].update(source="blog"), r"heads cites source 'blog', which the model does not list"),
        (lambda m: m["sinks"].update(value=None), r"sinks has no value"),
        (lambda m: m["sources"]["config"].pop("file"), r"source 'config' lacks \['file'\]"),
        (lambda m: m["layer_pattern"]["value"].update(local="global_attention"), r"local must be one of"),
        (lambda m: m["layer_pattern"]["value"].pop("window"), r"a sliding pattern needs a window"),
        (lambda m: m["kv_heads"].update(value=0), r"kv_heads must be a positive int, got 0"),
        (lambda m: m.pop("positions"), r"positions must be \{value"),
    ],
)
def test_a_broken_entry_is_refused(mutate, match):
    model = copy.deepcopy(BY_NAME["Gemma 3 27B"])
    mutate(model)
    with pytest.raises(ValueError, match=match):
        hook.check_model(model)


def test_an_mla_entry_needs_its_latent_sizes():
    model = copy.deepcopy(BY_NAME["DeepSeek-V3"])
    model.pop("kv_lora_rank")
    with pytest.raises(ValueError, match=r"kv_lora_rank must be \{value"):
        hook.check_model(model)


@pytest.mark.parametrize(
    "name, mutate, match",
    [
        ("Kimi Linear 48B-A3B", lambda p: p.update(full_layers=[3, 27]), r"full_layers must be sorted distinct"),
        ("Kimi Linear 48B-A3B", lambda p: p.update(full_layers=[7, 3]), r"full_layers must be sorted distinct"),
        ("Kimi Linear 48B-A3B", lambda p: p.update(every=4), r"full_layers must be .* with every: null"),
        ("DeepSeek-V4-Flash", lambda p: p["compress_ratios"].pop(), r"compress_ratios must be one int >= 0 per layer"),
        ("DeepSeek-V4-Flash", lambda p: p["compress_ratios"].__setitem__(0, -4), r"compress_ratios must be one int"),
        ("DeepSeek-V4-Flash", lambda p: p.update(local="linear_attention"), r"with local: sliding_attention"),
    ],
)
def test_a_broken_new_pattern_is_refused(name, mutate, match):
    model = copy.deepcopy(BY_NAME[name])
    mutate(model["layer_pattern"]["value"])
    with pytest.raises(ValueError, match=match):
        hook.check_model(model)


VALUE_WIDTHS = {"DeepSeek-V3": 128, "Kimi K2": 128, "DeepSeek-V3.2-Exp": 128, "GLM-5": 256,
                "Kimi Linear 48B-A3B": 128}  # v_head_dim of each released config.json


def test_every_latent_row_carries_its_value_width():
    assert {m["name"]: m["v_head_dim"]["value"] for m in MODELS if "v_head_dim" in m} == VALUE_WIDTHS
    assert sorted(VALUE_WIDTHS) == sorted(m["name"] for m in MODELS if m["attention"]["value"] == "MLA")
    for name in VALUE_WIDTHS:
        assert BY_NAME[name]["v_head_dim"]["source"] == "config"


@pytest.mark.parametrize(
    "name, mutate, match",
    [
        ("DeepSeek-V3", lambda m: m["v_head_dim"].update(value=0), r"v_head_dim must be a positive int, got 0"),
        ("GLM-5", lambda m: m["v_head_dim"].update(value="256"), r"v_head_dim must be a positive int, got '256'"),
        ("Kimi K2", lambda m: m["v_head_dim"].pop("source"), r"v_head_dim must be \{value"),
        ("Gemma 3 27B", lambda m: m.update(v_head_dim={"value": 128, "source": "config"}),
         r"v_head_dim is a latent model's field"),
    ],
)
def test_a_broken_value_width_is_refused(name, mutate, match):
    model = copy.deepcopy(BY_NAME[name])
    mutate(model)
    with pytest.raises(ValueError, match=match):
        hook.check_model(model)


def test_an_index_key_must_be_a_positive_int():
    model = copy.deepcopy(BY_NAME["DeepSeek-V3.2-Exp"])
    model["index_head_dim"]["value"] = 0
    with pytest.raises(ValueError, match=r"index_head_dim must be a positive int, got 0"):
        hook.check_model(model)


# --- the calculators agree with the data -----------------------------------------

HF_CONFIGS = {  # the transformers config class for each model with local layers, built with its published values
    "Gemma 2 9B": ("Gemma2Config", {}),
    "Gemma 3 27B": ("Gemma3TextConfig", {"sliding_window_pattern": 6}),
    "gpt-oss-120b": ("GptOssConfig", {}),
    "Llama 4 Scout": ("Llama4TextConfig", {}),
    "Qwen3-Next 80B-A3B": ("Qwen3NextConfig", {}),
    "Mistral 7B": None,  # MistralConfig has no layer_types: every layer uses `sliding_window`
    "Llama 4 Maverick": ("Llama4TextConfig", {}),
    "gpt-oss-20b": ("GptOssConfig", {}),
    "OLMo 3 7B": ("Olmo3Config", {}),
    "Qwen3.5 27B": ("Qwen3_5TextConfig", {}),
    "Kimi Linear 48B-A3B": ("KimiLinearConfig", {"linear_attn_config": {  # the released lists, counted from 1
        "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26],
        "full_attn_layers": [4, 8, 12, 16, 20, 24, 27],
        "num_heads": 32, "head_dim": 128, "short_conv_kernel_size": 4}}),
}


@pytest.mark.parametrize("name", sorted(n for n, c in HF_CONFIGS.items() if c))
def test_layer_types_equal_the_library_configs(name):
    if transformers is None:
        pytest.skip("transformers is not installed")
    model = BY_NAME[name]
    cls, extra = HF_CONFIGS[name]
    config = getattr(transformers, cls)(num_hidden_layers=model["layers"]["value"], **extra)
    assert config.layer_types == hook.layer_types(model)


@pytest.mark.parametrize("name", ["DeepSeek-V4-Flash", "DeepSeek-V4-Pro"])
def test_compressed_layers_equal_the_library_config(name):
    """DeepseekV4Config turns the released compress_ratios into layer kinds: 0 window
    only, 4 compressed sparse (with the indexer), 128 heavily compressed."""
    if transformers is None:
        pytest.skip("transformers is not installed")
    model = BY_NAME[name]
    pattern = model["layer_pattern"]["value"]
    config = transformers.DeepseekV4Config(num_hidden_layers=model["layers"]["value"],
                                           compress_ratios=pattern["compress_ratios"])
    kind = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}
    assert config.layer_types == [kind[m] for m in pattern["compress_ratios"]]
    assert config.compress_rates["compressed_sparse_attention"] == pattern["indexed_ratio"]
    assert config.sliding_window == pattern["window"]  # 128 here and in the library


def test_published_layer_counts():
    """Counts stated by the configs: gpt-oss-120b alternates 18 x [sliding, full];
    Gemma 3 27B has 62 layers with a global one every sixth; Llama 4 Scout's
    no_rope_layers is [1, 1, 1, 0] x 12 and its RoPE layers are the chunked ones."""
    assert hook.layer_types(BY_NAME["gpt-oss-120b"]) == ["sliding_attention", "full_attention"] * 18
    gemma = hook.layer_types(BY_NAME["Gemma 3 27B"])
    assert [i for i, t in enumerate(gemma) if t == "full_attention"] == list(range(5, 62, 6))
    assert hook.layer_types(BY_NAME["Llama 4 Scout"]) == (["chunked_attention"] * 3 + ["full_attention"]) * 12
    assert hook.layer_types(BY_NAME["Mistral 7B"]) == ["sliding_attention"] * 32
    assert hook.layer_types(BY_NAME["Qwen3 8B"]) == ["full_attention"] * 36


def _by_hand(model, seq_len):
    """bytes = 2 x (sum over layers of the tokens each keeps) x numbers per token."""
    pattern = model["layer_pattern"]["value"]
    if model["attention"]["value"] == "MLA":
        per_token = model["kv_lora_rank"]["value"] + model["rope_head_dim"]["value"]
    else:
        per_token = 2 * model["kv_heads"]["value"] * model["head_dim"]["value"]
    tokens = 0
    for i in range(model["layers"]["value"]):
        local = pattern["local"] is not None and (pattern["every"] is None or (i + 1) % pattern["every"] != 0)
        if not local:
            tokens += seq_len
        elif pattern["local"] == "sliding_attention":
            tokens += min(seq_len, pattern["window"])
        elif pattern["local"] == "chunked_attention":
            tokens += min(seq_len, pattern["chunk"])
        # linear_attention layers keep a fixed-size state, not a cache
    return 2 * per_token * tokens


def _by_hand_with_extensions(model, seq_len):
    """_by_hand, plus the three extensions: uneven global layers, an indexer's key,
    and DeepSeek-V4's window + compressed entries with key = value."""
    pattern = model["layer_pattern"]["value"]
    index_key = model["index_head_dim"]["value"] if "index_head_dim" in model else 0
    if "compress_ratios" in pattern:
        width = model["kv_heads"]["value"] * model["head_dim"]["value"]  # key = value: stored once
        numbers = 0
        for m in pattern["compress_ratios"]:
            numbers += min(seq_len, pattern["window"]) * width
            if m:
                numbers += (seq_len // m) * (width + (index_key if m == pattern["indexed_ratio"] else 0))
        return 2 * numbers
    if "full_layers" in pattern:
        per_token = model["kv_lora_rank"]["value"] + model["rope_head_dim"]["value"]
        return 2 * per_token * seq_len * len(pattern["full_layers"])
    if index_key:
        return 2 * (model["kv_lora_rank"]["value"] + model["rope_head_dim"]["value"] + index_key) \
            * seq_len * model["layers"]["value"]
    return _by_hand(model, seq_len)


@pytest.mark.parametrize("name", sorted(BY_NAME))
@pytest.mark.parametrize("seq_len", hook.LENGTHS + (1, 100, 4099))
def test_cache_sizes_equal_a_layer_by_layer_sum(name, seq_len):
    assert hook.cache_bytes(BY_NAME[name], seq_len) == _by_hand_with_extensions(BY_NAME[name], seq_len)


# Numbers per token, layer by layer, written from each released config alone (no data
# file, no calculator): (T -> numbers cached after T tokens); bytes = 2 x numbers.
CONFIG_SUMS = {
    # 61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64 + index_head_dim 128)
    "DeepSeek-V3.2-Exp": lambda t: 61 * (512 + 64 + 128) * t,
    # 78 layers, the same three widths
    "GLM-5": lambda t: 78 * (512 + 64 + 128) * t,
    # full_attn_layers 4, 8, ..., 24, 27: 7 MLA layers of 512 + 64; 20 KDA layers cache nothing
    "Kimi Linear 48B-A3B": lambda t: 7 * (512 + 64) * t,
    # 62 layers x 2 (key, value) x 8 heads x 128
    "MiniMax M2": lambda t: 62 * 2 * 8 * 128 * t,
    # 64 layers, full_attention_interval 4: 16 layers x 2 x 4 x 256
    "Qwen3.5 27B": lambda t: 16 * 2 * 4 * 256 * t,
    # 24 layers alternating: 12 x 2 x 8 x 64 over t, 12 over min(t, 128)
    "gpt-oss-20b": lambda t: 12 * 2 * 8 * 64 * (t + min(t, 128)),
    # 32 layers, 3 sliding (4096) : 1 full, 2 x 32 x 128 each
    "OLMo 3 7B": lambda t: 2 * 32 * 128 * (8 * t + 24 * min(t, 4096)),
    # 43 layers, each 128 window entries of 512 (key = value); 21 layers one 512 + 128
    # entry per 4 tokens, 20 layers one 512 entry per 128 tokens
    "DeepSeek-V4-Flash": lambda t: 43 * 512 * min(t, 128) + 21 * (t // 4) * 640 + 20 * (t // 128) * 512,
    # 61 layers: 30 with ratio 4 (and the indexer), 31 with ratio 128
    "DeepSeek-V4-Pro": lambda t: 61 * 512 * min(t, 128) + 30 * (t // 4) * 640 + 31 * (t // 128) * 512,
}


@pytest.mark.parametrize("name", sorted(CONFIG_SUMS))
@pytest.mark.parametrize("seq_len", (1, 127, 128, 129, 4096, 8192, 131072))
def test_new_caches_equal_a_sum_written_from_the_config(name, seq_len):
    assert hook.cache_bytes(BY_NAME[name], seq_len) == 2 * CONFIG_SUMS[name](seq_len)


def test_uneven_and_compressed_patterns_are_named_in_the_table():
    kimi = hook.cell(BY_NAME["Kimi Linear 48B-A3B"], "layer_pattern")
    assert kimi == "7 full of 27, the others linear: full at 4, 8, 12, 16, 20, 24, 27<sup>c</sup>"
    flash = hook.cell(BY_NAME["DeepSeek-V4-Flash"], "layer_pattern")
    assert flash.startswith("all 43 sliding: 2 window only, 21 with 1 compressed entry per 4 tokens and an indexer, "
                            "20 with 1 compressed entry per 128 tokens; window 128")
    cache = hook.render_cache(MODELS)
    assert "704 (latent 512 + rotary key 64 + index key 128)" in cache
    assert "| DeepSeek-V4-Flash | 512 per window token and per compressed entry" in cache


def test_new_cache_figures_worth_remembering():
    mib = 2**20
    # The indexer adds 128 to the 576 of latent attention: 704, 22% more.
    assert hook.elements_per_token(BY_NAME["DeepSeek-V3.2-Exp"]) == 704
    # Kimi Linear caches for 7 layers what DeepSeek-V3 caches for 61.
    assert hook.cache_bytes(BY_NAME["Kimi Linear 48B-A3B"], 131072) == 1008 * mib
    # DeepSeek-V4-Flash at 128k tokens: 865 MiB against 5.38 GiB with full layers of the
    # same width, though every query can still reach every token through the compressed entries.
    flash = BY_NAME["DeepSeek-V4-Flash"]
    assert round(hook.cache_bytes(flash, 131072) / mib) == 865
    assert hook.cache_bytes(flash, 131072, all_global=True) == 2 * 43 * 512 * 131072


def test_cache_figures_worth_remembering():
    gib = 2**30
    # Llama 2 7B: 0.5 MiB per token, as the KV-cache page says.
    assert hook.cache_bytes(BY_NAME["Llama 2 7B"], 4096) == 2 * gib
    # DeepSeek-V3 and Kimi K2: 576 numbers per token and layer, 61 layers.
    for name in ("DeepSeek-V3", "Kimi K2"):
        assert hook.elements_per_token(BY_NAME[name]) == 576
        assert hook.cache_bytes(BY_NAME[name], 131072) == 61 * 576 * 2 * 131072
    mha = 2 * BY_NAME["DeepSeek-V3"]["heads"]["value"] * 128  # 128 heads of 128 for keys and for values
    assert round(mha / 576, 1) == 56.9
    # Gemma 3 27B at 128k: 52 layers capped at 1024 tokens, 10 global.
    assert hook.cache_bytes(BY_NAME["Gemma 3 27B"], 131072) == 2 * 4096 * (52 * 1024 + 10 * 131072)
    # Mistral 7B never caches more than its window, whatever the length.
    assert hook.cache_bytes(BY_NAME["Mistral 7B"], 131072) == hook.cache_bytes(BY_NAME["Mistral 7B"], 4096)


# --- the page ---------------------------------------------------------------------


def test_page_holds_every_placeholder():
    page = (ROOT / "docs" / "modern" / "models.md").read_text(encoding="utf-8")
    assert set(hook.PLACEHOLDER.findall(page)) == set(hook.RENDERERS)


def test_rendered_tables_name_every_model_and_mark_every_cell():
    attention = hook.render_attention(MODELS)
    rows = [line for line in attention.splitlines() if line.startswith("| ") and "<sup>" in line]
    tables = len(hook.COLUMN_GROUPS)  # the columns are split over narrower tables
    assert len(rows) == tables * len(MODELS)
    for index, model in enumerate(MODELS):
        mine = [rows[t * len(MODELS) + index] for t in range(tables)]
        assert all(row.startswith(f"| {model['name']} |") for row in mine)
        cells = [c.strip() for row in mine for c in row.strip("|").split(" | ")[1:]
                 if "<sup>" in c]
        assert len(cells) == len(hook.COLUMNS)
        assert all(re.search(r"<sup>[cpm]</sup>$", c) for c in cells), mine
    cache = hook.render_cache(MODELS)
    assert "8.58 GiB" in cache and all(m["name"] in cache for m in MODELS)
    sources = hook.render_sources(MODELS)
    assert all(f"arXiv:{m['sources']['paper']['arxiv']}" in sources for m in MODELS if "paper" in m["sources"])


def test_unknown_placeholder_fails():
    from mkdocs.exceptions import PluginError

    with pytest.raises(PluginError, match=r"unknown placeholder <!-- models:table -->"):
        hook.replace_placeholders("<!-- models:table -->", MODELS)


# --- exercises on docs/modern/models.md ------------------------------------------


def test_exercise_smallest_caches():
    """Exercise 1: DeepSeek-V4-Flash caches least at 8k (59 MiB), Mistral 7B at 128k (512 MiB),
    V4-Flash next (865 MiB); Qwen3-Next stays at 192 MiB and 3 GiB."""
    at_8k = {name: hook.cache_bytes(m, 8192) for name, m in BY_NAME.items()}
    at_128k = {name: hook.cache_bytes(m, 131072) for name, m in BY_NAME.items()}
    assert min(at_8k, key=at_8k.get) == "DeepSeek-V4-Flash" and round(at_8k["DeepSeek-V4-Flash"] / 2**20) == 59
    assert min(at_128k, key=at_128k.get) == "Mistral 7B" and at_128k["Mistral 7B"] == 512 * 2**20
    assert sorted(at_128k, key=at_128k.get)[1] == "DeepSeek-V4-Flash"
    assert at_8k["Qwen3-Next 80B-A3B"] == 192 * 2**20 and at_128k["Qwen3-Next 80B-A3B"] == 3 * 2**30


def test_exercise_gemma3_at_32k():
    """Exercise 2: 4096 numbers per global layer; 2.91 GiB at 32k tokens."""
    gemma = BY_NAME["Gemma 3 27B"]
    assert hook.elements_per_token(gemma) == 4096
    size = hook.cache_bytes(gemma, 32768)
    assert size == 4096 * (10 * 32768 + 52 * 1024) * 2
    assert f"{size / 2**30:.2f}" == "2.91"
