"""Malformed input for snippets/efficiency/tree_speculation.py, refused by name."""

from __future__ import annotations

import torch
from torch import nn

from fuzz_support import INT, NONNEG_INT, Bad, Call, T, fuzz, fuzz_tests, ids, r
from snippets.efficiency import tree_speculation as TS

# A parent array is int ids of rank 1; its values are checked by the unit tests
# (a parent at or after its node, below -1), since poking -1 into node 0 is valid.
PARENTS = T(INT, rank=1, device_peer=False)


def _parents(s):
    return torch.tensor([-1, 0, -1, 1, 0][: s.n + 2])


@fuzz("efficiency.tree_speculation.tree_attention_mask",
      "efficiency.tree_speculation.tree_position_ids")
def _(s):
    specs = {"parents": PARENTS, "n_prefix": NONNEG_INT}
    return [Call(TS.tree_attention_mask, {"parents": _parents(s), "n_prefix": s.m}, specs,
                 "mask", "tree_attention_mask"),
            Call(TS.tree_position_ids, {"parents": _parents(s), "n_prefix": 0}, specs,
                 "positions", "tree_position_ids")]


@fuzz("efficiency.tree_speculation.tree_verify")
def _(s):
    torch.manual_seed(0)
    embed = nn.Embedding(11, 11)

    def target(tokens, positions, mask):
        return embed(tokens)  # a bigram model: logits from the last token alone

    parents = _parents(s)
    args = {"target": target, "prefix": ids(1, s.n, high=11),
            "tree_tokens": ids(len(parents), high=11), "parents": parents}
    rules = {"target": Bad(3, None, "target"),
             "prefix": T(INT, rank=2, tied=(0,), device_peer=False),
             "tree_tokens": T(INT, rank=1, tied=(0,), device_peer=False, names=("parents",)),
             "parents": T(INT, rank=1, tied=(0,), device_peer=False, names=("tree_tokens",))}
    return [Call(TS.tree_verify, args, rules)]


@fuzz("efficiency.tree_speculation.accepted_kv")
def _(s):
    L = s.n + 3
    args = {"k": r(s.b, s.h, L, s.d), "v": r(s.b, s.h, L, s.d + 1), "n_prefix": 2,
            "accepted": torch.tensor([0, 1])}
    rules = {"k": T(rank=4, tied=(0, 1, 2), names=("v",)),
             "v": T(rank=4, tied=(0, 1, 2), names=("k",)),
             "n_prefix": Bad(-1, 2.5, L + 1),
             "accepted": T(INT, rank=1, device_peer=False, high=L - 2)}
    return [Call(TS.accepted_kv, args, rules)]


test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error = (
    fuzz_tests("efficiency.tree_speculation.")
)
