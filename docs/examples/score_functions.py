# %% [markdown]
# # Example: score functions side by side
#
# The [score functions](../history/score-functions.md) page compares four ways to
# score a query against a key: Bahdanau's additive score, Luong's dot and general
# scores, and the Transformer's scaled dot product. This page measures, on random
# unit-variance queries and keys of growing width $d$,
#
# 1. the variance of each score (the claim: $\mathrm{Var}(q \cdot k) = d$),
# 2. how peaked the softmax becomes (mean largest weight and entropy), with and
#    without the $1/\sqrt{d}$ scale.
#
# All scores come from the site's snippets. Letters follow the
# [notation](../notation.md) page.

# %%
import math

import matplotlib.pyplot as plt
import torch

from snippets.foundations.scaled_dot_product import scaled_dot_product_attention
from snippets.history.additive_attention import AdditiveAttention
from snippets.history.luong_attention import LuongAttention

torch.manual_seed(0)
torch.set_num_threads(1)  # small matrices: one thread is faster on a shared CPU
widths = [4, 16, 64, 256, 1024]
N, M = 64, 32  # queries and keys per trial

# %% [markdown]
# ## 1. Variance of the scores
#
# The additive and general scores have weights; they keep PyTorch's default
# initialisation, which is what a model starts training from.

# %%
variance = {"dot": [], "general": [], "additive": [], "scaled dot": []}
with torch.no_grad():
    for d in widths:
        q = torch.randn(1, N, d)  # (B, N, d), unit-variance entries
        k = torch.randn(1, M, d)  # (B, M, d)
        dot = LuongAttention(d, "dot").scores(q, k)  # (1, N, M)
        general = LuongAttention(d, "general").scores(q, k)  # (1, N, M)
        additive = AdditiveAttention(d, d, d).scores(q, k)  # (1, N, M)
        variance["dot"].append(dot.var().item())
        variance["general"].append(general.var().item())
        variance["additive"].append(additive.var().item())
        variance["scaled dot"].append((dot / math.sqrt(d)).var().item())

print(f"{'d':>6} " + " ".join(f"{name:>11}" for name in variance))
for row, d in enumerate(widths):
    print(f"{d:>6} " + " ".join(f"{variance[name][row]:>11.3f}" for name in variance))

# %% [markdown]
# The dot score's variance tracks $d$ (4, 16, 64, ...), as the page derives. The
# general score grows with $d$ too (its default $W_a$ has entries of variance
# $1/(3d)$, so $W_a k$ has variance about $1/3$ and the score about $d/3$). The
# additive score stays small at every width: a $\tanh$ is bounded, and
# $|e| \le \lVert v_a \rVert_1$. Dividing the dot score by $\sqrt{d}$ pins its
# variance at 1.

# %%
# alt: Log-log plot of score variance against the width d. The dot and general scores rise in straight lines (variance proportional to d); the additive and scaled dot scores stay flat near or below 1.
fig, ax = plt.subplots(figsize=(5.5, 3.6))
for name, marker in zip(variance, "osD^"):
    ax.plot(widths, variance[name], marker=marker, label=name)
ax.plot(widths, widths, color="grey", linestyle=":", label="d (theory for dot)")
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xlabel("width d")
ax.set_ylabel("variance of the scores")
ax.set_title("Score variance against width")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 2. Softmax saturation
#
# A uniform row over $M = 32$ keys has entropy $\ln 32 \approx 3.47$ and
# largest weight $1/32$. A one-hot row has entropy 0 and largest weight 1, and
# its gradient is almost zero: the model can no longer learn which keys matter.
# The scaled weights come from the site's `scaled_dot_product_attention`; the
# unscaled ones from the same function with `scale=1.0`.

# %%
def entropy(weights: torch.Tensor) -> float:
    """Mean entropy of the rows, in nats."""
    return -(weights * weights.clamp_min(1e-30).log()).sum(-1).mean().item()


rows = []
with torch.no_grad():
    for d in widths:
        q, k = torch.randn(1, N, d), torch.randn(1, M, d)
        v = torch.zeros(1, M, 1)
        _, w_scaled = scaled_dot_product_attention(q, k, v)  # scale = 1/sqrt(d)
        _, w_plain = scaled_dot_product_attention(q, k, v, scale=1.0)  # Luong's dot score
        rows.append((d, entropy(w_plain), w_plain.max(-1).values.mean().item(),
                     entropy(w_scaled), w_scaled.max(-1).values.mean().item()))

print(f"{'d':>6} {'entropy':>9} {'max w':>7} | {'entropy':>9} {'max w':>7}")
print(f"{'':>6} {'unscaled':>17} | {'scaled by 1/sqrt(d)':>17}")
for d, h_plain, top_plain, h_scaled, top_scaled in rows:
    print(f"{d:>6} {h_plain:>9.3f} {top_plain:>7.3f} | {h_scaled:>9.3f} {top_scaled:>7.3f}")
print(f"uniform over {M} keys: entropy {math.log(M):.3f}, max weight {1 / M:.3f}")

# %%
# alt: Line plot of the mean softmax entropy against width d. Without the scale the entropy falls from about 2 towards 0 as d grows (rows become one-hot); with the 1/sqrt(d) scale it stays flat near 3, just under the uniform limit ln 32 drawn as a dotted line.
fig, ax = plt.subplots(figsize=(5.5, 3.4))
ax.plot(widths, [r[1] for r in rows], marker="o", label="unscaled q.k")
ax.plot(widths, [r[3] for r in rows], marker="s", label="scaled q.k / sqrt(d)")
ax.axhline(math.log(M), color="grey", linestyle=":", label=f"uniform, ln {M}")
ax.set_xscale("log", base=2)
ax.set_xlabel("width d")
ax.set_ylabel("mean entropy of a row (nats)")
ax.set_ylim(bottom=0)
ax.set_title("Softmax saturation with and without the scale")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# Without the scale, rows get closer to one-hot as $d$ grows; with it, the
# entropy does not depend on $d$. The
# [softmax saturation example](softmax_saturation.py) follows the gradient as
# well.
