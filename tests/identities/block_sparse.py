"""Identities proven for the block-sparse attention page."""

from __future__ import annotations

import importlib

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


@identity("group-sparse-all-blocks-is-causal-gqa",
          "MiniMax-style grouped block selection with top_k >= the number of blocks "
          "equals causal grouped-query SDPA (enable_gqa)", page=PAGE, tol=1e-12)
def group_sparse_all_blocks_is_causal_gqa():
    q = torch.randn(1, 4, 29, 8, dtype=torch.float64)
    k, v = (torch.randn(1, 2, 29, 8, dtype=torch.float64) for _ in range(2))
    iq, ik = torch.randn(1, 2, 29, 6, dtype=torch.float64), torch.randn(1, 1, 29, 6, dtype=torch.float64)
    return (bs.group_sparse_attention(q, k, v, iq, ik, block_size=4, top_k=8),
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))


@identity("group-sparse-equals-transformers-minimax",
          "grouped block selection and attention equal transformers' MiniMaxM3VLIndexer "
          "block indices and build_block_mask (index RoPE at angle 0)", page=PAGE, tol=1e-12,
          needs=("transformers",))
def group_sparse_equals_minimax():
    cfg = importlib.import_module("transformers.models.minimax_m3_vl.configuration_minimax_m3_vl")
    mod = importlib.import_module("transformers.models.minimax_m3_vl.modeling_minimax_m3_vl")
    n = 37
    config = cfg.MiniMaxM3VLTextConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                                       index_n_heads=2, index_head_dim=8, index_block_size=4,
                                       index_topk_blocks=4, index_local_blocks=2)
    indexer = mod.MiniMaxM3VLIndexer(config, layer_idx=0).double()
    x, positions = torch.randn(1, n, 32, dtype=torch.float64), torch.arange(n)[None]
    angle0 = (torch.ones(1, n, 8, dtype=torch.float64), torch.zeros(1, n, 8, dtype=torch.float64))
    with torch.no_grad():
        indices = indexer(x, angle0, None, positions)
        iq = indexer.q_norm(indexer.q_proj(x).view(1, n, 2, 8)).transpose(1, 2)
        ik = indexer.k_norm(indexer.k_proj(x).view(1, n, 1, 8)).transpose(1, 2)
        mask = indexer.build_block_mask(indices, None, n, torch.float64, x.device, positions)
    q = torch.randn(1, 4, n, 8, dtype=torch.float64)
    k, v = (torch.randn(1, 2, n, 8, dtype=torch.float64) for _ in range(2))
    want = F.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1),
                                          attn_mask=mask)
    return bs.group_sparse_attention(q, k, v, iq, ik, block_size=4, top_k=4, local_blocks=2), want
