# %% [markdown]
# # Example: linear attention
#
# This page was executed when the site was built. It checks the three forms of
# [linear attention](../efficiency/linear-attention.md) (kernel trick,
# cumulative sum, token-by-token recurrence) against the quadratic form, then
# puts its weights next to softmax attention's for the same queries and keys.
# Letters follow the [notation](../notation.md) page.

# %%
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from snippets.efficiency.linear_attention import (
    feature_map,
    linear_attention,
    linear_attention_step,
)
from _plotting import attention_heatmap

torch.manual_seed(0)
print(f"torch {torch.__version__}")

# %% [markdown]
# ## Three forms, one answer
#
# The quadratic form builds the $N \times M$ matrix $\phi(Q)\phi(K)^\top$,
# normalises its rows and multiplies by $V$; the other forms never build it.

# %%
B, H, N, d, d_v = 2, 4, 64, 16, 16
q, k, v = torch.randn(B, H, N, d), torch.randn(B, H, N, d), torch.randn(B, H, N, d_v)


def quadratic(q, k, v, causal):
    a = feature_map(q) @ feature_map(k).transpose(-2, -1)  # (B, H, N, d) @ (B, H, d, N) -> (B, H, N, N)
    if causal:
        a = a.tril()
    return (a @ v) / (a.sum(-1, keepdim=True) + 1e-6)


for causal in (False, True):
    out = linear_attention(q, k, v, causal=causal)
    err = (out - quadratic(q, k, v, causal)).abs().max().item()
    print(f"causal={causal!s:5}  out {tuple(out.shape)}  max |fast - quadratic| = {err:.1e}")

state, steps = None, []
for t in range(N):
    out_t, state = linear_attention_step(q[..., t, :], k[..., t, :], v[..., t, :], state)
    steps.append(out_t)
recurrent = torch.stack(steps, dim=-2)
s, z = state
print(f"recurrent: state S {tuple(s.shape)}, z {tuple(z.shape)} after {N} tokens; "
      f"max |recurrent - cumulative sum| = "
      f"{(recurrent - linear_attention(q, k, v, causal=True)).abs().max().item():.1e}")

# %% [markdown]
# ## How the weights look
#
# The same $q$ and $k$ for 12 tokens, scaled up so that softmax has clear
# favourites. Softmax attention (left) concentrates each row on a few keys;
# linear attention (right) spreads it out. Its rows still sum to 1, but
# $\phi(q)\cdot\phi(k)$ grows only linearly with the scores' inputs.

# %%
# alt: Two 12 by 12 heatmaps of attention weights for the same queries and keys, on one colour scale from 0 to 1. Left, softmax: most rows have one or two bright cells. Right, linear attention: every row is a spread of similar, dim values, none above about 0.2.
n = 12
q1, k1 = 2.0 * torch.randn(n, 8), 2.0 * torch.randn(n, 8)
soft = torch.softmax(q1 @ k1.T / 8 ** 0.5, dim=-1)
a = feature_map(q1) @ feature_map(k1).T
lin = a / a.sum(-1, keepdim=True)
fig, axes = plt.subplots(1, 2, figsize=(9, 4))
attention_heatmap(soft, ax=axes[0], title="softmax attention")
attention_heatmap(lin, ax=axes[1], title="linear attention (elu + 1)")
for ax in axes:
    ax.images[0].set_clim(0.0, 1.0)  # one colour scale for both
fig.tight_layout()
plt.show()
print(f"largest weight per row, mean over rows: softmax {soft.max(-1).values.mean():.2f}, "
      f"linear {lin.max(-1).values.mean():.2f} (uniform would be {1 / n:.2f})")
print(f"rank of the weights: softmax {torch.linalg.matrix_rank(soft).item()}, "
      f"linear {torch.linalg.matrix_rank(lin).item()} (d = 8, N = {n})")
