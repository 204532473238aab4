"""Figures of the trainers'-tweaks page, computed with the snippet it teaches."""

from __future__ import annotations

import torch

from snippets.modern.trainers_tweaks import (delta_kernel, exclusive_attention,
                                             multi_token_attention)


def _tokens(n=10, d=8, seed=4):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, 1, n, d, generator=g, dtype=torch.float64) for _ in range(3))


def tweak_maps(s):
    """Causal weights with a delta kernel and with MTA's key-query kernel; XSA's cosines."""
    q, k, v = _tokens()
    n = q.shape[2]
    eye = torch.eye(n, dtype=torch.float64).expand(1, 1, n, n)  # v = I: the output is the map
    plain = multi_token_attention(q, k, eye, delta_kernel(1, 2, 3, dtype=torch.float64))[0, 0]
    spread = torch.zeros(1, 2, 3, dtype=torch.float64)
    spread[0, :, 1] = 0.5  # this query and the one before, centre key
    spread[0, 1, 0] = spread[0, 1, 2] = 0.25  # and the current query's neighbouring keys
    mta = multi_token_attention(q, k, eye, spread)[0, 0]
    y = multi_token_attention(q, k, v, delta_kernel(1, 1, 1, dtype=torch.float64))[0, 0]
    z = exclusive_attention(q, k, v)[0, 0]
    cos_sa = torch.nn.functional.cosine_similarity(y, v[0, 0], dim=-1)
    cos_xsa = torch.nn.functional.cosine_similarity(z, v[0, 0], dim=-1)
    fig, axes = s.figure(8.2, 3.0, ncols=3, adjust={"left": 0.05, "right": 0.98, "bottom": 0.17,
                                                     "top": 0.76, "wspace": 0.35})
    s.heat(axes[0], plain.numpy(), "delta kernel = causal SDPA", vmin=0, vmax=1)
    s.heat(axes[1], mta.numpy(), "MTA kernel, 2 queries x 3 keys", vmin=0, vmax=1, ylabel="")
    pos = list(range(n))
    axes[2].plot(pos, cos_sa.tolist(), marker="o", color=s.a, label="attention")
    axes[2].plot(pos, cos_xsa.tolist(), marker="s", color=s.b, label="XSA")
    axes[2].axhline(0, color=s.muted, linewidth=0.8)
    axes[2].set_xlabel("token i")
    axes[2].set_ylabel("cos(output i, own value i)")
    axes[2].set_title("XSA removes the own value")
    axes[2].set_ylim(-0.6, 1.6)
    axes[2].legend(loc="upper center", ncol=2)
    return fig
