"""DeepSeek-V4's compressed attentions (CSA and HCA) and a cost calculator.

Report: DeepSeek-AI (2026), "DeepSeek-V4: Towards Highly Efficient
Million-Token Context Intelligence", arXiv:2606.19348.
Every m tokens a learned compressor pools one entry of a single shared key =
value head. Heavily compressed attention (HCA, m' = 128) reads every complete
past entry; compressed sparse attention (CSA, m = 4, two overlapping series)
reads the top-k entries a lightning indexer picks. Both add a sliding window
of recent tokens and a learned sink to one joint softmax.
Page: docs/linear/compressed-attention.md
Tested against: transformers' ``DeepseekV4Attention`` (its compressors, its
indexer and its eager attention with sinks) built from a small random
configuration, and F.scaled_dot_product_attention(is_causal=True) with one
key/value head (key = value) when m = 1, every entry is read, the window is
off and there is no sink, in tests/test_compressed_attention.py.

The calculator counts, for NSA, DSA, MoBA, MiniMax's block-sparse attention
and V4, the keys one decoded token reads at a context length and the cache
bytes per token.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = ["compress_entries", "select_entries", "v4_attention",
           "dense_cost", "nsa_cost", "dsa_cost", "moba_cost", "minimax_cost", "v4_cost"]


# --8<-- [start:compress]
def pool_windows(c, z, bias, m):
    """C_w = sum over window w of softmax_j(z_j + b_j) * c_j, channel by channel."""
    n = c.shape[-2] // m  # complete windows only: floor(T / m) entries
    c = c[..., : n * m, :].unflatten(-2, (n, m))  # (B, n, m, d)
    z = z[..., : n * m, :].unflatten(-2, (n, m)) + bias  # (B, n, m, d)
    return (z.softmax(dim=-2) * c).sum(dim=-2)  # (B, n, d)


def pool_overlapping(c, z, bias, m):
    """CSA: entry w pools series a of window w - 1 with series b of window w."""
    d, n = c.shape[-1] // 2, c.shape[-2] // m
    c = c[..., : n * m, :].unflatten(-2, (n, m))  # (B, n, m, 2d)
    z = z[..., : n * m, :].unflatten(-2, (n, m)) + bias  # (B, n, m, 2d)
    # series a moves one window later; window 0 has no predecessor (gate -inf)
    c_a = torch.cat([torch.zeros_like(c[..., :1, :, :d]), c[..., :d]], dim=-3)
    z_a = torch.cat([torch.full_like(z[..., :1, :, :d], -math.inf), z[..., :d]], dim=-3)
    slots = torch.cat([c_a[..., :n, :, :], c[..., d:]], dim=-2)  # (B, n, 2m, d)
    gates = torch.cat([z_a[..., :n, :, :], z[..., d:]], dim=-2)  # (B, n, 2m, d)
    return (gates.softmax(dim=-2) * slots).sum(dim=-2)  # (B, n, d)
# --8<-- [end:compress]


# --8<-- [start:index]
def entry_causal(n, n_entries, m, device=None):
    """Query t reads entry w only if its window's last token (w + 1) m - 1 <= t."""
    t = torch.arange(n, device=device).unsqueeze(-1)  # (N, 1)
    return (torch.arange(n_entries, device=device) + 1) * m <= t + 1  # (N, E)


def index_top_k(q_idx, k_idx, w, m, top_k):
    """Keep the top_k past entries by I[t, s] = sum_h w[t, h] ReLU(q[t, h] . K[s])."""
    dots = torch.einsum("bnhd,bed->bnhe", q_idx, k_idx)  # (B, N, H_I, E)
    scores = torch.einsum("bnh,bnhe->bne", w, F.relu(dots))  # (B, N, E)
    seen = entry_causal(scores.shape[-2], scores.shape[-1], m, scores.device)
    scores = scores.masked_fill(~seen, -math.inf)  # a future entry never takes a slot
    top = scores.topk(min(top_k, scores.shape[-1]), dim=-1).indices  # (B, N, k)
    kept = torch.zeros_like(scores, dtype=torch.bool).scatter(-1, top, True)
    return kept & seen  # a row with fewer than top_k past entries keeps just those
# --8<-- [end:index]


