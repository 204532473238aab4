"""Differential attention: the difference of two softmax maps cancels common noise.

Ye, Dong, Xia, Sun, Zhu, Huang and Wei (2024), "Differential Transformer",
arXiv:2410.05258. Each head computes two attention maps from two half-width
query/key pairs and subtracts the second, scaled by a learned scalar lambda,
from the first; the value keeps the full width 2d. Per head the result is
RMS-normalised over its 2d channels and scaled by (1 - lambda_init):

    DiffAttn = (softmax(Q1 K1^T / sqrt(d)) - lambda softmax(Q2 K2^T / sqrt(d))) V
    lambda = exp(l_q1 . l_k1) - exp(l_q2 . l_k2) + lambda_init (one per layer)

Off switch: with lambda = 0 (before the norm) it is ordinary attention on heads
of width d. Rows of the difference of maps sum to 1 - lambda.

Page: docs/modern/differential-attention.md
Tested against: transformers' DiffLlamaAttention with weights copied in, and
F.scaled_dot_product_attention (tests/test_differential_attention.py).

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["differential_attention", "lambda_init_for_layer", "DifferentialAttention"]


# --8<-- [start:kernel]
def differential_attention(
    q1: torch.Tensor, k1: torch.Tensor, q2: torch.Tensor, k2: torch.Tensor,
    v: torch.Tensor, lam: torch.Tensor | float, *, is_causal: bool = True,
) -> torch.Tensor:
    """(softmax(q1 k1^T / sqrt d) - lam softmax(q2 k2^T / sqrt d)) v, (B, H, N, 2d)."""
    _check_kernel(q1, k1, q2, k2, v)
    a1 = F.scaled_dot_product_attention(q1, k1, v, is_causal=is_causal)  # (B, H, N, 2d)
    a2 = F.scaled_dot_product_attention(q2, k2, v, is_causal=is_causal)  # same maps' V
    return a1 - lam * a2
# --8<-- [end:kernel]


# --8<-- [start:lambda_init]
def lambda_init_for_layer(layer_idx: int) -> float:
    """The paper's schedule: lambda_init = 0.8 - 0.6 exp(-0.3 l) for layer l."""
    return 0.8 - 0.6 * math.exp(-0.3 * layer_idx)
# --8<-- [end:lambda_init]


# --8<-- [start:module]
class DifferentialAttention(nn.Module):
    """Multi-head differential attention over (B, N, D) inputs, D = H * 2d.

    Args:
        d_model: D, the model width.
        n_heads: H, differential heads; each has two query/key halves of width
            d = D / (2H) and a value of width 2d.
        lambda_init: the constant in lambda (``lambda_init_for_layer(l)`` in
            the paper).
        causal: mask the future (a decoder).
        eps: the per-head RMSNorm's epsilon.

    Shape:
        x: ``(B, N, D)`` -> ``(B, N, D)``.
    """

    def __init__(self, d_model: int, n_heads: int, *, lambda_init: float = 0.8,
                 causal: bool = True, eps: float = 1e-5) -> None:
        super().__init__()
        if d_model % (2 * n_heads) or not 0.0 <= lambda_init < 1.0:
            raise ValueError(f"d_model must be a multiple of 2 * {n_heads = } and "
                             f"lambda_init in [0, 1), got {d_model=}, {lambda_init=}")
        self.n_heads, self.d_head = n_heads, d_model // n_heads // 2
        self.lambda_init, self.causal, self.eps = lambda_init, causal, eps
        self.q_proj = nn.Linear(d_model, d_model, bias=False)  # H heads x (q1, q2)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)  # H heads x 2d
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2 = (
            nn.Parameter(torch.randn(self.d_head) * 0.1) for _ in range(4))

    def lam(self) -> torch.Tensor:
        """lambda = exp(l_q1 . l_k1) - exp(l_q2 . l_k2) + lambda_init, one scalar."""
        first = torch.exp((self.lambda_q1 * self.lambda_k1).sum())
        second = torch.exp((self.lambda_q2 * self.lambda_k2).sum())
        return first - second + self.lambda_init

    def _check_forward(self, x: torch.Tensor) -> None:
        w = self.q_proj.weight
        if not torch.is_tensor(x) or (x.dim(), x.shape[2:], x.dtype, x.device) != (
                3, w.shape[1:], w.dtype, w.device):
            raise ValueError(f"x must be (B, N, D) with D = {w.shape[1]}, {w.dtype} on "
                             f"{w.device}, got {_got(x)}")
# --8<-- [end:module]

    # --8<-- [start:forward]
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Differential attention, per-head RMSNorm, (1 - lambda_init), out_proj."""
        self._check_forward(x)
        B, N, D = x.shape
        h, d = self.n_heads, self.d_head
        # (B, N, D) -> (B, N, 2, H, d) -> (2, B, H, N, d): the q1 and q2 halves
        q = self.q_proj(x).view(B, N, 2, h, d).permute(2, 0, 3, 1, 4)
        k = self.k_proj(x).view(B, N, 2, h, d).permute(2, 0, 3, 1, 4)
        v = self.v_proj(x).view(B, N, h, 2 * d).transpose(1, 2)  # (B, H, N, 2d)
        out = differential_attention(q[0], k[0], q[1], k[1], v, self.lam(),
                                     is_causal=self.causal)  # (B, H, N, 2d)
        out = (1 - self.lambda_init) * F.rms_norm(out, (2 * d,), eps=self.eps)
        return self.out_proj(out.transpose(1, 2).reshape(B, N, D))
    # --8<-- [end:forward]


# --8<-- [start:validate]
def _got(t: object) -> str:
    """What a message says it got: a tensor's dtype, shape and device, else t."""
    is_tensor = torch.is_tensor(t)
    return f"{t.dtype} {tuple(t.shape)} on {t.device}" if is_tensor else repr(t)


def _check_kernel(q1, k1, q2, k2, v) -> None:
    """q1, k1, q2, k2 (B, H, N, d) and v (B, H, N, d_v): floating, on q1's device."""
    for name, t in {"q1": q1, "k1": k1, "q2": q2, "k2": k2, "v": v}.items():
        n = 3 if t is v else 4  # v's width is free
        if not (torch.is_tensor(t) and t.is_floating_point() and t.dim() == 4) \
                or t.device != q1.device or t.shape[:n] != q1.shape[:n]:
            raise ValueError(f"{name} must be a float (B, H, N, d) tensor like q1 (v: "
                             f"any d), got {_got(t)}")
# --8<-- [end:validate]
