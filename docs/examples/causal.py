# %% [markdown]
# # Example: causal self-attention
#
# This page was executed when the site was built. It runs
# [causal self-attention](../attention/causal.md) on one sentence, draws the
# triangle of weights, and checks that changing the last word leaves every
# earlier output unchanged.

# %%
import torch

from snippets.attention.causal import CausalSelfAttention, causal_mask
from _plotting import attention_heatmap

torch.manual_seed(0)
print(f"torch {torch.__version__}")

# %%
tokens = "The Professor who supervised the student published the paper".split()
N, D = len(tokens), 16
x = torch.randn(1, N, D)  # made-up embeddings, seeded
attn = CausalSelfAttention(d_model=D, dropout=0.1).eval()  # eval: dropout off
with torch.no_grad():
    out, w = attn(x)
print("x", tuple(x.shape), "out", tuple(out.shape), "weights", tuple(w.shape))
print("mask for N = 4:\n", causal_mask(4, 4).int())
print("largest weight above the diagonal:", w[0].triu(1).max().item())
print("first token's row:", [round(v, 3) for v in w[0, 0].tolist()])

# %%
# alt: Heatmap of causal self-attention weights for the nine tokens; the upper-right triangle above the diagonal is exactly zero, the first row puts all its weight on "The", and later rows spread over all earlier tokens.
attention_heatmap(w[0], tokens, tokens, title="causal self-attention");

# %% [markdown]
# ## The past does not see the future
#
# Replace the last word's embedding and compare: only the last output moves.

# %%
changed = x.clone()
changed[0, -1] = torch.randn(D) * 3
with torch.no_grad():
    out2, _ = attn(changed)
moved = (out2 - out).abs().amax(dim=-1)[0]
for token, m in zip(tokens, moved.tolist()):
    print(f"{token:>11}: max change {m:.2e}")

# %% [markdown]
# ## Any length, and dropout only in training
#
# The mask is built from the input's length, so a much longer input works.
# In training mode dropout zeroes some weights; in eval mode two calls agree.

# %%
with torch.no_grad():
    long_out, _ = attn(torch.randn(2, 300, D))
    print("300 tokens:", tuple(long_out.shape))
    print("eval, two calls equal:", torch.equal(attn(x)[0], attn(x)[0]))
    attn.train()
    print("train, two calls equal:", torch.equal(attn(x)[0], attn(x)[0]))
    attn.eval()
