# %% [markdown]
# # Example: scaled dot-product attention
#
# This page was executed when the site was built. It runs the guide's
# from-scratch function from
# [scaled dot-product attention](../foundations/scaled-dot-product.md),
# checks it against PyTorch's, and draws the weights of one sentence.

# %%
import torch
import torch.nn.functional as F

from snippets.foundations.devices import pick_device
from snippets.foundations.scaled_dot_product import causal_mask, scaled_dot_product_attention
from _plotting import attention_heatmap

device = pick_device()
torch.manual_seed(0)
print(f"torch {torch.__version__} on {device}")

# %% [markdown]
# ## Shapes
#
# A batch of $B = 2$ sequences, $H = 4$ heads of width $d = 16$; 6 queries
# against 9 keys.

# %%
B, H, N, M, d = 2, 4, 6, 9, 16
q = torch.randn(B, H, N, d, device=device)
k = torch.randn(B, H, M, d, device=device)
v = torch.randn(B, H, M, d, device=device)

out, weights = scaled_dot_product_attention(q, k, v)
print("q", tuple(q.shape), "k", tuple(k.shape), "v", tuple(v.shape))
print("out", tuple(out.shape), "weights", tuple(weights.shape))
print("every row of weights sums to 1:", torch.allclose(weights.sum(-1), torch.ones(B, H, N, device=device)))

reference = F.scaled_dot_product_attention(q, k, v)
print("max |ours - PyTorch|:", (out - reference).abs().max().item())

# %% [markdown]
# ## One sentence
#
# Each token gets a made-up 8-dimensional embedding, and the tokens attend to
# each other through the same function (queries, keys and values are all the
# embeddings: no learned projections yet, those come with
# self-attention). The words that share an embedding direction attend to
# each other; the diagonal is strong because every token matches itself.

# %%
tokens = "The Professor who supervised the student published the paper".split()
torch.manual_seed(3)
x = torch.randn(len(tokens), 8)
# Nudge related words towards one another so the map has something to show.
x[tokens.index("Professor")] += 1.5 * x[tokens.index("published")]
x[tokens.index("student")] += 1.5 * x[tokens.index("supervised")]
x[tokens.index("paper")] += 1.5 * x[tokens.index("published")]

_, w = scaled_dot_product_attention(x, x, x)
print("weights", tuple(w.shape))

# %%
# alt: Heatmap of scaled dot-product attention weights between the nine tokens of "The Professor who supervised the student published the paper"; each row is a query token and sums to one, the diagonal is bright, and Professor, published and paper attend to each other.
attention_heatmap(w, tokens, tokens, title="softmax(X Xᵀ / √d) for one sentence");

# %% [markdown]
# ## A causal mask
#
# The same sentence with the lower-right causal mask: each token may attend to
# itself and the tokens before it, so the weights above the diagonal are
# exactly zero.

# %%
_, w_causal = scaled_dot_product_attention(x, x, x, is_causal=True)
print(causal_mask(4, 4).int())
print("weights above the diagonal:", w_causal.triu(1).abs().max().item())

# %%
# alt: Heatmap of causal attention weights for the same sentence; everything above the diagonal is zero, and the first token attends only to itself.
attention_heatmap(w_causal, tokens, tokens, title="the same, with a causal mask");
