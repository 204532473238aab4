# %% [markdown]
# # Example: attention sinks
#
# This page was executed when the site was built. It draws the
# StreamingLLM mask, decodes a long stream through the sink cache while
# watching its size, checks both position numberings against their dense
# references, and plots how a learned sink logit gates a head
# ([attention sinks](../modern/attention-sinks.md)). Letters follow the
# [notation](../notation.md) page.

# %%
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from snippets.modern.attention_sinks import (
    SinkCache,
    apply_rotary,
    rotary_tables,
    sink_attention,
    sink_window_mask,
    streaming_attention,
)
from _plotting import attention_heatmap

torch.manual_seed(0)
print(f"torch {torch.__version__}")

# %% [markdown]
# ## The mask
#
# $N = 16$ tokens, $k = 4$ sinks, a window of $w = 5$: every query sees the
# first four tokens and the five most recent ones (itself included).

# %%
# alt: Two 16 by 16 grids of which keys each query may attend. Left, a causal sliding window of 5: a diagonal band. Right, the same band plus the first four columns filled from top to bottom below the diagonal: the sinks.
n, k_sink, w = 16, 4, 5
fig, axes = plt.subplots(1, 2, figsize=(9, 4))
attention_heatmap(sink_window_mask(n, n, 0, w).float(), ax=axes[0], title=f"window w = {w}", cmap="Blues")
attention_heatmap(sink_window_mask(n, n, k_sink, w).float(), ax=axes[1],
                  title=f"{k_sink} sinks + window {w}", cmap="Blues")
fig.tight_layout()
plt.show()
print("keys per query:", sink_window_mask(n, n, k_sink, w).sum(-1).tolist())

# %% [markdown]
# ## The cache stays small
#
# Decode 2,000 tokens one at a time. A plain KV cache grows by one entry per
# token; the sink cache stops at $k + w$.

# %%
# alt: Cache entries against decoding step, 0 to 2000. A straight diagonal line for the plain cache reaching 2000; a line that rises to 68 within the first 68 steps and then stays flat for the sink cache.
steps, k_sink, w = 2000, 4, 64
cache = SinkCache(k_sink, w)
sizes = []
for t in range(steps):
    cache.update(torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8))
    sizes.append(len(cache))
fig, ax = plt.subplots(figsize=(6, 3.2))
ax.plot(range(1, steps + 1), range(1, steps + 1), label="plain KV cache")
ax.plot(range(1, steps + 1), sizes, label=f"sink cache (k = {k_sink}, w = {w})")
ax.set_xlabel("tokens decoded")
ax.set_ylabel("cached tokens")
ax.legend()
fig.tight_layout()
plt.show()
print(f"largest sink cache: {max(sizes)} = k + w = {k_sink + w}")
print("positions kept at the end:", cache.positions[:6].tolist(), "...", cache.positions[-3:].tolist())

# %% [markdown]
# ## Two numberings, two dense references
#
# With each token's text position, streaming decoding equals dense attention
# under the mask. With StreamingLLM's numbering (positions in the cache), it
# equals dense attention over the kept tokens re-numbered $0, 1, \dots$; the
# two agree until the first eviction at step $k + w$.

# %%
B, H, N, d = 1, 2, 40, 16
k_sink, w = 4, 8
q, k, v = (torch.randn(B, H, N, d, dtype=torch.float64) for _ in range(3))
original = streaming_attention(q, k, v, n_sink=k_sink, window=w, positions="original")
cos, sin = rotary_tables(torch.arange(N), d)
dense = F.scaled_dot_product_attention(apply_rotary(q, cos, sin), apply_rotary(k, cos, sin), v,
                                       attn_mask=sink_window_mask(N, N, k_sink, w))
print(f"text positions:  max |streaming - dense under the mask| = {(original - dense).abs().max():.1e}")
cached = streaming_attention(q, k, v, n_sink=k_sink, window=w, positions="cache")
gap = (cached - original).norm(dim=-1).mean(dim=(0, 1))  # (N,)
print(f"cache positions: agree with text positions for the first {k_sink + w} steps "
      f"(max gap {gap[:k_sink + w].max():.1e}), then differ (mean gap {gap[k_sink + w:].mean():.2f})")

# %% [markdown]
# ## A learned sink is a gate
#
# One head, one query, eight keys. As the sink logit $b$ rises, the total
# weight left for the keys falls along $\sigma(\mathrm{LSE}(s) - b)$, and the
# output shrinks by exactly that factor.

# %%
# alt: The weight left for the tokens against the sink logit from -6 to 10: a falling sigmoid, equal to 0.5 where the sink logit equals the log-sum-exp of the scores, marked by a dashed vertical line. Dots from the code lie on the curve.
q1, k1, v1 = torch.randn(1, 1, 1, d), torch.randn(1, 1, 8, d), torch.randn(1, 1, 8, d)
scores = (q1 @ k1.transpose(-2, -1)) / d**0.5
lse = torch.logsumexp(scores, -1).item()
plain = F.scaled_dot_product_attention(q1, k1, v1)
sinks = torch.linspace(-6, 10, 33)
kept = [(sink_attention(q1, k1, v1, b.view(1)).norm() / plain.norm()).item() for b in sinks]
fig, ax = plt.subplots(figsize=(6, 3.2))
ax.plot(sinks, torch.sigmoid(lse - sinks), label="sigmoid(LSE(s) - b)")
ax.plot(sinks, kept, "o", markersize=3, label="|sunk output| / |plain output|")
ax.axvline(lse, linestyle="--", color="gray")
ax.set_xlabel("sink logit b")
ax.set_ylabel("weight left for the tokens")
ax.legend()
fig.tight_layout()
plt.show()
print(f"LSE(s) = {lse:.3f}; at b = LSE the output is {sink_attention(q1, k1, v1, torch.tensor([lse])).norm() / plain.norm():.3f} of the plain one")
