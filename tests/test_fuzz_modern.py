"""Malformed input for the modern snippets: every public callable refuses it by name.

The framework (what makes an argument wrong, the sweep and the hypothesis test)
is in ``tests/fuzz_support.py``; this file registers one entry per public
callable of ``snippets/modern/`` and collects the three tests over them.
"""

from __future__ import annotations

import math  # noqa: F401
import pytest  # noqa: F401
import torch
from torch import nn  # noqa: F401

from fuzz_support import *  # noqa: F401,F403
from fuzz_support import fuzz_tests
from snippets.architecture import transformer_block as block_mod
from snippets.attention import multi_head as mha_mod
from snippets.history import gpt as gpt_mod
from snippets.linear import hybrids as hybrid_mod
from snippets.linear import sparse_attention as sparse_mod
from snippets.linear import state_space_duality as ssd_mod
from snippets.modern import modern_block as modern_block
from snippets.modern import cache_size as modern_cache
from snippets.modern import gates_and_caps as modern_gates
from snippets.modern import latent_attention as modern_mla
from snippets.modern import layer_patterns as modern_layers
from snippets.modern import long_context_rope as modern_rope
from snippets.modern import attention_sinks as modern_sinks


def _gpt_config(s):
    return gpt_mod.GPTConfig(vocab_size=11, d_model=4 * s.d, n_layers=1, n_heads=2, d_ff=8, max_len=s.n + 2)


def _gpt_block(c):
    return block_mod.TransformerBlock(mha_mod.MultiHeadAttention(c.d_model, c.n_heads), c.d_model, c.d_ff)


# modern/: the decoders of 2023 to 2026
# ----------------------------------------------------------------------------


MODERN_INT = Bad(0, -1, 2.5, True, "2", None)  # an int >= 1 that must be given
# a size > 0: a float such as 2.5 reaches torch, whose own TypeError refuses it
SIZE = Bad(0, -1, True, "2", None)
# L, passed on by rope_inv_freq to the scaling function that reads it as original_length
ORIGINAL_L = Bad(0, -1, 2.5, True, "2", None, names=("original_length",))
HEADS = {"q": T(rank=4, tied=(0, 1, 3), names=("k", "v")), "k": T(rank=4, tied=(0, 1, 2, 3), names=("q", "v")),
         "v": T(rank=4, tied=(0, 1, 2), names=("q", "k"))}
HEADS_MASK = T(BOOL, tied=(-2, -1), lead_fixed=True)  # anything that broadcasts to (B, H, N, M)


def _heads(s, *, n=None, m=None, d_v=None):
    n, m = n or s.n, m or s.m
    return {"q": r(s.b, s.h, n, s.d), "k": r(s.b, s.h, m, s.d), "v": r(s.b, s.h, m, d_v or s.d + 1)}


def _kernel_calls(fn, s, extra, extra_specs):
    """A head-level attention kernel: plain, with a (N, M) mask and with a (B, 1, N, M) mask."""
    return [
        Call(fn, {**_heads(s), **extra, "scale": 0.5}, {**HEADS, **extra_specs, "scale": SCALE}, "plain"),
        Call(fn, {**_heads(s), **extra, "attn_mask": ones(s.n, s.m)}, {"attn_mask": HEADS_MASK}, "(N, M) mask"),
        Call(fn, {**_heads(s), **extra, "attn_mask": ones(s.b, 1, s.n, s.m)},
             {"attn_mask": T(BOOL, tied=(0, 2, 3), lead_fixed=True)}, "(B, 1, N, M) mask"),
        Call(fn, {**_heads(s), **extra, "attn_mask": ones(s.b, 1, 1, s.m)},
             {"attn_mask": T(BOOL, tied=(0, 3), lead_fixed=True)}, "(B, 1, 1, M) key mask"),
    ]


# modern_block.py


@fuzz("modern.modern_block.RMSNorm")
def _(s):
    return _module_calls(
        modern_block.RMSNorm, {"d": s.d, "eps": 1e-5}, {"d": SIZE, "eps": Bad(0.0, -1.0, float("nan"), "1e-6", None)},
        lambda mod, x: mod(x), {"x": r(s.b, s.n, s.d)}, {"x": T(min_rank=1, tied=(-1,), dtype_peer=False)},
    )


