"""Figures of the distributed pages, computed with the snippets they teach."""

from __future__ import annotations

from matplotlib.colors import to_rgba
from matplotlib.patches import Patch

from snippets.distributed.context_parallel import causal_work_per_rank, shard_positions


def ring_causal_layouts(s):
    """Which score entries each rank computes under a causal mask: contiguous against zigzag."""
    n, world = 16, 4
    n_local = n // world
    fig, axes = s.figure(7.4, 3.1, ncols=3, gridspec_kw={"width_ratios": [1, 1, 0.95]},
                         adjust={"left": 0.08, "right": 0.99, "top": 0.8, "bottom": 0.2, "wspace": 0.35})
    work = {layout: causal_work_per_rank(n, world, layout) for layout in ("contiguous", "zigzag")}
    for ax, layout in zip(axes, work):
        chunk = n_local // (1 if layout == "contiguous" else 2)  # the tile edge of the ring's step
        owner = {}  # global position -> rank that holds it
        for rank in range(world):
            for p in shard_positions(n_local, rank, world, layout).tolist():
                owner[p] = rank
        rgba = [[(0, 0, 0, 0)] * n for _ in range(n)]
        drawn = [0] * world
        for i in range(n):
            for j in range(n):
                # the ring computes a whole chunk-by-chunk tile if any pair in it is causal
                first_key, last_query = (j // chunk) * chunk, (i // chunk) * chunk + chunk - 1
                if first_key <= last_query:
                    rgba[i][j] = to_rgba(s.accents[owner[i]], 1.0 if j <= i else 0.3)
                    drawn[owner[i]] += 1
        if drawn != work[layout]:
            raise ValueError(f"{layout}: the picture shows {drawn} entries per rank, the ring counts {work[layout]}")
        ax.imshow(rgba, extent=(0, n, n, 0), interpolation="none", aspect="equal")
        ax.hlines(range(0, n + 1, chunk), 0, n, colors=s.muted, linewidth=0.6)
        ax.vlines(range(0, n + 1, chunk), 0, n, colors=s.muted, linewidth=0.6)
        ax.set_xlim(0, n)
        ax.set_ylim(n, 0)
        ax.set_xticks([0, 4, 8, 12, 16])
        ax.set_yticks([c + chunk / 2 for c in range(0, n, chunk)],
                      [f"rank {owner[c]}" for c in range(0, n, chunk)])
        ax.tick_params(length=0, labelsize=6.5)
        ax.xaxis.set_ticks_position("top")
        for side in ax.spines.values():
            side.set_visible(False)
        ax.set_title(layout, fontsize=8.5, pad=16)
        ax.set_xlabel("key position j", fontsize=7.5)
    ax = axes[2]
    width = 0.38
    for k, (layout, colour) in enumerate((("contiguous", s.muted), ("zigzag", s.a))):
        ax.bar([r + (k - 0.5) * width for r in range(world)], work[layout], width=width, color=colour,
               label=layout)
    ax.set_xticks(range(world), [f"rank {r}" for r in range(world)])
    ax.tick_params(axis="x", length=0, labelsize=7)
    ax.set_ylabel("score entries computed", fontsize=7.5)
    ax.set_title("work per rank (the ring's count)", fontsize=8.5, pad=16)
    ax.legend(fontsize=7, loc="upper left")
    handles = [Patch(facecolor=s.ink, label="allowed (j ≤ i)"),
               Patch(facecolor=to_rgba(s.ink, 0.3), label="computed in a visible tile, then masked")]
    fig.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.06, 0.0), ncol=2, fontsize=7,
               handlelength=1.2)
    fig.text(0.36, 0.985, f"N = {n}, P = {world} ranks, causal; colour: the rank that holds the query",
             ha="center", va="top", color=s.muted, fontsize=8)
    return fig
