"""Identities proven for the block-sparse attention page."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from identities import identity
from snippets.linear import block_sparse_attention as bs

PAGE = "linear/block-sparse-attention.md"


@identity("moba-all-blocks-is-causal-attention",
          "MoBA with top_k >= the number of blocks (N = 23, blocks of 4) equals causal SDPA",
          page=PAGE, tol=1e-12)
def moba_all_blocks_is_causal_attention():
    q, k, v = (torch.randn(2, 3, 23, 8, dtype=torch.float64) for _ in range(3))
    return (bs.moba_attention(q, k, v, block_size=4, top_k=6),
            F.scaled_dot_product_attention(q, k, v, is_causal=True))


@identity("moba-top-one-is-local-causal-attention",
          "MoBA with top_k = 1 equals causal attention inside each block (SDPA with a "
          "block-diagonal causal mask)", page=PAGE, tol=1e-12)
def moba_top_one_is_local_causal_attention():
    q, k, v = (torch.randn(2, 3, 20, 8, dtype=torch.float64) for _ in range(3))
    i, j = torch.arange(20)[:, None], torch.arange(20)
    local = (i // 5 == j // 5) & (j <= i)
    return (bs.moba_attention(q, k, v, block_size=5, top_k=1),
            F.scaled_dot_product_attention(q, k, v, attn_mask=local))
