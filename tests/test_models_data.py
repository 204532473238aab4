"""docs/data/models.yaml, the hook that renders it, and the calculators against it.

Proves: twelve models, each field a value with a source the model lists, each
source complete (repo and file, or arXiv id and place, or library file and
version), each arXiv id in docs/references.bib; a broken entry is refused with
a message that names it; the layer patterns built from the data equal the
published ``layer_types`` that the transformers configs derive for the same
models (when the library is installed); the cache sizes the page shows equal a
layer-by-layer sum written out here; the MLA models cache 576 numbers per token
(DeepSeek-V3's 56.9x); the page holds every placeholder and the rendered
tables name every model with a mark on every cell.
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


def test_the_twelve_models():
    assert sorted(BY_NAME) == sorted([
        "Llama 2 7B", "Llama 3.1 8B", "Llama 4 Scout", "Mistral 7B", "Gemma 2 9B", "Gemma 3 27B",
        "Qwen3 8B", "Qwen3-Next 80B-A3B", "DeepSeek-V3", "gpt-oss-120b", "OLMo 2 7B", "Kimi K2",
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


# --- the calculators agree with the data -----------------------------------------

HF_CONFIGS = {  # the transformers config class for each model with local layers, built with its published values
    "Gemma 2 9B": ("Gemma2Config", {}),
    "Gemma 3 27B": ("Gemma3TextConfig", {"sliding_window_pattern": 6}),
    "gpt-oss-120b": ("GptOssConfig", {}),
    "Llama 4 Scout": ("Llama4TextConfig", {}),
    "Qwen3-Next 80B-A3B": ("Qwen3NextConfig", {}),
    "Mistral 7B": None,  # MistralConfig has no layer_types: every layer uses `sliding_window`
}


@pytest.mark.parametrize("name", sorted(n for n, c in HF_CONFIGS.items() if c))
def test_layer_types_equal_the_library_configs(name):
    if transformers is None:
        pytest.skip("transformers is not installed")
    model = BY_NAME[name]
    cls, extra = HF_CONFIGS[name]
    config = getattr(transformers, cls)(num_hidden_layers=model["layers"]["value"], **extra)
    assert config.layer_types == hook.layer_types(model)


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


@pytest.mark.parametrize("name", sorted(BY_NAME))
@pytest.mark.parametrize("seq_len", hook.LENGTHS)
def test_cache_sizes_equal_a_layer_by_layer_sum(name, seq_len):
    assert hook.cache_bytes(BY_NAME[name], seq_len) == _by_hand(BY_NAME[name], seq_len)


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
    """Exercise 1: Qwen3-Next caches least at 8k (192 MiB), Mistral 7B at 128k (512 MiB)."""
    at_8k = {name: hook.cache_bytes(m, 8192) for name, m in BY_NAME.items()}
    at_128k = {name: hook.cache_bytes(m, 131072) for name, m in BY_NAME.items()}
    assert min(at_8k, key=at_8k.get) == "Qwen3-Next 80B-A3B" and at_8k["Qwen3-Next 80B-A3B"] == 192 * 2**20
    assert min(at_128k, key=at_128k.get) == "Mistral 7B" and at_128k["Mistral 7B"] == 512 * 2**20
    assert sorted(at_128k, key=at_128k.get)[1] == "Qwen3-Next 80B-A3B" and at_128k["Qwen3-Next 80B-A3B"] == 3 * 2**30


def test_exercise_gemma3_at_32k():
    """Exercise 2: 4096 numbers per global layer; 2.91 GiB at 32k tokens."""
    gemma = BY_NAME["Gemma 3 27B"]
    assert hook.elements_per_token(gemma) == 4096
    size = hook.cache_bytes(gemma, 32768)
    assert size == 4096 * (10 * 32768 + 52 * 1024) * 2
    assert f"{size / 2**30:.2f}" == "2.91"
