"""Figures of the packed-sequences page, computed with the snippet it teaches."""

from __future__ import annotations

import torch

from snippets.efficiency.packed_sequences import (
    cu_seqlens_from_lengths,
    document_ids,
    document_mask,
    packed_kernel,
    per_document_attention,
)

LENGTHS = [4, 6, 3]


def document_masks(s):
    """Causal-only packing against the document mask, and the leak it causes."""
    cu = cu_seqlens_from_lengths(LENGTHS)
    doc = document_ids(cu)
    t = len(doc)
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    fig, axes = s.figure(7.4, 3.3, ncols=3, adjust={"left": 0.06, "right": 0.98, "bottom": 0.14,
                                                     "top": 0.76, "wspace": 0.35})
    s.mask_grid(axes[0], causal, "causal only: leaks", colour=s.b)
    s.mask_grid(axes[1], document_mask(doc), "document mask", colour=s.a)
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(t, 1, 8, generator=g, dtype=torch.float64) for _ in range(3))
    gap = (packed_kernel(q, k, v, causal, None) - per_document_attention(q, k, v, cu))
    gap = gap.abs().amax(dim=(1, 2))  # (T,) largest error of each token's output
    axes[2].bar(range(t), gap.tolist(), color=[s.accents[int(d)] for d in doc.tolist()])
    axes[2].set_title("error without the mask")
    axes[2].set_xlabel("token (colour = document)")
    return fig
