"""Plotting helpers shared by the executed examples (not a page of the site).

Figures get an opaque white background and dark ink, so they read the same in
the light and the dark palette (the dark palette frames them in white).
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt

plt.rcParams.update(
    {
        "figure.facecolor": "white",
        "axes.facecolor": "white",
        "savefig.facecolor": "white",
        "savefig.transparent": False,
        "text.color": "#1f1f1f",
        "axes.labelcolor": "#1f1f1f",
        "xtick.color": "#1f1f1f",
        "ytick.color": "#1f1f1f",
        "figure.dpi": 110,
        "font.size": 10,
    }
)


def attention_heatmap(
    weights,
    queries: Sequence[str] | None = None,
    keys: Sequence[str] | None = None,
    *,
    title: str = "",
    ax=None,
    cmap: str = "viridis",
    annotate: bool = False,
):
    """Draw an (N, M) weight matrix: queries down the side, keys along the top.

    Args:
        weights: a 2-D tensor or array of attention weights.
        queries: labels of the N rows.
        keys: labels of the M columns.
        title: the axes title.
        ax: draw into this axes; a new figure is made when None.
        cmap: a matplotlib colormap name.
        annotate: print each weight in its cell.

    Returns:
        The matplotlib axes.
    """
    w = weights.detach().float().cpu().numpy() if hasattr(weights, "detach") else weights
    if ax is None:
        n, m = w.shape
        _, ax = plt.subplots(figsize=(max(3.0, 0.55 * m + 1.5), max(2.5, 0.45 * n + 1.0)))
    im = ax.imshow(w, cmap=cmap, vmin=0.0, aspect="auto")
    if keys is not None:
        ax.set_xticks(range(len(keys)), keys, rotation=45, ha="right")
    if queries is not None:
        ax.set_yticks(range(len(queries)), queries)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if title:
        ax.set_title(title)
    if annotate:
        for i in range(w.shape[0]):
            for j in range(w.shape[1]):
                ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center",
                        color="white" if w[i, j] < 0.6 * w.max() else "black", fontsize=7)
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return ax
