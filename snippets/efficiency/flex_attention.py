"""Every mask and bias of this site as a FlexAttention ``mask_mod`` or ``score_mod``.

Paper: Dong, Feng, Guessous, Liang and He (2024), "Flex Attention: A
Programming Model for Generating Optimized Attention Kernels", arXiv:2412.05496.
The patterns: causal (Vaswani et al. 2017, arXiv:1706.03762), sliding window
(Beltagy et al. 2020, arXiv:2004.05150; Jiang et al. 2023, arXiv:2310.06825),
ALiBi (Press et al. 2021, arXiv:2108.12409), soft-capping (Gemma Team 2024,
"Gemma 2: Improving Open Language Models at a Practical Size",
arXiv:2408.00118), prefix-LM and packed documents.
Page: docs/efficiency/flex-attention.md
Tested against: torch.nn.functional.scaled_dot_product_attention with the
dense boolean mask or float bias the site's other pages build
(tests/test_flex_masks.py).

``torch.nn.attention.flex_attention`` computes softmax(score_mod(q k^T * scale))
v over the (query, key) pairs a ``mask_mod`` allows. Both are plain Python
functions of index tensors:

* ``mask_mod(b, h, q_idx, kv_idx) -> bool``: True = may attend (the same
  polarity as SDPA's boolean ``attn_mask``);
* ``score_mod(score, b, h, q_idx, kv_idx) -> score``: receives the score
  already multiplied by ``scale`` (1/sqrt(d) by default).

``create_block_mask`` evaluates a ``mask_mod`` once per tile of
``BLOCK_SIZE`` queries by ``BLOCK_SIZE`` keys and records which tiles hold any
allowed pair; the kernel skips the others. ``computed_block_fraction`` reports
how many tiles are left.

Index conventions: N queries, M keys. When N != M the N queries are the last N
of the M positions (lower-right alignment, as with a KV cache): query ``i``
sits at absolute position ``i + M - N``.

This file needs only torch and the standard library: copy it into a project.
Eager ``flex_attention`` runs on the CPU (forward only); on a GPU wrap it in
``torch.compile`` to get the fused kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch.nn.attention.flex_attention import (
    BlockMask,
    and_masks,
    create_block_mask,
    flex_attention,
    or_masks,
)

__all__ = [
    "causal_mask_mod",
    "sliding_window_mask_mod",
    "prefix_lm_mask_mod",
    "document_ids_from_lengths",
    "document_mask_mod",
    "alibi_score_mod",
    "soft_cap_score_mod",
    "dense_mask",
    "block_tiles",
    "computed_block_fraction",
    "block_mask_fraction",
    "flex_attend",
    "flash_attn_window_size",
]

MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
ScoreMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def _check_count(name: str, value: object, minimum: int = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def _check_flag(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r}")


def _check_mod(name: str, mod: object, *, optional: bool = False) -> None:
    if not callable(mod) and not (optional and mod is None):
        raise TypeError(f"{name} must be a function{' or None' if optional else ''}, got {mod!r}")


def _check_flex_inputs(q, k, v, mask_mod, score_mod, block_size) -> None:
    """Raise a clear error unless q, k, v, the mods and the tile size suit ``flex_attend``."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4 or not t.is_floating_point():
            got = f"{tuple(t.shape)} {t.dtype}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a floating tensor of shape (B, H, length, width), got {got}")
    B, H, N, d = q.shape
    H_kv = k.shape[1]
    if k.shape[0] != B or v.shape[:3] != k.shape[:3] or k.shape[-1] != d or H % H_kv:
        raise ValueError(
            f"k and v must have shapes (B, H_kv, M, d) and (B, H_kv, M, d_v) with B = {B}, d = {d} "
            f"and H_kv dividing H = {H}, got k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    if k.device != q.device or v.device != q.device:
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device} and {v.device}")
    _check_mod("mask_mod", mask_mod, optional=True)
    _check_mod("score_mod", score_mod, optional=True)
    _check_count("block_size", block_size, 1)


