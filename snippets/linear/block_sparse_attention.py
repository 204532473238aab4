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

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["moba_block_choice", "moba_attention"]


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
# --8<-- [end:face]


# --8<-- [start:checks]
def _check_moba(q, k, v, block_size, top_k, scale):
    """Self-attention shapes, one floating dtype and device, sizes >= 1."""
    named = {"q": q, "k": k, "v": v}
    got = {n: tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
           for n, t in named.items()}
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        raise ValueError(f"q must have shape (B, H, N, d), got {got['q']}")
    d_v = v.shape[-1] if isinstance(v, torch.Tensor) and v.dim() == 4 else -1
    want = {"q": tuple(q.shape), "k": tuple(q.shape), "v": (*q.shape[:-1], d_v)}
    for name, t in ((n, t) for n, t in named.items() if t is not None):
        if got[name] != want[name]:
            raise ValueError(f"{name} must have shape {want[name]} (self-attention, "
                             f"like q {got['q']}; d_v free), got {got[name]}")
        if not (t.is_floating_point() and t.dtype == q.dtype and t.device == q.device):
            raise TypeError(f"{name} must be floating point like q ({q.dtype} on "
                            f"{q.device}), got {t.dtype} on {t.device}")
    for name, value in (("block_size", block_size), ("top_k", top_k)):
        if not (isinstance(value, int) and value >= 1):
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    finite = isinstance(scale, (int, float)) and 0 < scale < math.inf
    if scale is not None and not finite:
        raise ValueError(f"scale must be None or a finite number > 0, got {scale!r}")
# --8<-- [end:checks]
