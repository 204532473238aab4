"""Malformed input for snippets/linear/kimi_delta_attention.py, refused by name."""

from __future__ import annotations

import torch

from fuzz_support import SCALE, Bad, Call, T, fuzz, fuzz_tests, r
from snippets.linear import kimi_delta_attention as K

ARGS = {"q": T(rank=4, tied=(0, 1, 2, 3), names=("k", "v", "beta", "g")),
        "k": T(rank=4, tied=(0, 1, 2, 3), names=("q",)),
        "v": T(rank=4, tied=(0, 1, 2), names=("q",)),
        "beta": T(rank=3, tied=(0, 1, 2), names=("q",)),
        "g": T(rank=4, tied=(0, 1, 2, 3), names=("q",)),
        "scale": SCALE}


def _inputs(s):
    return {"q": r(s.b, s.h, s.n, s.d), "k": r(s.b, s.h, s.n, s.d), "v": r(s.b, s.h, s.n, s.d + 1),
            "beta": torch.rand(s.b, s.h, s.n), "g": -torch.rand(s.b, s.h, s.n, s.d)}


@fuzz("linear.kimi_delta_attention.kda_recurrent")
def _(s):
    state = torch.zeros(s.b, s.h, s.d, s.d + 1)
    return [Call(K.kda_recurrent, {**_inputs(s), "scale": 0.5, "initial_state": state},
                 {**ARGS, "initial_state": T(rank=4, tied=(0, 1, 2, 3), names=("state",))})]


@fuzz("linear.kimi_delta_attention.kda_chunked")
def _(s):
    return [Call(K.kda_chunked, {**_inputs(s), "chunk_size": 2},
                 {**ARGS, "chunk_size": Bad(0, -1, 1.5, None)})]


@fuzz("linear.kimi_delta_attention.kda_step")
def _(s):
    one = {name: t[:, :, 0] for name, t in _inputs(s).items()}
    state = torch.zeros(s.b, s.h, s.d, s.d + 1)
    step_args = {"q": T(rank=3, tied=(0, 1, 2), names=("k", "v", "beta", "g")),
                 "k": T(rank=3, tied=(0, 1, 2), names=("q",)),
                 "v": T(rank=3, tied=(0, 1), names=("q",)),
                 "beta": T(rank=2, tied=(0, 1), names=("q",)),
                 "g": T(rank=3, tied=(0, 1, 2), names=("q",)),
                 "state": T(rank=4, tied=(0, 1, 2, 3)), "scale": SCALE}
    return [Call(K.kda_step, {**one, "state": state}, step_args)]


test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error = (
    fuzz_tests("linear.kimi_delta_attention.")
)
