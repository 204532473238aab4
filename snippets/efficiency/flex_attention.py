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

The kernels (``causal_mod``, ``window_mod``, ...) hold the index arithmetic the
page shows; the public functions in ``__all__`` check their arguments and call
them.

This file needs only torch and the standard library: copy it into a project.
Eager ``flex_attention`` runs on the CPU (forward only); on a GPU wrap it in
``torch.compile`` to get the fused kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
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

Index = torch.Tensor
MaskMod = Callable[[Index, Index, Index, Index], torch.Tensor]
ScoreMod = Callable[[torch.Tensor, Index, Index, Index, Index], torch.Tensor]


# --8<-- [start:masks]
def causal_mod(offset: int) -> MaskMod:
    """j <= i', where i' = i + offset is query i's absolute position (offset M - N)."""

    def causal(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + offset

    return causal


def window_mod(window: int, offset: int, causal: bool) -> MaskMod:
    """Causal: i' - w < j <= i'; bidirectional: |i' - j| < w."""

    def sliding_window(b, h, q_idx, kv_idx):
        distance = q_idx + offset - kv_idx  # i' - j, > 0 for keys behind the query
        if causal:
            return (distance >= 0) & (distance < window)
        return distance.abs() < window

    return sliding_window
# --8<-- [end:masks]


# --8<-- [start:prefix]
def prefix_lm_mod(prefix_len: int) -> MaskMod:
    """j < prefix_len (every query sees the prefix) or j <= i (the rest, causally)."""

    def in_prefix(b, h, q_idx, kv_idx):
        return kv_idx < prefix_len

    return or_masks(in_prefix, causal_mod(0))
# --8<-- [end:prefix]


# --8<-- [start:documents]
def document_mod(ids: torch.Tensor, causal: bool) -> MaskMod:
    """ids[b, i] == ids[b, j], and j <= i when causal; ids is (B, N) or (1, N)."""

    def same_document(b, h, q_idx, kv_idx):
        row = b if ids.shape[0] > 1 else 0  # one row of ids may serve every batch entry
        return ids[row, q_idx] == ids[row, kv_idx]

    return and_masks(same_document, causal_mod(0)) if causal else same_document
# --8<-- [end:documents]


# --8<-- [start:scores]
def alibi_mod(slopes: torch.Tensor, offset: int, causal: bool) -> ScoreMod:
    """s - m_h (i' - j), or s - m_h |i' - j| when bidirectional."""

    def alibi(score, b, h, q_idx, kv_idx):
        distance = q_idx + offset - kv_idx  # future keys are left to a mask_mod
        return score - slopes[h] * (distance if causal else distance.abs())

    return alibi


def soft_cap_mod(cap: float) -> ScoreMod:
    """c tanh(s / c): every score lands in (-c, c)."""

    def soft_cap(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    return soft_cap
# --8<-- [end:scores]


# --8<-- [start:attend]
def attend_tiles(q, k, v, mask_mod, score_mod, block_size):
    """softmax(score_mod(scale q k^T)) v, over the tiles where mask_mod allows pairs."""
    (B, H, N, _), M = q.shape, k.shape[-2]
    block_mask = None  # None: every pair, every tile
    if mask_mod is not None:  # which (block_size x block_size) tiles to run
        block_mask = create_block_mask(
            mask_mod, B, H, N, M, device=q.device, BLOCK_SIZE=block_size
        )
    # (B, H, N, d) with (B, H_kv, M, d), (B, H_kv, M, d_v) -> (B, H, N, d_v)
    return flex_attention(
        q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=k.shape[1] != H
    )
# --8<-- [end:attend]


# --8<-- [start:dense]
def evaluate_mod(mask_mod, batch, heads, n_queries, n_keys, device=None):
    """mask_mod at every (b, h, i, j), by broadcasting index grids: SDPA's attn_mask."""
    b = torch.arange(batch, device=device).view(-1, 1, 1, 1)  # (B, 1, 1, 1)
    h = torch.arange(heads, device=device).view(1, -1, 1, 1)  # (1, H, 1, 1)
    i = torch.arange(n_queries, device=device).view(1, 1, -1, 1)  # (1, 1, N, 1)
    j = torch.arange(n_keys, device=device).view(1, 1, 1, -1)  # (1, 1, 1, M)
    allowed = mask_mod(b, h, i, j)  # broadcasts to (B or 1, H or 1, N, M)
    return allowed.expand(batch, heads, n_queries, n_keys)  # True = may attend
# --8<-- [end:dense]


# --8<-- [start:blocks]
def tile_states(mask: torch.Tensor, block: int) -> torch.Tensor:
    """Per (block x block) tile: 0 skipped (no allowed pair), 1 partial, 2 full."""
    n, m = mask.shape[-2:]
    # Padding counts as blocked, as in a kernel whose last tile runs past the
    # end: such a tile is never full, it must mask the positions beyond N or M.
    padded = F.pad(mask, (0, -m % block, 0, -n % block), value=False)
    # (..., N/b, b, M/b, b): tile row, query in it, tile column, key in it
    tiles = padded.unflatten(-2, (-1, block)).unflatten(-1, (-1, block))
    allowed = tiles.sum(dim=(-3, -1))  # allowed pairs per tile, (..., N/b, M/b)
    return (allowed > 0).long() + (allowed == block * block).long()
# --8<-- [end:blocks]


# --8<-- [start:face]
def causal_mask_mod(n_queries: int, n_keys: int) -> MaskMod:
    """Causal, aligned to the lower right: query ``i`` sees key ``j <= i + M - N``.

    For N > M the first N - M queries see no key at all (their rows are zeros).
    """
    _check_flex_sizes(n_queries=n_queries, n_keys=n_keys)
    return causal_mod(n_keys - n_queries)


def sliding_window_mask_mod(
    window: int, n_queries: int, n_keys: int, *, causal: bool = True
) -> MaskMod:
    """This site's window of ``w`` keys, the query itself included.

    Causal: ``i' - w < j <= i'``; bidirectional: ``|i' - j| < w``, where
    ``i' = i + M - N`` is the query's absolute position.
    """
    _check_flex_sizes("window", window=window, n_queries=n_queries, n_keys=n_keys)
    return window_mod(window, n_keys - n_queries, causal)


def prefix_lm_mask_mod(prefix_len: int) -> MaskMod:
    """Prefix-LM (N = M): the first ``prefix_len`` keys are visible to every query,
    the rest causally. The prefix attends to itself in both directions."""
    _check_flex_sizes(prefix_len=prefix_len)
    return prefix_lm_mod(prefix_len)


def document_ids_from_lengths(
    lengths: list[int], *, device: torch.device | str | None = None
) -> torch.Tensor:
    """Documents packed end to end: ``[2, 3]`` -> ``tensor([0, 0, 1, 1, 1])``."""
    if not isinstance(lengths, (list, tuple)) or not lengths:
        raise ValueError(f"lengths must be a non-empty list of ints, got {lengths!r}")
    sizes = {f"lengths[{i}]": n for i, n in enumerate(lengths)}
    _check_flex_sizes(*sizes, **sizes)
    counts = torch.tensor(lengths, device=device)
    return torch.arange(len(lengths), device=device).repeat_interleave(counts)  # (N,)


def document_mask_mod(document_ids: torch.Tensor, *, causal: bool = True) -> MaskMod:
    """Packed sequences (N = M): a token sees only tokens of its own document.

    Args:
        document_ids: ``(N,)`` or ``(B, N)`` integer ids, one per position.
        causal: also hide the later tokens of the same document.
    """
    _check_flex_tensor("document_ids", document_ids, (1, 2), "any")
    ids = document_ids if document_ids.dim() == 2 else document_ids.unsqueeze(0)
    return document_mod(ids, causal)  # ids: (B or 1, N)


def alibi_score_mod(
    slopes: torch.Tensor, n_queries: int, n_keys: int, *, causal: bool = True
) -> ScoreMod:
    """ALiBi: subtract ``m_h * distance`` from head ``h``'s scaled score.

    The distance is ``i + M - N - j`` (causal; future keys are left to a
    ``mask_mod``) or its absolute value (``causal=False``), as in the ALiBi page.
    ``slopes`` is ``(H,)``.
    """
    _check_flex_tensor("slopes", slopes, (1,))
    _check_flex_sizes(n_queries=n_queries, n_keys=n_keys)
    return alibi_mod(slopes, n_keys - n_queries, causal)


def soft_cap_score_mod(cap: float) -> ScoreMod:
    """Soft-capping: ``cap * tanh(score / cap)`` keeps every score in (-cap, cap)."""
    if not (isinstance(cap, (int, float)) and 0 < cap < math.inf):
        raise ValueError(f"cap must be a positive finite number, got {cap!r}")
    return soft_cap_mod(cap)


def dense_mask(
    mask_mod: MaskMod,
    n_queries: int,
    n_keys: int,
    *,
    batch: int = 1,
    heads: int = 1,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Evaluate ``mask_mod`` at every (b, h, i, j): the boolean mask SDPA takes.

    Returns:
        ``(batch, heads, N, M)``, True = may attend.
    """
    sizes = {"n_queries": n_queries, "n_keys": n_keys, "batch": batch, "heads": heads}
    _check_flex_sizes("batch", "heads", **sizes)
    return evaluate_mod(mask_mod, batch, heads, n_queries, n_keys, device)


def block_tiles(mask: torch.Tensor, block_size: int = 128) -> torch.Tensor:
    """Sort the tiles of a mask the way a block-sparse kernel does.

    Args:
        mask: a dense ``(..., N, M)`` boolean mask, True = may attend.
        block_size: the tile edge (``create_block_mask``'s ``BLOCK_SIZE``).

    Returns:
        ``(..., ceil(N / block_size), ceil(M / block_size))`` int64: 0 where
        the tile has no allowed pair (skipped), 1 where it is partial
        (computed, and the mask applied inside it), 2 where every pair is
        allowed (computed with no mask at all).
    """
    _check_flex_tensor("mask", mask, (2, 3, 4), "bool")
    _check_flex_sizes("block_size", block_size=block_size)
    return tile_states(mask, block_size)


def computed_block_fraction(
    mask: torch.Tensor, block_size: int = 128
) -> tuple[float, float]:
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
        raise TypeError(f"block_mask must be a BlockMask, got {type(block_mask)}")
    (n, m), (bq, bk) = block_mask.seq_lengths, block_mask.BLOCK_SIZE
    counts = block_mask.kv_num_blocks  # (B, H, N / bq): partial tiles per tile row
    if block_mask.full_kv_num_blocks is not None:
        counts = counts + block_mask.full_kv_num_blocks
    tiles = math.ceil(n / bq) * math.ceil(m / bk)
    return counts.sum().item() / (counts.shape[0] * counts.shape[1] * tiles)


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
    _check_flex_qkv(q, k, v, block_size)
    return attend_tiles(q, k, v, mask_mod, score_mod, block_size)


def flash_attn_window_size(window: int, *, causal: bool = True) -> tuple[int, int]:
    """This site's window of ``w`` keys as FlashAttention's ``window_size``.

    Returns ``(left, right)``.

    FlashAttention lets query ``i`` see keys ``[i' - left, i' + right]``
    inclusive (``i' = i + M - N``): ``left + right + 1`` keys. This site's
    causal window counts ``w`` keys including the query, so ``left = w - 1``;
    the bidirectional one reaches ``w - 1`` keys each way.
    """
    _check_flex_sizes("window", window=window)
    return (window - 1, 0) if causal else (window - 1, window - 1)
# --8<-- [end:face]


# --8<-- [start:checks]
def _check_flex_sizes(*positive: str, **sizes) -> None:
    """Every size is an int >= 0, and >= 1 where its name is in ``positive``."""
    for name, value in sizes.items():
        low = int(name in positive)
        if not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")


def _check_flex_tensor(name, t, dims, kind: str = "floating", like=None) -> None:
    """Refuse t unless it is a ``kind`` tensor of ``dims`` dims (and like ``like``)."""
    ok = torch.is_tensor(t) and t.dim() in dims and {
        "floating": t.is_floating_point(), "bool": t.dtype == torch.bool}.get(kind, 1)
    if not ok or like is not None and (t.dtype, t.device) != (like.dtype, like.device):
        got = f"{tuple(t.shape)} {t.dtype} on {t.device}" if torch.is_tensor(t) else t
        kind = kind if like is None or like is t else f"{like.dtype} on {like.device}"
        raise ValueError(f"{name} must have {dims} dims, dtype {kind}, got {got}")


def _check_flex_qkv(q, k, v, block_size) -> None:
    """q (B, H, N, d), k (B, H_kv, M, d), v (B, H_kv, M, d_v), H_kv dividing H."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_flex_tensor(name, t, (4,), like=q)
    # k: q's B and d (dims 0 and 3); v: k's B, H_kv and M; H_kv divides H
    if k.shape[::3] != q.shape[::3] or v.shape[:3] != k.shape[:3] \
            or q.shape[1] % k.shape[1]:
        got = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        raise ValueError(f"k, v must be (B, H_kv, M, d), (B, H_kv, M, d_v), got {got}")
    _check_flex_sizes("block_size", block_size=block_size)
# --8<-- [end:checks]
