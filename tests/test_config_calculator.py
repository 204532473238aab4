"""snippets/modern/config_calculator.py against caches that models really hold.

Proves: for random small configurations, the bytes the calculator predicts equal
the ``.nbytes`` of the caches tiny ``transformers`` 5.23 models (Llama and Qwen2
with grouped-query heads, Gemma 3 with sliding layers, Gemma 3n with shared
key/value layers and a nested ``text_config``, Qwen3-Next with Gated DeltaNet
layers) hold after a forward of T tokens, with one named difference: a
transformers sliding layer keeps W - 1 tokens where the guide counts W; the
latent cache equals the bytes of the guide's own ``LatentCache``; every row of
docs/data/models.yaml that a config can describe gives the cache the site's
table shows; every row of the page's form census (hooks/config_calculator.py)
gives numbers, the table's cache and FLOPs summed layer by layer here, except
the two whose linear-layer sizes the census lacks (Qwen3.5 27B; Kimi Linear,
whose KDA layers the calculator does not read), which get the named error; the
FLOP counts equal loops over queries and keys written out
here; missing or wrong fields are refused by name.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snippets.modern import config_calculator as cc
from snippets.modern.latent_attention import MultiHeadLatentAttention

transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("models_table_hook", ROOT / "hooks" / "models_table.py")
hook = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hook)
spec = importlib.util.spec_from_file_location("config_calculator_hook", ROOT / "hooks" / "config_calculator.py")
census_hook = importlib.util.module_from_spec(spec)
spec.loader.exec_module(census_hook)

SETTINGS = dict(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])


def held_bytes(cache) -> int:
    """Sum of .nbytes of every tensor a transformers cache holds, layer by layer."""
    total = 0
    for layer in cache.layers:
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            total += t.nbytes if isinstance(t, torch.Tensor) else 0
        for name in ("conv_states", "recurrent_states"):
            for t in (getattr(layer, name, None) or {}).values():
                total += t.nbytes if isinstance(t, torch.Tensor) else 0
    return total


def run(model, tokens: int):
    model.eval()
    torch.manual_seed(0)
    with torch.no_grad():
        return model(torch.randint(0, 40, (1, tokens)), use_cache=True).past_key_values


@st.composite
def heads(draw):
    h_kv = draw(st.sampled_from([1, 2]))
    return h_kv * draw(st.sampled_from([1, 2])), h_kv, draw(st.sampled_from([4, 8]))


def _small(h, h_kv, d, layers):
    return dict(vocab_size=40, hidden_size=16, intermediate_size=16, num_hidden_layers=layers,
                num_attention_heads=h, num_key_value_heads=h_kv, head_dim=d)


@settings(max_examples=6, **SETTINGS)
@given(shape=heads(), layers=st.integers(1, 3), tokens=st.integers(1, 9),
       family=st.sampled_from(["llama", "qwen2"]))
def test_grouped_query_cache_equals_the_tensors_transformers_keeps(shape, layers, tokens, family):
    h, h_kv, d = shape
    cls = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
           "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM)}[family]
    config = cls[0](**_small(h, h_kv, d, layers))
    got = held_bytes(run(cls[1](config), tokens))
    ours = cc.cache_from_config(config.to_dict(), tokens, kv_dtype_bytes=4)
    assert ours["total"] == got == layers * tokens * 2 * h_kv * d * 4


@settings(max_examples=6, **SETTINGS)
@given(shape=heads(), every=st.integers(1, 3), tokens=st.integers(1, 9), window=st.integers(2, 6))
def test_sliding_layers_equal_gemma3_caches_up_to_one_token(shape, every, tokens, window):
    h, h_kv, d = shape
    types = (["sliding_attention"] * (every - 1) + ["full_attention"]) * 2
    config = transformers.Gemma3TextConfig(**_small(h, h_kv, d, len(types)), sliding_window=window,
                                           layer_types=types)
    got = held_bytes(run(transformers.Gemma3ForCausalLM(config), tokens))
    ours = cc.cache_from_config(config.to_dict(), tokens, kv_dtype_bytes=4)
    # transformers keeps W - 1 keys (the new query brings the W-th); the guide counts W
    trimmed = ours["bytes_per_token"]["sliding_attention"] * (tokens >= window)
    assert ours["total"] - trimmed == got
    assert ours["bytes"]["sliding_attention"] == (
        types.count("sliding_attention") * min(tokens, window) * 2 * h_kv * d * 4)


@settings(max_examples=4, **SETTINGS)
@given(shape=heads(), shared=st.integers(0, 3), tokens=st.integers(1, 8), window=st.integers(2, 6))
def test_shared_layers_keep_nothing_as_in_gemma3n(shape, shared, tokens, window):
    h, h_kv, d = shape
    types = ["sliding_attention", "full_attention"] * 3
    text = transformers.Gemma3nTextConfig(
        **_small(h, h_kv, d, 6), num_kv_shared_layers=shared, sliding_window=window, layer_types=types,
        vocab_size_per_layer_input=40, hidden_size_per_layer_input=4, laurel_rank=4,
        altup_num_inputs=2, activation_sparsity_pattern=[0.0] * 6)
    got = held_bytes(run(transformers.Gemma3nForCausalLM(text), tokens))
    ours = cc.cache_from_config({"text_config": text.to_dict()}, tokens, kv_dtype_bytes=4)
    trimmed = ours["bytes_per_token"]["sliding_attention"] * (tokens >= window)
    assert ours["total"] - trimmed == got
    assert ours["layers"]["shared"] == shared
    assert sum(ours["layers"][k] for k in cc.SOFTMAX) == 6 - shared


def _qwen3_next(n_k, n_v, d_k, d_v, kernel):
    return transformers.Qwen3NextConfig(
        **_small(2, 1, 8, 4), linear_num_key_heads=n_k, linear_num_value_heads=n_v,
        linear_key_head_dim=d_k, linear_value_head_dim=d_v, linear_conv_kernel_dim=kernel,
        num_experts=2, num_experts_per_tok=1, moe_intermediate_size=8, shared_expert_intermediate_size=8)


@settings(max_examples=4, **SETTINGS)
@given(n_k=st.integers(1, 2), ratio=st.integers(1, 2), d_k=st.sampled_from([4, 8]),
       d_v=st.sampled_from([2, 6]), kernel=st.integers(2, 4), tokens=st.integers(1, 7))
def test_linear_layers_hold_the_state_qwen3_next_keeps(n_k, ratio, d_k, d_v, kernel, tokens):
    config = _qwen3_next(n_k, n_k * ratio, d_k, d_v, kernel)
    got = held_bytes(run(transformers.Qwen3NextForCausalLM(config), tokens))
    ours = cc.cache_from_config(config.to_dict(), tokens, kv_dtype_bytes=4)
    assert ours["total"] == got
    conv = (2 * n_k * d_k + n_k * ratio * d_v) * kernel  # written out: conv channels x kernel
    assert ours["bytes"]["linear_attention"] == 3 * 4 * (conv + n_k * ratio * d_k * d_v)


def test_in_bfloat16_the_recurrent_state_stays_float32():
    config = _qwen3_next(2, 4, 8, 6, 3)
    cache = run(transformers.Qwen3NextForCausalLM(config).to(torch.bfloat16), 5)
    assert held_bytes(cache) == cc.cache_from_config(config.to_dict(), 5)["total"]


@settings(max_examples=6, **SETTINGS)
@given(h=st.integers(1, 3), rank=st.integers(1, 6), rope=st.sampled_from([2, 4]), layers=st.integers(1, 3),
       tokens=st.integers(1, 8))
def test_latent_cache_equals_the_guides_latent_cache(h, rank, rope, layers, tokens):
    attn = MultiHeadLatentAttention(16, h, kv_lora_rank=rank, q_lora_rank=None, qk_nope_head_dim=4,
                                    rope_dim=rope, v_head_dim=3)
    cache = attn.make_cache(1, tokens)
    attn(torch.randn(1, tokens, 16), cache=cache)
    config = {"num_hidden_layers": layers, "num_attention_heads": h, "kv_lora_rank": rank,
              "qk_rope_head_dim": rope, "qk_nope_head_dim": 4, "v_head_dim": 3}
    assert cc.cache_from_config(config, tokens, kv_dtype_bytes=4)["total"] == layers * cache.nbytes


def config_of(model: dict) -> dict:
    """A config.json built from one row of docs/data/models.yaml."""
    pattern = model["layer_pattern"]["value"]
    out = {"num_hidden_layers": model["layers"]["value"], "num_attention_heads": model["heads"]["value"],
           "num_key_value_heads": model["kv_heads"]["value"], "head_dim": model["head_dim"]["value"],
           "layer_types": hook.layer_types(model), "sliding_window": pattern.get("window"),
           "attention_chunk_size": pattern.get("chunk")}
    if "kv_lora_rank" in model:
        rope = model["rope_head_dim"]["value"]
        out.update(kv_lora_rank=model["kv_lora_rank"]["value"], qk_rope_head_dim=rope,
                   qk_nope_head_dim=model["head_dim"]["value"] - rope, v_head_dim=model["v_head_dim"]["value"],
                   index_head_dim=model.get("index_head_dim", {}).get("value"))
    out.update({f"linear_{f}": 1 for f in ("num_key_heads", "num_value_heads", "key_head_dim",
                                            "value_head_dim", "conv_kernel_dim")})
    return out


ROWS = [m for m in hook.load_models() if m.get("key_is_value", {}).get("value") is not True]


def test_the_rows_left_out_are_only_deepseek_v4():
    assert sorted(m["name"] for m in hook.load_models() if m not in ROWS) == [
        "DeepSeek-V4-Flash", "DeepSeek-V4-Pro"]  # one key = value head with compressed entries


@pytest.mark.parametrize("model", ROWS, ids=[m["name"] for m in ROWS])
def test_every_row_of_the_models_table_gives_the_tables_cache(model):
    for length in hook.LENGTHS:
        ours = cc.cache_from_config(config_of(model), length)
        softmax = sum(ours["bytes"][k] for k in cc.SOFTMAX)  # the table leaves states out
        assert softmax == hook.cache_bytes(model, length), (model["name"], length)


# The form's census: each row as hooks/config_calculator.py writes it for the page.
CENSUS = census_hook.census()
BY_NAME = {m["name"]: m for m in hook.load_models()}
LINEAR = sorted(census_hook.LINEAR_FIELDS)
READ = [e for e in CENSUS if None not in e["config"].values()]


def test_only_the_rows_without_linear_sizes_leave_a_field_null():
    assert [e["name"] for e in CENSUS] == [m["name"] for m in ROWS]
    nulls = {e["name"]: sorted(k for k, v in e["config"].items() if v is None) for e in CENSUS if e not in READ}
    assert nulls == {"Qwen3.5 27B": LINEAR, "Kimi Linear 48B-A3B": LINEAR}  # Kimi Linear's are KDA's
    for entry in CENSUS:
        if entry not in READ:
            for call in (cc.cache_from_config, cc.flops_from_config):
                with pytest.raises(ValueError, match=r"config\['linear_num_key_heads'\] must be an int >= 1, got None"):
                    call(entry["config"], 8192)


def census_decode_by_hand(model: dict, config: dict, t: int) -> int:
    """FLOPs of the query at position t, summed layer by layer from the row itself."""
    pattern, heads = model["layer_pattern"]["value"], model["heads"]["value"]
    d_qk = model["head_dim"]["value"]
    d_v = model["v_head_dim"]["value"] if "kv_lora_rank" in model else d_qk
    total = 0
    for kind in hook.layer_types(model):
        if kind == "linear_attention":  # read the state, S k, the rank-one write
            total += 3 * 2 * config["linear_num_value_heads"] * config["linear_key_head_dim"] * config[
                "linear_value_head_dim"]
            continue
        keys = {"full_attention": t, "sliding_attention": min(t, pattern.get("window") or t),
                "chunked_attention": (t - 1) % (pattern.get("chunk") or 1) + 1}[kind]
        total += 2 * heads * (d_qk + d_v) * keys
    return total


@pytest.mark.parametrize("entry", READ, ids=[e["name"] for e in READ])
def test_every_census_row_with_its_fields_gives_the_tables_cache_and_its_flops(entry):
    model = BY_NAME[entry["name"]]
    for length in (1, *hook.LENGTHS):
        ours = cc.cache_from_config(entry["config"], length)
        assert sum(ours["bytes"][k] for k in cc.SOFTMAX) == hook.cache_bytes(model, length), length
        flops = cc.flops_from_config(entry["config"], length)
        assert flops["decode_total"] == census_decode_by_hand(model, entry["config"], length), length
    if "kv_lora_rank" in model:
        assert entry["config"]["v_head_dim"] == model["v_head_dim"]["value"]


def test_the_latent_census_rows_count_their_value_width():
    config = CENSUS[[e["name"] for e in CENSUS].index("GLM-5")]["config"]
    assert (config["qk_nope_head_dim"], config["qk_rope_head_dim"], config["v_head_dim"]) == (192, 64, 256)
    # 78 layers x 64 heads x 2 (256 + 256) per key read, 32,768 keys for the last query
    assert cc.flops_from_config(config, 32768)["decode_total"] == 78 * 64 * 2 * 512 * 32768


GEMMA3 = {"num_hidden_layers": 62, "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128,
          "sliding_window": 1024, "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 10
          + ["sliding_attention"] * 2}


def test_gemma3_27b_at_32k_is_the_pages_number():
    assert cc.cache_from_config(GEMMA3, 32768)["total"] == 4096 * (10 * 32768 + 52 * 1024) * 2
    assert cc.cache_from_config(GEMMA3, 32768, 1)["total"] * 2 == cc.cache_from_config(GEMMA3, 32768)["total"]


def test_text_config_head_dim_fallback_and_use_sliding_window():
    flat = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 32}
    assert cc.cache_from_config(flat, 5)["per_token"] == 2 * 4 * 8
    assert cc.cache_from_config({"text_config": flat, "num_hidden_layers": 99}, 5) == cc.cache_from_config(flat, 5)
    mistral = {**flat, "sliding_window": 3}
    assert cc.cache_from_config(mistral, 5)["bytes"]["sliding_attention"] == 2 * 3 * 64 * 2
    qwen2 = {**mistral, "use_sliding_window": False}
    assert cc.cache_from_config(qwen2, 5)["bytes"]["full_attention"] == 2 * 5 * 64 * 2


def test_layer_patterns_without_layer_types_follow_transformers():
    qwen3_next = transformers.Qwen3NextConfig(num_hidden_layers=8)
    flat = {k: v for k, v in _qwen3_next(1, 1, 4, 4, 2).to_dict().items() if k != "layer_types"}
    ours = cc.cache_from_config({**flat, "num_hidden_layers": 8, "full_attention_interval": 4}, 3)
    assert ours["layers"]["linear_attention"] == qwen3_next.layer_types.count("linear_attention") == 6
    gemma = {k: v for k, v in GEMMA3.items() if k != "layer_types"}
    assert (cc.cache_from_config({**gemma, "sliding_window_pattern": 6}, 4096)
            == cc.cache_from_config(GEMMA3, 4096))


# --- FLOPs against loops over queries and keys ------------------------------------


def loop_flops(types, span, heads, d_qk, d_v, tokens):
    """Prefill and the last query's FLOPs, pair by pair (0-based i, j)."""
    prefill = decode = 0
    for kind in types:
        for i in range(tokens):
            for j in range(i + 1):
                if kind == "sliding_attention" and i - j >= span:
                    continue
                if kind == "chunked_attention" and i // span != j // span:
                    continue
                prefill += 2 * heads * (d_qk + d_v)
                decode += 2 * heads * (d_qk + d_v) * (i == tokens - 1)
    return prefill, decode


