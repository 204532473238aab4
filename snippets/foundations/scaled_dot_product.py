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
    for name, t in {"q": q, "k": k, "v": v, "attn_mask": attn_mask}.items():
        mask = name == "attn_mask"  # None, bool or q's dtype; (M,) broadcasts
        dtypes = (getattr(q, "dtype", None), torch.bool if mask else None)
        ok = torch.is_tensor(t) and t.dim() >= 2 - 2 * mask and t.dtype in dtypes
        ok = ok and t.device == q.device and q.is_floating_point()
        if not (ok or mask and t is None):
            got = (tuple(t.shape), t.dtype, t.device) if torch.is_tensor(t) else type(t)
            raise TypeError(f"{name} must be a 2-D+ tensor of q's floating dtype (a "
                            f"mask: any rank, or bool) on q's device, got {got}")
    shapes = [tuple(getattr(t, "shape", ())) for t in (q, k, v, attn_mask)]
    try:  # the leading (batch, head) dimensions pair up as in torch.matmul
        lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        scores = (*lead, q.shape[-2], k.shape[-2])
        fits = torch.broadcast_shapes(shapes[3], scores) == scores
    except RuntimeError:
        fits = False
    if not fits or q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(f"q, k, v, attn_mask must fit (..., N, d), (..., M, d), "
                         f"(..., M, d_v), (..., N, M); got {shapes}")
    causal_and_mask = is_causal and attn_mask is not None
    if not (isinstance(dropout_p, (int, float)) and 0 <= dropout_p < 1) or not (
            scale is None or 0 < scale < math.inf) or causal_and_mask:
        raise ValueError(f"dropout_p must be in [0, 1), scale > 0 and finite or None, "
                         f"attn_mask None if is_causal; got {dropout_p!r}, {scale!r}, "
                         f"{is_causal}, {type(attn_mask).__name__}")
# --8<-- [end:validate]
