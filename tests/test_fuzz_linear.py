"""Malformed input for the linear snippets: every public callable refuses it by name.

The framework (what makes an argument wrong, the sweep and the hypothesis test)
is in ``tests/fuzz_support.py``; this file registers one entry per public
callable of ``snippets/linear/`` and collects the three tests over them.
"""

from __future__ import annotations

import math  # noqa: F401
import pytest  # noqa: F401
import torch
from torch import nn  # noqa: F401

from fuzz_support import *  # noqa: F401,F403
from fuzz_support import NOT_FUZZED, fuzz_tests
from snippets.linear import delta_rule as delta_mod
from snippets.linear import gated_linear_attention as gla_mod
from snippets.linear import hybrids as hybrid_mod
from snippets.linear import sparse_attention as sparse_mod
from snippets.linear import state_space_duality as ssd_mod

# linear/

SCALE_OR_NONE = {"scale": SCALE}


@fuzz("linear.gated_linear_attention.gla_recurrent", "linear.gated_linear_attention.gla_parallel", "linear.gated_linear_attention.gla_chunked")
def _(s):
    base = {"q": r(s.b, s.h, s.n, s.d), "k": r(s.b, s.h, s.n, s.d), "v": r(s.b, s.h, s.n, s.d + 1),
            "g": -r(s.b, s.h, s.n, s.d).abs()}
    specs = {"q": T(min_rank=2, tied=(0, 1, -2, -1)), "k": T(min_rank=2, tied=(0, 1, -2, -1)),
             "v": T(min_rank=2, tied=(0, 1, -2)), "g": T(min_rank=2, tied=(0, 1, -2, -1)), **SCALE_OR_NONE}
    calls = [Call(fn, {**base, "scale": 0.5}, specs, fn.__name__, fn.__name__)
             for fn in (gla_mod.gla_recurrent, gla_mod.gla_parallel)]
    calls.append(Call(gla_mod.gla_chunked, {**base, "chunk_size": 2, "sub_chunk_size": 1},
                      {**specs, "chunk_size": POS_INT, "sub_chunk_size": POS_INT},
                      "gla_chunked", "gla_chunked"))
    return calls


@fuzz("linear.gated_linear_attention.gla_step")
def _(s):
    base = {"q": r(s.b, s.h, s.d), "k": r(s.b, s.h, s.d), "v": r(s.b, s.h, s.d + 1), "g": -r(s.b, s.h, s.d).abs()}
    state = r(s.b, s.h, s.d, s.d + 1)
    specs = {"q": T(min_rank=1, tied=(0, 1, -1)), "k": T(min_rank=1, tied=(0, 1, -1)),
             "v": T(min_rank=1, tied=(0, 1), names=("state",)), "g": T(min_rank=1, tied=(0, 1, -1)), **SCALE_OR_NONE}
    return [Call(gla_mod.gla_step, dict(base), specs, "first step"),
            Call(gla_mod.gla_step, {**base, "state": state},
                 {"state": T(rank=4, tied=(0, 1, 2, 3), dtype_peer=False)}, "with state")]


@fuzz("linear.delta_rule.delta_rule_recurrent", "linear.delta_rule.delta_rule_parallel",
      "linear.delta_rule.delta_rule_chunked")
def _(s):
    base = {"q": r(s.b, s.h, s.n, s.d), "k": r(s.b, s.h, s.n, s.d), "v": r(s.b, s.h, s.n, s.d + 1),
            "beta": r(s.b, s.h, s.n).sigmoid(), "g": -r(s.b, s.h, s.n).abs()}
    specs = {"q": T(min_rank=2, tied=(0, 1, -2, -1)), "k": T(min_rank=2, tied=(0, 1, -2, -1)),
             "v": T(min_rank=2, tied=(0, 1, -2)), "beta": T(min_rank=1, tied=(0, 1, -1)),
             "g": T(min_rank=1, tied=(0, 1, -1)), **SCALE_OR_NONE}
    calls = [Call(fn, {**base, "scale": 0.5}, specs, fn.__name__, fn.__name__)
             for fn in (delta_mod.delta_rule_recurrent, delta_mod.delta_rule_parallel)]
    calls.append(Call(delta_mod.delta_rule_chunked, {**base, "chunk_size": 2}, {**specs, "chunk_size": POS_INT},
                      "delta_rule_chunked", "delta_rule_chunked"))
    return calls


@fuzz("linear.delta_rule.delta_rule_step")
def _(s):
    base = {"q": r(s.b, s.h, s.d), "k": r(s.b, s.h, s.d), "v": r(s.b, s.h, s.d + 1), "beta": r(s.b, s.h).sigmoid(),
            "g": -r(s.b, s.h).abs()}
    specs = {"q": T(min_rank=1, tied=(0, 1, -1)), "k": T(min_rank=1, tied=(0, 1, -1)),
             "v": T(min_rank=1, tied=(0, 1), names=("state",)), "beta": T(min_rank=1, tied=(0, 1)),
             "g": T(min_rank=1, tied=(0, 1)), **SCALE_OR_NONE}
    return [Call(delta_mod.delta_rule_step, dict(base), specs, "first step"),
            Call(delta_mod.delta_rule_step, {**base, "state": r(s.b, s.h, s.d, s.d + 1)},
                 {"state": T(rank=4, tied=(0, 1, 2, 3), dtype_peer=False)}, "with state")]


