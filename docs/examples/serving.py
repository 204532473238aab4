# %% [markdown]
# # Example: serving-time attention
#
# This page was executed when the site was built. It fills a paged KV cache
# with three sequences that grow at different speeds, decodes from the pages
# and from contiguous tensors, draws the causal masks of a padded batch,
# merges split-KV partial results, and runs speculative decoding (greedy, then sampled) with a
# small draft model, reporting how many proposals the target accepted. See the
# [serving page](../efficiency/serving.md); letters follow the
# [notation](../notation.md) page.

# %%
import copy

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from matplotlib.colors import ListedColormap

from snippets.efficiency.kv_cache import TinyDecoder, generate
from snippets.efficiency.paged_kv_cache import (
    PagedKVCache,
    paged_decode,
    ragged_causal_mask,
    split_kv_attention,
    speculative_generate,
)

torch.manual_seed(0)
torch.set_num_threads(1)
print(f"torch {torch.__version__}")

# %% [markdown]
# ## A paged cache
#
# A pool of 16 pages of 4 tokens. Three sequences take turns adding one token
# at a time (sequence 2 stops early), so their pages interleave in the pool.
# Each sequence's block table lists its pages in order.

# %%
H, H_kv, d, page = 4, 2, 8, 4
lengths = [13, 6, 17]
cache = PagedKVCache(n_pages=16, page_size=page, n_kv_heads=H_kv, d_head=d)
seqs = [cache.add_sequence() for _ in lengths]
keys = [torch.randn(H_kv, n, d) for n in lengths]
values = [torch.randn(H_kv, n, d) for n in lengths]
for t in range(max(lengths)):
    for s, n in enumerate(lengths):
        if t < n:
            cache.append(seqs[s], keys[s][:, t : t + 1], values[s][:, t : t + 1])
for s in seqs:
    print(f"sequence {s}: {cache.lengths[s]:2d} tokens, block table {cache.block_table(s)}")
print("free pages:", cache.free_pages)

q = torch.randn(len(seqs), H, 1, d)
paged = paged_decode(q, cache, seqs)
for s in seqs:
    contiguous = F.scaled_dot_product_attention(q[s : s + 1], keys[s][None], values[s][None], enable_gqa=True)
    print(f"sequence {s}: paged output equals contiguous output bit for bit: {torch.equal(paged[s : s + 1], contiguous)}")

# %%
# alt: A row of 16 cells, one per page of the pool, coloured by the sequence that owns it: pages of sequences 0, 1 and 2 alternate at first, sequence 2 takes the later pages after sequence 1 stops, and the last cells are free (white).
owner = torch.full((16,), -1)
for s in seqs:
    owner[cache.block_table(s)] = s
fig, ax = plt.subplots(figsize=(9, 1.6))
ax.imshow((owner.view(1, -1) + 1).numpy(), cmap=ListedColormap(["#ffffff", "#1f77b4", "#ff7f0e", "#2ca02c"]), vmin=0, vmax=3)
for p, o in enumerate(owner.tolist()):
    ax.text(p, 0, "free" if o < 0 else f"s{o}", ha="center", va="center", fontsize=8)
ax.set_yticks([])
ax.set_xticks(range(16))
ax.set_xlabel("page in the pool")
ax.set_title("who owns each page")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## A padded batch: where the causal triangle sits
#
# Three sequences of 5, 3 and 7 tokens in rows of 7 slots. With right padding
# the real tokens come first and each triangle starts at the top left; with
# left padding they come last and each triangle ends at the bottom right.
# Either way a real token sees exactly the real tokens before it, and padding
# rows see nothing (they return zeros).

