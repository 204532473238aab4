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

PaTH (Yang, Shen, Wen, Tan, Mishra, Ren, Panda and Kim, 2025, arXiv:2505.16381)
keeps the softmax and moves the keys instead: each token t brings a
Householder-like transition H_t = I - beta_t w_t w_t^T, and the score of key j
from query i is q_i^T H_i H_{i-1} ... H_{j+1} k_j. Here the whole N x N score
matrix comes from one UT transform (O(N^2 d + N^3)); the chunked,
FlashAttention-style kernels that never store that matrix are fla's
(fla-org/flash-linear-attention, fla/ops/path_attn).

Page: docs/linear/softmax-that-forgets.md
Tested against: the product-of-gates and sequential definitions written out
independently, ALiBi, FlexAttention with a score_mod, causal SDPA (PaTH with
beta = 0), and the chunked algorithm of fla's PaTH reference restated
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
    "householder_transition",
    "path_scores_by_steps",
    "path_scores",
    "path_attention",
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
    _check_per_token("log_f", log_f)
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


# --8<-- [start:path_steps]
def householder_transition(w: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """H_t = I - beta_t w_t w_t^T: (..., d) directions, (...) betas -> (..., d, d)."""
    eye = torch.eye(w.shape[-1], dtype=w.dtype, device=w.device)  # (d, d)
    # (...) -> (..., 1, 1) times the outer product (..., d, 1) * (..., 1, d)
    return eye - beta[..., None, None] * w.unsqueeze(-1) * w.unsqueeze(-2)


def path_scores_by_steps(q, k, w, beta) -> torch.Tensor:
    """S_ij = q_i^T H_i ... H_{j+1} k_j, token by token; -inf above the diagonal."""
    n, h = q.shape[-2], householder_transition(w, beta)  # h: (B, H, N, d, d)
    rows, keys = [], k[..., :0, :]  # keys j < t, already moved by H_{j+1} ... H_{t-1}
    for t in range(n):
        # token t arrives: H_t moves every cached key (H is symmetric: k^T H = (H k)^T)
        keys = keys @ h[..., t, :, :]  # (B, H, t, d) @ (B, H, d, d) -> (B, H, t, d)
        keys = torch.cat([keys, k[..., t : t + 1, :]], dim=-2)  # k_t joins unmoved
        row = (keys @ q[..., t, :, None]).squeeze(-1)  # (B, H, t + 1): q_t . moved k_j
        rows.append(F.pad(row, (0, n - t - 1), value=float("-inf")))
    return torch.stack(rows, dim=-2)  # (B, H, N, N)
# --8<-- [end:path_steps]


# --8<-- [start:path_ut]
def path_scores(q, k, w, beta) -> torch.Tensor:
    """PaTH scores in the UT form: QK^T - tril(QW^T) T strict(diag(beta) W K^T)."""
    n = q.shape[-2]
    causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()  # s <= i
    before = causal.tril(-1)  # s > j, strictly
    wb = w * beta.unsqueeze(-1)  # (B, H, N, d): beta_s w_s
    eye = torch.eye(n, dtype=q.dtype, device=q.device)
    t_inv = (wb @ w.transpose(-1, -2)).masked_fill(~before, 0) + eye  # (B, H, N, N)
    right = (wb @ k.transpose(-1, -2)).masked_fill(~before, 0)  # beta_s w_s . k_j
    # the UT transform: T right, by forward substitution on the unit lower T^-1
    right = torch.linalg.solve_triangular(t_inv, right, upper=False, unitriangular=True)
    qw = (q @ w.transpose(-1, -2)).masked_fill(~causal, 0)  # (B, H, N, N): q_i . w_s
    scores = q @ k.transpose(-1, -2) - qw @ right  # (B, H, N, N)
    return scores.masked_fill(~causal, float("-inf"))
# --8<-- [end:path_ut]


# --8<-- [start:path]
def path_softmax(q, k, v, w, beta, log_f, scale) -> torch.Tensor:
    """softmax(S * scale + D) V with PaTH scores S; D: FoX's bias if log_f is given."""
    scores = path_scores(q, k, w, beta) * scale  # (B, H, N, N), -inf above the diagonal
    if log_f is not None:  # PaTH-FoX: the forget-gate bias, added after the scale
        scores = scores + forget_gate_bias(log_f).to(scores.dtype)
    return torch.softmax(scores, dim=-1) @ v  # (B, H, N, N) @ (B, H, N, d_v)
# --8<-- [end:path]


# --8<-- [start:path_face]
def path_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, w: torch.Tensor,
    beta: torch.Tensor, *, log_f: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """PaTH: causal softmax attention whose keys are moved by Householder-like steps.

    The score of key j from query i is ``q_i^T H_i ... H_{j+1} k_j`` with
    ``H_t = I - beta_t w_t w_t^T``; ``beta = 0`` is causal attention with no
    positional encoding. With ``log_f``, FoX's forget-gate bias is added after
    the scale (PaTH-FoX). fla's ``parallel_path_attention`` adds its gate ``g``
    before the scale, so its ``g`` is this ``log_f`` divided by ``scale``.

    Args:
        q: queries ``(B, H, N, d)``.
        k: keys ``(B, H, N, d)``.
        v: values ``(B, H, N, d_v)``.
        w: unit directions ``(B, H, N, d)`` (the paper L2-normalises them).
        beta: strengths ``(B, H, N)`` in [0, 2]; 2 makes each H_t a reflection.
        log_f: optional log forget gates ``(B, H, N)``, each <= 0.
        scale: score scale; default ``1 / sqrt(d)``.

    Returns:
        The output ``(B, H, N, d_v)`` in the input dtype (computed in float32
        at least).

    Shape:
        q, k, w ``(B, H, N, d)``; v ``(B, H, N, d_v)``; beta ``(B, H, N)``
        -> ``(B, H, N, d_v)``.
    """
    _check_path(q, k, v, w, beta, log_f, scale)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    # solve_triangular takes no half precision, and float32 keeps the products exact
    dtype, acc = q.dtype, torch.promote_types(q.dtype, torch.float32)
    q, k, v, w, beta = (t.to(acc) for t in (q, k, v, w, beta))
    return path_softmax(q, k, v, w, beta, log_f, scale).to(dtype)
# --8<-- [end:path_face]


# --8<-- [start:validate]
def _dtype_and_shape(x: object) -> str:
    """A tensor's dtype, shape and device, or another object's type, for a message."""
    if isinstance(x, torch.Tensor):
        return f"{x.dtype} {tuple(x.shape)} on {x.device}"
    return type(x).__name__


def _check_heads(q, k, v, scale, log_f=None, w=None) -> None:
    """q, k (and w) (B, H, N, d), v (B, H, N, d_v) of q's dtype and device; log_f."""
    heads = (("q", q), ("k", k), ("v", v)) + ((("w", w),) if w is not None else ())
    for name, t in heads:  # k and w (B, H, N, d), v (B, H, N, d_v)
        if not (torch.is_tensor(t) and t.is_floating_point() and t.dim() == 4) or (
                t.dtype, t.device, t.shape[:3]) != (q.dtype, q.device, q.shape[:3]) or (
                name in ("k", "w") and t.shape != q.shape):
            raise ValueError(f"{name} must be a floating (B, H, N, d) tensor of q's "
                             f"dtype, device and sizes, got {_dtype_and_shape(t)}")
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be None or a finite float > 0, got {scale!r}")
    if log_f is not None:
        _check_per_token("log_f", log_f, q)


def _check_per_token(name, f, q=None, low=-math.inf, high=0.0) -> None:
    """Floating (B, H, N) values in [low, high]; q's (B, H, N) and device if given."""
    want = None if q is None else f"{tuple(q.shape[:-1])} on {q.device}"
    if not (torch.is_tensor(f) and f.is_floating_point() and f.dim() == 3) or (
            want and f"{tuple(f.shape)} on {f.device}" != want):
        raise ValueError(f"{name} must be a floating (B, H, N) tensor, "
                         f"{want or 'any'}, got {_dtype_and_shape(f)}")
    if ((f < low) | (f > high)).any():  # log gates <= 0; beta in [0, 2]: non-expansive
        raise ValueError(f"{name} must lie in [{low:g}, {high:g}], got {f.min():.3g} "
                         f"to {f.max():.3g}")


def _check_path(q, k, v, w, beta, log_f, scale) -> None:
    """The heads and log_f as above; w shaped like q; beta (B, H, N) in [0, 2]."""
    _check_heads(q, k, v, scale, log_f, w)
    _check_per_token("beta", beta, q, 0.0, 2.0)

# --8<-- [end:validate]
