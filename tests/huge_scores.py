"""Inputs whose attention scores dwarf any finite mask fill, and what they must give.

``signed_qk``: query i is ``s e_i`` and key j is ``s (1 - 2 e_j)`` on the first n
coordinates, so query i scores exactly ``-s^2`` against its own key and ``+s^2``
against every other key (times the scale). A query whose only allowed key is its
own then has every allowed score near ``-s^2 / sqrt(d)`` while its masked keys
score ``+s^2 / sqrt(d)``: filling blocked scores with -1e4, or even -1e9, instead
of -inf hands the whole row to the masked keys. With s = 1e5 and d = 8 the
scores are about +-3.5e9, finite in float32.

``expected_output`` is the answer -inf masking gives on those inputs, worked out
without a softmax: a query averages the values of its allowed keys other than
itself (equal scores; its own key is e^(-2 s^2 / sqrt(d)) behind, i.e. 0), and
returns its own value when its own key is the only one it may see.
"""

from __future__ import annotations

import torch
from torch import nn


def signed_qk(n: int, d: int, s: float = 1e5, dtype: torch.dtype = torch.float32):
    """``(q, k)``, each ``(n, d)``, with ``q_i . k_j = s^2 (1 - 2 [i == j])``. Needs n <= d."""
    if n > d:
        raise ValueError(f"signed_qk needs n <= d, got n={n} and d={d}")
    eye = torch.eye(n, d, dtype=dtype)
    ones = torch.zeros(n, d, dtype=dtype)
    ones[:, :n] = 1.0
    return s * eye, s * (ones - 2.0 * eye)


def expected_output(v: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Attention output on ``signed_qk`` inputs, in float64.

    Args:
        v: values ``(..., n, d_v)``.
        allowed: ``(n, n)`` or broadcastable boolean mask, True = may attend.
    """
    n = v.shape[-2]
    eye = torch.eye(n, dtype=torch.bool)
    others = allowed & ~eye
    weights = torch.where(others.any(-1, keepdim=True), others, allowed & eye).double()
    weights = weights / weights.sum(-1, keepdim=True).clamp_min(1.0)
    return weights @ v.double()


def assert_matches(out: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal up to float32 rounding of the values (relative to the largest one)."""
    assert torch.isfinite(out).all()
    scale = expected.abs().max().item()
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-6 * scale)


@torch.no_grad()
def keys_against_queries(weight: torch.Tensor, bias: torch.Tensor | None, factor: float) -> None:
    """Rewrite a fused ``(3D, D)`` q/k/v projection in place: the query rows times
    ``factor``, the key rows minus the query rows. Every token then scores
    ``-|q_t|^2 / sqrt(d)`` against itself in every head, so a query that may see
    only itself has one allowed score, hugely negative.
    """
    d = weight.shape[0] // 3
    weight[:d] *= factor
    weight[d : 2 * d] = -weight[:d]
    if bias is not None:
        bias[:d] *= factor
        bias[d : 2 * d] = -bias[:d]


class WrittenOut(nn.Module):
    """A MultiHeadAttention held to its written-out path (``need_weights=True``),
    called as a block calls its attention; the weights are dropped."""

    def __init__(self, mha: nn.Module) -> None:
        super().__init__()
        self.mha = mha

    def forward(self, query, key=None, value=None, **masks):
        return self.mha(query, key, value, need_weights=True, **masks)[0], None
