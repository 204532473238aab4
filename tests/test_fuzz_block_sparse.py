"""Malformed input for snippets/linear/block_sparse_attention.py, refused by name."""

from __future__ import annotations

from fuzz_support import SCALE, Bad, Call, T, fuzz, fuzz_tests, r
from snippets.linear import block_sparse_attention as BS

QK = {"q": T(rank=4, tied=(0, 1, 2, 3), names=("k", "v")),
      "k": T(rank=4, tied=(0, 1, 2, 3), names=("q",)),
      "block_size": Bad(0, -2, 1.5), "top_k": Bad(0, -1, 2.5)}


@fuzz("linear.block_sparse_attention.moba_block_choice")
def _(s):
    return [Call(BS.moba_block_choice, {"q": r(s.b, s.h, s.n, s.d), "k": r(s.b, s.h, s.n, s.d),
                                        "block_size": 2, "top_k": 2}, QK)]


@fuzz("linear.block_sparse_attention.moba_attention")
def _(s):
    args = {"q": r(s.b, s.h, s.n, s.d), "k": r(s.b, s.h, s.n, s.d), "v": r(s.b, s.h, s.n, s.d + 1),
            "block_size": 2, "top_k": 2, "scale": 0.5}
    return [Call(BS.moba_attention, args,
                 {**QK, "v": T(rank=4, tied=(0, 1, 2), names=("q",)), "scale": SCALE})]


def _index(s):
    return {"index_q": r(s.b, 2, s.n, s.d), "index_k": r(s.b, 1, s.n, s.d)}


INDEX = {"index_q": T(rank=4, tied=(0, 1, 2, 3), names=("index_k", "q", "k", "v")),
         "index_k": T(rank=4, tied=(0, 1, 2, 3), names=("index_q",)),
         "block_size": Bad(0, -2, 1.5), "top_k": Bad(0, -1, 2.5), "local_blocks": Bad(-1, 0.5)}


@fuzz("linear.block_sparse_attention.group_block_choice")
def _(s):
    rules = {**INDEX, "index_q": T(rank=4, tied=(0, 2, 3), names=("index_k",))}  # G is free
    return [Call(BS.group_block_choice, {**_index(s), "block_size": 2, "top_k": 2,
                                         "local_blocks": 1}, rules)]


@fuzz("linear.block_sparse_attention.group_sparse_attention")
def _(s):
    args = {"q": r(s.b, 4, s.n, s.d + 1), "k": r(s.b, 2, s.n, s.d + 1), "v": r(s.b, 2, s.n, s.d),
            **_index(s), "block_size": 2, "top_k": 2, "local_blocks": 1, "scale": 0.5}
    rules = {**INDEX, "q": T(rank=4, tied=(0, 1, 2, 3), names=("index_q", "k")),
             "k": T(rank=4, tied=(0, 1, 2, 3), names=("index_q",)),
             "v": T(rank=4, tied=(0, 1, 2), names=("index_q",)), "scale": SCALE}
    return [Call(BS.group_sparse_attention, args, rules)]


test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error = (
    fuzz_tests("linear.block_sparse_attention.")
)
