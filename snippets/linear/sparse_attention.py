"""Sparse attention that chooses its keys: NSA's three branches, DeepSeek's indexer.

Papers: Yuan, Gao, Dai, Luo, Zhao, Zhang, Xie, Wei, Wang, Xiao, Wang, Ruan,
Zhang, Liang and Zeng (2025), "Native Sparse Attention: Hardware-Aligned and
Natively Trainable Sparse Attention", arXiv:2502.11089 (compressed, selected
and sliding-window branches mixed by learned gates; block importance taken
from the compressed branch's attention weights). DeepSeek-AI (2025),
"DeepSeek-V3.2: Pushing the Frontier of Open Large Language Models",
arXiv:2512.02556, and the DeepSeek-V3.2-Exp release (github.com/deepseek-ai/
DeepSeek-V3.2-Exp, inference/model.py): a lightning indexer scores every
earlier token, I[t, s] = sum_j w[t, j] ReLU(q_idx[t, j] . k_idx[s]), and
attention runs over the top-k of them (index_topk = 2048 in the release).
Page: docs/linear/sparse-attention.md
Tested against: ``F.scaled_dot_product_attention`` (every branch, and the
top-k selection, equals dense causal attention when it keeps every key), and
the calculators against key counts read off the masks, in
tests/test_sparse_attention.py.

Simplifications, said once: NSA compresses a block with a learned MLP; here a
block's key and value are the means of its keys and values, and compression
blocks and selection blocks share one size (the case where the paper takes the
selection scores directly from the compressed attention). Every head here
shares one selection, as the heads of one GQA group do in NSA and as DSA's
MQA-mode attention does.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = [
    "attend_masked",
    "causal_keys",
    "lightning_indexer",
    "topk_mask",
    "topk_sparse_attention",
    "compressed_attention",
    "selection_mask",
    "window_keys",
    "nsa_attention",
    "AttentionCost",
    "dense_decode_cost",
    "dsa_decode_cost",
    "nsa_decode_cost",
]


# --8<-- [start:masked]
def attend_allowed(q, k, v, allowed):
    """softmax(q k^T / sqrt(d)) v over the allowed keys; a row with none gives zeros."""
    scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5  # (B, H, N, M)
    scores = scores.masked_fill(~allowed, float("-inf"))  # -inf, never a finite fill
    empty = ~allowed.any(dim=-1, keepdim=True)  # (B, H, N, 1): rows with no key
    weights = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1).masked_fill(
        empty, 0.0
    )
    return weights @ v  # (B, H, N, M) @ (B, H, M, d_v) -> (B, H, N, d_v)
# --8<-- [end:masked]


# --8<-- [start:indexer]
def lightning_scores(q_idx, k_idx, w):
    """I[t, s] = sum_j w[t, j] ReLU(q_idx[t, j] . k_idx[s])."""
    dots = torch.einsum("bnhd,bmd->bnhm", q_idx, k_idx)  # (B, N, H_I, M)
    return torch.einsum("bnh,bnhm->bnm", w, F.relu(dots))  # (B, N, M)


def keep_top(scores, topk, allowed):
    """True for the topk highest scores among the allowed keys of each query."""
    scores = scores.masked_fill(
        ~allowed, float("-inf")
    )  # a future key never takes a slot
    picked = scores.topk(min(topk, scores.shape[-1]), dim=-1).indices  # (B, N, k)
    chosen = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, picked, True)
    return chosen & allowed  # fewer than k allowed keys: the -inf picks drop out
# --8<-- [end:indexer]


# --8<-- [start:nsa]
def nsa_mix(gates, out_cmp, out_slc, out_win):
    """o = g_cmp o_cmp + g_slc o_slc + g_win o_win, one gate per branch and query."""
    g_cmp, g_slc, g_win = gates.unsqueeze(-1).unbind(dim=-2)  # 3 x (B, H, N, 1)
    return g_cmp * out_cmp + g_slc * out_slc + g_win * out_win  # (B, H, N, d_v)
# --8<-- [end:nsa]


# --8<-- [start:cost]
def nsa_keys(context, block, n_select, window, cmp_block, cmp_stride):
    """Keys one NSA decoding step reads: summaries, selected blocks and the window."""
    # overlapping compression blocks: floor((T - l) / stride) + 1 complete ones
    n_cmp = (context - cmp_block) // cmp_stride + 1 if context >= cmp_block else 0
    return n_cmp + min(n_select * block, context) + min(window, context)
# --8<-- [end:cost]


# --8<-- [start:face]
def causal_keys(n: int, m: int, device=None) -> torch.Tensor:
    """(N, M) boolean, True = may attend: query i sees keys j <= i + (M - N)."""
    _check_sparse_ints(0, n=n, m=m)
    i = torch.arange(n, device=device).unsqueeze(-1) + (m - n)
    return torch.arange(m, device=device) <= i  # (N, M)


def attend_masked(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v over the keys a boolean mask allows.

    A query row with no key gives zeros, as SDPA does.

    Shape:
        q ``(B, H, N, d)``, k ``(B, H, M, d)``, v ``(B, H, M, d_v)``, mask
        broadcastable to ``(B, H, N, M)`` -> ``(B, H, N, d_v)``.
    """
    _check_qkv_sparse(q, k, v)
    _check_sparse_mask(mask, q, k)
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    # one rounding at the end for half inputs
    return attend_allowed(q.to(acc), k.to(acc), v.to(acc), mask).to(v.dtype)


