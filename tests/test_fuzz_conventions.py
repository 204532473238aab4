"""Malformed input for snippets/efficiency/conventions.py, refused by name."""

from __future__ import annotations

import torch

from fuzz_support import MASK, SCALE, Bad, Call, T, fuzz, fuzz_tests, r
from snippets.efficiency import conventions as CV

QK = {"q": T(rank=4, tied=(0, 1, 3), names=("k", "v", "sinks")),
      "k": T(rank=4, tied=(0, 1, 3), names=("q",))}


@fuzz("efficiency.conventions.band_mask")
def _(s):
    return [Call(CV.band_mask, {"n": s.n, "m": s.m, "left": 1, "right": 0,
                                "align": "upper_left"},
                 {"n": Bad(0, -1, 2.5), "m": Bad(0, -1, 2.5), "left": Bad(-1, 1.5),
                  "right": Bad(-2, 0.5), "align": Bad("top", None)})]


@fuzz("efficiency.conventions.flash_window")
def _(s):
    return [Call(CV.flash_window, {"window": s.n}, {"window": Bad(0, -3, 2.5)})]


@fuzz("efficiency.conventions.window_from_flash")
def _(s):
    return [Call(CV.window_from_flash, {"window_size": (s.n, 0)},
                 {"window_size": Bad((3, 1), (-2, 0), [3, 0], 4)})]


@fuzz("efficiency.conventions.lse_to_base2", "efficiency.conventions.lse_to_natural")
def _(s):
    loose = Bad()  # any tensor or number: lse / ln 2 is right for each
    return [Call(CV.lse_to_base2, {"lse": r(s.b, s.h, s.n)}, {"lse": loose},
                 target="efficiency.conventions.lse_to_base2"),
            Call(CV.lse_to_natural, {"lse2": r(s.b, s.h, s.n)}, {"lse2": loose},
                 target="efficiency.conventions.lse_to_natural")]


@fuzz("efficiency.conventions.gqa_head_permutation")
def _(s):
    return [Call(CV.gqa_head_permutation, {"n_heads": 4, "n_kv_heads": 2},
                 # n_kv_heads = 3 does not divide n_heads = 4: the message names n_heads
                 {"n_heads": Bad(0, 2.5), "n_kv_heads": Bad(0, 3, 2.5, names=("n_heads",))})]


@fuzz("efficiency.conventions.rope_half_split_order")
def _(s):
    return [Call(CV.rope_half_split_order, {"d": 2 * s.d}, {"d": Bad(0, 3, 2.5, -2)})]


@fuzz("efficiency.conventions.soft_capped_scores")
def _(s):
    args = {"q": r(s.b, s.h, s.n, s.d), "k": r(s.b, s.h, s.m, s.d), "cap": 5.0,
            "scale": 0.5}
    return [Call(CV.soft_capped_scores, args,
                 {**QK, "cap": Bad(0.0, -1.0, float("nan"), float("inf"), None),
                  "scale": SCALE})]


@fuzz("efficiency.conventions.attention_with_sinks")
def _(s):
    args = {"q": r(s.b, s.h, s.n, s.d), "k": r(s.b, s.h, s.m, s.d),
            "v": r(s.b, s.h, s.m, s.d + 1), "sinks": r(s.h),
            "attn_mask": torch.ones(s.n, s.m, dtype=torch.bool), "scale": 0.5}
    rules = {**QK, "v": T(rank=4, tied=(0, 1, 2), names=("q", "k")),
             "sinks": T(rank=1, tied=(0,), names=("q",)),
             "attn_mask": T(kind=MASK, names=("q",)), "scale": SCALE}
    return [Call(CV.attention_with_sinks, args, rules)]


@fuzz("efficiency.conventions.zero_empty_rows")
def _(s):
    args = {"out": r(s.b, s.h, s.n, s.d),
            "attn_mask": torch.ones(s.n, s.m, dtype=torch.bool)}
    return [Call(CV.zero_empty_rows, args,
                 {"out": T(rank=4, dtype_peer=False, names=("attn_mask",)),
                  "attn_mask": T(kind=MASK, dtype_peer=False, names=("out",))})]


test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error = (
    fuzz_tests("efficiency.conventions.")
)
