"""Identities proven for the log-linear attention page."""

from __future__ import annotations

import torch

from identities import identity
from snippets.linear import gated_linear_attention as gla
from snippets.linear import log_linear_attention as ll

PAGE = "linear/log-linear-attention.md"


def _inputs(n=29, ones=False, no_decay=False):
    q, k = (torch.randn(2, 3, n, 5, dtype=torch.float64) for _ in range(2))
    v = torch.randn(2, 3, n, 4, dtype=torch.float64)
    g = torch.zeros(2, 3, n, dtype=torch.float64) if no_decay else -torch.rand(2, 3, n, dtype=torch.float64)
    levels = (n - 1).bit_length() + 1
    lam = torch.ones(2, 3, n, levels, dtype=torch.float64) if ones else torch.rand(2, 3, n, levels, dtype=torch.float64)
    return q, k, v, g, lam


def _buckets(t):
    """Level 0 is {t}; level l >= 1, when bit l - 1 of t is set, is the 2^(l-1) keys
    just below t - (t mod 2^(l-1))."""
    out = {0: [t]}
    for level in range(1, t.bit_length() + 1):
        if t % (1 << level) >= 1 << (level - 1):
            end = t - t % (1 << (level - 1))
            out[level] = list(range(end - (1 << (level - 1)), end))
    return out


@identity("log-linear-levels-are-fenwick-buckets",
          "fenwick_levels(64) (bit_length(t XOR s)) equals the level read off the paper's "
          "bucket boundaries, for every pair s <= t", page=PAGE, tol=0.0)
def log_linear_levels_are_fenwick_buckets():
    n = 64
    want = torch.full((n, n), -1.0, dtype=torch.float64)
    for t in range(n):
        for level, keys in _buckets(t).items():
            want[t, keys] = float(level)
    return ll.fenwick_levels(n).to(torch.float64), want


@identity("log-linear-buckets-are-popcount-plus-one",
          "query t's prefix 0 .. t falls into popcount(t) + 1 buckets, for t < 512",
          page=PAGE, tol=0.0)
def log_linear_buckets_are_popcount_plus_one():
    levels = ll.fenwick_levels(512)
    present = torch.zeros(512, 10, dtype=torch.float64)  # levels 0 .. 9
    present.scatter_(1, levels.clamp(min=0), 1.0)
    popcount = torch.tensor([bin(t).count("1") + 1 for t in range(512)], dtype=torch.float64)
    return present.sum(dim=1), popcount


@identity("log-linear-parallel-equals-definition",
          "log_linear_parallel equals o_t = scale sum_l lambda_t^(l) sum_{s in bucket l} "
          "(a_{s+1} ... a_t) (q_t . k_s) v_s written as loops (N = 19)", page=PAGE, tol=1e-12)
def log_linear_parallel_equals_definition():
    q, k, v, g, lam = _inputs(n=19)
    out = torch.zeros(2, 3, 19, 4, dtype=torch.float64)
    for t in range(19):
        for level, keys in _buckets(t).items():
            for s in keys:
                w = lam[:, :, t, level] * g[:, :, s + 1 : t + 1].sum(-1).exp()
                w = w * (q[:, :, t] * k[:, :, s]).sum(-1) * 5 ** -0.5
                out[:, :, t] += w[..., None] * v[:, :, s]
    return ll.log_linear_parallel(q, k, v, g, lam), out


@identity("log-linear-recurrent-equals-parallel",
          "the recurrence with one state per level, merged by the Fenwick rule, equals the "
          "masked form (N = 37)", page=PAGE, tol=1e-12)
def log_linear_recurrent_equals_parallel():
    q, k, v, g, lam = _inputs(n=37)
    return ll.log_linear_recurrent(q, k, v, g, lam), ll.log_linear_parallel(q, k, v, g, lam)


@identity("log-linear-chunked-equals-parallel",
          "the chunked form (chunks of 8, N = 37 padded) equals the masked form",
          page=PAGE, tol=1e-12)
def log_linear_chunked_equals_parallel():
    q, k, v, g, lam = _inputs(n=37)
    return (ll.log_linear_chunked(q, k, v, g, lam, chunk_size=8),
            ll.log_linear_parallel(q, k, v, g, lam))


@identity("log-linear-weights-one-is-gla",
          "every level weight 1 equals gated linear attention (gla_parallel) with one decay "
          "per head, repeated over the key channels", page=PAGE, tol=1e-12)
def log_linear_weights_one_is_gla():
    q, k, v, g, lam = _inputs(ones=True)
    return (ll.log_linear_chunked(q, k, v, g, lam, chunk_size=4),
            gla.gla_parallel(q, k, v, g.unsqueeze(-1).expand_as(q).contiguous()))


@identity("log-linear-weights-one-no-decay-is-linear-attention",
          "every level weight 1 and every log decay 0 equals unnormalised causal linear "
          "attention, scale tril(Q K^T) V", page=PAGE, tol=1e-12)
def log_linear_weights_one_no_decay_is_linear_attention():
    q, k, v, g, lam = _inputs(ones=True, no_decay=True)
    return (ll.log_linear_recurrent(q, k, v, g, lam),
            5 ** -0.5 * (q @ k.transpose(-2, -1)).tril() @ v)
