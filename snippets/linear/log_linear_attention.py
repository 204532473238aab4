"""Log-linear attention: gated linear attention with one state per Fenwick level.

Paper: Guo, Yang, Goel, Xing, Dao and Kim (2025), "Log-Linear Attention",
arXiv:2506.04761 (the Fenwick-tree partition of the prefix, the hierarchical
mask M[t, s] = lambda_t^(l(t, s)) a_{s+1} ... a_t, and log-linear Mamba-2).
Page: docs/linear/log-linear-attention.md
Tested against: the recurrent, masked and chunked forms against each other in
float64 (to 1e-12), the mask against a loop over the bucket boundaries, and, with
every lambda 1, against gated linear attention with one decay per head
(snippets/linear/gated_linear_attention.py) in tests/test_log_linear_attention.py.

Query t splits the keys 0 .. t into buckets: key s sits at level
l(t, s) = bit_length(t XOR s), so level 0 is the token itself and level l > 0
holds 2^(l-1) keys when bit l - 1 of t is set. Per head, with a_t = exp(g_t):
    o_t = scale sum_{s <= t} lambda_t^(l(t, s)) (a_{s+1} ... a_t) (q_t . k_s) v_s
A length-N sequence uses levels 0 .. ceil(log2 N): lambda has that many weights.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = [
    "fenwick_levels",
    "log_linear_mask",
    "log_linear_step",
    "log_linear_recurrent",
    "log_linear_parallel",
    "log_linear_chunked",
]


# --8<-- [start:levels]
def fenwick_level(n, device=None):
    """l(t, s) = bit_length(t XOR s) for s <= t (0 on the diagonal); -1 above it."""
    t = torch.arange(n, device=device)
    x = t[:, None] ^ t[None, :]  # (N, N): the bits where t and s differ
    # x = m 2^e with m in [0.5, 1): e is the bit length of x (exact below 2^24)
    level = torch.frexp(x.float())[1].long()  # (N, N): 0 where x = 0, the diagonal
    return torch.where(t[:, None] >= t[None, :], level, -1)
# --8<-- [end:levels]


# --8<-- [start:mask]
def hierarchical_mask(g, lam):
    """M[t, s] = lambda_t^(l(t, s)) exp(b_t - b_s), b = cumsum(g), for s <= t."""
    level = fenwick_level(g.shape[-1], g.device)  # (N, N)
    b = g.cumsum(dim=-1)  # (B, H, N)
    # (B, H, N, 1) - (B, H, 1, N): a difference of log decays, never e^b / e^b
    decay = torch.where(level >= 0, b[..., :, None] - b[..., None, :], -math.inf).exp()
    # (B, H, N, L) -> (B, H, N, N): row t picks its own weight for each key's level
    weight = lam.gather(-1, level.clamp(min=0).expand(*lam.shape[:-1], -1))
    return weight * decay


def log_linear_attention(q, k, v, g, lam, scale):
    """O = scale (Q K^T o M) V: masked attention without softmax."""
    scores = q @ k.transpose(-2, -1)  # (B, H, N, d_k) @ (B, H, d_k, N) -> (B, H, N, N)
    return scale * (hierarchical_mask(g, lam) * scores) @ v  # (B, H, N, d_v)
# --8<-- [end:mask]


# --8<-- [start:step]
def fenwick_merge(states, t):
    """Before token t, levels 0 .. m - 1 fold into level m = 1 + trailing zeros of t."""
    m = (t & -t).bit_length()  # 0 at t = 0: nothing folds
    merged = states[..., : m + 1, :, :].sum(dim=-3, keepdim=True)  # (B, H, 1, d_k, d_v)
    empty = torch.zeros_like(states[..., :m, :, :])
    return torch.cat([empty, merged, states[..., m + 1 :, :, :]], dim=-3)


def log_linear_update(q, k, v, g, lam, states, t, scale):
    """S <- a_t merge_t(S), S^(0) += k_t v_t^T; o_t = scale sum_l lam^(l) S^(l)T q_t."""
    # (B, H, 1, 1, 1) * (B, H, L, d_k, d_v): one decay per head, every level
    states = g.exp()[..., None, None, None] * fenwick_merge(states, t)
    write = (k.unsqueeze(-1) * v.unsqueeze(-2)).unsqueeze(-3)  # (B, H, 1, d_k, d_v)
    states = torch.cat([states[..., :1, :, :] + write, states[..., 1:, :, :]], dim=-3)
    # (B, H, 1, 1, d_k) @ (B, H, L, d_k, d_v) -> (B, H, L, d_v): one read per level
    reads = (q[..., None, None, :] @ states).squeeze(-2)
    return scale * (lam.unsqueeze(-2) @ reads).squeeze(-2), states  # (B, H, d_v)
# --8<-- [end:step]


# --8<-- [start:chunk_scan]
def chunk_states(writes, decays, levels):
    """The Fenwick recurrence over chunks: what chunk i reads from chunks 0 .. i - 1."""
    # writes (B, H, n_c, d_k, d_v); decays (B, H, n_c): a whole chunk's decay
    y = writes.new_zeros(*writes.shape[:2], levels, *writes.shape[-2:])
    entering = []
    for i in range(writes.shape[2]):  # n_c steps, each O(log n_c) states
        z = fenwick_merge(y, i)  # level 0 is empty for i > 0: chunk i is not in yet
        entering.append(z)
        y = decays[:, :, i, None, None, None] * z
        y = torch.cat([y[:, :, :1] + writes[:, :, i, None], y[:, :, 1:]], dim=2)
    return torch.stack(entering, dim=2)  # (B, H, n_c, L_c, d_k, d_v)
# --8<-- [end:chunk_scan]


# --8<-- [start:chunked]
def log_linear_chunks(q, k, v, g, lam, scale, chunk):
    """Inside a chunk: the masked form; from earlier chunks: levels c + 1 and up."""
    c = chunk.bit_length() - 1  # chunk = 2^c, so level(t, s) = c + level(i, j)
    q, k, v, lam = (t.unflatten(-2, (-1, chunk)) for t in (q, k, v, lam))
    g = g.unflatten(-1, (-1, chunk))  # (B, H, n_c, C)
    b = g.cumsum(dim=-1)  # (B, H, n_c, C): log decay since the chunk's start
    intra = log_linear_attention(q, k, v, g, lam, 1)  # (B, H, n_c, C, d_v)
    # (B, H, n_c, d_k, C) @ (B, H, n_c, C, d_v): each chunk's keys, decayed to its end
    writes = (k * (b[..., -1:] - b).exp().unsqueeze(-1)).transpose(-2, -1) @ v
    z = chunk_states(writes, b[..., -1].exp(), lam.shape[-1] - c)
    # (B, H, n_c, 1, C, d_k) @ (B, H, n_c, L_c, d_k, d_v) -> (B, H, n_c, L_c, C, d_v)
    reads = ((q * b.exp().unsqueeze(-1)).unsqueeze(-3) @ z).movedim(-3, -2)
    inter = (lam[..., c:].unsqueeze(-2) @ reads).squeeze(-2)  # (B, H, n_c, C, d_v)
    return (scale * (intra + inter)).flatten(-3, -2)  # (B, H, N, d_v)
# --8<-- [end:chunked]


# --8<-- [start:face]
def fenwick_levels(n: int, *, device: torch.device | str | None = None) -> torch.Tensor:
    """The Fenwick level of every (query, key) pair of a length-n sequence.

    Args:
        n: the sequence length N, an int >= 1.
        device: where to build the table.

    Returns:
        ``(N, N)`` int64: ``bit_length(t XOR s)`` for key s <= query t (0 on the
        diagonal, the query's own token), -1 above the diagonal.
    """
    _check_length(n)
    return fenwick_level(n, device)


def log_linear_mask(g: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """The hierarchical mask M of log-linear attention.

    Args:
        g: log-decays ``log(a_t)``, ``(B, H, N)``, <= 0.
        lam: the level weights lambda_t^(l), ``(B, H, N, L)`` with
            L >= ceil(log2 N) + 1.

    Returns:
        ``(B, H, N, N)``: lambda_t^(l(t, s)) a_{s+1} ... a_t for s <= t, 0 above.
    """
    _check_log_linear(None, None, None, g, lam, None)
    acc = _lin_accumulator(g.dtype)
    return hierarchical_mask(g.to(acc), lam.to(acc)).to(g.dtype)


def log_linear_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    lam: torch.Tensor,
    states: torch.Tensor | None = None,
    *,
    position: int,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One decoding step: merge the levels as the Fenwick rule says, write, read.

    Args:
        q, k: ``(B, H, d_k)``; v: ``(B, H, d_v)``.
        g: the log-decay of this token, ``(B, H)``, <= 0.
        lam: this token's level weights, ``(B, H, L)``.
        states: ``(B, H, L, d_k, d_v)`` after token ``position - 1``, or
            ``None`` at position 0.
        position: the 0-based index t of this token, < 2^(L - 1).
        scale: multiplies the output; ``d_k ** -0.5`` when ``None``.

    Returns:
        ``(out, states)``: ``(B, H, d_v)`` in q's dtype and the new states, kept
        in float32 for half-precision inputs.
    """
    _check_log_linear(q, k, v, g, lam, scale, states=states, position=position,
                      step=True)
    acc = _lin_accumulator(q.dtype)
    if states is None:
        states = q.new_zeros(*lam.shape, k.shape[-1], v.shape[-1], dtype=acc)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    args = (t.to(acc) for t in (q, k, v, g, lam, states))
    out, states = log_linear_update(*args, position, scale)
    return out.to(q.dtype), states


def log_linear_recurrent(q, k, v, g, lam, *, scale: float | None = None):
    """The recurrence, token by token: O(log N) states of (d_k, d_v) per head.

    Args:
        q, k: ``(B, H, N, d_k)``; v: ``(B, H, N, d_v)``.
        g: log-decays ``(B, H, N)``, <= 0 (one decay per head and token).
        lam: level weights ``(B, H, N, L)``, L >= ceil(log2 N) + 1.
        scale: multiplies the output; ``d_k ** -0.5`` when ``None``.

    Returns:
        ``(B, H, N, d_v)`` in q's dtype (float32 inside for half precision).
    """
    _check_log_linear(q, k, v, g, lam, scale)
    acc = _lin_accumulator(q.dtype)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    qa, ka, va, ga, la = (t.to(acc) for t in (q, k, v, g, lam))
    states = qa.new_zeros(*lam.shape[:2], lam.shape[-1], k.shape[-1], v.shape[-1])
    outs = []
    for t in range(q.shape[-2]):
        args = (qa[..., t, :], ka[..., t, :], va[..., t, :], ga[..., t], la[..., t, :])
        out, states = log_linear_update(*args, states, t, scale)
        outs.append(out)
    return torch.stack(outs, dim=-2).to(q.dtype)  # (B, H, N, d_v)


def log_linear_parallel(q, k, v, g, lam, *, scale: float | None = None):
    """The masked form: the readable reference, O(N^2) time.

    Args and Returns: as ``log_linear_recurrent``.
    """
    _check_log_linear(q, k, v, g, lam, scale)
    acc = _lin_accumulator(q.dtype)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    args = (t.to(acc) for t in (q, k, v, g, lam))
    return log_linear_attention(*args, scale).to(q.dtype)


def log_linear_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    lam: torch.Tensor,
    *,
    chunk_size: int = 16,
    scale: float | None = None,
) -> torch.Tensor:
    """The chunked form: masked inside chunks, a Fenwick scan over chunk states.

    Args:
        q, k, v, g, lam, scale: as ``log_linear_recurrent``.
        chunk_size: tokens per chunk C, a power of two (so that a chunk is a
            whole Fenwick bucket); the length is padded to a multiple of C
            with tokens that neither decay nor write.

    Returns:
        ``(B, H, N, d_v)`` in q's dtype (float32 inside for half precision).
    """
    _check_log_linear(q, k, v, g, lam, scale, chunk=chunk_size)
    acc, n = _lin_accumulator(q.dtype), q.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    pad = -n % chunk_size
    # the padded length may need more levels than lam has: padded levels weigh 0
    levels = max(lam.shape[-1], (n + pad - 1).bit_length() + 1)
    lam_ = F.pad(lam.to(acc), (0, levels - lam.shape[-1], 0, pad))
    q_, k_, v_ = (F.pad(t.to(acc), (0, 0, 0, pad)) for t in (q, k, v))
    g_ = F.pad(g.to(acc), (0, pad))
    out = log_linear_chunks(q_, k_, v_, g_, lam_, scale, chunk_size)
    return out[..., :n, :].to(q.dtype)
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


