# %% [markdown]
# # Example: a tiny BERT learns to fill in the blanks
#
# This page was executed when the site was built. It pre-trains a two-layer
# [BERT](../history/bert.md) ($D = 64$, $H = 4$) with the masked-language-model
# objective on sequences that count through 16 tokens in steps of 1, 2 or 3,
# for example `[CLS] t5 t7 t9 t11 ... [SEP]`. A hidden token follows from its
# neighbours, so only a model that reads the context can recover it. Then it
# fine-tunes a [CLS] classifier to name the step of each sequence. Letters
# follow the [notation](../notation.md) page.

# %%
import time

import matplotlib.pyplot as plt
import torch

from _plotting import attention_heatmap
from snippets.architecture.transformer_block import TransformerBlock
from snippets.attention.multi_head import MultiHeadAttention
from snippets.history.bert import (
    IGNORE_INDEX,
    BertConfig,
    SpecialTokens,
    counting_corpus,
    mask_tokens,
    train_tiny_bert,
)

# Tiny matrices: one thread avoids synchronisation overhead on a shared machine.
torch.set_num_threads(1)
torch.manual_seed(0)
print(f"torch {torch.__version__}")


def make_block(c: BertConfig) -> TransformerBlock:
    """One BERT block: post-norm, GELU, the guide's multi-head attention."""
    attention = MultiHeadAttention(c.d_model, c.n_heads, dropout=c.dropout)
    return TransformerBlock(attention, c.d_model, c.d_ff, dropout=c.dropout, activation="gelu",
                            norm_first=False, layer_norm_eps=c.layer_norm_eps)


# %% [markdown]
# ## What the model sees
#
# The corruption rule selects about 15% of the tokens; of those, 80% become
# [MASK], 10% a random token and 10% stay as they are. The loss is computed at
# the selected positions only (labels elsewhere are ignored).

# %%
special = SpecialTokens()
names = {special.pad: "[PAD]", special.cls: "[CLS]", special.sep: "[SEP]", special.mask: "[MASK]"}


def show(ids: torch.Tensor) -> str:
    return " ".join(names.get(int(t), f"t{int(t) - 4}") for t in ids)


g = torch.Generator().manual_seed(1)
ids, steps = counting_corpus(4, 12, 16, (1, 2, 3), generator=g)
corrupted, labels = mask_tokens(ids, 20, generator=g)
for row in range(4):
    print(f"step {(1, 2, 3)[steps[row]]}: {show(ids[row])}")
    print(f"   input: {show(corrupted[row])}")
    print("  labels: " + " ".join(f"t{int(t) - 4}" if t != IGNORE_INDEX else "." for t in labels[row]))

# %% [markdown]
# ## Pre-training and fine-tuning
#
# `train_tiny_bert` (in `snippets/history/bert.py`, and also run at a smaller
# size by the tests) trains 300 steps of 64 sequences with AdamW, measures the
# masked-token accuracy on 1024 new sequences, then trains a [CLS] head for 60
# steps. The baseline always predicts the most frequent token (or class).

# %%
start = time.perf_counter()
result = train_tiny_bert(make_block, steps=300, finetune_steps=60, seed=0)
elapsed = time.perf_counter() - start
print(f"trained in {elapsed:.1f} s")
print(f"MLM loss: first step {result.losses[0]:.2f}, last step {result.losses[-1]:.2f}")
print(f"masked-token accuracy: {result.mlm_accuracy:.1%} "
      f"(no-context baseline, most frequent token: {result.mlm_baseline:.1%})")
print(f"[CLS] step classification: {result.cls_accuracy:.1%} "
      f"(most frequent class: {result.cls_baseline:.1%})")

# %%
# alt: Line plot of the masked-language-model training loss over 300 steps, falling from about 3 (chance over 20 tokens) to well below 1.
fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(result.losses)
ax.set_xlabel("training step")
ax.set_ylabel("MLM loss (nats)")
ax.set_title("Masked-language-model loss")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## What the heads attend to
#
# One sequence, one token hidden by [MASK]. The model is run layer by layer and
# each block's attention is asked for its weights (`need_weights=True`). Many
# heads put much of a query's weight on nearby tokens, some to the left and
# some to the right (the attention is bidirectional), and the [MASK] row leans
# on the neighbours it needs to work out the hidden token.

# %%
model = result.model.eval()
ids, _ = counting_corpus(1, 12, 16, (2,), generator=torch.Generator().manual_seed(7))
masked_at = 6
corrupted = ids.clone()
corrupted[0, masked_at] = special.mask
key_mask = corrupted != special.pad

with torch.no_grad():
    x = model.bert.embeddings(corrupted)
    maps = []
    for block in model.bert.layers:
        maps.append(block.attention(x, key_mask=key_mask, need_weights=True)[1][0])  # (H, N, N)
        x = block(x, key_mask=key_mask)
    guess = model.mlm(x)[0, masked_at].argmax().item()
print(f"sequence: {show(ids[0])}")
print(f"input:    {show(corrupted[0])}")
print(f"hidden token t{int(ids[0, masked_at]) - 4}, predicted t{guess - 4}")

# %%
# One figure per layer, its four heads two by two: eight maps in one row of
# a page column would leave each about 140 pixels wide. Click a figure to see
# it at full size.
# alt: Layer 1: four heatmaps, two by two, one per head, of attention weights over a 14-token counting sequence with one [MASK]; several heads put much of each query's weight on tokens a few positions to its left or right.
# alt: Layer 2: four heatmaps, two by two, one per head, of attention weights over the same 14-token sequence; head 4 sends almost every query's weight to one key, the token just before [MASK], and the other heads spread each query's weight over a few tokens.
labels_text = show(corrupted[0]).split()
for layer, weights in enumerate(maps):
    fig, axes = plt.subplots(2, 2, figsize=(9, 8.4))
    for head in range(weights.shape[0]):
        attention_heatmap(weights[head], labels_text, labels_text,
                          title=f"layer {layer + 1}, head {head + 1}", ax=axes.flat[head])
    fig.tight_layout()
    plt.show()
