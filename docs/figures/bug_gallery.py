"""Figures of the bug-gallery page, computed with the snippets the guards test."""

from __future__ import annotations

import torch

from snippets.foundations.masks import causal_mask


def causal_with_a_cache(s):
    """Four new queries over ten cached keys: SDPA's is_causal against the lower-right mask."""
    n, m = 4, 10
    upper_left = torch.ones(n, m, dtype=torch.bool).tril()  # what is_causal=True builds
    lower_right = causal_mask(n, m)  # the last N queries see every earlier key
    fig, axes = s.figure(7.4, 2.2, ncols=2, adjust={"left": 0.07, "right": 0.98, "bottom": 0.05,
                                                     "top": 0.72, "wspace": 0.25})
    s.mask_grid(axes[0], upper_left.numpy(), "is_causal=True: the bug", colour=s.b)
    s.mask_grid(axes[1], lower_right.numpy(), "lower-right causal mask: the fix", ylabel="")
    return fig