@fuzz("modern.modern_block.SwiGLU")
def _(s):
    return _module_calls(modern_block.SwiGLU, {"d_model": s.d, "d_ff": 3}, {"d_model": SIZE, "d_ff": SIZE},
                         lambda mod, x: mod(x), {"x": r(s.b, s.n, s.d)}, {"x": T(min_rank=1, tied=(-1,))})


@fuzz("modern.modern_block.swiglu_width")
def _(s):
    return [Call(modern_block.swiglu_width, {"d_model": 4 * s.d, "multiple_of": 8, "ffn_dim_multiplier": 1.3},
                 {"d_model": SIZE, "multiple_of": SIZE,
                  "ffn_dim_multiplier": Bad(0.0, -1.0, float("nan"), float("inf"), "1.3", True)})]


def _rope_entries(module, area):
    """The canonical RoPE helpers, pasted into each file that rotates."""
    @fuzz(f"modern.{area}.rotary_tables")
    def _(s):
        return [
            Call(module.rotary_tables, {"positions": torch.arange(s.n), "rotary_dim": 2 * s.d, "base": 500.0},
                 # any dtype: float positions rotate by fractional angles, as interpolation does
                 {"positions": T(ANY, min_rank=1, device_peer=False), "rotary_dim": Bad(0, 3, 2.5),
                  "base": Bad(1.0, 0.5, float("nan"), float("inf"), None)}, "(N,)"),
            Call(module.rotary_tables, {"positions": ids(s.b, s.n, high=9), "rotary_dim": 2 * s.d},
                 {"positions": Bad(torch.zeros(2, 2, 2, dtype=torch.long), torch.tensor(3))}, "(B, N)"),
        ]

    @fuzz(f"modern.{area}.apply_rotary")
    def _(s):
        cos, sin = module.rotary_tables(torch.arange(s.n), 2 * s.d)
        bcos, bsin = module.rotary_tables(ids(s.b, s.n, high=9), 2 * s.d)
        # The canonical check does not refuse an integer table (ANY): it would be cast.
        table = T(ANY, tied=(-2, -1), lead_fixed=True, names=("cos", "sin"))
        x = r(s.b, s.h, s.n, 2 * s.d)
        return [
            Call(module.apply_rotary, {"x": x, "cos": cos, "sin": sin, "interleaved": interleaved},
                 {"x": T(rank=4, tied=(2,), dtype_peer=False, names=("cos",)), "cos": table, "sin": table},
                 f"(N, r/2), interleaved={interleaved}")
            for interleaved in (False, True)
        ] + [Call(module.apply_rotary, {"x": x, "cos": bcos, "sin": bsin},
                  {"x": T(rank=4, tied=(0, 2), dtype_peer=False, names=("cos",))}, "(B, N, r/2)")]


_rope_entries(modern_block, "modern_block")


@fuzz("modern.modern_block.meta_to_half_split")
def _(s):
    return [Call(modern_block.meta_to_half_split, {"weight": r(s.h * 2 * s.d, s.d + 1), "n_heads": s.h},
                 {"weight": T(rank=2, tied=(0,), device_peer=False, dtype_peer=False), "n_heads": SIZE})]


@fuzz("modern.modern_block.sdpa_attend")
def _(s):
    return _kernel_calls(modern_block.sdpa_attend, s, {}, {})


def _decoder_attention_init(s):
    return {"d_model": 4 * s.d, "n_heads": 4, "n_kv_heads": 2, "qk_norm": "head", "norm_eps": 1e-5,
            "rotary_dim": s.d}


DECODER_INIT_SPECS = {
    "d_model": SIZE, "n_heads": SIZE, "n_kv_heads": Bad(0, 3, True, "2"), "d_head": Bad(0, True, "2"),
    "qk_norm": Bad("layer", 3), "rope_base": Bad(1.0, "1e4", True),
    "norm_eps": Bad(0.0, -1.0, "1e-6", None, names=("eps",)),  # refused by the QK-norm's RMSNorm
    "rotary_dim": Bad(0, 3, 64, 2.5, "2"), "scale": Bad(0.0, -1.0, float("nan"), "1", True),
}


