"""Single-head self-attention with learned query, key and value projections.

Paper: Vaswani, Shazeer, Parmar, Uszkoreit, Jones, Gomez, Kaiser and Polosukhin
(2017), "Attention Is All You Need", arXiv:1706.03762, equation (1) with the
projections of section 3.2.2 for a single head.
Page: docs/attention/self-attention.md
Tested against: torch.nn.functional.scaled_dot_product_attention with the
projections applied in the test (tests/test_self_attention.py).

Mask convention (the same as ``F.scaled_dot_product_attention``): a boolean
``attn_mask`` is True where a query MAY attend to a key; a floating one is added
to the scores. A query that may attend to no key returns zeros.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["SelfAttention"]


# --8<-- [start:attend_helpers]
def _check_seq(x: torch.Tensor, name: str, width: int) -> None:
    """Raise a clear error unless x is a floating (B, L, width) tensor."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must have a floating dtype, got {x.dtype}")
    if x.dim() != 3:
        raise ValueError(
            f"{name} must have shape (B, L, {width}) (batch first), "
            f"got shape {tuple(x.shape)}"
        )
    if x.shape[-1] != width:
        raise ValueError(
            f"{name} must have last dimension {width}, got shape {tuple(x.shape)}"
        )


def _check_like_module(name: str, t: torch.Tensor, weight: torch.Tensor) -> None:
    """Raise unless t has the device (and, outside autocast, the dtype) of the module's weight."""
    if t.device != weight.device:
        raise ValueError(f"{name} must be on the module's device {weight.device}, got {t.device}")
    autocast = torch.amp.is_autocast_available(t.device.type) and torch.is_autocast_enabled(t.device.type)
    if t.dtype != weight.dtype and not autocast:
        raise TypeError(f"{name} must have the module's dtype {weight.dtype}, got {t.dtype}")


def _check_mask_shape(
    mask: torch.Tensor, name: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
) -> None:
    """Raise a clear error unless mask is bool (or ``dtype``) on device and broadcasts to shape."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or None, got {type(mask).__name__}")
    if mask.dtype != torch.bool and mask.dtype != dtype:
        raise TypeError(
            f"{name} must be torch.bool (True = may attend) or {dtype} "
            f"(added to the scores), got {mask.dtype}"
        )
    if mask.device != device:
        raise ValueError(f"{name} must be on the device of the inputs {device}, got {mask.device}")
    try:
        ok = torch.broadcast_shapes(mask.shape, shape) == shape
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(
            f"{name} must broadcast to {shape}, got shape {tuple(mask.shape)}"
        )


def _attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T / sqrt(d_k) + mask) v; a query with no allowed key gets zeros.

    Returns ``(out, weights)``; ``weights`` are taken before dropout.
    """
    d_k = q.shape[-1]
    # Half-precision inputs are scored in float32: q . k overflows float16's
    # 65504 long before softmax could rescue it.
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    scores = q.to(acc) @ k.to(acc).transpose(-2, -1) / math.sqrt(d_k)  # (B, N, d_k) @ (B, d_k, M) -> (B, N, M)
    if mask is not None:
        if mask.dtype == torch.bool:
            # -inf, not -1e9: exp(-inf) is exactly 0 in every dtype.
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.to(acc)
    # A query with no allowed key has a row of only -inf: softmax would give
    # 0/0 = NaN (and NaN gradients through a float mask). Score it 0 instead,
    # then give it zero weights, so it returns zeros.
    empty_row = torch.isneginf(scores).all(dim=-1, keepdim=True)  # (B, N, 1)
    weights = torch.softmax(scores.masked_fill(empty_row, 0.0), dim=-1)  # each query's row over the M keys sums to 1
    weights = weights.masked_fill(empty_row, 0.0)
    dropped = torch.dropout(weights, dropout_p, train=True) if dropout_p > 0 else weights
    out = dropped @ v.to(acc)  # (B, N, M) @ (B, M, d_v) -> (B, N, d_v)
    return out.to(q.dtype), weights.to(q.dtype)
# --8<-- [end:attend_helpers]

# --8<-- [start:init]
class SelfAttention(nn.Module):
    """One attention head over one sequence: every token queries every token.

    Args:
        d_model: D, the width of the input tokens.
        d_k: width of queries and keys; ``d_model`` when ``None``.
        d_v: width of values; ``d_model`` when ``None``.
        bias: give the projections a bias.
        project_out: map the ``d_v``-wide result back to ``d_model`` with
            ``out_proj``; when False the output is ``d_v`` wide.

    Shape:
        ``(B, N, D) -> (B, N, D)`` (or ``(B, N, d_v)`` without ``project_out``),
        and weights ``(B, N, N)``.
    """

    def __init__(
        self,
        d_model: int,
        d_k: int | None = None,
        d_v: int | None = None,
        *,
        bias: bool = True,
        project_out: bool = True,
    ) -> None:
        super().__init__()
        d_k = d_model if d_k is None else d_k
        d_v = d_model if d_v is None else d_v
        for name, value in (("d_model", d_model), ("d_k", d_k), ("d_v", d_v)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.d_model, self.d_k, self.d_v = d_model, d_k, d_v
        self.q_proj = nn.Linear(d_model, d_k, bias=bias)  # what each token looks for
        self.k_proj = nn.Linear(d_model, d_k, bias=bias)  # what each token offers to be found by
        self.v_proj = nn.Linear(d_model, d_v, bias=bias)  # what each token hands over
        self.out_proj = nn.Linear(d_v, d_model, bias=bias) if project_out else nn.Identity()
# --8<-- [end:init]

    # --8<-- [start:forward]
    def forward(
        self, x: torch.Tensor, *, attn_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Attend the sequence to itself.

        Args:
            x: tokens, ``(B, N, D)``.
            attn_mask: ``None``, a boolean mask (True = may attend) or a float
                mask added to the scores, broadcastable to ``(B, N, N)``.

        Returns:
            ``(out, weights)``: ``out`` is ``(B, N, D)`` (``(B, N, d_v)``
            without ``project_out``); ``weights`` is ``(B, N, N)``.
        """
        _check_seq(x, "x", self.d_model)
        _check_like_module("x", x, self.q_proj.weight)
        b, n, _ = x.shape
        if attn_mask is not None:
            _check_mask_shape(attn_mask, "attn_mask", (b, n, n), x.dtype, x.device)
        q = self.q_proj(x)  # (B, N, D) -> (B, N, d_k)
        k = self.k_proj(x)  # (B, N, D) -> (B, N, d_k)
        v = self.v_proj(x)  # (B, N, D) -> (B, N, d_v)
        out, weights = _attend(q, k, v, attn_mask)  # (B, N, d_v), (B, N, N)
        out = self.out_proj(out)  # (B, N, d_v) -> (B, N, D)
        return out, weights
    # --8<-- [end:forward]
