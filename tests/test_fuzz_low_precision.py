"""Malformed input for snippets/efficiency/low_precision.py, refused by name."""

from __future__ import annotations

import torch

from fuzz_support import Bad, Call, T, fuzz, fuzz_tests, r
from snippets.efficiency import low_precision as LP

ALONE = T(dtype_peer=False, device_peer=False)


@fuzz("efficiency.low_precision.ulp")
def _(s):
    return [Call(LP.ulp, {"x": r(s.n, s.d), "dtype": torch.bfloat16},
                 # dtype: torch.finfo refuses a non-floating one in its own words
                 {"x": ALONE, "dtype": Bad()})]


@fuzz("efficiency.low_precision.error_ratio")
def _(s):
    exact = r(s.n, s.d).double()
    return [Call(LP.error_ratio, {"out": r(s.n, s.d), "baseline": r(s.n, s.d), "exact": exact},
                 {"out": T(tied=(0, 1), dtype_peer=False, names=("out",)),
                  "baseline": T(tied=(0, 1), dtype_peer=False, names=("baseline",)),
                  "exact": T(dtype_peer=False, device_peer=False)})]


@fuzz("efficiency.low_precision.fp8_quantize")
def _(s):
    return [Call(LP.fp8_quantize, {"x": r(s.b, 4, s.d), "block": 2},
                 {"x": T(min_rank=2, dtype_peer=False, device_peer=False), "block": Bad(0, -1, 3, 2.5)})]


@fuzz("efficiency.low_precision.hadamard")
def _(s):
    return [Call(LP.hadamard, {"n": 4, "signs": torch.tensor([1, -1, 1, 1])},
                 {"n": Bad(0, 3, 6, 2.5), "signs": Bad(torch.tensor([1, 2, 1, 1]), torch.ones(3), [1, 1, 1, 1])})]


@fuzz("efficiency.low_precision.fp8_attention")
def _(s):
    n = 4
    kw = {"q": r(s.b, s.h, n, s.d), "k": r(s.b, s.h, n, s.d), "v": r(s.b, s.h, n, s.d),
          "block": 2, "rotation": torch.eye(s.d), "is_causal": True}
    spec = {"q": T(rank=4, tied=(0, 1, 2, 3), dtype_peer=False, names=("k", "v")),
            "k": T(rank=4, tied=(0, 1, 2, 3), dtype_peer=False),
            "v": T(rank=4, tied=(0, 1, 2, 3), dtype_peer=False),
            "block": Bad(0, 3, 2.5), "rotation": Bad(torch.eye(s.d + 1), "eye")}
    return [Call(LP.fp8_attention, kw, spec)]


test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error = (
    fuzz_tests("efficiency.low_precision.")
)
