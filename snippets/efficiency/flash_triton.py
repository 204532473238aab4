"""FlashAttention-2 in Triton: a fused forward and backward for (B, H, N, d) tensors.

Papers:
    Dao, Fu, Ermon, Rudra and Re (2022), "FlashAttention: Fast and
    Memory-Efficient Exact Attention with IO-Awareness", arXiv:2205.14135
    (tiles in on-chip memory, the log-sum-exp saved, the backward recomputes).
    Dao (2023), "FlashAttention-2: Faster Attention with Better Parallelism and
    Work Partitioning", arXiv:2307.08691 (one program per query tile, the
    division by the normaliser once at the end, the backward's delta term).
Page: docs/efficiency/flash-triton.md
Tested against: torch.nn.functional.scaled_dot_product_attention, outputs and
gradients (tests/test_flash_triton.py), on the CPU through Triton's interpreter.

``flash_attention(q, k, v, causal=..., scale=...)`` computes
softmax(q k^T * scale) v without ever writing the N x M score matrix to memory.
The forward saves only the output and one log-sum-exp per query row; the
backward recomputes each tile of probabilities from them.

Mask convention: ``causal=True`` aligns the triangle to the lower right when
N != M (query ``i`` may attend key ``j`` when ``j <= i + M - N``), as a KV cache
needs. A query that may attend to no key returns zeros and gets zero gradients.

This file needs torch and triton. On a CUDA GPU it compiles the kernels; on the
CPU it runs them only through Triton's interpreter, which must be switched on
before this file is imported: ``TRITON_INTERPRET=1`` in the environment.
"""

from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

__all__ = ["flash_attention", "flash_attention_lse", "FlashAttention"]

# Triton decides when a kernel is decorated whether it will be interpreted.
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0").lower() in (
    "1", "true", "on", "yes")
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)  # the input dtypes taken
# exp(x) = exp2(x * log2(e)): exp2 is the cheaper instruction
LOG2E = 1.4426950408889634


# --8<-- [start:forward_tile]
@triton.jit
def online_softmax_tile(q, k, v, allowed, m_i, l_i, acc, qk_scale,
                        DOT_F32: tl.constexpr):
    """m, l and o after one tile of keys: the online softmax, in base 2."""
    # (BLOCK_M, d) @ (d, BLOCK_N) -> (BLOCK_M, BLOCK_N), float32
    s = tl.where(allowed, _dot(q, tl.trans(k), DOT_F32) * qk_scale, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))  # (BLOCK_M,)
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # no key yet: shift by 0
    p = tl.math.exp2(s - m_safe[:, None])  # (BLOCK_M, BLOCK_N)
    alpha = tl.math.exp2(m_i - m_safe)  # the old sums, re-expressed against m_new
    l_i = alpha * l_i + tl.sum(p, 1)
    # (BLOCK_M, BLOCK_N) @ (BLOCK_N, d) -> (BLOCK_M, d)
    acc = alpha[:, None] * acc + _dot(p.to(v.dtype), v, DOT_F32)
    return m_new, l_i, acc
# --8<-- [end:forward_tile]


# --8<-- [start:backward_tile]
@triton.jit
def softmax_grad_tile(q, k, v, do, lse_2, delta, allowed, qk_scale,
                      DOT_F32: tl.constexpr):
    """P = exp(S - L), recomputed; dS = P * (dP - delta) with dP = dO V^T."""
    # (BLOCK_M, d) @ (d, BLOCK_N) -> (BLOCK_M, BLOCK_N), base-2 units
    s = tl.where(allowed, _dot(q, tl.trans(k), DOT_F32) * qk_scale, float("-inf"))
    p = tl.math.exp2(s - lse_2[:, None])  # exact: L holds the row's max and sum
    dp = _dot(do, tl.trans(v), DOT_F32)  # (BLOCK_M, d) @ (d, BLOCK_N)
    return p, p * (dp - delta[:, None])  # P and dS, (BLOCK_M, BLOCK_N) each
