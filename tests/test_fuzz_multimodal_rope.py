"""Malformed input for snippets/modern/multimodal_rope.py, refused by name."""

from __future__ import annotations

import torch

from fuzz_support import INT, Bad, Call, T, fuzz, fuzz_tests, r
from snippets.modern import multimodal_rope as MM

BASE = Bad(1.0, 0.5, float("nan"), float("inf"), None)


def _ids(*shape, high=9):
    return torch.randint(0, high, shape)


@fuzz("modern.multimodal_rope.mrope_position_ids")
def _(s):
    return [Call(MM.mrope_position_ids, {"layout": [s.n, (1, 2, s.d), 1, (2, s.n, 1)],
                                         "restart": "max"},
                 {"layout": Bad([], [0], [2, (1, 0, 3)], [(1, 2)], [2.5], "text", None),
                  "restart": Bad("paper", None, 1)})]


@fuzz("modern.multimodal_rope.mrope_tables")
def _(s):
    return [Call(MM.mrope_tables, {"position_ids": _ids(3, s.b, s.n), "rotary_dim": 8,
                                   "sections": (2, 1, 1), "base": 100.0, "interleaved": True},
                 {"position_ids": T(INT, min_rank=2, tied=(0,), dtype_peer=False, device_peer=False),
                  "rotary_dim": Bad(0, 7, 10, 2.0), "sections": Bad((2, 1), (2, 1, 2), (4, 1, -1), None),
                  "base": BASE})]


@fuzz("modern.multimodal_rope.rope_2d_tables")
def _(s):
    return [Call(MM.rope_2d_tables, {"rows": _ids(s.b, s.n), "cols": _ids(s.b, s.n), "rotary_dim": 8,
                                     "base": 100.0},
                 {"rows": T(INT, rank=2, tied=(0, 1), dtype_peer=False, device_peer=False, names=("cols",)),
                  "cols": T(INT, rank=2, tied=(0, 1), dtype_peer=False),
                  "rotary_dim": Bad(0, 6, 2, 8.0), "base": BASE})]


@fuzz("modern.multimodal_rope.nope_query_scale")
def _(s):
    return [Call(MM.nope_query_scale, {"positions": _ids(s.b, s.n, high=50), "attn_scale": 0.1,
                                       "floor_scale": 4},
                 {"positions": T(INT, dtype_peer=False, device_peer=False),
                  "attn_scale": Bad(-0.1, float("nan"), float("inf"), None),
                  "floor_scale": Bad(0, -4, float("nan"), None)})]


@fuzz("modern.multimodal_rope.scalable_softmax")
def _(s):
    mask = torch.ones(s.n, s.m, dtype=torch.bool).tril(diagonal=s.m - s.n)
    return [Call(MM.scalable_softmax, {"scores": r(s.b, s.h, s.n, s.m), "s": 0.5, "attn_mask": mask},
                 {"scores": T(min_rank=2, tied=(2, 3), dtype_peer=False, device_peer=False, names=("attn_mask",)),
                  "s": Bad(0.0, -1.0, float("nan"), float("inf"), None),
                  "attn_mask": T("bool", tied=(0, 1), lead_fixed=True)})]


test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error = (
    fuzz_tests("modern.multimodal_rope.")
)
