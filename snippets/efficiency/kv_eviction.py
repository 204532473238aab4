"""KV-cache eviction: keep a budget of keys chosen by the attention they received.

H2O (Zhang, Sheng, Zhou, Chen, Zheng, Cai, Song, Tian, Re, Barrett, Wang and
Chen, 2023, arXiv:2306.14048) keeps the most recent tokens and the "heavy
hitters", the older tokens with the largest attention summed over the queries
so far. SnapKV (Li, Huang, Yang, Venkitesh, Locatelli, Ye, Cai, Lewis and
Chen, 2024, arXiv:2404.14469) scores the prompt's keys once, by the attention
of the prompt's last few queries (an observation window), pooled over
neighbouring keys so that clusters survive together.

Positions: this file evicts keys that were rotated (RoPE) at their true
positions before they were cached, so a kept key keeps its position. H2O's
streaming code renumbers the kept keys on purpose (it rotates at
``arange(cache_len)``); its non-streaming code and SnapKV keep the true
positions, as this file does.

Page: docs/efficiency/kv-economy.md
Tested against: full attention when the budget holds every key, and attention
over the kept keys written out independently (tests/test_kv_economy.py).

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["h2o_keep", "snapkv_keep", "evict"]


# --8<-- [start:h2o]
def h2o_keep(scores_sum: torch.Tensor, budget: int, recent: int) -> torch.Tensor:
    """Indices (B, H, budget) to keep: the newest ``recent`` and the heaviest older."""
    _check_keep(scores_sum, budget, recent)
    t = scores_sum.shape[-1]
    if budget >= t:
        return torch.arange(t, device=scores_sum.device).expand_as(scores_sum)
    older = scores_sum[..., : t - recent]  # (B, H, T - recent) candidates
    heavy = older.topk(budget - recent, dim=-1).indices  # (B, H, budget - recent)
    newest = torch.arange(t - recent, t, device=scores_sum.device)
    newest = newest.expand(*scores_sum.shape[:-1], recent)  # (B, H, recent)
    return torch.cat([heavy, newest], dim=-1).sort(dim=-1).values
# --8<-- [end:h2o]


# --8<-- [start:snapkv]
def snapkv_keep(
    q_window: torch.Tensor, k: torch.Tensor, budget: int, pool: int = 7
) -> torch.Tensor:
    """Indices (B, H, budget): the observation window and the keys it reads most."""
    _check_snapkv(q_window, k, budget, pool)
    w, t = q_window.shape[-2], k.shape[-2]
    if budget >= t:
        return torch.arange(t, device=k.device).expand(*k.shape[:-2], t)
    weights = torch.softmax(q_window @ k[..., : t - w, :].transpose(-1, -2)
                            * k.shape[-1] ** -0.5, dim=-1)  # (B, H, w, T - w)
    votes = weights.sum(dim=-2)  # (B, H, T - w): attention each prefix key received
    votes = F.max_pool1d(votes.flatten(0, 1).unsqueeze(1), pool, 1, pool // 2)
    votes = votes.view(*k.shape[:-2], t - w)  # neighbours of a voted key score too
    chosen = votes.topk(budget - w, dim=-1).indices  # (B, H, budget - w)
    window = torch.arange(t - w, t, device=k.device).expand(*k.shape[:-2], w)
    return torch.cat([chosen, window], dim=-1).sort(dim=-1).values
# --8<-- [end:snapkv]


# --8<-- [start:evict]
def evict(cache: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """The kept rows of a (B, H, T, d) cache: (B, H, budget, d), positions unchanged."""
    _check_evict(cache, keep)
    index = keep.unsqueeze(-1).expand(*keep.shape, cache.shape[-1])  # (B, H, budget, d)
    return cache.gather(-2, index)
# --8<-- [end:evict]


# --8<-- [start:validate]
def _check_keep(scores_sum: torch.Tensor, budget: int, recent: int) -> None:
    if not isinstance(scores_sum, torch.Tensor) or scores_sum.dim() != 3 \
            or not scores_sum.is_floating_point():
        got = f"{scores_sum.dtype} {tuple(scores_sum.shape)}" \
            if isinstance(scores_sum, torch.Tensor) else type(scores_sum).__name__
        raise ValueError(f"scores_sum must be a floating (B, H, T) tensor, got {got}")
    if not isinstance(budget, int) or budget < 1:
        raise ValueError(f"budget must be an int >= 1, got {budget!r}")
    if not isinstance(recent, int) or not 0 <= recent <= budget:
        raise ValueError(f"recent must be an int in [0, budget = {budget}], "
                         f"got {recent!r}")


def _check_snapkv(q_window, k, budget, pool) -> None:
    for name, t in (("q_window", q_window), ("k", k)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4 or not t.is_floating_point():
            got = f"{t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) \
                else type(t).__name__
            raise ValueError(f"{name} must be a floating (B, H, L, d) tensor, "
                             f"got {got}")
    if q_window.shape[:2] != k.shape[:2] or q_window.shape[-1] != k.shape[-1] \
            or q_window.shape[-2] > k.shape[-2] or q_window.dtype != k.dtype \
            or q_window.device != k.device:
        raise ValueError(f"q_window must be (B, H, w, d) with w <= T and k's B, H, d, "
                         f"dtype and device, got {tuple(q_window.shape)} "
                         f"{q_window.dtype} on {q_window.device} for k "
                         f"{tuple(k.shape)} {k.dtype} on {k.device}")
    if not isinstance(budget, int) or budget < q_window.shape[-2]:
        raise ValueError(f"budget must be an int >= the window w = "
                         f"{q_window.shape[-2]}, got {budget!r}")
    if not isinstance(pool, int) or pool < 1 or pool % 2 == 0:
        raise ValueError(f"pool must be an odd int >= 1, got {pool!r}")


def _check_evict(cache: torch.Tensor, keep: torch.Tensor) -> None:
    if not isinstance(cache, torch.Tensor) or cache.dim() != 4:
        got = tuple(cache.shape) if isinstance(cache, torch.Tensor) \
            else type(cache).__name__
        raise ValueError(f"cache must be (B, H, T, d), got {got}")
    if not isinstance(keep, torch.Tensor) or keep.dtype != torch.int64 \
            or keep.dim() != 3 or keep.shape[:2] != cache.shape[:2]:
        got = f"{keep.dtype} {tuple(keep.shape)}" if isinstance(keep, torch.Tensor) \
            else type(keep).__name__
        raise ValueError(f"keep must be int64 (B, H, budget) with the cache's B, H "
                         f"{tuple(cache.shape[:2])}, got {got}")
    if keep.numel() and (keep.min() < 0 or keep.max() >= cache.shape[-2]):
        raise ValueError(f"keep must index rows 0 .. {cache.shape[-2] - 1}, got "
                         f"{int(keep.min())} .. {int(keep.max())}")
# --8<-- [end:validate]
