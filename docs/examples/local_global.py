# %% [markdown]
# # Example: local and global layers
#
# This page was executed when the site was built. It draws the three kinds of
# layer mask, the [local and global layer](../modern/local-global.md) patterns of
# four released models (read from the data file behind the
# [models page](../modern/models.md)), and how their caches grow with the
# context. Letters follow the [notation](../notation.md) page.

# %%
import matplotlib.pyplot as plt
import torch
import yaml
from matplotlib.colors import ListedColormap

from snippets.modern.cache_size import mha_cache_elements, model_cache_bytes
from snippets.modern.layer_patterns import layer_mask, periodic_layer_types, summarize_layer_types
from _plotting import attention_heatmap

print(f"torch {torch.__version__}")

# %% [markdown]
# ## Three masks
#
# $N = 12$ tokens; a window of $w = 4$ keys, chunks of $C = 4$.

# %%
# alt: Three 12 by 12 grids of which keys each query may attend. Left, full causal: the lower triangle. Middle, sliding window of 4: a diagonal band four cells wide. Right, chunked with chunks of 4: three small lower triangles along the diagonal, each starting at a multiple of 4.
n = 12
fig, axes = plt.subplots(1, 3, figsize=(11, 3.8))
for ax, kind, title in zip(axes, ("full_attention", "sliding_attention", "chunked_attention"),
                           ("full (global)", "sliding, w = 4", "chunked, C = 4")):
    attention_heatmap(layer_mask(kind, n, window=4, chunk=4).float(), ax=ax, title=title, cmap="Blues")
fig.tight_layout()
plt.show()
for kind in ("full_attention", "sliding_attention", "chunked_attention"):
    print(f"{kind:18} keys per query: {layer_mask(kind, n, window=4, chunk=4).sum(-1).tolist()}")

# %% [markdown]
# ## Four models' layers
#
# Each row is a model, each cell a layer: the global layers stand out.

# %%
with open("docs/data/models.yaml", encoding="utf-8") as f:
    models = {m["name"]: m for m in yaml.safe_load(f)["models"]}


def kinds_of(model):
    pattern, n = model["layer_pattern"]["value"], model["layers"]["value"]
    if pattern["local"] is None:
        return ["full_attention"] * n
    if pattern["every"] is None:
        return [pattern["local"]] * n
    return periodic_layer_types(n, pattern["every"], local=pattern["local"])


names = ["Gemma 3 27B", "gpt-oss-120b", "Llama 4 Scout", "Qwen3-Next 80B-A3B"]
codes = {"full_attention": 0, "sliding_attention": 1, "chunked_attention": 2, "linear_attention": 3}
palette = ListedColormap(["#c44e52", "#a1c9f4", "#8de5a1", "#ffb482"])

# %%
# alt: Four horizontal strips of coloured cells, one per layer. Gemma 3 27B: 62 layers, a red global layer after every five blue sliding layers. gpt-oss-120b: 36 layers alternating blue and red. Llama 4 Scout: 48 layers, three green chunked layers then one red global layer. Qwen3-Next: 48 layers, three orange linear-attention layers then one red global layer.
width = max(models[name]["layers"]["value"] for name in names)
grid = torch.full((len(names), width), float("nan"))
for row, name in enumerate(names):
    kinds = kinds_of(models[name])
    grid[row, : len(kinds)] = torch.tensor([float(codes[k]) for k in kinds])
fig, ax = plt.subplots(figsize=(11, 2.6))
ax.imshow(grid.numpy(), cmap=palette, vmin=0, vmax=3, aspect="auto")
ax.set_yticks(range(len(names)), names)
ax.set_xlabel("layer")
for kind, code in codes.items():
    ax.scatter([], [], color=palette(code), marker="s", label=kind.replace("_", " "))
ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=4, fontsize=8, frameon=False)
fig.tight_layout()
plt.show()
for name in names:
    print(f"{name:20} {summarize_layer_types(kinds_of(models[name]))}")

# %% [markdown]
# ## The cache against the context
#
# One sequence in bfloat16. Dashed: the same model with every local layer made
# global.

# %%
# alt: Cache of one sequence in GiB against context length from 1k to 128k tokens, log scales. For Gemma 3 27B, gpt-oss-120b and Llama 4 Scout the solid line (with local layers) bends away below the dashed all-global line once the context passes the window or chunk; at 128k Gemma 3 needs 10.4 GiB instead of 62 GiB.
lengths = [2**k for k in range(10, 18)]
fig, ax = plt.subplots(figsize=(7, 4))
for name, color in zip(names[:3], ["#4c72b0", "#dd8452", "#55a868"]):
    m = models[name]
    kinds = kinds_of(m)
    pattern = m["layer_pattern"]["value"]
    per_token = mha_cache_elements(m["kv_heads"]["value"], m["head_dim"]["value"])
    local = [model_cache_bytes(n, kinds, per_token, window=pattern.get("window"), chunk=pattern.get("chunk")) / 2**30
             for n in lengths]
    dense = [model_cache_bytes(n, ["full_attention"] * len(kinds), per_token) / 2**30 for n in lengths]
    ax.plot(lengths, local, marker="o", color=color, label=name)
    ax.plot(lengths, dense, linestyle="--", color=color)
    print(f"{name:14} at 128k: {local[-1]:5.1f} GiB with local layers, {dense[-1]:5.1f} GiB all global")
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xlabel("tokens in the sequence")
ax.set_ylabel("cache of one sequence (GiB)")
ax.legend()
fig.tight_layout()
plt.show()