@fuzz("modern.modern_block.DecoderAttention")
def _(s):
    init = _decoder_attention_init(s)
    module = modern_block.DecoderAttention(**init)
    x = r(s.b, s.n, init["d_model"])
    forward = lambda **kw: module(kw.pop("x"), **kw)  # noqa: E731
    return [
        Call(modern_block.DecoderAttention, init, DECODER_INIT_SPECS, "init"),
        Call(forward, {"x": x, "attn_mask": ones(s.n, s.n), "positions": torch.arange(s.n) + 2},
             {"x": T(rank=3, tied=(1, -1), names=("attn_mask", "positions")),
              "attn_mask": T(BOOL, tied=(0, 1), lead_fixed=True),
              # a positions tensor that does not fit x is refused by apply_rotary, as cos
              "positions": T(ANY, min_rank=1, tied=(0,), names=("cos",))}, "forward"),
        Call(forward, {"x": x, "attn_mask": ones(s.b, 1, s.n, s.n), "positions": ids(s.b, s.n, high=9)},
             {"attn_mask": T(BOOL, tied=(0, 2, 3), lead_fixed=True),
              "positions": T(ANY, tied=(0, 1), names=("cos",))},
             "batched"),
    ]


@fuzz("modern.modern_block.DecoderLayer")
def _(s):
    d_model = 4 * s.d
    init = {"attention": modern_block.DecoderAttention(d_model, 4, 2), "d_model": d_model, "d_ff": 3}
    return _module_calls(
        modern_block.DecoderLayer, init,
        {"d_model": SIZE, "d_ff": SIZE,
         "norm_eps": Bad(0.0, "1e-6", None, names=("eps",))},
        lambda mod, **kw: mod(kw.pop("x"), **kw), {"x": r(s.b, s.n, d_model), "attn_mask": ones(s.n, s.n)},
        {"x": T(rank=3, tied=(1, -1), names=("attn_mask",)), "attn_mask": T(BOOL, tied=(0, 1), lead_fixed=True)},
    )


# cache_size.py


@fuzz("modern.cache_size.mha_cache_elements")
def _(s):
    return [Call(modern_cache.mha_cache_elements, {"n_kv_heads": s.h, "d_k": s.d, "d_v": s.d + 1},
                 {"n_kv_heads": POS_INT, "d_k": POS_INT, "d_v": POS_INT})]


@fuzz("modern.cache_size.mla_cache_elements")
def _(s):
    return [Call(modern_cache.mla_cache_elements, {"kv_lora_rank": 4 * s.d, "rope_dim": s.d},
                 {"kv_lora_rank": POS_INT, "rope_dim": NONNEG_INT})]


@fuzz("modern.cache_size.cached_tokens")
def _(s):
    kind = Bad("global", "sliding", 3, None)
    return [
        Call(modern_cache.cached_tokens, {"kind": "sliding_attention", "seq_len": s.m, "window": 2},
             {"kind": kind, "seq_len": NONNEG_INT, "window": MODERN_INT}, "sliding"),
        Call(modern_cache.cached_tokens, {"kind": "chunked_attention", "seq_len": s.m, "chunk": 2},
             {"chunk": MODERN_INT}, "chunked"),
    ]


@fuzz("modern.cache_size.model_cache_bytes")
def _(s):
    kinds = ["sliding_attention", "chunked_attention", "full_attention", "linear_attention"]
    return [Call(modern_cache.model_cache_bytes,
                 {"seq_len": s.m, "layer_types": kinds, "elements_per_token": 8, "window": 2, "chunk": 3,
                  "batch": s.b, "bytes_per_element": 2},
                 {"seq_len": NONNEG_INT, "layer_types": Bad("full_attention", 3, None, ["global"], [3]),
                  "elements_per_token": POS_INT, "window": MODERN_INT, "chunk": MODERN_INT, "batch": NONNEG_INT,
                  "bytes_per_element": POS_INT})]


# gates_and_caps.py

CAP = Bad(0.0, -1.0, float("nan"), float("inf"), "50", None, True)


@fuzz("modern.gates_and_caps.softcap")
def _(s):
    return [Call(modern_gates.softcap, {"scores": r(s.b, s.n, s.m), "cap": 5.0},
                 # any tensor of scores: an integer one is promoted by the division
                 {"scores": Bad(), "cap": CAP})]


@fuzz("modern.gates_and_caps.softcap_attention")
def _(s):
    return _kernel_calls(modern_gates.softcap_attention, s, {"cap": 5.0}, {"cap": CAP})


