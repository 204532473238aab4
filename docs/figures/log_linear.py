"""Figures of the log-linear attention page, computed with the snippet it teaches."""

from __future__ import annotations

import math

from matplotlib.colors import to_rgba
from matplotlib.patches import Patch

from snippets.linear.log_linear_attention import fenwick_levels


def fenwick_buckets(s):
    """Which level each (query, key) pair falls in, and how many buckets each query has."""
    n, long = 16, 64
    levels = fenwick_levels(n).tolist()
    colours = [s.muted, s.a, s.b, s.c, s.d]  # level 0 .. 4
    rgba = [[to_rgba(colours[lv]) if lv >= 0 else (0, 0, 0, 0) for lv in row] for row in levels]
    counts = fenwick_levels(long)
    buckets = [len(set(counts[t, : t + 1].tolist())) for t in range(long)]
    bound = [math.floor(math.log2(t)) + 2 if t else 1 for t in range(long)]

    fig, axes = s.figure(7.6, 3.9, ncols=2, adjust={"left": 0.06, "right": 0.98, "bottom": 0.13,
                                                     "top": 0.82, "wspace": 0.25})
    ax = axes[0]
    ax.imshow(rgba, extent=(0, n, n, 0), interpolation="none", aspect="equal")
    ax.hlines(range(n + 1), 0, n, colors=s.faint, linewidth=0.5)
    ax.vlines(range(n + 1), 0, n, colors=s.faint, linewidth=0.5)
    for t, row in enumerate(levels):
        for j, lv in enumerate(row[: t + 1]):
            ax.text(j + 0.5, t + 0.5, str(lv), ha="center", va="center", fontsize=5.5,
                    color=s.paper)
    s._grid_axes(ax, n, n, "level l(t, s) = bit_length(t XOR s)", "key s", "query t")
    ax.legend(handles=[Patch(color=c, label=f"level {lv}") for lv, c in enumerate(colours)],
              loc="upper right", fontsize=7, handlelength=1.0)

    ax = axes[1]
    ax.step(range(long), buckets, where="mid", color=s.a, label="buckets = popcount(t) + 1")
    ax.plot(range(long), bound, color=s.b, linestyle="--", linewidth=1.2,
            label="bound floor(log2 t) + 2")
    ax.set_xlabel("query t")
    ax.set_ylabel("buckets (states read)")
    ax.set_title("touching the bound at t = 2^m - 1")
    ax.set_ylim(0, 8)
    ax.legend(loc="lower right", fontsize=7)
    return fig