def _ssd_inputs(s):
    return {"x": r(s.b, s.h, s.n, s.d), "dt": r(s.b, s.h, s.n).abs(), "A": -r(s.h).abs(),
            "b": r(s.b, s.h, s.n, s.d + 1), "c": r(s.b, s.h, s.n, s.d + 1)}


SSD_SPECS = {"x": T(rank=4, tied=(0, 1, 2), names=("dt", "A", "b")), "dt": T(rank=3, tied=(0, 1, 2)),
             "A": T(rank=1, tied=(0,)), "b": T(rank=4, tied=(0, 1, 2, 3), names=("c",)),
             "c": T(rank=4, tied=(0, 1, 2, 3), names=("b",))}


@fuzz("linear.state_space_duality.ssd_recurrent", "linear.state_space_duality.ssd_attention", "linear.state_space_duality.ssd_chunked")
def _(s):
    calls = [Call(fn, _ssd_inputs(s), SSD_SPECS, fn.__name__, fn.__name__)
             for fn in (ssd_mod.ssd_recurrent, ssd_mod.ssd_attention)]
    calls.append(Call(ssd_mod.ssd_chunked, {**_ssd_inputs(s), "chunk_size": 2},
                      {**SSD_SPECS, "chunk_size": POS_INT}, "ssd_chunked", "ssd_chunked"))
    return calls


@fuzz("linear.state_space_duality.ssd_mask")
def _(s):
    return [Call(ssd_mod.ssd_mask, {"dt": r(s.b, s.h, s.n).abs(), "A": -r(s.h).abs()},
                 {"dt": T(rank=3, tied=(1,), names=("A",)), "A": T(rank=1, tied=(0,), names=("dt",))})]


SPARSE_QKV = {"q": T(rank=4, tied=(0, 1, 3), names=("k", "v")), "k": T(rank=4, tied=(0, 1, 2, 3), names=("q", "v")),
              "v": T(rank=4, tied=(0, 1, 2), names=("q", "k"))}


@fuzz("linear.sparse_attention.causal_keys")
def _(s):
    return [Call(sparse_mod.causal_keys, {"n": s.n, "m": s.m}, {"n": NONNEG_INT, "m": NONNEG_INT})]


@fuzz("linear.sparse_attention.window_keys")
def _(s):
    return [Call(sparse_mod.window_keys, {"n": s.n, "m": s.m, "window": 2},
                 {"n": NONNEG_INT, "m": NONNEG_INT, "window": POS_INT})]


@fuzz("linear.sparse_attention.attend_masked")
def _(s):
    return [Call(sparse_mod.attend_masked, {**qkv(s), "mask": ones(s.b, 1, s.n, s.m)},
                 {**SPARSE_QKV, "mask": T(BOOL, min_rank=2, tied=(0, -2, -1), lead_fixed=True)})]


@fuzz("linear.sparse_attention.lightning_indexer")
def _(s):
    return [Call(sparse_mod.lightning_indexer, {"q_idx": r(s.b, s.n, s.h, s.d), "k_idx": r(s.b, s.m, s.d),
                                                "w": r(s.b, s.n, s.h)},
                 {"q_idx": T(rank=4, tied=(0, 1, 2, 3)), "k_idx": T(rank=3, tied=(0, 2), names=("q_idx",)),
                  "w": T(rank=3, tied=(0, 1, 2), names=("q_idx",))})]


@fuzz("linear.sparse_attention.topk_mask")
def _(s):
    return [Call(sparse_mod.topk_mask, {"index_scores": r(s.b, s.n, s.m), "topk": 2, "causal": False},
                 {"index_scores": T(min_rank=2, dtype_peer=False, device_peer=False), "topk": POS_INT,
                  "causal": FLAG})]


@fuzz("linear.sparse_attention.topk_sparse_attention")
def _(s):
    return [Call(sparse_mod.topk_sparse_attention, {**qkv(s), "index_scores": r(s.b, s.n, s.m), "topk": 2},
                 {**SPARSE_QKV, "index_scores": T(rank=3, tied=(0, 1, 2), dtype_peer=False), "topk": POS_INT,
                  "causal": FLAG})]


@fuzz("linear.sparse_attention.compressed_attention")
def _(s):
    return [Call(sparse_mod.compressed_attention, {**qkv(s), "block": 2}, {**SPARSE_QKV, "block": POS_INT})]


