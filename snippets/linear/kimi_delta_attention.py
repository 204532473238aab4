"""Kimi Delta Attention (KDA): the gated delta rule with one decay per key channel.

Paper: Kimi Team, Zhang, Lin, Yao et al. (2025), "Kimi Linear: An Expressive,
Efficient Attention Architecture", arXiv:2510.26692. KDA is the recurrence

    S_t = (I - beta_t k_t k_t^T) Diag(alpha_t) S_{t-1} + beta_t k_t v_t^T,
    o_t = scale * S_t^T q_t,

with alpha_t = exp(g_t) a vector of d_k decays, one per key channel, where
Gated DeltaNet has one scalar per head and token.
Page: docs/linear/kimi-delta-attention.md
Tested against: the recurrence written with explicit (d_k, d_k) matrices, and
transformers' ``recurrent_kimi_delta_attention`` and
``chunk_kimi_delta_attention`` (models/kimi_linear), in
tests/test_kimi_delta_attention.py; with the same gate in every channel it
equals Gated DeltaNet (snippets/linear/delta_rule.py).

The state S is (d_k, d_v) per head. ``g`` is the log decay, so g <= 0 forgets
and g = 0 keeps everything; Kimi Linear computes it from the token and
L2-normalises q and k before this function sees them.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["kda_step", "kda_recurrent", "kda_chunked"]


# --8<-- [start:update]
def kda_update(q, k, v, beta, g, state, scale):
    """S = (I - beta k k^T) Diag(e^g) S + beta k v^T, o = scale S^T q: one token."""
    state = g.exp().unsqueeze(-1) * state  # (B, H, d_k, 1) * (B, H, d_k, d_v)
    read = (k.unsqueeze(-2) @ state).squeeze(-2)  # (B, H, d_v): S^T k, what k reads
    new = beta.unsqueeze(-1) * (v - read)  # (B, H, d_v): the part of v not yet stored
    state = state + k.unsqueeze(-1) * new.unsqueeze(-2)  # + k u^T, (B, H, d_k, d_v)
    return (q.unsqueeze(-2) @ state).squeeze(-2) * scale, state
# --8<-- [end:update]


# --8<-- [start:chunk]
def kda_chunk(q, k, v, beta, g, state, scale):
    """One chunk of C tokens: solve (I + A) U = diag(beta) (V - (K o e^b) S_0)."""
    b = g.cumsum(dim=-2)  # (B, H, C, d_k): log decay from the chunk start
    # decay[t, s, c] = e^(b_t - b_s) for s <= t: differences, never e^b / e^b
    c = b.shape[-2]
    past = torch.ones(c, c, dtype=torch.bool, device=b.device).tril()[..., None]
    diff = (b.unsqueeze(-2) - b.unsqueeze(-3)).masked_fill(~past, 0)  # exponents <= 0
    decay = diff.exp() * past  # (B, H, C, C, d_k)
    kk = torch.einsum("bhtc,bhtsc,bhsc->bhts", k, decay, k)  # (B, H, C, C)
    a = beta.unsqueeze(-1) * kk.tril(-1)  # A, strictly lower
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    rhs = beta.unsqueeze(-1) * (v - (k * b.exp()) @ state)  # (B, H, C, d_v)
    u = torch.linalg.solve_triangular(eye + a, rhs, upper=False)  # U, (B, H, C, d_v)
    qk = torch.einsum("bhtc,bhtsc,bhsc->bhts", q, decay, k)  # (B, H, C, C), s <= t
    out = ((q * b.exp()) @ state + qk @ u) * scale  # (B, H, C, d_v)
    last = b[..., -1:, :]  # (B, H, 1, d_k): b_C
    tail = (k * (last - b).exp()).transpose(-2, -1) @ u  # (B, H, d_k, d_v)
    return out, last.transpose(-2, -1).exp() * state + tail
# --8<-- [end:chunk]


# --8<-- [start:face]
def kda_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor,
    state: torch.Tensor,
    *,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One decoding step of KDA: read and update a (d_k, d_v) state per head.

    Args:
        q: the new token's query ``(B, H, d_k)``.
        k: its key ``(B, H, d_k)`` (Kimi Linear L2-normalises it).
        v: its value ``(B, H, d_v)``.
        beta: the write strength ``(B, H)``, in [0, 1] in the model.
        g: the log decay per key channel ``(B, H, d_k)``; 0 keeps the state.
        state: ``(B, H, d_k, d_v)``, zeros before the first token.
        scale: multiplies the read-out; default ``1 / sqrt(d_k)``.

    Returns:
        ``(out, state)``: the output ``(B, H, d_v)`` and the new state, in the
        input dtype (computed in float32 or wider).

    Shape:
        q, k, g ``(B, H, d_k)``; v ``(B, H, d_v)``; beta ``(B, H)``;
        state ``(B, H, d_k, d_v)``.
    """
    _check_kda(q, k, v, beta, g, state=state, scale=scale, step=True)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    acc = torch.promote_types(q.dtype, torch.float32)
    out, state = kda_update(*(t.to(acc) for t in (q, k, v, beta, g, state)), scale)
    return out.to(q.dtype), state.to(q.dtype)


