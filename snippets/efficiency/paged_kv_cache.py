"""Serving-time attention: a paged KV cache, ragged batches, split-KV decoding
and speculative decoding, greedy and sampled.

Papers: Kwon et al. (2023), "Efficient Memory Management for Large Language
Model Serving with PagedAttention", arXiv:2309.06180 (the block table over
fixed-size pages); Leviathan, Kalman and Matias (2022), "Fast Inference from
Transformers via Speculative Decoding", arXiv:2211.17192, and Chen, Borgeaud,
Irving, Lespiau, Sifre and Jumper (2023), "Accelerating Large Language Model
Decoding with Speculative Sampling", arXiv:2302.01318 (a draft model proposes,
the target verifies in one pass; accepting a drafted token with probability
min(1, p/q) and resampling a rejection from max(0, p - q) keeps the target's
distribution exactly). Split-KV decoding merges partial
results by their log-sum-exp, the online-softmax rule of Milakov and
Gimelshein (2018), "Online normalizer calculation for softmax",
arXiv:1805.02867, applied across the key axis as Flash-Decoding does.
Page: docs/efficiency/serving.md
Tested against: torch.nn.functional.scaled_dot_product_attention on the
contiguous keys and values, each ragged sequence attended alone, plain greedy
decoding, and the target's own distribution by a chi-square test over seeded
draws (tests/test_serving.py).

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


# --8<-- [start:paged_append]
def paged_append(k_pages, v_pages, table: list[int], start: int, k, v) -> None:
    """Scatter n new tokens: token t goes to page table[t // P], slot t % P."""
    # k_pages, v_pages: (n_pages, H_kv, P, d); k, v: (H_kv, n, d)
    t = torch.arange(start, start + k.shape[1], device=k.device)  # absolute positions
    page = torch.tensor(table, device=k.device)[t // k_pages.shape[2]]  # (n,)
    slot = t % k_pages.shape[2]  # (n,)
    k_pages[page, :, slot] = k.transpose(0, 1)  # (n, H_kv, d) scattered
    v_pages[page, :, slot] = v.transpose(0, 1)
# --8<-- [end:paged_append]


# --8<-- [start:paged_gather]
def paged_gather(pages: torch.Tensor, table: list[int], length: int) -> torch.Tensor:
    """The pages of one sequence in table order, contiguous: (H_kv, L, d)."""
    index = torch.tensor(table, dtype=torch.long, device=pages.device)  # (T,)
    x = pages[index]  # (T, H_kv, P, d)
    x = x.transpose(0, 1).flatten(1, 2)  # (H_kv, T * P, d)
    return x[:, :length].contiguous()  # (H_kv, L, d): the last page may be part full
# --8<-- [end:paged_gather]


# --8<-- [start:paged_decode]
def decode_pages(q: torch.Tensor, cache: PagedKVCache, seqs: list[int]) -> torch.Tensor:
    """One query per sequence, each attending to all of its own sequence's keys."""
    out = []
    for b, seq in enumerate(seqs):  # a real kernel reads the pages in place
        k, v = cache.gather(seq)  # (H_kv, L_b, d)
        gqa = q.shape[1] != k.shape[0]
        out.append(F.scaled_dot_product_attention(q[b : b + 1], k[None], v[None],
                                                  enable_gqa=gqa))
    return torch.cat(out)  # (B, H, 1, d)
# --8<-- [end:paged_decode]


# --8<-- [start:ragged]
def ragged_mask(lengths: torch.Tensor, n: int, padding: str) -> torch.Tensor:
    """Each row's own causal triangle over its real slots; padding sees nothing."""
    pos = torch.arange(n, device=lengths.device)  # (n,)
    lengths = lengths.view(-1, 1)  # (B, 1)
    real = pos < lengths if padding == "right" else pos >= n - lengths  # (B, n)
    causal = pos.view(-1, 1) >= pos  # (n, n): the slot order holds inside every row
    mask = real.unsqueeze(-1) & real.unsqueeze(-2) & causal  # (B, n, n)
    return mask.unsqueeze(1)  # (B, 1, n, n), broadcast over heads
# --8<-- [end:ragged]


# --8<-- [start:split]
def split_kv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n_splits: int):
    """Attention over n_splits key chunks, merged by their log-sum-exp."""
    M, scale = k.shape[-2], q.shape[-1] ** -0.5
    size = math.ceil(M / n_splits)
    outs, lses = [], []
    for j in range(0, M, size):  # the chunks are independent: a GPU runs them at once
        s = (q @ k[..., j : j + size, :].transpose(-2, -1)) * scale  # (B, H, N, c)
        lse = torch.logsumexp(s, dim=-1, keepdim=True)  # (B, H, N, 1)
        outs.append(torch.exp(s - lse) @ v[..., j : j + size, :])  # (B, H, N, d_v)
        lses.append(lse)
    lse_all = torch.stack(lses)  # (S, B, H, N, 1)
    weights = torch.exp(lse_all - torch.logsumexp(lse_all, dim=0))  # shares of the sum
    return (weights * torch.stack(outs)).sum(dim=0)  # (B, H, N, d_v)
# --8<-- [end:split]


# --8<-- [start:draft]
def draft_tokens(draft, tokens: torch.Tensor, k: int, sample: bool, generator=None):
    """The draft's k proposals, each drawn (or argmaxed) from its q after the prefix."""
    qs = []
    for _ in range(k):  # the cheap model runs k times
        q = torch.softmax(draft(tokens)[:, -1].double(), dim=-1)  # (1, V)
        pick = torch.multinomial(q, 1, generator=generator) if sample else None
        nxt = q.argmax(-1, keepdim=True) if pick is None else pick  # (1, 1)
        tokens = torch.cat([tokens, nxt], dim=1)
        qs.append(q)
    return tokens, torch.cat(qs)  # (1, N0 + k), (k, V)
# --8<-- [end:draft]


# --8<-- [start:verify_greedy]
def verify_greedy(logits: torch.Tensor, drafted: torch.Tensor):
    """Keep proposals up to the first the target would not pick, then its pick."""
    # logits: (1, k + 1, V), the target after each prefix; drafted: (1, k)
    choice = logits.argmax(-1)  # (1, k + 1)
    agree = (drafted == choice[:, :-1]).flatten().long()
    n_ok = int(agree.cumprod(0).sum())  # accepted before the first mismatch only
    return n_ok, torch.cat([drafted[:, :n_ok], choice[:, n_ok : n_ok + 1]], dim=1)
# --8<-- [end:verify_greedy]


# --8<-- [start:verify_sampled]
def verify_sampled(p: torch.Tensor, q: torch.Tensor, drafted: torch.Tensor,
                   u: torch.Tensor) -> tuple[int, torch.Tensor]:
    """Accept token i with probability min(1, p_i / q_i); resample the first reject."""
    # p: (k + 1, V) target probabilities; q: (k, V) draft's; drafted, u: (k,)
    i = torch.arange(drafted.shape[0])
    rejected = (u >= p[i, drafted] / q[i, drafted]).nonzero()  # u ~ U[0, 1)
    if len(rejected) == 0:  # every proposal kept: one more token from p after them
        return drafted.shape[0], p[-1]
    n_ok = int(rejected[0])
    residual = (p[n_ok] - q[n_ok]).clamp(min=0)  # normalise(max(0, p - q))
    return n_ok, residual / residual.sum()
# --8<-- [end:verify_sampled]


# --8<-- [start:face]
class PagedKVCache:
    """Keys and values in fixed-size pages drawn from one pool, as in PagedAttention.

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
                 dtype: torch.dtype = torch.float32,
                 device: torch.device | str | None = None) -> None:
        _check_kv_sizes(1, dtype, n_pages=n_pages, page_size=page_size,
                        n_kv_heads=n_kv_heads, d_head=d_head)
        _check_given(dtype.is_floating_point, "dtype", "be floating", dtype, TypeError)
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

    def append(self, seq: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write n new tokens' keys and values, ``(H_kv, n, d)`` each, at the end."""
        self._check_seq(seq)
        _check_page_kv(k, v, self.k_pages)
        table, start, n = self.tables[seq], self.lengths[seq], k.shape[1]
        needed = math.ceil((start + n) / self.page_size) - len(table)
        _check_given(needed <= len(self.free_pages), "k", "fit the free pages "
                     f"({len(self.free_pages)})", f"{n} tokens that need {needed}")
        table += [self.free_pages.pop(0) for _ in range(needed)]  # grow as needed
        dtype = self.k_pages.dtype
        paged_append(self.k_pages, self.v_pages, table, start, k.to(dtype), v.to(dtype))
        self.lengths[seq] = start + n

    def block_table(self, seq: int) -> list[int]:
        """The pages of ``seq``, in token order."""
        self._check_seq(seq)
        return list(self.tables[seq])

    def gather(self, seq: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The sequence's keys and values, contiguous: ``(H_kv, L, d)`` each."""
        self._check_seq(seq)
        table, length = self.tables[seq], self.lengths[seq]
        return paged_gather(self.k_pages, table, length), paged_gather(
            self.v_pages, table, length)

    def free(self, seq: int) -> None:
        """Return the sequence's pages to the pool."""
        self._check_seq(seq)
        self.free_pages += self.tables.pop(seq)
        del self.lengths[seq]

    def _check_seq(self, seq: int) -> None:
        ok = seq in self.tables
        _check_given(ok, "seq", f"be a live sequence {sorted(self.tables)}", repr(seq))


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
    return decode_pages(q, cache, seqs)


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
    _check_ragged(lengths, n, padding)
    return ragged_mask(torch.tensor(lengths, device=device), n, padding)


def split_kv_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       n_splits: int) -> torch.Tensor:
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
    return split_kv(q, k, v, n_splits)


@torch.no_grad()
def speculative_generate(
    target: Callable[[torch.Tensor], torch.Tensor],
    draft: Callable[[torch.Tensor], torch.Tensor],
    prompt: torch.Tensor,
    n_new: int,
    *,
    n_draft: int = 4,
    sample: bool = False,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, dict[str, int]]:
    """Speculative decoding: the target's own tokens, or its own distribution.

    Each round the draft proposes ``n_draft`` tokens; the target scores the
    prefix and all proposals in one pass. Greedy (``sample=False``):
    proposals are kept while they equal the target's greedy choice; at the
    first mismatch the target's token replaces the proposal and the round
    ends, so the output is greedy decoding with the target, token for token.
    Sampled (``sample=True``, Leviathan et al. 2022; Chen et al. 2023): the
    draft samples from its distribution q, proposal i is kept with
    probability min(1, p_i / q_i), and the first rejected one is replaced by
    a draw from normalise(max(0, p - q)); when all are kept, one more token
    is drawn from p. Every emitted token then follows the target's
    distribution p exactly, whatever the draft. A round always adds at
    least one token.

    Args:
        target, draft: models mapping token ids ``(1, N)`` to logits ``(1, N, V)``.
        prompt: ``(1, N0)`` token ids.
        n_new: tokens to generate.
        n_draft: proposals per round.
        sample: sample at temperature 1 instead of decoding greedily.
        generator: the random source of the draws (``sample=True``).

    Returns:
        ``(tokens, stats)``: ``(1, N0 + n_new)`` ids, and counts ``proposed``,
        ``accepted`` and ``target_calls``.
    """
    _check_speculative(prompt, n_new, n_draft)
    tokens, goal = prompt, prompt.shape[1] + n_new
    stats = {"proposed": 0, "accepted": 0, "target_calls": 0}
    while tokens.shape[1] < goal:
        k, n0 = min(n_draft, goal - tokens.shape[1]), tokens.shape[1]
        proposal, q = draft_tokens(draft, tokens, k, sample, generator)
        logits = target(proposal)[:, n0 - 1 :]  # one pass: (1, k + 1, V)
        drafted = proposal[:, n0:]  # (1, k)
        if sample:
            p = torch.softmax(logits[0].double(), dim=-1)  # (k + 1, V)
            u = torch.rand(k, generator=generator, dtype=p.dtype, device=p.device)
            n_ok, dist = verify_sampled(p, q, drafted[0], u)
            last = torch.multinomial(dist, 1, generator=generator)[None]  # (1, 1)
            new = torch.cat([drafted[:, :n_ok], last.to(drafted.device)], dim=1)
        else:
            n_ok, new = verify_greedy(logits, drafted)
        stats["proposed"] += k
        stats["accepted"] += n_ok
        stats["target_calls"] += 1
        tokens = torch.cat([tokens, new], dim=1)  # accepted, then a correction or bonus
    return tokens[:, :goal], stats


def _describe(t: object) -> str:
    if isinstance(t, torch.Tensor):
        return f"{t.dtype} {tuple(t.shape)} on {t.device}"
    return type(t).__name__


def _check_given(ok: object, name: str, want: str, got: object, error=ValueError):
    """Raise error("<name> must <want>, got <got>") unless ok."""
    if not ok:
        raise error(f"{name} must {want}, got {got}")


def _check_kv_sizes(minimum: int, dtype: object = torch.float32, **values: object):
    """Refuse a non-dtype dtype, or sizes that are not ints >= minimum."""
    _check_given(isinstance(dtype, torch.dtype), "dtype", "be a torch.dtype", dtype)
    for name, value in values.items():
        ok = isinstance(value, int) and value >= minimum
        _check_given(ok, name, f"be an int >= {minimum}", repr(value))


_IDS = (torch.int64, torch.int32)


def _check_eff_tensor(name, t, shape, device=None, dtype=None, ids=False) -> None:
    """Refuse t unless a floating (ids: integer) tensor of shape, an int per fixed
    size and a letter per free one, on device and of dtype where they are given."""
    kind = torch.is_tensor(t) and (t.dtype in _IDS if ids else t.is_floating_point())
    ok = kind and t.dim() == len(shape) and t.device == (device or t.device)
    ok = ok and t.dtype == (dtype or t.dtype) and all(
        s == n for s, n in zip(shape, t.shape) if isinstance(s, int))
    want = f"be {'integer' if ids else 'floating'} ({', '.join(map(str, shape))})"
    want += (f" {dtype}" if dtype else "") + (f" on {device}" if device else "")
    _check_given(ok, name, want, _describe(t), ValueError if kind else TypeError)


def _check_page_kv(k: object, v: object, pool: torch.Tensor) -> None:
    """Refuse k and v that are not floating (H_kv, n, d) tensors beside the pool."""
    _check_eff_tensor("k", k, (pool.shape[1], "n", pool.shape[3]), pool.device)
    _check_eff_tensor("v", v, tuple(k.shape), pool.device)


def _check_paged_decode(q: object, cache: PagedKVCache, seqs: object) -> None:
    """Refuse q that is not one query per id in seqs (gather refuses a dead id)."""
    p = cache.k_pages  # (n_pages, H_kv, P, d)
    _check_eff_tensor("q", q, ("B", "H", 1, p.shape[3]), p.device, p.dtype)
    ok = isinstance(seqs, (list, tuple)) and len(seqs) == len(q)
    _check_given(ok, "seqs", f"be a list of B = {len(q)} sequence ids", seqs)
    ok = q.shape[1] % p.shape[1] == 0
    _check_given(ok, "q", f"have a multiple of H_kv = {p.shape[1]} heads", q.shape[1])


def _check_ragged(lengths: object, n: object, padding: object) -> None:
    _check_given(padding in ("left", "right"), "padding", "be left or right", padding)
    _check_kv_sizes(0, n=n)
    ok = all(isinstance(x, int) and 0 <= x <= n for x in lengths)  # []: no rows
    _check_given(ok, "lengths", f"be a list of ints in [0, n = {n}]", lengths)


def _check_split_kv(q: object, k: object, v: object, n_splits: object) -> None:
    """Refuse q (B, H, N, d), k (B, H, M, d), v (B, H, M, d_v) that do not fit."""
    _check_eff_tensor("q", q, ("B", "H", "N", "d"))
    _check_eff_tensor("k", k, (*q.shape[:2], "M", q.shape[3]), q.device, q.dtype)
    _check_eff_tensor("v", v, (*k.shape[:3], "d_v"), q.device, q.dtype)
    ok = isinstance(n_splits, int) and 1 <= n_splits <= k.shape[2]
    _check_given(ok, "n_splits", f"be an int in [1, M = {k.shape[2]}]", n_splits)


def _check_speculative(prompt: object, n_new: object, n_draft: object) -> None:
    """Refuse anything but a (1, N0) prompt of ids and two counts."""
    _check_eff_tensor("prompt", prompt, (1, "N0"), ids=True)
    _check_kv_sizes(0, n_new=n_new)
    _check_kv_sizes(1, n_draft=n_draft)


# --8<-- [end:face]