# %%
# alt: Two rows of three 7 by 7 masks. Top, right padding: triangles of size 5, 3 and 7 anchored at the top left, the rest blank. Bottom, left padding: the same triangles anchored at the bottom right.
batch_lengths, n = [5, 3, 7], 7
fig, axes = plt.subplots(2, 3, figsize=(9, 6))
for row, padding in enumerate(("right", "left")):
    mask = ragged_causal_mask(batch_lengths, n, padding=padding)  # (B, 1, n, n)
    for b, length in enumerate(batch_lengths):
        ax = axes[row, b]
        ax.imshow(mask[b, 0].numpy(), cmap="Blues", vmin=0, vmax=1.3)
        ax.set_title(f"{padding} padding, L = {length}", fontsize=9)
        ax.set_xlabel("key slot")
        ax.set_ylabel("query slot")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Split-KV decoding
#
# One query, 1000 cached keys, cut into chunks; each chunk's output and
# log-sum-exp are merged at the end.

# %%
q1 = torch.randn(2, 4, 1, 64)
k1, v1 = torch.randn(2, 4, 1000, 64), torch.randn(2, 4, 1000, 64)
full = F.scaled_dot_product_attention(q1, k1, v1)
for n_splits in (1, 4, 16, 100):
    err = (split_kv_attention(q1, k1, v1, n_splits) - full).abs().max().item()
    print(f"{n_splits:4d} chunks: max |split - full| = {err:.1e}")

# %% [markdown]
# ## Greedy speculative decoding
#
# The target is a small decoder with random weights. Two drafts: a smaller,
# unrelated decoder, and a noisy copy of the target (a stand-in for a
# distilled draft that mostly agrees with it). The tokens always equal plain
# greedy decoding with the target; what changes is how many proposals survive
# and so how many target passes it takes.

# %%
vocab, n_new = 64, 40
target = TinyDecoder(vocab, 64, 4, 2, max_len=128).eval()
unrelated = TinyDecoder(vocab, 32, 2, 1, max_len=128).eval()
noisy = copy.deepcopy(target)
with torch.no_grad():
    for p in noisy.parameters():
        p.add_(0.1 * p.std() * torch.randn_like(p))
prompt = torch.randint(0, vocab, (1, 8))
greedy = generate(target, prompt, n_new)
print(f"{'draft':18} {'same tokens':>11} {'accepted':>9} {'rate':>6} {'target passes':>14}")
for name, draft in (("unrelated decoder", unrelated), ("noisy copy", noisy), ("the target itself", target)):
    tokens, stats = speculative_generate(target, draft, prompt, n_new, n_draft=4)
    rate = stats["accepted"] / stats["proposed"]
    print(f"{name:18} {str(torch.equal(tokens, greedy)):>11} {stats['accepted']:4d}/{stats['proposed']:<4d} "
          f"{rate:6.0%} {stats['target_calls']:8d} of {n_new}")

# %% [markdown]
# ## Speculative sampling
#
# With `sample=True` the draft samples its proposals and the target keeps each
# with probability min(1, p/q), resampling the first rejection from
# max(0, p - q). Whatever the draft, the first generated token then follows the
# target's own distribution p. Below, 2,000 seeded draws of one token after the
# prompt, with the unrelated draft: the observed frequencies of the target's
# five likeliest tokens against p, and the total-variation distance over all
# tokens: sampling noise alone gives about 0.07 at this count for 64 tokens
# (half the sum over tokens of sqrt(2 p (1 - p) / (pi n))), so a value near
# that is what exact sampling looks like.

# %%
gen = torch.Generator().manual_seed(0)
with torch.no_grad():
    p_first = torch.softmax(target(prompt)[0, -1].double(), dim=-1)  # (V,)
counts = torch.zeros(vocab, dtype=torch.float64)
for _ in range(2000):
    tokens, _ = speculative_generate(target, unrelated, prompt, 1, n_draft=1, sample=True, generator=gen)
    counts[tokens[0, -1]] += 1
freq = counts / counts.sum()
top = p_first.argsort(descending=True)[:5]
print("token   target p   observed")
for t in top.tolist():
    print(f"{t:5d}   {p_first[t]:8.3f}   {freq[t]:8.3f}")
print(f"total variation: {0.5 * (freq - p_first).abs().sum():.3f}")
