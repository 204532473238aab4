"""Gated linear attention (GLA): linear attention whose state decays, per channel.

Paper: Yang, Wang, Shen, Panda and Kim (2023), "Gated Linear Attention
Transformers with Hardware-Efficient Training", arXiv:2312.06635 (the gated
recurrence S_t = diag(alpha_t) S_{t-1} + k_t v_t^T, its parallel form and its
chunkwise form).
Page: docs/linear/gated-linear-attention.md
Tested against: the three forms against each other in float64 (to 1e-12), and
the recurrence written out independently in tests/test_gated_linear.py; with no
decay (g = 0) against the unnormalised causal linear attention of
snippets/efficiency/linear_attention.py's quadratic form.

Three forms of one causal layer:
  * recurrent: one (d_k, d_v) state per head, updated token by token (decoding);
  * parallel: an N x N masked matrix, like attention (the reference);
  * chunked: the parallel form inside chunks of C tokens, the recurrence between
    them (what training kernels do).

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch

__all__ = ["gla_step", "gla_recurrent", "gla_parallel", "gla_chunked"]


# --8<-- [start:validate]
def _check_gla(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, scale: float | None) -> None:
    """Raise a clear error unless q, k, v, the log-decays g and the scale fit together."""
    for name, t in (("q", q), ("k", k), ("v", v), ("g", g)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must have a floating dtype, got {t.dtype}")
        if t.dim() < 2:
            raise ValueError(f"{name} must have shape (..., N, width), got {tuple(t.shape)}")
    if not (q.dtype == k.dtype == v.dtype == g.dtype):
        raise TypeError(f"q, k, v and g must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}, {g.dtype}")
    if q.shape != k.shape or g.shape != k.shape:
        raise ValueError(
            f"q, k and g must have one shape (..., N, d_k), got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, g {tuple(g.shape)}"
        )
    if v.shape[:-1] != k.shape[:-1]:
        raise ValueError(f"v must be (..., N, d_v) with k's leading shape {tuple(k.shape[:-1])}, got {tuple(v.shape)}")
    if not (q.device == k.device == v.device == g.device):
        raise ValueError(f"q, k, v and g must be on one device, got {q.device}, {k.device}, {v.device}, {g.device}")
    _check_scale(scale)
    if (g > 0).any():
        raise ValueError(f"g holds log-decays log(alpha) and must be <= 0, got a maximum of {g.max().item():.3g}")


def _check_scale(scale: float | None) -> None:
    if scale is not None and (
        isinstance(scale, bool)
        or not isinstance(scale, (int, float))
        or not (math.isfinite(scale) and scale > 0)
    ):
        raise ValueError(f"scale must be a positive finite float or None, got {scale!r}")


def _check_state(state: object, shape: tuple[int, ...], device: torch.device) -> None:
    """Raise unless ``state`` is None or a floating tensor of ``shape`` on ``device``."""
    if state is None:
        return
    if not isinstance(state, torch.Tensor) or not state.is_floating_point():
        got = state.dtype if isinstance(state, torch.Tensor) else type(state).__name__
        raise TypeError(f"state must be a floating tensor or None, got {got}")
    if state.shape != shape:
        raise ValueError(f"state must have shape {shape}, got {tuple(state.shape)}")
    if state.device != device:
        raise ValueError(f"state must be on the device of q {device}, got {state.device}")


def _check_step_tensors(**tensors: object) -> None:
    """Raise unless each one-token input is a tensor with at least one dimension."""
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() < 1:
            raise ValueError(f"{name} must have shape (B, H, ...) of one token, got {tuple(t.shape)}")


def _check_gla_step(q, k, v, g, state, scale) -> None:
    """``_check_gla`` for one token, ``(B, H, width)``, and its entering state."""
    _check_step_tensors(q=q, k=k, v=v, g=g)
    _check_gla(q.unsqueeze(-2), k.unsqueeze(-2), v.unsqueeze(-2), g.unsqueeze(-2), scale)
    _check_state(state, (*k.shape, v.shape[-1]), q.device)


def _check_chunk_size(chunk_size: int) -> None:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")


def _accumulator(dtype: torch.dtype) -> torch.dtype:
    """float32 for half-precision inputs: a long product of decays underflows float16."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
# --8<-- [end:validate]


