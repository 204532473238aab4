"""Figures of the home and notation pages: the map of the guide, the shapes of attention."""

from __future__ import annotations

import torch

from snippets.attention.multi_head import MultiHeadAttention


def guide_map(s):
    """The guide's parts in reading order, with the pages of each."""
    parts = [
        ("Foundations", ["scaled dot-product", "masks", "positions", "devices"], s.a),
        ("Attention", ["self, causal", "cross, co-", "multi-head, GQA", "RoPE, ALiBi"], s.b),
        ("Architecture", ["the block", "encoder-decoder"], s.c),
        ("Efficiency", ["tiles, online softmax", "KV cache", "windows, linear", "backends"], s.d),
        ("History", ["Bahdanau, Luong", "BERT, GPT", "timeline"], s.muted),
    ]
    fig, ax = s.canvas(7.6, 2.0, xlim=(0, 20), ylim=(1.0, 6.2))
    for k, (name, pages, colour) in enumerate(parts):
        x = 2.0 + k * 4.0
        s.box(ax, x, 5.6, 3.4, 0.9, name, colour=colour, filled=True, weight="bold")
        for p, page in enumerate(pages):
            s.label(ax, x, 4.3 - p * 0.95, page, colour=s.ink, ha="center", va="center", size=8)
        if k + 1 < len(parts):
            s.arrow(ax, (x + 1.75, 5.6), (x + 2.25, 5.6), colour=s.ink)
    return fig


def shapes(s):
    """(B, N, D) in, (B, H, N, d) inside the heads, (B, H, N, M) scores, (B, N, D) out."""
    b, n, d_model, h = 2, 5, 12, 3
    mha = MultiHeadAttention(d_model=d_model, n_heads=h).eval()
    x = torch.zeros(b, n, d_model)
    with torch.no_grad():
        out, weights = mha(x, need_weights=True)
    steps = [
        ("x", (b, n, d_model), "B, N, D", s.a),
        ("q, k, v per head", (b, h, n, d_model // h), "B, H, N, d", s.b),
        ("weights", tuple(weights.shape), "B, H, N, M", s.d),
        ("out", tuple(out.shape), "B, N, D", s.a),
    ]
    fig, ax = s.canvas(7.6, 1.8, xlim=(0, 20), ylim=(0, 4.6))
    for k, (name, shape, letters, colour) in enumerate(steps):
        x = 2.4 + k * 5.0
        s.box(ax, x, 2.6, 4.0, 1.4, f"{name}\n({letters})", colour=colour)
        s.label(ax, x, 1.2, "e.g. " + str(shape), ha="center", va="center", size=8)
        if k + 1 < len(steps):
            s.arrow(ax, (x + 2.05, 2.6), (x + 2.95, 2.6), colour=s.ink)
    return fig
