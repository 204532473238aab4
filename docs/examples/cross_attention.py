# %% [markdown]
# # Example: cross-attention between two sentences
#
# This page was executed when the site was built. An English sentence attends
# over a French one through [cross-attention](../attention/cross-attention.md).
# The embeddings are made up: each English word and its French counterpart
# share a seeded random "meaning" vector, then each language gets its own
# width and its own random mixing, so the two sides are not directly
# comparable until the layer's projections meet in the middle.

# %%
import torch

from snippets.attention.cross_attention import CrossAttention
from _plotting import attention_heatmap

torch.manual_seed(0)
print(f"torch {torch.__version__}")

# %%
english = "the cat sat on the mat".split()
french = "le chat était assis sur le tapis".split()
# Which meaning each word carries (the two "assis"-"était" share "sat").
meaning_of = {"the": 0, "le": 0, "cat": 1, "chat": 1, "sat": 2, "était": 2,
              "assis": 2, "on": 3, "sur": 3, "mat": 4, "tapis": 4}
meanings = torch.linalg.qr(torch.randn(8, 5)).Q.T  # 5 orthonormal meanings, 8 wide
D, D_c = 12, 10  # English tokens are 12 wide, French tokens 10 wide
to_english, to_french = torch.randn(8, D), torch.randn(8, D_c)
x = torch.stack([meanings[meaning_of[w]] for w in english]) @ to_english  # (N, D)
context = torch.stack([meanings[meaning_of[w]] for w in french]) @ to_french  # (M, D_c)
x, context = x.unsqueeze(0), context.unsqueeze(0)  # (1, 6, 12), (1, 7, 10)
print("x", tuple(x.shape), "context", tuple(context.shape))

# %% [markdown]
# A layer whose projections know how the two spaces relate: we set
# $W_Q$ and $W_K$ so that both sides land on the shared meaning vectors
# (a trained model would learn such maps). The other weights stay random.

# %%
attn = CrossAttention(d_model=D, d_context=D_c, d_k=8, d_v=8).eval()
with torch.no_grad():
    attn.q_proj.weight.copy_(torch.linalg.pinv(to_english).T * 3.0)
    attn.k_proj.weight.copy_(torch.linalg.pinv(to_french).T * 3.0)
    attn.q_proj.bias.zero_()
    attn.k_proj.bias.zero_()
    out, w = attn(x, context)
print("out", tuple(out.shape), "weights", tuple(w.shape), "(B, N, M)")
for i, word in enumerate(english):
    j = int(w[0, i].argmax())
    print(f"{word:>4} -> {french[j]:<6} ({w[0, i, j].item():.2f})")

# %%
# alt: Heatmap of cross-attention weights with the six English words down the side and the seven French words along the top; cat attends to chat, mat to tapis, on to sur, sat splits between était and assis, and each "the" splits between the two "le".
attention_heatmap(w[0], english, french, title="English queries, French keys and values");

# %% [markdown]
# ## Padding the French side changes nothing
#
# Batch the French sentence with three padding tokens of random junk, mask them
# with `key_mask` (True = real token), and compare.

# %%
junk = torch.randn(1, 3, D_c) * 10
padded = torch.cat([context, junk], dim=1)  # (1, 10, D_c)
key_mask = torch.tensor([[True] * 7 + [False] * 3])
with torch.no_grad():
    out_padded, w_padded = attn(x, padded, key_mask=key_mask)
print("max |padded - unpadded| output:", (out_padded - out).abs().max().item())
print("weight on padding:", w_padded[0, :, 7:].abs().max().item())
