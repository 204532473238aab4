"""Malformed input for snippets/modern/trainers_tweaks.py, refused by name."""

from __future__ import annotations

import torch

from fuzz_support import Bad, Call, T, fuzz, fuzz_tests, r
from snippets.modern import trainers_tweaks as TT

QKV = {"q": T(rank=4), "k": T(rank=4, tied=(0, 1, 2, 3)), "v": T(rank=4, tied=(0, 1, 2))}
NUM = Bad(0.0, -1.0, float("nan"), float("inf"))


def _qkv(s):
    return {"q": r(s.b, s.h, s.n, s.d), "k": r(s.b, s.h, s.n, s.d), "v": r(s.b, s.h, s.n, s.d + 1)}


@fuzz("modern.trainers_tweaks.value_residual_attention")
def _(s):
    kw = _qkv(s)
    extra, gate = r(s.b, s.h, s.n, s.d + 1), torch.rand(s.b, s.h, s.n, 1)
    return [Call(TT.value_residual_attention, {**kw, "extra": extra, "gate": gate},
                 {**QKV, "extra": T(rank=4, tied=(0, 1, 2, 3)), "gate": T(rank=4, tied=(0, 1, 2, 3)),
                  "scale": NUM})]


@fuzz("modern.trainers_tweaks.value_gate")
def _(s):
    return [Call(TT.value_gate, {"x": r(s.b, s.n, 8), "weight": r(s.h, 4)},
                 {"x": T(rank=3), "weight": T(rank=2), "top": NUM})]


@fuzz("modern.trainers_tweaks.multi_token_attention")
def _(s):
    kw = _qkv(s)
    kernel = TT.delta_kernel(s.h, 2, 3)
    return [Call(TT.multi_token_attention, {**kw, "pre": kernel, "post": kernel.clone()},
                 {**QKV, "pre": T(rank=3, tied=(0,)), "post": T(rank=3, tied=(0,)), "scale": NUM})]


@fuzz("modern.trainers_tweaks.delta_kernel")
def _(s):
    return [Call(TT.delta_kernel, {"n_heads": s.h, "c_q": 2, "c_k": 3},
                 {"n_heads": Bad(0, -1, 2.5), "c_q": Bad(0, -1, 2.5), "c_k": Bad(0, -1, 2.5)})]


@fuzz("modern.trainers_tweaks.canon")
def _(s):
    return [Call(TT.canon, {"x": r(s.b, s.n, 6), "kernel": r(6, 4)},
                 {"x": T(rank=3), "kernel": T(rank=2, tied=(0,))})]


@fuzz("modern.trainers_tweaks.exclusive_attention")
def _(s):
    return [Call(TT.exclusive_attention, _qkv(s),
                 {**QKV, "strength": Bad(-0.1, 1.5, float("nan")), "eps": NUM, "scale": NUM})]


test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error = (
    fuzz_tests("modern.trainers_tweaks.")
)
