"""Identities proven for the which-kernel page."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from identities import identity

PAGE = "efficiency/which-kernel.md"


@identity("cpu-fused-kernel-equals-math-backend",
          "SDPA forced onto the fused CPU kernel equals SDPA forced onto the math "
          "backend (float64, boolean causal mask, GQA: 8 query heads over 2 key/value "
          "heads)",
          page=PAGE, tol=1e-12)
def cpu_fused_kernel_equals_math_backend():
    q = torch.randn(2, 8, 37, 16, dtype=torch.float64, device="cpu")
    k, v = (torch.randn(2, 2, 37, 16, dtype=torch.float64, device="cpu")
            for _ in range(2))
    mask = torch.ones(37, 37, dtype=torch.bool, device="cpu").tril()
    outs = []
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.MATH):
        with sdpa_kernel(backend):
            outs.append(F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                       enable_gqa=True))
    return outs[0], outs[1]