# --8<-- [start:joint]
def joint_softmax(q, kv, entries, keep, sink, scale):
    """One softmax over [window keys, kept entries, sink]; key = value."""
    keys = torch.cat([kv, entries], dim=-2)  # (B, 1, N + E, d): the one shared head
    scores = (q @ keys.transpose(-2, -1)) * scale  # (B, H, N, N + E)
    scores = scores.masked_fill(~keep, -math.inf)
    if sink is not None:  # one learned logit per head, in the softmax, never read
        column = sink.view(1, -1, 1, 1).expand_as(scores[..., :1])  # (B, H, N, 1)
        scores = torch.cat([scores, column], dim=-1)
    top = scores.amax(dim=-1, keepdim=True).detach().nan_to_num(neginf=0.0)
    e = (scores - top).exp()  # (B, H, N, N + E [+ 1])
    total = e.sum(dim=-1, keepdim=True)  # >= 1 on a row with a key; 0 on an empty row
    weights = e / torch.where(total > 0, total, torch.ones_like(total))
    return weights[..., : keys.shape[-2]] @ keys  # (B, H, N, d): the sink adds nothing
# --8<-- [end:joint]


# --8<-- [start:layer]
def attend_window_and_entries(q, kv, entries, picked, m, window, sink, scale):
    """The window's last `window` keys and the picked past entries, one softmax."""
    n, e, dev = q.shape[-2], entries.shape[-2], q.device
    i, j = torch.arange(n, device=dev).unsqueeze(-1), torch.arange(n, device=dev)
    near = (j <= i) & (j > i - window)  # (N, N): the query itself is in the window
    seen = entry_causal(n, e, m, dev) & picked  # (B, N, E)
    keep = torch.cat([near.expand(*seen.shape[:-1], n), seen], dim=-1).unsqueeze(1)
    return joint_softmax(q, kv, entries, keep, sink, scale)  # (B, H, N, d)
# --8<-- [end:layer]


# --8<-- [start:cost]
def own_block_keys(context, block, top_k):
    """Blocks of keys: the query's own (partial) block and top_k - 1 full past ones."""
    own = (context - 1) % block + 1  # keys of the newest block, the query's own
    return min(context, own + (top_k - 1) * block)


def nsa_keys(context, block, n_select, window, cmp_block, cmp_stride):
    """Keys one NSA decoding step reads: summaries, selected blocks and the window."""
    # overlapping compression blocks: floor((T - l) / stride) + 1 complete ones
    n_cmp = (context - cmp_block) // cmp_stride + 1 if context >= cmp_block else 0
    return n_cmp + min(n_select * block, context) + min(window, context)


def v4_keys(context, compress_rate, window, top_k):
    """V4: the window and every complete entry (HCA) or top_k of them (CSA)."""
    entries = context // compress_rate  # floor(T / m) complete windows
    return min(window, context) + (entries if top_k is None else min(top_k, entries))
# --8<-- [end:cost]


# --8<-- [start:face]
def compress_entries(
    c: torch.Tensor,
    z: torch.Tensor,
    bias: torch.Tensor,
    *,
    compress_rate: int,
    overlap: bool = False,
) -> torch.Tensor:
    """Pool every ``compress_rate`` tokens into one compressed entry.

    The entry of window w is a softmax-weighted sum of its tokens' projections
    ``c``, weighted channel by channel by ``softmax(z + bias)`` over the
    window. With ``overlap`` (CSA), ``c`` and ``z`` hold two series of width
    d: entry w pools series a of window w - 1 with series b of window w (2m
    slots; window 0 pools series b alone). The model then RMS-normalises each
    entry and rotates it (RoPE) at position ``w * compress_rate``; that is
    left to the caller.

    Args:
        c: the compressor's values ``(B, T, d)``, or ``(B, T, 2d)`` with overlap.
        z: its gate logits, the shape of ``c``.
        bias: a learned logit per slot and channel ``(compress_rate, c.shape[-1])``.
        compress_rate: tokens per entry m, >= 1 (V4: 4 for CSA, 128 for HCA).
        overlap: CSA's two overlapping series (True) or HCA's one (False).

    Returns:
        ``(B, floor(T / m), d)`` in the dtype of ``c``: the trailing
        ``T mod m`` tokens make no entry until their window is complete.

    Shape:
        c, z ``(B, T, d or 2d)``; bias ``(m, d or 2d)`` -> ``(B, floor(T / m), d)``.
    """
    _check_pool(c, z, bias, compress_rate, overlap)
    acc = torch.promote_types(c.dtype, torch.float32)  # the gate softmax in float32
    pool = pool_overlapping if overlap else pool_windows
    return pool(c.to(acc), z.to(acc), bias.to(acc), compress_rate).to(c.dtype)