@fuzz("linear.sparse_attention.selection_mask")
def _(s):
    m = s.m + 2
    return [Call(sparse_mod.selection_mask, {"block_weights": r(s.b, s.h, s.n, m // 2).softmax(-1), "n": s.n, "m": m,
                                             "block": 2, "n_select": 2},
                 {"block_weights": T(rank=4, tied=(2, 3), dtype_peer=False, device_peer=False,
                                     names=("n", "m", "block")),
                  "n": Bad(-1, 2.5, True, "2", s.n + 1, names=("block_weights",)),
                  "m": Bad(-1, 2.5, "4", m + 2, names=("block_weights",)), "block": POS_INT,
                  "n_select": POS_INT})]


@fuzz("linear.sparse_attention.nsa_attention")
def _(s):
    return [Call(sparse_mod.nsa_attention, {**qkv(s), "gates": r(s.b, s.h, s.n, 3).sigmoid(), "block": 2,
                                            "n_select": 1, "window": 2},
                 {**SPARSE_QKV, "gates": T(rank=4, tied=(0, 1, 2, 3), dtype_peer=False), "block": POS_INT, "n_select": POS_INT,
                  "window": POS_INT})]


COST_SPECS = {"context": POS_INT, "n_heads": POS_INT, "d_qk": POS_INT, "d_v": POS_INT, "kv_bytes_per_token": POS_INT}
COST_ARGS = {"context": 4096, "n_heads": 8, "d_qk": 64, "d_v": 64, "kv_bytes_per_token": 256}


@fuzz("linear.sparse_attention.dense_decode_cost")
def _(s):
    return [Call(sparse_mod.dense_decode_cost, dict(COST_ARGS), COST_SPECS)]


@fuzz("linear.sparse_attention.dsa_decode_cost")
def _(s):
    return [Call(sparse_mod.dsa_decode_cost, dict(COST_ARGS),
                 {**COST_SPECS, "topk": POS_INT, "index_heads": POS_INT, "index_dim": POS_INT,
                  "index_bytes_per_token": POS_INT})]


@fuzz("linear.sparse_attention.nsa_decode_cost")
def _(s):
    return [Call(sparse_mod.nsa_decode_cost, dict(COST_ARGS),
                 {**COST_SPECS, "block": POS_INT, "n_select": POS_INT, "window": POS_INT,
                  "cmp_block": POS_INT, "cmp_stride": POS_INT})]


@fuzz("linear.hybrids.layer_pattern")
def _(s):
    return [Call(hybrid_mod.layer_pattern, {"n_layers": 8, "full_attention_interval": 4},
                 {"n_layers": POS_INT, "full_attention_interval": POS_INT})]


@fuzz("linear.hybrids.pattern_from_full_layers")
def _(s):
    return [Call(hybrid_mod.pattern_from_full_layers, {"n_layers": 8, "full_layers": [4, 8]},
                 {"n_layers": POS_INT, "full_layers": Bad(3, None, "48", [0], [9], [2.5])})]


def _hybrid_config():
    return hybrid_mod.HybridConfig("toy", hybrid_mod.layer_pattern(4, 2), kv_per_token=8, state_per_layer=16)


@fuzz("linear.hybrids.HybridConfig")
def _(s):
    return [Call(hybrid_mod.HybridConfig, {"name": "toy", "layer_types": ("linear", "full"), "kv_per_token": 8,
                                           "state_per_layer": 16, "conv_per_layer": 2},
                 {"layer_types": Bad((), ("full", "moe"), "full", None, 3),
                  "kv_per_token": NONNEG_INT, "state_per_layer": NONNEG_INT, "conv_per_layer": NONNEG_INT})]


@fuzz("linear.hybrids.cache_bytes")
def _(s):
    return [Call(hybrid_mod.cache_bytes, {"config": _hybrid_config(), "context": 1024, "batch": 2},
                 # config: a HybridConfig; context, batch: a float only scales the bytes
                 {"config": Bad(), "context": Bad(-1, float("inf")), "batch": Bad(-1, float("nan")),
                  "kv_bytes": Bad(-2, "2", None, float("nan"), float("inf"), True),
                  "state_bytes": Bad(-0.5, "4", None, True)})]


QWEN3_NEXT = {"num_hidden_layers": 8, "full_attention_interval": 4, "num_key_value_heads": 2, "head_dim": 4,
              "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 4,
              "linear_value_head_dim": 4, "linear_conv_kernel_dim": 4}
KIMI_LINEAR = {"num_hidden_layers": 8, "kv_lora_rank": 16, "qk_rope_head_dim": 4,
               "linear_attn_config": {"num_heads": 2, "head_dim": 4, "full_attn_layers": [4, 8],
                                      "short_conv_kernel_size": 4}}


@fuzz("linear.hybrids.qwen3_next_config")
def _(s):
    missing = {k: v for k, v in QWEN3_NEXT.items() if k != "head_dim"}
    return [Call(hybrid_mod.qwen3_next_config, {"hf": dict(QWEN3_NEXT)},
                 {"hf": Bad(3, None, "config.json", missing, {**QWEN3_NEXT, "head_dim": "4"})})]


@fuzz("linear.hybrids.kimi_linear_config")
def _(s):
    missing = {k: v for k, v in KIMI_LINEAR.items() if k != "kv_lora_rank"}
    return [Call(hybrid_mod.kimi_linear_config, {"hf": dict(KIMI_LINEAR)},
                 {"hf": Bad(3, None, missing, {**KIMI_LINEAR, "linear_attn_config": 3},
                            {**KIMI_LINEAR, "kv_lora_rank": -1})})]


test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error = (
    fuzz_tests('linear.')
)