@pytest.mark.parametrize("kind", ["full_attention", "sliding_attention", "chunked_attention"])
@pytest.mark.parametrize("tokens", [1, 3, 4, 5, 11, 12])
def test_flops_equal_a_loop_over_pairs(kind, tokens):
    config = {"num_hidden_layers": 2, "num_attention_heads": 3, "num_key_value_heads": 1, "head_dim": 5,
              "layer_types": [kind, "full_attention"], "sliding_window": 4, "attention_chunk_size": 4}
    out = cc.flops_from_config(config, tokens)
    assert (out["prefill_total"], out["decode_total"]) == loop_flops([kind, "full_attention"], 4, 3, 5, 5, tokens)


def test_prefill_grows_by_the_decode_step_and_mla_counts_the_expanded_heads():
    config = {**GEMMA3, "layer_types": GEMMA3["layer_types"][:-2] + ["chunked_attention"] * 2,
              "attention_chunk_size": 300}
    for t in (1, 299, 300, 301, 1024, 1025, 5000):
        assert (cc.flops_from_config(config, t)["prefill_total"] - cc.flops_from_config(config, t - 1 or 1)[
            "prefill_total"] * (t > 1)) == cc.flops_from_config(config, t)["decode_total"]
    mla = {"num_hidden_layers": 1, "num_attention_heads": 2, "kv_lora_rank": 8, "qk_rope_head_dim": 2,
           "qk_nope_head_dim": 3, "v_head_dim": 4}
    assert cc.flops_from_config(mla, 6)["prefill_total"] == loop_flops(["full_attention"], 0, 2, 5, 4, 6)[0]


