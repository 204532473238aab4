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
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")
LOG2E = 1.4426950408889634  # exp(x) = exp2(x * log2(e)): exp2 is the cheaper instruction


@triton.jit
def _dot(a, b, DOT_F32: tl.constexpr):
    # Matrix product with float32 accumulation. DOT_F32 is set for float32 inputs,
    # whose products then use IEEE float32 ("ieee"), not TF32's 10-bit mantissa,
    # and under Triton 3.9's interpreter for bfloat16, which it multiplies as raw
    # 16-bit integers: widened first, they give the products a GPU's tensor cores give.
    if DOT_F32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    return tl.dot(a, b)


# --8<-- [start:forward]
@triton.jit
def _attn_fwd(
    Q, K, V, O, LSE,  # Q, O: (BH, N, d); K, V: (BH, M, d); LSE: (BH, N) float32
    stride_qb, stride_qn, stride_kb, stride_kn, stride_vb, stride_vn, stride_ob, stride_on,
    N, M, qk_scale,  # qk_scale = scale * log2(e)
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    start_m = tl.program_id(0)  # one program per tile of BLOCK_M queries ...
    bh = tl.program_id(1)  # ... of one (batch, head)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + bh * stride_qb + offs_m[:, None] * stride_qn + offs_d[None, :],
                mask=offs_m[:, None] < N, other=0.0)  # (BLOCK_M, d), read once, kept on chip

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running row maximum (base-2 units)
    l_i = tl.zeros([BLOCK_M], tl.float32)  # running sum of exp2(s - m_i)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)  # unnormalised output
    hi = M
    if CAUSAL:  # key tiles wholly right of this tile's last allowed key are skipped
        hi = tl.minimum(M, tl.maximum(0, (start_m + 1) * BLOCK_M + M - N))
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kt = tl.load(K + bh * stride_kb + offs_n[None, :] * stride_kn + offs_d[:, None],
                     mask=offs_n[None, :] < M, other=0.0)  # (d, BLOCK_N): k transposed
        v = tl.load(V + bh * stride_vb + offs_n[:, None] * stride_vn + offs_d[None, :],
                    mask=offs_n[:, None] < M, other=0.0)  # (BLOCK_N, d)
        s = _dot(q, kt, DOT_F32) * qk_scale  # (BLOCK_M, d) @ (d, BLOCK_N) -> (BLOCK_M, BLOCK_N), fp32
        allowed = offs_n[None, :] < M
        if CAUSAL:
            allowed = allowed & (offs_n[None, :] <= offs_m[:, None] + (M - N))  # lower right
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet stays at 0
        p = tl.math.exp2(s - m_safe[:, None])  # (BLOCK_M, BLOCK_N)
        alpha = tl.math.exp2(m_i - m_safe)  # rescales what was summed against the old maximum
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, DOT_F32)  # (BLOCK_M, BLOCK_N) @ (BLOCK_N, d)
        m_i = m_new

    has_keys = l_i > 0.0
    l_safe = tl.where(has_keys, l_i, 1.0)
    out = acc / l_safe[:, None]  # divide once, at the end (FlashAttention-2)
    lse = tl.where(has_keys, (m_i + tl.math.log2(l_safe)) / 1.4426950408889634, float("-inf"))
    tl.store(O + bh * stride_ob + offs_m[:, None] * stride_on + offs_d[None, :],
             out.to(O.dtype.element_ty), mask=offs_m[:, None] < N)
    tl.store(LSE + bh * N + offs_m, lse, mask=offs_m < N)  # natural log of each row's normaliser
# --8<-- [end:forward]


