"""Malformed input for snippets/efficiency/tree_speculation.py, refused by name."""

from __future__ import annotations

import torch
from torch import nn

from fuzz_support import INT, NONNEG_INT, Bad, Call, T, _module_calls, fuzz, fuzz_tests, ids, r
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
    # target: any model; a non-callable one fails on the call, which names no argument
    rules = {"target": Bad(),
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


@fuzz("efficiency.tree_speculation.tree_verify_sampled")
def _(s):
    torch.manual_seed(0)
    embed = nn.Embedding(11, 11)

    def target(tokens, positions, mask):
        return embed(tokens)  # a bigram model: logits from the last token alone

    parents = _parents(s)
    n = len(parents)
    args = {"target": target, "prefix": ids(1, s.n, high=11),
            "tree_tokens": ids(n, high=11), "parents": parents,
            "q": torch.full((n, 11), 1 / 11), "generator": torch.Generator(device=torch.get_default_device())}
    rules = {"target": Bad(),
             "prefix": T(INT, rank=2, tied=(0,), device_peer=False),
             "tree_tokens": T(INT, rank=1, tied=(0,), device_peer=False, names=("parents",)),
             "parents": T(INT, rank=1, tied=(0,), device_peer=False,
                          names=("tree_tokens", "q")),
             "q": T(rank=2, tied=(0,), dtype_peer=False, device_peer=False)}
    return [Call(TS.tree_verify_sampled, args, rules)]


@fuzz("efficiency.tree_speculation.tree_sampled_outcomes")
def _(s):
    parents = _parents(s)
    n, V = len(parents), s.m
    args = {"p": torch.softmax(r(n + 1, V), -1), "q": torch.softmax(r(n, V), -1),
            "tree_tokens": ids(n, high=V), "parents": parents}
    rules = {"p": T(rank=2, tied=(0, 1), dtype_peer=False, names=("q",)),
             "q": T(rank=2, tied=(0, 1), dtype_peer=False),
             "tree_tokens": T(INT, rank=1, tied=(0,), high=V),
             "parents": T(INT, rank=1, tied=(0,), device_peer=False,
                          names=("p", "q", "tree_tokens"))}
    return [Call(TS.tree_sampled_outcomes, args, rules)]


@fuzz("efficiency.tree_speculation.MTPModule")
def _(s):
    torch.manual_seed(0)
    d = 2 * s.d
    block = nn.Linear(d, d)
    init = {"d_model": d, "block": block, "eps": 1e-6}
    # d_model: torch.ones refuses a float or a negative size; any block: not checked
    init_rules = {"d_model": Bad(), "block": Bad(),
                  "eps": Bad(0.0, -1.0, float("nan"), float("inf"), None)}
    fwd = {"h_prev": r(s.b, s.n, d), "emb": r(s.b, s.n, d)}
    fwd_rules = {"h_prev": T(rank=3, tied=(2,), names=("emb",)),
                 "emb": T(rank=3, tied=(0, 1, 2))}
    return _module_calls(TS.MTPModule, init, init_rules,
                         lambda m, **kw: m(**kw), fwd, fwd_rules)


@fuzz("efficiency.tree_speculation.mtp_draft")
def _(s):
    torch.manual_seed(0)
    d = 2 * s.d
    embed, head = nn.Embedding(11, d), nn.Linear(d, 11)
    modules = [TS.MTPModule(d, nn.Linear(d, d)) for _ in range(2)]
    L = s.n + 1
    args = {"h0": r(1, L - 1, d), "tokens": ids(1, L, high=11), "modules": modules,
            "embed": embed, "head": head}
    rules = {"h0": T(rank=3, tied=(0, 1), dtype_peer=False, device_peer=False),
             "tokens": T(INT, rank=2, tied=(0,), device_peer=False, names=("h0",)),
             # the models a caller built: not checked ([] modules drafts nothing)
             "modules": Bad(), "embed": Bad(), "head": Bad()}
    return [Call(TS.mtp_draft, args, rules)]


test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error = (
    fuzz_tests("efficiency.tree_speculation.")
)
