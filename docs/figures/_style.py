"""Shared drawing kit for the teaching pages' figures (hooks/figures.py).

Every figure is drawn twice, once per palette, on a transparent background:
``Style("light")`` inks dark on Material's white page, ``Style("dark")`` inks
light on its slate page. The same accents in both, lightened for the dark one.
"""

from __future__ import annotations

import math

from matplotlib.colors import LinearSegmentedColormap, to_rgba
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullLocator
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

COLOURS = {
    "light": {
        "ink": "#1f1f1f", "muted": "#5f6368", "faint": "#e3e5ea", "paper": "#ffffff",
        "a": "#3949ab", "b": "#d84315", "c": "#2e7d32", "d": "#8e24aa",
    },
    "dark": {
        "ink": "#e8eaed", "muted": "#aab0bb", "faint": "#363b47", "paper": "#1e2129",
        "a": "#8c9eff", "b": "#ffab76", "c": "#81c995", "d": "#e1a6f0",
    },
}


class Style:
    """Colours, matplotlib settings and small drawing helpers for one palette."""

    def __init__(self, palette: str):
        if palette not in COLOURS:
            raise ValueError(f"palette must be 'light' or 'dark', got {palette!r}")
        self.palette = palette
        for key, value in COLOURS[palette].items():
            setattr(self, key, value)
        self.accents = [self.a, self.b, self.c, self.d]
        self.cmap = LinearSegmentedColormap.from_list(f"fg-{palette}", [self.faint, self.a])
        self.rc = {
            "svg.fonttype": "none",  # text stays text: small files, the page's own font
            "svg.hashsalt": "field-guide",  # the same ids on every build
            "font.family": "sans-serif",
            "font.size": 9,
            "text.color": self.ink,
            "axes.edgecolor": self.muted,
            "axes.labelcolor": self.ink,
            "axes.titlesize": 9.5,
            "axes.titleweight": "bold",
            "xtick.color": self.muted,
            "ytick.color": self.muted,
            "xtick.labelcolor": self.ink,
            "ytick.labelcolor": self.ink,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "legend.frameon": False,
            "lines.linewidth": 1.8,
        }

    # -------------------------------------------------------------- figures
    def figure(self, width: float, height: float, ncols: int = 1, nrows: int = 1, adjust=None, **kw):
        # Fixed margins, not constrained layout: laying out text twice per
        # figure would double the drawing time of the build.
        fig = Figure(figsize=(width, height))
        margins = {"left": 0.1, "right": 0.97, "top": 0.9, "bottom": 0.18, "wspace": 0.35}
        fig.subplots_adjust(**{**margins, **(adjust or {})})
        axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
        flat = [ax for row in axes for ax in row]
        return fig, (flat[0] if len(flat) == 1 else flat)

    def canvas(self, width: float, height: float, xlim=(0, 10), ylim=(0, 4)):
        """A blank drawing area in data units, for diagrams of boxes and arrows."""
        fig = Figure(figsize=(width, height))
        ax = fig.add_axes((0, 0, 1, 1))
        ax.set_xlim(*xlim)
        ax.set_ylim(*ylim)
        ax.set_aspect("equal")
        ax.axis("off")
        return fig, ax

    def log_axes(self, ax, x: bool = True, y: bool = True, base: int = 2):
        """Log scales with plain tick labels (matplotlib's default typesets each
        label as TeX, which costs more than the rest of the figure)."""
        for on, axis, setter in ((x, ax.xaxis, ax.set_xscale), (y, ax.yaxis, ax.set_yscale)):
            if not on:
                continue
            setter("log", base=base)
            axis.set_major_formatter(FuncFormatter(_short_number))
            axis.set_minor_locator(NullLocator())

    # -------------------------------------------------------------- grids
    def mask_grid(self, ax, mask, title: str = "", colour: str | None = None, xlabel="key j", ylabel="query i"):
        """A boolean (N, M) mask as a grid: filled = may attend, empty = blocked."""
        colour = to_rgba(colour or self.a)
        n, m = mask.shape
        # One image and two line collections, not N * M patches: drawing time
        # stays flat as grids grow.
        rgba = [[colour if bool(mask[i, j]) else (0, 0, 0, 0) for j in range(m)] for i in range(n)]
        ax.imshow(rgba, extent=(0, m, n, 0), interpolation="none", aspect="equal")
        ax.hlines(range(n + 1), 0, m, colors=self.muted, linewidth=0.5)
        ax.vlines(range(m + 1), 0, n, colors=self.muted, linewidth=0.5)
        self._grid_axes(ax, n, m, title, xlabel, ylabel)

    def heat(self, ax, values, title: str = "", xlabel="key j", ylabel="query i", annotate=False, fmt="{:.2f}",
             vmin=None, vmax=None, cmap=None):
        """A real (N, M) matrix as coloured cells."""
        values = values.detach().float().cpu().numpy() if hasattr(values, "detach") else values
        n, m = values.shape
        image = ax.imshow(values, cmap=cmap or self.cmap, vmin=vmin, vmax=vmax,
                          extent=(0, m, n, 0), interpolation="nearest", aspect="equal")
        if annotate:
            hi = float(values.max()) if vmax is None else vmax
            lo = float(values.min()) if vmin is None else vmin
            for i in range(n):
                for j in range(m):
                    v = float(values[i, j])
                    if not math.isfinite(v):
                        continue
                    v = v + 0.0  # no "-0.00"
                    strong = (v - lo) > 0.55 * (hi - lo + 1e-12)
                    text = fmt.format(v).replace("-0.00", "0.00").replace("-0.0", "0.0")
                    ax.text(j + 0.5, i + 0.5, "0" if text.strip("-0.") == "" else text, ha="center", va="center", fontsize=7,
                            color=self.paper if strong else self.ink)
        self._grid_axes(ax, n, m, title, xlabel, ylabel)
        return image

    def _grid_axes(self, ax, n, m, title, xlabel, ylabel):
        ax.set_xlim(0, m)
        ax.set_ylim(n, 0)
        ax.set_aspect("equal")
        ax.set_xticks([j + 0.5 for j in range(m)], [str(j) for j in range(m)])
        ax.set_yticks([i + 0.5 for i in range(n)], [str(i) for i in range(n)])
        ax.tick_params(length=0, labelsize=7)
        for side in ax.spines.values():
            side.set_visible(False)
        ax.xaxis.set_ticks_position("top")
        ax.xaxis.set_label_position("top")
        if title:
            ax.set_title(title, pad=18)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)

    # -------------------------------------------------------------- diagrams
    def box(self, ax, x, y, w, h, text, colour=None, filled=False, size=9, weight="normal"):
        """A rounded box centred on (x, y)."""
        colour = colour or self.ink
        ax.add_patch(FancyBboxPatch(
            (x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.12",
            facecolor=colour if filled else "none", edgecolor=colour, linewidth=1.3,
        ))
        ax.text(x, y, text, ha="center", va="center", fontsize=size, weight=weight,
                color=self.paper if filled else self.ink)

    def arrow(self, ax, start, end, colour=None, style="-|>", rad=0.0, width=1.3, dashed=False):
        ax.add_patch(FancyArrowPatch(
            start, end, arrowstyle=style, mutation_scale=10, color=colour or self.muted, linewidth=width,
            connectionstyle=f"arc3,rad={rad}", linestyle="--" if dashed else "-", shrinkA=0, shrinkB=0,
        ))

    def label(self, ax, x, y, text, colour=None, size=8, **kw):
        ax.text(x, y, text, color=colour or self.muted, fontsize=size, **kw)


def _short_number(value: float, _position=None) -> str:
    """1k, 64k, 1M for powers of two (sizes); three digits for anything else."""
    whole = int(value)
    if whole == value and whole >= 1024 and whole & (whole - 1) == 0:
        for limit, suffix in ((2**30, "G"), (2**20, "M"), (2**10, "k")):
            if whole >= limit:
                return f"{whole // limit}{suffix}"
    return f"{value:.3g}"
