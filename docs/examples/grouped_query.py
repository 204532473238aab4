# %% [markdown]
# # Example: grouped-query attention
#
# This page was executed when the site was built. It builds
# [grouped-query attention](../attention/grouped-query.md) with 8, 2 and 1
# key/value heads, checks it against the repeated-heads form and
# `enable_gqa=True`, and shows that the query heads of one group share keys but
# not weights. Letters follow the [notation](../notation.md) page.

# %%
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from snippets.attention.grouped_query import GroupedQueryAttention, repeat_kv
from snippets.efficiency.kv_cache import kv_cache_bytes
from _plotting import attention_heatmap

torch.manual_seed(0)
x = torch.randn(1, 10, 64)  # (B, N, D)

# %%
for h_kv in (8, 2, 1):
    m = GroupedQueryAttention(64, 8, h_kv)
    kv_params = sum(p.numel() for p in (*m.k_proj.parameters(), *m.v_proj.parameters()))
    out, _ = m(x, is_causal=True)
    # the same thing, by hand: project, repeat each kv head G times, ordinary SDPA
    q = m.q_proj(x).view(1, 10, 8, 8).transpose(1, 2)
    k = m.k_proj(x).view(1, 10, h_kv, 8).transpose(1, 2)
    v = m.v_proj(x).view(1, 10, h_kv, 8).transpose(1, 2)
    rep = F.scaled_dot_product_attention(q, repeat_kv(k, 8 // h_kv), repeat_kv(v, 8 // h_kv), is_causal=True)
    gqa = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    print(f"H_kv = {h_kv}: out {tuple(out.shape)}, k {tuple(k.shape)}, k/v params {kv_params:5d}, "
          f"|repeat - enable_gqa| = {(rep - gqa).abs().max():.1e}, "
          f"cache for 4096 tokens x 2 layers {kv_cache_bytes(1, 4096, 2, h_kv, 8, torch.float32) / 2**20:.2f} MiB")

# %% [markdown]
# ## Two heads, one group
#
# With $H_{kv} = 2$, query heads 0 to 3 share key/value head 0. Their weights
# differ, because their queries differ.

# %%
# alt: Two 10 by 10 causal attention-weight heatmaps, for query heads 0 and 1 of a grouped-query layer that share one key/value head: both are lower triangular, with different patterns of weight.
m = GroupedQueryAttention(64, 8, 2)
_, weights = m(x, is_causal=True, need_weights=True)
fig, axes = plt.subplots(1, 2, figsize=(9, 3.8))
for h, ax in zip((0, 1), axes):
    attention_heatmap(weights[0, h], ax=ax, title=f"query head {h} (key/value head {h // 4})")
fig.tight_layout()
plt.show()
print("rows sum to 1:", torch.allclose(weights.sum(-1), torch.ones(1, 8, 10)))
