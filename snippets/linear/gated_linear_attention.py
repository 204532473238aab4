"""Gated linear attention (GLA): linear attention whose state decays, per channel.

Paper: Yang, Wang, Shen, Panda and Kim (2023), "Gated Linear Attention
Transformers with Hardware-Efficient Training", arXiv:2312.06635 (the gated
recurrence S_t = diag(alpha_t) S_{t-1} + k_t v_t^T, its parallel form and its
chunkwise form with a secondary level of chunking).
Page: docs/linear/gated-linear-attention.md
Tested against: the three forms against each other in float64 (to 1e-12), and
the recurrence written out independently in tests/test_gated_linear.py; with no
decay (g = 0) against unnormalised causal linear attention.

Three forms of one causal layer:
  * recurrent: one (d_k, d_v) state per head, updated token by token (decoding);
  * parallel: an N x N masked matrix, like attention (the reference);
  * chunked: matmuls inside chunks of C tokens, the recurrence between them
    (what training kernels do). No form builds an (N, N, d_k) tensor.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["gla_step", "gla_recurrent", "gla_parallel", "gla_chunked"]


# --8<-- [start:step]
def gla_update(q, k, v, g, state, scale):
    """S_t = Diag(exp(g_t)) S_{t-1} + k_t v_t^T, o_t = scale S_t^T q_t: one token."""
    # (B, H, d_k, 1) * (B, H, d_k, d_v) + (B, H, d_k, 1) * (B, H, 1, d_v)
    state = g.exp().unsqueeze(-1) * state + k.unsqueeze(-1) * v.unsqueeze(-2)
    out = (q.unsqueeze(-2) @ state).squeeze(-2) * scale  # (B, H, d_v)
    return out, state
# --8<-- [end:step]


# --8<-- [start:parallel]
def gla_scores(q, k, b):
    """A[t, s] = sum_i q_t[i] k_s[i] exp(b_t[i] - b_s[i]) for s <= t, else 0."""
    n = q.shape[-2]
    causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    a = q.new_zeros(*q.shape[:-1], n)  # (..., N, N)
    # one key channel at a time, never (N, N, d_k): (d_k, ..., N) slices
    for q_i, k_i, b_i in zip(*(t.movedim(-1, 0).contiguous() for t in (q, k, b))):
        # (..., N, 1) - (..., 1, N): exp of a difference, never e^b / e^b (overflow)
        decay = torch.where(
            causal, b_i[..., :, None] - b_i[..., None, :], -math.inf
        ).exp()
        a = a + q_i[..., :, None] * k_i[..., None, :] * decay
    return a


def gla_attention(q, k, v, g, scale):
    """o_t = scale sum_{s <= t} A[t, s] v_s with b = cumsum(g): masked attention."""
    return scale * gla_scores(q, k, g.cumsum(dim=-2)) @ v  # (B, H, N, d_v)
# --8<-- [end:parallel]


# --8<-- [start:chunk_scores]
def gla_chunk_scores(q, k, b, sub):
    """A in each chunk: sub-chunk pairs by matmul, diagonal sub-chunks by gla_scores."""
    q, k, b = (t.unflatten(-2, (-1, sub)) for t in (q, k, b))  # (..., n_s, c, d_k)
    end = b[..., -1, :]  # (..., n_s, d_k): b at each sub-chunk's last token
    start = F.pad(end[..., :-1, :], (0, 0, 1, 0))  # b just before each sub-chunk
    n_s = b.shape[-3]
    lower = torch.ones(n_s, n_s, dtype=torch.bool, device=q.device).tril(-1)[..., None]
    # (..., i, j, d_k): exp(start_i - end_j), the decay from sub-chunk j to i > j
    gap = torch.where(lower, start.unsqueeze(-2) - end.unsqueeze(-3), -math.inf).exp()
    q_n, k_n = q * (b - start.unsqueeze(-2)).exp(), k * (end.unsqueeze(-2) - b).exp()
    # (.., i, 1, c, d_k) * (.., i, j, 1, d_k) @ (.., 1, j, d_k, c) -> (.., i, j, c, c)
    a = (q_n.unsqueeze(-3) * gap.unsqueeze(-2)) @ k_n.transpose(-2, -1).unsqueeze(-4)
    eye = torch.eye(n_s, dtype=q.dtype, device=q.device)[..., None, None]
    a = a + eye * gla_scores(q, k, b).unsqueeze(-3)  # the diagonal, in log space
    return a.transpose(-3, -2).flatten(-4, -3).flatten(-2, -1)  # (..., C, C)
# --8<-- [end:chunk_scores]


# --8<-- [start:chunked]
def gla_chunks(q, k, v, g, scale, chunk, sub):
    """O = scale ((Q e^b) S + A V), S' = Diag(e^{b_C}) S + (K e^{b_C - b})^T V."""
    # (B, H, n_c, C, d_k or d_v)
    q, k, v, g = (t.unflatten(-2, (-1, chunk)) for t in (q, k, v, g))
    b = g.cumsum(dim=-2)  # (B, H, n_c, C, d_k): log-decay since the chunk's start
    b_last = b[..., -1:, :]  # (B, H, n_c, 1, d_k)
    # (B, H, n_c, d_k, d_v): what each chunk writes, from its own tokens only
    writes = (k * (b_last - b).exp()).transpose(-2, -1) @ v
    states = [torch.zeros_like(writes[..., 0, :, :])]  # (B, H, d_k, d_v) before chunk 0
    for j in range(q.shape[-3] - 1):  # the only loop: n_c steps, not N
        decay = b_last[..., j, 0, :, None].exp()  # (B, H, d_k, 1)
        states.append(decay * states[-1] + writes[..., j, :, :])
    inter = (q * b.exp()) @ torch.stack(states, dim=-3)  # (B, H, n_c, C, d_v)
    out = inter + gla_chunk_scores(q, k, b, sub) @ v  # (B, H, n_c, C, d_v)
    return (out * scale).flatten(-3, -2)  # (B, H, N, d_v)
