"""Serving-time attention: a paged KV cache, ragged batches, split-KV decoding
and greedy speculative decoding.

Papers: Kwon et al. (2023), "Efficient Memory Management for Large Language
Model Serving with PagedAttention", arXiv:2309.06180 (the block table over
fixed-size pages); Leviathan, Kalman and Matias (2022), "Fast Inference from
Transformers via Speculative Decoding", arXiv:2211.17192 (a draft model
proposes, the target verifies in one pass). Split-KV decoding merges partial
results by their log-sum-exp, the online-softmax rule of Milakov and
Gimelshein (2018), "Online normalizer calculation for softmax",
arXiv:1805.02867, applied across the key axis as Flash-Decoding does.
Page: docs/efficiency/serving.md
Tested against: torch.nn.functional.scaled_dot_product_attention on the
contiguous keys and values, each ragged sequence attended alone, and plain
greedy decoding (tests/test_serving.py).

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

__all__ = [
    "PagedKVCache",
    "paged_decode",
    "ragged_causal_mask",
    "split_kv_attention",
    "speculative_generate",
]


def _check_count(name: str, value: object, minimum: int = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def _check_float_dtype(dtype: object) -> None:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")


def _check_page_kv(k: object, v: object, pool: torch.Tensor) -> None:
    """Raise unless k and v are floating (H_kv, n, d) tensors that fit the pool of pages."""
    want = (pool.shape[1], pool.shape[3])
    if not isinstance(k, torch.Tensor) or k.dim() != 3 or (k.shape[0], k.shape[2]) != want \
            or not isinstance(v, torch.Tensor) or v.shape != k.shape:
        got = [tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__ for t in (k, v)]
        raise ValueError(f"k and v must both have shape (H_kv, n, d) = ({want[0]}, n, {want[1]}), got {got}")
    for name, t in (("k", k), ("v", v)):
        if not t.is_floating_point():
            raise TypeError(f"{name} must have a floating dtype (the pool stores {pool.dtype}), got {t.dtype}")
        if t.device != pool.device:
            raise ValueError(f"{name} must be on the pool's device {pool.device}, got {t.device}")


def _check_paged_decode(q: object, cache: object, seqs: object) -> None:
    """Raise unless ``seqs`` are live sequences of ``cache`` and q holds one query per sequence."""
    if not isinstance(cache, PagedKVCache):
        raise TypeError(f"cache must be a PagedKVCache, got {type(cache).__name__}")
    if not isinstance(seqs, (list, tuple)) or not all(
        isinstance(s, int) and not isinstance(s, bool) and s in cache.tables for s in seqs
    ):
        raise ValueError(f"seqs must be a list of live sequence ids {sorted(cache.tables)}, got {seqs!r}")
    pool = cache.k_pages
    h_kv, d = pool.shape[1], pool.shape[3]
    if not isinstance(q, torch.Tensor) or q.dim() != 4 or q.shape[0] != len(seqs) or q.shape[2] != 1 \
            or q.shape[1] % h_kv or q.shape[3] != d:
        got = tuple(q.shape) if isinstance(q, torch.Tensor) else type(q).__name__
        raise ValueError(
            f"q must have shape (B, H, 1, d) with B = len(seqs) = {len(seqs)}, d = {d} and H a "
            f"multiple of H_kv = {h_kv}, got {got}"
        )
    if q.dtype != pool.dtype:
        raise TypeError(f"q must have the cache's dtype {pool.dtype}, got {q.dtype}")
    if q.device != pool.device:
        raise ValueError(f"q must be on the cache's device {pool.device}, got {q.device}")


def _check_split_kv(q: object, k: object, v: object, n_splits: object) -> None:
    """Raise unless q (B, H, N, d), k (B, H, M, d), v (B, H, M, d_v) and n_splits fit together."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4 or not t.is_floating_point():
            got = f"{tuple(t.shape)} {t.dtype}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a floating tensor of shape (B, H, length, d), got {got}")
    if k.shape[:2] != q.shape[:2] or k.shape[-1] != q.shape[-1] or v.shape[:3] != k.shape[:3]:
        raise ValueError(
            f"q, k and v must be (B, H, N, d), (B, H, M, d) and (B, H, M, d_v), "
            f"got q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    if k.device != q.device or v.device != q.device:
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device} and {v.device}")
    _check_count("n_splits", n_splits, 1)
    if n_splits > k.shape[-2]:
        raise ValueError(f"n_splits must be <= M = {k.shape[-2]} so that no chunk is empty, got {n_splits}")


