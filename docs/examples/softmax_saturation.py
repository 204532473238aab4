# %% [markdown]
# # Example: why the scores are divided by √d
#
# The argument on the
# [scaled dot-product page](../foundations/scaled-dot-product.md#why-divide-by-sqrtd)
# says that a dot product of two random $d$-dimensional vectors has variance
# $d$, so unscaled scores grow with the head width, the softmax saturates, and
# its gradient with respect to the scores vanishes. This page measures all
# three on random queries and keys, the last one with autograd.

# %%
import math

import matplotlib.pyplot as plt
import torch

torch.manual_seed(0)
widths = [4, 16, 64, 256, 1024]
M = 64  # keys per query
rows = []
for d in widths:
    q = torch.randn(2000, d)
    k = torch.randn(M, d)
    scores = q @ k.T  # (2000, d) @ (d, M) -> (2000, M)
    upstream = torch.randn(2000, M)  # a stand-in for the gradient the loss sends back to w
    for label, s in (("unscaled", scores), ("scaled", scores / math.sqrt(d))):
        s = s.detach().requires_grad_()  # differentiate with respect to the scores
        w = torch.softmax(s, dim=-1)
        (w * upstream).sum().backward()  # s.grad = J^T upstream, row by row
        grad_norm = s.grad.norm(dim=-1).mean().item()
        w = w.detach()
        entropy = -(w * w.clamp_min(1e-30).log()).sum(-1).mean().item()
        rows.append((d, label, s.var().item(), w.max(-1).values.mean().item(), entropy, grad_norm))

print(f"{'d':>5} {'scores':>9} {'variance':>9} {'mean max weight':>16} {'entropy':>8} {'|grad|':>8}")
for d, label, var, top, ent, grad in rows:
    print(f"{d:>5} {label:>9} {var:>9.1f} {top:>16.3f} {ent:>8.2f} {grad:>8.4f}")
print(f"uniform attention over {M} keys has entropy log({M}) = {math.log(M):.2f}")

# %% [markdown]
# The unscaled variance tracks $d$; the scaled one stays near 1. As the
# unscaled scores spread out, the largest weight of each row approaches 1 and
# the entropy approaches 0: the softmax has become a hard arg-max.
#
# The last column is the gradient. For each row, autograd sends a random
# upstream gradient $g$ back through the softmax and we record the norm of
# what reaches the scores, $\lVert J^\top g \rVert$ with
# $J_{ij} = \partial w_i / \partial s_j = w_i(\delta_{ij} - w_j)$ (its mean
# square is the squared Frobenius norm of $J$). With the scale it stays nearly
# flat whatever $d$ is. Without it, it shrinks once the scores spread out
# (from about $d = 16$ on), because a nearly one-hot $w$ makes every entry of
# $J$ nearly zero; at $d = 1024$ it is about a third of the scaled value. This
# is the gradient that should teach the scores which key to prefer.

# %%
# alt: Three line plots against head width d on a log axis. Left: the variance of unscaled scores grows in proportion to d while scaled scores stay at variance 1. Middle: the entropy of the attention weights falls towards zero without scaling and stays near its maximum with scaling. Right: the norm of the gradient that reaches the scores through the softmax falls with d without scaling and stays flat with scaling.
fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
for label, style in (("unscaled", "o-"), ("scaled", "s--")):
    sel = [r for r in rows if r[1] == label]
    axes[0].plot([r[0] for r in sel], [r[2] for r in sel], style, label=label)
    axes[1].plot([r[0] for r in sel], [r[4] for r in sel], style, label=label)
    axes[2].plot([r[0] for r in sel], [r[5] for r in sel], style, label=label)
axes[0].set(xscale="log", yscale="log", xlabel="head width d", ylabel="variance of the scores")
axes[1].set(xscale="log", xlabel="head width d", ylabel="entropy of the weights (nats)")
axes[1].axhline(math.log(M), color="grey", lw=0.8, ls=":", label="uniform")
axes[2].set(xscale="log", yscale="log", xlabel="head width d", ylabel="gradient norm at the scores")
for ax in axes:
    ax.legend()
fig.tight_layout()
