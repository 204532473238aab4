# %% [markdown]
# # Example: what a hybrid decoder holds per sequence
#
# This page was executed when the site was built. It reads the published
# configurations of Qwen3-Next and Kimi Linear from `docs/data/hybrids.yaml`,
# prints their layer patterns, and plots the memory one sequence holds while
# decoding against the context length, next to the same models with every
# layer full attention. See [hybrids](../linear/hybrids.md); dense and MLA
# decoders are compared on the modern-decoder pages.

# %%
from pathlib import Path

import matplotlib.pyplot as plt
import yaml

import snippets
from snippets.linear.hybrids import cache_bytes, kimi_linear_config, qwen3_next_config
import _plotting  # noqa: F401  (figure style)

data = yaml.safe_load((Path(snippets.__file__).resolve().parents[1] / "docs" / "data" / "hybrids.yaml").read_text())
models = [qwen3_next_config(data["qwen3_next"]["config"]), kimi_linear_config(data["kimi_linear"]["config"])]
for cfg in models:
    print(f"{cfg.name}: {cfg.n_linear} linear + {cfg.n_full} full layers")
    print("  " + "".join("F" if t == "full" else "." for t in cfg.layer_types))

# %% [markdown]
# ## Memory against context length
#
# bfloat16 cache, float32 states, one sequence. Dashed: the same model with
# every layer full attention.

# %%
# alt: Log-log plot of bytes held per sequence against context length from 1 thousand to 1 million tokens. Each hybrid's solid line starts flat, where its fixed state dominates, then rises linearly; its dashed all-attention counterpart is a straight line about four times higher at long context. Kimi Linear's lines lie below Qwen3-Next's.
lengths = [2 ** p for p in range(10, 21)]
fig, ax = plt.subplots(figsize=(7, 4.2))
for cfg, colour in zip(models, ("tab:blue", "tab:orange")):
    ax.loglog(lengths, [cache_bytes(cfg, L)["total"] / 2**30 for L in lengths], color=colour, marker="o", label=cfg.name)
    ax.loglog(lengths, [cache_bytes(cfg.all_full(), L)["total"] / 2**30 for L in lengths], color=colour, ls="--", label=f"{cfg.name}, all layers full")
ax.set_xlabel("context length (tokens)")
ax.set_ylabel("GiB per sequence")
ax.grid(True, which="both", alpha=0.3)
ax.legend()
fig.tight_layout()
plt.show()
for cfg in models:
    hybrid, full = cache_bytes(cfg, 1 << 20), cache_bytes(cfg.all_full(), 1 << 20)
    print(f"{cfg.name}: at 1M tokens {hybrid['total'] / 2**30:.1f} GiB against {full['total'] / 2**30:.1f} GiB "
          f"({1 - hybrid['total'] / full['total']:.1%} less); state {hybrid['state'] / 2**20:.1f} MiB")
