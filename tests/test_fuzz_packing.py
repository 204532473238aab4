"""Malformed input for snippets/efficiency/packed_sequences.py, refused by name."""

from __future__ import annotations

import torch

from fuzz_support import ANY, INT, SCALE, Bad, Call, T, fuzz, fuzz_tests, r
from snippets.efficiency import packed_sequences as P

PACKED = {"q": T(rank=3, tied=(0, 1, 2), names=("k", "v")),
          "k": T(rank=3, tied=(0, 1, 2), names=("q",)),
          "v": T(rank=3, tied=(0, 1), names=("q",)),
          "cu_seqlens": T(INT, rank=1, tied=(0,), dtype_peer=False),
          "window": Bad(0, -1, 2.5), "scale": SCALE}


def _packed(s):
    t = 2 * s.n + 1
    return {"q": r(t, s.h, s.d), "k": r(t, s.h, s.d), "v": r(t, s.h, s.d + 1),
            "cu_seqlens": torch.tensor([0, s.n, t])}


@fuzz("efficiency.packed_sequences.cu_seqlens_from_lengths")
def _(s):
    return [Call(P.cu_seqlens_from_lengths, {"lengths": [s.n, s.m]},
                 {"lengths": Bad([], [0, 2], [2.5], [s.n, -1])})]


@fuzz("efficiency.packed_sequences.document_ids", "efficiency.packed_sequences.position_ids")
def _(s):
    spec = {"cu_seqlens": T(INT, rank=1, tied=(0,), dtype_peer=False, device_peer=False)}
    return [Call(fn, {"cu_seqlens": torch.tensor([0, s.n, s.n + s.m])}, spec, fn.__name__, fn.__name__)
            for fn in (P.document_ids, P.position_ids)]


@fuzz("efficiency.packed_sequences.document_mask")
def _(s):
    return [Call(P.document_mask, {"doc": torch.tensor([0] * s.n + [1] * s.m), "window": 2},
                 {"doc": T(ANY, rank=1, device_peer=False), "window": Bad(0, -1, 2.5)})]


@fuzz("efficiency.packed_sequences.packed_attention", "efficiency.packed_sequences.varlen_attention")
def _(s):
    return [Call(fn, {**_packed(s), "window": 2, "scale": 0.5}, PACKED, fn.__name__, fn.__name__)
            for fn in (P.packed_attention, P.varlen_attention)]


@fuzz("efficiency.packed_sequences.per_document_attention")
def _(s):
    spec = {k: v for k, v in PACKED.items() if k != "window"}
    return [Call(P.per_document_attention, {**_packed(s), "scale": 0.5}, spec)]


@fuzz("efficiency.packed_sequences.varlen_window_size")
def _(s):
    return [Call(P.varlen_window_size, {"window": 3}, {"window": Bad(0, -1, 2.5)})]


test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error = (
    fuzz_tests("efficiency.packed_sequences.")
)
