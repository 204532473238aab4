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
import torch.nn.functional as F

__all__ = [
    "delta_rule_step",
    "delta_rule_recurrent",
    "delta_rule_parallel",
    "delta_rule_chunked",
]


# --8<-- [start:step]
def delta_step(q, k, v, beta, g, state, scale):
    """S = e^g S, S += beta k (v - S^T k)^T, o = scale S^T q: one token."""
    state = g.exp()[..., None, None] * state  # (B, H, d_k, d_v); g = 0 for DeltaNet
    read = (k.unsqueeze(-2) @ state).squeeze(-2)  # (B, H, d_v): what k_t reads now
    # (B, H, d_k, 1) * (B, H, 1, d_v): replace a fraction beta_t of it by v_t
    state = state + beta[..., None, None] * k.unsqueeze(-1) * (v - read).unsqueeze(-2)
    return (q.unsqueeze(-2) @ state).squeeze(-2) * scale, state  # (B, H, d_v), state
# --8<-- [end:step]


# --8<-- [start:mask]
def semiseparable(cum):
    """L[t, s] = exp(cum_t - cum_s) = a_{s+1} ... a_t for s <= t, else 0."""
    n = cum.shape[-1]
    causal = torch.ones(n, n, dtype=torch.bool, device=cum.device).tril()
    # (..., N, 1) - (..., 1, N) -> (..., N, N): a difference, never e^cum / e^cum
    return torch.where(causal, cum.unsqueeze(-1) - cum.unsqueeze(-2), -math.inf).exp()
# --8<-- [end:mask]


# --8<-- [start:parallel]
def delta_attention(q, k, v, beta, g, scale):
    """o = scale (Q K^T o Gamma) U, where (I + L) U = diag(beta) V."""
    gamma = semiseparable(g.cumsum(dim=-1))  # (B, H, N, N): alpha_{s+1} ... alpha_t
    # L = strictly_lower(diag(beta) (K K^T o Gamma)), (B, H, N, N)
    lower = (beta.unsqueeze(-1) * (k @ k.transpose(-2, -1)) * gamma).tril(-1)
    eye = torch.eye(q.shape[-2], dtype=q.dtype, device=q.device)
    u = torch.linalg.solve_triangular(eye + lower, beta.unsqueeze(-1) * v, upper=False)
    return (
        (q @ k.transpose(-2, -1)) * gamma * scale
    ) @ u  # (B, H, N, N) @ (B, H, N, d_v)
# --8<-- [end:parallel]


# --8<-- [start:chunked]
def delta_chunks(q, k, v, beta, g, scale, chunk):
    """Per chunk: W and U by one triangular solve (the WY form), then the state."""
    q, k, v = (t.unflatten(-2, (-1, chunk)) for t in (q, k, v))  # (B, H, n_c, C, .)
    beta, b = beta.unflatten(-1, (-1, chunk)), g.unflatten(-1, (-1, chunk)).cumsum(-1)
    gamma, solve = semiseparable(b), torch.linalg.solve_triangular  # (B, H, n_c, C, C)
    lower = (beta.unsqueeze(-1) * (k @ k.transpose(-2, -1)) * gamma).tril(-1)
    t_mat = torch.eye(chunk, dtype=q.dtype, device=q.device) + lower
    w = solve(t_mat, (beta * b.exp()).unsqueeze(-1) * k, upper=False)  # (.., C, d_k)
    u0 = solve(t_mat, beta.unsqueeze(-1) * v, upper=False)  # (B, H, n_c, C, d_v)
    attn, decay = (q @ k.transpose(-2, -1)) * gamma, (b[..., -1:] - b).exp()[..., None]
    state, outs = q.new_zeros(*q.shape[:2], q.shape[-1], v.shape[-1]), []
    for j in range(q.shape[2]):  # n_c steps; u: what each token writes, given the state
        u = u0[:, :, j] - w[:, :, j] @ state  # (B, H, C, d_v)
        inter = (q[:, :, j] * b[:, :, j, :, None].exp()) @ state  # (B, H, C, d_v)
        outs.append(inter + attn[:, :, j] @ u)
        writes = (k[:, :, j] * decay[:, :, j]).transpose(-2, -1) @ u  # (B, H, d_k, d_v)
        state = b[:, :, j, -1, None, None].exp() * state + writes
    return torch.stack(outs, dim=2).flatten(2, 3) * scale  # (B, H, N, d_v)
# --8<-- [end:chunked]