# --8<-- [end:chunked]


# --8<-- [start:face]
def gla_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    state: torch.Tensor | None = None,
    *,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One decoding step of gated linear attention.

    Args:
        q, k: ``(B, H, d_k)``; g: the log-decays ``log(alpha_t)``, ``(B, H, d_k)``,
            <= 0.
        v: ``(B, H, d_v)``.
        state: ``(B, H, d_k, d_v)``, or ``None`` before the first token.
        scale: multiplies the output; ``d_k ** -0.5`` when ``None``.

    Returns:
        ``(out, state)``: ``(B, H, d_v)`` in q's dtype and the new state, kept
        in float32 for half-precision inputs.
    """
    _check_gla(q, k, v, g, scale, state=state, step=True)
    acc = _lin_accumulator(q.dtype)
    if state is None:
        state = torch.zeros(*k.shape, v.shape[-1], dtype=acc, device=q.device)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    args = (t.to(acc) for t in (q, k, v, g, state))
    out, state = gla_update(*args, scale)
    return out.to(q.dtype), state


def gla_recurrent(q, k, v, g, *, scale: float | None = None) -> torch.Tensor:
    """The recurrence run over the whole sequence, token by token.

    Args:
        q, k: ``(B, H, N, d_k)``; g: log-decays ``(B, H, N, d_k)``, <= 0.
        v: ``(B, H, N, d_v)``.
        scale: multiplies the output; ``d_k ** -0.5`` when ``None``.

    Returns:
        ``(B, H, N, d_v)`` in q's dtype (float32 inside for half precision).
    """
    _check_gla(q, k, v, g, scale)
    acc = _lin_accumulator(q.dtype)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    qa, ka, va, ga = (t.to(acc) for t in (q, k, v, g))
    state = torch.zeros(
        *k.shape[:-2], k.shape[-1], v.shape[-1], dtype=acc, device=q.device
    )
    outs = []
    for t in range(q.shape[-2]):
        out, state = gla_update(
            qa[..., t, :], ka[..., t, :], va[..., t, :], ga[..., t, :], state, scale
        )
        outs.append(out)
    return torch.stack(outs, dim=-2).to(q.dtype)  # (B, H, N, d_v)


def gla_parallel(q, k, v, g, *, scale: float | None = None) -> torch.Tensor:
    """The masked-attention form: the readable reference, O(N^2 d_k) time.

    Args and Returns: as ``gla_recurrent``.
    """
    _check_gla(q, k, v, g, scale)
    acc = _lin_accumulator(q.dtype)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return gla_attention(*(t.to(acc) for t in (q, k, v, g)), scale).to(q.dtype)


def gla_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    *,
    chunk_size: int = 32,
    sub_chunk_size: int | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """The chunked form with a secondary level of chunking, as GLA's kernels run it.

    Every exponential is of a difference b_t - b_s with s before t, so every
    factor is a decay in [0, 1]: nothing overflows at any length or rate.

    Args:
        q, k, v, g, scale: as ``gla_recurrent``.
        chunk_size: tokens per chunk C; the length is padded to a multiple of
            C with tokens that neither decay nor write.
        sub_chunk_size: tokens per sub-chunk, must divide ``chunk_size``;
            ``min(chunk_size, 8)`` when ``None`` (the
            diagonal sub-chunks cost N c d_k exponentials, the rest matmuls).

    Returns:
        ``(B, H, N, d_v)`` in q's dtype (float32 inside for half precision).
    """
    sub = min(chunk_size, 8) if sub_chunk_size is None else sub_chunk_size
    _check_gla(q, k, v, g, scale, chunk=chunk_size, sub=sub)
    acc, n = _lin_accumulator(q.dtype), q.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    pad = (0, 0, 0, -n % chunk_size)  # zero g: no decay; zero k: no write
    q_, k_, v_, g_ = (F.pad(t.to(acc), pad) for t in (q, k, v, g))
    return gla_chunks(q_, k_, v_, g_, scale, chunk_size, sub)[..., :n, :].to(q.dtype)
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


def _check_gla(q, k, v, g, scale, *, state=None, chunk=1, sub=1, step=False) -> None:
    """q, k, g (B, H, N, d_k) and v (B, H, N, d_v); log-decays g <= 0."""
    _check_lin_tensor("q", q, ("B", "H", "d_k") if step else ("B", "H", "N", "d_k"))
    for name, t in (("k", k), ("g", g)):  # shaped like q
        _check_lin_tensor(name, t, q.shape, ("q", q))
    _check_lin_tensor("v", v, (*q.shape[:-1], "d_v"), ("q", q))
    if state is not None:
        _check_lin_tensor("state", state, q.shape + v.shape[-1:], ("q", q), dtype=False)
    if (g > 0).any():
        raise ValueError(f"g holds log-decays, must be <= 0, got {g.max().item():.3g}")
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be None or a finite float > 0, got {scale!r}")
    if not all(isinstance(c, int) and c >= 1 for c in (chunk, sub)) or chunk % sub:
        raise ValueError(f"chunk_size and sub_chunk_size must be ints >= 1, the second "
                         f"dividing the first, got {chunk!r} and {sub!r}")
# --8<-- [end:checks]