@fuzz("modern.gates_and_caps.SoftCap")
def _(s):
    module = modern_gates.SoftCap(5.0)
    forward = lambda **kw: module(kw.pop("q"), kw.pop("k"), kw.pop("v"), **kw)  # noqa: E731
    q, k, v = _heads(s).values()
    # the cap is checked where it is used: by softcap, on the first call
    init = lambda cap: modern_gates.SoftCap(cap)(q, k, v)  # noqa: E731
    return [Call(init, {"cap": 5.0}, {"cap": CAP}, "init"),
            *[Call(forward, c.kwargs, c.specs, c.label) for c in _kernel_calls(module, s, {}, {})]]


@fuzz("modern.gates_and_caps.OutputGate")
def _(s):
    d_model = s.d + 1
    calls = []
    for per in ("element", "head"):
        calls += _module_calls(
            modern_gates.OutputGate, {"d_model": d_model, "n_heads": s.h, "d_head": s.d, "per": per},
            {"d_model": SIZE, "n_heads": SIZE, "d_head": SIZE, "per": Bad("channel", 3, None)},
            lambda mod, **kw: mod(kw.pop("x"), kw.pop("out")),
            {"x": r(s.b, s.n, d_model), "out": r(s.b, s.n, s.h * s.d)},
            {"x": T(rank=3, tied=(0, 1, 2), names=("out",)), "out": T(rank=3, tied=(0, 1, 2), names=("x",))},
        )
    return calls


@fuzz("modern.gates_and_caps.split_fused_q_gate")
def _(s):
    return [Call(modern_gates.split_fused_q_gate, {"weight": r(2 * s.h * s.d, s.d + 1), "n_heads": s.h, "d_head": s.d},
                 {"weight": T(ANY, rank=2, tied=(0,), device_peer=False), "n_heads": SIZE, "d_head": SIZE})]


# latent_attention.py


LATENT_C = T(rank=3, tied=(0, 2), names=("k_rope",))
LATENT_K_ROPE = T(rank=3, tied=(0, 1, 2), names=("c",))


@fuzz("modern.latent_attention.LatentCache")
def _(s):
    init = {"batch": s.b, "kv_lora_rank": 3, "rope_dim": 2, "max_len": s.n + 2}
    return [
        Call(modern_mla.LatentCache, init, {"batch": SIZE, "kv_lora_rank": SIZE, "rope_dim": SIZE,
                                            # any dtype: update refuses a latent of another
                                            "max_len": SIZE, "dtype": Bad()}, "init"),
        Call(lambda **kw: modern_mla.LatentCache(**init).update(**kw), {"c": r(s.b, s.n, 3), "k_rope": r(s.b, s.n, 2)},
             {"c": LATENT_C, "k_rope": LATENT_K_ROPE}, "update"),
    ]


def _mla_init(s):
    return {"d_model": 4 * s.d, "n_heads": 2, "kv_lora_rank": 3, "q_lora_rank": 5, "qk_nope_head_dim": 2,
            "rope_dim": 2, "v_head_dim": 3, "norm_eps": 1e-5, "softmax_scale": 0.5}


