"""Figures of the softmax-that-forgets page, computed with the snippet it teaches."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from snippets.linear.softmax_that_forgets import forget_gate_bias, path_scores, stick_breaking_weights


def forgetting_weights(s):
    """The same scores read three ways: causal softmax, FoX's gated softmax, stick-breaking."""
    g = torch.Generator().manual_seed(4)
    n = 10
    scores = torch.randn(n, n, generator=g, dtype=torch.float64) * 1.5
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    softmax = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    log_f = F.logsigmoid(torch.randn(1, 1, n, generator=g, dtype=torch.float64) + 0.5)
    fox = torch.softmax((scores + forget_gate_bias(log_f)[0, 0]).masked_fill(~causal, float("-inf")),
                        dim=-1)
    stick = stick_breaking_weights(scores)
    fig, axes = s.figure(7.4, 3.3, ncols=3, adjust={"left": 0.06, "right": 0.98, "bottom": 0.05,
                                                     "top": 0.78, "wspace": 0.35})
    s.heat(axes[0], softmax.numpy(), "causal softmax", vmin=0, vmax=1)
    s.heat(axes[1], fox.numpy(), "FoX: gates fade the past", vmin=0, vmax=1, ylabel="")
    s.heat(axes[2], stick.numpy(), "stick-breaking (rows sum to <= 1)", vmin=0, vmax=1, ylabel="")
    return fig


def path_distance(s):
    """One key and one query, the key further back each step: PaTH's score as distance grows."""
    g = torch.Generator().manual_seed(3)
    n, d = 40, 8
    e = F.normalize(torch.randn(d, generator=g, dtype=torch.float64), dim=0)
    q = e.expand(1, 1, n, d)  # the same query and key at every position: only H moves
    side = torch.randn(d, generator=g, dtype=torch.float64)
    side = F.normalize(side - (side @ e) * e, dim=0)  # a unit vector orthogonal to e
    u = 0.75 * e + (1 - 0.75**2) ** 0.5 * side  # the constant w: (w . q)^2 = 0.5625
    lines = {
        "beta = 0: NoPE, no position": (u.expand(1, 1, n, d), torch.zeros(1, 1, n)),
        "constant w, beta = 0.5": (u.expand(1, 1, n, d), torch.full((1, 1, n), 0.5)),
        "constant w, beta = 2: a reflection": (u.expand(1, 1, n, d), torch.full((1, 1, n), 2.0)),
        "data-dependent w_t, beta_t": (
            F.normalize(torch.randn(1, 1, n, d, generator=g, dtype=torch.float64), dim=-1),
            1.6 + 0.4 * torch.rand(1, 1, n, generator=g)),
    }
    fig, ax = s.figure(7.4, 3.0, adjust={"left": 0.09, "right": 0.98, "bottom": 0.17, "top": 0.88})
    steps = torch.arange(n)
    for colour, (label, (w, beta)) in zip(s.accents, lines.items()):
        score = path_scores(q, q, w, beta.double())[0, 0, :, 0]  # query i, key 0: distance i
        ax.plot(steps.numpy(), score.numpy(), color=colour, label=label, marker="o", markersize=2.5)
    ax.set_xlabel("distance i - j from the key")
    ax.set_ylabel("score of the key")
    ax.set_ylim(-1.05, 1.7)
    ax.set_title("the same unit query and key, further apart each step")
    ax.legend(loc="upper center", fontsize=7.5, ncol=2)
    return fig
