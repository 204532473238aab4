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

__all__ = ["alibi_slopes", "alibi_bias", "alibi_attention"]


# --8<-- [start:slopes]
def alibi_slopes(
    n_heads: int, *, device: torch.device | str | None = None, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
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
    if isinstance(n_heads, bool) or not isinstance(n_heads, int) or n_heads < 1:
        raise ValueError(f"n_heads must be an int >= 1, got {n_heads!r}")
    _check_float_dtype(dtype)

    def power_of_2(h: int) -> list[float]:
        return [2.0 ** (-8.0 * i / h) for i in range(1, h + 1)]

    p = 2 ** math.floor(math.log2(n_heads))
    slopes = power_of_2(p) + power_of_2(2 * p)[0::2][: n_heads - p]
    return torch.tensor(slopes, device=device, dtype=dtype)  # (H,)
# --8<-- [end:slopes]


# --8<-- [start:bias]
def alibi_bias(
    slopes: torch.Tensor, n_queries: int, n_keys: int, *, causal: bool = True
) -> torch.Tensor:
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
    if not isinstance(slopes, torch.Tensor) or slopes.dim() != 1 or not slopes.is_floating_point():
        raise ValueError(
            "slopes must be a 1-D floating tensor of shape (H,), got "
            f"{tuple(slopes.shape) if isinstance(slopes, torch.Tensor) else type(slopes).__name__}"
        )
    for name, value in (("n_queries", n_queries), ("n_keys", n_keys)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    if causal and n_queries > n_keys:
        raise ValueError(
            f"a causal bias needs n_queries <= n_keys (the queries are the last N of "
            f"the M positions), got n_queries={n_queries} and n_keys={n_keys}"
        )
    i = torch.arange(n_queries, device=slopes.device).unsqueeze(-1) + (n_keys - n_queries)  # (N, 1)
    j = torch.arange(n_keys, device=slopes.device)  # (M,)
    distance = (i - j).to(slopes.dtype)  # (N, 1) - (M,) -> (N, M), > 0 for past keys
    if not causal:
        distance = distance.abs()
    bias = -slopes.view(-1, 1, 1) * distance  # (H, 1, 1) * (N, M) -> (H, N, M)
    if causal:
        # -inf, not a large negative constant: exactly zero weight in every dtype.
        bias = bias.masked_fill(distance < 0, float("-inf"))  # (H, N, M)
    return bias
# --8<-- [end:bias]


# --8<-- [start:validate]
def _check_float_dtype(dtype: object) -> None:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")


def _check_alibi_inputs(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slopes: torch.Tensor
) -> None:
    """Raise a clear error unless q, k, v are (B, H, length, width) and slopes is (H,)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(
                f"{name} must be a 4-D tensor (B, H, length, width), got "
                f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}"
            )
        if not t.is_floating_point():
            raise TypeError(f"{name} must have a floating dtype, got {t.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(
            f"q, k and v must be on one device, got {q.device}, {k.device} and {v.device}"
        )
    if not (q.shape[:2] == k.shape[:2] == v.shape[:2]):
        raise ValueError(
            "q, k and v must share the batch size B and the head count H, got "
            f"q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same head width d, got q {tuple(q.shape)} and k {tuple(k.shape)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same length M, got k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
    if not isinstance(slopes, torch.Tensor) or not slopes.is_floating_point():
        got = slopes.dtype if isinstance(slopes, torch.Tensor) else type(slopes).__name__
        raise TypeError(f"slopes must be a floating torch.Tensor of shape (H,), got {got}")
    if slopes.shape != q.shape[1:2]:
        raise ValueError(f"slopes must have shape (H,) = ({q.shape[1]},), got {tuple(slopes.shape)}")
# --8<-- [end:validate]


# --8<-- [start:forward]
def alibi_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    slopes: torch.Tensor,
    *,
    causal: bool = True,
) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) - m (i - j)) v on F.scaled_dot_product_attention.

    No position embedding is added to the inputs: the bias is the only place
    where position enters.

    Args:
        q: queries, ``(B, H, N, d)``.
        k: keys, ``(B, H, M, d)``.
        v: values, ``(B, H, M, d_v)``.
        slopes: ``(H,)``, one per head.
        causal: see ``alibi_bias``.

    Returns:
        ``(B, H, N, d_v)``.
    """
    _check_alibi_inputs(q, k, v, slopes)
    b, h, n, d = q.shape
    # Built in the slopes' dtype (float32 by default), then cast: a distance of
    # thousands times a slope of 1/256 loses little even in float16.
    bias = alibi_bias(slopes.to(q.device), n, k.shape[-2], causal=causal).to(q.dtype)  # (H, N, M)
    # The bias goes in as a float attn_mask: SDPA adds it after the 1/sqrt(d) scaling.
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)  # (B, H, N, d_v)
# --8<-- [end:forward]
