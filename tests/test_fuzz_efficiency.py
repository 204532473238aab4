"""Malformed input for the efficiency snippets: every public callable refuses it by name.

The framework (what makes an argument wrong, the sweep and the hypothesis test)
is in ``tests/fuzz_support.py``; this file registers one entry per public
callable of ``snippets/efficiency/`` and collects the three tests over them.
"""

from __future__ import annotations

import math  # noqa: F401
import pytest  # noqa: F401
import torch
from torch import nn  # noqa: F401

from fuzz_support import *  # noqa: F401,F403
from fuzz_support import fuzz_tests
from snippets.efficiency import flash_triton as ft_mod
from snippets.efficiency import flex_attention as flex_mod
from snippets.efficiency import kv_cache as kv_mod
from snippets.efficiency import linear_attention as linear_mod
from snippets.efficiency import paged_kv_cache as paged_mod
from snippets.efficiency import sliding_window as sliding_mod
from snippets.efficiency import static_cache as static_mod
from snippets.efficiency import tiled_attention as tiled_mod

# efficiency
# ----------------------------------------------------------------------------


@fuzz("efficiency.kv_cache.kv_cache_bytes")
def _(s):
    return [Call(kv_mod.kv_cache_bytes, {"batch": s.b, "seq_len": s.m, "n_layers": 2, "n_kv_heads": s.h, "d_head": s.d},
                 {"batch": NONNEG_INT, "seq_len": NONNEG_INT, "n_layers": NONNEG_INT, "n_kv_heads": NONNEG_INT,
                  "d_head": NONNEG_INT, "dtype": Bad("float16", 2, None)})]


@fuzz("efficiency.kv_cache.KVCache")
def _(s):
    init = {"n_layers": 2, "batch": s.b, "n_kv_heads": s.h, "d_head": s.d, "max_len": s.n + s.m}
    k_spec = T(rank=4, tied=(0, 1, 3), names=("v",))
    return [
        # dtype: any torch.dtype (an integer cache refuses float keys in update)
        Call(kv_mod.KVCache, init, {"n_layers": POS_INT, "batch": POS_INT, "n_kv_heads": POS_INT,
                                    "d_head": POS_INT, "max_len": POS_INT, "dtype": Bad("float16", 2)},
             "init"),
        Call(lambda **kw: kv_mod.KVCache(**init).update(**kw),
             {"layer": 1, "k": r(s.b, s.h, s.n, s.d), "v": r(s.b, s.h, s.n, s.d)},
             {"layer": Bad(2, -1, 1.0, True, "0"), "k": k_spec, "v": T(rank=4, tied=(0, 1, 2, 3), names=("k",))},
             "update"),
    ]


@fuzz("efficiency.kv_cache.CachedSelfAttention")
def _(s):
    d_model = 4 * s.d
    module = kv_mod.CachedSelfAttention(d_model, 4, 2)
    return [
        Call(kv_mod.CachedSelfAttention, {"d_model": d_model, "n_heads": 4, "n_kv_heads": 2},
             {"d_model": POS_INT, "n_heads": Bad(0, 3, 2.5, True), "n_kv_heads": Bad(0, 3, 2.5, "2")}, "init"),
        Call(lambda x: module(x), {"x": r(s.b, s.n, d_model)}, {"x": X_ONLY}, "forward"),
        Call(lambda x, cache, layer: module(x, cache, layer),
             {"x": r(s.b, s.n, d_model), "cache": kv_mod.KVCache(2, s.b, 2, s.d, s.n + 1), "layer": 1},
             {"x": T(rank=3, tied=(0, -1), names=("cache", "k")), "cache": Bad(),  # a KVCache
              "layer": Bad(2, -1, 1.5, True)}, "cached"),
    ]


def _tiny_decoder(s):
    return kv_mod.TinyDecoder(11, 4 * s.d, 2, 1, max_len=s.n + s.m).eval()


