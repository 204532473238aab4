"""ALiBi: no position embedding at all, just a penalty that grows with distance.

Paper: Press, Smith and Lewis (2021), "Train Short, Test Long: Attention with
Linear Biases Enables Input Length Extrapolation", arXiv:2108.12409 (section 3:
the bias -m * (i - j) added to causal attention scores, one slope m per head,
the geometric sequence of slopes and its rule for a head count that is not a
power of 2).
Page: docs/attention/alibi.md
Tested against: torch.nn.functional.scaled_dot_product_attention given an
independently written bias, and the paper's slopes 1/2 ... 1/256 for 8 heads
(tests/test_alibi.py).

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["alibi_slopes", "alibi_bias", "alibi_attention"]


# --8<-- [start:slopes]
def geometric_slopes(n_heads: int) -> list[float]:
    """m_h = 2^(-8 h / H) for H a power of 2; else P's slopes, then half of 2P's."""

    def power_of_2(h: int) -> list[float]:
        return [2.0 ** (-8.0 * i / h) for i in range(1, h + 1)]  # 2^(-8/h) ... 2^(-8)

    p = 2 ** math.floor(math.log2(n_heads))  # P, the largest power of 2 <= H
    return power_of_2(p) + power_of_2(2 * p)[0::2][: n_heads - p]  # (H,)
# --8<-- [end:slopes]


# --8<-- [start:bias]
def linear_bias(slopes: Tensor, n: int, m: int, causal: bool = True) -> Tensor:
    """-m_h (i - j) for every head, query i and key j; -inf on future keys if causal."""
    # the N queries are the last N of the M positions (lower right, as with a cache)
    i = torch.arange(n, device=slopes.device).unsqueeze(-1) + (m - n)  # (N, 1)
    j = torch.arange(m, device=slopes.device)  # (M,)
    distance = (i - j).to(slopes.dtype)  # (N, M), > 0 for past keys
    distance = distance if causal else distance.abs()
    bias = -slopes.view(-1, 1, 1) * distance  # (H, 1, 1) * (N, M) -> (H, N, M)
    # -inf, not a large negative constant: exactly zero weight in every dtype
    return bias.masked_fill(distance < 0, float("-inf")) if causal else bias
# --8<-- [end:bias]


# --8<-- [start:attention]
def attention_with_linear_biases(
    q: Tensor, k: Tensor, v: Tensor, slopes: Tensor, causal: bool = True
) -> Tensor:
    """softmax(q k^T / sqrt(d) - m (i - j)) v, the bias given to SDPA as a mask."""
    # Built in the slopes' dtype (float32 by default), then cast: a distance of
    # thousands times a slope of 1/256 loses little even in float16.
    n, m = q.shape[-2], k.shape[-2]
    bias = linear_bias(slopes, n, m, causal).to(q.dtype)  # (H, N, M)
    # SDPA adds the float mask after the 1/sqrt(d) scaling
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)  # (B, H, N, d_v)
# --8<-- [end:attention]


# --8<-- [start:faces]
def alibi_slopes(
    n_heads: int, *, device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """One slope per head: 2^(-8/H), 2^(-16/H), ..., 2^(-8) for H a power of 2.

    For other H, the paper takes the slopes of the nearest power of 2 below,
    ``P = 2^floor(log2 H)``, and adds every other slope of ``2P`` heads (the odd
    positions 1st, 3rd, ...) until there are H of them.

    Args:
        n_heads: H >= 1.
        device: where to build the slopes.
        dtype: their dtype.

    Returns:
        ``(H,)``, each slope in (0, 1).
    """
    _check_slopes_call(n_heads, dtype)
    return torch.tensor(geometric_slopes(n_heads), device=device, dtype=dtype)


def alibi_bias(
    slopes: Tensor, n_queries: int, n_keys: int, *, causal: bool = True
) -> Tensor:
    """The float mask -m * (i - j) per head, with -inf on future keys when causal.

    The N queries are the last N of the M positions (lower-right alignment, as
    with a KV cache), so the distance from query ``i`` to key ``j`` is
    ``i + (M - N) - j``.

    Args:
        slopes: ``(H,)`` from ``alibi_slopes``.
        n_queries: N.
        n_keys: M.
        causal: put -inf on keys after the query (the paper's setting). With
            ``causal=False`` the penalty is -m * |i - j|, a symmetric variant
            for encoders that the paper does not study.

    Returns:
        ``(H, N, M)`` in the slopes' dtype, to be added to the scores.
    """
    _check_alibi(causal, slopes=(slopes, "H", None), n_queries=(n_queries, "N", int),
                 n_keys=(n_keys, "M", int))
    return linear_bias(slopes, n_queries, n_keys, causal)


def alibi_attention(
    q: Tensor, k: Tensor, v: Tensor, slopes: Tensor, *, causal: bool = True
) -> Tensor:
    """softmax(q k^T / sqrt(d) - m (i - j)) v on F.scaled_dot_product_attention.

    No position embedding is added to the inputs: the bias is the only place
    where position enters.

    Args:
        q: queries, ``(B, H, N, d)``.
        k: keys, ``(B, H, M, d)``.
        v: values, ``(B, H, M, d_v)``.
        slopes: ``(H,)``, one per head (moved to q's device).
        causal: see ``alibi_bias``.

    Returns:
        ``(B, H, N, d_v)``.
    """
    _check_alibi(causal, q=(q, "BHNd", None), k=(k, "BHMd", q),
                 v=(v, ("B", "H", "M", "d_v"), q), slopes=(slopes, "H", None))
    return attention_with_linear_biases(q, k, v, slopes.to(q.device), causal)
# --8<-- [end:faces]


# --8<-- [start:validate]
def _check_heads_arg(ok: bool, name: str, got: object, want: str) -> None:
    """Raise a ValueError naming the argument, what it must be and what it got."""
    if not ok:
        raise ValueError(f"{name} must be {want}, got {got}")


def _check_slopes_call(n_heads: int, dtype: torch.dtype) -> None:
    """Refuse a head count that is not an int > 0 and a dtype that is not floating."""
    _check_heads_arg(isinstance(n_heads, int) and n_heads > 0, "n_heads", n_heads,
                     "an int > 0")
    ok = isinstance(dtype, torch.dtype) and dtype.is_floating_point
    _check_heads_arg(ok, "dtype", dtype, "a floating torch.dtype")


def _check_alibi(causal: bool, **named: tuple) -> None:
    """Refuse name=(t, dims, like) unless t is a floating tensor of shape dims, each
    letter one size across the arguments, with like's dtype and device (None: any);
    like=int marks a size, an int >= 0. A causal call needs M >= N."""
    sizes = {}
    for name, (t, dims, like) in named.items():
        size, tensor = like is int, isinstance(t, Tensor)
        shown = ", ".join(str(sizes.get(c, c)) for c in dims)
        late = causal and "M" in shown  # the first M: the N queries are its last N
        ok = isinstance(t, int) and t >= 0 if size else tensor and t.is_floating_point()
        shape = (t,) if size else tuple(t.shape) if tensor else ()
        ok = ok and len(shape) == len(dims) and all(
            sizes.setdefault(c, s) == s for c, s in zip(dims, shape))
        peer = f" of {like.dtype} on {like.device}" if isinstance(like, Tensor) else ""
        ok = ok and (not peer or (t.dtype, t.device) == (like.dtype, like.device))
        ok = ok and not (late and sizes["M"] < sizes["N"])
        got = f"{t.dtype} {shape} on {t.device}" if tensor else t
        want = "an int >= 0" if size else f"a floating tensor ({shown}){peer}"
        causal_note = f", M >= N = {sizes['N']} when causal" if late else ""
        _check_heads_arg(ok, name, got, want + causal_note)
# --8<-- [end:validate]