def _lin_accumulator(dtype: torch.dtype) -> torch.dtype:
    """float32 for half precision: a long product of decays underflows float16."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _check_length(n) -> None:
    """A sequence length: an int >= 1."""
    if not (isinstance(n, int) and n >= 1):
        raise ValueError(f"n must be an int >= 1, got {n!r}")


def _check_log_linear(q, k, v, g, lam, scale, *, states=None, position=0, chunk=1,
                      step=False):
    """q, k (B, H, N, d_k), v (.., d_v), g (B, H, N) <= 0, lam (B, H, N, L)."""
    if q is not None:  # log_linear_mask passes only g and lam
        _check_lin_tensor("q", q, ("B", "H", "d_k") if step else ("B", "H", "N", "d_k"))
        _check_lin_tensor("k", k, q.shape, ("q", q))
        _check_lin_tensor("v", v, (*q.shape[:-1], "d_v"), ("q", q))
    lead, like = (("B", "H", "N"), None) if q is None else (q.shape[:-1], ("q", q))
    _check_lin_tensor("g", g, lead, like)
    _check_lin_tensor("lam", lam, (*g.shape, "L"), ("g", g))
    if states is not None:
        shape = (*lam.shape, q.shape[-1], v.shape[-1])
        _check_lin_tensor("states", states, shape, ("q", q), dtype=False)
    if (g > 0).any():
        raise ValueError(f"g holds log-decays, must be <= 0, got {g.max().item():.3g}")
    if not (isinstance(position, int) and position >= 0):
        raise ValueError(f"position must be an int >= 0, got {position!r}")
    n = position + 1 if step else g.shape[-1]
    if (have := lam.shape[-1]) < (need := (n - 1).bit_length() + 1):
        raise ValueError(f"lam needs at least {need} levels for {n} tokens, got {have}")
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be None or a finite float > 0, got {scale!r}")
    if not (isinstance(chunk, int) and chunk >= 1 and chunk & (chunk - 1) == 0):
        raise ValueError(f"chunk_size must be a power of two, got {chunk!r}")
# --8<-- [end:checks]
