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

Kernels: ``_attend`` (the attention equation) and ``SelfAttention.forward``
(project, attend, project back); the constructor and the checks are the face.
The causal and cross-attention files carry identical copies of ``_attend`` and
``_check_seq``, so that each file runs alone.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["SelfAttention"]


# --8<-- [start:attend]
def _attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    mask: torch.Tensor | None = None, dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T / sqrt(d_k) + mask) v and the weights; empty rows give zeros."""
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    # (B, N, d_k) @ (B, d_k, M) -> (B, N, M), in float32 for half precision
    scores = q.to(acc) @ k.to(acc).transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = mask
    if mask is not None and mask.dtype != torch.bool:  # a float mask is added
        scores, allowed = scores + mask.to(acc), ~torch.isneginf(mask)
    weights = _masked_softmax(scores, allowed)  # each query's row sums to 1 (or 0)
    dropped = torch.dropout(weights, dropout_p, True) if dropout_p > 0 else weights
    out = dropped @ v.to(acc)  # (B, N, M) @ (B, M, d_v) -> (B, N, d_v)
    return out.to(q.dtype), weights.to(q.dtype)
# --8<-- [end:attend]


# --8<-- [start:masked_softmax]
def _masked_softmax(
    scores: torch.Tensor, allowed: torch.Tensor | None
) -> torch.Tensor:
    """Softmax over the last dim where allowed (True = may attend); empty rows -> 0."""
    if allowed is None:
        return torch.softmax(scores, dim=-1)
    # Neutral scores in a row with no allowed key: zeros out, no NaN in the gradient.
    empty = ~allowed.any(dim=-1, keepdim=True)
    scores = scores.masked_fill(~allowed, float("-inf")).masked_fill(empty, 0.0)
    return torch.softmax(scores, dim=-1).masked_fill(~allowed, 0.0)
# --8<-- [end:masked_softmax]


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
        _check_sizes(d_model=d_model, d_k=d_k, d_v=d_v)
        self.d_model, self.d_k, self.d_v = d_model, d_k, d_v
        self.q_proj = nn.Linear(d_model, d_k, bias=bias)  # what each token looks for
        self.k_proj = nn.Linear(d_model, d_k, bias=bias)  # what it offers to be found
        self.v_proj = nn.Linear(d_model, d_v, bias=bias)  # what it hands over
        out = nn.Linear(d_v, d_model, bias=bias) if project_out else nn.Identity()
        self.out_proj = out

    def _check_forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None) -> None:
        _check_seq(x, "x", self.d_model, self.q_proj.weight)
        _check_mask_shape(attn_mask, (*x.shape[:2], x.shape[1]), x.dtype, x.device)
# --8<-- [end:init]

    # --8<-- [start:forward]
    def forward(
        self, x: torch.Tensor, *, attn_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Project, attend, project back: softmax(Q K^T / sqrt(d_k) + A) V W_O."""
        self._check_forward(x, attn_mask)
        # (B, N, D) -> (B, N, d_k), (B, N, d_k), (B, N, d_v)
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        out, weights = _attend(q, k, v, attn_mask)  # (B, N, d_v), (B, N, N)
        out = self.out_proj(out)  # (B, N, d_v) -> (B, N, D)
        return out, weights
    # --8<-- [end:forward]


# --8<-- [start:checks]
def _check_sizes(**sizes: int) -> None:
    """Refuse a width that is not a positive int."""
    for name, value in sizes.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def _check_seq(x, name: str, width: int, weight: torch.Tensor, batch=None) -> None:
    """Refuse x unless it is (B, L, width), B = batch if given, like the weight."""
    kind = weight.device.type  # under autocast x may come in another floating dtype
    cast = torch.amp.is_autocast_available(kind) and torch.is_autocast_enabled(kind)
    ok = torch.is_tensor(x) and x.dim() == 3 and x.shape[-1] == width
    ok = ok and batch in (None, x.shape[0]) and x.device == weight.device
    if not (ok and (x.dtype == weight.dtype or cast and x.is_floating_point())):
        got = (tuple(x.shape), x.dtype, x.device) if torch.is_tensor(x) else type(x)
        raise ValueError(f"{name} must be (B, L, {width}) with B = {batch or 'any'}, "
                         f"{weight.dtype}, on {weight.device}; got {got}")


def _check_mask_shape(mask, shape: tuple, dtype, device) -> None:
    """Refuse a mask unless None, or bool (or ``dtype``) on device fitting ``shape``."""
    is_tensor = torch.is_tensor(mask)
    got = (tuple(mask.shape), mask.dtype, mask.device) if is_tensor else mask
    fits = is_tensor and got[1:] in ((torch.bool, device), (dtype, device))
    # a mask may broadcast to the scores, never enlarge them
    fits = fits and len(got[0]) <= len(shape) and all(
        a in (1, s) for a, s in zip(got[0][::-1], shape[::-1]))
    if not (fits or mask is None):
        raise ValueError(f"attn_mask must be bool (True = may attend) or {dtype}, on "
                         f"{device}, broadcasting to {shape}; got {got}")
# --8<-- [end:checks]