@fuzz("efficiency.kv_cache.TinyDecoder")
def _(s):
    module = _tiny_decoder(s)
    return [
        Call(kv_mod.TinyDecoder, {"vocab_size": 11, "d_model": 2 * s.d, "n_heads": 2, "n_layers": 1},
             {"vocab_size": POS_INT, "d_model": POS_INT, "n_heads": Bad(0, 3, 2.5), "n_layers": POS_INT,
              "n_kv_heads": Bad(0, 3, 2.5), "max_len": POS_INT}, "init"),
        Call(lambda tokens: module(tokens), {"tokens": ids(s.b, s.n, high=11)},
             {"tokens": T(INT, rank=2, high=11)}, "forward"),
    ]


@fuzz("efficiency.kv_cache.generate")
def _(s):
    return [Call(kv_mod.generate, {"model": _tiny_decoder(s), "prompt": ids(s.b, s.n, high=11), "n_new": 2},
                 {"model": Bad(), "prompt": T(INT, rank=2, high=11), "n_new": NONNEG_INT})]  # any decoder


@fuzz("efficiency.linear_attention.feature_map")
def _(s):
    return [Call(linear_mod.feature_map, {"x": r(s.b, s.n, s.d)}, {"x": T(dtype_peer=False, device_peer=False)})]


@fuzz("efficiency.linear_attention.linear_attention")
def _(s):
    return [Call(linear_mod.linear_attention, {**qkv(s), "causal": causal}, {**qkv_specs(), "eps": Bad(-1.0, "x", None)},
                 f"causal={causal}") for causal in (False, True)]


@fuzz("efficiency.linear_attention.linear_attention_step")
def _(s):
    base = {"q": r(s.b, s.h, s.d), "k": r(s.b, s.h, s.d), "v": r(s.b, s.h, s.d + 1)}
    state = (r(s.b, s.h, s.d, s.d + 1), r(s.b, s.h, s.d))
    step_specs = {"q": T(min_rank=1, tied=(0, 1, 2), names=("k", "v")),
                  "k": T(min_rank=1, tied=(0, 1, 2), names=("q", "v")),
                  "v": T(min_rank=1, tied=(0, 1), names=("q", "k")), "eps": Bad(-1.0, "x", None)}
    return [
        Call(linear_mod.linear_attention_step, dict(base), step_specs, "first step"),
        Call(linear_mod.linear_attention_step, {**base, "state": state},
             {"state": Bad(3, "state", (1, 2), (state[0],), (state[0].double(), state[1]),
                           (state[0], state[1].to(OTHER_DEVICE)), (state[0], state[1][:, :1]))}, "with state"),
    ]


@fuzz("efficiency.sliding_window.sliding_window_mask")
def _(s):
    return [Call(sliding_mod.sliding_window_mask, {"n": s.n, "window": 2},
                 {"n": NONNEG_INT, "window": POS_INT})]


@fuzz("efficiency.sliding_window.sliding_window_attention")
def _(s):
    base = {"q": r(s.b, s.h, s.n, s.d), "k": r(s.b, s.h, s.n, s.d), "v": r(s.b, s.h, s.n, s.d + 1), "window": 2}
    specs = {"q": T(min_rank=2, tied=(0, 1, -2, -1)), "k": T(min_rank=2, tied=(0, 1, -2, -1)),
             "v": T(min_rank=2, tied=(0, 1, -2)), "window": POS_INT, "chunk_size": POS_INT}
    return [Call(sliding_mod.sliding_window_attention, base, specs)]


@fuzz("efficiency.tiled_attention.online_softmax")
def _(s):
    return [Call(tiled_mod.online_softmax, {"x": r(s.b, s.n, s.m), "block_size": 2},
                 {"x": T(min_rank=1, dtype_peer=False, device_peer=False), "block_size": POS_INT})]


@fuzz("efficiency.tiled_attention.tiled_attention")
def _(s):
    specs = {**qkv_specs(), "block_size_k": POS_INT, "block_size_q": POS_INT,
             "scale": Bad(0.0, -1.0, float("nan"), "1", True)}
    return [Call(tiled_mod.tiled_attention, {**qkv(s), "block_size_k": 2, "block_size_q": 2, "is_causal": True},
                 specs)]


# ----------------------------------------------------------------------------
# efficiency/ (flash_triton, flex_attention, paged_kv_cache, static_cache), linear/, distributed/
# ----------------------------------------------------------------------------





def half(*shape: int) -> torch.Tensor:
    return r(*shape, dtype=torch.float16)


