# %% [markdown]
# # Example: sparse attention, masks and cost
#
# This page was executed when the site was built. It draws which keys the
# three branches of [native sparse attention](../linear/sparse-attention.md)
# and DeepSeek's top-$k$ selection let each query read, checks that each is
# dense causal attention when it keeps every key, and plots the cost of one
# decoded token against the context length. Letters follow the
# [notation](../notation.md) page.

# %%
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from snippets.linear.sparse_attention import (
    attend_masked,
    causal_keys,
    compressed_attention,
    dense_decode_cost,
    dsa_decode_cost,
    lightning_indexer,
    nsa_attention,
    nsa_decode_cost,
    selection_mask,
    topk_mask,
    topk_sparse_attention,
    window_keys,
)

torch.manual_seed(0)
print(f"torch {torch.__version__}")

# %% [markdown]
# ## Which keys each query reads
#
# 48 tokens, blocks of 8. The compressed branch sees one summary per complete
# block (drawn here on the tokens it summarises); the selected branch reads
# the two most important blocks, one of them always the query's own; the
# window reads the last 6 keys; the indexer's top-8 picks single tokens.

# %%
# alt: Four 48 by 48 boolean masks side by side, key along the bottom, query down the side, all empty above the diagonal. Compressed: a staircase of 8-wide blocks that appear once complete. Selected: each row has its own block plus one earlier block. Window: a band 6 wide along the diagonal. Top-8: each row has up to 8 scattered keys.
n, block = 48, 8
q, k, v = (torch.randn(1, 2, n, 16, dtype=torch.float64) for _ in range(3))
_, weights = compressed_attention(q, k, v, block)
seen = (weights[0, 0] > 0).repeat_interleave(block, dim=-1)[:, :n]
selected = selection_mask(weights, n, n, block, n_select=2)[0]
window = window_keys(n, n, 6)
scores = lightning_indexer(torch.randn(1, n, 4, 8), torch.randn(1, n, 8), torch.rand(1, n, 4))
top = topk_mask(scores, 8)[0]
fig, axes = plt.subplots(1, 4, figsize=(14, 3.8))
for ax, mask, title in zip(axes, (seen, selected, window, top), ("compressed (blocks seen)", "selected (n = 2)", "window (w = 6)", "indexer top-8")):
    ax.imshow(mask.numpy(), cmap="Greys", vmin=0, vmax=1)
    ax.set_title(title)
    ax.set_xlabel("key")
axes[0].set_ylabel("query")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Keep every key, get dense attention back

# %%
dense = F.scaled_dot_product_attention(q, k, v, is_causal=True)
gates = torch.zeros(1, 2, n, 3, dtype=torch.float64)
gates[..., 1] = 1.0
checks = {
    "top-k, k = N": topk_sparse_attention(q, k, v, torch.randn(1, n, n, dtype=torch.float64), n),
    "compressed, blocks of 1": compressed_attention(q, k, v, 1)[0],
    "selected, every block": nsa_attention(q, k, v, gates, block=8, n_select=n // 8),
    "window, w = N": attend_masked(q, k, v, window_keys(n, n, n)),
}
for name, out in checks.items():
    print(f"{name:26s} max |sparse - dense| = {(out - dense).abs().max().item():.1e}")
print(f"causal mask rows keep {causal_keys(4, 4).sum(-1).tolist()} keys")

# %% [markdown]
# ## Cost of one decoded token against the context length
#
# One layer with 128 heads, $d_{qk} = 192$, $d_v = 128$ and 1152 bytes of
# cache per token (sizes chosen for the picture, not a model's). DSA: $k$ =
# 2048, an indexer of 64 heads of width 128 (the DeepSeek-V3.2-Exp release).
# NSA: blocks of 64, 16 selected blocks, a window of 512 (illustrative). The
# cache each method stores is the same; these are the operations and bytes
# one step reads.

# %%
# alt: Two log-log plots against context length from 1 thousand to 1 million tokens. Left, operations per decoded token: dense grows linearly; DSA follows dense up to 2048 tokens, then its attention stays flat and only its indexer grows, ending about 5 times below dense at a million tokens; NSA flattens and then grows slowly with the number of block summaries, ending far below both. Right, bytes read per token: dense highest, then DSA, whose indexer keys still grow with the context, then NSA.
conf = dict(n_heads=128, d_qk=192, d_v=128, kv_bytes_per_token=1152)
lengths = [2 ** p for p in range(10, 21)]
costs = {
    "dense": [dense_decode_cost(L, **conf) for L in lengths],
    "DSA (k = 2048)": [dsa_decode_cost(L, **conf) for L in lengths],
    "NSA": [nsa_decode_cost(L, block=64, n_select=16, window=512, **conf) for L in lengths],
}
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
for name, cs in costs.items():
    axes[0].loglog(lengths, [c.flops for c in cs], marker="o", label=name)
    axes[1].loglog(lengths, [c.read_bytes for c in cs], marker="o", label=name)
axes[0].set_ylabel("operations per token and layer")
axes[1].set_ylabel("cache bytes read per token and layer")
for ax in axes:
    ax.set_xlabel("context length (tokens)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
fig.tight_layout()
plt.show()
for name, cs in costs.items():
    print(f"{name:15s} at 131072 tokens: {cs[7].keys:7d} keys, {cs[7].flops / costs['dense'][7].flops:.3f} of dense operations")