# --8<-- [end:backward_tile]


# --8<-- [start:kernels]
@triton.jit
def _dot(a, b, DOT_F32: tl.constexpr):
    # Matrix product with float32 accumulation. DOT_F32 is set for float32
    # inputs, whose products then use IEEE float32 ("ieee"), not TF32's 10-bit
    # mantissa, and under Triton 3.9's interpreter for bfloat16, which it
    # multiplies as raw 16-bit integers: widened first, they give the products a
    # GPU's tensor cores give.
    if DOT_F32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    return tl.dot(a, b)


@triton.jit
def _tile_mask(offs_m, offs_n, N, M, CAUSAL: tl.constexpr):
    # True where query offs_m may attend key offs_n, (BLOCK_M, BLOCK_N)
    allowed = (offs_m[:, None] < N) & (offs_n[None, :] < M)
    if CAUSAL:  # the triangle aligned to the lower right
        allowed = allowed & (offs_n[None, :] <= offs_m[:, None] + (M - N))
    return allowed


@triton.jit
def _row_stats(LSE, DELTA, bh, offs_m, N):
    # L in base 2 (0 for a row with no key, whose P is 0 anyway) and delta
    lse = tl.load(LSE + bh * N + offs_m, mask=offs_m < N, other=0.0)  # (BLOCK_M,)
    lse_2 = tl.where(lse == float("-inf"), 0.0, lse * 1.4426950408889634)
    return lse_2, tl.load(DELTA + bh * N + offs_m, mask=offs_m < N, other=0.0)


@triton.jit
def _attn_fwd(
    Q, K, V, O, LSE,  # Q, O: (BH, N, d); K, V: (BH, M, d); LSE: (BH, N) float32
    stride_qb, stride_qn, stride_kb, stride_kn,  # O shares Q's strides, V K's
    N, M, qk_scale,  # qk_scale = scale * log2(e)
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, DOT_F32: tl.constexpr,
):
    start_m, bh = tl.program_id(0), tl.program_id(1)  # a query tile of one head
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q_rows = bh * stride_qb + offs_m[:, None] * stride_qn + offs_d[None, :]
    q = tl.load(Q + q_rows, mask=offs_m[:, None] < N, other=0.0)  # (BLOCK_M, d)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running maximum
    l_i = tl.zeros([BLOCK_M], tl.float32)  # running sum of exp2(s - m_i)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)  # unnormalised output
    hi = M
    if CAUSAL:  # key tiles wholly right of this tile's last allowed key are skipped
        hi = tl.minimum(M, tl.maximum(0, (start_m + 1) * BLOCK_M + M - N))
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_rows = bh * stride_kb + offs_n[:, None] * stride_kn + offs_d[None, :]
        k = tl.load(K + kv_rows, mask=offs_n[:, None] < M, other=0.0)  # (BLOCK_N, d)
        v = tl.load(V + kv_rows, mask=offs_n[:, None] < M, other=0.0)  # (BLOCK_N, d)
        allowed = _tile_mask(offs_m, offs_n, N, M, CAUSAL)
        m_i, l_i, acc = online_softmax_tile(q, k, v, allowed, m_i, l_i, acc,
                                            qk_scale, DOT_F32)
    has_keys = l_i > 0.0
    l_safe = tl.where(has_keys, l_i, 1.0)
    out = acc / l_safe[:, None]  # divide once, at the end (FlashAttention-2)
    lse = (m_i + tl.math.log2(l_safe)) / 1.4426950408889634  # natural log
    tl.store(O + q_rows, out.to(O.dtype.element_ty), mask=offs_m[:, None] < N)
    tl.store(LSE + bh * N + offs_m, tl.where(has_keys, lse, float("-inf")),
             mask=offs_m < N)