def lightning_indexer(
    q_idx: torch.Tensor, k_idx: torch.Tensor, w: torch.Tensor
) -> torch.Tensor:
    """DeepSeek's lightning indexer: a cheap score for every key.

    I[t, s] = sum_j w[t, j] * ReLU(q_idx[t, j] . k_idx[s]).

    Args:
        q_idx: indexer queries, ``(B, N, H_I, d_I)`` (a few small heads).
        k_idx: one indexer key per token, shared by the heads, ``(B, M, d_I)``.
        w: per-query head weights, ``(B, N, H_I)``.

    Returns:
        ``(B, N, M)`` index scores.
    """
    _check_indexer(q_idx, k_idx, w)
    return lightning_scores(q_idx, k_idx, w)


def topk_mask(
    index_scores: torch.Tensor, topk: int, *, causal: bool = True
) -> torch.Tensor:
    """True for the ``topk`` highest-scoring keys each query may see (all if fewer).

    Shape:
        ``(B, N, M)`` scores -> ``(B, N, M)`` boolean mask.
    """
    _check_lin_tensor("index_scores", index_scores, ("B", "N", "M"))
    _check_sparse_ints(topk=topk)
    n, m = index_scores.shape[-2:]
    dev = index_scores.device
    allowed = (
        causal_keys(n, m, dev)
        if causal
        else torch.ones(n, m, dtype=torch.bool, device=dev)
    )
    return keep_top(index_scores, topk, allowed)


def topk_sparse_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    index_scores: torch.Tensor,
    topk: int,
    *,
    causal: bool = True,
) -> torch.Tensor:
    """Attention over each query's top-k keys by index score, shared by the heads.

    Shape:
        q ``(B, H, N, d)``, k ``(B, H, M, d)``, v ``(B, H, M, d_v)``, index_scores
        ``(B, N, M)`` -> ``(B, H, N, d_v)``.
    """
    _check_qkv_sparse(q, k, v)
    _check_lin_tensor("index_scores", index_scores,
                      (q.shape[0], q.shape[2], k.shape[2]), ("q", q), dtype=False)
    return attend_masked(
        q, k, v, topk_mask(index_scores, topk, causal=causal).unsqueeze(1)
    )