@fuzz("efficiency.flash_triton.flash_attention", "efficiency.flash_triton.flash_attention_lse",
      "efficiency.flash_triton.FlashAttention")
def _(s):
    # Triton's interpreter is slow: one tile of 16 queries by 16 keys, d = 16.
    qkv_ = {"q": half(2, s.h, s.n, 16), "k": half(2, s.h, s.m, 16), "v": half(2, s.h, s.m, 16)}
    specs = {"q": T(rank=4, tied=(0, 1, 3), names=("k", "v")), "k": T(rank=4, tied=(0, 1, 2, 3), names=("q", "v")),
             "v": T(rank=4, tied=(0, 1, 2, 3), names=("q", "k")), "causal": FLAG, "scale": SCALE,
             "block_m": Bad(8, 24, 2.5, True, "16"), "block_n": Bad(0, 24, 2.5, "16")}
    kw = {**qkv_, "causal": True, "scale": 0.5, "block_m": 16, "block_n": 16}
    apply = lambda q, k, v, causal, scale, block_m, block_n: ft_mod.FlashAttention.apply(  # noqa: E731
        q, k, v, causal, scale, block_m, block_n)
    return [Call(ft_mod.flash_attention, dict(kw), specs, "flash_attention", "flash_attention"),
            Call(ft_mod.flash_attention_lse, dict(kw), specs, "flash_attention_lse", "flash_attention_lse"),
            Call(apply, dict(kw), specs, "apply", "FlashAttention")]


@fuzz("efficiency.flex_attention.causal_mask_mod")
def _(s):
    return [Call(flex_mod.causal_mask_mod, {"n_queries": s.n, "n_keys": s.m}, CAUSAL_MASK_SPECS)]


@fuzz("efficiency.flex_attention.sliding_window_mask_mod")
def _(s):
    return [Call(flex_mod.sliding_window_mask_mod, {"window": 2, "n_queries": s.n, "n_keys": s.m, "causal": False},
                 {"window": POS_INT, **CAUSAL_MASK_SPECS, "causal": FLAG})]


@fuzz("efficiency.flex_attention.prefix_lm_mask_mod")
def _(s):
    return [Call(flex_mod.prefix_lm_mask_mod, {"prefix_len": 1}, {"prefix_len": NONNEG_INT})]


@fuzz("efficiency.flex_attention.document_ids_from_lengths")
def _(s):
    return [Call(flex_mod.document_ids_from_lengths, {"lengths": [1, s.n]},
                 {"lengths": Bad([], [0], [2.5], "12", 3, None)})]


@fuzz("efficiency.flex_attention.document_mask_mod")
def _(s):
    return [Call(flex_mod.document_mask_mod, {"document_ids": ids(s.b, s.n, high=2), "causal": True},
                 {"document_ids": T(ANY, min_rank=1, device_peer=False), "causal": FLAG})]


@fuzz("efficiency.flex_attention.alibi_score_mod")
def _(s):
    return [Call(flex_mod.alibi_score_mod, {"slopes": r(s.h).abs(), "n_queries": s.n, "n_keys": s.m, "causal": True},
                 {"slopes": T(rank=1, dtype_peer=False, device_peer=False), **CAUSAL_MASK_SPECS, "causal": FLAG})]


@fuzz("efficiency.flex_attention.soft_cap_score_mod")
def _(s):
    return [Call(flex_mod.soft_cap_score_mod, {"cap": 5.0}, {"cap": POS_FLOAT})]


@fuzz("efficiency.flex_attention.dense_mask")
def _(s):
    return [Call(flex_mod.dense_mask, {"mask_mod": flex_mod.causal_mask_mod(s.n, s.m), "n_queries": s.n,
                                       "n_keys": s.m, "batch": s.b, "heads": s.h},
                 # mask_mod: any function (a non-function fails on its call)
                 {"mask_mod": Bad(), **CAUSAL_MASK_SPECS, "batch": POS_INT, "heads": POS_INT})]


