# %% [markdown]
# # Example: multi-head latent attention
#
# This page was executed when the site was built. It builds a small
# [multi-head latent attention](../modern/latent-attention.md) layer, checks
# that the absorbed form used for decoding equals the naive form, decodes one
# token at a time from the latent cache, and draws what each kind of attention
# caches per token. Letters follow the [notation](../notation.md) page.

# %%
import matplotlib.pyplot as plt
import torch

from snippets.efficiency.kv_cache import KVCache
from snippets.modern.cache_size import mha_cache_elements, mla_cache_elements, model_cache_bytes
from snippets.modern.latent_attention import MultiHeadLatentAttention

torch.manual_seed(0)
print(f"torch {torch.__version__}")

# %% [markdown]
# ## A small layer
#
# $D = 64$, $H = 8$ heads, a latent of $d_c = 32$, a shared rotary key of
# $d_R = 8$, query/key parts without position $d_h = 16$ and values $d_v = 16$.

# %%
D, H = 64, 8
mla = MultiHeadLatentAttention(D, H, kv_lora_rank=32, q_lora_rank=48, qk_nope_head_dim=16,
                               rope_dim=8, v_head_dim=16).double().eval()
for name, p in mla.named_parameters():
    print(f"{name:18} {tuple(p.shape)}")

# %% [markdown]
# ## Absorbed equals naive
#
# The naive form rebuilds every head's keys and values from the latents; the
# absorbed form folds $W^{UK}$ into the queries and $W^{UV}$ into the output
# projection and attends to the latents directly.

# %%
x = torch.randn(2, 24, D, dtype=torch.float64)
with torch.no_grad():
    naive = mla(x)
    absorbed = mla(x, absorbed=True)
print(f"output {tuple(naive.shape)}, max |absorbed - naive| = {(absorbed - naive).abs().max().item():.1e}")

# %% [markdown]
# ## Decoding from the latent cache
#
# Prefill 8 tokens, then one token per step in the absorbed form. The cache
# holds only $d_c + d_R = 40$ numbers per token; per-head keys and values are
# never stored.

# %%
cache = mla.make_cache(2, max_len=24)  # the layer knows d_c, d_R, dtype and device
with torch.no_grad():
    steps = [mla(x[:, :8], cache=cache)] + [mla(x[:, t:t + 1], cache=cache, absorbed=True) for t in range(8, 24)]
decoded = torch.cat(steps, dim=1)
print(f"max |decoded - full pass| = {(decoded - naive).abs().max().item():.1e}")
kv = KVCache(1, 2, H, 16, 24, dtype=torch.float64)  # what multi-head attention of the same heads would allocate
print(f"latent cache: {cache.nbytes:,} bytes; a per-head KV cache of the same heads: {kv.nbytes:,} bytes "
      f"({kv.nbytes / cache.nbytes:.1f}x)")

# %% [markdown]
# ## What each kind of attention caches
#
# DeepSeek-V3's width: 128 heads, keys and values 128 wide, 61 layers, bfloat16.

# %%
# alt: Two panels. Left, a bar chart on a log scale of the numbers cached per token and layer: multi-head attention 32768, grouped-query with 8 key/value heads 2048, latent attention 576, multi-query 256. Right, the cache of one sequence in GiB against context length from 1k to 128k tokens, one straight line per kind, multi-head attention highest at 488 GiB at 128k and latent attention at 8.6 GiB.
kinds = {
    "MHA, H_kv = 128": mha_cache_elements(128, 128),
    "GQA, H_kv = 8": mha_cache_elements(8, 128),
    "MLA, 512 + 64": mla_cache_elements(512, 64),
    "MQA, H_kv = 1": mha_cache_elements(1, 128),
}
colors = ["#4c72b0", "#55a868", "#c44e52", "#8172b2"]
fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
left.barh(list(kinds), list(kinds.values()), color=colors)
left.set_xscale("log")
left.invert_yaxis()
left.set_xlabel("numbers cached per token and layer")
for i, value in enumerate(kinds.values()):
    left.text(value, i, f" {value:,}", va="center")
left.set_xlim(100, 3e5)
lengths = [2**k for k in range(10, 18)]
layers = ["full_attention"] * 61
for (name, per_token), color in zip(kinds.items(), colors):
    right.plot(lengths, [model_cache_bytes(n, layers, per_token) / 2**30 for n in lengths], marker="o",
               color=color, label=name)
right.set_xscale("log", base=2)
right.set_yscale("log")
right.set_xlabel("tokens in the sequence")
right.set_ylabel("cache of one sequence (GiB)")
right.legend(fontsize=8)
fig.tight_layout()
plt.show()
for name, per_token in kinds.items():
    print(f"{name:22} {per_token:6,} per token and layer; at 128k tokens "
          f"{model_cache_bytes(131072, layers, per_token) / 2**30:7.1f} GiB")
