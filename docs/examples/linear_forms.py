# %% [markdown]
# # Example: gated linear attention, the delta rule and SSD, three forms each
#
# This page was executed when the site was built. It runs
# [gated linear attention](../linear/gated-linear-attention.md),
# [DeltaNet and Gated DeltaNet](../linear/delta-rule.md) and
# [Mamba-2's SSD](../linear/state-space-duality.md) as a recurrence, as a
# masked matrix and in chunks, prints how far apart the forms are in float64,
# and draws SSD's 1-semiseparable mask. Letters follow the
# [notation](../notation.md) page.

# %%
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from snippets.linear.delta_rule import delta_rule_chunked, delta_rule_parallel, delta_rule_recurrent
from snippets.linear.gated_linear_attention import gla_chunked, gla_parallel, gla_recurrent
from snippets.linear.state_space_duality import ssd_attention, ssd_chunked, ssd_mask, ssd_recurrent
from _plotting import attention_heatmap

torch.manual_seed(0)
print(f"torch {torch.__version__}")

# %% [markdown]
# ## Three forms, one function
#
# 48 tokens, chunks of 16, float64. The largest difference between two forms
# should be a few units of float64's rounding, about $10^{-15}$.

# %%
B, H, N, d_k, d_v = 1, 2, 48, 8, 8
dt = torch.float64
q, k, v = torch.randn(B, H, N, d_k, dtype=dt), F.normalize(torch.randn(B, H, N, d_k, dtype=dt), dim=-1), torch.randn(B, H, N, d_v, dtype=dt)
g_channel = -0.3 * torch.rand(B, H, N, d_k, dtype=dt)  # GLA: one log-decay per key channel
g_head = -0.3 * torch.rand(B, H, N, dtype=dt)  # Gated DeltaNet: one per head
beta = torch.rand(B, H, N, dtype=dt)


def spread(*outs):
    return max((o - outs[0]).abs().max().item() for o in outs[1:])


print(f"GLA             max difference {spread(gla_recurrent(q, k, v, g_channel), gla_parallel(q, k, v, g_channel), gla_chunked(q, k, v, g_channel, chunk_size=16)):.1e}")
print(f"DeltaNet        max difference {spread(delta_rule_recurrent(q, k, v, beta), delta_rule_parallel(q, k, v, beta), delta_rule_chunked(q, k, v, beta, chunk_size=16)):.1e}")
print(f"Gated DeltaNet  max difference {spread(delta_rule_recurrent(q, k, v, beta, g_head), delta_rule_parallel(q, k, v, beta, g_head), delta_rule_chunked(q, k, v, beta, g_head, chunk_size=16)):.1e}")
x, step = torch.randn(B, H, N, d_v, dtype=dt), 0.2 * torch.rand(B, H, N, dtype=dt)
A = -torch.tensor([0.5, 2.0], dtype=dt)
b, c = torch.randn(B, H, N, 16, dtype=dt), torch.randn(B, H, N, 16, dtype=dt)
print(f"SSD             max difference {spread(ssd_recurrent(x, step, A, b, c), ssd_attention(x, step, A, b, c), ssd_chunked(x, step, A, b, c, chunk_size=16)):.1e}")

# %% [markdown]
# ## The delta rule overwrites
#
# Write two values under one unit key with $\beta = 1$, then read with that
# key. The delta rule returns the second value; a purely additive state (GLA
# with no decay) returns their sum.

# %%
key = F.normalize(torch.randn(1, 1, 2, 4, dtype=dt), dim=-1)[:, :, :1].expand(1, 1, 2, 4)
vals = torch.tensor([[[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]]], dtype=dt)
delta = delta_rule_recurrent(key, key, vals, torch.ones(1, 1, 2, dtype=dt), scale=1.0)[0, 0, -1]
additive = gla_recurrent(key, key, vals, torch.zeros(1, 1, 2, 4, dtype=dt), scale=1.0)[0, 0, -1]
print(f"values written: {vals[0, 0, 0].tolist()} then {vals[0, 0, 1].tolist()}")
print(f"delta rule reads {[round(t, 6) for t in delta.tolist()]}; additive state reads {[round(t, 6) for t in additive.tolist()]}")

# %% [markdown]
# ## SSD's mask
#
# Left: the mask $L_{ts} = a_{s+1} \cdots a_t$ of one head for 24 tokens.
# Token 12 has a large step $\Delta$, so the decay across it is strong and the
# mask fades sharply on its far side: the model has chosen to forget there.
# Right: the whole matrix $L \odot C B^\top$ that multiplies $\Delta X$, signed.

# %%
# alt: Two 24 by 24 matrices. Left, the SSD mask: zero above the diagonal, one on the diagonal, values fading to the lower left, with a sharp drop for every entry whose query is after token 12 and whose key is before it. Right, the mask times C B transpose, positive and negative entries in a red-blue map, also zero above the diagonal and faint beyond token 12.
n = 24
step1 = torch.full((1, 1, n), 0.05, dtype=dt)
step1[..., 12] = 3.0
mask = ssd_mask(step1, torch.tensor([-1.0], dtype=dt))[0, 0]
b1, c1 = torch.randn(1, 1, n, 4, dtype=dt), torch.randn(1, 1, n, 4, dtype=dt)
full = mask * (c1 @ b1.transpose(-2, -1))[0, 0]
fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
attention_heatmap(mask, ax=axes[0], title="1-semiseparable mask L")
lim = full.abs().max().item()
im = axes[1].imshow(full.numpy(), cmap="RdBu_r", vmin=-lim, vmax=lim)
axes[1].set_title("L * (C B^T)")
axes[1].set_xlabel("key (attended to)")
axes[1].set_ylabel("query (attending)")
fig.colorbar(im, ax=axes[1], fraction=0.046, pad=0.04)
fig.tight_layout()
plt.show()
ranks = [torch.linalg.matrix_rank(mask[s:, : s + 1]).item() for s in range(1, n)]
print(f"rank of every block on or below the diagonal: {sorted(set(ranks))}; rank of L: {torch.linalg.matrix_rank(mask).item()}")
