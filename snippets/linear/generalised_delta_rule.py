"""RWKV-7's generalised delta rule: a diagonal decay plus a rank-one transition.

Paper: Peng, Zhang, Goldstein, Alcaide et al. (2025), "RWKV-7 "Goose" with
Expressive Dynamic State Evolution", arXiv:2503.14456. Written with this
guide's (d_k, d_v) state (the paper's state is its transpose):

    S_t = (Diag(e^{w_t}) + b_t a_t^T) S_{t-1} + k_t v_t^T,    o_t = scale * S_t^T r_t

with w_t <= 0 a log decay per key channel and a_t, b_t two vectors of d_k.
RWKV-7 passes a = -k_hat and b = k_hat * a_in (a_in its in-context learning
rate) and scale = 1; its kernels take the decay as w' with w = -exp(w').
Page: docs/linear/kimi-delta-attention.md (section "RWKV-7")
Tested against: the recurrence written with explicit matrices, and its special
cases: a = b = 0 is gated linear attention (snippets/linear/gated_linear_attention.py),
a = -k, b = beta k with key beta k is the delta rule and Gated DeltaNet
(snippets/linear/delta_rule.py), a = -(alpha * k) is Kimi Delta Attention
(snippets/linear/kimi_delta_attention.py), in tests/test_generalised_delta_rule.py.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch

__all__ = ["generalised_delta_recurrent"]


# --8<-- [start:update]
def generalised_delta_update(r, k, v, w, a, b, state, scale):
    """S = (Diag(e^w) + b a^T) S + k v^T, o = scale S^T r: one token."""
    read = (a.unsqueeze(-2) @ state).squeeze(-2)  # (B, H, d_v): a^T S
    # (B, H, d_k, d_v): decay the rows, move b (a^T S), write k v^T
    state = w.exp().unsqueeze(-1) * state + b.unsqueeze(-1) * read.unsqueeze(-2) \
        + k.unsqueeze(-1) * v.unsqueeze(-2)
    return (r.unsqueeze(-2) @ state).squeeze(-2) * scale, state  # (B, H, d_v)
# --8<-- [end:update]


# --8<-- [start:face]
def generalised_delta_recurrent(
    r: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    w: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    scale: float = 1.0,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RWKV-7's state update over a sequence, token by token.

    Args:
        r: receptances (queries) ``(B, H, N, d_k)``.
        k: keys ``(B, H, N, d_k)``, written as ``k v^T``.
        v: values ``(B, H, N, d_v)``.
        w: log decays per key channel ``(B, H, N, d_k)``, <= 0.
        a: the vector that reads the state, ``a^T S`` ``(B, H, N, d_k)``.
        b: the vector that writes what ``a`` read ``(B, H, N, d_k)``.
        scale: multiplies the read-out; RWKV-7 uses 1.
        initial_state: ``(B, H, d_k, d_v)`` or None for zeros.

    Returns:
        ``(out, state)``: outputs ``(B, H, N, d_v)`` and the final state, in
        the input dtype (computed in float32 or wider).

    Shape:
        r, k, w, a, b ``(B, H, N, d_k)``; v ``(B, H, N, d_v)``.
    """
    _check_generalised(r, k, v, w, a, b, initial_state, scale)
    dtype, acc = r.dtype, torch.promote_types(r.dtype, torch.float32)
    r, k, v, w, a, b = (t.to(acc) for t in (r, k, v, w, a, b))
    state = k.new_zeros(*k.shape[:2], k.shape[-1], v.shape[-1]) \
        if initial_state is None else initial_state.to(acc)
    outs = []
    for t in range(r.shape[-2]):
        step = (x[:, :, t] for x in (r, k, v, w, a, b))
        out, state = generalised_delta_update(*step, state, scale)
        outs.append(out)
    return torch.stack(outs, dim=2).to(dtype), state.to(dtype)
# --8<-- [end:face]


# --8<-- [start:checks]
def _check_generalised(r, k, v, w, a, b, state, scale):
    """r, k, w, a, b (B, H, N, d_k); v (B, H, N, d_v); w <= 0; scale > 0."""
    _check_lin_tensor("r", r, ("B", "H", "N", "d_k"))
    for name, t in (("k", k), ("w", w), ("a", a), ("b", b)):
        _check_lin_tensor(name, t, r.shape, ("r", r))
    _check_lin_tensor("v", v, (*r.shape[:-1], "d_v"), ("r", r))
    if state is not None:
        shape = (*r.shape[:2], r.shape[-1], v.shape[-1])
        _check_lin_tensor("initial_state", state, shape, ("r", r))
    if (w > 0).any():
        raise ValueError(f"w holds log decays and must be <= 0, got {w.max().item()}")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")


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
