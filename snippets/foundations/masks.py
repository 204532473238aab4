"""Attention masks: causal, padding, and the conversions between conventions.

Paper: the causal ("masked") decoder self-attention of Vaswani, Shazeer, Parmar,
Uszkoreit, Jones, Gomez, Kaiser and Polosukhin (2017), "Attention Is All You
Need", arXiv:1706.03762, section 3.2.3.
Page: docs/foundations/masks.md
Tested against: torch.nn.functional.scaled_dot_product_attention and
torch.nn.MultiheadAttention(batch_first=True) (tests/test_masks.py).

The site's convention, the same as ``F.scaled_dot_product_attention``: a
boolean mask is True where a query MAY attend to a key; a floating mask is
added to the scores (0 keeps a key, -inf removes it). ``nn.MultiheadAttention``
takes the opposite polarity for both its ``attn_mask`` and its
``key_padding_mask`` (True = blocked); ``to_mha_mask`` and ``from_mha_mask``
convert. Causal masks for N != M are aligned to the lower right.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import torch

__all__ = [
    "causal_mask",
    "padding_mask",
    "key_mask_to_attn_mask",
    "combine_masks",
    "bool_to_additive",
    "additive_to_bool",
    "to_mha_mask",
    "from_mha_mask",
]


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

# --8<-- [start:padding]
def padding_mask(
    lengths: torch.Tensor, max_len: int | None = None
) -> torch.Tensor:
    """Boolean mask of the real tokens of a padded batch, True = real token.

    Args:
        lengths: ``(B,)`` integer tensor, the number of real tokens in each
            sequence (padding comes after them).
        max_len: the padded length M; ``lengths.max()`` when ``None``.

    Returns:
        A ``(B, M)`` boolean tensor: ``mask[b, j]`` is True when ``j < lengths[b]``.
    """
    if not isinstance(lengths, torch.Tensor):
        raise TypeError(f"lengths must be a torch.Tensor, got {type(lengths).__name__}")
    if lengths.dim() != 1:
        raise ValueError(
            f"lengths must be 1-D with shape (B,), got shape {tuple(lengths.shape)}"
        )
    if lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must have an integer dtype, got {lengths.dtype}")
    if lengths.numel() > 0 and int(lengths.min()) < 0:
        raise ValueError(f"lengths must be >= 0, got {lengths.tolist()}")
    longest = int(lengths.max()) if lengths.numel() > 0 else 0
    if max_len is None:
        max_len = longest
    elif isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < longest:
        raise ValueError(
            f"max_len must be an int >= the longest length {longest}, got {max_len!r}"
        )
    j = torch.arange(max_len, device=lengths.device)  # (M,)
    return j < lengths.unsqueeze(-1)  # (M,) vs (B, 1) -> (B, M)
# --8<-- [end:padding]


# --8<-- [start:broadcast]
def _check_bool(mask: torch.Tensor, name: str) -> None:
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must have dtype torch.bool, got {mask.dtype}")


def _check_pair(attn_mask: torch.Tensor, keys: torch.Tensor) -> None:
    """Raise unless attn_mask (.., N, M) and keys (B, 1, 1, M) combine on one device."""
    if attn_mask.device != keys.device:
        raise ValueError(
            f"attn_mask and key_mask must be on one device, got {attn_mask.device} and {keys.device}"
        )
    try:
        torch.broadcast_shapes(attn_mask.shape, keys.shape)
    except RuntimeError:
        raise ValueError(
            "attn_mask must broadcast with key_mask seen as (B, 1, 1, M) = "
            f"{tuple(keys.shape)} (same B, same M), got attn_mask {tuple(attn_mask.shape)}"
        ) from None


def key_mask_to_attn_mask(key_mask: torch.Tensor) -> torch.Tensor:
    """Turn a per-key mask into an attention mask over (B, H, N, M).

    Args:
        key_mask: ``(B, M)`` boolean, True = real key that may be attended.

    Returns:
        ``(B, 1, 1, M)`` boolean: the same key mask for every head and query,
        ready to broadcast against ``(B, H, N, M)`` scores.
    """
    _check_bool(key_mask, "key_mask")
    if key_mask.dim() != 2:
        raise ValueError(
            f"key_mask must have shape (B, M), got shape {tuple(key_mask.shape)}"
        )
    return key_mask[:, None, None, :]  # (B, M) -> (B, 1, 1, M)


def combine_masks(
    attn_mask: torch.Tensor | None = None, key_mask: torch.Tensor | None = None
) -> torch.Tensor | None:
    """AND a boolean attention mask with a key mask: attend only where both allow.

    Args:
        attn_mask: ``None`` or a boolean mask broadcastable to ``(B, H, N, M)``,
            e.g. ``(N, M)`` from ``causal_mask``.
        key_mask: ``None`` or ``(B, M)`` boolean, True = real key.

    Returns:
        ``None`` when both are ``None``, else a boolean mask that broadcasts
        to ``(B, H, N, M)`` (``(B, 1, N, M)`` when both are given).
    """
    if attn_mask is not None:
        _check_bool(attn_mask, "attn_mask")
        if attn_mask.dim() not in (2, 3, 4):
            raise ValueError(
                "attn_mask must have shape (N, M), (B, N, M) or (B, H, N, M), "
                f"got shape {tuple(attn_mask.shape)}"
            )
        if attn_mask.dim() == 3:
            attn_mask = attn_mask.unsqueeze(1)  # (B, N, M) -> (B, 1, N, M)
    if key_mask is None:
        return attn_mask
    keys = key_mask_to_attn_mask(key_mask)  # (B, 1, 1, M)
    if attn_mask is None:
        return keys
    _check_pair(attn_mask, keys)
    return attn_mask & keys  # (N, M) & (B, 1, 1, M) -> (B, 1, N, M)
# --8<-- [end:broadcast]


# --8<-- [start:additive]
def bool_to_additive(
    mask: torch.Tensor, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Boolean mask (True = may attend) -> float mask of 0 and -inf.

    -inf rather than -1e9: ``exp(-inf)`` is exactly 0 in every dtype, while
    -1e9 does not even fit in float16 (its range ends at 65504).

    Args:
        mask: boolean mask of any shape.
        dtype: a floating dtype for the result; use the dtype of the queries.

    Returns:
        A tensor of ``mask``'s shape: 0 where True, -inf where False.
    """
    _check_bool(mask, "mask")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating dtype, got {dtype!r}")
    zeros = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return zeros.masked_fill(~mask, float("-inf"))