def kda_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor,
    *,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """KDA over a sequence, token by token: the definition, O(N d_k d_v).

    Args:
        q: queries ``(B, H, N, d_k)``.
        k: keys ``(B, H, N, d_k)``.
        v: values ``(B, H, N, d_v)``.
        beta: write strengths ``(B, H, N)``.
        g: log decays per key channel ``(B, H, N, d_k)``.
        scale: multiplies the read-out; default ``1 / sqrt(d_k)``.
        initial_state: ``(B, H, d_k, d_v)`` or None for zeros.

    Returns:
        ``(out, state)``: outputs ``(B, H, N, d_v)`` and the final state, in
        the input dtype.

    Shape:
        q, k, g ``(B, H, N, d_k)``; v ``(B, H, N, d_v)``; beta ``(B, H, N)``.
    """
    _check_kda(q, k, v, beta, g, state=initial_state, scale=scale)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    dtype, acc = q.dtype, torch.promote_types(q.dtype, torch.float32)
    q, k, v, beta, g = (t.to(acc) for t in (q, k, v, beta, g))
    b, h, n, d_k = k.shape
    state = k.new_zeros(b, h, d_k, v.shape[-1]) if initial_state is None \
        else initial_state.to(acc)
    outs = []
    for t in range(n):
        out, state = kda_update(q[:, :, t], k[:, :, t], v[:, :, t], beta[:, :, t],
                                g[:, :, t], state, scale)
        outs.append(out)
    return torch.stack(outs, dim=2).to(dtype), state.to(dtype)


def kda_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor,
    *,
    scale: float | None = None,
    chunk_size: int = 64,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """KDA in chunks: a triangular solve per chunk, the state carried between.

    The sequence is padded to a multiple of ``chunk_size`` with tokens that
    neither write (k = v = beta = 0) nor decay (g = 0), so any N works.

    Args:
        q: queries ``(B, H, N, d_k)``.
        k: keys ``(B, H, N, d_k)``.
        v: values ``(B, H, N, d_v)``.
        beta: write strengths ``(B, H, N)``.
        g: log decays per key channel ``(B, H, N, d_k)``.
        scale: multiplies the read-out; default ``1 / sqrt(d_k)``.
        chunk_size: tokens per chunk C, >= 1.
        initial_state: ``(B, H, d_k, d_v)`` or None for zeros.

    Returns:
        ``(out, state)`` as ``kda_recurrent`` returns them.

    Shape:
        q, k, g ``(B, H, N, d_k)``; v ``(B, H, N, d_v)``; beta ``(B, H, N)``.
    """
    _check_kda(q, k, v, beta, g, state=initial_state, scale=scale, chunk=chunk_size)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    dtype, acc = q.dtype, torch.promote_types(q.dtype, torch.float32)
    n, pad = q.shape[-2], -q.shape[-2] % chunk_size
    q, k, v, g = (F.pad(t.to(acc), (0, 0, 0, pad)) for t in (q, k, v, g))
    beta = F.pad(beta.to(acc), (0, pad))
    state = k.new_zeros(*k.shape[:2], k.shape[-1], v.shape[-1]) \
        if initial_state is None else initial_state.to(acc)
    outs = []
    for s in range(0, n + pad, chunk_size):
        part = (t[:, :, s:s + chunk_size] for t in (q, k, v, beta, g))
        out, state = kda_chunk(*part, state, scale)
        outs.append(out)
    return torch.cat(outs, dim=2)[:, :, :n].to(dtype), state.to(dtype)
# --8<-- [end:face]


# --8<-- [start:checks]
def _check_kda(q, k, v, beta, g, *, state=None, scale=None, chunk=1, step=False):
    """q, k, g (B, H, N, d_k); v (B, H, N, d_v); beta (B, H, N); g <= 0."""
    _check_lin_tensor("q", q, ("B", "H", "d_k") if step else ("B", "H", "N", "d_k"))
    lead, like = q.shape[:-1], ("q", q)
    _check_lin_tensor("k", k, q.shape, like)
    _check_lin_tensor("g", g, q.shape, like)
    _check_lin_tensor("beta", beta, lead, like)
    _check_lin_tensor("v", v, (*lead, "d_v"), like)
    if state is not None:
        _check_lin_tensor("state", state, (*lead[:2], q.shape[-1], v.shape[-1]), like)
    if (g > 0).any():  # a growing state; e^(b_t - b_s) could overflow
        raise ValueError(f"g holds log decays and must be <= 0, got {g.max().item()}")
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be None or a finite number > 0, got {scale!r}")
    if not (isinstance(chunk, int) and chunk >= 1):
        raise ValueError(f"chunk_size must be an int >= 1, got {chunk!r}")


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
