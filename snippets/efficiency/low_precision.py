"""Is the kernel right? Tolerances in ulps and baselines, and FP8 attention.

A low-precision kernel is judged against a float64 reference computed from the
same rounded inputs, in units of a trusted implementation's own error at that
precision: FlashAttention's tests accept an output whose largest error is at
most twice PyTorch's (Dao-AILab/flash-attention, tests/test_flash_attn.py).
``error_ratio`` is that number; ``ulp`` is the spacing of a dtype's numbers, the
unit in which a rounding error is counted.

FP8 attention (FlashAttention-3: Shah, Bikshandi, Zhang, Thakkar, Ramani and
Dao, 2024, arXiv:2407.08608) casts q, k and v to ``float8_e4m3fn`` after a
scale per tensor or per block of tokens, and rotates q and k by one random
orthogonal matrix (a Hadamard matrix with random signs) first: the scores do
not change, and an outlier channel is spread over all channels before it is
rounded. The matrix products then accumulate in float32.

Page: docs/efficiency/tolerances.md
Tested against: bit patterns (the next representable number), float64
attention and PyTorch's SDPA at the same precision (tests/test_low_precision.py).

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["ulp", "error_ratio", "fp8_quantize", "hadamard", "fp8_attention"]

E4M3 = torch.float8_e4m3fn


# --8<-- [start:ulp]
def ulp_of(x, dtype):
    """Spacing of dtype's numbers at |x|: eps 2^floor(log2 |x|), flat below tiny."""
    fi = torch.finfo(dtype)
    exponent = torch.floor(torch.log2(x.double().abs().clamp_min(fi.tiny)))
    return fi.eps * torch.exp2(exponent)  # subnormals: eps * tiny, the smallest step
# --8<-- [end:ulp]


# --8<-- [start:ratio]
def ratio_to_baseline(out, baseline, exact):
    """rho = max |out - exact| / max |baseline - exact|, in float64."""
    exact = exact.double()
    ours = (out.double() - exact).abs().max()  # the kernel's worst error
    theirs = (baseline.double() - exact).abs().max()  # the trusted one's, same inputs
    return (ours / theirs.clamp_min(torch.finfo(torch.float64).tiny)).item()
# --8<-- [end:ratio]