def _check_speculative(target: object, draft: object, prompt: object, n_new: object, n_draft: object) -> None:
    """Raise unless two models, a (1, N0) prompt of ids and the two counts suit ``speculative_generate``."""
    for name, model in (("target", target), ("draft", draft)):
        if not callable(model):
            raise TypeError(f"{name} must be a model (a function from ids to logits), got {model!r}")
    if not isinstance(prompt, torch.Tensor) or prompt.dim() != 2 or prompt.shape[0] != 1 \
            or prompt.dtype not in (torch.int64, torch.int32):
        got = f"{tuple(prompt.shape)} {prompt.dtype}" if isinstance(prompt, torch.Tensor) else type(prompt).__name__
        raise ValueError(f"prompt must be a (1, N0) tensor of integer ids, got {got}")
    _check_count("n_new", n_new)
    _check_count("n_draft", n_draft, 1)


# --8<-- [start:paged]
class PagedKVCache:
    """Keys and values in fixed-size pages drawn from one pool, as PagedAttention keeps them.

    A sequence owns a *block table*: the list of its pages in order. Token
    ``t`` of a sequence lives in page ``table[t // page_size]`` at slot
    ``t % page_size``. Pages are taken from the free list only when a
    sequence grows into them, so memory follows the real lengths, not a
    maximum length per sequence.

    Args:
        n_pages: pages in the pool.
        page_size: tokens per page.
        n_kv_heads: H_kv.
        d_head: d.
        dtype, device: of the pool.

    Shape:
        the pool holds keys and values of shape ``(n_pages, H_kv, page_size, d)``.
    """

    def __init__(self, n_pages: int, page_size: int, n_kv_heads: int, d_head: int, *,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> None:
        for name, value in (("n_pages", n_pages), ("page_size", page_size),
                            ("n_kv_heads", n_kv_heads), ("d_head", d_head)):
            _check_count(name, value, 1)
        _check_float_dtype(dtype)
        shape = (n_pages, n_kv_heads, page_size, d_head)
        self.k_pages = torch.zeros(shape, dtype=dtype, device=device)
        self.v_pages = torch.zeros(shape, dtype=dtype, device=device)
        self.page_size = page_size
        self.free_pages = list(range(n_pages))  # taken from the front, in order
        self.tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}
        self._next_id = 0

    def add_sequence(self) -> int:
        """Start an empty sequence; returns its id."""
        seq = self._next_id
        self._next_id += 1
        self.tables[seq], self.lengths[seq] = [], 0
        return seq

    def _check_seq(self, seq: int) -> None:
        if seq not in self.tables:
            raise ValueError(f"seq must be the id of a live sequence {sorted(self.tables)}, got {seq!r}")

    def append(self, seq: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write ``n`` new tokens' keys and values, ``(H_kv, n, d)`` each, after the sequence's last."""
        self._check_seq(seq)
        _check_page_kv(k, v, self.k_pages)
        table, start, n = self.tables[seq], self.lengths[seq], k.shape[1]
        pages_needed = math.ceil((start + n) / self.page_size) - len(table)
        if pages_needed > len(self.free_pages):
            raise ValueError(
                f"the pool has {len(self.free_pages)} free pages; sequence {seq} needs {pages_needed} more"
            )
        table += [self.free_pages.pop(0) for _ in range(pages_needed)]  # allocate as the sequence grows
        t = torch.arange(start, start + n)  # absolute token positions
        page = torch.tensor(table)[t // self.page_size]  # which page each token goes to
        slot = t % self.page_size  # where in that page
        self.k_pages[page, :, slot] = k.transpose(0, 1).to(self.k_pages.dtype)  # (n, H_kv, d) scattered
        self.v_pages[page, :, slot] = v.transpose(0, 1).to(self.v_pages.dtype)
        self.lengths[seq] = start + n

    def block_table(self, seq: int) -> list[int]:
        """The pages of ``seq``, in token order."""
        self._check_seq(seq)
        return list(self.tables[seq])

    def gather(self, seq: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The sequence's keys and values, contiguous: ``(H_kv, L, d)`` each."""
        self._check_seq(seq)
        table, length = torch.tensor(self.tables[seq], dtype=torch.long), self.lengths[seq]
        out = []
        for pages in (self.k_pages, self.v_pages):
            x = pages[table]  # (P, H_kv, page_size, d), the sequence's pages in order
            x = x.transpose(0, 1).flatten(1, 2)  # (H_kv, P * page_size, d)
            out.append(x[:, :length].contiguous())  # (H_kv, L, d): the last page may be part full
        return out[0], out[1]

    def free(self, seq: int) -> None:
        """Return the sequence's pages to the pool."""
        self._check_seq(seq)
        self.free_pages += self.tables.pop(seq)
        del self.lengths[seq]


def paged_decode(q: torch.Tensor, cache: PagedKVCache, seqs: list[int]) -> torch.Tensor:
    """One decoding step for several sequences of different lengths.

    Args:
        q: the new tokens' queries, ``(B, H, 1, d)``, one row per sequence in ``seqs``.
        cache: holds each sequence's keys and values, the new token's included.
        seqs: the B sequence ids.

    Returns:
        ``(B, H, 1, d)``: each query attends to all of its own sequence's keys.
    """
    _check_paged_decode(q, cache, seqs)
    out = []
    for b, seq in enumerate(seqs):
        k, v = cache.gather(seq)  # (H_kv, L_b, d): a real kernel reads the pages in place
        out.append(F.scaled_dot_product_attention(q[b : b + 1], k.unsqueeze(0), v.unsqueeze(0),
                                                  enable_gqa=q.shape[1] != k.shape[0]))
    return torch.cat(out)  # (B, H, 1, d)
# --8<-- [end:paged]


# --8<-- [start:ragged]
def ragged_causal_mask(lengths: list[int], n: int, *, padding: str = "right",
                       device: torch.device | str | None = None) -> torch.Tensor:
    """Causal masks for a padded batch, each aligned to its sequence's real tokens.

    Sequence ``b`` has ``lengths[b]`` real tokens in a row of ``n`` slots:
    slots ``[0, L)`` with right padding, ``[n - L, n)`` with left padding. Real
    query ``i`` sees real keys ``j <= i``; padding sees nothing (its rows are
    zeros) and is seen by nothing.

    Returns:
        ``(B, 1, n, n)`` boolean, True = may attend.
    """
    if padding not in ("left", "right"):
        raise ValueError(f"padding must be 'left' or 'right', got {padding!r}")
    _check_count("n", n)
    if not isinstance(lengths, (list, tuple)) or not lengths:
        raise ValueError(f"lengths must be a non-empty list of ints, got {lengths!r}")
    for i, length in enumerate(lengths):
        _check_count(f"lengths[{i}]", length)
        if length > n:
            raise ValueError(f"lengths[{i}] must be <= n = {n}, got {length}")
    lengths_t = torch.tensor(lengths, device=device).view(-1, 1)  # (B, 1)
    pos = torch.arange(n, device=device)  # (n,)
    real = pos < lengths_t if padding == "right" else pos >= n - lengths_t  # (B, n)
    causal = pos.view(-1, 1) >= pos  # (n, n): the same slot order holds inside every row
    mask = real.unsqueeze(-1) & real.unsqueeze(-2) & causal  # (B, n, 1) & (B, 1, n) & (n, n) -> (B, n, n)
    return mask.unsqueeze(1)  # (B, 1, n, n), broadcast over heads
# --8<-- [end:ragged]


# --8<-- [start:split]
def split_kv_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n_splits: int) -> torch.Tensor:
    """Decoding attention with the keys cut into ``n_splits`` chunks (Flash-Decoding).

    Each chunk gives its own softmax-weighted output ``o_s`` and the
    log-sum-exp ``l_s`` of its scores; the chunks can run in parallel. The
    merge weights chunk ``s`` by ``exp(l_s - logsumexp(l))``, its share of the
    full softmax denominator.

    Args:
        q: ``(B, H, N, d)``, usually N = 1.
        k, v: ``(B, H, M, d)``.
        n_splits: chunks along M (the last may be shorter; at most M).

    Returns:
        ``(B, H, N, d)``, equal to full attention.
    """
    _check_split_kv(q, k, v, n_splits)
    M = k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    size = math.ceil(M / n_splits)
    outs, lses = [], []
    for start in range(0, M, size):
        scores = (q @ k[..., start : start + size, :].transpose(-2, -1)) * scale  # (B, H, N, chunk)
        lse = torch.logsumexp(scores, dim=-1, keepdim=True)  # (B, H, N, 1)
        outs.append(torch.exp(scores - lse) @ v[..., start : start + size, :])  # (B, H, N, d), softmax within the chunk
        lses.append(lse)
    lse_all = torch.stack(lses)  # (S, B, H, N, 1)
    weights = torch.exp(lse_all - torch.logsumexp(lse_all, dim=0))  # each chunk's share of the denominator
    return (weights * torch.stack(outs)).sum(dim=0)  # (S, B, H, N, d) -> (B, H, N, d)