@fuzz("modern.latent_attention.MultiHeadLatentAttention")
def _(s):
    init = _mla_init(s)
    module = modern_mla.MultiHeadLatentAttention(**init)
    x = r(s.b, s.n, init["d_model"])
    forward = lambda **kw: module(kw.pop("x"), **kw)  # noqa: E731
    cache = lambda: module.make_cache(s.b, s.n + 3)  # noqa: E731
    calls = [Call(modern_mla.MultiHeadLatentAttention, init,
                  {"d_model": SIZE, "n_heads": SIZE, "kv_lora_rank": SIZE, "q_lora_rank": Bad(0, True, "2"),
                   "qk_nope_head_dim": SIZE, "v_head_dim": SIZE,
                   # refused by RoPE's own check, as its rotary_dim and base
                   "rope_dim": Bad(0, 3, 2.5, True, "2", names=("rotary_dim",)),
                   "rope_base": Bad(1.0, float("nan"), float("inf"), "1e4", None, True, names=("base",)),
                   "softmax_scale": Bad(0.0, -1.0, float("nan"), "1", True), "norm_eps": Bad(0.0, -1.0, "1e-6", None)},
                  "init")]
    for absorbed in (False, True):
        calls.append(Call(forward, {"x": x, "absorbed": absorbed, "attn_mask": ones(s.b, 1, s.n, s.n)},
                          {"x": T(rank=3, tied=(0, 1, 2), names=("attn_mask",)),
                           "attn_mask": T(BOOL, tied=(0, 2, 3), lead_fixed=True)}, f"absorbed={absorbed}"))
        calls.append(Call(lambda **kw: forward(cache=cache(), **kw), {"x": x, "absorbed": absorbed},
                          {"x": T(rank=3, tied=(0, 2), names=("c",))}, f"cached, absorbed={absorbed}"))
    # A cache that does not fit the layer is refused by LatentCache.update, by the latent c
    # or the key k_rope it is handed; a non-cache object is not something a caller passes.
    calls.append(Call(forward, {"x": x, "cache": cache()},
                      {"cache": Bad(modern_mla.LatentCache(s.b + 1, 3, 2, 9),
                                    modern_mla.LatentCache(s.b, 4, 2, 9), modern_mla.LatentCache(s.b, 3, 4, 9),
                                    modern_mla.LatentCache(s.b, 3, 2, 9, dtype=torch.float64),
                                    modern_mla.LatentCache(s.b, 3, 2, 9, device=OTHER_DEVICE),
                                    names=("c", "k_rope"))}, "cache"))
    return calls


# layer_patterns.py

KIND = Bad("global", "sliding", 3, None)


@fuzz("modern.layer_patterns.periodic_layer_types")
def _(s):
    return [Call(modern_layers.periodic_layer_types,
                 {"n_layers": s.n + 3, "period": s.h, "local": "chunked_attention", "glob": "full_attention"},
                 {"n_layers": NONNEG_INT, "period": POS_INT, "local": KIND, "glob": KIND})]


@fuzz("modern.layer_patterns.rope_layers")
def _(s):
    return [Call(modern_layers.rope_layers, {"n_layers": s.n + 3, "nope_interval": s.h},
                 {"n_layers": NONNEG_INT, "nope_interval": POS_INT})]


@fuzz("modern.layer_patterns.layer_mask")
def _(s):
    n_keys = Bad(s.n - 1, -1, 2.5, True, "5")
    return [
        Call(modern_layers.layer_mask, {"kind": "sliding_attention", "n_queries": s.n, "n_keys": s.m + s.n, "window": 2},
             {"kind": Bad("global", "linear_attention", 3, None), "n_queries": NONNEG_INT, "n_keys": n_keys,
              "window": MODERN_INT}, "sliding"),
        Call(modern_layers.layer_mask, {"kind": "chunked_attention", "n_queries": s.n, "chunk": 2},
             {"chunk": MODERN_INT}, "chunked"),
    ]


@fuzz("modern.layer_patterns.summarize_layer_types")
def _(s):
    kinds = modern_layers.periodic_layer_types(2 * s.h + 1, s.h)
    return [Call(modern_layers.summarize_layer_types, {"layer_types": kinds},
                 {"layer_types": Bad([], "full_attention", 3, None, ["global"], ["full_attention", 3])})]


# long_context_rope.py

ROPE_BASE = Bad(1.0, 0.5, float("nan"), float("inf"), "1e4", None, True)
ROPE_FACTOR = Bad(0.5, float("nan"), float("inf"), "2", None, True)
INV_FREQ = T(rank=1, dtype_peer=False, device_peer=False)


@fuzz("modern.long_context_rope.rope_frequencies")
def _(s):
    return [Call(modern_rope.rope_frequencies, {"d_rot": 2 * s.d, "base": 500.0},
                 {"d_rot": Bad(0, 3, 2.5, True, "4"), "base": ROPE_BASE})]


@fuzz("modern.long_context_rope.rotary_dims")
def _(s):
    return [Call(modern_rope.rotary_dims, {"d_head": 8, "partial_rotary_factor": 0.5},
                 {"d_head": Bad(1, 2.5, True, "8"), "partial_rotary_factor": Bad(0.0, 1.5, 0.375, "0.5", None, True)})]


@fuzz("modern.long_context_rope.linear_scaling")
def _(s):
    return [Call(modern_rope.linear_scaling, {"inv_freq": modern_rope.rope_frequencies(2 * s.d), "factor": 4.0},
                 {"inv_freq": INV_FREQ, "factor": ROPE_FACTOR})]


