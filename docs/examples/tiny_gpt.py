# %% [markdown]
# # Example: a tiny GPT learns to reverse digits
#
# This page was executed when the site was built. It trains a two-layer
# [GPT](../history/gpt.md) ($D = 64$, $H = 4$, pre-norm as in GPT-2) with the
# plain next-token objective on sequences like `3 1 4 1 5 9 = 9 5 1 4 1 3`:
# six random digits, `=`, and the same digits reversed. Nothing predicts the
# digits before `=`; every digit after it is fixed by one digit of the prompt,
# which the model must find through attention. Letters follow the
# [notation](../notation.md) page.

# %%
import time

import matplotlib.pyplot as plt
import torch

from _plotting import attention_heatmap
from snippets.architecture.transformer_block import TransformerBlock
from snippets.attention.multi_head import MultiHeadAttention
from snippets.history.gpt import GPTConfig, generate, reversal_task, train_tiny_gpt

# Tiny matrices: one thread avoids synchronisation overhead on a shared machine.
torch.set_num_threads(1)
torch.manual_seed(0)
print(f"torch {torch.__version__}")


def make_block(c: GPTConfig) -> TransformerBlock:
    """One GPT block with the guide's multi-head attention (called causally by GPT)."""
    attention = MultiHeadAttention(c.d_model, c.n_heads, dropout=c.dropout)
    return TransformerBlock(attention, c.d_model, c.d_ff, dropout=c.dropout, activation="gelu",
                            norm_first=c.norm_first, layer_norm_eps=c.layer_norm_eps)


def show(ids: torch.Tensor) -> str:
    return " ".join("=" if int(t) == 10 else str(int(t)) for t in ids)


print("three training sequences:")
for row in reversal_task(3, 6, 10, generator=torch.Generator().manual_seed(1)):
    print("  " + show(row))

# %% [markdown]
# ## Training
#
# `train_tiny_gpt` (in `snippets/history/gpt.py`, and also run at a smaller
# size by the tests) trains 300 steps of 64 sequences with AdamW on the loss of
# every position. It then measures, on 1024 new sequences, how often the
# prediction after `=` is right when the model reads the true prefix, and how
# often greedy generation from the prompt alone gets each answer digit right.
# The baseline always guesses the most frequent digit.

# %%
start = time.perf_counter()
result = train_tiny_gpt(make_block, steps=300, seed=0)
elapsed = time.perf_counter() - start
print(f"trained in {elapsed:.1f} s")
print(f"loss: first step {result.losses[0]:.2f}, last step {result.losses[-1]:.2f} "
      f"(floor 5/12 ln 10 = {5 / 12 * 2.302585:.2f}: the random digits)")
print(f"next-token accuracy after '=': {result.accuracy:.1%} (most frequent digit: {result.baseline:.1%})")
print(f"greedy generation, per answer digit: {result.generated_accuracy:.1%}")

# %%
# alt: Line plot of the next-token training loss over 300 steps, falling from about 2.4 to a plateau near 0.96, the floor set by the random digits.
fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(result.losses, label="training loss")
ax.axhline(5 / 12 * 2.302585, color="gray", linestyle="--", label="floor (random digits)")
ax.set_xlabel("training step")
ax.set_ylabel("loss (nats)")
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Generation
#
# New prompts, completed greedily (`temperature=0`) and by sampling at
# temperature 1 with a seeded generator.

# %%
model = result.model.eval()
prompts = torch.tensor([[3, 1, 4, 1, 5, 9, 10], [2, 7, 1, 8, 2, 8, 10], [0, 0, 0, 1, 1, 1, 10]])
greedy = generate(model, prompts, 6)
sampled = generate(model, prompts, 6, temperature=1.0, generator=torch.Generator().manual_seed(0))
for p, a, b in zip(prompts, greedy, sampled):
    print(f"{show(p):>16}  greedy: {show(a[7:])}   sampled: {show(b[7:])}   expected: {show(p[:6].flip(0))}")

# %% [markdown]
# ## Where the answer comes from
#
# The attention weights of each head for one sequence (`need_weights=True`,
# causal). Row $i$ predicts token $i + 1$. From `=` on, a head that solves the
# task puts each row's weight on the prompt digit that must be written next:
# an anti-diagonal in the lower-left block (answer rows, prompt columns).
# Above the diagonal everything is zero: no position sees the future.

# %%
ids = greedy[:1]
with torch.no_grad():
    x = model.token(ids) + model.position(torch.arange(ids.shape[1]))
    maps = []
    for block in model.layers:
        maps.append(block.attention(block.norm1(x), is_causal=True, need_weights=True)[1][0])  # (H, N, N)
        x = block(x, is_causal=True)

# %%
# alt: Eight heatmaps, two layers by four heads, of causal attention over the 13 tokens "3 1 4 1 5 9 = 9 5 1 4 1 3"; everything above the diagonal is zero, and in layer 1, head 1 the rows from "=" on put their weight on the prompt digit to be written next, an anti-diagonal in the lower-left block.
tokens = show(ids[0]).split()
fig, axes = plt.subplots(2, 4, figsize=(16, 7.5))
for layer, weights in enumerate(maps):
    for head in range(weights.shape[0]):
        attention_heatmap(weights[head], tokens, tokens, title=f"layer {layer + 1}, head {head + 1}",
                          ax=axes[layer, head])
fig.tight_layout()
plt.show()
