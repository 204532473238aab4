"""Figures of the KV-cache economy page, computed with the snippets it teaches."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from snippets.efficiency.kv_eviction import evict, h2o_keep, snapkv_keep
from snippets.efficiency.kv_quantization import fake_quantize, kivi_keys


def cache_savings(s):
    """Key quantization error per grouping, and attention error against the eviction budget."""
    g = torch.Generator().manual_seed(0)
    k = torch.randn(1, 4, 96, 64, generator=g)
    k[..., [3, 17, 40]] += 15  # a few key channels with large magnitude, as in trained models
    fig, axes = s.figure(7.4, 3.0, ncols=2, adjust={"left": 0.09, "right": 0.98, "bottom": 0.17,
                                                     "top": 0.87, "wspace": 0.3})
    bits = [2, 3, 4]
    channel = [float((kivi_keys(k, b, 32) - k).norm() / k.norm()) for b in bits]
    token = [float((fake_quantize(k.view(1, 4, 96, 2, 32), b, dim=-1).view_as(k) - k).norm()
                   / k.norm()) for b in bits]
    x = torch.arange(len(bits)).tolist()
    axes[0].bar([i - 0.2 for i in x], channel, 0.4, color=s.a, label="per channel (KIVI keys)")
    axes[0].bar([i + 0.2 for i in x], token, 0.4, color=s.b, label="per token")
    axes[0].set_xticks(x, [f"{b} bits" for b in bits])
    axes[0].set_title("key error with outlier channels")
    axes[0].legend(frameon=False, fontsize=7)
    t = 256
    keys = torch.randn(1, 4, t, 32, generator=g)
    values = torch.randn(1, 4, t, 32, generator=g)
    queries = keys[..., -8:, :] * 1.5  # the last prompt tokens, reading the prompt
    full = F.scaled_dot_product_attention(queries, keys, values)
    votes = torch.softmax(queries @ keys.transpose(-1, -2) / 32**0.5, -1).sum(-2)  # (1, 4, T)
    budgets = [16, 32, 64, 128, 256]
    for name, colour, pick in (
        ("H2O", s.c, lambda b: h2o_keep(votes, b, 8)),
        ("SnapKV", s.a, lambda b: snapkv_keep(queries, keys, b)),
    ):
        errors = []
        for b in budgets:
            keep = pick(b)
            out = F.scaled_dot_product_attention(queries, evict(keys, keep), evict(values, keep))
            errors.append(float((out - full).norm() / full.norm()))
        axes[1].plot(budgets, errors, marker="o", color=colour, label=name)
    axes[1].set_xscale("log", base=2)
    axes[1].set_xlabel("keys kept of 256")
    axes[1].set_title("attention error after eviction")
    axes[1].legend(frameon=False, fontsize=7)
    return fig
