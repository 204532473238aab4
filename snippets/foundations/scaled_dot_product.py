"""Scaled dot-product attention, written out from the equation.

Paper: Vaswani, Shazeer, Parmar, Uszkoreit, Jones, Gomez, Kaiser and Polosukhin
(2017), "Attention Is All You Need", arXiv:1706.03762, equation (1).
Page: docs/foundations/scaled-dot-product.md
Tested against: torch.nn.functional.scaled_dot_product_attention
(tests/test_scaled_dot_product.py).

Mask convention (the same as ``F.scaled_dot_product_attention``): a boolean
``attn_mask`` is True where a query MAY attend to a key; a floating mask is
added to the scores. A query row that may attend to no key returns zeros.
``is_causal=True`` aligns the triangle to the lower right when N != M, which is
what a KV cache needs (PyTorch's own ``is_causal`` aligns it to the upper left).

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch

__all__ = ["scaled_dot_product_attention", "causal_mask"]


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
            f"q, k and v must be on one device, got {q.device}, {k.device} and {v.device}"
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


def _check_mask(attn_mask: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> None:
    """Raise a clear error unless attn_mask is a bool or float mask over the scores."""
    if not isinstance(attn_mask, torch.Tensor):
        raise TypeError(
            f"attn_mask must be a torch.Tensor or None, got {type(attn_mask).__name__}"
        )
    if attn_mask.dtype != torch.bool and attn_mask.dtype != q.dtype:
        raise TypeError(
            f"attn_mask must be torch.bool (True = may attend) or {q.dtype} "
            f"(added to the scores), got {attn_mask.dtype}"
        )
    if attn_mask.device != q.device:
        raise ValueError(f"attn_mask must be on q's device {q.device}, got {attn_mask.device}")
    # The scores are (..., N, M) with q's and k's leading dimensions broadcast together.
    scores = (*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2])
    try:
        fits = torch.broadcast_shapes(attn_mask.shape, scores) == scores
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"attn_mask must broadcast to the scores (..., N, M) = {scores}, "
            f"got shape {tuple(attn_mask.shape)}"
        )


def _check_scale(scale: float | None) -> None:
    if scale is not None and (
        isinstance(scale, bool)
        or not isinstance(scale, (int, float))
        or not (math.isfinite(scale) and scale > 0)
    ):
        raise ValueError(f"scale must be a positive finite float or None, got {scale!r}")


def _check_dropout(name: str, p: float) -> None:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise ValueError(f"{name} must be a float in [0, 1), got {p!r}")
# --8<-- [end:validate]


# --8<-- [start:forward]
def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    *,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T / sqrt(d) + mask) v, returning the output and the weights.

    Args:
        q: queries, ``(..., N, d)``.
        k: keys, ``(..., M, d)``.
        v: values, ``(..., M, d_v)``.
        attn_mask: ``None``, a boolean mask (True = may attend) or a float mask
            added to the scores; it must broadcast to ``(..., N, M)``.
        dropout_p: probability of zeroing a weight. Applied whenever it is > 0:
            pass ``0.0`` outside training, as with PyTorch's function.
        is_causal: apply the lower-right aligned causal mask. Not allowed
            together with ``attn_mask``.
        scale: the factor on the scores; ``1 / sqrt(d)`` when ``None``.

    Returns:
        ``(out, weights)``: ``out`` is ``(..., N, d_v)``; ``weights`` is
        ``(..., N, M)``, the softmax before dropout, each row summing to 1 (or
        all zeros for a query that may attend to nothing).

    Shape:
        Leading dimensions broadcast, as in ``torch.matmul``: ``(B, H, N, d)``
        queries against ``(B, H, M, d)`` keys is the common case.
    """
    _check_qkv(q, k, v)
    n, m, d = q.shape[-2], k.shape[-2], q.shape[-1]
    if attn_mask is not None and is_causal:
        raise ValueError(
            "attn_mask and is_causal=True were both given; pass one of them "
            "(fold the causal triangle into attn_mask if you need both)"
        )
    if attn_mask is not None:
        _check_mask(attn_mask, q, k)
    _check_dropout("dropout_p", dropout_p)
    _check_scale(scale)
    if scale is None:
        scale = 1.0 / math.sqrt(d)

    # Half-precision inputs are scored and normalised in float32: a product of
    # two large fp16 entries overflows 65504 long before softmax can help.
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    scores = (q.to(acc) * scale) @ k.to(acc).transpose(-2, -1)  # (..., N, d) @ (..., d, M) -> (..., N, M)

    if is_causal:
        attn_mask = causal_mask(n, m, device=q.device)  # (N, M)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            # -inf, not a large negative constant: exp(-inf) is exactly 0 in every dtype.
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask.to(acc)

    # A query with no allowed key has a row of only -inf: softmax would give
    # 0/0 = NaN (and NaN gradients through a float mask). Score it 0 instead,
    # then give it zero weights, so it returns zeros.
    empty_row = torch.isneginf(scores).all(dim=-1, keepdim=True)  # (..., N, 1)
    weights = torch.softmax(scores.masked_fill(empty_row, 0.0), dim=-1)  # normalise over the M keys of each query
    weights = weights.masked_fill(empty_row, 0.0)

    dropped = torch.dropout(weights, dropout_p, train=True) if dropout_p > 0 else weights
    out = dropped @ v.to(acc)  # (..., N, M) @ (..., M, d_v) -> (..., N, d_v)
    return out.to(q.dtype), weights.to(q.dtype)
# --8<-- [end:forward]
