# %% [markdown]
# # Example: FlashAttention in Triton
#
# This page was executed when the site was built, on a CPU: the Triton kernels
# of the [FlashAttention page](../efficiency/flash-triton.md) ran through
# Triton's interpreter, which executes each program of the grid in Python. That
# is far too slow to time, but it runs the very code a GPU compiles, so the
# numbers below check the arithmetic, not the speed. Letters follow the
# [notation](../notation.md) page.

# %%
import os

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cpu":  # before triton is first imported: its kernels then run on CPU tensors
    os.environ.setdefault("TRITON_INTERPRET", "1")

import matplotlib.pyplot as plt
import torch.nn.functional as F
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from snippets.efficiency.flash_triton import flash_attention_lse

torch.manual_seed(0)
torch.set_num_threads(1)
print(f"torch {torch.__version__} on {device}, TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET', '0')}")

# %% [markdown]
# ## The kernel against SDPA
#
# Causal attention with more keys than queries ($N = 24$, $M = 40$: the queries
# are the last 24 positions), float16, tiles of 16 queries by 16 keys. The
# reference is `F.scaled_dot_product_attention` in float32 with a lower-right
# mask. The backward recomputes each tile of probabilities from the saved
# log-sum-exp.

# %%
N, M, d = 24, 40, 16
q, k, v = (torch.randn(1, 2, n, d, dtype=torch.float16, device=device, requires_grad=True) for n in (N, M, M))
out, lse = flash_attention_lse(q, k, v, causal=True, block_m=16, block_n=16)
do = torch.randn_like(out)
out.backward(do)

mask = torch.ones(N, M, dtype=torch.bool, device=device).tril(diagonal=M - N)  # True = may attend
ref_in = [t.detach().float().requires_grad_() for t in (q, k, v)]
ref = F.scaled_dot_product_attention(*ref_in, attn_mask=mask)
ref.backward(do.float())
for name, a, b in [("out", out, ref), ("dq", q.grad, ref_in[0].grad), ("dk", k.grad, ref_in[1].grad),
                   ("dv", v.grad, ref_in[2].grad)]:
    print(f"{name}: max |kernel - SDPA| = {(a.float() - b).abs().max().item():.2e}")
scores = (q.float() @ k.float().transpose(-2, -1) / d**0.5).masked_fill(~mask, float("-inf"))
print(f"saved log-sum-exp vs torch.logsumexp: {(lse - scores.logsumexp(-1)).abs().max().item():.2e}")
print(f"saved per (batch, head): {N * d} output values + {N} log-sum-exps; never the {N} x {M} = {N * M} probabilities")

# %% [markdown]
# ## Which tiles each program computes
#
# One program owns a tile of queries (a row of the grid) and walks along the
# key tiles. With a causal mask, tiles wholly above the triangle are never
# loaded, tiles wholly below it need no mask, and only the tiles the diagonal
# crosses need one (FlashAttention-2 runs the two kinds in separate loops; the
# kernel here masks every tile it loads, which is shorter and a little slower).
# With $N \ne M$ the triangle sits at the lower right.

# %%
def tile_kinds(n, m, block_m, block_n):
    """0 = skipped, 1 = computed with a mask, 2 = computed whole."""
    allowed = torch.ones(n, m, dtype=torch.bool).tril(diagonal=m - n)
    rows, cols = -(-n // block_m), -(-m // block_n)
    kinds = torch.zeros(rows, cols, dtype=torch.long)
    for i in range(rows):
        for j in range(cols):
            tile = allowed[i * block_m:(i + 1) * block_m, j * block_n:(j + 1) * block_n]
            kinds[i, j] = 0 if not tile.any() else (2 if tile.all() else 1)
    return kinds


# alt: Two grids of tiles, query tiles down and key tiles across. Left, N = M = 512 with 64 by 64 tiles: the tiles above the diagonal are grey (skipped), the diagonal tiles orange (masked), those below blue (computed whole), so a little over half the tiles are computed. Right, N = 256 queries and M = 512 keys: the computed region is shifted right, so the triangle ends in the lower-right corner and every query sees the first 256 keys.
fig, axes = plt.subplots(1, 2, figsize=(10, 4.4))
cmap = ListedColormap(["#bbbbbb", "#ff9f43", "#2e86de"])
for ax, (n, m) in zip(axes, [(512, 512), (256, 512)]):
    kinds = tile_kinds(n, m, 64, 64)
    ax.imshow(kinds.numpy(), cmap=cmap, vmin=0, vmax=2, extent=(0, m, n, 0))
    ax.set_xticks(range(0, m + 1, 64))
    ax.set_yticks(range(0, n + 1, 64))
    ax.grid(color="white", linewidth=1.5)
    ax.tick_params(labelsize=7)
    share = (kinds > 0).float().mean().item()
    ax.set(title=f"N={n}, M={m}: {share:.0%} of tiles computed", xlabel="key position", ylabel="query position")
fig.legend(handles=[Patch(color=c, label=l) for c, l in zip(cmap.colors, ["skipped", "masked", "whole"])],
           loc="lower center", ncol=3, frameon=False)
fig.tight_layout(rect=(0, 0.06, 1, 1))
plt.show()
