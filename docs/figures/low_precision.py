"""Figures of the tolerances page, computed with the snippet it teaches."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from snippets.efficiency.low_precision import fp8_attention, hadamard, ulp


def fp8_outliers(s):
    """FP8 attention's error against float64 as one channel grows, with and
    without the rotation; and the spacing of numbers in four dtypes."""
    fig, axes = s.figure(7.4, 3.0, ncols=2, adjust={"left": 0.09, "right": 0.98, "bottom": 0.17,
                                                     "top": 0.87, "wspace": 0.32})
    louds = [1, 2, 5, 10, 20, 50]
    g = torch.Generator().manual_seed(0)
    signs = torch.randint(0, 2, (64,), generator=g) * 2 - 1
    turn = hadamard(64, signs=signs, dtype=torch.float64)
    curves = {"per head": [], "per head, rotated": [], "per 32 tokens, rotated": []}
    for loud in louds:
        q, k, v = (torch.randn(1, 2, 128, 64, generator=g, dtype=torch.float64) for _ in range(3))
        q[..., 5] *= loud
        k[..., 5] *= loud
        exact = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        for name, kw in (("per head", {}), ("per head, rotated", {"rotation": turn}),
                         ("per 32 tokens, rotated", {"rotation": turn, "block": 32})):
            out = fp8_attention(q, k, v, is_causal=True, **kw)
            curves[name].append(float((out - exact).pow(2).mean().sqrt()))
    for (name, errs), colour, mark in zip(curves.items(), (s.b, s.a, s.c), ("o", "s", "^")):
        axes[0].plot(louds, errs, marker=mark, markersize=3.5, color=colour, label=name)
    axes[0].set_xscale("log")
    axes[0].set_yscale("log")
    axes[0].set_xlabel("outlier channel's scale")
    axes[0].set_ylabel("RMS error vs float64")
    axes[0].set_title("FP8 attention, one loud channel")
    axes[0].legend(frameon=False, fontsize=7)

    x = torch.logspace(-2, 2.6, 400, dtype=torch.float64)
    for (name, dtype), colour in zip((("float16", torch.float16), ("bfloat16", torch.bfloat16),
                                      ("E4M3", torch.float8_e4m3fn)), (s.c, s.a, s.b)):
        axes[1].step(x.tolist(), (ulp(x, dtype) / x).tolist(), where="post", color=colour, label=name)
    axes[1].set_xscale("log")
    axes[1].set_yscale("log")
    axes[1].set_xlabel("|x|")
    axes[1].set_ylabel("ulp(x) / |x|")
    axes[1].set_title("relative spacing of numbers")
    axes[1].set_ylim(1.5e-4, 0.5)
    axes[1].legend(frameon=False, fontsize=7, loc="lower center", ncol=3)
    return fig