@fuzz("modern.long_context_rope.ntk_aware_base")
def _(s):
    return [Call(modern_rope.ntk_aware_base, {"base": 500.0, "factor": 4.0, "d_rot": 2 * s.d + 2},
                 {"base": ROPE_BASE, "factor": ROPE_FACTOR, "d_rot": Bad(2, 5, 2.5, True, "8")})]


@fuzz("modern.long_context_rope.dynamic_ntk_base")
def _(s):
    return [Call(modern_rope.dynamic_ntk_base,
                 {"base": 500.0, "factor": 2.0, "seq_len": 40, "original_length": 16, "d_rot": 2 * s.d + 2},
                 {"base": ROPE_BASE, "factor": ROPE_FACTOR, "seq_len": NONNEG_INT, "original_length": POS_INT,
                  "d_rot": Bad(2, 5, 2.5, True, "8")})]


YARN_SPECS = {"original_length": POS_INT, "beta_fast": Bad(0.5, float("nan"), "32", None, True),
              "beta_slow": Bad(0.0, -1.0, float("inf"), "1", None, True)}


@fuzz("modern.long_context_rope.yarn_ramp")
def _(s):
    return [Call(modern_rope.yarn_ramp, {"d_rot": 16, "base": 500.0, "original_length": 64, "beta_fast": 16.0},
                 {"d_rot": Bad(0, 3, 2.5, True, "4"), "base": ROPE_BASE, **YARN_SPECS})]


@fuzz("modern.long_context_rope.yarn_scaling")
def _(s):
    return [Call(modern_rope.yarn_scaling, {"d_rot": 16, "base": 500.0, "factor": 4.0, "original_length": 64},
                 {"d_rot": Bad(0, 3, 2.5, True, "4"), "base": ROPE_BASE, "factor": ROPE_FACTOR, **YARN_SPECS})]


@fuzz("modern.long_context_rope.yarn_attention_factor")
def _(s):
    mscale = Bad(-1.0, float("nan"), float("inf"), "1", True)
    return [Call(modern_rope.yarn_attention_factor, {"factor": 4.0, "mscale": 0.7, "mscale_all_dim": 1.0},
                 {"factor": ROPE_FACTOR, "mscale": mscale, "mscale_all_dim": mscale})]


@fuzz("modern.long_context_rope.llama3_scaling")
def _(s):
    return [Call(modern_rope.llama3_scaling,
                 {"inv_freq": modern_rope.rope_frequencies(16, 500.0), "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_length": 64},
                 {"inv_freq": INV_FREQ, "factor": ROPE_FACTOR, "low_freq_factor": Bad(0.0, -1.0, "1", None, True),
                  "high_freq_factor": Bad(0.5, float("inf"), "4", None), "original_length": POS_INT})]