# --8<-- [start:fp8]
def fp8_blocks(x, block):
    """Cast to E4M3 with one scale per block of tokens (all of them: block = T)."""
    t = x.shape[-2]  # (..., T, d) -> (..., T / block, block, d)
    blocks = x.float().unflatten(-2, (t // block, block))
    amax = blocks.abs().amax(dim=(-2, -1), keepdim=True)  # one amax per block
    scale = 448.0 / amax.clamp_min(torch.finfo(torch.float32).tiny)  # amax -> 448
    rounded = (blocks * scale).to(E4M3).float() / scale  # what the kernel multiplies
    return rounded.flatten(-3, -2)  # (..., T, d), float32
# --8<-- [end:fp8]


# --8<-- [start:hadamard]
def sylvester(n, dtype):
    """The n x n Hadamard matrix H_2n = [[H, H], [H, -H]], scaled to be orthogonal."""
    h = torch.ones(1, 1, dtype=dtype)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h / math.sqrt(n)  # H H^T = I
# --8<-- [end:hadamard]


# --8<-- [start:fp8_attention]
def quantized_attention(q, k, v, rotation, block, causal):
    """Attention on FP8 copies of q R, k R and v: (q R)(k R)^T = q k^T exactly."""
    q, k = q @ rotation, k @ rotation  # (B, H, N, d) @ (d, d): one R for both
    q8, k8, v8 = (fp8_blocks(t, block) for t in (q, k, v))  # float32 again
    return F.scaled_dot_product_attention(q8, k8, v8, is_causal=causal)
# --8<-- [end:fp8_attention]


# --8<-- [start:face]
def ulp(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The unit in the last place of ``dtype`` at each entry of ``x``.

    Args:
        x: any real tensor; its magnitude picks the binade.
        dtype: a floating dtype (``torch.bfloat16``, ``torch.float8_e4m3fn``...).

    Returns:
        float64 tensor of ``x``'s shape: the gap from ``|x|`` rounded into
        ``dtype`` to the next larger number of ``dtype`` (below the smallest
        normal number, the subnormal step ``eps * tiny``).
    """
    _check_low(x=x)  # torch.finfo refuses a dtype that is not floating
    return ulp_of(x, dtype)


def error_ratio(
    out: torch.Tensor, baseline: torch.Tensor, exact: torch.Tensor
) -> float:
    """A kernel's largest error in units of a trusted implementation's.

    Args:
        out: the kernel's output at low precision.
        baseline: a trusted implementation's output on the same rounded inputs,
            at the same precision (PyTorch's SDPA, say).
        exact: the float64 reference on the same rounded inputs.

    Returns:
        ``max |out - exact| / max |baseline - exact|``; FlashAttention's tests
        accept at most 2.
    """
    _check_low(exact=exact, out=out, baseline=baseline)
    return ratio_to_baseline(out, baseline, exact)


def fp8_quantize(x: torch.Tensor, *, block: int | None = None) -> torch.Tensor:
    """Round ``x`` through ``float8_e4m3fn`` with per-tensor or per-block scales.

    Args:
        x: ``(..., T, d)`` floating tensor.
        block: tokens per scale; ``None`` scales each ``(T, d)`` matrix once.
            Must divide T.

    Returns:
        float32 tensor of ``x``'s shape: the values an FP8 kernel multiplies.
        Each block's largest magnitude maps to 448, E4M3's largest number.
    """
    _check_low(2, x=x)
    t = x.shape[-2]
    block = t if block is None else block
    ok = isinstance(block, int) and not isinstance(block, bool) and block >= 1
    want = f"be None or an int >= 1 dividing T = {t}"
    _check_given(ok and t % block == 0, "block", want, repr(block))
    return fp8_blocks(x, block)


def hadamard(n: int, *, signs: torch.Tensor | None = None,
             dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """An orthogonal ``(n, n)`` Hadamard matrix, rows optionally sign-flipped.

    Args:
        n: a power of two.
        signs: optional ``(n,)`` tensor of +-1: ``diag(signs) @ H``, the random
            rotation FlashAttention-3 uses.
        dtype: floating dtype of the result.

    Returns:
        ``(n, n)`` tensor R with ``R R^T = I``.
    """
    ok = isinstance(n, int) and not isinstance(n, bool) and n >= 1 and n & (n - 1) == 0
    _check_given(ok, "n", "be a power of two >= 1", repr(n))
    h = sylvester(n, dtype)
    if signs is None:
        return h
    ok = isinstance(signs, torch.Tensor) and signs.shape == (n,)
    ok = ok and bool((signs.abs() == 1).all())
    _check_given(ok, "signs", f"be a ({n},) tensor of +-1", _describe(signs))
    return signs.to(dtype).unsqueeze(-1) * h


def fp8_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, block: int | None = None,
    rotation: torch.Tensor | None = None, is_causal: bool = False,
) -> torch.Tensor:
    """Softmax attention computed on FP8 copies of its inputs.

    Args:
        q, k, v: ``(B, H, N, d)`` floating tensors, one N and d for all three.
        block: tokens per FP8 scale (dividing N); ``None``: one scale per head.
        rotation: optional orthogonal ``(d, d)`` matrix applied to q and k
            before they are rounded (``hadamard(d, signs=...)``).
        is_causal: the causal mask.

    Returns:
        ``(B, H, N, d)`` in q's dtype.
    """
    _check_low(4, q=q, k=k, v=v)
    d, n = q.shape[-1], q.shape[-2]
    rotation = torch.eye(d) if rotation is None else rotation
    ok = isinstance(rotation, torch.Tensor) and rotation.shape == (d, d)
    _check_given(ok, "rotation", f"be None or a ({d}, {d}) tensor", _describe(rotation))
    block = n if block is None else block
    ok = isinstance(block, int) and not isinstance(block, bool) and block >= 1
    want = f"be None or an int >= 1 dividing N = {n}"
    _check_given(ok and n % block == 0, "block", want, repr(block))
    rotation = rotation.float().to(q.device)
    out = quantized_attention(q.float(), k.float(), v.float(), rotation, block,
                              bool(is_causal))
    return out.to(q.dtype)
# --8<-- [end:face]


# --8<-- [start:validate]
def _describe(t: object) -> str:
    if isinstance(t, torch.Tensor):
        return f"{t.dtype} {tuple(t.shape)} on {t.device}"
    return type(t).__name__


def _check_given(ok: object, name: str, want: str, got: object, error=ValueError):
    """Raise error("<name> must <want>, got <got>") unless ok."""
    if not ok:
        raise error(f"{name} must {want}, got {got}")


def _check_low(rank=0, **named) -> None:
    """Refuse a non-floating tensor, one of under rank dims, or one unlike the first."""
    like = next(iter(named.values()))
    for name, t in named.items():
        ok = isinstance(t, torch.Tensor) and t.is_floating_point()
        _check_given(ok, name, "be a floating tensor", _describe(t), TypeError)
        ok = t is like or (t.shape, t.device) == (like.shape, like.device)
        want = f"have >= {rank} dims" if t is like else f"match {_describe(like)}"
        _check_given(ok and t.dim() >= rank, name, want, _describe(t))


# --8<-- [end:validate]
