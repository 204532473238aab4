"""Identities proven for the softmax-that-forgets page."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from identities import identity
from snippets.linear import softmax_that_forgets as S

PAGE = "linear/softmax-that-forgets.md"


def _qkv(n=7):
    return tuple(torch.randn(2, 2, n, 8, dtype=torch.float64) for _ in range(3))


@identity("fox-constant-gate-is-alibi",
          "forgetting attention with a constant gate a equals ALiBi with slope -log a",
          page=PAGE, tol=1e-12)
def fox_constant_gate_is_alibi():
    q, k, v = _qkv()
    i, j = torch.arange(7)[:, None], torch.arange(7)
    alibi = ((i - j).double() * math.log(0.8)).masked_fill(j > i, float("-inf"))
    log_f = torch.full((2, 2, 7), math.log(0.8), dtype=torch.float64)
    return S.forgetting_attention(q, k, v, log_f), F.scaled_dot_product_attention(q, k, v, attn_mask=alibi)


@identity("fox-unit-gates-are-causal-softmax",
          "forgetting attention with every gate 1 equals causal softmax attention",
          page=PAGE, tol=1e-12)
def fox_unit_gates_are_causal_softmax():
    q, k, v = _qkv()
    zero = torch.zeros(2, 2, 7, dtype=torch.float64)
    return S.forgetting_attention(q, k, v, zero), F.scaled_dot_product_attention(q, k, v, is_causal=True)


@identity("stick-breaking-log-space-equals-definition",
          "stick-breaking weights in log space equal beta_ij prod (1 - beta_ik), entry by entry",
          page=PAGE, tol=1e-12)
def stick_breaking_log_space_equals_definition():
    z = torch.randn(1, 2, 6, 6, dtype=torch.float64) * 3
    beta = torch.sigmoid(z)
    a = torch.zeros_like(z)
    for i in range(6):
        for j in range(i):
            a[..., i, j] = beta[..., i, j] * torch.prod(1 - beta[..., i, j + 1:i], dim=-1)
    return S.stick_breaking_weights(z), a