# --8<-- [start:masks]
def causal_mask_mod(n_queries: int, n_keys: int) -> MaskMod:
    """Causal, aligned to the lower right: query ``i`` sees key ``j <= i + M - N``.

    For N > M the first N - M queries see no key at all (their rows are zeros).
    """
    _check_count("n_queries", n_queries)
    _check_count("n_keys", n_keys)
    offset = n_keys - n_queries  # absolute position of query 0

    def causal(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + offset

    return causal


def sliding_window_mask_mod(window: int, n_queries: int, n_keys: int, *, causal: bool = True) -> MaskMod:
    """This site's window of ``w`` keys, the query itself included.

    Causal: ``i' - w < j <= i'``; bidirectional: ``|i' - j| < w``, where
    ``i' = i + M - N`` is the query's absolute position.
    """
    _check_count("window", window, 1)
    _check_count("n_queries", n_queries)
    _check_count("n_keys", n_keys)
    _check_flag("causal", causal)
    offset = n_keys - n_queries

    def sliding_window(b, h, q_idx, kv_idx):
        distance = q_idx + offset - kv_idx  # > 0 for keys behind the query
        if causal:
            return (distance >= 0) & (distance < window)
        return distance.abs() < window

    return sliding_window


def prefix_lm_mask_mod(prefix_len: int) -> MaskMod:
    """Prefix-LM (N = M): the first ``prefix_len`` keys are visible to every query,
    the rest causally. The prefix attends to itself in both directions."""
    _check_count("prefix_len", prefix_len)

    def in_prefix(b, h, q_idx, kv_idx):
        return kv_idx < prefix_len

    def causal(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx

    return or_masks(in_prefix, causal)
# --8<-- [end:masks]


# --8<-- [start:documents]
def document_ids_from_lengths(lengths: list[int], *, device: torch.device | str | None = None) -> torch.Tensor:
    """Documents packed end to end: ``[2, 3]`` -> ``tensor([0, 0, 1, 1, 1])``."""
    if not isinstance(lengths, (list, tuple)) or not lengths:
        raise ValueError(f"lengths must be a non-empty list of ints >= 1, got {lengths!r}")
    for i, n in enumerate(lengths):
        _check_count(f"lengths[{i}]", n, 1)
    counts = torch.tensor(lengths, device=device)
    return torch.repeat_interleave(torch.arange(len(lengths), device=device), counts)  # (N,)


def document_mask_mod(document_ids: torch.Tensor, *, causal: bool = True) -> MaskMod:
    """Packed sequences (N = M): a token sees only tokens of its own document
    (and, when causal, only the earlier ones).

    Args:
        document_ids: ``(N,)`` or ``(B, N)`` integer ids, one per position.
    """
    if not isinstance(document_ids, torch.Tensor) or document_ids.dim() not in (1, 2) \
            or document_ids.is_floating_point() or document_ids.dtype == torch.bool:
        got = (f"{tuple(document_ids.shape)} {document_ids.dtype}" if isinstance(document_ids, torch.Tensor)
               else type(document_ids).__name__)
        raise ValueError(f"document_ids must be an integer tensor of shape (N,) or (B, N), got {got}")
    _check_flag("causal", causal)
    ids = document_ids if document_ids.dim() == 2 else document_ids.unsqueeze(0)  # (B or 1, N)
    per_batch = document_ids.dim() == 2

    def same_document(b, h, q_idx, kv_idx):
        row = b if per_batch else 0
        return ids[row, q_idx] == ids[row, kv_idx]

    def earlier(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx

    return and_masks(same_document, earlier) if causal else same_document
# --8<-- [end:documents]


# --8<-- [start:scores]
def alibi_score_mod(slopes: torch.Tensor, n_queries: int, n_keys: int, *, causal: bool = True) -> ScoreMod:
    """ALiBi: subtract ``m_h * distance`` from head ``h``'s scaled score.

    The distance is ``i + M - N - j`` (causal; future keys are left to a
    ``mask_mod``) or its absolute value (``causal=False``), as in the ALiBi page.
    """
    if not isinstance(slopes, torch.Tensor) or slopes.dim() != 1 or not slopes.is_floating_point():
        got = tuple(slopes.shape) if isinstance(slopes, torch.Tensor) else type(slopes).__name__
        raise ValueError(f"slopes must be a 1-D floating tensor of shape (H,), got {got}")
    _check_count("n_queries", n_queries)
    _check_count("n_keys", n_keys)
    _check_flag("causal", causal)
    offset = n_keys - n_queries

    def alibi(score, b, h, q_idx, kv_idx):
        distance = q_idx + offset - kv_idx
        if not causal:
            distance = distance.abs()
        return score - slopes[h] * distance

    return alibi


def soft_cap_score_mod(cap: float) -> ScoreMod:
    """Soft-capping: ``cap * tanh(score / cap)`` keeps every score in (-cap, cap)."""
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not (0 < cap < math.inf):
        raise ValueError(f"cap must be a positive finite number, got {cap!r}")

    def soft_cap(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    return soft_cap
# --8<-- [end:scores]


# --8<-- [start:blocks]
def dense_mask(mask_mod: MaskMod, n_queries: int, n_keys: int, *, batch: int = 1, heads: int = 1,
               device: torch.device | str | None = None) -> torch.Tensor:
    """Evaluate ``mask_mod`` at every (b, h, i, j): the boolean ``attn_mask`` SDPA takes.

    Returns:
        ``(batch, heads, N, M)``, True = may attend.
    """
    _check_mod("mask_mod", mask_mod)
    for name, value in (("n_queries", n_queries), ("n_keys", n_keys)):
        _check_count(name, value)
    for name, value in (("batch", batch), ("heads", heads)):
        _check_count(name, value, 1)
    b = torch.arange(batch, device=device).view(-1, 1, 1, 1)  # (B, 1, 1, 1)
    h = torch.arange(heads, device=device).view(1, -1, 1, 1)  # (1, H, 1, 1)
    i = torch.arange(n_queries, device=device).view(1, 1, -1, 1)  # (1, 1, N, 1)
    j = torch.arange(n_keys, device=device).view(1, 1, 1, -1)  # (1, 1, 1, M)
    allowed = mask_mod(b, h, i, j)  # broadcasts to (B or 1, H or 1, N, M)
    return allowed.expand(batch, heads, n_queries, n_keys)


def block_tiles(mask: torch.Tensor, block_size: int = 128) -> torch.Tensor:
    """Sort the (block_size x block_size) tiles of a mask the way a block-sparse kernel does.

    Args:
        mask: a dense ``(..., N, M)`` boolean mask, True = may attend.
        block_size: the tile edge (``create_block_mask``'s ``BLOCK_SIZE``).

    Returns:
        ``(..., ceil(N / block_size), ceil(M / block_size))`` int64: 0 where
        the tile has no allowed pair (skipped), 1 where it is partial
        (computed, and the mask applied inside it), 2 where every pair is
        allowed (computed with no mask at all).
    """
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.dim() < 2:
        got = f"{tuple(mask.shape)} {mask.dtype}" if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"mask must be a boolean tensor of shape (..., N, M), got {got}")
    _check_count("block_size", block_size, 1)
    n, m = mask.shape[-2:]
    pad = (0, -m % block_size, 0, -n % block_size)

    # Padding counts as blocked, as in a kernel whose last tile runs past the
    # end: such a tile is never full, it must mask the positions beyond N or M.
    padded = torch.nn.functional.pad(mask, pad, value=False)
    tiles = padded.unflatten(-2, (-1, block_size)).unflatten(-1, (-1, block_size))  # (..., N/b, b, M/b, b)
    allowed = tiles.sum(dim=(-3, -1))  # allowed pairs in each tile: (..., N/b, M/b)
    return (allowed > 0).long() + (allowed == block_size * block_size).long()


def computed_block_fraction(mask: torch.Tensor, block_size: int = 128) -> tuple[float, float]:
    """The fraction of tiles a block-sparse kernel computes, and of tiles it must mask.

    Returns:
        ``(computed, partial)``: tiles with at least one allowed pair, and
        partial tiles (the mask is applied inside them), as fractions of all tiles.
    """
    state = block_tiles(mask, block_size)
    return (state > 0).float().mean().item(), (state == 1).float().mean().item()


def block_mask_fraction(block_mask: BlockMask) -> float:
    """The fraction of tiles a ``BlockMask`` computes, read from its block counts."""
    if not isinstance(block_mask, BlockMask):
        raise TypeError(f"block_mask must be a BlockMask, got {type(block_mask).__name__}")
    n, m = block_mask.seq_lengths
    bq, bk = block_mask.BLOCK_SIZE
    tiles = math.ceil(n / bq) * math.ceil(m / bk)
    counts = block_mask.kv_num_blocks
    if block_mask.full_kv_num_blocks is not None:
        counts = counts + block_mask.full_kv_num_blocks
    return counts.sum().item() / (counts.shape[0] * counts.shape[1] * tiles)
# --8<-- [end:blocks]


# --8<-- [start:attend]
def flex_attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask_mod: MaskMod | None = None,
    score_mod: ScoreMod | None = None,
    block_size: int = 128,
) -> torch.Tensor:
    """FlexAttention with a block mask built from ``mask_mod`` for these shapes.

    Args:
        q: ``(B, H, N, d)``.
        k: ``(B, H_kv, M, d)``; H_kv must divide H (grouped-query attention).
        v: ``(B, H_kv, M, d_v)``.
        mask_mod: True = may attend; None attends everywhere.
        score_mod: changes each scaled score; None leaves it.
        block_size: the tile edge of the block mask.

    Returns:
        ``(B, H, N, d_v)``. A query that may attend to no key returns zeros.
    """
    _check_flex_inputs(q, k, v, mask_mod, score_mod, block_size)
    B, H, N, d = q.shape
    H_kv, M = k.shape[1], k.shape[2]
    block_mask = None
    if mask_mod is not None:
        block_mask = create_block_mask(mask_mod, B, H, N, M, device=q.device, BLOCK_SIZE=block_size)
    return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=H != H_kv)
# --8<-- [end:attend]


# --8<-- [start:conventions]
def flash_attn_window_size(window: int, *, causal: bool = True) -> tuple[int, int]:
    """This site's window of ``w`` keys as FlashAttention's ``window_size=(left, right)``.

    FlashAttention lets query ``i`` see keys ``[i' - left, i' + right]``
    inclusive (``i' = i + M - N``): ``left + right + 1`` keys. This site's
    causal window counts ``w`` keys including the query, so ``left = w - 1``;
    the bidirectional one reaches ``w - 1`` keys each way.
    """
    _check_count("window", window, 1)
    _check_flag("causal", causal)
    return (window - 1, 0) if causal else (window - 1, window - 1)
# --8<-- [end:conventions]