@triton.jit
def _attn_bwd_dkdv(
    Q, K, V, DO, DK, DV, LSE, DELTA,  # DO shares Q's strides; DK, DV K's
    stride_qb, stride_qn, stride_kb, stride_kn,
    N, M, qk_scale, scale,
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, DOT_F32: tl.constexpr,
):
    start_n, bh = tl.program_id(0), tl.program_id(1)  # a key tile of one head
    offs_n = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    kv_rows = bh * stride_kb + offs_n[:, None] * stride_kn + offs_d[None, :]
    k = tl.load(K + kv_rows, mask=offs_n[:, None] < M, other=0.0)  # (BLOCK_N, d)
    v = tl.load(V + kv_rows, mask=offs_n[:, None] < M, other=0.0)  # (BLOCK_N, d)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    lo = 0
    if CAUSAL:  # query tiles above the first query that sees key start_n add nothing
        lo = tl.maximum(0, start_n * BLOCK_N - (M - N)) // BLOCK_M * BLOCK_M
    for start_m in range(lo, N, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q_rows = bh * stride_qb + offs_m[:, None] * stride_qn + offs_d[None, :]
        q = tl.load(Q + q_rows, mask=offs_m[:, None] < N, other=0.0)  # (BLOCK_M, d)
        do = tl.load(DO + q_rows, mask=offs_m[:, None] < N, other=0.0)  # (BLOCK_M, d)
        lse_2, delta = _row_stats(LSE, DELTA, bh, offs_m, N)
        allowed = _tile_mask(offs_m, offs_n, N, M, CAUSAL)
        p, ds = softmax_grad_tile(q, k, v, do, lse_2, delta, allowed, qk_scale,
                                  DOT_F32)
        dv += _dot(tl.trans(p.to(do.dtype)), do, DOT_F32)  # dV = P^T dO
        dk += _dot(tl.trans(ds.to(q.dtype)), q, DOT_F32)  # dK = dS^T Q, scaled below
    kv_ok = offs_n[:, None] < M
    tl.store(DK + kv_rows, (dk * scale).to(DK.dtype.element_ty), mask=kv_ok)
    tl.store(DV + kv_rows, dv.to(DV.dtype.element_ty), mask=kv_ok)


@triton.jit
def _attn_bwd_dq(
    Q, K, V, DO, DQ, LSE, DELTA,  # DO, DQ share Q's strides
    stride_qb, stride_qn, stride_kb, stride_kn,
    N, M, qk_scale, scale,
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, DOT_F32: tl.constexpr,
):
    start_m, bh = tl.program_id(0), tl.program_id(1)  # a query tile of one head
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q_rows = bh * stride_qb + offs_m[:, None] * stride_qn + offs_d[None, :]
    q = tl.load(Q + q_rows, mask=offs_m[:, None] < N, other=0.0)  # (BLOCK_M, d)
    do = tl.load(DO + q_rows, mask=offs_m[:, None] < N, other=0.0)  # (BLOCK_M, d)
    lse_2, delta = _row_stats(LSE, DELTA, bh, offs_m, N)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    hi = M
    if CAUSAL:
        hi = tl.minimum(M, tl.maximum(0, (start_m + 1) * BLOCK_M + M - N))
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_rows = bh * stride_kb + offs_n[:, None] * stride_kn + offs_d[None, :]
        k = tl.load(K + kv_rows, mask=offs_n[:, None] < M, other=0.0)  # (BLOCK_N, d)
        v = tl.load(V + kv_rows, mask=offs_n[:, None] < M, other=0.0)  # (BLOCK_N, d)
        allowed = _tile_mask(offs_m, offs_n, N, M, CAUSAL)
        _, ds = softmax_grad_tile(q, k, v, do, lse_2, delta, allowed, qk_scale,
                                  DOT_F32)
        dq += _dot(ds.to(k.dtype), k, DOT_F32)  # dQ = dS K, scaled below
    tl.store(DQ + q_rows, (dq * scale).to(DQ.dtype.element_ty),
             mask=offs_m[:, None] < N)
# --8<-- [end:kernels]


# --8<-- [start:face]
def _launch_settings(d: int, dtype, causal: bool, block_m, block_n, cap=None) -> dict:
    """The kernels' compile-time settings: the caller's tiles or ones a GPU likes."""
    bm, bn = block_m or 128, block_n or (64 if d <= 64 else 32)
    if cap is not None:  # the backward holds more tiles at once: smaller ones
        bm, bn = min(bm, cap), min(bn, cap)
    dot_f32 = dtype == torch.float32 or (INTERPRETED and dtype == torch.bfloat16)
    return dict(CAUSAL=causal, HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, DOT_F32=dot_f32,
                num_warps=4 if d <= 64 else 8, num_stages=3 if d <= 64 else 2)


def _flash_forward(q, k, v, causal, scale, block_m, block_n):
    """Launch the forward on (BH, N, d) and (BH, M, d) tensors: (out, L)."""
    (BH, N, d), M = q.shape, k.shape[1]
    out = torch.empty_like(q)  # (BH, N, d)
    lse = torch.empty(BH, N, dtype=torch.float32, device=q.device)  # (BH, N)
    tiles = _launch_settings(d, q.dtype, causal, block_m, block_n)
    grid = (triton.cdiv(N, tiles["BLOCK_M"]), BH)  # one program per query tile
    _attn_fwd[grid](q, k, v, out, lse, q.stride(0), q.stride(1), k.stride(0),
                    k.stride(1), N, M, scale * LOG2E, **tiles)
    return out, lse


def _flash_backward(q, k, v, out, lse, do, causal, scale, block_m, block_n):
    """Launch the two backward kernels on (BH, length, d) tensors: dq, dk, dv."""
    (BH, N, d), M = q.shape, k.shape[1]
    tiles = _launch_settings(d, q.dtype, causal, block_m, block_n, cap=64)
    delta = (out.float() * do.float()).sum(-1)  # (BH, N): rowsum(dO * O)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    args = (lse, delta, q.stride(0), q.stride(1), k.stride(0), k.stride(1),
            N, M, scale * LOG2E, scale)
    # dK, dV per key tile and dQ per query tile: no two programs write one row
    _attn_bwd_dkdv[(triton.cdiv(M, tiles["BLOCK_N"]), BH)](q, k, v, do, dk, dv,
                                                           *args, **tiles)
    _attn_bwd_dq[(triton.cdiv(N, tiles["BLOCK_M"]), BH)](q, k, v, do, dq, *args,
                                                         **tiles)
    return dq, dk, dv


