"""Malformed input for the KV-cache economy snippets (prefix caching, quantization,
eviction), refused by name."""

from __future__ import annotations

import torch

from fuzz_support import ANY, INT, Bad, Call, T, fuzz, fuzz_tests, r
from snippets.efficiency import kv_eviction as E
from snippets.efficiency import kv_quantization as Q
from snippets.efficiency import prefix_cache as PC

HEADS4 = T(rank=4, tied=(0, 1, 3))


@fuzz("efficiency.prefix_cache.block_hashes")
def _(s):
    return [Call(PC.block_hashes, {"tokens": [1, 2, 3, 4], "block_size": 2},
                 # tokens: any sequence of ids (a non-sequence fails on len)
                 {"tokens": Bad(), "block_size": Bad(0, -1, 2.5)})]


@fuzz("efficiency.prefix_cache.attend_with_prefix")
def _(s):
    kw = {"q": r(s.b, s.h, s.n, s.d), "k_new": r(s.b, s.h, s.n, s.d), "v_new": r(s.b, s.h, s.n, s.d + 1),
          "k_prefix": r(s.b, s.h, s.m, s.d), "v_prefix": r(s.b, s.h, s.m, s.d + 1)}
    spec = {"q": T(rank=4, tied=(0, 1, 2, 3), names=("k_new", "k_prefix", "v_new", "v_prefix")),
            "k_new": T(rank=4, tied=(0, 1, 2, 3), names=("v_new",)),
            "v_new": T(rank=4, tied=(0, 1, 2, 3), names=("v_prefix",)),
            "k_prefix": T(rank=4, tied=(0, 1, 2, 3), names=("v_prefix",)),
            "v_prefix": T(rank=4, tied=(0, 1, 2, 3), names=("v_new",))}
    for t in spec.values():
        object.__setattr__(t, "device_peer", False)  # a device mismatch is torch's own clear error
    return [Call(PC.attend_with_prefix, kw, spec)]


@fuzz("efficiency.kv_quantization.fake_quantize")
def _(s):
    return [Call(Q.fake_quantize, {"x": r(s.n, s.d), "bits": 2, "dim": -1},
                 {"x": T(dtype_peer=False, device_peer=False), "bits": Bad(0, 17, 2.5)})]


@fuzz("efficiency.kv_quantization.kivi_keys", "efficiency.kv_quantization.kivi_values")
def _(s):
    spec = {"bits": Bad(0, 17, 2.5), "group": Bad(0, -1, 2.5)}
    return [Call(Q.kivi_keys, {"k": r(s.b, s.h, 5, 4), "bits": 2, "group": 2},
                 {"k": T(min_rank=2, dtype_peer=False, device_peer=False), **spec}, "keys", "kivi_keys"),
            Call(Q.kivi_values, {"v": r(s.b, s.h, 5, 4), "bits": 2, "group": 2, "residual": 2},
                 {**spec, "group": Bad(0, 3, 2.5)}, "values", "kivi_values")]


@fuzz("efficiency.kv_quantization.fp8_roundtrip")
def _(s):
    return [Call(Q.fp8_roundtrip, {"x": r(s.n, s.d)}, {"x": T(dtype_peer=False, device_peer=False)})]


@fuzz("efficiency.kv_eviction.h2o_keep")
def _(s):
    return [Call(E.h2o_keep, {"scores_sum": r(s.b, s.h, 6), "budget": 3, "recent": 1},
                 {"budget": Bad(0, -1, 2.5), "recent": Bad(-1, 4, 2.5),
                  "scores_sum": T(rank=3, dtype_peer=False, device_peer=False)})]


@fuzz("efficiency.kv_eviction.snapkv_keep")
def _(s):
    return [Call(E.snapkv_keep, {"q_window": r(s.b, s.h, 2, s.d), "k": r(s.b, s.h, 6, s.d), "budget": 4, "pool": 3},
                 {"q_window": HEADS4, "k": T(rank=4, tied=(0, 1, 3), names=("q_window",)),
                  "budget": Bad(0, 1, 2.5), "pool": Bad(0, 2, 2.5)})]


@fuzz("efficiency.kv_eviction.evict")
def _(s):
    return [Call(E.evict, {"cache": r(s.b, s.h, 6, s.d), "keep": torch.tensor([[[0, 5]]]).expand(s.b, s.h, 2)},
                 {"cache": T(ANY, rank=4, tied=(0, 1), names=("keep",), device_peer=False),
                  "keep": T(INT, rank=3, tied=(0, 1), high=6, dtype_peer=False, device_peer=False)})]


test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error = (
    fuzz_tests("efficiency.prefix_cache.", "efficiency.kv_quantization.", "efficiency.kv_eviction.")
)