# --8<-- [start:face]
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
    """One token of the (gated) delta rule, for decoding.

    Args:
        q, k: ``(B, H, d_k)``; v: ``(B, H, d_v)``.
        beta: the writing strength, ``(B, H)``, usually in (0, 1).
        g: log-decays ``(B, H)``, <= 0 (Gated DeltaNet); ``None`` for DeltaNet.
        state: ``(B, H, d_k, d_v)``, or ``None`` before the first token.
        scale: multiplies the output; ``d_k ** -0.5`` when ``None``.

    Returns:
        ``(out, state)``: ``(B, H, d_v)`` in q's dtype and the new state, kept
        in float32 for half-precision inputs.
    """
    _check_delta(q, k, v, beta, g, scale, state=state, step=True)
    acc = _lin_accumulator(q.dtype)
    if state is None:
        state = torch.zeros(*k.shape, v.shape[-1], dtype=acc, device=q.device)
    g = torch.zeros_like(beta) if g is None else g
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    out, state = delta_step(*(t.to(acc) for t in (q, k, v, beta, g, state)), scale)
    return out.to(q.dtype), state


def delta_rule_recurrent(q, k, v, beta, g=None, *, scale: float | None = None):
    """The step run over the whole sequence.

    Args:
        q, k: ``(B, H, N, d_k)``; v: ``(B, H, N, d_v)``; beta, g: ``(B, H, N)``.
        scale: as ``delta_rule_step``.

    Returns:
        ``(B, H, N, d_v)`` in q's dtype (float32 inside for half precision).
    """
    _check_delta(q, k, v, beta, g, scale)
    acc = _lin_accumulator(q.dtype)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    g = torch.zeros_like(beta) if g is None else g
    q_, k_, v_, beta_, g_ = (t.to(acc) for t in (q, k, v, beta, g))
    state = torch.zeros(
        *k.shape[:-2], k.shape[-1], v.shape[-1], dtype=acc, device=q.device
    )
    outs = []
    for t in range(q.shape[-2]):
        out, state = delta_step(
            q_[..., t, :],
            k_[..., t, :],
            v_[..., t, :],
            beta_[..., t],
            g_[..., t],
            state,
            scale,
        )
        outs.append(out)
    return torch.stack(outs, dim=-2).to(q.dtype)  # (B, H, N, d_v)


def delta_rule_parallel(q, k, v, beta, g=None, *, scale: float | None = None):
    """The triangular-solve form: every u at once, then masked attention.

    Args and Returns: as ``delta_rule_recurrent``.
    """
    _check_delta(q, k, v, beta, g, scale)
    acc = _lin_accumulator(q.dtype)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    g = torch.zeros_like(beta) if g is None else g
    return delta_attention(*(t.to(acc) for t in (q, k, v, beta, g)), scale).to(q.dtype)


def delta_rule_chunked(
    q, k, v, beta, g=None, *, chunk_size: int = 64, scale: float | None = None
) -> torch.Tensor:
    """The parallel form inside chunks, the state carried between them.

    Args:
        q, k, v, beta, g, scale: as ``delta_rule_recurrent``.
        chunk_size: tokens per chunk; the length is padded to a multiple with
            tokens that write nothing (beta = 0) and do not decay (g = 0).

    Returns:
        ``(B, H, N, d_v)`` in q's dtype (float32 inside for half precision).
    """
    _check_delta(q, k, v, beta, g, scale, chunk=chunk_size)
    acc, n = _lin_accumulator(q.dtype), q.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    g = torch.zeros_like(beta) if g is None else g
    pad = -n % chunk_size
    q_, k_, v_ = (F.pad(t.to(acc), (0, 0, 0, pad)) for t in (q, k, v))
    beta_, g_ = (F.pad(t.to(acc), (0, pad)) for t in (beta, g))
    return delta_chunks(q_, k_, v_, beta_, g_, scale, chunk_size)[..., :n, :].to(
        q.dtype
    )
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


def _check_delta(q, k, v, beta, g, scale, *, state=None, chunk=1, step=False) -> None:
    """q, k (B, H, N, d_k); v (B, H, N, d_v); beta, g (B, H, N); log-decays <= 0."""
    _check_lin_tensor("q", q, ("B", "H", "d_k") if step else ("B", "H", "N", "d_k"))
    lead, like = q.shape[:-1], ("q", q)
    _check_lin_tensor("k", k, q.shape, like)
    _check_lin_tensor("v", v, (*lead, "d_v"), like)
    _check_lin_tensor("beta", beta, lead, like)
    if g is not None:
        _check_lin_tensor("g", g, lead, like)
    if state is not None:
        _check_lin_tensor("state", state, (*q.shape, v.shape[-1]), like, dtype=False)
    if g is not None and (g > 0).any():
        raise ValueError(f"g holds log-decays, must be <= 0, got {g.max().item():.3g}")
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be None or a finite float > 0, got {scale!r}")
    if not (isinstance(chunk, int) and chunk >= 1):
        raise ValueError(f"chunk_size must be an int >= 1, got {chunk!r}")
# --8<-- [end:checks]
