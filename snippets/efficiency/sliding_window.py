"""Sliding-window (local) attention: each query sees only a band of nearby keys.

Papers: Beltagy, Peters and Cohan (2020), "Longformer: The Long-Document
Transformer", arXiv:2004.05150 (the banded, non-causal window); Jiang et al.
(2023), "Mistral 7B", arXiv:2310.06825 (the causal window of a decoder).
Page: docs/efficiency/sliding-window.md
Tested against: torch.nn.functional.scaled_dot_product_attention with the
dense banded mask from ``sliding_window_mask`` (tests/test_sliding_window.py).

Window semantics (``window`` = w):

* causal: query ``i`` attends key ``j`` when ``i - w < j <= i`` (itself and the
  ``w - 1`` keys before it);
* non-causal: query ``i`` attends key ``j`` when ``|i - j| < w``.

``sliding_window_attention`` never builds the N x N score matrix: it walks over
chunks of ``c`` queries, and each chunk scores only the keys its band can reach,
so the cost is O(N (c + w) d) time and O(c (c + w)) memory per (batch, head).

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch

__all__ = ["sliding_window_mask", "sliding_window_attention"]


# --8<-- [start:validate]
def _check_int_at_least_one(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Raise a clear error unless q, k, v can be attended together."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must have a floating dtype, got {t.dtype}")
        if t.dim() < 2:
            raise ValueError(
                f"{name} must have at least 2 dimensions (..., length, width), "
                f"got shape {tuple(t.shape)}"
            )
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(
            f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}"
        )
    if not (q.device == k.device == v.device):
        raise ValueError(
            f"q, k and v must be on one device, got {q.device}, {k.device} "
            f"and {v.device}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same last dimension d, got q {tuple(q.shape)} "
            f"and k {tuple(k.shape)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same length M (dimension -2), got k "
            f"{tuple(k.shape)} and v {tuple(v.shape)}"
        )
    try:  # the leading (batch, head) dimensions pair up as in torch.matmul
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            "q, k and v must have leading (batch, head) dimensions that broadcast, "
            f"got q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)}"
        ) from None


def _check_band_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Raise a clear error unless q, k, v are one sequence's (..., N, d) tensors."""
    _check_qkv(q, k, v)
    # The window is measured between positions of one sequence: N must equal M.
    if q.shape[-2] != k.shape[-2]:
        raise ValueError(
            "q, k and v must have the same length N (dimension -2) for a sliding "
            f"window, got q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
# --8<-- [end:validate]


# --8<-- [start:mask]
def sliding_window_mask(
    n: int,
    window: int,
    *,
    causal: bool = True,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The dense banded mask, True = may attend, for checking the chunked code.

    Args:
        n: sequence length N (queries and keys).
        window: w >= 1. Causal: key ``j`` is visible from query ``i`` when
            ``i - w < j <= i``. Non-causal: when ``|i - j| < w``.
        causal: hide the keys after each query.
        device: where to build the mask.

    Returns:
        An ``(N, N)`` boolean tensor.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    _check_int_at_least_one("window", window)
    i = torch.arange(n, device=device).unsqueeze(-1)  # (N, 1)
    j = torch.arange(n, device=device)  # (N,)
    offset = i - j  # (N, 1) - (N,) -> (N, N), how far key j lies behind query i
    if causal:
        return (offset >= 0) & (offset < window)  # (N, N)
    return offset.abs() < window  # (N, N)
# --8<-- [end:mask]


# --8<-- [start:forward]
def sliding_window_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int,
    *,
    causal: bool = True,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Softmax attention restricted to a window, computed chunk by chunk.

    Args:
        q: queries, ``(B, H, N, d)``.
        k: keys, ``(B, H, N, d)``.
        v: values, ``(B, H, N, d_v)``.
        window: w >= 1, the band width (see ``sliding_window_mask``). A window
            of at least N gives full (causal or bidirectional) attention.
        causal: hide the keys after each query.
        chunk_size: c, queries scored together. ``None`` picks ``max(w, 64)``
            capped at N. Larger chunks mean fewer, bigger matrix products.

    Returns:
        ``(B, H, N, d_v)``, equal to dense attention under the banded mask.

    Shape:
        Any leading dimensions work; ``(B, H, N, d)`` is the common case.
    """
    _check_band_qkv(q, k, v)
    _check_int_at_least_one("window", window)
    if chunk_size is not None:
        _check_int_at_least_one("chunk_size", chunk_size)
    n, d = q.shape[-2], q.shape[-1]
    c = min(chunk_size if chunk_size is not None else max(window, 64), max(n, 1))
    scale = 1.0 / math.sqrt(d)
    # Scores and softmax in float32 for half-precision inputs (see the SDPA page).
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype

    outs = []
    for start in range(0, n, c):
        end = min(start + c, n)
        # The only keys this chunk's band can reach: [lo, hi).
        lo = max(0, start - window + 1)
        hi = end if causal else min(n, end + window - 1)
        q_c = q[..., start:end, :].to(acc)  # (B, H, c, d)
        k_c = k[..., lo:hi, :].to(acc)  # (B, H, c + w - 1, d) at most (causal)
        v_c = v[..., lo:hi, :].to(acc)  # (B, H, c + w - 1, d_v) at most (causal)
        scores = (q_c * scale) @ k_c.transpose(-2, -1)  # (B, H, c, d) @ (B, H, d, L) -> (B, H, c, L)

        # The band in absolute positions, for this (c, L) tile only.
        i = torch.arange(start, end, device=q.device).unsqueeze(-1)  # (c, 1)
        j = torch.arange(lo, hi, device=q.device)  # (L,)
        offset = i - j  # (c, L)
        band = (offset >= 0) & (offset < window) if causal else offset.abs() < window
        # -inf, never a large negative constant; every row keeps its own key
        # (offset 0 is always in the band), so no row is left empty.
        scores = scores.masked_fill(~band, float("-inf"))  # (B, H, c, L)

        weights = torch.softmax(scores, dim=-1)  # normalise over the keys of each query
        outs.append(weights @ v_c)  # (B, H, c, L) @ (B, H, L, d_v) -> (B, H, c, d_v)
    if not outs:  # N == 0
        return v.new_empty((*q.shape[:-1], v.shape[-1]))
    out = torch.cat(outs, dim=-2)  # chunks of (B, H, c, d_v) -> (B, H, N, d_v)
    return out.to(q.dtype)
# --8<-- [end:forward]
