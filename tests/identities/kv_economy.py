"""Identities proven for the KV-cache economy page."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from identities import identity
from snippets.efficiency import kv_eviction as E
from snippets.efficiency import kv_quantization as Q
from snippets.efficiency import prefix_cache as PC

PAGE = "efficiency/kv-economy.md"


@identity("prefix-reuse-equals-recompute",
          "a suffix attending over cached prefix K/V equals causal attention over the whole prompt",
          page=PAGE, tol=1e-12)
def prefix_reuse_equals_recompute():
    q, k, v = (torch.randn(1, 2, 11, 8, dtype=torch.float64) for _ in range(3))
    ours = PC.attend_with_prefix(q[..., 8:, :], k[..., 8:, :], v[..., 8:, :], k[..., :8, :], v[..., :8, :])
    return ours, F.scaled_dot_product_attention(q, k, v, is_causal=True)[..., 8:, :]


@identity("kivi-keys-keep-the-unfilled-group",
          "KIVI keys: the T mod R newest keys are returned exactly",
          page=PAGE, tol=0.0)
def kivi_keys_keep_the_unfilled_group():
    k = torch.randn(1, 2, 75, 64, dtype=torch.float64)
    return Q.kivi_keys(k, 2, 32)[..., 64:, :], k[..., 64:, :]


@identity("eviction-full-budget-exact",
          "H2O and SnapKV with a budget that holds every key equal full attention",
          page=PAGE, tol=1e-12)
def eviction_full_budget_exact():
    q = torch.randn(1, 2, 1, 8, dtype=torch.float64)
    k, v = (torch.randn(1, 2, 12, 8, dtype=torch.float64) for _ in range(2))
    keep_h2o, keep_snap = E.h2o_keep(torch.rand(1, 2, 12), 12, 4), E.snapkv_keep(k[..., -3:, :], k, 12)
    outs = [F.scaled_dot_product_attention(q, E.evict(k, keep), E.evict(v, keep)) for keep in (keep_h2o, keep_snap)]
    return torch.cat(outs), torch.cat([F.scaled_dot_product_attention(q, k, v)] * 2)