@fuzz("efficiency.flex_attention.block_tiles", "efficiency.flex_attention.computed_block_fraction")
def _(s):
    return [Call(fn, {"mask": ones(s.b, s.n, s.m), "block_size": 2},
                 {"mask": T(BOOL, min_rank=2, device_peer=False), "block_size": POS_INT}, fn.__name__, fn.__name__)
            for fn in (flex_mod.block_tiles, flex_mod.computed_block_fraction)]


@fuzz("efficiency.flex_attention.block_mask_fraction")
def _(s):
    block_mask = create_block_mask(flex_mod.causal_mask_mod(4, 4), 1, 1, 4, 4, device="cpu", BLOCK_SIZE=2)
    return [Call(flex_mod.block_mask_fraction, {"block_mask": block_mask},
                 {"block_mask": Bad(3, None, ones(4, 4))})]


@fuzz("efficiency.flex_attention.flex_attend")
def _(s):
    base = {"q": r(s.b, s.h, s.n, s.d), "k": r(s.b, s.h, s.m, s.d), "v": r(s.b, s.h, s.m, s.d + 1)}
    specs = {"q": T(rank=4, tied=(0, 1, 3), names=("k", "v")), "k": T(rank=4, tied=(0, 1, 2, 3), names=("q", "v")),
             "v": T(rank=4, tied=(0, 1, 2), names=("q", "k")), "mask_mod": Bad(),  # functions:
             "score_mod": Bad(), "block_size": POS_INT}  # not checked
    return [Call(flex_mod.flex_attend, {**base, "mask_mod": flex_mod.causal_mask_mod(s.n, s.m), "block_size": 2},
                 specs)]


@fuzz("efficiency.flex_attention.flash_attn_window_size")
def _(s):
    return [Call(flex_mod.flash_attn_window_size, {"window": 3, "causal": False}, {"window": POS_INT, "causal": FLAG})]


def _paged(s, n_pages=8):
    cache = paged_mod.PagedKVCache(n_pages, 2, s.h, s.d)
    seqs = [cache.add_sequence() for _ in range(s.b)]
    for i, seq in enumerate(seqs):
        cache.append(seq, r(s.h, i + 1, s.d), r(s.h, i + 1, s.d))
    return cache, seqs


@fuzz("efficiency.paged_kv_cache.PagedKVCache")
def _(s):
    init = {"n_pages": 4, "page_size": 2, "n_kv_heads": s.h, "d_head": s.d}
    kv = T(rank=3, tied=(0, 1, 2), dtype_peer=False, names=("k", "v"))
    seq_spec = {"seq": Bad(7, -1, "0", None, 2.5)}
    calls = [Call(paged_mod.PagedKVCache, init,
                  {"n_pages": POS_INT, "page_size": POS_INT, "n_kv_heads": POS_INT, "d_head": POS_INT,
                   "dtype": FLOAT_DTYPE}, "init")]

    def method(name):
        def call(**kw):
            cache, seqs = _paged(s)
            return getattr(cache, name)(**kw)
        return call

    calls.append(Call(method("append"), {"seq": 1, "k": r(s.h, s.n, s.d), "v": r(s.h, s.n, s.d)},
                      {**seq_spec, "k": kv, "v": kv}, "append"))
    for name in ("block_table", "gather", "free"):
        calls.append(Call(method(name), {"seq": 1}, seq_spec, name))
    return calls


@fuzz("efficiency.paged_kv_cache.paged_decode")
def _(s):
    cache, seqs = _paged(s)
    return [Call(paged_mod.paged_decode, {"q": r(s.b, 2 * s.h, 1, s.d), "cache": cache, "seqs": seqs},
                 {"q": T(rank=4, tied=(0, 1, 3), names=("seqs", "cache")), "cache": Bad(),  # a PagedKVCache
                  # a dead id: gather's check names seq
                  "seqs": Bad(3, None, [7] * s.b, ["0"] * s.b, (0,) * (s.b + 1), names=("seq",))})]


@fuzz("efficiency.paged_kv_cache.ragged_causal_mask")
def _(s):
    return [Call(paged_mod.ragged_causal_mask, {"lengths": [1, s.n], "n": s.n + 1, "padding": "left"},
                 # lengths: [] is an empty batch; a non-list fails on iteration
                 {"lengths": Bad([-1], [2.5], [s.n + 2]), "n": Bad(-1, 2.5, True, "3", 1),
                  "padding": Bad("center", None, 3)})]


