# %% [markdown]
# # Example: multi-head attention
#
# This page was executed when the site was built. It follows one batch through
# the guide's [multi-head attention](../attention/multi-head.md) module, shape by
# shape, checks the fast path against the explicit one and against
# `nn.MultiheadAttention`, and draws what each head attends to in one sentence.
# Letters follow the [notation](../notation.md) page.

# %%
import matplotlib.pyplot as plt
import torch
from torch import nn

from snippets.attention.multi_head import MultiHeadAttention
from _plotting import attention_heatmap

torch.manual_seed(0)
print(f"torch {torch.__version__}")

# %% [markdown]
# ## The sentence
#
# Nine tokens with hand-made 6-dimensional features, widened to $D = 16$ by a
# fixed random matrix so that $H = 4$ heads of width $d = 4$ fit.

# %%
tokens = "The Professor who supervised the student published the paper".split()
features = torch.tensor([
    [0.92, 0.05, 0.03, 0.02, 0.01, 0.00],  # The
    [0.04, 0.88, 0.10, 0.76, 0.05, 0.02],  # Professor
    [0.02, 0.04, 0.05, 0.03, 0.01, 0.91],  # who
    [0.03, 0.15, 0.87, 0.72, 0.06, 0.65],  # supervised
    [0.90, 0.06, 0.02, 0.01, 0.01, 0.00],  # the
    [0.05, 0.82, 0.12, 0.69, 0.04, 0.03],  # student
    [0.02, 0.10, 0.91, 0.78, 0.07, 0.08],  # published
    [0.91, 0.04, 0.03, 0.02, 0.01, 0.00],  # the
    [0.03, 0.06, 0.04, 0.81, 0.89, 0.02],  # paper
])
D, H = 16, 4
x = (features @ torch.randn(6, D)).unsqueeze(0)  # (1, 9, 6) @ (6, 16) -> (1, N, D)
print("x", tuple(x.shape), "= (B, N, D)")

# %% [markdown]
# ## Shape by shape
#
# The module's steps, written out: one fused projection to $3D$, a split into
# $q, k, v$, a reshape into heads, attention per head, and back.

# %%
mha = MultiHeadAttention(D, H).eval()
B, N, _ = x.shape
qkv = mha.in_proj(x)
print("in_proj(x)       ", tuple(qkv.shape), "= (B, N, 3D)")
q, k, v = qkv.chunk(3, dim=-1)
print("q, k, v          ", tuple(q.shape), "= (B, N, D) each")
q_heads = q.view(B, N, H, D // H).transpose(1, 2)
print("q split in heads ", tuple(q_heads.shape), "= (B, H, N, d)")

with torch.no_grad():
    out, weights = mha(x, need_weights=True)
    fast, _ = mha(x)
print("weights          ", tuple(weights.shape), "= (B, H, N, M)")
print("out              ", tuple(out.shape), "= (B, N, D)")
print("rows of weights sum to 1:", torch.allclose(weights.sum(-1), torch.ones(B, H, N)))
print(f"max |explicit - SDPA fast path|: {(out - fast).abs().max().item():.2e}")

# %% [markdown]
# ## The same numbers as `nn.MultiheadAttention`
#
# `from_torch` copies PyTorch's weights. Note the masks: here `key_mask` is
# True for a real token, PyTorch's `key_padding_mask` is True for padding.

# %%
torch_mha = nn.MultiheadAttention(D, H, batch_first=True).eval()
ours = MultiHeadAttention.from_torch(torch_mha)
key_mask = torch.ones(1, N, dtype=torch.bool)
key_mask[0, -2:] = False  # pretend the last two tokens are padding
with torch.no_grad():
    expected, _ = torch_mha(x, x, x, key_padding_mask=~key_mask, need_weights=False)
    got, _ = ours(x, key_mask=key_mask)
print(f"max |ours - nn.MultiheadAttention|: {(got - expected).abs().max().item():.2e}")

# %% [markdown]
# ## One heatmap per head
#
# The model is random (seeded), not trained, yet the four heads already spread
# their attention differently: each sees the tokens through its own
# projection. Training turns these differences into specialisations.

# %%
# alt: Four heatmaps side by side, one per head, each 9 by 9 with the sentence's tokens on both axes; the heads put their weight on different columns, so no two maps look alike.
fig, axes = plt.subplots(1, H, figsize=(4.2 * H, 4.0))
for h, ax in enumerate(axes):
    attention_heatmap(weights[0, h], tokens, tokens, title=f"head {h}", ax=ax)
    if h:
        ax.set_ylabel("")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Heads disagree
#
# How different are the heads? For each query, the key each head looks at
# most:

# %%
top = weights[0].argmax(dim=-1)  # (H, N)
for i, token in enumerate(tokens):
    picks = ", ".join(f"{tokens[j]:>10s}" for j in top[:, i].tolist())
    print(f"{token:>10s} -> {picks}")
