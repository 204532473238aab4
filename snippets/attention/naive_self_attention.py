"""Naive self-attention: softmax(X X^T) X, with no parameters at all.

Paper: the dot-product scoring comes from Luong, Pham and Manning (2015),
"Effective Approaches to Attention-based Neural Machine Translation",
arXiv:1508.04025; attending a sequence to itself, from Vaswani, Shazeer, Parmar,
Uszkoreit, Jones, Gomez, Kaiser and Polosukhin (2017), "Attention Is All You
Need", arXiv:1706.03762. This parameter-free form is a teaching step, not a
layer from either paper.
Page: docs/attention/naive-self-attention.md
Tested against: torch.nn.functional.scaled_dot_product_attention with
q = k = v = X and scale=1 (tests/test_naive_self_attention.py).

Kernel: ``naive_attention`` (the equation); face: ``naive_self_attention`` and
the ``NaiveSelfAttention`` module (checks, half precision scored in float32).

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["naive_self_attention", "NaiveSelfAttention"]


# --8<-- [start:kernel]
def naive_attention(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(X X^T) X: every token becomes a similarity-weighted average."""
    q = k = v = x  # (B, N, D): one vector plays all three roles
    scores = q @ k.transpose(-2, -1)  # (B, N, D) @ (B, D, N) -> (B, N, N)
    # dim=-1: each query's row is normalised over the keys, not each key's column.
    weights = torch.softmax(scores, dim=-1)  # (B, N, N)
    out = weights @ v  # (B, N, N) @ (B, N, D) -> (B, N, D)
    return out, weights
# --8<-- [end:kernel]


# --8<-- [start:forward]
def naive_self_attention(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token becomes a weighted average of all tokens, weighted by similarity.

    Args:
        x: token vectors, ``(B, N, D)``.

    Returns:
        ``(out, weights)``: ``out`` is ``(B, N, D)``, ``weights`` is
        ``(B, N, N)`` with every row summing to 1.

    Shape:
        ``(B, N, D) -> (B, N, D)``.
    """
    _check_naive_input(x)
    # Half precision is scored in float32: x_i . x_j overflows float16 quickly.
    acc = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    out, weights = naive_attention(x.to(acc))
    return out.to(x.dtype), weights.to(x.dtype)


def _check_naive_input(x: torch.Tensor) -> None:
    """Refuse x unless it is a floating (B, N, D) tensor."""
    if not (torch.is_tensor(x) and x.is_floating_point() and x.dim() == 3):
        got = (tuple(x.shape), x.dtype) if torch.is_tensor(x) else type(x)
        raise TypeError(f"x must be a float (B, N, D) tensor, batch first, got {got}")
# --8<-- [end:forward]


# --8<-- [start:module]
class NaiveSelfAttention(nn.Module):
    """``naive_self_attention`` as a module, to sit where a layer is expected.

    It has no parameters: nothing here can be trained.
    """

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Args: x ``(B, N, D)``. Returns ``(out (B, N, D), weights (B, N, N))``."""
        return naive_self_attention(x)
# --8<-- [end:module]
