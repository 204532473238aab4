"""Malformed input for snippets/linear/generalised_delta_rule.py, refused by name."""

from __future__ import annotations

import torch

from fuzz_support import SCALE, Call, T, fuzz, fuzz_tests, r
from snippets.linear import generalised_delta_rule as G

TIED = T(rank=4, tied=(0, 1, 2, 3), names=("r",))


@fuzz("linear.generalised_delta_rule.generalised_delta_recurrent")
def _(s):
    args = {"r": r(s.b, s.h, s.n, s.d), "k": r(s.b, s.h, s.n, s.d), "v": r(s.b, s.h, s.n, s.d + 1),
            "w": -torch.rand(s.b, s.h, s.n, s.d), "a": r(s.b, s.h, s.n, s.d),
            "b": r(s.b, s.h, s.n, s.d), "scale": 1.0,
            "initial_state": torch.zeros(s.b, s.h, s.d, s.d + 1)}
    rules = {"r": T(rank=4, tied=(0, 1, 2, 3), names=("k", "v", "w", "a", "b")),
             "k": TIED, "w": TIED, "a": TIED, "b": TIED,
             "v": T(rank=4, tied=(0, 1, 2), names=("r",)),
             "initial_state": T(rank=4, tied=(0, 1, 2, 3)), "scale": SCALE}
    return [Call(G.generalised_delta_recurrent, args, rules)]


test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error = (
    fuzz_tests("linear.generalised_delta_rule.")
)