# --8<-- [start:backward]
@triton.jit
def _attn_bwd_delta(O, DO, DELTA, stride_ob, stride_on, N,
                    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    # delta_i = sum_j P_ij dP_ij = rowsum(dO * O): one number per query row
    start_m, bh = tl.program_id(0), tl.program_id(1)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    ptr = bh * stride_ob + offs_m[:, None] * stride_on + offs_d[None, :]
    o = tl.load(O + ptr, mask=offs_m[:, None] < N, other=0.0).to(tl.float32)
    do = tl.load(DO + ptr, mask=offs_m[:, None] < N, other=0.0).to(tl.float32)
    tl.store(DELTA + bh * N + offs_m, tl.sum(o * do, 1), mask=offs_m < N)


@triton.jit
def _attn_probs(q, kt, lse_2, offs_m, offs_n, N, M, qk_scale, CAUSAL: tl.constexpr, DOT_F32: tl.constexpr):
    # Recompute one tile of probabilities from the saved log-sum-exp: P = exp(S - lse)
    s = _dot(q, kt, DOT_F32) * qk_scale  # (BLOCK_M, BLOCK_N), base-2 units
    allowed = (offs_m[:, None] < N) & (offs_n[None, :] < M)
    if CAUSAL:
        allowed = allowed & (offs_n[None, :] <= offs_m[:, None] + (M - N))
    s = tl.where(allowed, s, float("-inf"))
    return tl.math.exp2(s - lse_2[:, None])


@triton.jit
def _attn_bwd_dkdv(
    Q, K, V, DO, DK, DV, LSE, DELTA,  # all (BH, length, d) with the same strides as Q/K
    stride_qb, stride_qn, stride_kb, stride_kn,
    N, M, qk_scale, scale,
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    start_n, bh = tl.program_id(0), tl.program_id(1)  # one program per tile of keys
    offs_n = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    kv_ptr = bh * stride_kb + offs_n[:, None] * stride_kn + offs_d[None, :]
    k = tl.load(K + kv_ptr, mask=offs_n[:, None] < M, other=0.0)  # (BLOCK_N, d)
    v = tl.load(V + kv_ptr, mask=offs_n[:, None] < M, other=0.0)  # (BLOCK_N, d)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    lo = 0
    if CAUSAL:  # queries above the first one that sees key start_n contribute nothing
        lo = tl.maximum(0, start_n * BLOCK_N - (M - N)) // BLOCK_M * BLOCK_M
    for start_m in range(lo, N, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q_ptr = bh * stride_qb + offs_m[:, None] * stride_qn + offs_d[None, :]
        q = tl.load(Q + q_ptr, mask=offs_m[:, None] < N, other=0.0)  # (BLOCK_M, d)
        do = tl.load(DO + q_ptr, mask=offs_m[:, None] < N, other=0.0)  # (BLOCK_M, d)
        lse = tl.load(LSE + bh * N + offs_m, mask=offs_m < N, other=0.0)
        lse_2 = tl.where(lse == float("-inf"), 0.0, lse * 1.4426950408889634)  # empty rows: P = 0 anyway
        delta = tl.load(DELTA + bh * N + offs_m, mask=offs_m < N, other=0.0)
        p = _attn_probs(q, tl.trans(k), lse_2, offs_m, offs_n, N, M, qk_scale, CAUSAL, DOT_F32)  # (BLOCK_M, BLOCK_N)
        dv += _dot(tl.trans(p.to(do.dtype)), do, DOT_F32)  # dV = P^T dO
        dp = _dot(do, tl.trans(v), DOT_F32)  # dP = dO V^T, (BLOCK_M, BLOCK_N)
        ds = p * (dp - delta[:, None])  # dS = P * (dP - delta): the softmax's Jacobian
        dk += _dot(tl.trans(ds.to(q.dtype)), q, DOT_F32)  # dK = dS^T Q (times the scale, below)
    tl.store(DK + kv_ptr, (dk * scale).to(DK.dtype.element_ty), mask=offs_n[:, None] < M)
    tl.store(DV + kv_ptr, dv.to(DV.dtype.element_ty), mask=offs_n[:, None] < M)


@triton.jit
def _attn_bwd_dq(
    Q, K, V, DO, DQ, LSE, DELTA,
    stride_qb, stride_qn, stride_kb, stride_kn,
    N, M, qk_scale, scale,
    CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT_F32: tl.constexpr,
):
    start_m, bh = tl.program_id(0), tl.program_id(1)  # one program per tile of queries
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q_ptr = bh * stride_qb + offs_m[:, None] * stride_qn + offs_d[None, :]
    q = tl.load(Q + q_ptr, mask=offs_m[:, None] < N, other=0.0)
    do = tl.load(DO + q_ptr, mask=offs_m[:, None] < N, other=0.0)
    lse = tl.load(LSE + bh * N + offs_m, mask=offs_m < N, other=0.0)
    lse_2 = tl.where(lse == float("-inf"), 0.0, lse * 1.4426950408889634)
    delta = tl.load(DELTA + bh * N + offs_m, mask=offs_m < N, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    hi = M
    if CAUSAL:
        hi = tl.minimum(M, tl.maximum(0, (start_m + 1) * BLOCK_M + M - N))
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_ptr = bh * stride_kb + offs_n[:, None] * stride_kn + offs_d[None, :]
        k = tl.load(K + kv_ptr, mask=offs_n[:, None] < M, other=0.0)
        v = tl.load(V + kv_ptr, mask=offs_n[:, None] < M, other=0.0)
        p = _attn_probs(q, tl.trans(k), lse_2, offs_m, offs_n, N, M, qk_scale, CAUSAL, DOT_F32)
        dp = _dot(do, tl.trans(v), DOT_F32)
        ds = p * (dp - delta[:, None])
        dq += _dot(ds.to(k.dtype), k, DOT_F32)  # dQ = dS K (times the scale, below)
    tl.store(DQ + q_ptr, (dq * scale).to(DQ.dtype.element_ty), mask=offs_m[:, None] < N)
# --8<-- [end:backward]


def _check_inputs(q, k, v, causal, scale, block_m, block_n) -> float:
    """Raise a clear error unless the arguments suit the kernels; return the scale to use."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() not in (3, 4) or t.dim() != q.dim():
            raise ValueError(f"{name} must have shape (B, H, length, d), or (B*H, length, d) "
                             f"like q, got {tuple(t.shape)}")
        if t.dtype not in (torch.float16, torch.bfloat16, torch.float32):
            raise TypeError(f"{name} must be float16, bfloat16 or float32, got {t.dtype}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    if k.shape != v.shape or k.shape[:-2] != q.shape[:-2] or k.shape[-1] != q.shape[-1]:
        raise ValueError(
            f"q must be (B, H, N, d) and k, v (B, H, M, d) with the same B, H and d, "
            f"got q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
    d = q.shape[-1]
    if d not in (16, 32, 64, 128):
        raise ValueError(f"the head width d must be 16, 32, 64 or 128, got d={d}")
    if q.shape[-2] == 0 or k.shape[-2] == 0:
        raise ValueError(f"N and M must be at least 1, got N={q.shape[-2]} and M={k.shape[-2]}")
    if k.device != q.device or v.device != q.device:
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device} and {v.device}")
    if q.device.type == "cpu" and not INTERPRETED:
        raise ValueError(
            "q is on the CPU, where Triton runs kernels only through its interpreter: set "
            "TRITON_INTERPRET=1 before this file is imported, or pass CUDA tensors"
        )
    if q.device.type not in ("cpu", "cuda"):
        raise ValueError(f"q must be on a CUDA device (or the CPU under the interpreter), got {q.device}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))
                              or not math.isfinite(scale) or scale <= 0):
        raise ValueError(f"scale must be a positive finite number or None, got {scale!r}")
    for name, b in (("block_m", block_m), ("block_n", block_n)):
        if b is not None and (isinstance(b, bool) or not isinstance(b, int) or b < 16 or b & (b - 1)):
            raise ValueError(f"{name} must be a power of two >= 16 or None, got {b!r}")
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)


def _blocks(d: int, block_m: int | None, block_n: int | None) -> tuple[int, int, int, int]:
    """Tile sizes and launch settings: the values a GPU likes, or the caller's."""
    bm = block_m or 128
    bn = block_n or (64 if d <= 64 else 32)
    return bm, bn, (4 if d <= 64 else 8), (3 if d <= 64 else 2)


# --8<-- [start:function]
class FlashAttention(torch.autograd.Function):
    """Autograd for the kernels: the forward saves q, k, v, the output and the
    log-sum-exp (never the probabilities); the backward recomputes them."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, block_m, block_n):
        scale = _check_inputs(q, k, v, causal, scale, block_m, block_n)  # None: 1 / sqrt(d)
        three_d = q.dim() == 3  # (B*H, length, d): one (batch, head) per row of programs
        if three_d:
            q, k, v = q[None], k[None], v[None]
        B, H, N, d = q.shape
        M = k.shape[2]
        q, k, v = (t.contiguous().view(B * H, -1, d) for t in (q, k, v))  # (B, H, len, d) -> (BH, len, d)
        o = torch.empty_like(q)  # (BH, N, d)
        lse = torch.empty(B * H, N, dtype=torch.float32, device=q.device)  # (BH, N)
        bm, bn, warps, stages = _blocks(d, block_m, block_n)
        dot_f32 = q.dtype == torch.float32 or (INTERPRETED and q.dtype == torch.bfloat16)
        grid = (triton.cdiv(N, bm), B * H)
        _attn_fwd[grid](q, k, v, o, lse, q.stride(0), q.stride(1), k.stride(0), k.stride(1),
                        v.stride(0), v.stride(1), o.stride(0), o.stride(1), N, M, scale * LOG2E,
                        CAUSAL=causal, HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, DOT_F32=dot_f32,
                        num_warps=warps, num_stages=stages)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.mark_non_differentiable(lse)
        ctx.args = (B, H, N, M, d, causal, scale, block_m, block_n, three_d)
        if three_d:
            return o.view(H, N, d), lse.view(H, N)
        return o.view(B, H, N, d), lse.view(B, H, N)

    @staticmethod
    def backward(ctx, do, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        B, H, N, M, d, causal, scale, block_m, block_n, three_d = ctx.args
        do = do.contiguous().view(B * H, N, d)  # (B, H, N, d) -> (BH, N, d)
        bm, bn, warps, stages = _blocks(d, block_m, block_n)
        # The backward's tiles are smaller: each program holds more tiles at once.
        bm, bn = min(bm, 64), min(bn, 64)
        dot_f32 = q.dtype == torch.float32 or (INTERPRETED and q.dtype == torch.bfloat16)
        delta = torch.empty_like(lse)  # (BH, N)
        _attn_bwd_delta[(triton.cdiv(N, bm), B * H)](o, do, delta, o.stride(0), o.stride(1), N,
                                                      HEAD_DIM=d, BLOCK_M=bm)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        common = (q.stride(0), q.stride(1), k.stride(0), k.stride(1), N, M, scale * LOG2E, scale)
        _attn_bwd_dkdv[(triton.cdiv(M, bn), B * H)](q, k, v, do, dk, dv, lse, delta, *common,
                                                     CAUSAL=causal, HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, DOT_F32=dot_f32,
                                                     num_warps=warps, num_stages=stages)
        _attn_bwd_dq[(triton.cdiv(N, bm), B * H)](q, k, v, do, dq, lse, delta, *common,
                                                  CAUSAL=causal, HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, DOT_F32=dot_f32,
                                                  num_warps=warps, num_stages=stages)
        lead = (H,) if three_d else (B, H)
        return (dq.view(*lead, N, d), dk.view(*lead, M, d), dv.view(*lead, M, d),
                None, None, None, None)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                    scale: float | None = None, block_m: int | None = None,
                    block_n: int | None = None) -> torch.Tensor:
    """Exact attention, softmax(q k^T * scale) v, by the FlashAttention-2 kernels.

    Args:
        q: queries, ``(B, H, N, d)`` or ``(B*H, N, d)``, float16, bfloat16 or
            float32 (whose products then run in IEEE float32, not TF32), on a
            CUDA device (or the CPU with ``TRITON_INTERPRET=1``).
        k: keys, ``(B, H, M, d)``, same dtype and device.
        v: values, ``(B, H, M, d)``.
        causal: mask future keys, the triangle aligned to the lower right.
        scale: multiplies the scores; ``1 / sqrt(d)`` when None.
        block_m, block_n: query and key tile sizes (powers of two >= 16); the
            defaults suit a GPU, small tiles keep the interpreter quick.

    Returns:
        the shape and dtype of ``q``; differentiable in q, k and v.
    """
    scale = _check_inputs(q, k, v, causal, scale, block_m, block_n)  # None: 1 / sqrt(d)
    out, _ = FlashAttention.apply(q, k, v, causal, scale, block_m, block_n)
    return out
# --8<-- [end:function]


def flash_attention_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                        scale: float | None = None, block_m: int | None = None,
                        block_n: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``flash_attention`` that also returns what the forward saves for the backward.

    Returns:
        ``(out, lse)``: the output ``(B, H, N, d)`` and, per query row, the
        natural log of the softmax normaliser, ``logsumexp_j(q_i . k_j * scale)``
        over the allowed keys, ``(B, H, N)`` in float32 (``-inf`` for a row
        with no allowed key).
    """
    scale = _check_inputs(q, k, v, causal, scale, block_m, block_n)  # None: 1 / sqrt(d)
    return FlashAttention.apply(q, k, v, causal, scale, block_m, block_n)