def test_gated_deltanet_flops_are_three_products_per_token():
    config = _qwen3_next(2, 4, 8, 6, 3).to_dict()
    out = cc.flops_from_config(config, 10)
    assert out["decode"]["linear_attention"] == 3 * 2 * 3 * 4 * 8 * 6
    assert out["prefill"]["linear_attention"] == 10 * out["decode"]["linear_attention"]


# --- named errors -----------------------------------------------------------------


BASE = {"num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 8}


@pytest.mark.parametrize("config, match", [
    ([1], r"config must be a dict.*got \[1\]"),
    ({"num_attention_heads": 4}, r"config\['num_hidden_layers'\] must be an int >= 1, got None"),
    ({**BASE, "num_key_value_heads": 0}, r"config\['num_key_value_heads'\].*got 0"),
    ({**BASE, "head_dim": 2.5}, r"config\['head_dim'\].*got 2.5"),
    ({**BASE, "head_dim": None}, r"config\['hidden_size'\].*got None"),
    ({**BASE, "layer_types": ["full_attention"]}, r"config\['layer_types'\] must list 2 of .*got"),
    ({**BASE, "layer_types": ["full_attention", "mamba"]}, r"config\['layer_types'\].*'mamba'"),
    ({**BASE, "layer_types": ["sliding_attention"] * 2}, r"config\['sliding_window'\].*got None"),
    ({**BASE, "layer_types": ["chunked_attention"] * 2}, r"config\['attention_chunk_size'\].*got None"),
    ({**BASE, "layer_types": ["linear_attention"] * 2}, r"config\['linear_num_key_heads'\].*got None"),
    ({**BASE, "kv_lora_rank": 4}, r"config\['qk_rope_head_dim'\] must be an int >= 0, got None"),
    ({**BASE, "num_kv_shared_layers": -1}, r"config\['num_kv_shared_layers'\].*got -1"),
    ({**BASE, "compress_ratios": [0, 4]}, r"config\['compress_ratios'\].*not read here, got \[0, 4\]"),
])
def test_bad_configs_are_refused_by_field(config, match):
    for fn in (lambda c: cc.cache_from_config(c, 4), lambda c: cc.flops_from_config(c, 4)):
        with pytest.raises((ValueError, TypeError), match=match):
            fn(config)


@pytest.mark.parametrize("kwargs, match", [
    ({"tokens": 0}, r"tokens must be an int >= 1, got 0"),
    ({"kv_dtype_bytes": 0.5}, r"kv_dtype_bytes must be an int >= 1, got 0.5"),
    ({"state_dtype_bytes": 0}, r"state_dtype_bytes.*got 0"),
    ({"batch": 0}, r"batch.*got 0"),
])
def test_bad_arguments_are_refused_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        cc.cache_from_config(BASE, **{"tokens": 4, **kwargs})
