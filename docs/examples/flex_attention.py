# %% [markdown]
# # Example: FlexAttention masks and their tiles
#
# This page was executed when the site was built. It draws every mask of the
# [FlexAttention page](../efficiency/flex-attention.md) from its `mask_mod`,
# the ALiBi and soft-capping `score_mod`s, and the tiles a block-sparse kernel
# computes for each pattern at a realistic length. Letters follow the
# [notation](../notation.md) page.
#
# Only plain tensor code runs here: a `mask_mod` is a function of index
# tensors, so evaluating it on broadcast `arange`s gives the dense mask. The
# tests (`tests/test_flex_attention.py`) run the same functions through
# `flex_attention` and `create_block_mask` and check that the tile counts below
# are the ones `create_block_mask` records.

# %%
import matplotlib.pyplot as plt
import torch
from matplotlib.colors import ListedColormap

from snippets.attention.alibi import alibi_slopes
from snippets.efficiency.flex_attention import (
    alibi_score_mod,
    block_tiles,
    causal_mask_mod,
    computed_block_fraction,
    dense_mask,
    document_ids_from_lengths,
    document_mask_mod,
    prefix_lm_mask_mod,
    sliding_window_mask_mod,
    soft_cap_score_mod,
)

print(f"torch {torch.__version__}")

# %% [markdown]
# ## Six masks, six small functions
#
# $N = M = 16$ unless the title says otherwise. Dark = may attend.

# %%
# alt: Six 16-column grids of which keys each query may attend. Causal: a lower triangle. Causal with 6 queries after 10 cached keys: six rows that each see the cache plus a growing triangle. Sliding window w = 4: a diagonal band four cells wide. Bidirectional window w = 3: a band five cells wide centred on the diagonal. Prefix-LM with a prefix of 5: the first five columns fully dark, then a triangle. Three packed documents of 5, 4 and 7 tokens: three triangles along the diagonal.
n = 16
patterns = {
    "causal": (causal_mask_mod(n, n), n, n),
    "causal, N = 6 after 10 cached": (causal_mask_mod(6, n), 6, n),
    "sliding window, w = 4": (sliding_window_mask_mod(4, n, n), n, n),
    "bidirectional window, w = 3": (sliding_window_mask_mod(3, n, n, causal=False), n, n),
    "prefix-LM, prefix 5": (prefix_lm_mask_mod(5), n, n),
    "documents 5 + 4 + 7": (document_mask_mod(document_ids_from_lengths([5, 4, 7])), n, n),
}
fig, axes = plt.subplots(2, 3, figsize=(11, 7))
for ax, (title, (mod, rows, cols)) in zip(axes.flat, patterns.items()):
    mask = dense_mask(mod, rows, cols)[0, 0]  # (N, M), True = may attend
    ax.imshow(mask.numpy(), cmap="Blues", vmin=0, vmax=1.3)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Two score_mods
#
# ALiBi subtracts $m_h (i - j)$ from head $h$'s score; soft-capping squashes
# every score into $(-c, c)$. A `score_mod` is just as easy to evaluate
# outside the kernel: give it a score of zero and the index grids.

# %%
# alt: Left, a 16 by 16 heatmap of the ALiBi bias for the first of 8 heads: zero on the diagonal, growing more negative further left, blank above the diagonal where the causal mask blocks. Right, the soft-cap curve c tanh(s / c) for c = 5 beside the identity line: equal near zero, flattening towards plus and minus 5.
h_count = 8
slopes = alibi_slopes(h_count)
alibi = alibi_score_mod(slopes, n, n)
i = torch.arange(n).view(-1, 1)
j = torch.arange(n).view(1, -1)
bias = alibi(torch.zeros(()), 0, torch.tensor(0), i, j)  # head 0's bias, (N, M)
bias = bias.masked_fill(~dense_mask(causal_mask_mod(n, n), n, n)[0, 0], float("nan"))

cap = 5.0
s = torch.linspace(-15, 15, 301)
capped = soft_cap_score_mod(cap)(s, 0, 0, 0, 0)

fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(10, 4))
im = ax0.imshow(bias.numpy(), cmap="viridis")
ax0.set_title(f"ALiBi bias, head 0 (slope {slopes[0].item():.3f})")
ax0.set_xlabel("key j")
ax0.set_ylabel("query i")
fig.colorbar(im, ax=ax0, fraction=0.046, pad=0.04)
ax1.plot(s, s, color="#999999", linestyle="--", label="no cap")
ax1.plot(s, capped, color="#1f77b4", label=f"c tanh(s / c), c = {cap:g}")
ax1.set_xlabel("scaled score s")
ax1.set_ylabel("score after the score_mod")
ax1.set_ylim(-16, 16)
ax1.legend()
fig.tight_layout()
plt.show()
print("largest |score| after capping:", capped.abs().max().item())

# %% [markdown]
# ## Which tiles does the kernel compute?
#
# The fused kernel works on tiles of 128 queries by 128 keys. `block_tiles`
# sorts them: skipped (no allowed pair), partial (computed, with the mask
# applied inside) and full (computed with no mask). At $N = 4096$ there are
# $32 \times 32$ tiles. The work a pattern saves is the skipped fraction.

# %%
N, block = 4096, 128
lengths = [700, 300, 1200, 500, 900, 496]  # six packed documents, 4096 tokens
assert sum(lengths) == N
big = {
    "causal": causal_mask_mod(N, N),
    "sliding window, w = 256": sliding_window_mask_mod(256, N, N),
    "sliding window, w = 1024": sliding_window_mask_mod(1024, N, N),
    "prefix-LM, prefix 1024": prefix_lm_mask_mod(1024),
    "6 packed documents": document_mask_mod(document_ids_from_lengths(lengths)),
    "bidirectional window, w = 256": sliding_window_mask_mod(256, N, N, causal=False),
}
print(f"{'pattern':32} {'computed':>9} {'partial':>8} {'allowed pairs':>14}")
tiles = {}
for name, mod in big.items():
    mask = dense_mask(mod, N, N)[0, 0]
    computed, partial = computed_block_fraction(mask, block)
    tiles[name] = block_tiles(mask, block)
    print(f"{name:32} {computed:9.1%} {partial:8.1%} {mask.float().mean().item():14.1%}")

# %% [markdown]
# The computed fraction is always above the fraction of allowed pairs: a tile
# that holds one allowed pair costs as much as a full one. A window of 256 is
# only two tiles wide, so the diagonal tiles, all partial, are most of the
# work; that is why narrow windows leave each tile little to do.

# %%
# alt: Six 32 by 32 grids of tiles, white for skipped, light blue for partial, dark blue for full. Causal: a lower triangle of full tiles with a partial diagonal. Window 256: a thin band of partial tiles with a few full tiles. Window 1024: a wider band. Prefix-LM: the first eight columns full plus a triangle. Documents: six triangles on the diagonal. Bidirectional window: a symmetric band.
colors = ListedColormap(["#ffffff", "#9ecae1", "#08519c"])
fig, axes = plt.subplots(2, 3, figsize=(11, 7.5))
for ax, (name, state) in zip(axes.flat, tiles.items()):
    ax.imshow(state.numpy(), cmap=colors, vmin=0, vmax=2)
    ax.set_title(name, fontsize=10)
    ax.set_xlabel("key tile")
    ax.set_ylabel("query tile")
fig.suptitle("white: skipped   light: partial (masked inside)   dark: full", fontsize=10)
fig.tight_layout()
plt.show()
