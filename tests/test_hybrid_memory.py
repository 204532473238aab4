"""Hybrid layer patterns and the decoding memory calculator, against the published configs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from snippets.linear.hybrids import (
    HybridConfig,
    cache_bytes,
    kimi_linear_config,
    layer_pattern,
    pattern_from_full_layers,
    qwen3_next_config,
)

DATA = yaml.safe_load((Path(__file__).resolve().parents[1] / "docs" / "data" / "hybrids.yaml").read_text(encoding="utf-8"))
QWEN = DATA["qwen3_next"]["config"]
KIMI = DATA["kimi_linear"]["config"]


def test_every_model_names_its_source():
    for entry in DATA.values():
        assert "config.json of " in entry["source"]


@pytest.mark.parametrize("name, full, linear", [
    ("jamba", 4, 28),  # one attention layer in eight: 1:7
    ("minimax_01", 10, 70),  # seven lightning layers, then one softmax layer
    ("recurrent_gemma", 8, 18),  # two recurrent blocks, then one local attention
    ("minimax_m2", 62, 0),  # the counter-example: full attention everywhere
])
def test_other_hybrids_layer_mix(name, full, linear):
    entry = DATA[name]
    layers = [i + 1 for i in range(entry["layers"])
              if i % entry["attention_period"] == entry["attention_offset"]]
    pattern = pattern_from_full_layers(entry["layers"], layers)
    assert (pattern.count("full"), pattern.count("linear")) == (full, linear)


def test_kimi_linear_mla_layers_use_no_position_encoding():
    assert DATA["kimi_linear_mla_positions"]["nope"] is True
    assert len(KIMI["linear_attn_config"]["full_attn_layers"]) == 7


def test_three_linear_layers_per_full_layer():
    pattern = layer_pattern(8, 4)
    assert pattern == ("linear",) * 3 + ("full",) + ("linear",) * 3 + ("full",)
    qwen = layer_pattern(48, 4)
    assert all(qwen[i : i + 4].count("full") == 1 for i in range(0, 48, 4))


def test_qwen3_next_layers_from_its_config():
    cfg = qwen3_next_config(QWEN)
    assert (cfg.n_linear, cfg.n_full) == (36, 12)
    assert [i + 1 for i, t in enumerate(cfg.layer_types) if t == "full"] == list(range(4, 49, 4))
    # 2 KV heads of width 256, keys and values: 1024 numbers per token per full layer.
    assert cfg.kv_per_token == 2 * 2 * 256 == 1024
    # 32 value heads, each with a 128 x 128 state.
    assert cfg.state_per_layer == 32 * 128 * 128
    assert cfg.conv_per_layer == 3 * (2 * 16 * 128 + 32 * 128)


def test_kimi_linear_layers_from_its_config():
    cfg = kimi_linear_config(KIMI)
    lists = KIMI["linear_attn_config"]
    assert (cfg.n_linear, cfg.n_full) == (20, 7)
    # The two published lists are complements; the pattern reproduces both.
    assert [i + 1 for i, t in enumerate(cfg.layer_types) if t == "linear"] == lists["kda_layers"]
    assert [i + 1 for i, t in enumerate(cfg.layer_types) if t == "full"] == lists["full_attn_layers"]
    assert cfg.kv_per_token == 512 + 64  # MLA: latent plus shared RoPE key


def test_kv_cache_per_token_in_bfloat16():
    one = {name: cache_bytes(cfg, 1, state_bytes=0, kv_bytes=2)["kv"]
           for name, cfg in (("qwen", qwen3_next_config(QWEN)), ("kimi", kimi_linear_config(KIMI)))}
    assert one == {"qwen": 12 * 1024 * 2, "kimi": 7 * 576 * 2}  # 24 KiB and 7.9 KiB per token


@pytest.mark.parametrize("context", [1024, 131_072, 1_048_576])
def test_state_is_constant_and_kv_grows_linearly(context):
    cfg = qwen3_next_config(QWEN)
    a, b = cache_bytes(cfg, context), cache_bytes(cfg, 2 * context)
    assert a["state"] == b["state"] > 0
    assert b["kv"] == 2 * a["kv"]
    assert cache_bytes(cfg, context, batch=3)["total"] == 3 * a["total"]


def test_kv_saving_matches_the_kimi_linear_report():
    # Kimi Linear's report: KV cache usage reduced by up to 75% against full MLA.
    for cfg, saving in ((kimi_linear_config(KIMI), 1 - 7 / 27), (qwen3_next_config(QWEN), 0.75)):
        hybrid, full = cache_bytes(cfg, 1 << 20), cache_bytes(cfg.all_full(), 1 << 20)
        assert hybrid["kv"] / full["kv"] == pytest.approx(1 - saving, rel=1e-12)
        assert 0.73 < 1 - hybrid["total"] / full["total"] <= 0.75
    assert "75%" in DATA["kimi_linear"]["report"]


def test_at_short_context_the_state_dominates():
    cfg = kimi_linear_config(KIMI)
    short = cache_bytes(cfg, 4096)
    assert short["state"] > short["kv"]
    assert cache_bytes(cfg, 1 << 20)["state"] < 0.01 * cache_bytes(cfg, 1 << 20)["kv"]


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="full_attention_interval must be a finite int >= 1, got 0"):
        layer_pattern(8, 0)
    with pytest.raises(ValueError, match="n_layers must be a finite int >= 1"):
        layer_pattern(-1)
    with pytest.raises(ValueError, match=r"full_layers must be a list of layer numbers from 1 to n_layers=4, got \[0, 2, 5\]"):
        pattern_from_full_layers(4, [0, 2, 5])
    with pytest.raises(ValueError, match="layer_types must be"):
        HybridConfig("x", ("linear", "mamba"), 1, 1)
    with pytest.raises(ValueError, match="kv_per_token must be a finite int >= 0"):
        HybridConfig("x", ("full",), -1, 1)
    with pytest.raises(ValueError, match="context must be a finite number >= 0, got -1"):
        cache_bytes(HybridConfig("x", ("full",), 1, 1), -1)
    # a float context is not refused: the bytes scale with it
    assert cache_bytes(HybridConfig("x", ("full",), 1, 1), 1.5)["total"] == 1.5 * 2
    with pytest.raises(ValueError, match="batch must be a finite number >= 0"):
        cache_bytes(HybridConfig("x", ("full",), 1, 1), 1, batch=-1)


def test_configs_bytes_and_published_dicts_are_named():
    config = HybridConfig("x", ("full",), 1, 1)
    with pytest.raises(ValueError, match=r"full_layers must be a list of layer numbers .* got 3"):
        pattern_from_full_layers(4, 3)
    with pytest.raises(ValueError, match=r"layer_types must be a non-empty sequence of 'linear' and 'full', got 3"):
        HybridConfig("x", 3, 1, 1)
    with pytest.raises(AttributeError, match=r"'dict' object has no attribute 'n_full'"):
        cache_bytes({}, 1)
    with pytest.raises(ValueError, match=r"kv_bytes must be a finite number >= 0, got -0.5"):
        cache_bytes(config, 1, kv_bytes=-0.5)
    with pytest.raises(ValueError, match=r"state_bytes must be a finite number >= 0, got '4'"):
        cache_bytes(config, 1, state_bytes="4")
    with pytest.raises(TypeError, match=r"hf must be a dict read from config.json, got 'config.json'"):
        qwen3_next_config("config.json")
    with pytest.raises(ValueError, match=r"hf\['kv_lora_rank'\] must be a finite int >= 1, got None"):
        kimi_linear_config({"num_hidden_layers": 4, "qk_rope_head_dim": 64})
    with pytest.raises(ValueError, match=r"hf\['kv_lora_rank'\] must be a finite int >= 1, got -1"):
        kimi_linear_config({"num_hidden_layers": 4, "kv_lora_rank": -1, "qk_rope_head_dim": 64})
    with pytest.raises(TypeError, match=r"hf\['linear_attn_config'\] must be a dict read from config.json, got None"):
        kimi_linear_config({"num_hidden_layers": 4, "kv_lora_rank": 512, "qk_rope_head_dim": 64})
    with pytest.raises(ValueError, match=r"hf\['linear_attn_config'\]\['head_dim'\] must be a finite int >= 1, got '128'"):
        kimi_linear_config({"num_hidden_layers": 4, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
                            "linear_attn_config": {"num_heads": 2, "head_dim": "128", "short_conv_kernel_size": 4,
                                                   "full_attn_layers": [4]}})
