# %% [markdown]
# # Example: ALiBi
#
# This page was executed when the site was built. It prints the slopes, draws
# the bias of every head of an 8-head model, shows how far back each head
# looks when the content gives it no preference, and checks the SDPA path
# against the written-out equation. See the [ALiBi page](../attention/alibi.md);
# letters follow the [notation](../notation.md) page.

# %%
import math

import matplotlib.pyplot as plt
import torch

from snippets.attention.alibi import alibi_attention, alibi_bias, alibi_slopes

torch.manual_seed(0)
print(f"torch {torch.__version__}")

# %% [markdown]
# ## The slopes
#
# A power-of-2 head count gets $2^{-8h/H}$; other counts follow the paper's
# interleaving rule.

# %%
for h in (8, 12, 16):
    print(f"H = {h:2d}:", " ".join(f"2^{math.log2(m):.1f}" for m in alibi_slopes(h).tolist()))

# %% [markdown]
# ## The bias, head by head
#
# $-m_h (i - j)$ on the past, $-\infty$ (drawn blank) on the future. The first
# head's penalty grows fast, the last head's barely at all.

# %%
# alt: Eight 16 by 16 heatmaps, one per head, of the ALiBi bias. Each is blank above the diagonal (future keys), zero on the diagonal, and darker further below it; the darkening is steep for head 1 (slope 1/2) and nearly invisible for head 8 (slope 1/256).
H, N = 8, 16
slopes = alibi_slopes(H)
bias = alibi_bias(slopes, N, N)
print("bias", tuple(bias.shape), "= (H, N, M)")
fig, axes = plt.subplots(2, 4, figsize=(11, 5.5))
for h, ax in enumerate(axes.flat):
    shown = bias[h].masked_fill(torch.isinf(bias[h]), float("nan"))
    im = ax.imshow(shown.numpy(), cmap="magma", vmin=-(N - 1) / 2, vmax=0)
    ax.set_title(f"head {h + 1}, m = 1/{round(1 / slopes[h].item())}")
    ax.set_xticks([])
    ax.set_yticks([])
fig.colorbar(im, ax=axes, fraction=0.025, pad=0.02, label="bias added to the score")
plt.show()

# %% [markdown]
# ## How far back each head looks
#
# With zero queries every score is equal, and only the bias is left: the
# weights of the last query decay like $e^{-m_h \delta}$ with the distance
# $\delta$. Steep heads are local; shallow heads spread over the whole context.

# %%
# alt: Line plot of the attention weight of the last of 64 queries against how far back the key is, one line per head. Head 1 puts almost all weight on the newest few keys; the lines flatten head by head until head 8 is nearly uniform.
N = 64
q = torch.zeros(1, H, N, 8)
k = torch.randn(1, H, N, 8)
v = torch.eye(N).expand(1, H, N, N)  # output row i is the weight row of query i
weights = alibi_attention(q, k, v, slopes)[0, :, -1, :].flip(-1)  # (H, M), distance 0 first
fig, ax = plt.subplots(figsize=(8, 3.5))
for h in range(H):
    ax.plot(range(N), weights[h], label=f"m = 1/{round(1 / slopes[h].item())}")
ax.set_xlabel("distance back from the query")
ax.set_ylabel("weight")
ax.set_yscale("log")
ax.legend(ncol=2, fontsize=8)
fig.tight_layout()
plt.show()
half = (weights.cumsum(-1) < 0.5).sum(-1) + 1
print("keys holding half the weight, per head:", half.tolist())

# %% [markdown]
# ## SDPA with a float mask equals the equation

# %%
B, N, M, d = 2, 5, 9, 16
q, k, v = torch.randn(B, H, N, d), torch.randn(B, H, M, d), torch.randn(B, H, M, d)
out = alibi_attention(q, k, v, slopes)
scores = q @ k.transpose(-2, -1) / math.sqrt(d) + alibi_bias(slopes, N, M)
reference = torch.softmax(scores, dim=-1) @ v
print("out", tuple(out.shape), "= (B, H, N, d)")
print(f"max |SDPA path - written out| = {(out - reference).abs().max().item():.1e}")
