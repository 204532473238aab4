"""Malformed input for snippets/linear/compressed_attention.py, refused by name."""

from __future__ import annotations

import torch

from fuzz_support import SCALE, BOOL, Bad, Call, T, fuzz, fuzz_tests, r
from snippets.linear import compressed_attention as CA

COUNT = Bad(0, -1, 2.5)  # an int >= 1
NONNEG = Bad(-1, 2.5)  # an int >= 0


@fuzz("linear.compressed_attention.compress_entries")
def _(s):
    args = {"c": r(s.b, s.n + 2, 2 * s.d), "z": r(s.b, s.n + 2, 2 * s.d),
            "bias": r(2, 2 * s.d), "compress_rate": 2, "overlap": True}
    rules = {"c": T(rank=3, tied=(0, 1, 2), names=("z", "bias")),
             "z": T(rank=3, tied=(0, 1, 2), names=("c",)),
             "bias": T(rank=2, tied=(0, 1), dtype_peer=False, names=("c",)),
             "compress_rate": COUNT}
    return [Call(CA.compress_entries, args, rules)]


@fuzz("linear.compressed_attention.select_entries")
def _(s):
    args = {"q_idx": r(s.b, s.n, s.h, s.d), "k_idx": r(s.b, s.n, s.d), "w": r(s.b, s.n, s.h),
            "compress_rate": 1, "top_k": 2}
    rules = {"q_idx": T(rank=4, tied=(0, 1, 2, 3), names=("k_idx", "w")),
             "k_idx": T(rank=3, tied=(0, 1, 2), names=("q_idx",)),
             "w": T(rank=3, tied=(0, 1, 2), names=("q_idx",)),
             "compress_rate": COUNT, "top_k": COUNT}
    return [Call(CA.select_entries, args, rules)]


@fuzz("linear.compressed_attention.v4_attention")
def _(s):
    args = {"q": r(s.b, s.h, s.n, s.d), "kv": r(s.b, 1, s.n, s.d), "entries": r(s.b, 1, s.n, s.d),
            "compress_rate": 1, "window": 2,
            "selected": torch.ones(s.b, s.n, s.n, dtype=torch.bool), "sink": r(s.h), "scale": 0.5}
    rules = {"q": T(rank=4, tied=(0, 1, 2, 3), names=("kv", "entries", "sink", "selected")),
             "kv": T(rank=4, tied=(0, 1, 2, 3), names=("q",)),
             "entries": T(rank=4, tied=(0, 1, 2, 3), names=("q",)),
             "selected": T(BOOL, rank=3, tied=(0, 1, 2), names=("q",)),
             "sink": T(rank=1, tied=(0,), dtype_peer=False, names=("q",)),
             "compress_rate": COUNT, "window": NONNEG, "scale": SCALE}
    return [Call(CA.v4_attention, args, rules)]


@fuzz("linear.compressed_attention.dense_cost")
def _(s):
    args = {"context": 100, "kv_bytes": 4}
    return [Call(CA.dense_cost, args, {k: COUNT for k in args})]


@fuzz("linear.compressed_attention.nsa_cost")
def _(s):
    args = {"context": 100, "kv_bytes": 4, "block": 8, "n_select": 2, "window": 16,
            "cmp_block": 8, "cmp_stride": 4}
    return [Call(CA.nsa_cost, args, {**{k: COUNT for k in args}, "window": NONNEG})]


@fuzz("linear.compressed_attention.dsa_cost")
def _(s):
    args = {"context": 100, "kv_bytes": 4, "index_bytes": 2, "top_k": 8}
    return [Call(CA.dsa_cost, args, {**{k: COUNT for k in args}, "index_bytes": NONNEG})]


@fuzz("linear.compressed_attention.moba_cost")
def _(s):
    args = {"context": 100, "kv_bytes": 4, "block": 8, "top_k": 3}
    return [Call(CA.moba_cost, args, {k: COUNT for k in args})]


@fuzz("linear.compressed_attention.minimax_cost")
def _(s):
    args = {"context": 100, "kv_bytes": 4, "index_bytes": 2, "block": 8, "top_k": 3}
    return [Call(CA.minimax_cost, args, {**{k: COUNT for k in args}, "index_bytes": NONNEG})]


@fuzz("linear.compressed_attention.v4_cost")
def _(s):
    args = {"context": 100, "entry_bytes": 4, "compress_rate": 4, "window": 8, "top_k": 3,
            "index_bytes": 2}
    rules = {**{k: COUNT for k in ("context", "entry_bytes", "compress_rate", "top_k")},
             "window": NONNEG, "index_bytes": NONNEG}
    return [Call(CA.v4_cost, args, rules)]


test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error = (
    fuzz_tests("linear.compressed_attention.")
)
