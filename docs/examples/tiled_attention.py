# %% [markdown]
# # Example: tiled attention and the online softmax
#
# This page was executed when the site was built. It follows the online softmax
# over one row of scores, then checks
# [tiled attention](../efficiency/tiled-attention.md) against
# `F.scaled_dot_product_attention` for awkward block sizes. Letters follow the
# [notation](../notation.md) page.

# %%
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from snippets.efficiency.tiled_attention import online_softmax, tiled_attention

torch.manual_seed(0)
print(f"torch {torch.__version__}")

# %% [markdown]
# ## One row, one entry at a time
#
# The running maximum $m_t$ only ever grows; the running sum $\ell_t$ drops
# whenever $m_t$ jumps, because everything seen so far is re-measured against
# the new maximum ($\ell_{t-1} e^{m_{t-1} - m_t}$).

# %%
scores = torch.tensor([1.0, 3.0, 0.5, 6.0, 2.0, 5.5, -1.0, 7.0])
m, l = float("-inf"), 0.0
ms, ls = [], []
for t, s in enumerate(scores.tolist()):
    m_new = max(m, s)
    l = l * torch.exp(torch.tensor(m - m_new)).item() + torch.exp(torch.tensor(s - m_new)).item()
    m = m_new
    ms.append(m)
    ls.append(l)
    print(f"t={t}: s={s:5.1f}  m={m:4.1f}  l={l:.4f}")
print("online == softmax:", torch.allclose(online_softmax(scores), torch.softmax(scores, -1)))

# %%
# alt: Two line plots over the eight steps of the online softmax. Left: the running maximum, a staircase rising from 1 to 7. Right: the running sum, which grows between jumps of the maximum and falls back towards 1 to 2 at each jump.
fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
axes[0].step(range(len(ms)), ms, where="post", marker="o")
axes[0].plot(range(len(scores)), scores, "x", color="gray", label="score $s_t$")
axes[0].set(xlabel="step t", ylabel="value", title="running maximum $m_t$")
axes[0].legend()
axes[1].plot(range(len(ls)), ls, marker="o", color="tab:orange")
axes[1].set(xlabel="step t", ylabel=r"$\ell_t$", title=r"running sum $\ell_t$")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Tiled attention equals SDPA
#
# Block sizes that do not divide $N$ or $M$, and $N \ne M$ with the causal mask
# aligned to the lower right (built explicitly for SDPA).

# %%
q = torch.randn(2, 4, 37, 16)
k = torch.randn(2, 4, 53, 16)
v = torch.randn(2, 4, 53, 16)
lower_right = torch.ones(37, 53, dtype=torch.bool).tril(diagonal=53 - 37)
for block_k, block_q in [(1, None), (7, 5), (16, 16), (100, None)]:
    for causal in (False, True):
        out = tiled_attention(q, k, v, is_causal=causal, block_size_k=block_k, block_size_q=block_q)
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=lower_right if causal else None)
        print(f"block_k={block_k:>3} block_q={str(block_q):>4} causal={causal!s:>5}: "
              f"shape {tuple(out.shape)}, max |diff| = {(out - ref).abs().max():.1e}")

# %% [markdown]
# ## Memory of the scores
#
# The explicit formula holds a $(B, H, N, M)$ score matrix; the loop holds one
# $(B, H, b_q, b_k)$ tile. For $B = 1$, $H = 8$, float32:

# %%
for n in (1024, 4096, 16384):
    full = 8 * n * n * 4
    tile = 8 * 256 * 512 * 4
    print(f"N = M = {n:>5}: scores {full / 2**20:8.0f} MiB, one 256 x 512 tile {tile / 2**20:.0f} MiB")
