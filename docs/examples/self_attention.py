# %% [markdown]
# # Example: self-attention on one sentence
#
# This page was executed when the site was built. It runs
# [naive self-attention](../attention/naive-self-attention.md) and
# [self-attention](../attention/self-attention.md) on the nine tokens of
# "The Professor who supervised the student published the paper", with
# embeddings made up for the occasion, and draws both weight maps.

# %%
import torch
import torch.nn.functional as F

from snippets.attention.naive_self_attention import naive_self_attention
from snippets.attention.self_attention import SelfAttention
from _plotting import attention_heatmap

torch.manual_seed(0)
print(f"torch {torch.__version__}")

# %% [markdown]
# ## A made-up embedding
#
# Six hand-picked features per token: *determiner*, *person*, *verb*,
# *academic*, *relative pronoun* and *object*, plus a little seeded noise so
# that the two "the" tokens are not identical. Real embeddings are learned;
# these only give the map something to show.

# %%
tokens = "The Professor who supervised the student published the paper".split()
features = {
    #            det  person verb  acad  rel   obj
    "The":       [1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    "Professor": [0.0, 1.0, 0.0, 0.8, 0.0, 0.0],
    "who":       [0.0, 0.3, 0.0, 0.0, 1.0, 0.0],
    "supervised":[0.0, 0.0, 1.0, 0.5, 0.0, 0.0],
    "the":       [1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    "student":   [0.0, 1.0, 0.0, 0.6, 0.0, 0.2],
    "published": [0.0, 0.0, 1.0, 0.7, 0.0, 0.0],
    "paper":     [0.0, 0.0, 0.0, 0.9, 0.0, 1.0],
}
x = torch.tensor([features[t] for t in tokens]) * 2.0
x = x + 0.1 * torch.randn(x.shape)
x = x.unsqueeze(0)  # (B, N, D) = (1, 9, 6)
print("x", tuple(x.shape))

# %% [markdown]
# ## Naive: softmax(X Xᵀ) X
#
# No parameters. Tokens attend to those that share features: the two verbs to
# each other, the three determiners to each other, Professor and student to
# each other.

# %%
out, w_naive = naive_self_attention(x)
print("out", tuple(out.shape), "weights", tuple(w_naive.shape))
print("rows sum to 1:", torch.allclose(w_naive.sum(-1), torch.ones(1, 9)))
print("matches F.scaled_dot_product_attention(x, x, x, scale=1):",
      torch.allclose(out, F.scaled_dot_product_attention(x, x, x, scale=1.0), atol=1e-6))

# %%
# alt: Heatmap of naive self-attention weights over the nine tokens; bright blocks pair the three determiners (The, the, the), the two verbs supervised and published, and Professor with student, because their made-up embeddings share features; who and paper attend almost only to themselves.
attention_heatmap(w_naive[0], tokens, tokens, title="naive: softmax(X Xᵀ)");

# %% [markdown]
# ## With learned projections
#
# A `SelfAttention` layer with $d_k = 4$ and $d_v = 5$. Its weights are
# random (nothing is trained here), so the map shows the starting point of
# training, not what a trained model attends to: small random projections give
# nearly uniform weights, no longer tied to raw similarity. Training shapes
# $W_Q$ and $W_K$ until the pattern means something.

# %%
torch.manual_seed(0)
attn = SelfAttention(d_model=6, d_k=4, d_v=5).eval()
with torch.no_grad():
    out, w = attn(x)
print("out", tuple(out.shape), "weights", tuple(w.shape))
print("parameters:", sum(p.numel() for p in attn.parameters()))
q, k, v = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)
reference = attn.out_proj(F.scaled_dot_product_attention(q, k, v))
print("max |ours - PyTorch|:", (out - reference).abs().max().item())

# %%
# alt: Heatmap of single-head self-attention weights with randomly initialised query, key and value projections over the same nine tokens; every weight lies between about 0.08 and 0.17, nearly uniform, and the diagonal is not special.
attention_heatmap(w[0], tokens, tokens, title="self-attention, random W_Q, W_K, W_V");
