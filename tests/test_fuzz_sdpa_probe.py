"""Malformed input for snippets/efficiency/sdpa_probe.py, refused by name."""

from __future__ import annotations

from fuzz_support import PROB, Bad, Call, T, fuzz, fuzz_tests, ones, r
from snippets.efficiency import sdpa_probe as SP

# a case is a dict (a number, None or a list of pairs is not refused by name)
BAD_CASE = Bad({"dtype": "int8"}, {"colour": 1}, {"n": 0},
               {"d": 2.5}, {"dropout": 1.5}, {"dropout": -0.1}, {"device": "cuda"},
               {"device": "tpu"}, {"torch": "2.12"}, {"mask": "causal-lower"},
               {"h": 8, "h_kv": 3, "enable_gqa": True}, {"h": 8, "h_kv": 2})
H100 = {"device": "cuda", "sm": (9, 0), "cudnn": 91900, "dtype": "bfloat16", "mask": "bool"}


@fuzz("efficiency.sdpa_probe.choose_backend")
def _(s):
    return [Call(SP.choose_backend, {"case": {**H100, "n": s.n, "m": s.m}}, {"case": BAD_CASE}),
            Call(SP.choose_backend, {"case": {"d": 8 * s.d}}, {"case": BAD_CASE}, "cpu")]


@fuzz("efficiency.sdpa_probe.mha_route")
def _(s):
    case = {**H100, "mask": "none", "need_weights": False, "mha_fast_path": True}
    return [Call(SP.mha_route, {"case": case}, {"case": BAD_CASE})]


@fuzz("efficiency.sdpa_probe.probe_sdpa")
def _(s):
    args = {"q": r(s.b, s.h, s.n, s.d), "k": r(s.b, s.h, s.m, s.d), "v": r(s.b, s.h, s.m, s.d + 1),
            "attn_mask": ones(s.n, s.m), "dropout_p": 0.0}
    rules = {"q": T(rank=4, tied=(0, 3), names=("k", "v")),
             "k": T(rank=4, tied=(0, 1, 2, 3), names=("q", "v")),
             "v": T(rank=4, tied=(0, 1, 2), names=("q", "k")),
             "attn_mask": T("mask", rank=2, tied=(0, 1)), "dropout_p": PROB}
    return [Call(SP.probe_sdpa, args, rules)]


@fuzz("efficiency.sdpa_probe.kernel_that_ran")
def _(s):
    # fn: any function of no arguments; a non-function fails on its call
    return [Call(SP.kernel_that_ran, {"fn": lambda: None}, {"fn": Bad()})]


test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error = (
    fuzz_tests("efficiency.sdpa_probe.")
)
