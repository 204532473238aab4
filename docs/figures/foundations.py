"""Figures of the foundations pages, computed with the snippets they teach."""

from __future__ import annotations

import math

import torch
from matplotlib.patches import Rectangle

from snippets.foundations.masks import causal_mask, combine_masks, padding_mask
from snippets.foundations.positional_encoding import sinusoidal_positional_encoding
from snippets.foundations.scaled_dot_product import scaled_dot_product_attention


def sdpa_steps(s):
    """Scores, scaled scores and softmax weights of one small example."""
    g = torch.Generator().manual_seed(3)
    d = 16
    q = torch.randn(4, d, generator=g)
    k = torch.randn(6, d, generator=g)
    v = torch.randn(6, 3, generator=g)
    raw = q @ k.T
    _, weights = scaled_dot_product_attention(q, k, v)
    fig, axes = s.figure(7.2, 2.8, ncols=3, adjust={"left": 0.05, "top": 0.74, "bottom": 0.02})
    lim = float(raw.abs().max())
    s.heat(axes[0], raw, "scores Q Kᵀ", annotate=True, fmt="{:.0f}", vmin=-lim, vmax=lim)
    s.heat(axes[1], raw / math.sqrt(d), "scaled by 1/√d (d = 16)", annotate=True, fmt="{:.1f}",
           vmin=-lim, vmax=lim)
    s.heat(axes[2], weights, "softmax over each row", annotate=True, vmin=0, vmax=1)
    return fig


def scale_spread(s):
    """Why divide by sqrt(d): the spread of q.k grows with d."""
    g = torch.Generator().manual_seed(0)
    widths = [2, 4, 8, 16, 32, 64, 128, 256]
    raw, scaled = [], []
    for d in widths:
        q = torch.randn(500, d, generator=g)
        k = torch.randn(500, d, generator=g)
        dots = (q * k).sum(-1)
        raw.append(float(dots.std()))
        scaled.append(float((dots / math.sqrt(d)).std()))
    fig, ax = s.figure(5.2, 2.4, adjust={"left": 0.12, "bottom": 0.2})
    ax.plot(widths, raw, "o-", color=s.b, label="std of q·k")
    ax.plot(widths, scaled, "o-", color=s.a, label="std of q·k / √d")
    s.log_axes(ax, y=False)
    ax.set_xlabel("head width d (entries of q and k drawn from N(0, 1))")
    ax.set_ylabel("standard deviation")
    ax.legend()
    return fig


def mask_kinds(s):
    """Causal, padding, both, and the lower-right causal mask for N < M."""
    causal = causal_mask(5, 5)
    keys = padding_mask(torch.tensor([3]), max_len=5)  # (1, M)
    both = combine_masks(causal, keys)[0, 0]  # (1, 1, N, M) -> (N, M)
    cached = causal_mask(2, 5)
    fig, axes = s.figure(8.0, 2.6, ncols=4, adjust={"left": 0.04, "top": 0.68, "bottom": 0.1, "wspace": 0.3})
    s.mask_grid(axes[0], causal, "causal (N = M = 5)")
    s.mask_grid(axes[1], keys.expand(5, 5), "padding (3 real keys)", colour=s.c)
    s.mask_grid(axes[2], both, "causal AND padding", colour=s.d)
    s.mask_grid(axes[3], cached, "causal, N = 2 < M = 5\n(lower right: KV cache)", colour=s.b)
    fig.text(0.5, 0.0, "filled = True = may attend;  empty = blocked", ha="center", va="bottom",
             color=s.muted, fontsize=8)
    return fig


def sinusoids(s):
    """The sinusoidal encoding: fast waves in the first dimensions, slow ones later."""
    pe = sinusoidal_positional_encoding(48, 32)
    fig, axes = s.figure(7.4, 2.6, ncols=2, gridspec_kw={"width_ratios": [1.25, 1]}, adjust={"left": 0.08, "top": 0.88, "bottom": 0.17})
    image = axes[0].imshow(pe.T.numpy(), cmap="RdBu_r" if s.palette == "light" else "coolwarm", vmin=-1, vmax=1,
                           aspect="auto", interpolation="nearest")
    axes[0].set_xlabel("position t")
    axes[0].set_ylabel("dimension")
    axes[0].set_title("PE(t) for D = 32, positions 0 to 47")
    fig.colorbar(image, ax=axes[0], shrink=0.8)
    for dim, colour in zip((0, 8, 16), (s.a, s.b, s.c)):
        axes[1].plot(pe[:, dim], color=colour, label=f"dimension {dim}")
    axes[1].set_xlabel("position t")
    axes[1].set_title("one sine per pair of dimensions")
    axes[1].legend(fontsize=7, loc="lower left")
    return fig


def dtype_bits(s):
    """How float32, bfloat16 and float16 spend their bits, from torch.finfo."""
    layouts = [
        ("float32", 8, 23, torch.float32),
        ("bfloat16", 8, 7, torch.bfloat16),
        ("float16", 5, 10, torch.float16),
    ]
    fig, ax = s.canvas(7.4, 2.3, xlim=(0, 40), ylim=(0, 7.2))
    for row, (name, exponent, mantissa, dtype) in enumerate(layouts):
        y = 5.6 - row * 2.2
        info = torch.finfo(dtype)
        assert info.bits == 1 + exponent + mantissa
        x = 5.5
        for width, colour, text in ((1, s.d, "sign"), (exponent, s.b, f"exponent {exponent}"),
                                    (mantissa, s.a, f"mantissa {mantissa}")):
            ax.add_patch(Rectangle(
                (x, y - 0.5), width * 0.75, 1.0, facecolor=colour, edgecolor=s.paper, linewidth=1))
            if width > 3:
                ax.text(x + width * 0.375, y, text, ha="center", va="center", fontsize=7, color=s.paper)
            x += width * 0.75
        ax.text(0.2, y, name, va="center", fontsize=9, weight="bold", color=s.ink)
        ax.text(x + 0.5, y, f"max {info.max:.3g}, eps {info.eps:.2g}", va="center", fontsize=8, color=s.ink)
    return fig
