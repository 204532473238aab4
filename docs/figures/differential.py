"""Figures of the differential-attention page, computed with the snippet it teaches."""

from __future__ import annotations

import torch

from snippets.modern.differential_attention import differential_attention


def differential_maps(s):
    """Two causal softmax maps that share a common part, and what their difference keeps."""
    g = torch.Generator().manual_seed(3)
    n, d = 12, 6
    shared_q, shared_k = (torch.randn(1, 1, n, d, generator=g, dtype=torch.float64) for _ in range(2))
    signal_q, signal_k = (torch.randn(1, 1, n, d, generator=g, dtype=torch.float64) for _ in range(2))
    q1, k1 = shared_q + 1.5 * signal_q, shared_k + 1.5 * signal_k
    eye = torch.eye(n, dtype=torch.float64).expand(1, 1, n, n)  # v = I: the output is the map
    a1 = differential_attention(q1, k1, q1, k1, eye, 0.0)[0, 0]
    a2 = differential_attention(shared_q, shared_k, shared_q, shared_k, eye, 0.0)[0, 0]
    diff = differential_attention(q1, k1, shared_q, shared_k, eye, 0.8)[0, 0]
    fig, axes = s.figure(7.4, 3.1, ncols=3, adjust={"left": 0.06, "right": 0.98, "bottom": 0.05,
                                                     "top": 0.8, "wspace": 0.3})
    s.heat(axes[0], a1.numpy(), "A1 (signal + shared)", vmin=0, vmax=1)
    s.heat(axes[1], a2.numpy(), "A2 (shared part)", vmin=0, vmax=1, ylabel="")
    s.heat(axes[2], diff.numpy(), "A1 - 0.8 A2", ylabel="")
    return fig
