"""Online softmax and tiled (blockwise) attention in pure PyTorch.

Papers:
    Milakov and Gimelshein (2018), "Online normalizer calculation for softmax",
    arXiv:1805.02867 (the running max and running sum).
    Rabe and Staats (2021), "Self-attention Does Not Need O(n^2) Memory",
    arXiv:2112.05682 (attention over key/value chunks with that rescaling).
    Dao, Fu, Ermon, Rudra and Re (2022), "FlashAttention: Fast and
    Memory-Efficient Exact Attention with IO-Awareness", arXiv:2205.14135
    (the same loop, tiled over queries too and fused into one GPU kernel).
Page: docs/efficiency/tiled-attention.md
Tested against: torch.softmax, torch.logsumexp and
torch.nn.functional.scaled_dot_product_attention (tests/test_tiled.py).

The loop below never holds more than a ``(B, H, block_q, block_k)`` tile of
scores, so its extra memory grows like N instead of N * M. It is exact, not an
approximation: the result equals softmax(q k^T / sqrt(d)) v up to rounding.
Being written in Python, it is slower than a fused kernel; it exists to show
the arithmetic that such kernels perform.

Mask convention: ``is_causal=True`` aligns the triangle to the lower right when
N != M (query ``i`` may attend key ``j`` when ``j <= i + M - N``), as a KV cache
needs. A query that may attend to no key returns zeros.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math
from itertools import zip_longest

import torch

__all__ = ["online_softmax", "tiled_attention"]


# --8<-- [start:online_softmax_step]
def online_softmax_step(m, l, s):
    """Fold a block of scores s into the running max m and running sum l."""
    # m, l: (..., 1); s: (..., b)
    m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (..., 1)
    # While every score seen is -inf, shift by 0 instead: -inf - (-inf) is NaN.
    m_safe = torch.where(torch.isneginf(m_new), 0.0, m_new)
    alpha = torch.exp(m - m_safe)  # re-measures the old sum against the new max
    p = torch.exp(s - m_safe)  # (..., b), every exponent <= 0
    return m_new, alpha * l + p.sum(dim=-1, keepdim=True), alpha, p


# --8<-- [end:online_softmax_step]


# --8<-- [start:online_softmax]
def softmax_one_pass(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """softmax(x) with m and l found in one pass over blocks of x."""
    m = x.new_full((*x.shape[:-1], 1), float("-inf"))  # running max, (..., 1)
    l = x.new_zeros((*x.shape[:-1], 1))  # running sum of exp(x - m), (..., 1)
    for start in range(0, x.shape[-1], block_size):
        m, l, _, _ = online_softmax_step(m, l, x[..., start : start + block_size])
    m = torch.where(torch.isneginf(m), 0.0, m)  # an all -inf row: exp(-inf) = 0
    return torch.exp(x - m) / torch.where(l == 0, 1.0, l)  # (..., M) / (..., 1)


# --8<-- [end:online_softmax]


# --8<-- [start:tile_loop]
def attention_tiles(q, k, v, block_k: int, q_start: int, offset: int, causal: bool):
    """One query block over the key blocks: out = o / l, and lse = m + log l."""
    # q: (..., bq, d), already scaled; k: (..., M, d); v: (..., M, d_v)
    m = q.new_full((*q.shape[:-1], 1), float("-inf"))  # running max, (..., bq, 1)
    l = q.new_zeros((*q.shape[:-1], 1))  # running sum, (..., bq, 1)
    o = q.new_zeros((*q.shape[:-1], v.shape[-1]))  # unnormalised, (..., bq, d_v)
    i = torch.arange(q_start, q_start + q.shape[-2], device=q.device)[:, None]
    # Under the causal mask, key blocks after the last visible key are never read.
    end = min(k.shape[-2], q_start + q.shape[-2] + offset) if causal else k.shape[-2]
    for j in range(0, max(end, 0), block_k):
        s = q @ k[..., j : j + block_k, :].transpose(-2, -1)  # (..., bq, bk)
        if causal:  # key j' is hidden from query i when j' > i + M - N
            keys = torch.arange(j, j + s.shape[-1], device=q.device)
            s = s.masked_fill(keys > i + offset, float("-inf"))
        m, l, alpha, p = online_softmax_step(m, l, s)
        o = alpha * o + p @ v[..., j : j + block_k, :]  # (..., bq, d_v)
    return o / torch.where(l == 0, 1.0, l), (m + l.log()).squeeze(-1)


# --8<-- [end:tile_loop]


# --8<-- [start:face]
def online_softmax(x: torch.Tensor, *, block_size: int = 1) -> torch.Tensor:
    """Softmax over the last dimension, with the normaliser found in one pass.

    The input is read block by block, keeping a running maximum ``m`` and a
    running sum ``l`` of ``exp(x - m)``. When a block raises the maximum, the
    sum so far is rescaled by ``exp(m_old - m_new)``. A second pass writes
    ``exp(x - m) / l``.

    Args:
        x: scores, ``(..., M)``.
        block_size: how many entries are read per step (1 = one at a time,
            as in the paper's Algorithm 3).

    Returns:
        ``softmax(x, dim=-1)``, same shape and dtype as ``x``. A row that is
        all ``-inf`` gives zeros.

    Shape:
        ``(..., M) -> (..., M)``.
    """
    _check_tile_sizes(x, block_size=block_size)
    return softmax_one_pass(x, block_size)


def tiled_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    is_causal: bool = False,
    block_size_k: int = 128,
    block_size_q: int | None = None,
    scale: float | None = None,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T / sqrt(d)) v, computed one key/value block at a time.

    Args:
        q: queries, ``(..., N, d)``; usually ``(B, H, N, d)``.
        k: keys, ``(..., M, d)``.
        v: values, ``(..., M, d_v)``.
        is_causal: apply the lower-right aligned causal mask.
        block_size_k: keys (and values) per block. Any positive int; M need
            not be a multiple of it.
        block_size_q: queries per block; ``None`` processes all N queries
            together (tiling over keys only, as Rabe and Staats do).
        scale: the factor on the scores; ``1 / sqrt(d)`` when ``None``.
        return_lse: also return the log-sum-exp of each query's scores,
            ``L_i = log sum_j exp(scale * q_i . k_j)`` over its visible keys,
            what FlashAttention-2's forward hands to its backward.

    Returns:
        ``out``, ``(..., N, d_v)`` in the dtype of ``q`` (half-precision inputs
        are accumulated in float32); with ``return_lse``, ``(out, lse)`` where
        ``lse`` is ``(..., N)`` in the accumulation dtype, ``-inf`` for a query
        with no visible key.

    Shape:
        ``(B, H, N, d), (B, H, M, d), (B, H, M, d_v) -> (B, H, N, d_v)``.
    """
    _check_tiled_qkv(q, k, v, scale, block_size_k, block_size_q)
    bq = max(q.shape[-2], 1) if block_size_q is None else block_size_q
    n, m_len = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    k, v = k.to(acc), v.to(acc)
    outs, lses = [], []
    for start in range(0, n, bq):  # one query block at a time
        q_blk = q[..., start : start + bq, :].to(acc) * scale  # (..., bq, d)
        out, lse = attention_tiles(
            q_blk, k, v, block_size_k, start, m_len - n, is_causal
        )
        outs.append(out)
        lses.append(lse)
    if n == 0:
        out = q.new_zeros((*q.shape[:-1], v.shape[-1]))
        return (out, q.new_zeros(q.shape[:-1], dtype=acc)) if return_lse else out
    out = torch.cat(outs, dim=-2).to(
        q.dtype
    )  # blocks of (..., bq, d_v) -> (..., N, d_v)
    return (out, torch.cat(lses, dim=-1)) if return_lse else out


def _describe(t: object) -> str:
    if isinstance(t, torch.Tensor):
        return f"{t.dtype} {tuple(t.shape)} on {t.device}"
    return type(t).__name__


def _check_given(ok: object, name: str, want: str, got: object, error=ValueError):
    """Raise error("<name> must <want>, got <got>") unless ok."""
    if not ok:
        raise error(f"{name} must {want}, got {got}")


def _check_tile_sizes(x: object = None, **sizes: object) -> None:
    """Refuse a block size that is not a positive int (the loop would never end)."""
    ok = x is None or torch.is_tensor(x) and x.is_floating_point() and x.dim() > 0
    _check_given(ok, "x", "be a floating tensor (..., M)", _describe(x), TypeError)
    for name, value in sizes.items():
        ok = isinstance(value, int) and value >= 1
        _check_given(ok, name, "be a positive int", repr(value))


def _check_tiled_qkv(q, k, v, scale, block_size_k, block_size_q) -> None:
    """Refuse q, k, v that cannot be attended together, naming what differs."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        ok = isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() >= 2
        ok = ok and (t.dtype, t.device) == (q.dtype, q.device)
        _check_given(ok, name, "be floating (*, L, d) like q", _describe(t), TypeError)
    lead = zip_longest(*(t.shape[-3::-1] for t in (q, k, v)), fillvalue=1)  # as matmul
    fits = q.shape[-1] == k.shape[-1] and k.shape[-2] == v.shape[-2] and all(
        len(set(sizes) - {1}) <= 1 for sizes in lead)  # each leading dim: one size or 1
    want = "be (..., N, d), (..., M, d), (..., M, d_v) with leading dims that broadcast"
    got = f"q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)}"
    _check_given(fits, "q, k and v", want, got)
    bq = 1 if block_size_q is None else block_size_q
    _check_tile_sizes(block_size_k=block_size_k, block_size_q=bq)
    ok = scale is None or (isinstance(scale, (int, float)) and 0 < scale < math.inf)
    _check_given(ok, "scale", "be a positive finite float or None", repr(scale))


# --8<-- [end:face]
