"""Malformed input for snippets/modern/differential_attention.py, refused by name."""

from __future__ import annotations

import torch

from fuzz_support import Bad, Call, T, X_ONLY, fuzz, fuzz_tests, r, _module_calls
from snippets.modern import differential_attention as DA

HALF = T(rank=4, tied=(0, 1, 2, 3), names=("q1", "k1", "q2", "k2"), dtype_peer=False)


@fuzz("modern.differential_attention.differential_attention")
def _(s):
    kw = {name: r(s.b, s.h, s.n, s.d) for name in ("q1", "k1", "q2", "k2")}
    kw["v"] = r(s.b, s.h, s.n, 2 * s.d)
    return [Call(DA.differential_attention, {**kw, "lam": 0.5},
                 {"q1": HALF, "k1": HALF, "q2": HALF, "k2": HALF,
                  "v": T(rank=4, tied=(0, 1, 2), names=("q1",), dtype_peer=False)})]


@fuzz("modern.differential_attention.lambda_init_for_layer")
def _(s):
    return [Call(DA.lambda_init_for_layer, {"layer_idx": 3}, {})]


@fuzz("modern.differential_attention.DifferentialAttention")
def _(s):
    return _module_calls(DA.DifferentialAttention, {"d_model": 8, "n_heads": 2},
                         {"n_heads": Bad(3), "lambda_init": Bad(1.0, -0.5)},
                         lambda m, x: m(x), {"x": r(s.b, s.n, 8)}, {"x": X_ONLY})


test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error = (
    fuzz_tests("modern.differential_attention.")
)
