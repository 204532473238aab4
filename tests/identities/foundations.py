"""Identities proven for the foundations pages."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from identities import identity
from snippets.foundations import scaled_dot_product as sdp


@identity("sdpa-equals-pytorch",
          "scaled_dot_product_attention equals F.scaled_dot_product_attention, with a boolean mask",
          page="foundations/scaled-dot-product.md", tol=1e-12)
def sdpa_equals_pytorch():
    q, k, v = (torch.randn(2, 3, 5, 8, dtype=torch.float64) for _ in range(3))
    mask = torch.rand(2, 1, 5, 5) > 0.3
    mask[..., 0] = True
    ours, _ = sdp.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return ours, F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@identity("sdpa-causal-lower-right",
          "is_causal=True with N < M equals SDPA given a lower-right causal mask (a KV cache's alignment)",
          page="foundations/scaled-dot-product.md", tol=1e-12)
def sdpa_causal_lower_right():
    q = torch.randn(2, 3, 3, 8, dtype=torch.float64)
    k, v = (torch.randn(2, 3, 7, 8, dtype=torch.float64) for _ in range(2))
    ours, _ = sdp.scaled_dot_product_attention(q, k, v, is_causal=True)
    mask = torch.ones(3, 7, dtype=torch.bool).tril(diagonal=7 - 3)
    return ours, F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