# --8<-- [end:split]


# --8<-- [start:speculative]
@torch.no_grad()
def speculative_generate(
    target: Callable[[torch.Tensor], torch.Tensor],
    draft: Callable[[torch.Tensor], torch.Tensor],
    prompt: torch.Tensor,
    n_new: int,
    *,
    n_draft: int = 4,
) -> tuple[torch.Tensor, dict[str, int]]:
    """Greedy speculative decoding: the same tokens as greedy decoding with ``target``.

    Each round the draft proposes ``n_draft`` tokens greedily; the target
    scores the prefix and all proposals in one pass. Proposals are kept while
    they equal the target's own greedy choice; at the first mismatch the
    target's token replaces the proposal, and the round ends. A round
    therefore always adds at least one token, and never a token the target
    would not have chosen.

    Args:
        target, draft: models mapping token ids ``(1, N)`` to logits ``(1, N, V)``.
        prompt: ``(1, N0)`` token ids.
        n_new: tokens to generate.
        n_draft: proposals per round.

    Returns:
        ``(tokens, stats)``: ``(1, N0 + n_new)`` ids, and counts ``proposed``,
        ``accepted`` and ``target_calls``.
    """
    _check_speculative(target, draft, prompt, n_new, n_draft)
    tokens, goal = prompt, prompt.shape[1] + n_new
    stats = {"proposed": 0, "accepted": 0, "target_calls": 0}
    while tokens.shape[1] < goal:
        k = min(n_draft, goal - tokens.shape[1])
        proposal = tokens
        for _ in range(k):  # the cheap model runs k times
            proposal = torch.cat([proposal, draft(proposal)[:, -1:].argmax(-1)], dim=1)
        logits = target(proposal)  # one pass of the big model over prefix + k proposals
        stats["target_calls"] += 1
        n0 = tokens.shape[1]
        choice = logits[:, n0 - 1 : n0 - 1 + k + 1].argmax(-1)  # (1, k + 1): target's pick after each prefix
        drafted = proposal[:, n0:]  # (1, k)
        agree = (drafted == choice[:, :k]).flatten().long()
        n_ok = int(agree.cumprod(0).sum())  # proposals accepted before the first mismatch
        stats["proposed"] += k
        stats["accepted"] += n_ok
        # the accepted proposals, then the target's own next token (a correction or a bonus)
        tokens = torch.cat([tokens, drafted[:, :n_ok], choice[:, n_ok : n_ok + 1]], dim=1)
    return tokens[:, :goal], stats
# --8<-- [end:speculative]