@fuzz("efficiency.paged_kv_cache.split_kv_attention")
def _(s):
    return [Call(paged_mod.split_kv_attention, {**qkv(s, d_v=s.d), "n_splits": 2},
                 {"q": T(rank=4, tied=(0, 1, 3), names=("k", "v")), "k": T(rank=4, tied=(0, 1, 2, 3), names=("q", "v")),
                  "v": T(rank=4, tied=(0, 1, 2), names=("q", "k")), "n_splits": Bad(0, -1, 2.5, True, "2", s.m + 1)})]


@fuzz("efficiency.paged_kv_cache.speculative_generate")
def _(s):
    torch.manual_seed(0)
    target, draft = nn.Embedding(11, 11), nn.Embedding(11, 11)
    return [Call(paged_mod.speculative_generate,
                 {"target": target, "draft": draft, "prompt": ids(1, s.n, high=11), "n_new": 3, "n_draft": 2},
                 # target, draft: any models (not checked)
                 {"target": Bad(), "draft": Bad(), "prompt": T(INT, rank=2, tied=(0,), device_peer=False),
                  "n_new": NONNEG_INT, "n_draft": POS_INT})]


def _tiny_static(s):
    return kv_mod.TinyDecoder(11, 4 * s.d, 4, 2, n_kv_heads=2, max_len=s.n + 3).eval()


@fuzz("efficiency.static_cache.StaticKVCache")
def _(s):
    init = {"n_layers": 2, "batch": s.b, "n_kv_heads": s.h, "d_head": s.d, "max_len": s.n + 2}
    kv = T(rank=4, tied=(0, 1, 2, 3), names=("k", "v", "positions"))
    model = _tiny_static(s)

    def cache():
        return static_mod.StaticKVCache(**init)

    return [
        # dtype: any torch.dtype (an integer cache refuses float keys in write)
        Call(static_mod.StaticKVCache, init, {"n_layers": POS_INT, "batch": POS_INT, "n_kv_heads": POS_INT,
                                              "d_head": POS_INT, "max_len": POS_INT,
                                              "dtype": Bad("float16", 2)}, "init"),
        Call(lambda **kw: static_mod.StaticKVCache.for_model(**kw), {"model": model, "batch": s.b, "max_len": s.n},
             {"model": Bad(), "batch": POS_INT, "max_len": POS_INT}, "for_model"),  # model: not checked
        Call(lambda **kw: cache().write(**kw),
             {"layer": 1, "positions": torch.arange(s.n), "k": r(s.b, s.h, s.n, s.d), "v": r(s.b, s.h, s.n, s.d)},
             {"layer": Bad(2, -1, 1.0, True, "0"), "positions": T(INT, rank=1, tied=(0,), names=("k", "v")),
              "k": kv, "v": kv}, "write"),
        Call(lambda positions: cache().mask(positions), {"positions": torch.arange(s.n)},
             {"positions": T(INT, rank=1, device_peer=False)}, "mask"),
    ]


@fuzz("efficiency.static_cache.static_forward")
def _(s):
    model = _tiny_static(s)
    cache = static_mod.StaticKVCache.for_model(model, s.b, s.n + 3)
    return [Call(static_mod.static_forward, {"model": model, "cache": cache, "tokens": ids(s.b, s.n, high=11),
                                             "positions": torch.arange(s.n)},
                 # model, cache: not checked here (the cache's write checks its fit)
                 {"model": Bad(), "cache": Bad(),
                  "tokens": T(INT, rank=2, tied=(0, 1), names=("positions", "k")),
                  "positions": T(INT, rank=1, tied=(0,), names=("tokens",))})]


@fuzz("efficiency.static_cache.generate_static")
def _(s):
    return [Call(static_mod.generate_static, {"model": _tiny_static(s), "prompt": ids(s.b, s.n, high=11), "n_new": 2},
                 # model, compile_options: not checked (torch.compile names a bad option)
                 {"model": Bad(), "prompt": T(INT, rank=2, high=11), "n_new": Bad(-1, 2.5, True, "2", 9),
                  "compile_options": Bad()})]


test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error = (
    fuzz_tests('efficiency.')
)
