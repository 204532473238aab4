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

The file has two layers: the math kernel ``scaled_dot_product`` (the equation,
nothing else) and the public face ``scaled_dot_product_attention`` (arguments,
checks, precision and mask plumbing, then the kernel).

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
    """(N, M) bool, True where key j <= i + (M - N): the queries are the last N."""
    _check_mask_sizes(n_queries, n_keys)
    i = torch.arange(n_queries, device=device).unsqueeze(-1)  # (N, 1)
    j = torch.arange(n_keys, device=device)  # (M,)
    return j <= i + (n_keys - n_queries)  # (N, 1) vs (M,) -> (N, M)
# --8<-- [end:causal_mask]


# --8<-- [start:check_mask_sizes]
def _check_mask_sizes(n_queries: int, n_keys: int) -> None:
    """Refuse a length that is not a whole number >= 0."""
    for name, value in (("n_queries", n_queries), ("n_keys", n_keys)):
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
# --8<-- [end:check_mask_sizes]


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


# --8<-- [start:kernel]
def scaled_dot_product(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    allowed: torch.Tensor | None = None, bias: torch.Tensor | None = None,
    scale: float = 1.0, dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T * scale + bias) v over the allowed keys, and the weights."""
    # (..., N, d) @ (..., d, M) -> (..., N, M)
    scores = (q * scale) @ k.transpose(-2, -1)
    if bias is not None:
        scores = scores + bias  # a float mask is added to the scores
    weights = _masked_softmax(scores, allowed)  # each row sums to 1 over the M keys
    if dropout_p > 0:  # the weights are returned as they were before dropout
        return torch.dropout(weights, dropout_p, train=True) @ v, weights
    return weights @ v, weights  # (..., N, M) @ (..., M, d_v) -> (..., N, d_v)
# --8<-- [end:kernel]


# --8<-- [start:face]
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
    _check_sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale)
    n, m, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    # Half precision is scored and normalised in float32: a product of two large
    # float16 entries overflows 65504 long before the softmax can help.
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    allowed, bias = None, None
    if is_causal:
        allowed = causal_mask(n, m, device=q.device)  # (N, M)
    elif attn_mask is not None and attn_mask.dtype == torch.bool:
        allowed = attn_mask
    elif attn_mask is not None:  # -inf entries remove a key, finite ones bias it
        allowed, bias = ~torch.isneginf(attn_mask), attn_mask.to(acc)
    out, weights = scaled_dot_product(
        q.to(acc), k.to(acc), v.to(acc), allowed, bias, scale, dropout_p
    )
    return out.to(q.dtype), weights.to(q.dtype)
# --8<-- [end:face]


# --8<-- [start:validate]
def _check_sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale) -> None:
    """Refuse what would crash deep in torch or give a silently wrong answer."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"{name} must be a floating tensor (..., L, d), got {got}")
        if t.dim() < 2:
            raise ValueError(f"{name} must have at least 2 dimensions (..., L, d), "
                             f"got shape {tuple(t.shape)}")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} "
                        f"and {v.dtype}")
    if not q.device == k.device == v.device:
        raise ValueError(f"q, k and v must be on one device, got {q.device}, "
                         f"{k.device} and {v.device}")
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(f"q and k must share d, k and v must share M, got q "
                         f"{tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    try:  # the leading (batch, head) dimensions pair up as in torch.matmul
        lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(f"q, k and v must have leading (batch, head) dimensions that "
                         f"broadcast, got q {tuple(q.shape)}, k {tuple(k.shape)} and "
                         f"v {tuple(v.shape)}") from None
    if attn_mask is not None:
        _check_attn_mask(attn_mask, q, (*lead, q.shape[-2], k.shape[-2]), is_causal)
    if not isinstance(dropout_p, (int, float)) or not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be a float in [0, 1), got {dropout_p!r}")
    if scale is not None and not (isinstance(scale, (int, float))
                                  and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive finite float or None, "
                         f"got {scale!r}")


def _check_attn_mask(attn_mask, q, scores: tuple[int, ...], is_causal: bool) -> None:
    """Refuse a mask of the wrong dtype, device or shape, or one next to is_causal."""
    if is_causal:
        raise ValueError("attn_mask and is_causal=True were both given (got both); "
                         "fold the causal triangle into attn_mask if you need both")
    if not isinstance(attn_mask, torch.Tensor) or attn_mask.dtype not in (
            torch.bool, q.dtype):
        got = (attn_mask.dtype if isinstance(attn_mask, torch.Tensor)
               else type(attn_mask).__name__)
        raise TypeError(f"attn_mask must be torch.bool (True = may attend) or "
                        f"{q.dtype} (added to the scores), got {got}")
    if attn_mask.device != q.device:
        raise ValueError(f"attn_mask must be on q's device {q.device}, "
                         f"got {attn_mask.device}")
    try:
        fits = torch.broadcast_shapes(attn_mask.shape, scores) == scores
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"attn_mask must broadcast to the scores (..., N, M) = "
                         f"{scores}, got shape {tuple(attn_mask.shape)}")
# --8<-- [end:validate]
