"""Malformed input for snippets/linear/log_linear_attention.py, refused by name."""

from __future__ import annotations

import torch

from fuzz_support import SCALE, Bad, Call, T, fuzz, fuzz_tests, r
from snippets.linear import log_linear_attention as LL

ARGS = {"q": T(rank=4, tied=(0, 1, 2, 3), names=("k", "v", "g", "lam")),
        "k": T(rank=4, tied=(0, 1, 2, 3), names=("q",)),
        "v": T(rank=4, tied=(0, 1, 2), names=("q",)),
        "g": T(rank=3, tied=(0, 1, 2), names=("q",)),
        "lam": T(rank=4, tied=(0, 1, 2), names=("g",)),
        "scale": SCALE}


def _inputs(s):
    # n <= 4 tokens need 3 levels at most; 3 levels serve every drawn length
    return {"q": r(s.b, s.h, s.n, s.d), "k": r(s.b, s.h, s.n, s.d), "v": r(s.b, s.h, s.n, s.d + 1),
            "g": -torch.rand(s.b, s.h, s.n), "lam": torch.rand(s.b, s.h, s.n, 3)}


@fuzz("linear.log_linear_attention.fenwick_levels")
def _(s):
    return [Call(LL.fenwick_levels, {"n": s.n}, {"n": Bad(0, -1, 2.5, None)})]


@fuzz("linear.log_linear_attention.log_linear_mask")
def _(s):
    args = {name: t for name, t in _inputs(s).items() if name in ("g", "lam")}
    return [Call(LL.log_linear_mask, args, {"g": T(rank=3, tied=(0, 1, 2), names=("lam",)),
                                            "lam": T(rank=4, tied=(0, 1, 2), names=("g",))})]


@fuzz("linear.log_linear_attention.log_linear_recurrent")
def _(s):
    return [Call(LL.log_linear_recurrent, {**_inputs(s), "scale": 0.5}, ARGS)]


@fuzz("linear.log_linear_attention.log_linear_parallel")
def _(s):
    return [Call(LL.log_linear_parallel, {**_inputs(s), "scale": 0.5}, ARGS)]


@fuzz("linear.log_linear_attention.log_linear_chunked")
def _(s):
    return [Call(LL.log_linear_chunked, {**_inputs(s), "chunk_size": 2},
                 {**ARGS, "chunk_size": Bad(0, -1, 1.5, 3, None)})]


@fuzz("linear.log_linear_attention.log_linear_step")
def _(s):
    one = {name: t[:, :, 0] for name, t in _inputs(s).items()}
    states = torch.zeros(s.b, s.h, 3, s.d, s.d + 1)
    rules = {"q": T(rank=3, tied=(0, 1, 2), names=("k", "v", "g", "lam")),
             "k": T(rank=3, tied=(0, 1, 2), names=("q",)),
             "v": T(rank=3, tied=(0, 1), names=("q",)),
             "g": T(rank=2, tied=(0, 1), names=("q",)),
             "lam": T(rank=3, tied=(0, 1), names=("g",)),
             "states": T(rank=5, tied=(0, 1, 2, 3, 4), dtype_peer=False),
             "position": Bad(-1, 2.5, None), "scale": SCALE}
    return [Call(LL.log_linear_step, {**one, "states": states, "position": 2, "scale": 0.5},
                 rules)]


test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error = (
    fuzz_tests("linear.log_linear_attention.")
)
