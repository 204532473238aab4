"""Figures of the home and notation pages: the map of the guide, the shapes of attention."""

from __future__ import annotations

import torch

from snippets.attention.multi_head import MultiHeadAttention


def guide_map(s):
    """The guide's parts in reading order, with the pages of each: two rows of four."""
    parts = [
        ("Foundations", ["scaled dot-product", "masks", "positions", "devices"], s.a),
        ("Attention", ["self, causal", "cross, co-", "multi-head, GQA", "RoPE, ALiBi"], s.b),
        ("Architecture", ["the block", "encoder-decoder"], s.c),
        ("Modern decoder", ["RMSNorm, SwiGLU", "latent attention", "sinks, gates, caps", "local/global, RoPE scaling"], s.d),
        ("Efficiency", ["tiles, FlashAttention", "KV cache, serving", "windows, Flex", "backends"], s.a),
        ("Beyond softmax", ["gated linear", "delta rule", "state-space duality", "sparse, hybrids"], s.b),
        ("Many devices", ["ring attention", "Ulysses", "all-gather KV"], s.c),
        ("History", ["Bahdanau, Luong", "BERT, GPT", "timeline"], s.muted),
    ]
    fig, ax = s.canvas(7.6, 4.1, xlim=(0, 17.6), ylim=(0.0, 9.5))
    for k, (name, pages, colour) in enumerate(parts):
        row, col = divmod(k, 4)
        x, top = 2.2 + col * 4.4, 8.9 - row * 4.7
        s.box(ax, x, top, 4.0, 0.85, name, colour=colour, filled=True, size=8, weight="bold")
        for i, page in enumerate(pages):
            s.label(ax, x, top - 1.0 - i * 0.75, page, colour=s.ink, ha="center", va="center", size=7)
        if col < 3:
            s.arrow(ax, (x + 2.05, top), (x + 2.35, top), colour=s.ink)
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