# --8<-- [start:step]
def gla_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    state: torch.Tensor | None = None,
    *,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token: S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T, out_t = scale * S_t^T q_t.

    Args:
        q, k: ``(B, H, d_k)``; g: the log-decays ``log(alpha_t)``, ``(B, H, d_k)``, <= 0.
        v: ``(B, H, d_v)``.
        state: ``(B, H, d_k, d_v)``, or ``None`` before the first token.
        scale: multiplies the output; ``d_k ** -0.5`` when ``None``.

    Returns:
        ``(out, state)``: ``(B, H, d_v)`` and the new ``(B, H, d_k, d_v)`` state.
    """
    _check_gla_step(q, k, v, g, state, scale)
    dtype, acc = q.dtype, _accumulator(q.dtype)
    q, k, v, g = (t.to(acc) for t in (q, k, v, g))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if state is None:
        state = q.new_zeros((*k.shape, v.shape[-1]))  # (B, H, d_k, d_v)
    # Row i of the state (key channel i) forgets at its own rate alpha_t[i].
    state = g.exp().unsqueeze(-1) * state.to(acc) + k.unsqueeze(-1) * v.unsqueeze(-2)  # (B, H, d_k, d_v)
    out = (q.unsqueeze(-2) @ state).squeeze(-2) * scale  # (B, H, 1, d_k) @ (B, H, d_k, d_v) -> (B, H, d_v)
    return out.to(dtype), state
# --8<-- [end:step]


def gla_recurrent(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, *, scale: float | None = None
) -> torch.Tensor:
    """The recurrence run over the whole sequence, token by token.

    Shape:
        q, k, g: ``(B, H, N, d_k)``; v: ``(B, H, N, d_v)`` -> ``(B, H, N, d_v)``.
    """
    _check_gla(q, k, v, g, scale)
    state, outs = None, []
    for t in range(q.shape[-2]):
        out, state = gla_step(q[..., t, :], k[..., t, :], v[..., t, :], g[..., t, :], state, scale=scale)
        outs.append(out)
    return torch.stack(outs, dim=-2).to(q.dtype)  # (B, H, N, d_v)


# --8<-- [start:parallel]
def gla_parallel(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, *, scale: float | None = None
) -> torch.Tensor:
    """out_t = scale * sum_{s <= t} (q_t * exp(b_t - b_s)) . k_s  v_s, with b = cumsum(g).

    The N x N matrix A[t, s] = sum_i q_t[i] k_s[i] exp(b_t[i] - b_s[i]) is causal
    attention with a decay mask inside the dot product. Building the
    (N, N, d_k) decays costs memory; it is the reference, not a fast path.

    Shape:
        q, k, g: ``(B, H, N, d_k)``; v: ``(B, H, N, d_v)`` -> ``(B, H, N, d_v)``.
    """
    _check_gla(q, k, v, g, scale)
    dtype, acc = q.dtype, _accumulator(q.dtype)
    q, k, v, g = (t.to(acc) for t in (q, k, v, g))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    n = q.shape[-2]
    b = g.cumsum(dim=-2)  # (B, H, N, d_k): log of the decay since the start
    diff = b.unsqueeze(-2) - b.unsqueeze(-3)  # (B, H, N, 1, d_k) - (B, H, 1, N, d_k) -> (B, H, N, N, d_k)
    causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril().unsqueeze(-1)  # (N, N, 1)
    # exp of a difference, never exp(b) / exp(b): the ratio overflows for long inputs.
    decay = torch.where(causal, diff, float("-inf")).exp()  # (B, H, N, N, d_k); 0 above the diagonal
    a = torch.einsum("...ti,...si,...tsi->...ts", q, k, decay) * scale  # (B, H, N, N)
    return (a @ v).to(dtype)  # (B, H, N, N) @ (B, H, N, d_v) -> (B, H, N, d_v)
# --8<-- [end:parallel]


# --8<-- [start:chunked]
def gla_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    *,
    chunk_size: int = 64,
    scale: float | None = None,
) -> torch.Tensor:
    """The parallel form inside chunks of ``chunk_size`` tokens, the recurrence between chunks.

    For a chunk with entering state S and local cumulative log-decays b:
        out   = scale * ((q * exp(b)) S + A_chunk v)          (inter + intra)
        S_new = diag(exp(b_last)) S + (k * exp(b_last - b))^T v

    Shape:
        q, k, g: ``(B, H, N, d_k)``; v: ``(B, H, N, d_v)`` -> ``(B, H, N, d_v)``.
    """
    _check_gla(q, k, v, g, scale)
    _check_chunk_size(chunk_size)
    dtype, acc = q.dtype, _accumulator(q.dtype)
    q, k, v, g = (t.to(acc) for t in (q, k, v, g))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    n = q.shape[-2]
    state = q.new_zeros((*q.shape[:-2], q.shape[-1], v.shape[-1]))  # (B, H, d_k, d_v)
    outs = []
    for start in range(0, n, chunk_size):
        qc, kc, vc, gc = (t[..., start : start + chunk_size, :] for t in (q, k, v, g))
        c = qc.shape[-2]
        b = gc.cumsum(dim=-2)  # (B, H, C, d_k): decay from the chunk's start, inclusive
        inter = (qc * b.exp()) @ state  # (B, H, C, d_k) @ (B, H, d_k, d_v) -> (B, H, C, d_v)
        causal = torch.ones(c, c, dtype=torch.bool, device=q.device).tril().unsqueeze(-1)
        decay = torch.where(causal, b.unsqueeze(-2) - b.unsqueeze(-3), float("-inf")).exp()  # (B, H, C, C, d_k)
        a = torch.einsum("...ti,...si,...tsi->...ts", qc, kc, decay)  # (B, H, C, C)
        outs.append((inter + a @ vc) * scale)  # (B, H, C, d_v)
        b_last = b[..., -1:, :]  # (B, H, 1, d_k)
        state = b_last.exp().transpose(-2, -1) * state + (kc * (b_last - b).exp()).transpose(-2, -1) @ vc  # (B, H, d_k, d_v)
    return torch.cat(outs, dim=-2).to(dtype)  # (B, H, N, d_v)
# --8<-- [end:chunked]
