"""Malformed input for snippets/linear/softmax_that_forgets.py, refused by name."""

from __future__ import annotations

import torch

from fuzz_support import SCALE, Bad, Call, T, fuzz, fuzz_tests, r
from snippets.linear import softmax_that_forgets as S

QKV = {"q": T(rank=4, tied=(0, 1, 2, 3), names=("k", "v")),
       "k": T(rank=4, tied=(0, 1, 2, 3), names=("q",)),
       "v": T(rank=4, tied=(0, 1, 2), names=("q",)),
       "scale": SCALE}


def _qkv(s):
    return {"q": r(s.b, s.h, s.n, s.d), "k": r(s.b, s.h, s.n, s.d), "v": r(s.b, s.h, s.n, s.d + 1)}


def _log_f(s):
    return -torch.rand(s.b, s.h, s.n)


@fuzz("linear.softmax_that_forgets.forgetting_attention")
def _(s):
    return [Call(S.forgetting_attention, {**_qkv(s), "log_f": _log_f(s), "scale": 0.5},
                 {**QKV, "log_f": T(rank=3, tied=(0, 1, 2), names=("q",), dtype_peer=False)})]


@fuzz("linear.softmax_that_forgets.forget_gate_bias")
def _(s):
    return [Call(S.forget_gate_bias, {"log_f": _log_f(s)}, {})]


@fuzz("linear.softmax_that_forgets.fox_score_mod")
def _(s):
    return [Call(S.fox_score_mod, {"log_f": _log_f(s)},
                 {"log_f": T(rank=3, dtype_peer=False, device_peer=False)})]


@fuzz("linear.softmax_that_forgets.stick_breaking_weights")
def _(s):
    return [Call(S.stick_breaking_weights, {"scores": r(s.b, s.h, s.n, s.n)}, {})]


@fuzz("linear.softmax_that_forgets.stick_breaking_attention")
def _(s):
    return [Call(S.stick_breaking_attention, {**_qkv(s), "scale": 0.5}, QKV)]


def _path(s):
    w = torch.nn.functional.normalize(r(s.b, s.h, s.n, s.d), dim=-1)
    return {**_qkv(s), "w": w, "beta": 2 * torch.rand(s.b, s.h, s.n)}


@fuzz("linear.softmax_that_forgets.path_attention")
def _(s):
    return [Call(S.path_attention, {**_path(s), "log_f": _log_f(s), "scale": 0.5},
                 {**QKV, "w": T(rank=4, tied=(0, 1, 2, 3), names=("q",)),
                  "beta": T(rank=3, tied=(0, 1, 2), names=("q",), dtype_peer=False),
                  "log_f": T(rank=3, tied=(0, 1, 2), names=("q",), dtype_peer=False)})]


@fuzz("linear.softmax_that_forgets.householder_transition")
def _(s):
    path = _path(s)
    return [Call(S.householder_transition, {"w": path["w"], "beta": path["beta"]}, {})]


@fuzz("linear.softmax_that_forgets.path_scores_by_steps",
      "linear.softmax_that_forgets.path_scores")
def _(s):
    path = {k: v for k, v in _path(s).items() if k != "v"}
    return [Call(S.path_scores_by_steps, path, {}, target="path_scores_by_steps"),
            Call(S.path_scores, path, {}, target="path_scores")]


test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error = (
    fuzz_tests("linear.softmax_that_forgets.")
)