def select_entries(
    q_idx: torch.Tensor,
    k_idx: torch.Tensor,
    w: torch.Tensor,
    *,
    compress_rate: int,
    top_k: int,
) -> torch.Tensor:
    """Which compressed entries each query reads under CSA's lightning indexer.

    Scores ``I[t, s] = sum_h w[t, h] ReLU(q_idx[t, h] . k_idx[s])`` rank the
    entries whose window lies wholly in the query's past; the best ``top_k``
    are kept.

    Args:
        q_idx: indexer queries ``(B, N, H_I, d_I)`` (V4: 64 heads of 128).
        k_idx: the indexer's own compressed keys ``(B, floor(N / m), d_I)``.
        w: per-query head weights ``(B, N, H_I)``.
        compress_rate: tokens per entry m, >= 1.
        top_k: entries per query, >= 1 (512 in V4-Flash's config).

    Returns:
        A bool tensor ``(B, N, floor(N / m))``, True where a query reads an
        entry: at most ``top_k`` per row, never one with a future token.

    Shape:
        q_idx ``(B, N, H_I, d_I)``, k_idx ``(B, E, d_I)``, w ``(B, N, H_I)`` ->
        ``(B, N, E)`` with E = floor(N / m).
    """
    _check_select(q_idx, k_idx, w, compress_rate, top_k)
    acc = torch.promote_types(q_idx.dtype, torch.float32)  # the ranking in float32
    return index_top_k(q_idx.to(acc), k_idx.to(acc), w.to(acc), compress_rate, top_k)


