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
convert. A per-key mask with True = real key is called ``key_mask`` here, never
``key_padding_mask``. Causal masks for N != M are aligned to the lower right.

Each function is the math in a few lines after one ``_check_...`` call; the
checks live together at the end of the file.

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
    """(N, M) bool, True where key j <= i + (M - N): the queries are the last N."""
    _check_mask_sizes(n_queries, n_keys)
    i = torch.arange(n_queries, device=device).unsqueeze(-1)  # (N, 1)
    j = torch.arange(n_keys, device=device)  # (M,)
    return j <= i + (n_keys - n_queries)  # (N, 1) vs (M,) -> (N, M)
# --8<-- [end:causal_mask]


# --8<-- [start:padding]
def padding_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """(B,) lengths -> (B, M) bool, True for the first lengths[b] positions (real)."""
    _check_lengths_tensor(lengths, max_len)
    if max_len is None:
        max_len = int(lengths.max()) if lengths.numel() else 0
    j = torch.arange(max_len, device=lengths.device)  # (M,)
    return j < lengths.unsqueeze(-1)  # (M,) vs (B, 1) -> (B, M)
# --8<-- [end:padding]


# --8<-- [start:broadcast]
def key_mask_to_attn_mask(key_mask: torch.Tensor) -> torch.Tensor:
    """(B, M) key mask (True = real key) -> (B, 1, 1, M), for (B, H, N, M) scores."""
    _check_key_mask_dims(key_mask)
    return key_mask[:, None, None, :]  # (B, M) -> (B, 1, 1, M)


def combine_masks(
    attn_mask: torch.Tensor | None = None, key_mask: torch.Tensor | None = None
) -> torch.Tensor | None:
    """Attend only where both allow: attn_mask (.., N, M) AND key_mask (B, M)."""
    _check_combine(attn_mask, key_mask)
    if attn_mask is not None and attn_mask.dim() == 3:
        attn_mask = attn_mask.unsqueeze(1)  # (B, N, M) -> (B, 1, N, M)
    if key_mask is None:
        return attn_mask
    keys = key_mask_to_attn_mask(key_mask)  # (B, 1, 1, M)
    return keys if attn_mask is None else attn_mask & keys  # -> (B, 1, N, M)
# --8<-- [end:broadcast]


# --8<-- [start:additive]
def bool_to_additive(
    mask: torch.Tensor, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """True (may attend) -> 0, False -> -inf: exp(-inf) is 0 in every dtype."""
    _check_bool(mask, "mask", dtype)
    zeros = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return zeros.masked_fill(~mask, float("-inf"))


def additive_to_bool(mask: torch.Tensor) -> torch.Tensor:
    """Float mask -> bool, True where not -inf (finite biases are lost)."""
    _check_float_mask(mask)
    return ~torch.isneginf(mask)
# --8<-- [end:additive]


# --8<-- [start:mha]
def to_mha_mask(mask: torch.Tensor) -> torch.Tensor:
    """Site mask -> nn.MultiheadAttention's (attn_mask or key_padding_mask)."""
    _check_any_mask(mask)
    # A boolean mask flips polarity (True = blocked there); a float one is added
    # to the scores by both libraries, so it passes through unchanged.
    return ~mask if mask.dtype == torch.bool else mask


def from_mha_mask(mask: torch.Tensor) -> torch.Tensor:
    """nn.MultiheadAttention mask (True = blocked) -> site mask (True = may attend)."""
    return to_mha_mask(mask)  # negation is its own inverse
# --8<-- [end:mha]


# --8<-- [start:check_mask_sizes]
def _check_mask_sizes(n_queries: int, n_keys: int) -> None:
    """Refuse a length that is not a whole number >= 0."""
    for name, value in (("n_queries", n_queries), ("n_keys", n_keys)):
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
# --8<-- [end:check_mask_sizes]


# --8<-- [start:validate]
def _check_lengths_tensor(lengths: torch.Tensor, max_len: int | None) -> None:
    """Refuse lengths that are not (B,) integers >= 0, or a max_len below them."""
    if not isinstance(lengths, torch.Tensor) or lengths.is_floating_point() \
            or lengths.is_complex() or lengths.dtype == torch.bool:
        got = (lengths.dtype if isinstance(lengths, torch.Tensor)
               else type(lengths).__name__)
        raise TypeError(f"lengths must be an integer tensor (B,), got {got}")
    if lengths.dim() != 1:  # (B,)
        raise ValueError(f"lengths must be 1-D with shape (B,), got shape "
                         f"{tuple(lengths.shape)}")
    if lengths.numel() and int(lengths.min()) < 0:
        raise ValueError(f"lengths must be >= 0, got {lengths.tolist()}")
    longest = int(lengths.max()) if lengths.numel() else 0
    if max_len is not None and (not isinstance(max_len, int) or max_len < longest):
        raise ValueError(f"max_len must be an int >= the longest length {longest}, "
                         f"got {max_len!r}")


def _check_bool(mask: torch.Tensor, name: str, dtype: torch.dtype | None = None
                ) -> None:
    """Refuse a mask that is not bool, or a result dtype that cannot hold -inf."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(f"{name} must have dtype torch.bool, got {got}")
    if dtype is not None and not (isinstance(dtype, torch.dtype)
                                  and dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating dtype, got {dtype!r}")


def _check_key_mask_dims(key_mask: torch.Tensor) -> None:
    _check_bool(key_mask, "key_mask")
    if key_mask.dim() != 2:
        raise ValueError(f"key_mask must have shape (B, M), got shape "
                         f"{tuple(key_mask.shape)}")


def _check_combine(attn_mask: torch.Tensor | None, key_mask: torch.Tensor | None
                   ) -> None:
    """Refuse masks that are not bool, or that do not broadcast on one device."""
    if attn_mask is not None:
        _check_bool(attn_mask, "attn_mask")
        if attn_mask.dim() not in (2, 3, 4):
            raise ValueError("attn_mask must have shape (N, M), (B, N, M) or "
                             f"(B, H, N, M), got shape {tuple(attn_mask.shape)}")
    if key_mask is not None:
        _check_key_mask_dims(key_mask)
    if attn_mask is None or key_mask is None:
        return
    if attn_mask.device != key_mask.device:
        raise ValueError(f"attn_mask and key_mask must be on one device, got "
                         f"{attn_mask.device} and {key_mask.device}")
    keys = key_mask[:, None, None, :]  # (B, 1, 1, M)
    lead = attn_mask.unsqueeze(1) if attn_mask.dim() == 3 else attn_mask
    try:
        torch.broadcast_shapes(lead.shape, keys.shape)
    except RuntimeError:
        raise ValueError("attn_mask must broadcast with key_mask seen as "
                         f"(B, 1, 1, M) = {tuple(keys.shape)} (same B, same M), "
                         f"got attn_mask "
                         f"{tuple(attn_mask.shape)}") from None


def _check_float_mask(mask: torch.Tensor) -> None:
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    if not mask.is_floating_point():
        raise TypeError(f"mask must have a floating dtype, got {mask.dtype}")


def _check_any_mask(mask: torch.Tensor) -> None:
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise TypeError(f"mask must be torch.bool or a floating dtype, "
                        f"got {mask.dtype}")
# --8<-- [end:validate]
