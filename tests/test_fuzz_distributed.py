"""Malformed input for the distributed snippets: every public callable refuses it by name.

The framework (what makes an argument wrong, the sweep and the hypothesis test)
is in ``tests/fuzz_support.py``; this file registers one entry per public
callable of ``snippets/distributed/`` and collects the three tests over them.
"""

from __future__ import annotations

import math  # noqa: F401
import pytest  # noqa: F401
import torch
from torch import nn  # noqa: F401

from fuzz_support import *  # noqa: F401,F403
from fuzz_support import fuzz_tests
from snippets.distributed import context_parallel as cp_mod

# distributed/

LAYOUT = Bad("ring", None, 3)
WORLD = {"rank": Bad(-1, 2.5, True, "0", 2), "world_size": Bad(0, -1, 2.5, True, "2")}


@fuzz("distributed.context_parallel.shard_positions")
def _(s):
    return [Call(cp_mod.shard_positions, {"n_local": 4, "rank": 1, "world_size": 2, "layout": "zigzag"},
                 {"n_local": Bad(-1, 2.5, True, "4", 3), **WORLD, "layout": LAYOUT})]


@fuzz("distributed.context_parallel.shard_sequence")
def _(s):
    return [Call(cp_mod.shard_sequence, {"x": r(s.b, s.h, 4, s.d), "rank": 1, "world_size": 2, "layout": "zigzag",
                                         "dim": 2},
                 {"x": T(ANY, min_rank=1, device_peer=False), **WORLD, "layout": LAYOUT,
                  "dim": Bad(4, -5, 2.5, True, "2", 0)})]


@fuzz("distributed.context_parallel.unshard_sequence")
def _(s):
    shards = [r(s.b, s.h, 2, s.d), r(s.b, s.h, 2, s.d)]
    return [Call(cp_mod.unshard_sequence, {"shards": shards, "layout": "zigzag", "dim": 2},
                 {"shards": Bad([], 3, None, [shards[0], "x"], [shards[0], r(s.b, s.h, 3, s.d)]),
                  "layout": LAYOUT, "dim": Bad(4, -5, 2.5, True, "2")})]


@fuzz("distributed.context_parallel.pad_to_multiple")
def _(s):
    return [Call(cp_mod.pad_to_multiple, {"x": r(s.b, s.h, s.n, s.d), "multiple": 4, "dim": -2},
                 {"x": T(ANY, min_rank=1, device_peer=False), "multiple": POS_INT,
                  "dim": Bad(4, -5, 2.5, True, "2")})]


@fuzz("distributed.context_parallel.merge_block")
def _(s):
    lead = (s.b, s.h, s.n)
    kw = {"m": r(*lead, 1), "l": r(*lead, 1).abs(), "o": r(*lead, s.d), "scores": r(*lead, s.m),
          "v": r(s.b, s.h, s.m, s.d)}
    return [Call(cp_mod.merge_block, kw,
                 {"m": T(min_rank=2, tied=(0, 1, 2, 3), names=("l", "o", "scores")),
                  "l": T(min_rank=2, tied=(0, 1, 2, 3), names=("m", "o", "scores")),
                  "o": T(min_rank=2, tied=(0, 1, 2, 3), names=("m", "v")),
                  "scores": T(min_rank=2, tied=(0, 1, 2, 3), names=("m", "v")),
                  "v": T(min_rank=2, tied=(0, 1, 2, 3), names=("scores", "o"))})]


CP_QKV = {"q": T(rank=4, tied=(0, 1, 2, 3), names=("k", "v")), "k": T(rank=4, tied=(0, 1, 2, 3), names=("q", "v")),
          "v": T(rank=4, tied=(0, 1, 2), names=("q", "k")), "key_mask": KEY_MASK, "is_causal": FLAG}


def _cp_inputs(s, n=4):
    return {"q": r(s.b, s.h, n, s.d), "k": r(s.b, s.h, n, s.d), "v": r(s.b, s.h, n, s.d + 1),
            "key_mask": ones(s.b, n), "is_causal": True}


@fuzz("distributed.context_parallel.ring_attention", "distributed.context_parallel.allgather_kv_attention")
def _(s):
    return [Call(fn, {**_cp_inputs(s), "layout": "zigzag", "scale": 0.5},
                 {**CP_QKV, "layout": LAYOUT, "scale": SCALE}, fn.__name__, fn.__name__)
            for fn in (cp_mod.ring_attention, cp_mod.allgather_kv_attention)]


@fuzz("distributed.context_parallel.ulysses_attention")
def _(s):
    return [Call(cp_mod.ulysses_attention, {**_cp_inputs(s), "scale": 0.5}, {**CP_QKV, "scale": SCALE})]


@fuzz("distributed.context_parallel.simulate_ring_attention")
def _(s):
    return [Call(cp_mod.simulate_ring_attention, {**_cp_inputs(s), "world_size": 2, "layout": "zigzag"},
                 {**CP_QKV, "world_size": Bad(0, -1, 2.5, True, "2", 3), "layout": LAYOUT})]


@fuzz("distributed.context_parallel.causal_work_per_rank")
def _(s):
    return [Call(cp_mod.causal_work_per_rank, {"n": 8, "world_size": 2, "layout": "zigzag"},
                 {"n": Bad(-1, 2.5, True, "8", 6), "world_size": Bad(0, -1, 2.5, True, "2", 3), "layout": LAYOUT})]


# (end of efficiency/, linear/, distributed/)


test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error = (
    fuzz_tests('distributed.')
)
