"""DeltaNet and Gated DeltaNet: linear attention that overwrites instead of only adding.

Papers: Yang, Wang, Zhang, Shen and Kim (2024), "Parallelizing Linear
Transformers with the Delta Rule over Sequence Length", arXiv:2406.06484 (the
delta rule S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, its
triangular-solve (WY/UT) parallel form and its chunkwise form); Yang, Kautz and
Hatamizadeh (2024), "Gated Delta Networks: Improving Mamba2 with Delta Rule",
arXiv:2412.06464 (the gated rule S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1}
+ beta_t k_t v_t^T).
Page: docs/linear/delta-rule.md
Tested against: the three forms against each other in float64 (to 1e-12) and
the recurrence as the papers write it, a matrix (I - beta k k^T) times the
state, in tests/test_delta_rule.py.

The state S is (d_k, d_v) per head and is read as out_t = S_t^T q_t. The
delta rule first reads what S stores under key k_t, S^T k_t, and replaces a
fraction beta_t of it by v_t. Models L2-normalise k (so that I - beta k k^T is a
contraction for beta in [0, 2]); the code takes k as given.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch

__all__ = ["delta_rule_step", "delta_rule_recurrent", "delta_rule_parallel", "delta_rule_chunked"]


# --8<-- [start:validate]
def _check_delta(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, g: torch.Tensor | None,
    scale: float | None,
) -> None:
    """Raise a clear error unless q, k, v, beta, the log-decays g and the scale fit together."""
    named = [("q", q), ("k", k), ("v", v), ("beta", beta)] + ([("g", g)] if g is not None else [])
    for name, t in named:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must have a floating dtype, got {t.dtype}")
    if len({t.device for _, t in named}) != 1:
        raise ValueError(f"q, k, v, beta (and g) must be on one device, got {[str(t.device) for _, t in named]}")
    if len({t.dtype for _, t in named}) != 1:
        raise TypeError(f"q, k, v, beta (and g) must share one dtype, got {[str(t.dtype) for _, t in named]}")
    if q.dim() < 2 or q.shape != k.shape:
        raise ValueError(f"q and k must have one shape (..., N, d_k), got q {tuple(q.shape)} and k {tuple(k.shape)}")
    if v.shape[:-1] != k.shape[:-1]:
        raise ValueError(f"v must be (..., N, d_v) with k's leading shape {tuple(k.shape[:-1])}, got {tuple(v.shape)}")
    if beta.shape != k.shape[:-1]:
        raise ValueError(f"beta must have shape (..., N) = {tuple(k.shape[:-1])}, got {tuple(beta.shape)}")
    if g is not None:
        if g.shape != k.shape[:-1]:
            raise ValueError(f"g must have shape (..., N) = {tuple(k.shape[:-1])}, got {tuple(g.shape)}")
        if (g > 0).any():
            raise ValueError(f"g holds log-decays log(alpha) and must be <= 0, got a maximum of {g.max().item():.3g}")
    _check_scale(scale)


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


def _check_delta_step(q, k, v, beta, g, state, scale) -> None:
    """``_check_delta`` for one token: q, k ``(B, H, d_k)``, v ``(B, H, d_v)``, beta, g ``(B, H)``."""
    _check_step_tensors(q=q, k=k, v=v, beta=beta, **({} if g is None else {"g": g}))
    _check_delta(q.unsqueeze(-2), k.unsqueeze(-2), v.unsqueeze(-2), beta.unsqueeze(-1),
                 None if g is None else g.unsqueeze(-1), scale)
    _check_state(state, (*k.shape, v.shape[-1]), q.device)


def _check_chunk_size(chunk_size: int) -> None:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")


def _accumulator(dtype: torch.dtype) -> torch.dtype:
    """float32 for half-precision inputs: a long product of decays underflows float16."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
# --8<-- [end:validate]


