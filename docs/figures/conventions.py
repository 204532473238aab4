"""Figures of the conventions page, drawn with the converters it teaches."""

from __future__ import annotations

from snippets.efficiency.conventions import band_mask, flash_window


def windows_and_corners(s):
    """One window, two readings; one causal flag, two corners (N = 4, M = 8)."""
    fig, axes = s.figure(7.6, 3.0, ncols=4, adjust={"left": 0.05, "right": 0.97,
                                                    "bottom": 0.08, "top": 0.74,
                                                    "wspace": 0.35})
    left, right = flash_window(3)
    panels = [
        (band_mask(8, 8, left=left, right=right), "window 3 (site, HF):\n3 keys"),
        (band_mask(8, 8, left=3, right=0), "window_size=(3, 0)\n(FA): 4 keys"),
        (band_mask(4, 8, align="upper_left"), "is_causal (SDPA):\nupper left"),
        (band_mask(4, 8), "causal (FA):\nlower right"),
    ]
    for i, (ax, (mask, title)) in enumerate(zip(axes, panels)):
        s.mask_grid(ax, mask.numpy(), title, colour=s.a if i % 2 == 0 else s.b,
                    ylabel="query i" if i == 0 else "")
    return fig
