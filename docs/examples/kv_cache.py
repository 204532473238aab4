# %% [markdown]
# # Example: the KV cache
#
# This page was executed when the site was built. A small decoder generates
# text-free token ids with and without the [KV cache](../efficiency/kv-cache.md);
# the logits and the tokens agree, and the calculator sizes the cache of real
# models. Letters follow the [notation](../notation.md) page.

# %%
import time

import matplotlib.pyplot as plt
import torch

from snippets.efficiency.kv_cache import TinyDecoder, generate, kv_cache_bytes

torch.manual_seed(0)
torch.set_num_threads(1)
model = TinyDecoder(vocab_size=100, d_model=64, n_heads=4, n_layers=2, n_kv_heads=2, max_len=64).eval()
prompt = torch.randint(0, 100, (1, 8))
print(f"prompt {tuple(prompt.shape)}: {prompt.tolist()[0]}")

# %% [markdown]
# ## Incremental decoding equals the full pass
#
# Prefill 8 tokens, then a chunk of 4 after them ($N = 4$, $M = 12$: the
# lower-right mask), then one token at a time; compare with one causal pass
# over all 16.

# %%
tokens = torch.randint(0, 100, (1, 16))
with torch.no_grad():
    full = model(tokens)
    cache = model.new_cache(batch=1)
    pieces = [model(tokens[:, :8], cache), model(tokens[:, 8:12], cache)]
    pieces += [model(tokens[:, t : t + 1], cache) for t in range(12, 16)]
    incremental = torch.cat(pieces, dim=1)
diff = (incremental - full).abs().amax(dim=-1)[0]
print("cached tokens:", cache.seq_len(), "| max |logit difference| per position:")
print([f"{x:.0e}" for x in diff.tolist()])

# %% [markdown]
# ## Same tokens, less work

# %%
for use_cache in (True, False):
    t0 = time.perf_counter()
    out = generate(model, prompt, 40, use_cache=use_cache)
    print(f"use_cache={use_cache!s:>5}: {time.perf_counter() - t0:.3f} s, last tokens {out[0, -8:].tolist()}")
print("identical:", torch.equal(generate(model, prompt, 40), generate(model, prompt, 40, use_cache=False)))

# %% [markdown]
# ## How big the cache gets
#
# Llama 2 7B (32 layers, 32 heads of 128, fp16) and Llama 2 70B's shape
# (80 layers, heads of 128, fp16) with 64, 8 and 1 key/value heads.

# %%
GiB = 2**30
print(f"Llama 2 7B, one 4096-token sequence: {kv_cache_bytes(1, 4096, 32, 32, 128) / GiB:.2f} GiB")
for h_kv in (64, 8, 1):
    print(f"70B shape, H_kv = {h_kv:>2}: {kv_cache_bytes(1, 4096, 80, h_kv, 128) / GiB:6.3f} GiB per sequence")

# %%
# alt: Line plot of KV-cache size in GiB against context length from 0 to 32768 tokens for one sequence: Llama 2 7B rises to 16 GiB, the 70B shape with 64 key/value heads to 80 GiB, with 8 key/value heads to 10 GiB.
lengths = list(range(0, 32769, 1024))
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(lengths, [kv_cache_bytes(1, m, 32, 32, 128) / GiB for m in lengths], label="7B (H_kv = 32)")
ax.plot(lengths, [kv_cache_bytes(1, m, 80, 64, 128) / GiB for m in lengths], label="70B shape, H_kv = 64")
ax.plot(lengths, [kv_cache_bytes(1, m, 80, 8, 128) / GiB for m in lengths], label="70B shape, H_kv = 8")
ax.set(xlabel="tokens in the cache (M)", ylabel="GiB per sequence (fp16)", title="KV-cache size")
ax.legend()
ax.grid(alpha=0.3)
fig.tight_layout()
plt.show()