class FlashAttention(torch.autograd.Function):
    """Autograd for the kernels: saves q, k, v, the output and L, never P."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, block_m, block_n):
        _check_flash(q, k, v, scale, block_m, block_n)
        causal = bool(causal)
        scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
        # (B, H, length, d) -> (BH, length, d); a 3-D input is already that
        q3, k3, v3 = (t.contiguous().flatten(0, -3) for t in (q, k, v))
        out, lse = _flash_forward(q3, k3, v3, causal, scale, block_m, block_n)
        ctx.save_for_backward(q3, k3, v3, out, lse)
        ctx.args = (causal, scale, block_m, block_n, q.shape, k.shape)
        out, lse = out.view(q.shape), lse.view(q.shape[:-1])  # (..., N, d), (..., N)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, d_out, _d_lse):
        causal, scale, block_m, block_n, q_shape, k_shape = ctx.args
        do = d_out.contiguous().flatten(0, -3)  # (BH, N, d)
        dq, dk, dv = _flash_backward(*ctx.saved_tensors, do, causal, scale,
                                     block_m, block_n)
        grads = dq.view(q_shape), dk.view(k_shape), dv.view(k_shape)
        return (*grads, None, None, None, None)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                    causal: bool = False, scale: float | None = None,
                    block_m: int | None = None, block_n: int | None = None,
                    ) -> torch.Tensor:
    """Exact attention, softmax(q k^T * scale) v, by the FlashAttention-2 kernels.

    Args:
        q: queries, float16, bfloat16 or float32 (whose products then run in
            IEEE float32, not TF32), on a CUDA device (or the CPU with
            ``TRITON_INTERPRET=1``).
        k: keys, same dtype and device.
        v: values, the shape of ``k``.
        causal: mask future keys, the triangle aligned to the lower right.
        scale: multiplies the scores; ``1 / sqrt(d)`` when None.
        block_m, block_n: query and key tile sizes (powers of two >= 16); the
            defaults suit a GPU, small tiles keep the interpreter quick.

    Returns:
        the output, the shape and dtype of ``q``; differentiable in q, k and v.

    Shape:
        q ``(B, H, N, d)``, k and v ``(B, H, M, d)``, or all three with
        ``B*H`` in one first dimension: ``(B*H, N, d)`` and ``(B*H, M, d)``;
        d is 16, 32, 64 or 128.
    """
    return FlashAttention.apply(q, k, v, causal, scale, block_m, block_n)[0]


def flash_attention_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                        causal: bool = False, scale: float | None = None,
                        block_m: int | None = None, block_n: int | None = None,
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """``flash_attention`` that also returns what the forward saves for the backward.

    Args:
        q, k, v, causal, scale, block_m, block_n: as ``flash_attention``.

    Returns:
        ``(out, lse)``: the output and, per query row, the natural log of the
        softmax normaliser, ``logsumexp_j(q_i . k_j * scale)`` over the allowed
        keys, in float32 (``-inf`` for a row with no allowed key).

    Shape:
        out ``(B, H, N, d)`` and lse ``(B, H, N)``, or ``(B*H, N, d)`` and
        ``(B*H, N)`` for 3-D inputs.
    """
    return FlashAttention.apply(q, k, v, causal, scale, block_m, block_n)


def _check_flash(q, k, v, scale, block_m, block_n) -> None:
    """Refuse what the kernels would get wrong, or crash on deep inside Triton."""
    sizes, lead = {}, ("B*H",) if getattr(q, "ndim", 0) == 3 else ("B", "H")
    for name, t, rows in (("q", q, "N"), ("k", k, "M"), ("v", v, "M")):
        dims, dtypes = (*lead, rows, "d"), _FLOATS if name == "q" else (q.dtype,)
        ok = torch.is_tensor(t) and t.dim() == len(dims) and t.dtype in dtypes
        got = f"{t.dtype} {tuple(t.shape)} on {t.device}" if torch.is_tensor(t) else t
        if not ok or t.device != q.device or any(
                sizes.setdefault(c, n) != n for c, n in zip(dims, t.shape)):
            want = f"({', '.join(dims)}) {' or '.join(map(str, dtypes))} on q's device"
            raise ValueError(f"{name} must be {want}, sizes {sizes}, got {got}")
    d, where = q.shape[-1], q.device.type
    if d not in (16, 32, 64, 128):  # the widths tl.dot's tiles take
        raise ValueError(f"q's head width d must be 16, 32, 64 or 128, got {d}")
    if where != "cuda" and not (where == "cpu" and INTERPRETED):
        raise ValueError(f"q must be on a CUDA device, got {q.device} (the CPU needs "
                         "TRITON_INTERPRET=1 set before this file is imported)")
    if scale is not None and not 0 < scale < math.inf:
        raise ValueError(f"scale must be None or finite and > 0, got {scale!r}")
    for name, b in (("block_m", block_m), ("block_n", block_n)):
        if b is not None and not (isinstance(b, int) and b >= 16 and b & (b - 1) == 0):
            raise ValueError(f"{name} must be a power of two >= 16 or None, got {b!r}")
# --8<-- [end:face]
