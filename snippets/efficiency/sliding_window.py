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

``in_window`` and ``window_chunks`` are the kernels the page shows; the public
functions check their arguments and call them.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch

__all__ = ["sliding_window_mask", "sliding_window_attention"]


# --8<-- [start:mask]
def in_window(i: torch.Tensor, j: torch.Tensor, window: int, causal: bool):
    """Causal: i - w < j <= i; bidirectional: |i - j| < w. Positions broadcast."""
    offset = i - j  # how far key j lies behind query i
    return (offset >= 0) & (offset < window) if causal else offset.abs() < window
# --8<-- [end:mask]


# --8<-- [start:forward]
def window_chunks(q, k, v, window: int, causal: bool, chunk: int) -> torch.Tensor:
    """Softmax over each query's window, chunk by chunk: no N x N score matrix."""
    n, outs = q.shape[-2], []
    for start in range(0, n, chunk):
        end = min(start + chunk, n)
        lo, hi = max(0, start - window + 1), end if causal else min(n, end + window - 1)
        # (B, H, c, d) @ (B, H, d, L) -> (B, H, c, L): only the keys [lo, hi) in reach
        scores = (q[..., start:end, :] * q.shape[-1] ** -0.5) @ k[..., lo:hi, :].mT
        i = torch.arange(start, end, device=q.device).unsqueeze(-1)  # (c, 1)
        band = in_window(i, torch.arange(lo, hi, device=q.device), window, causal)
        # -inf, never a large negative constant; offset 0 is always in the band,
        # so no row is left empty.
        weights = scores.masked_fill(~band, -math.inf).softmax(dim=-1)  # (B, H, c, L)
        outs.append(weights @ v[..., lo:hi, :])  # (B, H, c, L) @ (B, H, L, d_v)
    return torch.cat(outs, dim=-2)  # chunks of (B, H, c, d_v) -> (B, H, N, d_v)
# --8<-- [end:forward]


# --8<-- [start:face]
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
    _check_band_sizes(n=(n, 0), window=(window, 1))
    i = torch.arange(n, device=device)
    return in_window(i.unsqueeze(-1), i, window, causal)  # (N, 1) - (N,) -> (N, N)


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
        ``(B, H, N, d_v)``, equal to dense attention under the banded mask,
        in q's dtype (scores and softmax in float32 for half precision).

    Shape:
        Any leading dimensions, the same for q, k and v; ``(B, H, N, d)`` is the
        common case.
    """
    _check_band(q, k, v, window, chunk_size)
    n = q.shape[-2]
    if n == 0:
        return v.new_empty((*q.shape[:-1], v.shape[-1]))
    chunk = min(max(window, 64) if chunk_size is None else chunk_size, n)
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    out = window_chunks(q.to(acc), k.to(acc), v.to(acc), window, causal, chunk)
    return out.to(q.dtype)
# --8<-- [end:face]


# --8<-- [start:checks]
def _check_band_sizes(**sizes) -> None:
    """Every size is an int >= its minimum: ``name=(value, minimum)``."""
    for name, (value, low) in sizes.items():
        if not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")


def _check_band(q, k, v, window, chunk_size) -> None:
    """q, k (..., N, d), v (..., N, d_v), of q's floating dtype and device."""
    for name, t, end in (("q", q, None), ("k", k, None), ("v", v, -1)):  # v: any d_v
        ok = isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() >= 2
        got = (t.dtype, t.device, tuple(t.shape)) if torch.is_tensor(t) else type(t)
        if not ok or got[:2] + (t.shape[:end],) != (q.dtype, q.device, q.shape[:end]):
            raise (ValueError if ok else TypeError)(
                f"{name} must be floating (..., N, d) like q (v: any d_v), got {got}")
    chunk = 1 if chunk_size is None else chunk_size  # None: the default chunk
    _check_band_sizes(window=(window, 1), chunk_size=(chunk, 1))
# --8<-- [end:checks]
