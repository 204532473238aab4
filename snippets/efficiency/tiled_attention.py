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
Tested against: torch.softmax and torch.nn.functional.scaled_dot_product_attention
(tests/test_tiled.py).

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

import torch

__all__ = ["online_softmax", "tiled_attention"]


# --8<-- [start:online_softmax]
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
    _check_scores(x)
    _check_block("block_size", block_size)
    *lead, m_len = x.shape
    m = x.new_full((*lead, 1), float("-inf"))  # running max, (..., 1)
    l = x.new_zeros((*lead, 1))  # running sum of exp(x - m), (..., 1)
    for start in range(0, m_len, block_size):
        block = x[..., start : start + block_size]  # (..., M) -> (..., b)
        m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))  # (..., 1)
        # While every entry seen so far is -inf, shift by 0 instead: -inf - -inf is NaN.
        m_safe = torch.where(torch.isneginf(m_new), 0.0, m_new)
        l = l * torch.exp(m - m_safe) + torch.exp(block - m_safe).sum(dim=-1, keepdim=True)
        m = m_new
    m_safe = torch.where(torch.isneginf(m), 0.0, m)
    l_safe = torch.where(l == 0, 1.0, l)
    return torch.exp(x - m_safe) / l_safe  # (..., M) / (..., 1) -> (..., M)
# --8<-- [end:online_softmax]


# --8<-- [start:validate]
def _check_block(name: str, value: int | None, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        expected = "a positive int or None" if allow_none else "a positive int"
        raise ValueError(f"{name} must be {expected}, got {value!r}")


def _check_scale(scale: float | None) -> None:
    if scale is not None and (
        isinstance(scale, bool)
        or not isinstance(scale, (int, float))
        or not (math.isfinite(scale) and scale > 0)
    ):
        raise ValueError(f"scale must be a positive finite float or None, got {scale!r}")


def _check_scores(x: torch.Tensor) -> None:
    """Raise a clear error unless x is a floating tensor with a last dimension."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"x must have a floating dtype, got {x.dtype}")
    if x.dim() < 1:
        raise ValueError(f"x must have at least 1 dimension (..., M), got shape {tuple(x.shape)}")


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
# --8<-- [end:validate]


# --8<-- [start:forward]
def tiled_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    is_causal: bool = False,
    block_size_k: int = 128,
    block_size_q: int | None = None,
    scale: float | None = None,
) -> torch.Tensor:
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

    Returns:
        ``(..., N, d_v)``, the same dtype as ``q``. Half-precision inputs are
        accumulated in float32.

    Shape:
        ``(B, H, N, d), (B, H, M, d), (B, H, M, d_v) -> (B, H, N, d_v)``.
    """
    _check_qkv(q, k, v)
    _check_block("block_size_k", block_size_k)
    _check_block("block_size_q", block_size_q, allow_none=True)
    _check_scale(scale)
    n, m_len, d = q.shape[-2], k.shape[-2], q.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    block_size_q = block_size_q or max(n, 1)
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    offset = m_len - n  # lower-right alignment: query i sees keys j <= i + offset

    outs = []
    for q_start in range(0, n, block_size_q):
        q_blk = q[..., q_start : q_start + block_size_q, :].to(acc) * scale  # (..., bq, d)
        bq = q_blk.shape[-2]
        m = q_blk.new_full((*q_blk.shape[:-1], 1), float("-inf"))  # running max, (..., bq, 1)
        l = q_blk.new_zeros((*q_blk.shape[:-1], 1))  # running sum, (..., bq, 1)
        o = q_blk.new_zeros((*q_blk.shape[:-1], v.shape[-1]))  # unnormalised out, (..., bq, d_v)
        # Under the causal mask, keys after the last visible one are never read.
        k_end = min(m_len, q_start + bq + offset) if is_causal else m_len
        for k_start in range(0, max(k_end, 0), block_size_k):
            k_blk = k[..., k_start : k_start + block_size_k, :].to(acc)  # (..., bk, d)
            v_blk = v[..., k_start : k_start + block_size_k, :].to(acc)  # (..., bk, d_v)
            scores = q_blk @ k_blk.transpose(-2, -1)  # (..., bq, d) @ (..., d, bk) -> (..., bq, bk)
            if is_causal and k_start + k_blk.shape[-2] - 1 > q_start + offset:
                # Only blocks that cross the diagonal need a mask; those left of it are fully visible.
                i = torch.arange(q_start, q_start + bq, device=q.device).unsqueeze(-1)  # (bq, 1)
                j = torch.arange(k_start, k_start + k_blk.shape[-2], device=q.device)  # (bk,)
                scores = scores.masked_fill(j > i + offset, float("-inf"))  # (bq, bk) mask
            m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))  # (..., bq, 1)
            m_safe = torch.where(torch.isneginf(m_new), 0.0, m_new)
            alpha = torch.exp(m - m_safe)  # how much the old max overestimated: rescale
            p = torch.exp(scores - m_safe)  # (..., bq, bk), unnormalised weights
            l = alpha * l + p.sum(dim=-1, keepdim=True)
            o = alpha * o + p @ v_blk  # (..., bq, bk) @ (..., bk, d_v) -> (..., bq, d_v)
            m = m_new
        # Divide once at the end; a query that saw no key has l == 0 and returns zeros.
        outs.append(o / torch.where(l == 0, 1.0, l))  # (..., bq, d_v)
    if not outs:  # N == 0
        return q.new_zeros((*q.shape[:-1], v.shape[-1]))
    return torch.cat(outs, dim=-2).to(q.dtype)  # blocks of (..., bq, d_v) -> (..., N, d_v)
# --8<-- [end:forward]
