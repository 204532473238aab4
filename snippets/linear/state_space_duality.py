"""State-space duality (Mamba-2's SSD): a recurrence, masked attention, and chunks.

Paper: Dao and Gu (2024), "Transformers are SSMs: Generalized Models and
Efficient Algorithms Through Structured State Space Duality", arXiv:2405.21060
(the scalar-times-identity state matrix, the 1-semiseparable mask
L[t, s] = a_{s+1} ... a_t, and the four-step chunked algorithm).
Page: docs/linear/state-space-duality.md
Tested against: the three forms against each other in float64 (to 1e-12), the
mask against its product definition, and the masked form against gated linear
attention with one decay per head (snippets/linear/gated_linear_attention.py)
in tests/test_ssd.py.

Letters: the paper's B_t and C_t (input and output projections of the state)
are ``b`` and ``c`` here, because B and N are batch and length in this guide;
the state width (the paper's N) is ``d_state`` and the head width (its P) is d.

Per head, with a_t = exp(dt_t * A) in (0, 1):
    h_t = a_t h_{t-1} + dt_t b_t x_t^T        h_t: (d_state, d)
    y_t = h_t^T c_t

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["ssd_recurrent", "ssd_mask", "ssd_attention", "ssd_chunked"]


# --8<-- [start:recurrent]
def ssd_step(h, x, dt, A, b, c):
    """h_t = exp(dt_t A) h_{t-1} + dt_t b_t x_t^T, y_t = h_t^T c_t: one token."""
    a = (dt * A).exp()[..., None, None]  # (B, H, 1, 1): one decay per head
    # (B, H, d_state, 1) * (B, H, 1, d) -> (B, H, d_state, d)
    h = a * h + (dt[..., None] * b).unsqueeze(-1) * x.unsqueeze(-2)
    return (c.unsqueeze(-2) @ h).squeeze(-2), h  # (B, H, d), (B, H, d_state, d)
# --8<-- [end:recurrent]


# --8<-- [start:mask]
def semiseparable(cum):
    """L[t, s] = exp(cum_t - cum_s) = a_{s+1} ... a_t for s <= t, else 0."""
    n = cum.shape[-1]
    causal = torch.ones(n, n, dtype=torch.bool, device=cum.device).tril()
    # (..., N, 1) - (..., 1, N) -> (..., N, N): a difference, never e^cum / e^cum
    return torch.where(causal, cum.unsqueeze(-1) - cum.unsqueeze(-2), -math.inf).exp()
# --8<-- [end:mask]


# --8<-- [start:attention]
def ssd_dual(x, dt, A, b, c):
    """Y = (L o C B^T)(dt X): attention with c as queries, b as keys, no softmax."""
    mask = semiseparable((dt * A.unsqueeze(-1)).cumsum(dim=-1))  # (B, H, N, N)
    scores = c @ b.transpose(-2, -1)  # (B, H, N, d_state) @ (B, H, d_state, N)
    return (mask * scores) @ (dt.unsqueeze(-1) * x)  # (B, H, N, N) @ (B, H, N, d)
# --8<-- [end:attention]


# --8<-- [start:chunked]
def ssd_chunks(x, dt, A, b, c, chunk):
    """The four steps: diagonal blocks, chunk states, state passing, state to output."""
    x, b, c = (t.unflatten(-2, (-1, chunk)) for t in (x, b, c))  # (B, H, n_c, C, .)
    dt = dt.unflatten(-1, (-1, chunk))  # (B, H, n_c, C)
    xdt = dt.unsqueeze(-1) * x  # (B, H, n_c, C, d)
    cum = (dt * A[:, None, None]).cumsum(dim=-1)  # (B, H, n_c, C): from chunk start
    # 1. inside each chunk: the dual (masked) form on a C x C block
    y = (semiseparable(cum) * (c @ b.transpose(-2, -1))) @ xdt  # (B, H, n_c, C, d)
    # 2. the state each chunk leaves, from its own tokens: (B, H, n_c, d_state, d)
    states = (b * (cum[..., -1:] - cum).exp().unsqueeze(-1)).transpose(-2, -1) @ xdt
    # 3. pass states across chunk boundaries: n_c steps, not N
    entering = [torch.zeros_like(states[:, :, 0])]  # (B, H, d_state, d)
    for j in range(x.shape[2] - 1):
        decay = cum[:, :, j, -1, None, None].exp()  # (B, H, 1, 1): a whole chunk
        entering.append(decay * entering[-1] + states[:, :, j])
    # 4. each token reads the state that entered its chunk, decayed to its position
    y = y + (c * cum.exp().unsqueeze(-1)) @ torch.stack(entering, dim=2)
    return y.flatten(2, 3)  # (B, H, N, d)
# --8<-- [end:chunked]


# --8<-- [start:face]
def ssd_recurrent(x, dt, A, b, c) -> torch.Tensor:
    """The recurrence, token by token (how Mamba-2 decodes).

    Args:
        x: the input, ``(B, H, N, d)``.
        dt: step sizes Delta_t >= 0, ``(B, H, N)`` (a softplus output in Mamba-2).
        A: one rate per head, ``(H,)``, <= 0, so a_t = exp(dt_t A) lies in (0, 1].
        b, c: what writes to and reads from the state, ``(B, H, N, d_state)``.

    Returns:
        ``(B, H, N, d)`` in x's dtype (float32 inside for half precision).
    """
    _check_ssd(x, dt, A, b, c)
    acc = _lin_accumulator(x.dtype)
    x_, dt_, A_, b_, c_ = (t.to(acc) for t in (x, dt, A, b, c))
    h = x_.new_zeros(*b.shape[:2], b.shape[-1], x.shape[-1])  # (B, H, d_state, d)
    ys = []
    for t in range(x.shape[2]):
        y, h = ssd_step(h, x_[:, :, t], dt_[:, :, t], A_, b_[:, :, t], c_[:, :, t])
        ys.append(y)
    return torch.stack(ys, dim=2).to(x.dtype)  # (B, H, N, d)


def ssd_mask(dt: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
    """The 1-semiseparable mask of SSD's dual form.

    Args:
        dt: ``(B, H, N)``, >= 0. A: ``(H,)``, <= 0.

    Returns:
        ``(B, H, N, N)``: L[t, s] = exp(cum_t - cum_s) with cum_t = sum_{r <= t}
        dt_r A, for s <= t; 0 above the diagonal.
    """
    _check_ssd_mask(dt, A)
    acc = _lin_accumulator(dt.dtype)
    return semiseparable((dt.to(acc) * A.to(acc).unsqueeze(-1)).cumsum(-1)).to(dt.dtype)


def ssd_attention(x, dt, A, b, c) -> torch.Tensor:
    """The dual form: masked attention without softmax, O(N^2) (the reference).

    Args and Returns: as ``ssd_recurrent``.
    """
    _check_ssd(x, dt, A, b, c)
    acc = _lin_accumulator(x.dtype)
    return ssd_dual(*(t.to(acc) for t in (x, dt, A, b, c))).to(x.dtype)


def ssd_chunked(x, dt, A, b, c, *, chunk_size: int = 64) -> torch.Tensor:
    """Mamba-2's chunked algorithm: matmuls inside chunks, n_c state steps between.

    Args:
        x, dt, A, b, c: as ``ssd_recurrent``.
        chunk_size: tokens per chunk; the length is padded to a multiple with
            dt = 0, a step that neither decays the state (a = 1) nor writes.

    Returns:
        ``(B, H, N, d)`` in x's dtype (float32 inside for half precision).
    """
    _check_ssd(x, dt, A, b, c, chunk_size)
    acc, n = _lin_accumulator(x.dtype), x.shape[2]
    pad = -n % chunk_size
    x_, b_, c_ = (F.pad(t.to(acc), (0, 0, 0, pad)) for t in (x, b, c))
    dt_ = F.pad(dt.to(acc), (0, pad))
    return ssd_chunks(x_, dt_, A.to(acc), b_, c_, chunk_size)[:, :, :n].to(x.dtype)
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


def _check_ssd_mask(dt, A, x=None) -> None:
    """dt (B, H, N) >= 0, x's (B, H, N) when given; A (H,) <= 0."""
    like = None if x is None else ("x", x)
    _check_lin_tensor("dt", dt, ("B", "H", "N") if x is None else x.shape[:3], like)
    _check_lin_tensor("A", A, dt.shape[1:2], ("dt", dt))
    if (A > 0).any() or (dt < 0).any():
        raise ValueError(f"A must be <= 0 and dt >= 0 (exp(dt A) <= 1), got max A "
                         f"{A.max().item():.3g} and min dt {dt.min().item():.3g}")


def _check_ssd(x, dt, A, b, c, chunk=1) -> None:
    """x (B, H, N, d), dt (B, H, N), A (H,), b and c (B, H, N, d_state)."""
    _check_lin_tensor("x", x, ("B", "H", "N", "d"))
    _check_lin_tensor("b", b, (*x.shape[:3], "d_state"), ("x", x))
    _check_lin_tensor("c", c, b.shape, ("b", b))
    _check_ssd_mask(dt, A, x)
    if not (isinstance(chunk, int) and chunk >= 1):
        raise ValueError(f"chunk_size must be an int >= 1, got {chunk!r}")
# --8<-- [end:checks]
