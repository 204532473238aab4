"""Softmax that forgets: the Forgetting Transformer's gate and stick-breaking attention.

FoX (Lin, Nikishin, He and Courville, 2025, arXiv:2503.02130) multiplies each
attention weight by the forget gates f_l in (0, 1) of every token between the
key and the query, before the softmax normalises: in log space a bias
D_ij = sum_{l=j+1..i} log f_l added to the scores. A constant gate a is ALiBi
with slope -log a.

Stick-breaking attention (Tan, Shen, Yang, Courville and Panda, 2024,
arXiv:2410.17980) replaces the softmax: query i breaks a unit stick from the
nearest key backwards, A_ij = beta_ij prod_{j<k<i} (1 - beta_ik) with
beta = sigmoid(score), for j < i (the diagonal is excluded, the default of the
authors' reference code). Rows sum to at most 1; the remainder goes to the
token's own value.

Page: docs/linear/softmax-that-forgets.md
Tested against: the product-of-gates and sequential definitions written out
independently, ALiBi, and FlexAttention with a score_mod
(tests/test_softmax_that_forgets.py).

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

__all__ = [
    "forget_gate_bias",
    "forgetting_attention",
    "fox_score_mod",
    "stick_breaking_weights",
    "stick_breaking_attention",
]


# --8<-- [start:fox]
def forget_gate_bias(log_f: torch.Tensor) -> torch.Tensor:
    """D_ij = sum_{l=j+1..i} log f_l: (B, H, N) log gates -> (B, H, N, N) biases."""
    half = log_f.dtype in (torch.float16, torch.bfloat16)
    wide = torch.float32 if half else log_f.dtype
    c = log_f.to(wide).cumsum(dim=-1)  # (B, H, N): running log of the gates
    return c.unsqueeze(-1) - c.unsqueeze(-2)  # (B, H, N, 1) - (B, H, 1, N) = c_i - c_j


def forgetting_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_f: torch.Tensor,
    scale: float | None = None,
) -> torch.Tensor:
    """FoX: causal softmax(q k^T * scale + D) v, (B, H, N, d_v)."""
    _check_heads(q, k, v, scale, log_f)
    n = q.shape[-2]
    causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    bias = forget_gate_bias(log_f).masked_fill(~causal, float("-inf"))  # (B, H, N, N)
    bias = bias.to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
# --8<-- [end:fox]


# --8<-- [start:score_mod]
def fox_score_mod(log_f: torch.Tensor) -> Callable:
    """The same bias as a FlexAttention score_mod (pair it with a causal mask_mod)."""
    _check_log_f(log_f)
    c = log_f.to(torch.float32).cumsum(dim=-1)  # (B, H, N), summed in float32 at least
    if log_f.dtype == torch.float64:
        c = log_f.cumsum(dim=-1)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + (c[b, h, q_idx] - c[b, h, kv_idx]).to(score.dtype)

    return score_mod
# --8<-- [end:score_mod]


# --8<-- [start:stick]
def stick_breaking_weights(scores: torch.Tensor) -> torch.Tensor:
    """A_ij = sigmoid(z_ij) prod_{j<k<i} (1 - sigmoid(z_ik)) for j < i, in log space."""
    n = scores.shape[-1]
    before = torch.ones(n, n, dtype=torch.bool, device=scores.device).tril(-1)  # j < i
    z = scores.float() if scores.dtype in (torch.float16, torch.bfloat16) else scores
    log_keep = F.logsigmoid(-z).masked_fill(~before, 0.0)  # log(1 - beta_ik), k < i
    # sum over k > j of log(1 - beta_ik): a reverse cumulative sum shifted by one
    # (no subtraction, so a -inf from a saturated beta never meets another -inf)
    later = F.pad(log_keep[..., 1:].flip(-1).cumsum(-1).flip(-1), (0, 1))
    log_a = F.logsigmoid(z) + later  # (..., N, N)
    return log_a.exp().masked_fill(~before, 0.0)
# --8<-- [end:stick]


# --8<-- [start:stick_attention]
def stick_breaking_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None = None,
    remainder_to_self: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stick-breaking attention: (out (B, H, N, d_v), remainder (B, H, N, 1))."""
    _check_heads(q, k, v, scale)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    a = stick_breaking_weights(q @ k.transpose(-1, -2) * scale)  # (B, H, N, N)
    out = a @ v.to(a.dtype)  # (B, H, N, N) @ (B, H, N, d_v) -> (B, H, N, d_v)
    remainder = 1.0 - a.sum(dim=-1, keepdim=True)  # (B, H, N, 1), in [0, 1]
    if remainder_to_self:
        out = out + remainder * v.to(a.dtype)  # what is left of the stick: own value
    return out.to(v.dtype), remainder.to(v.dtype)
# --8<-- [end:stick_attention]


# --8<-- [start:validate]
def _dtype_and_shape(x: object) -> str:
    """A tensor's dtype and shape, or another object's type, for an error message."""
    if isinstance(x, torch.Tensor):
        return f"{x.dtype} {tuple(x.shape)}"
    return type(x).__name__


def _check_heads(q, k, v, scale, log_f=None) -> None:
    """q, k (B, H, N, d), v (B, H, N, d_v) of q's dtype and device; log_f if given."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not (torch.is_tensor(t) and t.is_floating_point() and t.dim() == 4) or (
                t.dtype, t.device) != (q.dtype, q.device):
            raise ValueError(f"{name} must be a floating (B, H, N, d) tensor of q's "
                             f"dtype and device, got {_dtype_and_shape(t)} on "
                             f"{getattr(t, 'device', None)}")
    if k.shape != q.shape or v.shape[:-1] != q.shape[:-1]:
        raise ValueError(f"q and k must be (B, H, N, d) and v (B, H, N, d_v), got q "
                         f"{tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be None or a finite float > 0, got {scale!r}")
    if log_f is not None:
        _check_log_f(log_f, q)


def _check_log_f(log_f, q=None) -> None:
    """Floating (B, H, N) log gates <= 0; q's (B, H, N) and device when q is given."""
    f, want = log_f, (None if q is None else f"{tuple(q.shape[:-1])} on {q.device}")
    if not (torch.is_tensor(f) and f.is_floating_point() and f.dim() == 3) or (
            want and f"{tuple(f.shape)} on {f.device}" != want):
        raise ValueError(f"log_f must be a floating (B, H, N) tensor, {want or 'any'}, "
                         f"got {_dtype_and_shape(f)} on {getattr(f, 'device', None)}")
    if (log_f > 0).any():
        raise ValueError(f"log_f must be <= 0 (gates in (0, 1]), got {log_f.max():.3g}")

# --8<-- [end:validate]
