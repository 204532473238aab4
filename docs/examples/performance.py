# %% [markdown]
# # Example: measured performance
#
# This page was executed when the site was built, on the machine that built it;
# the numbers are that machine's, from one run. It imports the measurement code
# of `bench/scaling.py` (explained on the [performance page](../efficiency/performance.md))
# with a smaller range of $N$ than the full benchmark, so it runs in seconds.
# Letters follow the [notation](../notation.md) page.

# %%
import matplotlib.pyplot as plt
import torch

from bench.scaling import (
    decode_tokens_per_second,
    environment,
    measure_memory,
    plot_scaling,
    time_methods,
)

torch.manual_seed(0)
torch.set_num_threads(1)  # one thread: stable numbers on a shared build machine
print(environment())

# %% [markdown]
# ## Time and peak extra memory against $N$
#
# Causal attention over $(1, 8, N, 64)$ float32 tensors; `linear` is the
# non-causal linear attention. Methods are interleaved within each size, and
# memory is read in a separate process (see the page for the method).

# %%
ns = [256, 512, 1024]
times = time_methods(ns, repeats=2)
mem = measure_memory([256, 512, 1024])
print(f"{'method':>16} " + " ".join(f"{n:>9}" for n in ns) + "   (ms per call)")
for name, per in times.items():
    print(f"{name:>16} " + " ".join(f"{per[n] * 1e3:9.2f}" for n in ns))
print()
print(f"{'method':>16} " + " ".join(f"{n:>9}" for n in (256, 512, 1024)) + "   (peak extra MiB)")
for name, per in mem.items():
    print(f"{name:>16} " + " ".join(f"{per[n] / 2**20:9.1f}" for n in (256, 512, 1024)))

# %%
# alt: Two log-log plots against sequence length N from 256 to 1024. Left, time per call for the five methods; right, peak extra memory, where the explicit formula grows about four times per doubling of N and the others far less. The machine, dtype, torch version and thread count are written above the plots.
fig = plot_scaling(times, mem, slopes=False)
plt.show()

# %% [markdown]
# No slope is fitted here. Three sizes this small cannot pin an exponent:
# fixed costs (Python, thread start, allocation) pull a fitted slope below the
# asymptotic one, and a working set that outgrows a CPU cache between two sizes
# pushes it above, so a slope fitted here would describe the machine more than
# the method. The full benchmark (`python bench/scaling.py`) fits its
# slopes over $N = 1024$ to $16384$, where the dense methods approach 2 in time
# and the explicit formula 2 in memory.
#
# ## Decoding with and without a KV cache
#
# A small decoder ($D = 256$, $H = 8$, two layers) continues a 64-token prompt by 64 tokens, greedily: with the
# [KV cache](../efficiency/kv-cache.md) each step processes one token; without
# it each step runs the whole sequence again.

# %%
decode = decode_tokens_per_second(64, prompt_len=64, d_model=256, n_heads=8, n_layers=2)
for label, tps in decode.items():
    print(f"{label:>14}: {tps:8.0f} tokens/s")
print(f"speed-up: {decode['with cache'] / decode['without cache']:.1f}x")
# The gap widens with the length: without a cache step t costs O(t) tokens of work.
