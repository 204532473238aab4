"""Figures of the architecture pages: the block's residual paths, the encoder-decoder wiring."""

from __future__ import annotations


def _column(s, ax, x, title, steps):
    """A vertical stack of boxes (bottom to top) joined by arrows."""
    ax.text(x, 9.55, title, ha="center", va="center", fontsize=9.5, weight="bold", color=s.ink)
    for (y, text, colour, filled), (y_next, *_rest) in zip(steps, steps[1:] + [(None,)]):
        s.box(ax, x, y, 3.0, 0.8, text, colour=colour, filled=filled, size=8.5)
        if y_next is not None:
            s.arrow(ax, (x, y + 0.4), (x, y_next - 0.4))


def _residual(s, ax, x, y_from, y_to, side=1.9):
    """The skip path: around the branch, into the sum."""
    xs = x + side
    s.arrow(ax, (x, y_from), (xs, y_from), colour=s.b, style="-", width=1.6)
    s.arrow(ax, (xs, y_from), (xs, y_to), colour=s.b, style="-", width=1.6)
    s.arrow(ax, (xs, y_to), (x + 0.45, y_to), colour=s.b, width=1.6)


def pre_post_norm(s):
    """Post-norm (2017) and pre-norm blocks: where LayerNorm sits on the residual path."""
    fig, ax = s.canvas(7.4, 4.3, xlim=(0, 17.2), ylim=(0, 10))
    post = [
        (0.6, "x", s.muted, False), (2.1, "attention", s.a, False), (3.3, "+", s.b, False),
        (4.5, "LayerNorm", s.d, True), (5.8, "feed-forward", s.c, False), (7.0, "+", s.b, False),
        (8.3, "LayerNorm", s.d, True),
    ]
    pre = [
        (0.6, "x", s.muted, False), (1.7, "LayerNorm", s.d, True), (2.9, "attention", s.a, False),
        (4.1, "+", s.b, False), (5.3, "LayerNorm", s.d, True), (6.5, "feed-forward", s.c, False),
        (7.7, "+", s.b, False), (8.8, "out", s.muted, False),
    ]
    _column(s, ax, 4.0, "post-norm: norm after the sum", post)
    _column(s, ax, 12.2, "pre-norm: norm inside the branch", pre)
    _residual(s, ax, 4.0, 1.35, 3.3)
    _residual(s, ax, 4.0, 5.05, 7.0)
    _residual(s, ax, 12.2, 1.1, 4.1)
    _residual(s, ax, 12.2, 4.55, 7.7)
    s.label(ax, 6.1, 2.2, "residual", colour=s.b)
    s.label(ax, 14.3, 2.2, "residual: x passes\nuntouched to the top", colour=s.b)
    return fig


def encoder_decoder_wiring(s):
    """The encoder's output is the key and value of every decoder block's cross-attention."""
    fig, ax = s.canvas(7.4, 3.6, xlim=(0, 17), ylim=(0, 8.2))
    s.box(ax, 3.5, 0.7, 3.4, 0.8, "source tokens (M)", colour=s.muted)
    s.box(ax, 3.5, 2.6, 3.8, 1.2, "self-attention\n(padding mask)", colour=s.a)
    s.box(ax, 3.5, 4.4, 3.8, 0.9, "feed-forward", colour=s.c)
    s.box(ax, 3.5, 6.4, 3.8, 0.9, "memory (B, M, D)", colour=s.a, filled=True)
    for y0, y1 in ((1.1, 2.0), (3.2, 3.95), (4.85, 5.95)):
        s.arrow(ax, (3.5, y0), (3.5, y1))
    ax.text(3.5, 7.6, "encoder (x L)", ha="center", fontsize=9.5, weight="bold", color=s.ink)

    s.box(ax, 12.5, 0.7, 3.6, 0.8, "target tokens (N)", colour=s.muted)
    s.box(ax, 12.5, 2.3, 4.2, 1.0, "causal self-attention", colour=s.b)
    s.box(ax, 12.5, 4.1, 4.2, 1.2, "cross-attention\nQ from here, K, V = memory", colour=s.d)
    s.box(ax, 12.5, 5.8, 4.2, 0.8, "feed-forward", colour=s.c)
    s.box(ax, 12.5, 7.2, 3.6, 0.7, "next-token logits", colour=s.muted)
    for y0, y1 in ((1.1, 1.8), (2.8, 3.5), (4.7, 5.4), (6.2, 6.85)):
        s.arrow(ax, (12.5, y0), (12.5, y1))
    s.arrow(ax, (5.4, 6.4), (10.4, 4.3), colour=s.d, width=1.8)
    ax.text(15.1, 3.2, "decoder (x L)", ha="center", fontsize=9.5, weight="bold", color=s.ink, rotation=90)
    return fig