def compressed_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal attention over block summaries: the mean key and value of each full block.

    Query t sees block j once the block is complete: (j + 1) * block - 1 <= t.

    Returns:
        ``(out, weights)``: ``(B, H, N, d_v)`` and the weights on the blocks,
        ``(B, H, N, M // block)``, which rank blocks for the selected branch.
    """
    _check_qkv_sparse(q, k, v)
    _check_sparse_ints(block=block)
    n, m = q.shape[2], k.shape[2]
    nb = m // block
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    # (B, H, M // block, d) and (.., d_v): block means, in float32 for half
    k_cmp = k[:, :, : nb * block].to(acc).unflatten(2, (nb, block)).mean(dim=3)
    v_cmp = v[:, :, : nb * block].to(acc).unflatten(2, (nb, block)).mean(dim=3)
    t = torch.arange(n, device=q.device).unsqueeze(-1) + (
        m - n
    )  # absolute position of each query
    seen = (torch.arange(nb, device=q.device) + 1) * block - 1 <= t  # (N, M // block)
    scores = ((q.to(acc) @ k_cmp.transpose(-2, -1)) * q.shape[-1] ** -0.5).masked_fill(
        ~seen, float("-inf")
    )
    empty = ~seen.any(dim=-1, keepdim=True)  # queries before the first full block
    weights = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1).masked_fill(
        empty, 0.0
    )  # (B, H, N, nb)
    return (weights @ v_cmp).to(v.dtype), weights


def selection_mask(
    block_weights: torch.Tensor, n: int, m: int, block: int, n_select: int
) -> torch.Tensor:
    """Keys in the ``n_select`` most important blocks, the query's own block always.

    Importance of block j for query t: its compressed attention weight summed
    over the heads that share the selection. The query's own block is not yet
    complete, so the compressed branch cannot score it; it is always kept.

    Shape:
        block_weights ``(B, H, N, M // block)`` -> ``(B, N, M)`` boolean.
    """
    _check_selection(block_weights, n, m, block, n_select)
    n_blocks = math.ceil(m / block)
    importance = block_weights.sum(dim=1)  # (B, N, nb): shared by the heads
    importance = F.pad(
        importance, (0, n_blocks - importance.shape[-1])
    )  # (B, N, n_blocks)
    t = torch.arange(n, device=importance.device) + (m - n)  # (N,)
    own = t // block  # the block that holds the query
    j = torch.arange(n_blocks, device=importance.device)
    importance = importance.masked_fill(
        j > own.unsqueeze(-1), float("-inf")
    )  # future blocks never
    importance = importance.masked_fill(
        j == own.unsqueeze(-1), float("inf")
    )  # own block always
    picked = importance.topk(min(n_select, n_blocks), dim=-1).indices  # (B, N, n)
    blocks = torch.zeros_like(importance, dtype=torch.bool).scatter_(-1, picked, True)
    blocks &= importance > float("-inf")
    keys = blocks.repeat_interleave(block, dim=-1)[..., :m]  # (B, N, M)
    return keys & causal_keys(n, m, importance.device)


def window_keys(n: int, m: int, window: int, device=None) -> torch.Tensor:
    """(N, M) boolean: the last ``window`` keys up to the query's position."""
    _check_sparse_ints(window=window)
    causal = causal_keys(n, m, device)  # checks n and m: j <= i
    i = torch.arange(n, device=device).unsqueeze(-1) + (m - n)
    return causal & (torch.arange(m, device=device) > i - window)


def nsa_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    gates: torch.Tensor,
    *,
    block: int = 16,
    n_select: int = 4,
    window: int = 32,
) -> torch.Tensor:
    """out = g_cmp * compressed + g_slc * selected + g_win * sliding window.

    Args:
        gates: ``(B, H, N, 3)`` in [0, 1] (a sigmoid of a learned projection in
            NSA), in the order compressed, selected, window.

    Shape:
        q ``(B, H, N, d)``, k ``(B, H, M, d)``, v ``(B, H, M, d_v)``
        -> ``(B, H, N, d_v)``.
    """
    _check_qkv_sparse(q, k, v)
    _check_lin_tensor("gates", gates, (*q.shape[:3], 3), ("q", q), dtype=False)
    n, m, dtype = q.shape[2], k.shape[2], v.dtype
    acc = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    q, k, v, g = (t.to(acc) for t in (q, k, v, gates))  # one rounding, at the end
    out_cmp, block_weights = compressed_attention(q, k, v, block)
    out_slc = attend_masked(
        q, k, v, selection_mask(block_weights, n, m, block, n_select).unsqueeze(1)
    )
    out_win = attend_masked(q, k, v, window_keys(n, m, window, q.device))
    return nsa_mix(g, out_cmp, out_slc, out_win).to(dtype)  # (B, H, N, d_v)


@dataclass(frozen=True)
class AttentionCost:
    """What one decoded token costs in one layer, at a given context length.

    keys: keys the core attention reads; attention_flops: 2 * H * keys *
    (d_qk + d_v) (scores and weighted sum, a multiply-add counted as 2);
    index_flops: the selector's own work; read_bytes: cache bytes read.
    """

    keys: int
    attention_flops: int
    index_flops: int
    read_bytes: int

    @property
    def flops(self) -> int:
        return self.attention_flops + self.index_flops


def dense_decode_cost(
    context: int, *, n_heads: int, d_qk: int, d_v: int, kv_bytes_per_token: int
) -> AttentionCost:
    """Dense attention: every one of the ``context`` keys."""
    _check_sparse_ints(**locals())  # every argument is a count >= 1
    return AttentionCost(
        context, 2 * n_heads * context * (d_qk + d_v), 0, context * kv_bytes_per_token
    )


def dsa_decode_cost(
    context: int,
    *,
    n_heads: int,
    d_qk: int,
    d_v: int,
    kv_bytes_per_token: int,
    topk: int = 2048,
    index_heads: int = 64,
    index_dim: int = 128,
    index_bytes_per_token: int = 128,
) -> AttentionCost:
    """DeepSeek sparse attention: the indexer reads every key, attention the top-k."""
    _check_sparse_ints(**locals())  # every argument is a count >= 1
    dense = dense_decode_cost(
        min(topk, context),
        n_heads=n_heads,
        d_qk=d_qk,
        d_v=d_v,
        kv_bytes_per_token=kv_bytes_per_token,
    )
    # Per key: H_I dot products of width d_I, a ReLU and a weighted sum over H_I.
    index_flops = context * index_heads * (2 * index_dim + 2)
    return AttentionCost(
        dense.keys,
        dense.attention_flops,
        index_flops,
        dense.read_bytes + context * index_bytes_per_token,
    )


def nsa_decode_cost(
    context: int,
    *,
    n_heads: int,
    d_qk: int,
    d_v: int,
    kv_bytes_per_token: int,
    block: int = 64,
    n_select: int = 16,
    window: int = 512,
    cmp_block: int = 32,
    cmp_stride: int = 16,
) -> AttentionCost:
    """NSA: every compressed summary, the selected blocks and the window.

    NSA compresses overlapping blocks of ``cmp_block`` keys every ``cmp_stride``
    tokens (32 and 16 in the paper): floor((T - l) / stride) + 1 summaries, about
    T / 16, the branch that grows with the context. ``block`` is the selection
    block (64 in the paper). The three branches are counted separately (a key
    both selected and in the window is read twice, as three kernels would).
    """
    _check_sparse_ints(**locals())  # every argument is a count >= 1
    keys = nsa_keys(context, block, n_select, window, cmp_block, cmp_stride)
    flops = 2 * n_heads * keys * (d_qk + d_v)
    # The summaries live in their own small cache, one entry per compressed block.
    return AttentionCost(keys, flops, 0, keys * kv_bytes_per_token)
# --8<-- [end:face]


# --8<-- [start:checks]
def _check_lin_tensor(name, t, shape, like=None, dtype=True) -> None:
    """A floating tensor of shape (a str: any size); like = (name, tensor) to match."""
    peer, ref = like or (name, t)
    ok = torch.is_tensor(t) and t.is_floating_point() and t.dim() == len(shape)
    if not ok or any(w != s for w, s in zip(shape, t.shape) if isinstance(w, int)) or (
            t.device != ref.device or dtype and t.dtype != ref.dtype):
        got = f"{t.dtype} {tuple(t.shape)} on {t.device}" if torch.is_tensor(t) else t
        raise (ValueError if ok else TypeError)(
            f"{name} must be a floating ({', '.join(map(str, shape))}) tensor on "
            f"{peer}'s device{' and dtype' if dtype else ''}, got {got}")


def _check_sparse_ints(low=1, **named) -> None:
    for name, value in named.items():
        if not (isinstance(value, int) and value >= low):
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")


def _check_qkv_sparse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """q (B, H, N, d), k (B, H, M, d), v (B, H, M, d_v): of one dtype and device."""
    _check_lin_tensor("q", q, ("B", "H", "N", "d"))
    _check_lin_tensor("k", k, (*q.shape[:2], "M", q.shape[3]), ("q", q))
    _check_lin_tensor("v", v, (*k.shape[:3], "d_v"), ("q", q))


def _check_sparse_mask(mask: object, q: torch.Tensor, k: torch.Tensor) -> None:
    """A bool mask (True = may attend) on q's device that broadcasts to (B, H, N, M)."""
    shape, is_t = (*q.shape[:3], k.shape[2]), torch.is_tensor(mask)
    if not (is_t and mask.dtype == torch.bool and mask.device == q.device) or not (
            2 <= mask.dim() <= 4) or any(
            s not in (1, w) for s, w in zip(mask.shape[::-1], shape[::-1])):
        got = f"{mask.dtype} {tuple(mask.shape)} on {mask.device}" if is_t else mask
        raise (ValueError if is_t else TypeError)(f"mask must be a torch.bool tensor "
            f"(True = may attend) on {q.device} that broadcasts to {shape}, got {got}")


def _check_indexer(q_idx: object, k_idx: object, w: object) -> None:
    _check_lin_tensor("q_idx", q_idx, ("B", "N", "H_I", "d_I"))
    b, n, h, d = q_idx.shape
    _check_lin_tensor("k_idx", k_idx, (b, "M", d), ("q_idx", q_idx))
    _check_lin_tensor("w", w, (b, n, h), ("q_idx", q_idx))


def _check_selection(block_weights, n: int, m: int, block: int, n_select: int) -> None:
    _check_sparse_ints(0, n=n, m=m)
    _check_sparse_ints(block=block, n_select=n_select)
    _check_lin_tensor("block_weights", block_weights, ("B", "H", n, m // block))
# --8<-- [end:checks]
