"""Identities proven for the context-parallel page."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from identities import identity
from snippets.distributed import context_parallel as cp

PAGE = "distributed/context-parallel.md"


def _masked_reference(q, k, v, mask):
    allowed = mask[:, None, None, :] & torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril()
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed,
                                         enable_gqa=k.shape[1] != q.shape[1])
    return out.masked_fill(~allowed.any(-1, keepdim=True), 0.0)


@identity("ring-4-ranks-equals-sdpa",
          "ring attention on 4 simulated ranks (zigzag, causal, a key mask) equals SDPA on "
          "the whole sequence in one process", page=PAGE, tol=1e-12)
def ring_four_ranks():
    q, k, v = (torch.randn(2, 3, 32, 5, dtype=torch.float64) for _ in range(3))
    mask = torch.rand(2, 32) > 0.3
    out, _ = cp.simulate_ring_attention(q, k, v, 4, key_mask=mask, is_causal=True, layout="zigzag")
    return out, _masked_reference(q, k, v, mask)


@identity("ring-one-token-per-chunk-equals-sdpa",
          "ring attention with one token per chunk (8 zigzag chunks on 4 ranks) equals SDPA",
          page=PAGE, tol=1e-12)
def ring_one_token_chunks():
    q, k, v = (torch.randn(1, 2, 8, 3, dtype=torch.float64) for _ in range(3))
    out, _ = cp.simulate_ring_attention(q, k, v, 4, is_causal=True, layout="zigzag")
    return out, F.scaled_dot_product_attention(q, k, v, is_causal=True)


@identity("ring-gqa-equals-sdpa-enable-gqa",
          "ring attention moving 2 key/value heads for 6 query heads, on 3 simulated ranks, "
          "equals SDPA with enable_gqa=True", page=PAGE, tol=1e-12)
def ring_gqa():
    q = torch.randn(2, 6, 24, 5, dtype=torch.float64)
    k, v = (torch.randn(2, 2, 24, 5, dtype=torch.float64) for _ in range(2))
    mask = torch.rand(2, 24) > 0.3
    out, _ = cp.simulate_ring_attention(q, k, v, 3, key_mask=mask, is_causal=True)
    return out, _masked_reference(q, k, v, mask)


@identity("allgather-gqa-equals-sdpa-enable-gqa",
          "all-gather KV attention with grouped key/value heads equals SDPA with "
          "enable_gqa=True (one process; tests/test_context_parallel.py runs 2 and 4)",
          page=PAGE, tol=1e-12)
def allgather_gqa():
    q = torch.randn(2, 4, 10, 5, dtype=torch.float64)
    k, v = (torch.randn(2, 2, 10, 5, dtype=torch.float64) for _ in range(2))
    mask = torch.rand(2, 10) > 0.3
    out = cp.allgather_kv_attention(q, k, v, key_mask=mask, is_causal=True)
    return out, _masked_reference(q, k, v, mask)


@identity("ulysses-equals-sdpa",
          "Ulysses attention equals SDPA (one process; tests/test_context_parallel.py runs "
          "2 and 4 gloo processes, with grouped key/value heads too)", page=PAGE, tol=1e-12)
def ulysses_sdpa():
    q, k, v = (torch.randn(2, 4, 10, 5, dtype=torch.float64) for _ in range(3))
    mask = torch.rand(2, 10) > 0.3
    return cp.ulysses_attention(q, k, v, key_mask=mask, is_causal=True), _masked_reference(q, k, v, mask)


@identity("merge-block-equals-softmax",
          "merging key blocks one at a time with merge_block (online softmax) equals one "
          "softmax over all keys", page=PAGE, tol=1e-12)
def merge_equals_softmax():
    scores, v = torch.randn(2, 3, 7, 12, dtype=torch.float64), torch.randn(2, 3, 12, 4, dtype=torch.float64)
    m = torch.full((2, 3, 7, 1), float("-inf"), dtype=torch.float64)
    l, o = torch.zeros_like(m), torch.zeros(2, 3, 7, 4, dtype=torch.float64)
    for s in range(0, 12, 5):
        m, l, o = cp.merge_block(m, l, o, scores[..., s:s + 5], v[:, :, s:s + 5])
    return o / l, torch.softmax(scores, dim=-1) @ v
