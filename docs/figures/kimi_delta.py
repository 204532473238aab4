"""Figures of the Kimi Delta Attention page, computed with the snippet it teaches."""

from __future__ import annotations

import torch

from snippets.linear.kimi_delta_attention import kda_recurrent


def kda_channel_memory(s):
    """One key written at t = 0, then nothing: each key channel forgets at its own rate."""
    d_k, n = 8, 40
    alpha = torch.linspace(0.99, 0.6, d_k, dtype=torch.float64)  # one decay per channel
    k = torch.full((1, 1, n, d_k), d_k ** -0.5, dtype=torch.float64)  # unit norm
    v = torch.zeros(1, 1, n, 1, dtype=torch.float64)
    v[..., 0, 0] = 1.0
    beta = torch.zeros(1, 1, n, dtype=torch.float64)
    beta[..., 0] = 1.0  # write once, then only decay
    g = alpha.log().expand(1, 1, n, d_k)
    # q = k reads back what the first token stored; the scale is 1 to read it whole
    kda = kda_recurrent(k, k, v, beta, g.contiguous(), scale=1.0)[0][0, 0, :, 0]
    scalar = g.mean(-1, keepdim=True).expand_as(g).contiguous()  # one gate, same mean
    gdn = kda_recurrent(k, k, v, beta, scalar, scale=1.0)[0][0, 0, :, 0]
    steps = torch.arange(n, dtype=torch.float64)
    stored = (alpha[:, None] ** steps) * d_k ** -0.5  # S_t[c, 0] = k_c * alpha_c^t

    fig, axes = s.figure(7.4, 3.0, ncols=2, adjust={"left": 0.08, "right": 0.98, "bottom": 0.17,
                                                     "top": 0.86, "wspace": 0.3})
    axes[0].imshow(stored.numpy(), aspect="auto", cmap=s.cmap, interpolation="nearest")
    axes[0].set_title("what each key channel still holds")
    axes[0].set_xlabel("token t")
    axes[0].set_ylabel("key channel c (slow to fast)")
    axes[1].plot(steps.numpy(), kda.numpy(), color=s.a, label="KDA: a decay per channel")
    axes[1].plot(steps.numpy(), gdn.numpy(), color=s.b, label="one gate (same mean log decay)")
    axes[1].set_yscale("log")
    axes[1].set_xlabel("token t")
    axes[1].set_title("what q = k reads back")
    axes[1].legend(loc="lower left", fontsize=8)
    return fig