# --8<-- [start:step]
def delta_rule_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None = None,
    state: torch.Tensor | None = None,
    *,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of the (gated) delta rule.

    S   = alpha_t S_{t-1}                    (Gated DeltaNet; alpha_t = exp(g_t), 1 for DeltaNet)
    S  += beta_t k_t (v_t - S^T k_t)^T       (replace a fraction beta_t of what k_t reads)
    out = scale * S^T q_t

    Args:
        q, k: ``(B, H, d_k)``; v: ``(B, H, d_v)``.
        beta: the writing strength, ``(B, H)``, usually in (0, 1).
        g: log-decays ``(B, H)``, <= 0; ``None`` for DeltaNet.
        state: ``(B, H, d_k, d_v)``, or ``None`` before the first token.
        scale: multiplies the output; ``d_k ** -0.5`` when ``None``.

    Returns:
        ``(out, state)``: ``(B, H, d_v)`` and ``(B, H, d_k, d_v)``.
    """
    _check_delta_step(q, k, v, beta, g, state, scale)
    dtype, acc = q.dtype, _accumulator(q.dtype)
    q, k, v, beta = (t.to(acc) for t in (q, k, v, beta))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if state is None:
        state = q.new_zeros((*k.shape, v.shape[-1]))  # (B, H, d_k, d_v)
    state = state.to(acc)
    if g is not None:
        state = g.to(acc).exp()[..., None, None] * state  # (B, H, d_k, d_v)
    read = (k.unsqueeze(-2) @ state).squeeze(-2)  # (B, H, 1, d_k) @ (B, H, d_k, d_v) -> (B, H, d_v)
    state = state + beta[..., None, None] * k.unsqueeze(-1) * (v - read).unsqueeze(-2)  # (B, H, d_k, d_v)
    out = (q.unsqueeze(-2) @ state).squeeze(-2) * scale  # (B, H, d_v)
    return out.to(dtype), state
# --8<-- [end:step]


def delta_rule_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None = None,
    *,
    scale: float | None = None,
) -> torch.Tensor:
    """The step run over the whole sequence.

    Shape:
        q, k: ``(B, H, N, d_k)``; v: ``(B, H, N, d_v)``; beta, g: ``(B, H, N)``
        -> ``(B, H, N, d_v)``.
    """
    _check_delta(q, k, v, beta, g, scale)
    state, outs = None, []
    for t in range(q.shape[-2]):
        g_t = None if g is None else g[..., t]
        out, state = delta_rule_step(q[..., t, :], k[..., t, :], v[..., t, :], beta[..., t], g_t, state, scale=scale)
        outs.append(out)
    return torch.stack(outs, dim=-2)  # (B, H, N, d_v)


def _decay_matrix(g: torch.Tensor) -> torch.Tensor:
    """Gamma[t, s] = alpha_{s+1} ... alpha_t = exp(b_t - b_s) for s <= t, 0 above the diagonal."""
    n = g.shape[-1]
    b = g.cumsum(dim=-1)  # (..., N)
    causal = torch.ones(n, n, dtype=torch.bool, device=g.device).tril()
    return torch.where(causal, b.unsqueeze(-1) - b.unsqueeze(-2), float("-inf")).exp()  # (..., N, N)


# --8<-- [start:parallel]
def delta_rule_parallel(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None = None,
    *,
    scale: float | None = None,
) -> torch.Tensor:
    """out = scale * (Q K^T * Gamma) U, with U = (I + L)^-1 diag(beta) V.

    Unrolling the rule writes S_t = sum_{s <= t} Gamma[t, s] k_s u_s^T, where
    u_t = beta_t (v_t - sum_{s < t} Gamma[t, s] (k_s . k_t) u_s): a lower
    triangular system, L = strictly_lower(diag(beta) (K K^T * Gamma)). One
    triangular solve gives every u; the output is then masked attention.

    Shape:
        q, k: ``(B, H, N, d_k)``; v: ``(B, H, N, d_v)``; beta, g: ``(B, H, N)``
        -> ``(B, H, N, d_v)``.
    """
    _check_delta(q, k, v, beta, g, scale)
    dtype, acc = q.dtype, _accumulator(q.dtype)
    q, k, v, beta = (t.to(acc) for t in (q, k, v, beta))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    n = q.shape[-2]
    gamma = _decay_matrix(torch.zeros_like(beta) if g is None else g.to(acc))  # (B, H, N, N)
    lower = (beta.unsqueeze(-1) * (k @ k.transpose(-2, -1)) * gamma).tril(-1)  # (B, H, N, N)
    eye = torch.eye(n, dtype=acc, device=q.device)
    u = torch.linalg.solve_triangular(eye + lower, beta.unsqueeze(-1) * v, upper=False)  # (B, H, N, d_v)
    a = (q @ k.transpose(-2, -1)) * gamma * scale  # (B, H, N, d_k) @ (B, H, d_k, N) -> (B, H, N, N)
    return (a @ u).to(dtype)  # (B, H, N, N) @ (B, H, N, d_v) -> (B, H, N, d_v)
# --8<-- [end:parallel]


# --8<-- [start:chunked]
def delta_rule_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None = None,
    *,
    chunk_size: int = 64,
    scale: float | None = None,
) -> torch.Tensor:
    """The parallel form inside chunks, the state carried between them (the WY form).

    For a chunk with entering state S, local decays gamma_t = exp(b_t) and
    T = I + strictly_lower(diag(beta) (K K^T * Gamma)):
        W = T^-1 diag(beta * gamma) K,   U = T^-1 diag(beta) V,   u = U - W S
        out   = scale * (diag(gamma) Q S + (Q K^T * Gamma) u)
        S_new = gamma_last S + (K * gamma_last / gamma)^T u

    Shape:
        q, k: ``(B, H, N, d_k)``; v: ``(B, H, N, d_v)``; beta, g: ``(B, H, N)``
        -> ``(B, H, N, d_v)``.
    """
    _check_delta(q, k, v, beta, g, scale)
    _check_chunk_size(chunk_size)
    dtype, acc = q.dtype, _accumulator(q.dtype)
    q, k, v, beta = (t.to(acc) for t in (q, k, v, beta))
    g = torch.zeros_like(beta) if g is None else g.to(acc)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    state = q.new_zeros((*q.shape[:-2], q.shape[-1], v.shape[-1]))  # (B, H, d_k, d_v)
    outs = []
    for start in range(0, q.shape[-2], chunk_size):
        qc, kc, vc = (t[..., start : start + chunk_size, :] for t in (q, k, v))
        bc, gc = beta[..., start : start + chunk_size], g[..., start : start + chunk_size]
        c = qc.shape[-2]
        b = gc.cumsum(dim=-1)  # (B, H, C): log-decay since the chunk's start
        gamma = _decay_matrix(gc)  # (B, H, C, C)
        t_mat = torch.eye(c, dtype=acc, device=q.device) + (bc.unsqueeze(-1) * (kc @ kc.transpose(-2, -1)) * gamma).tril(-1)
        w = torch.linalg.solve_triangular(t_mat, (bc * b.exp()).unsqueeze(-1) * kc, upper=False)  # (B, H, C, d_k)
        u = torch.linalg.solve_triangular(t_mat, bc.unsqueeze(-1) * vc, upper=False)  # (B, H, C, d_v)
        u = u - w @ state  # (B, H, C, d_v): what each token writes, given the entering state
        inter = (qc * b.exp().unsqueeze(-1)) @ state  # (B, H, C, d_k) @ (B, H, d_k, d_v) -> (B, H, C, d_v)
        outs.append((inter + ((qc @ kc.transpose(-2, -1)) * gamma) @ u) * scale)  # (B, H, C, d_v)
        b_last = b[..., -1:]  # (B, H, 1)
        state = b_last.exp().unsqueeze(-1) * state + (kc * (b_last - b).exp().unsqueeze(-1)).transpose(-2, -1) @ u
    return torch.cat(outs, dim=-2).to(dtype)  # (B, H, N, d_v)
# --8<-- [end:chunked]
