# %% [markdown]
# # Example: sliding-window attention
#
# This page was executed when the site was built. It draws the band of keys
# each query may see, checks the chunked
# [sliding-window attention](../efficiency/sliding-window.md) against dense
# attention with the banded mask, and times both on the machine that built the
# site. Letters follow the [notation](../notation.md) page.

# %%
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from snippets.efficiency.sliding_window import sliding_window_attention, sliding_window_mask
from _plotting import attention_heatmap

torch.manual_seed(0)
print(f"torch {torch.__version__}")

# %% [markdown]
# ## The band
#
# With $N = 12$ and $w = 4$: the causal window holds each query and the three
# keys before it; the bidirectional one reaches three keys each way.

# %%
# alt: Two 12 by 12 grids of which keys each query may attend. Left, causal: a diagonal band four cells wide ending on the diagonal. Right, bidirectional: a band seven cells wide centred on the diagonal.
n, w = 12, 4
fig, axes = plt.subplots(1, 2, figsize=(9, 4))
attention_heatmap(sliding_window_mask(n, w).float(), ax=axes[0], title=f"causal, w = {w}", cmap="Blues")
attention_heatmap(sliding_window_mask(n, w, causal=False).float(), ax=axes[1],
                  title=f"bidirectional, w = {w}", cmap="Blues")
fig.tight_layout()
plt.show()
print("keys per query (causal):       ", sliding_window_mask(n, w).sum(-1).tolist())
print("keys per query (bidirectional):", sliding_window_mask(n, w, causal=False).sum(-1).tolist())

# %% [markdown]
# ## Chunked equals dense
#
# The chunk size does not divide $N$ on purpose: the last chunk is shorter.

# %%
B, H, N, d = 2, 4, 100, 16
q, k, v = (torch.randn(B, H, N, d) for _ in range(3))
for causal in (True, False):
    for window, chunk in ((1, 7), (8, 7), (33, 16), (200, 16)):
        fast = sliding_window_attention(q, k, v, window, causal=causal, chunk_size=chunk)
        dense = F.scaled_dot_product_attention(
            q, k, v, attn_mask=sliding_window_mask(N, window, causal=causal))
        print(f"causal={causal!s:5} w={window:3} c={chunk:2}  out {tuple(fast.shape)}  "
              f"max |chunked - dense| = {(fast - dense).abs().max().item():.1e}")

# %% [markdown]
# ## A quick timing
#
# One long sequence, a narrow window. Dense attention computes all $N^2$
# scores and throws most away; the chunked loop computes about
# $N (c + w)$ of them. Numbers are from the build machine's CPU, best of a few
# runs; they only show the trend.

# %%
def best_time(fn, repeats=3):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


torch.set_num_threads(1)
w, d = 64, 32
print(f"{'N':>6} {'dense ms':>9} {'chunked ms':>11} {'scores dense':>13} {'scores chunked':>15}")
with torch.no_grad():
    for N in (512, 1024, 2048):
        q, k, v = (torch.randn(1, 1, N, d) for _ in range(3))
        mask = sliding_window_mask(N, w)
        t_dense = best_time(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
        t_chunk = best_time(lambda: sliding_window_attention(q, k, v, w, chunk_size=w))
        c = w
        print(f"{N:6d} {1e3 * t_dense:9.2f} {1e3 * t_chunk:11.2f} {N * N:13,d} "
              f"{N * (c + w - 1):15,d}")
