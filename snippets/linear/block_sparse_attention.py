"""MoBA: each query attends to its own block and the past blocks a gate picks.

Paper: Lu, Jiang, Liu, Du, Jiang, Hong, Liu, He, Yuan, Wang et al. (2025),
"MoBA: Mixture of Block Attention for Long-Context LLMs", arXiv:2502.13189.
The keys are cut into blocks of C tokens. A query scores each block by its
dot product with the block's mean key (a gate with no parameters), keeps its
own block always and the best of the blocks that end before its own, top_k
blocks in all, and runs causal softmax attention over the keys it kept.
Page: docs/linear/block-sparse-attention.md
Tested against: the selection written out block by block as the authors'
reference does (own block +inf, later blocks -inf, top-k, then a causal mask),
and F.scaled_dot_product_attention(is_causal=True) when top_k covers every
block, in tests/test_block_sparse_attention.py.

MiniMax's sparse attention (MiniMax M3, in transformers as
``MiniMaxM3VLIndexer``) chooses per GQA group instead: a small index branch, one
index query per group and one shared index key, scores every past key; the
scores are max-pooled per block, the ``local_blocks`` blocks ending at the
query's own are forced in (they count toward ``top_k``), and every query head
of the group reads the same blocks. Tested against that class's block indices
and its ``build_block_mask``.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["moba_block_choice", "moba_attention", "group_block_choice",
           "group_sparse_attention"]


# --8<-- [start:gate]
def moba_gate(q, k, block, top_k):
    """Blocks each query keeps: its own, and the top_k - 1 best past blocks."""
    n, n_blocks = k.shape[-2], math.ceil(k.shape[-2] / block)
    sums = F.pad(k, (0, 0, 0, n_blocks * block - n)).unflatten(-2, (n_blocks, block))
    sizes = (n - torch.arange(n_blocks, device=k.device) * block).clamp(max=block)
    means = sums.sum(dim=-2) / sizes.unsqueeze(-1).to(k.dtype)  # (B, H, n_b, d)
    scores = q @ means.transpose(-2, -1)  # (B, H, N, n_b): q . mean key of the block
    own = (torch.arange(q.shape[-2], device=q.device) // block).unsqueeze(-1)  # (N, 1)
    blocks = torch.arange(n_blocks, device=q.device)  # (n_b,)
    # a block that does not end before the query's own is no candidate; its own wins
    scores = scores.masked_fill(blocks >= own, -math.inf)
    scores = scores.masked_fill(blocks == own, math.inf)
    top = scores.topk(min(top_k, n_blocks), dim=-1).indices  # (B, H, N, top_k)
    kept = torch.zeros_like(scores, dtype=torch.bool).scatter(-1, top, True)
    return kept & (blocks <= own)  # a future block never counts, even if k is large
# --8<-- [end:gate]


# --8<-- [start:attend]
def moba(q, k, v, block, top_k, scale):
    """Causal softmax attention over the keys of the kept blocks only."""
    kept = moba_gate(q, k, block, top_k)  # (B, H, N, n_b)
    keys = kept.repeat_interleave(block, dim=-1)[..., : k.shape[-2]]  # (B, H, N, M)
    n = q.shape[-2]
    causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()  # (N, M = N)
    # every row keeps its own block, so its own key: no row is empty
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keys & causal, scale=scale)
# --8<-- [end:attend]


# --8<-- [start:group_gate]
def group_gate(index_q, index_k, block, top_k, local):
    """Per group: max-pool causal index scores per block, force local, keep top_k."""
    n, n_blocks = index_k.shape[-2], math.ceil(index_k.shape[-2] / block)
    causal = torch.ones(n, n, dtype=torch.bool, device=index_k.device).tril()
    # (B, G, N, d_i) @ (B, 1, d_i, N) -> (B, G, N, N): one index query per group
    scores = (index_q @ index_k.transpose(-2, -1)).masked_fill(~causal, -math.inf)
    pad = (0, n_blocks * block - n)  # (B, G, N, n_b, C) -> max over each block's keys
    blocks = F.pad(scores, pad, value=-math.inf).unflatten(-1, (n_blocks, block))
    pooled = blocks.amax(dim=-1)  # (B, G, N, n_b)
    own = torch.arange(n, device=index_k.device) // block  # (N,)
    near = (own.unsqueeze(-1) - torch.arange(local, device=own.device)).clamp(min=0)
    pooled = pooled.scatter(-1, near.expand(*pooled.shape[:-1], local), math.inf)
    best, top = pooled.topk(min(top_k, n_blocks), dim=-1)  # (B, G, N, top_k)
    # a slot that fell on a future block (score -inf) keeps nothing
    return torch.zeros_like(pooled, dtype=torch.bool).scatter(-1, top, best > -math.inf)
# --8<-- [end:group_gate]


# --8<-- [start:group_attend]
def group_sparse(q, k, v, index_q, index_k, block, top_k, local, scale):
    """Each query head reads the blocks its GQA group kept, causally."""
    kept = group_gate(index_q, index_k, block, top_k, local)  # (B, G, N, n_b)
    heads = kept.repeat_interleave(q.shape[1] // kept.shape[1], dim=1)  # (B, H, N, n_b)
    keys = heads.repeat_interleave(block, dim=-1)[..., : k.shape[-2]]  # (B, H, N, M)
    n = q.shape[-2]
    causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keys & causal, scale=scale)
# --8<-- [end:group_attend]


# --8<-- [start:face]
def moba_block_choice(
    q: torch.Tensor, k: torch.Tensor, *, block_size: int, top_k: int
) -> torch.Tensor:
    """Which key blocks each query attends to under MoBA's gate.

    Args:
        q: queries ``(B, H, N, d)``.
        k: keys ``(B, H, N, d)`` (self-attention: the same N tokens).
        block_size: tokens per key block C, >= 1; the last block may be short.
        top_k: blocks per query, the query's own block included, >= 1.

    Returns:
        A bool tensor ``(B, H, N, ceil(N / C))``: True where a query keeps a
        block. Row ``i`` keeps block ``i // C`` and at most ``top_k - 1``
        blocks that end before it.

    Shape:
        q, k ``(B, H, N, d)`` -> ``(B, H, N, ceil(N / C))``.
    """
    _check_moba(q, k, None, block_size, top_k, None)
    acc = torch.promote_types(q.dtype, torch.float32)  # the gate ranks in float32
    return moba_gate(q.to(acc), k.to(acc), block_size, top_k)


def moba_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    block_size: int,
    top_k: int,
    scale: float | None = None,
) -> torch.Tensor:
    """MoBA: causal attention over the blocks that each query's gate keeps.

    With ``top_k >= ceil(N / block_size)`` every past block is kept and this is
    causal softmax attention.

    Args:
        q: queries ``(B, H, N, d)``.
        k: keys ``(B, H, N, d)``.
        v: values ``(B, H, N, d_v)``.
        block_size: tokens per key block C, >= 1.
        top_k: blocks per query, its own block included, >= 1.
        scale: score scale; default ``1 / sqrt(d)``.

    Returns:
        The output ``(B, H, N, d_v)`` in the input dtype.

    Shape:
        q, k ``(B, H, N, d)``; v ``(B, H, N, d_v)`` -> ``(B, H, N, d_v)``.
    """
    _check_moba(q, k, v, block_size, top_k, scale)
    acc = torch.promote_types(q.dtype, torch.float32)
    out = moba(q.to(acc), k.to(acc), v.to(acc), block_size, top_k, scale)
    return out.to(q.dtype)

def group_block_choice(
    index_q: torch.Tensor,
    index_k: torch.Tensor,
    *,
    block_size: int,
    top_k: int,
    local_blocks: int = 1,
) -> torch.Tensor:
    """Which key blocks each GQA group reads under MiniMax's index branch.

    Args:
        index_q: index queries ``(B, G, N, d_i)``, one per GQA group.
        index_k: the shared index key ``(B, 1, N, d_i)``.
        block_size: tokens per key block C, >= 1 (MiniMax M3: 128).
        top_k: blocks per query and group, the local ones included (M3: 16).
        local_blocks: blocks ending at the query's own that are always read
            (M3: 1), >= 0.

    Returns:
        A bool tensor ``(B, G, N, ceil(N / C))``: True where a group's query
        reads a block.

    Shape:
        index_q ``(B, G, N, d_i)``, index_k ``(B, 1, N, d_i)`` ->
        ``(B, G, N, ceil(N / C))``.
    """
    _check_group(index_q, index_k, None, None, None, block_size, top_k, local_blocks)
    acc = torch.promote_types(index_q.dtype, torch.float32)
    return group_gate(index_q.to(acc), index_k.to(acc), block_size, top_k, local_blocks)


def group_sparse_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    index_q: torch.Tensor,
    index_k: torch.Tensor,
    *,
    block_size: int,
    top_k: int,
    local_blocks: int = 1,
    scale: float | None = None,
) -> torch.Tensor:
    """MiniMax's block-sparse attention: GQA heads read their group's blocks.

    Args:
        q: queries ``(B, H, N, d)``.
        k: keys ``(B, G, N, d)``, G = H_kv dividing H.
        v: values ``(B, G, N, d_v)``.
        index_q: index queries ``(B, G, N, d_i)``.
        index_k: the shared index key ``(B, 1, N, d_i)``.
        block_size: tokens per key block, >= 1.
        top_k: blocks per query and group, local ones included, >= 1.
        local_blocks: blocks ending at the query's own always read, >= 0.
        scale: score scale; default ``1 / sqrt(d)``.

    Returns:
        The output ``(B, H, N, d_v)`` in the input dtype.

    Shape:
        q ``(B, H, N, d)``; k, v ``(B, G, N, d)``; index_q ``(B, G, N, d_i)``;
        index_k ``(B, 1, N, d_i)`` -> ``(B, H, N, d_v)``.
    """
    _check_group(index_q, index_k, q, k, v, block_size, top_k, local_blocks, scale)
    acc = torch.promote_types(q.dtype, torch.float32)
    out = group_sparse(*(t.to(acc) for t in (q, k, v, index_q, index_k)),
                       block_size, top_k, local_blocks, scale)
    return out.to(q.dtype)
# --8<-- [end:face]


# --8<-- [start:checks]
def _check_moba(q, k, v, block_size, top_k, scale):
    """q, k (B, H, N, d) alike, v (B, H, N, d_v); sizes >= 1; scale > 0."""
    _check_lin_tensor("q", q, ("B", "H", "N", "d"))
    _check_lin_tensor("k", k, q.shape, ("q", q))
    if v is not None:
        _check_lin_tensor("v", v, (*q.shape[:-1], "d_v"), ("q", q))
    _check_block_numbers(scale, block_size=(block_size, 1), top_k=(top_k, 1))


def _check_group(index_q, index_k, q, k, v, block_size, top_k, local_blocks,
                 scale=None):
    """The index branch per group; q (B, H, N, d) with G dividing H; k, v per group."""
    _check_lin_tensor("index_q", index_q, ("B", "G", "N", "d_i"))
    (b, g, n, d_i), like = index_q.shape, ("index_q", index_q)
    _check_lin_tensor("index_k", index_k, (b, 1, n, d_i), like)
    if q is not None:
        _check_lin_tensor("q", q, (b, "H", n, "d"), like)
        _check_lin_tensor("k", k, (b, g, n, q.shape[-1]), like)
        _check_lin_tensor("v", v, (b, g, n, "d_v"), like)
        if q.shape[1] % g:
            raise ValueError(f"q must have H a multiple of G = {g}, got {q.shape[1]}")
    _check_block_numbers(scale, block_size=(block_size, 1), top_k=(top_k, 1),
                         local_blocks=(local_blocks, 0))


def _check_block_numbers(scale, **sizes):
    """Each size an int >= its floor; scale None or a finite number > 0."""
    for name, (value, low) in sizes.items():
        if not (isinstance(value, int) and value >= low):
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be None or a finite number > 0, got {scale!r}")


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
# --8<-- [end:checks]
