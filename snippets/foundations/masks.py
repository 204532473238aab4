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

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


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
    _check_lengths(lengths, max_len)
    if max_len is None:
        max_len = int(lengths.max()) if lengths.numel() else 0
    j = torch.arange(max_len, device=lengths.device)  # (M,)
    return j < lengths.unsqueeze(-1)  # (M,) vs (B, 1) -> (B, M)
# --8<-- [end:padding]


# --8<-- [start:broadcast]
def key_mask_to_attn_mask(key_mask: torch.Tensor) -> torch.Tensor:
    """(B, M) key mask (True = real key) -> (B, 1, 1, M), for (B, H, N, M) scores."""
    _check_mask("key_mask", key_mask, (torch.bool,), (2,))
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
    _check_additive(mask, dtype)
    zeros = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return zeros.masked_fill(~mask, float("-inf"))


def additive_to_bool(mask: torch.Tensor) -> torch.Tensor:
    """Float mask -> bool, True where not -inf (finite biases are lost)."""
    _check_mask("mask", mask, _FLOATS)
    return ~torch.isneginf(mask)
# --8<-- [end:additive]


# --8<-- [start:mha]
def to_mha_mask(mask: torch.Tensor) -> torch.Tensor:
    """Site mask -> nn.MultiheadAttention's (attn_mask or key_padding_mask)."""
    _check_mask("mask", mask, (torch.bool, *_FLOATS))
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
def _check_mask(name: str, t, dtypes: tuple, ranks=None, optional=False) -> None:
    """Refuse t unless it is a tensor with one of dtypes and a rank in ranks (or
    None, when optional)."""
    ok = torch.is_tensor(t) and t.dtype in dtypes
    if not (ok and t.dim() in (ranks or [t.dim()]) or optional and t is None):
        got = (tuple(t.shape), t.dtype) if torch.is_tensor(t) else type(t).__name__
        raise TypeError(f"{name} must be a tensor of {dtypes}, rank {ranks or 'any'}, "
                        f"got {got}")


def _check_lengths(lengths: torch.Tensor, max_len: int | None) -> None:
    """Refuse lengths that are not (B,) integers, or a max_len below the longest."""
    _check_mask("lengths", lengths, (torch.int64, torch.int32), (1,))
    longest = int(lengths.max()) if lengths.numel() else 0
    if max_len is not None and not (isinstance(max_len, int) and max_len >= longest):
        raise ValueError(f"max_len must be an int >= the longest length {longest}, "
                         f"got {max_len!r}")


def _check_combine(attn_mask: torch.Tensor | None, key_mask: torch.Tensor | None):
    """Refuse masks that are not bool, or that do not broadcast on one device."""
    _check_mask("attn_mask", attn_mask, (torch.bool,), (2, 3, 4), optional=True)
    _check_mask("key_mask", key_mask, (torch.bool,), (2,), optional=True)
    if attn_mask is None or key_mask is None:
        return
    (b, m), lead = key_mask.shape, attn_mask.shape[0] if attn_mask.dim() > 2 else 1
    same_device = attn_mask.device == key_mask.device
    if attn_mask.shape[-1] != m or lead not in (1, b) or not same_device:
        raise ValueError(f"attn_mask must broadcast with key_mask (B, M) = {(b, m)} on "
                         f"its device, got {tuple(attn_mask.shape)} {attn_mask.device}")


def _check_additive(mask: torch.Tensor, dtype: torch.dtype) -> None:
    """Refuse a mask that is not bool, or a result dtype that cannot hold -inf."""
    _check_mask("mask", mask, (torch.bool,))
    if dtype not in _FLOATS:
        raise TypeError(f"dtype must be a floating dtype, got {dtype!r}")
# --8<-- [end:validate]
