"""Figures of the softmax-that-forgets page, computed with the snippet it teaches."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from snippets.linear.softmax_that_forgets import forget_gate_bias, stick_breaking_weights


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
