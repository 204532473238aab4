"""Figures of the page on positions for images, video and long context, drawn with its snippet."""

from __future__ import annotations

import torch

from snippets.modern.multimodal_rope import mrope_axes, mrope_position_ids, nope_query_scale


def position_rows(s):
    """The t, h and w ids of 3 text tokens, a 2 x 3 image and 2 text tokens."""
    ids = mrope_position_ids([3, (1, 2, 3), 2])  # (3, 11)
    fig, ax = s.figure(7.4, 2.8, adjust={"left": 0.08, "right": 0.98, "bottom": 0.05, "top": 0.7})
    s.heat(ax, ids.float(), "position ids: text, a 2 x 3 image, text", xlabel="token",
           ylabel="", annotate=True, fmt="{:.0f}")
    ax.set_yticks([0.5, 1.5, 2.5], ["t", "h", "w"])
    ax.set_xticks([i + 0.5 for i in range(11)], ["x"] * 3 + ["img"] * 6 + ["x"] * 2)
    for edge in (3, 9):
        ax.axvline(edge, color=s.b, linewidth=2)
    return fig


def frequency_axes(s):
    """Which axis turns each of 64 frequencies: Qwen2-VL's blocks, Qwen3-VL's interleave."""
    blocked = mrope_axes(64, [16, 24, 24], False)
    interleaved = mrope_axes(64, [24, 20, 20], True)
    fig, ax = s.figure(7.4, 2.0, adjust={"left": 0.14, "right": 0.98, "bottom": 0.08, "top": 0.62})
    grid = torch.stack((blocked, interleaved)).float()
    s.heat(ax, grid, "axis of each frequency i (0 = t, 1 = h, 2 = w)", xlabel="frequency i, fast to slow",
           ylabel="")
    ax.set_aspect("auto")
    ax.set_yticks([0.5, 1.5], ["Qwen2-VL", "Qwen3-VL"])
    ax.set_xticks([0.5, 16.5, 40.5, 63.5], ["0", "16", "40", "63"])
    return fig


def temperature_curve(s):
    """Llama 4's NoPE query factor against position, floor_scale 8192, attn_scale 0.1."""
    p = torch.logspace(0, 7, 400, base=10).long()
    scale = nope_query_scale(p)
    fig, ax = s.figure(5.6, 2.8, adjust={"left": 0.14, "bottom": 0.2})
    ax.plot(p.numpy(), scale.numpy(), color=s.a)
    ax.axvline(8191, color=s.muted, linestyle="--", linewidth=1)
    s.label(ax, 9500, 1.3, "p = 8191: first step", colour=s.muted)
    s.log_axes(ax, y=False, base=10)
    ax.set_xlabel("position p (0-based, cache included)")
    ax.set_ylabel("query factor")
    ax.set_title("Llama 4 NoPE layers: 1 + 0.1 log(1 + floor((p + 1) / 8192))")
    return fig
