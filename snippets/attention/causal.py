"""Causal (masked) self-attention: each token attends only to itself and the past.

Paper: Vaswani, Shazeer, Parmar, Uszkoreit, Jones, Gomez, Kaiser and Polosukhin
(2017), "Attention Is All You Need", arXiv:1706.03762, section 3.2.3 (the
decoder's masked self-attention), for a single head.
Page: docs/attention/causal.md
Tested against: torch.nn.functional.scaled_dot_product_attention with
is_causal=True and the projections applied in the test (tests/test_causal.py).

The mask is built for each call from the input's length, so any length works
(no fixed ``context_length`` buffer). Dropout acts on the attention weights in
training only. ``key_mask`` is True for real tokens (NOT
``nn.MultiheadAttention``'s ``key_padding_mask``, whose True means padding).

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["CausalSelfAttention", "causal_mask"]


# --8<-- [start:causal_mask]
def causal_mask(
    n_queries: int, n_keys: int, *, device: torch.device | str | None = None
) -> torch.Tensor:
    """Boolean causal mask aligned to the lower right, True = may attend.

    The N queries are taken to be the last N of the M positions, so query ``i``
    may attend key ``j`` when ``j <= i + (M - N)``. For N == M this is the usual
    lower triangle; for N < M (decoding with a KV cache) every query also sees
    the cached prefix.

    Args:
        n_queries: N, the number of queries.
        n_keys: M, the number of keys.
        device: where to build the mask.

    Returns:
        A ``(N, M)`` boolean tensor.
    """
    for name, value in (("n_queries", n_queries), ("n_keys", n_keys)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    i = torch.arange(n_queries, device=device).unsqueeze(-1)  # (N, 1)
    j = torch.arange(n_keys, device=device)  # (M,)
    return j <= i + (n_keys - n_queries)  # (N, 1) vs (M,) -> (N, M)
# --8<-- [end:causal_mask]


# --8<-- [start:validate]
def _check_key_mask(
    key_mask: torch.Tensor | None, batch: int, n_keys: int, device: torch.device
) -> None:
    """Raise a clear error unless key_mask is None or a (B, M) bool tensor on device."""
    if key_mask is None:
        return
    if not isinstance(key_mask, torch.Tensor):
        raise TypeError(
            f"key_mask must be a torch.Tensor or None, got {type(key_mask).__name__}"
        )
    if key_mask.dtype != torch.bool:
        raise TypeError(
            f"key_mask must be torch.bool (True = real key), got {key_mask.dtype}"
        )
    if tuple(key_mask.shape) != (batch, n_keys):
        raise ValueError(
            f"key_mask must have shape (B, M) = ({batch}, {n_keys}), "
            f"got {tuple(key_mask.shape)}"
        )
    if key_mask.device != device:
        raise ValueError(
            f"key_mask must be on the device of the inputs {device}, got {key_mask.device}"
        )


def _check_dropout(name: str, p: float) -> None:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise ValueError(f"{name} must be a float in [0, 1), got {p!r}")
# --8<-- [end:validate]


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


# --8<-- [start:zero_empty_rows]
def _zero_empty_rows(out: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Zero the output of every query that may attend to no key.

    PyTorch's kernels disagree on such rows: the CPU kernels and CUDA's math and
    memory-efficient kernels return zeros, but cuDNN (fp16/bf16 on recent GPUs)
    returns attention over every key for a boolean mask row that is all False.
    Zeroing here gives the same answer on every backend.
    """
    if mask is None:
        return out
    allowed = mask if mask.dtype == torch.bool else ~torch.isneginf(mask)
    empty = ~allowed.any(dim=-1, keepdim=True)  # (..., N, M) -> (..., N, 1)
    return out.masked_fill(empty, 0.0)  # (..., N, d) with empty rows zeroed
# --8<-- [end:zero_empty_rows]

# --8<-- [start:init]
class CausalSelfAttention(nn.Module):
    """Single-head self-attention in which token t sees tokens 0..t only.

    Args:
        d_model: D, the width of the input tokens.
        d_k: width of queries and keys; ``d_model`` when ``None``.
        d_v: width of values; ``d_model`` when ``None``.
        dropout: probability of zeroing an attention weight, in training only.
        bias: give the projections a bias.
        project_out: map the ``d_v``-wide result back to ``d_model`` with
            ``out_proj``; when False the output is ``d_v`` wide.

    Shape:
        ``(B, N, D) -> (B, N, D)``, weights ``(B, N, N)``, for any N.
    """

    def __init__(
        self,
        d_model: int,
        d_k: int | None = None,
        d_v: int | None = None,
        *,
        dropout: float = 0.0,
        bias: bool = True,
        project_out: bool = True,
    ) -> None:
        super().__init__()
        d_k = d_model if d_k is None else d_k
        d_v = d_model if d_v is None else d_v
        for name, value in (("d_model", d_model), ("d_k", d_k), ("d_v", d_v)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        _check_dropout("dropout", dropout)
        self.d_model, self.d_k, self.d_v = d_model, d_k, d_v
        self.dropout = float(dropout)
        self.q_proj = nn.Linear(d_model, d_k, bias=bias)
        self.k_proj = nn.Linear(d_model, d_k, bias=bias)
        self.v_proj = nn.Linear(d_model, d_v, bias=bias)
        self.out_proj = nn.Linear(d_v, d_model, bias=bias) if project_out else nn.Identity()
# --8<-- [end:init]

    # --8<-- [start:forward]
    def forward(
        self,
        x: torch.Tensor,
        *,
        key_mask: torch.Tensor | None = None,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend each token to itself and the tokens before it.

        Args:
            x: tokens, ``(B, N, D)``.
            key_mask: ``None`` or ``(B, N)`` boolean, True = real token that may
                be attended (padding is False).
            need_weights: compute and return the weights (the from-scratch
                path); when False, run on ``F.scaled_dot_product_attention``
                and return ``None`` for them.

        Returns:
            ``(out, weights)``: ``out`` is ``(B, N, D)``; ``weights`` is
            ``(B, N, N)`` (before dropout), zero above the diagonal, or ``None``.
        """
        _check_seq(x, "x", self.d_model)
        _check_like_module("x", x, self.q_proj.weight)
        b, n, _ = x.shape
        mask = causal_mask(n, n, device=x.device)  # (N, N), built for this N
        if key_mask is not None:
            _check_key_mask(key_mask, b, n, x.device)
            mask = mask & key_mask[:, None, :]  # (N, N) & (B, 1, N) -> (B, N, N)
        dropout_p = self.dropout if self.training else 0.0
        q = self.q_proj(x)  # (B, N, D) -> (B, N, d_k)
        k = self.k_proj(x)  # (B, N, D) -> (B, N, d_k)
        v = self.v_proj(x)  # (B, N, D) -> (B, N, d_v)
        if need_weights:
            out, weights = _attend(q, k, v, mask, dropout_p)  # (B, N, d_v), (B, N, N)
        else:
            weights = None
            # One head, given its own axis: PyTorch's fused kernels take 4-D input only.
            out = F.scaled_dot_product_attention(
                q[:, None], k[:, None], v[:, None], attn_mask=None if mask is None else mask.unsqueeze(-3), dropout_p=dropout_p
            )[:, 0]  # (B, 1, N, d_k) x (B, 1, M, d_k) -> (B, 1, N, d_v) -> (B, N, d_v)
            out = _zero_empty_rows(out, mask)  # a fully padded row: zeros on every backend
        return self.out_proj(out), weights  # (B, N, d_v) -> (B, N, D)
    # --8<-- [end:forward]