def additive_to_bool(mask: torch.Tensor) -> torch.Tensor:
    """Float mask -> boolean mask, True where the entry is not -inf.

    Finite entries other than 0 are biases, not masking: they survive in the
    float mask but are lost in the boolean one.

    Args:
        mask: floating mask of any shape.

    Returns:
        A boolean tensor of the same shape, True = may attend.
    """
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    if not mask.is_floating_point():
        raise TypeError(f"mask must have a floating dtype, got {mask.dtype}")
    return ~torch.isneginf(mask)
# --8<-- [end:additive]


# --8<-- [start:mha]
def to_mha_mask(mask: torch.Tensor) -> torch.Tensor:
    """Site mask -> a mask for ``nn.MultiheadAttention``.

    Works for both of its arguments: ``attn_mask`` ``(N, M)`` and
    ``key_padding_mask`` ``(B, M)``. A boolean mask flips polarity
    (True = may attend becomes True = blocked); a float mask is added to the
    scores by both libraries, so it passes through unchanged.

    Args:
        mask: boolean (True = may attend) or floating (added) mask.

    Returns:
        The mask in ``nn.MultiheadAttention``'s convention.
    """
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype == torch.bool:
        return ~mask
    if mask.is_floating_point():
        return mask
    raise TypeError(f"mask must be torch.bool or a floating dtype, got {mask.dtype}")


def from_mha_mask(mask: torch.Tensor) -> torch.Tensor:
    """``nn.MultiheadAttention`` mask (True = blocked) -> site mask (True = may attend).

    Args:
        mask: boolean (True = blocked) or floating (added) mask.

    Returns:
        The mask in the site's (and ``F.scaled_dot_product_attention``'s) convention.
    """
    # Negation is its own inverse; a separate name keeps call sites readable.
    return to_mha_mask(mask)
# --8<-- [end:mha]