@fuzz("modern.long_context_rope.rope_inv_freq")
def _(s):
    fn = modern_rope.rope_inv_freq
    base = {"d_head": 8, "base": 500.0}
    return [
        Call(fn, {**base, "partial_rotary_factor": 0.5},
             {"d_head": Bad(1, 2.5, True, "8"), "base": ROPE_BASE, "rope_type": Bad("ntk", 3, None),
              "partial_rotary_factor": Bad(0.0, 1.5, 0.375, "0.5", None)}, "default"),
        Call(fn, {**base, "rope_type": "linear", "factor": 4.0}, {"factor": ROPE_FACTOR}, "linear"),
        Call(fn, {**base, "rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 16, "seq_len": 40},
             {"factor": ROPE_FACTOR, "original_max_position_embeddings": ORIGINAL_L, "seq_len": NONNEG_INT}, "dynamic"),
        Call(fn, {**base, "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "beta_fast": 16.0,
                  "mscale": 0.7, "mscale_all_dim": 1.0},
             {"factor": ROPE_FACTOR, "original_max_position_embeddings": ORIGINAL_L,
              "beta_fast": YARN_SPECS["beta_fast"], "beta_slow": YARN_SPECS["beta_slow"],
              # attention_factor is returned as given: rotary_angles, which applies it, refuses it
              "mscale": Bad(-1.0, "1", True)}, "yarn"),
        Call(fn, {**base, "rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 64},
             {"factor": ROPE_FACTOR, "original_max_position_embeddings": ORIGINAL_L,
              "low_freq_factor": Bad(0.0, "1", None), "high_freq_factor": Bad(0.5, "4", None)}, "llama3"),
    ]


@fuzz("modern.long_context_rope.rotary_angles")
def _(s):
    inv_freq = modern_rope.rope_frequencies(2 * s.d)
    return [
        Call(modern_rope.rotary_angles, {"inv_freq": inv_freq, "positions": torch.arange(s.n), "attention_factor": 1.2},
             {"inv_freq": INV_FREQ, "positions": T(ANY, min_rank=1, device_peer=False),
              "attention_factor": Bad(0.0, -1.0, float("nan"), float("inf"), "1", None, True)}, "(N,)"),
        Call(modern_rope.rotary_angles, {"inv_freq": inv_freq, "positions": ids(s.b, s.n, high=9)},
             {"positions": Bad(torch.zeros(2, 2, 2), torch.ones(2, dtype=torch.bool), [0, 1])}, "(B, N)"),
    ]


@fuzz("modern.long_context_rope.apply_partial_rotary")
def _(s):
    inv_freq = modern_rope.rope_frequencies(2 * s.d)
    cos, sin = modern_rope.rotary_angles(inv_freq, torch.arange(s.n))
    bcos, bsin = modern_rope.rotary_angles(inv_freq, ids(s.b, s.n, high=9))
    table = T(min_rank=2, tied=(-2, -1), dtype_peer=False, lead_fixed=True, names=("cos", "sin"))
    x = r(s.b, s.h, s.n, 2 * s.d)
    return [
        Call(modern_rope.apply_partial_rotary, {"x": x, "cos": cos, "sin": sin},
             {"x": T(rank=4, tied=(2,), dtype_peer=False, names=("cos",)), "cos": table, "sin": table}, "(N, r/2)"),
        Call(modern_rope.apply_partial_rotary, {"x": x, "cos": bcos, "sin": bsin},
             {"x": T(rank=4, tied=(0, 2), dtype_peer=False, names=("cos",))}, "(B, N, r/2)"),
    ]


@fuzz("modern.long_context_rope.ScaledRotaryEmbedding")
def _(s):
    d = 2 * s.d
    calls = []
    for rope in ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
                 {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 4}):
        module = modern_rope.ScaledRotaryEmbedding(d, **rope)
        calls += [
            Call(modern_rope.ScaledRotaryEmbedding, {"d_head": d, **rope},
                 {"d_head": Bad(1, 2.5, True, "8"), "rope_type": Bad("ntk", 3, None), "factor": ROPE_FACTOR,
                  "original_max_position_embeddings": ORIGINAL_L}, f"init {rope['rope_type']}"),
            Call(lambda module=module, **kw: module(kw.pop("q"), kw.pop("k"), **kw),
                 {"q": r(s.b, s.h, 1, d), "k": r(s.b, 1, s.m, d), "offset": 3},
                 {"q": T(rank=4, tied=(-1,), dtype_peer=False, names=("k",)),
                  "k": T(rank=4, tied=(-1,), dtype_peer=False, names=("q",)), "offset": NONNEG_INT},
                 f"forward {rope['rope_type']}"),
        ]
    return calls


@fuzz("modern.long_context_rope.nope_positions")
def _(s):
    tokens = ids(s.b, s.n, high=5) + 1
    tokens[:, 0] = 0
    return [Call(modern_rope.nope_positions, {"tokens": tokens, "bos_id": 0, "causal": False},
                 {"tokens": T(INT, rank=2, device_peer=False), "bos_id": Bad("0", 2.5, None, True, 1)})]


# attention_sinks.py


@fuzz("modern.attention_sinks.sink_attention")
def _(s):
    return _kernel_calls(modern_sinks.sink_attention, s, {"sinks": r(s.h)},
                         {"sinks": T(rank=1, tied=(0,), dtype_peer=False)})


@fuzz("modern.attention_sinks.LearnedSinks")
def _(s):
    module = modern_sinks.LearnedSinks(s.h, init=0.5)
    forward = lambda **kw: module(kw.pop("q"), kw.pop("k"), kw.pop("v"), **kw)  # noqa: E731
    # any init: a NaN or infinite logit makes every output NaN at once
    return [Call(modern_sinks.LearnedSinks, {"n_heads": s.h, "init": 0.5}, {"n_heads": SIZE}, "init"),
            *[Call(forward, c.kwargs, c.specs, c.label) for c in _kernel_calls(module, s, {}, {})]]


@fuzz("modern.attention_sinks.sink_window_mask")
def _(s):
    return [Call(modern_sinks.sink_window_mask, {"n_queries": s.n, "n_keys": s.n + s.m, "n_sink": 1, "window": 2},
                 # sizes, not ints: a float size is not refused
                 {"n_queries": Bad(-1), "n_keys": Bad(s.n - 1, -1), "n_sink": Bad(-1),
                  "window": Bad(0, -1)})]


@fuzz("modern.attention_sinks.SinkCache")
def _(s):
    def update(**kw):
        cache = modern_sinks.SinkCache(1, 2)
        cache.update(r(s.b, s.h, 2, s.d), r(s.b, s.h, 2, s.d + 1))
        return cache.update(**kw)

    return [
        Call(modern_sinks.SinkCache, {"n_sink": 1, "window": 2}, {"n_sink": Bad(-1), "window": Bad(0, -1)},
             "init"),
        Call(update, {"k": r(s.b, s.h, s.n, s.d), "v": r(s.b, s.h, s.n, s.d + 1)},
             {"k": T(rank=4, tied=(0, 1, 2, 3), names=("v",)), "v": T(rank=4, tied=(0, 1, 2, 3), names=("k",))},
             "update"),
    ]


@fuzz("modern.attention_sinks.streaming_attention")
def _(s):
    qkv_ = _heads(s, m=s.n, d_v=s.d)
    return [Call(modern_sinks.streaming_attention,
                 {**qkv_, "n_sink": 1, "window": 2, "positions": "original", "base": 500.0},
                 {**HEADS, "q": T(rank=4, tied=(0, 1, 2, 3), names=("k", "v")),
                  "n_sink": Bad(-1), "window": Bad(0, -1), "positions": Bad("text", 3, None),
                  "base": Bad(1.0, float("nan"), "1e4", None, True)})]


_rope_entries(modern_sinks, "attention_sinks")
_rope_entries(modern_mla, "latent_attention")


# (end of modern/)


@fuzz("history.gpt.generate")
def _(s):
    model = gpt_mod.GPT(_gpt_config(s), _gpt_block)
    return [Call(gpt_mod.generate, {"model": model, "prompt": ids(s.b, s.n, high=11), "max_new_tokens": 2,
                                    "temperature": 0.5, "generator": torch.Generator(device=torch.get_default_device()).manual_seed(0)},
                 {"model": Bad(), "prompt": T(INT, rank=2, high=11), "max_new_tokens": NONNEG_INT,
                  # model, generator: not checked (no caller passes another object)
                  "temperature": Bad(-1.0, "0.5", None, float("nan")), "generator": Bad()})]


@fuzz("history.gpt.reversal_task")
def _(s):
    return [Call(gpt_mod.reversal_task, {"n_sequences": s.b, "length": s.n, "n_digits": 5},
                 {"n_sequences": POS_INT, "length": POS_INT, "n_digits": POS_INT,
                  "generator": Bad()})]  # not checked, as in generate


@fuzz("history.gpt.train_tiny_gpt")
def _(s):
    config = gpt_mod.GPTConfig(vocab_size=4, d_model=8, n_layers=1, n_heads=2, d_ff=8, max_len=5, dropout=0.0)
    return [Call(gpt_mod.train_tiny_gpt,
                 {"make_block": _gpt_block, "config": config, "length": 2, "n_digits": 3, "steps": 1, "batch_size": 2},
                 {"make_block": Bad(), "config": Bad(),  # neither checked: a wrong one fails at its first use
                  # a length or n_digits the config cannot hold fails the model's input_ids check
                  "length": Bad(0, 2.5, 3, names=("input_ids",)),
                  "n_digits": Bad(0, 2.5, 4, names=("input_ids",)), "steps": NONNEG_INT, "batch_size": POS_INT, "lr": POS_FLOAT,
                  "seed": Bad(2.5, "0", None)})]


# ----------------------------------------------------------------------------


test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error = (
    fuzz_tests('modern.', 'history.gpt.')
)
