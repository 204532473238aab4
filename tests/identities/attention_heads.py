"""Identities proven for the attention pages on heads and positions: multi-head,
grouped-query, rotary, ALiBi and the common mistakes."""

from __future__ import annotations

import math

import torch

from identities import identity
from snippets.attention import rotary

PAGE_ROPE = "attention/rotary.md"


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float64)


# --- rotary -----------------------------------------------------------------------


@identity("rope-interleaved-is-the-paper-matrix",
          "apply_rotary with interleaved pairs equals the paper's block-diagonal rotation "
          "R_t, written out entry by entry",
          page=PAGE_ROPE, tol=1e-12)
def rope_interleaved_is_the_paper_matrix():
    n, d = 7, 8
    x = _randn(2, 3, n, d)
    ours = rotary.apply_rotary(x, *rotary.rotary_tables(torch.arange(n), d), interleaved=True)
    rows = []
    for t in range(n):
        r = torch.zeros(d, d, dtype=torch.float64)
        for i in range(d // 2):
            a = t * 10000.0 ** (-2 * i / d)
            r[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor(
                [[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=torch.float64)
        rows.append(x[..., t, :] @ r.T)
    return ours, torch.stack(rows, dim=-2)


@identity("rope-scores-depend-on-offset",
          "RoPE scores depend only on the offset between positions: every position shifted "
          "by 137 gives the same q k^T",
          page=PAGE_ROPE, tol=1e-10)
def rope_scores_depend_on_offset():
    q, k = _randn(2, 3, 5, 8), _randn(2, 3, 5, 8)
    pos = torch.tensor([0, 3, 4, 9, 20])

    def scores(shift):
        cos, sin = rotary.rotary_tables(pos + shift, 8)
        qr, kr = rotary.apply_rotary(q, cos, sin), rotary.apply_rotary(k, cos, sin)
        return qr @ kr.transpose(-2, -1)

    return scores(137), scores(0)


@identity("rope-pairings-agree-after-permutation",
          "Interleaved and half-split RoPE give the same scores once q and k (the rows of "
          "W^Q and W^K) are permuted evens-then-odds",
          page=PAGE_ROPE, tol=1e-12)
def rope_pairings_agree_after_permutation():
    d = 8
    q, k = _randn(2, 3, 6, d), _randn(2, 3, 6, d)
    cos, sin = rotary.rotary_tables(torch.arange(6), d)
    perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])

    def scores(q, k, interleaved):
        qr = rotary.apply_rotary(q, cos, sin, interleaved=interleaved)
        return qr @ rotary.apply_rotary(k, cos, sin, interleaved=interleaved).transpose(-2, -1)

    return scores(q[..., perm], k[..., perm], False), scores(q, k, True)


@identity("rope-decode-equals-full-pass",
          "RotaryEmbedding on the last query alone, with every key, rotates it as the full "
          "pass does (lower-right alignment)",
          page=PAGE_ROPE, tol=0.0)
def rope_decode_equals_full_pass():
    rope = rotary.RotaryEmbedding(8)
    q, k = _randn(1, 2, 6, 8), _randn(1, 2, 6, 8)
    q_full, _ = rope(q, k, offset=3)
    q_last, _ = rope(q[..., -1:, :], k, offset=3)
    return q_last, q_full[..., -1:, :]