def v4_attention(
    q: torch.Tensor,
    kv: torch.Tensor,
    entries: torch.Tensor,
    *,
    compress_rate: int,
    window: int,
    selected: torch.Tensor | None = None,
    sink: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """V4's attention core: window keys, compressed entries and a sink, one softmax.

    Every query head reads the one shared head: ``kv`` is both key and value.
    Query t reads the last ``window`` tokens (itself included) and the
    entries whose window ended by t, all of them (HCA) or those ``selected``
    marks (CSA). The sink is one logit per head in the softmax with no value.
    With ``compress_rate = 1``, ``window = 0``, no selection and no sink this
    is causal attention with one key/value head and key = value.

    Args:
        q: queries ``(B, H, N, d)`` (after their norm and RoPE).
        kv: the shared key = value head ``(B, 1, N, d)``.
        entries: compressed entries ``(B, 1, floor(N / m), d)``.
        compress_rate: tokens per entry m, >= 1.
        window: recent tokens each query reads, >= 0 (V4: 128).
        selected: bool ``(B, N, floor(N / m))`` from ``select_entries``, or
            None to read every complete past entry.
        sink: a logit per head ``(H,)``, or None for no sink.
        scale: score scale; default ``1 / sqrt(d)``.

    Returns:
        ``(B, H, N, d)`` in the dtype of ``q``; a row with nothing to read
        gives zeros.

    Shape:
        q ``(B, H, N, d)``; kv ``(B, 1, N, d)``; entries ``(B, 1, E, d)`` ->
        ``(B, H, N, d)``.
    """
    _check_v4(q, kv, entries, selected, sink, compress_rate, window, scale)
    acc = torch.promote_types(q.dtype, torch.float32)
    b, n, e = q.shape[0], q.shape[2], entries.shape[2]
    picked = torch.ones(b, n, e, dtype=torch.bool, device=q.device)
    picked = picked if selected is None else selected
    sink = None if sink is None else sink.to(acc)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    out = attend_window_and_entries(q.to(acc), kv.to(acc), entries.to(acc), picked,
                                    compress_rate, window, sink, scale)
    return out.to(q.dtype)


@dataclass(frozen=True)
class SparseCost:
    """One decoded token in one layer: keys read, and cache bytes per token held."""

    keys: int
    cache_bytes_per_token: float


def dense_cost(context: int, *, kv_bytes: int) -> SparseCost:
    """Dense attention: every cached key, ``kv_bytes`` a token (the baseline)."""
    _check_v4_counts(**locals())  # every argument is a count
    return SparseCost(context, float(kv_bytes))


def nsa_cost(context: int, *, kv_bytes: int, block: int = 64, n_select: int = 16,
             window: int = 512, cmp_block: int = 32,
             cmp_stride: int = 16) -> SparseCost:
    """NSA: every summary, ``n_select`` blocks and the window (the paper's sizes).

    The cache holds every key/value pair (``kv_bytes`` per token, all heads)
    and one summary per ``cmp_stride`` tokens.
    """
    _check_v4_counts(**locals())  # every argument is a count
    keys = nsa_keys(context, block, n_select, window, cmp_block, cmp_stride)
    n_cmp = keys - min(n_select * block, context) - min(window, context)
    return SparseCost(keys, (context + n_cmp) * kv_bytes / context)


def dsa_cost(context: int, *, kv_bytes: int, index_bytes: int,
             top_k: int = 2048) -> SparseCost:
    """DSA: the top_k keys the indexer picks; the cache adds one indexer key a token."""
    _check_v4_counts(**locals())  # every argument is a count
    return SparseCost(min(top_k, context), float(kv_bytes + index_bytes))


def moba_cost(context: int, *, kv_bytes: int, block: int, top_k: int) -> SparseCost:
    """MoBA: the own block and top_k - 1 past blocks; the cache is every key/value."""
    _check_v4_counts(**locals())  # every argument is a count
    return SparseCost(own_block_keys(context, block, top_k), float(kv_bytes))


def minimax_cost(context: int, *, kv_bytes: int, index_bytes: int, block: int = 128,
                 top_k: int = 16) -> SparseCost:
    """MiniMax: top_k blocks, the own one among them; the cache adds the index key."""
    _check_v4_counts(**locals())  # every argument is a count
    keys = own_block_keys(context, block, top_k)
    return SparseCost(keys, float(kv_bytes + index_bytes))


def v4_cost(context: int, *, entry_bytes: int, compress_rate: int, window: int = 128,
            top_k: int | None = None, index_bytes: int = 0) -> SparseCost:
    """V4, one layer: HCA (``top_k`` None) or CSA (``top_k`` and indexer keys).

    The cache holds the window's ``window`` tokens, floor(T / m) entries of
    ``entry_bytes`` and, for CSA, as many indexer keys of ``index_bytes``.
    """
    _check_v4_counts(**locals())  # counts; window and index_bytes may be 0
    entries = context // compress_rate
    held = (min(window, context) + entries) * entry_bytes + entries * index_bytes
    return SparseCost(v4_keys(context, compress_rate, window, top_k), held / context)
# --8<-- [end:face]


# --8<-- [start:checks]
def _check_pool(c, z, bias, m, overlap):
    """c (B, T, C) with C even under overlap; z like c; bias (m, C)."""
    _check_v4_counts(compress_rate=m)
    _check_lin_tensor("c", c, ("B", "T", "2d" if overlap else "d"))
    _check_lin_tensor("z", z, c.shape, ("c", c))
    _check_lin_tensor("bias", bias, (m, c.shape[-1]), ("c", c), dtype=False)
    if overlap and c.shape[-1] % 2:
        raise ValueError(f"c must have an even width under overlap, got {c.shape[-1]}")


def _check_select(q_idx, k_idx, w, m, top_k):
    """q_idx (B, N, H_I, d_I); k_idx (B, N // m, d_I); w (B, N, H_I)."""
    _check_v4_counts(compress_rate=m, top_k=top_k)
    _check_lin_tensor("q_idx", q_idx, ("B", "N", "H_I", "d_I"))
    b, n, h, d = q_idx.shape
    _check_lin_tensor("k_idx", k_idx, (b, n // m, d), ("q_idx", q_idx))
    _check_lin_tensor("w", w, (b, n, h), ("q_idx", q_idx))


def _check_v4(q, kv, entries, selected, sink, m, window, scale):
    """q (B, H, N, d); kv (B, 1, N, d); entries (B, 1, N // m, d); sink (H,)."""
    _check_v4_counts(compress_rate=m, window=window)
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be None or a finite number > 0, got {scale!r}")
    _check_lin_tensor("q", q, ("B", "H", "N", "d"))
    b, h, n, d = q.shape
    _check_lin_tensor("kv", kv, (b, 1, n, d), ("q", q))
    _check_lin_tensor("entries", entries, (b, 1, n // m, d), ("q", q))
    if sink is not None:
        _check_lin_tensor("sink", sink, (h,), ("q", q), dtype=False)
    want, t = (torch.bool, (b, n, n // m), q.device), selected
    got = (t.dtype, tuple(t.shape), t.device) if torch.is_tensor(t) else t
    if t is not None and got != want:
        raise TypeError(f"selected must be None or {want}, got {got}")


def _check_v4_counts(**named):
    """Ints >= 1 (window, index_bytes: >= 0; top_k may be None)."""
    for name, v in named.items():
        low = 0 if name in ("window", "index_bytes") else 1
        if not (isinstance(v, int) and v >= low or (name, v) == ("top_k", None)):
            raise ValueError(f"{name} must be an int >= {low}, got {v!r}")


def _check_lin_tensor(name, t, shape, like=None, dtype=True) -> None:
    """A floating tensor of shape (a str: any size); like = (name, tensor) to match."""
    peer, ref = like or (name, t)
    ok = torch.is_tensor(t) and t.is_floating_point() and t.dim() == len(shape)
    if not ok or any(w != s for w, s in zip(shape, t.shape) if isinstance(w, int)) or (
            t.device != ref.device or dtype and t.dtype != ref.dtype):
        got = f"{t.dtype} {tuple(t.shape)} on {t.device}" if torch.is_tensor(t) else t
        raise (ValueError if ok else TypeError)(
            f"{name} must be a floating ({', '.join(map(str, shape))}) tensor on "
            f"{peer}'s device{' and dtype' if dtype else ''}, got {got}")
# --8<-- [end:checks]
