"""Figures of the block-sparse attention page, computed with the snippet it teaches."""

from __future__ import annotations

import torch

from snippets.linear.block_sparse_attention import moba_block_choice


def moba_masks(s):
    """The keys 16 queries read under MoBA's gate (blocks of 4) as top_k grows."""
    g = torch.Generator().manual_seed(7)
    n, block = 16, 4
    q, k = (torch.randn(1, 1, n, 8, generator=g, dtype=torch.float64) for _ in range(2))
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    fig, axes = s.figure(7.4, 2.9, ncols=3, adjust={"left": 0.06, "right": 0.98, "bottom": 0.05,
                                                     "top": 0.8, "wspace": 0.3})
    for ax, top_k in zip(axes, (1, 2, 4)):
        kept = moba_block_choice(q, k, block_size=block, top_k=top_k)[0, 0]
        keys = kept.repeat_interleave(block, dim=-1)[:, :n] & causal
        title = f"top_k = {top_k}" + (": causal" if top_k == 4 else "")
        s.mask_grid(ax, keys.numpy(), title, ylabel="query i" if top_k == 1 else "")
    return fig
