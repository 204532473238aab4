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
def _describe(t: object) -> str:
    if isinstance(t, torch.Tensor):
        return f"{t.dtype} {tuple(t.shape)} on {t.device}"
    return type(t).__name__


def _check_given(ok: object, name: str, want: str, got: object, error=ValueError):
    """Raise error("<name> must <want>, got <got>") unless ok."""
    if not ok:
        raise error(f"{name} must {want}, got {got}")


def _check_keep(s: torch.Tensor, budget: int, recent: int) -> None:
    ok = isinstance(s, torch.Tensor) and s.dim() == 3 and s.is_floating_point()
    _check_given(ok, "scores_sum", "be a floating (B, H, T) tensor", _describe(s))
    ok = isinstance(budget, int) and budget >= 1
    _check_given(ok, "budget", "be an int >= 1", repr(budget))
    ok = isinstance(recent, int) and 0 <= recent <= budget
    _check_given(ok, "recent", f"be an int in [0, budget = {budget}]", repr(recent))


def _check_snapkv(q_window, k, budget, pool) -> None:
    for name, t in (("k", k), ("q_window", q_window)):  # q_window: (B, H, w, d)
        ok = isinstance(t, torch.Tensor) and t.dim() == 4 and t.is_floating_point()
        ok = ok and (t.shape[:2], t.shape[3], t.dtype, t.device) == (
            k.shape[:2], k.shape[3], k.dtype, k.device)
        _check_given(ok, name, "be a floating (B, H, L, d) tensor like k", _describe(t))
    w = q_window.shape[2]  # budget >= w: a window longer than k keeps every key
    ok = isinstance(budget, int) and budget >= w
    _check_given(ok, "budget", f"be an int >= the window w = {w}", repr(budget))
    ok = isinstance(pool, int) and pool >= 1 and pool % 2 == 1
    _check_given(ok, "pool", "be an odd int >= 1", repr(pool))


def _check_evict(cache: torch.Tensor, keep: torch.Tensor) -> None:
    ok = isinstance(cache, torch.Tensor) and cache.dim() == 4
    _check_given(ok, "cache", "be (B, H, T, d)", _describe(cache))
    ok = isinstance(keep, torch.Tensor) and keep.dtype == torch.int64
    ok = ok and keep.dim() == 3 and keep.shape[:2] == cache.shape[:2]
    _check_given(ok, "keep", "be int64 (B, H, budget) like cache", _describe(keep))
    bad = keep[(keep < 0) | (keep >= cache.shape[2])].tolist()  # rows outside the cache
    _check_given(not bad, "keep", f"index rows 0 .. {cache.shape[2] - 1}", bad)
# --8<-- [end:validate]
