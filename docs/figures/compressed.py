"""Figures of the compressed-attention (DeepSeek-V4) page, computed with its snippet."""

from __future__ import annotations

import torch
from matplotlib.colors import to_rgba

from snippets.linear.compressed_attention import entry_causal, select_entries


def what_a_query_reads(s):
    """Per query, the tokens it reaches: its window, and the entries it reads or skips."""
    g = torch.Generator().manual_seed(3)
    n, m, window, top_k = 24, 4, 4, 2
    e = n // m
    q_idx, w = torch.randn(1, n, 2, 4, generator=g), torch.rand(1, n, 2, generator=g)
    picked = select_entries(q_idx, torch.randn(1, e, 4, generator=g), w, compress_rate=m,
                            top_k=top_k)[0]
    ready = entry_causal(n, e, m)
    fig, axes = s.figure(7.4, 3.9, ncols=2, adjust={"left": 0.06, "right": 0.98, "bottom": 0.13,
                                                     "top": 0.84, "wspace": 0.18})
    colours = {"window": to_rgba(s.a), "read": to_rgba(s.c), "skipped": to_rgba(s.faint)}
    for ax, (title, chosen) in zip(axes, ((f"HCA-style: every complete entry (m = {m})", ready),
                                          (f"CSA-style: top-{top_k} of them", ready & picked))):
        rgba = [[(0, 0, 0, 0)] * n for _ in range(n)]
        for t in range(n):
            for j in range(n):
                entry = j // m
                if entry < e and ready[t, entry]:
                    rgba[t][j] = colours["read" if chosen[t, entry] else "skipped"]
                if t - window < j <= t:
                    rgba[t][j] = colours["window"]
        ax.imshow(rgba, extent=(0, n, n, 0), interpolation="none", aspect="equal")
        ax.hlines(range(n + 1), 0, n, colors=s.muted, linewidth=0.3)
        ax.vlines(range(0, n + 1, m), 0, n, colors=s.muted, linewidth=0.9)
        s._grid_axes(ax, n, n, title, "token j (entries: columns of 4)", "query t")
        ax.tick_params(labelsize=5)
    s.label(axes[0], 0, n + 2.2, "window (last 4 tokens)", colour=s.a, size=8)
    s.label(axes[0], 14, n + 2.2, "entry read", colour=s.c, size=8)
    s.label(axes[1], 0, n + 2.2, "complete entry not read (grey)", colour=s.muted, size=8)
    return fig
