"""State-space duality (Mamba-2's SSD): one layer as a recurrence, as masked attention, and in chunks.

Paper: Dao and Gu (2024), "Transformers are SSMs: Generalized Models and
Efficient Algorithms Through Structured State Space Duality", arXiv:2405.21060
(the scalar-times-identity state matrix, the 1-semiseparable mask
L[t, s] = a_{s+1} ... a_t, and the four-step chunked algorithm).
Page: docs/linear/state-space-duality.md
Tested against: the three forms against each other in float64 (to 1e-12), the
mask against its product definition, and the masked form against gated linear
attention with one decay per head (snippets/linear/gated_linear_attention.py) in
tests/test_ssd.py.

Letters: the paper's B_t and C_t (input and output projections of the state)
are ``b`` and ``c`` here, because B and N are batch and length in this guide;
the state width (the paper's N) is ``d_state`` and the head width (its P) is d.

Per head, with a_t = exp(dt_t * A) in (0, 1):
    h_t = a_t h_{t-1} + dt_t b_t x_t^T        h_t: (d_state, d)
    y_t = h_t^T c_t

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["ssd_recurrent", "ssd_mask", "ssd_attention", "ssd_chunked"]


# --8<-- [start:validate]
def _check_ssd(x: torch.Tensor, dt: torch.Tensor, a_log: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
    """Raise a clear error unless the inputs of an SSD layer fit together."""
    for name, t in (("x", x), ("dt", dt), ("A", a_log), ("b", b), ("c", c)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must have a floating dtype, got {t.dtype}")
    if x.dim() != 4:
        raise ValueError(f"x must have shape (B, H, N, d), got {tuple(x.shape)}")
    bsz, h, n, _ = x.shape
    if dt.shape != (bsz, h, n):
        raise ValueError(f"dt must have shape (B, H, N) = {(bsz, h, n)}, got {tuple(dt.shape)}")
    if a_log.shape != (h,):
        raise ValueError(f"A must have shape (H,) = ({h},), got {tuple(a_log.shape)}")
    if b.dim() != 4 or b.shape[:3] != (bsz, h, n) or c.shape != b.shape:
        raise ValueError(
            f"b and c must both have shape (B, H, N, d_state) with (B, H, N) = {(bsz, h, n)}, "
            f"got b {tuple(b.shape)} and c {tuple(c.shape)}"
        )
    named = (("x", x), ("dt", dt), ("A", a_log), ("b", b), ("c", c))
    if len({t.dtype for _, t in named}) != 1:
        raise TypeError(f"x, dt, A, b and c must share one dtype, got {[str(t.dtype) for _, t in named]}")
    if len({t.device for _, t in named}) != 1:
        raise ValueError(f"x, dt, A, b and c must be on one device, got {[str(t.device) for _, t in named]}")
    if (dt < 0).any():
        raise ValueError(f"dt must be >= 0 (a step size), got a minimum of {dt.min().item():.3g}")
    if (a_log > 0).any():
        raise ValueError(f"A must be <= 0 so that a_t = exp(dt_t A) <= 1, got a maximum of {a_log.max().item():.3g}")


def _check_ssd_mask(dt: torch.Tensor, a_log: torch.Tensor) -> None:
    """Raise a clear error unless dt is (B, H, N) and A is (H,), floating, alike and together."""
    for name, t in (("dt", dt), ("A", a_log)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must have a floating dtype, got {t.dtype}")
    if dt.dim() != 3:
        raise ValueError(f"dt must have shape (B, H, N), got {tuple(dt.shape)}")
    if a_log.shape != dt.shape[1:2]:
        raise ValueError(f"A must have shape (H,) = ({dt.shape[1]},) with H from dt, got {tuple(a_log.shape)}")
    if dt.dtype != a_log.dtype:
        raise TypeError(f"dt and A must share one dtype, got {dt.dtype} and {a_log.dtype}")
    if dt.device != a_log.device:
        raise ValueError(f"dt and A must be on one device, got {dt.device} and {a_log.device}")


def _check_chunk_size(chunk_size: int) -> None:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")


def _accumulator(dtype: torch.dtype) -> torch.dtype:
    """float32 for half-precision inputs: a long product of decays underflows float16."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
# --8<-- [end:validate]


# --8<-- [start:recurrent]
def ssd_recurrent(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """h_t = exp(dt_t A) h_{t-1} + dt_t b_t x_t^T,  y_t = h_t^T c_t, token by token.

    Shape:
        x: ``(B, H, N, d)``; dt: ``(B, H, N)``; A: ``(H,)``; b, c: ``(B, H, N, d_state)``
        -> ``(B, H, N, d)``.
    """
    _check_ssd(x, dt, A, b, c)
    dtype, acc = x.dtype, _accumulator(x.dtype)
    x, dt, A, b, c = (t.to(acc) for t in (x, dt, A, b, c))
    h = x.new_zeros((*b.shape[:2], b.shape[-1], x.shape[-1]))  # (B, H, d_state, d)
    ys = []
    for t in range(x.shape[2]):
        a_t = (dt[..., t] * A).exp()[..., None, None]  # (B, H, 1, 1): one decay per head
        h = a_t * h + (dt[..., t, None] * b[..., t, :]).unsqueeze(-1) * x[..., t, :].unsqueeze(-2)  # (B, H, d_state, d)
        ys.append((c[..., t, :].unsqueeze(-2) @ h).squeeze(-2))  # (B, H, 1, d_state) @ (B, H, d_state, d) -> (B, H, d)
    return torch.stack(ys, dim=2).to(dtype)  # (B, H, N, d)
# --8<-- [end:recurrent]


# --8<-- [start:mask]
def ssd_mask(dt: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
    """The 1-semiseparable mask L[t, s] = a_{s+1} a_{s+2} ... a_t for s <= t, else 0.

    With cumulative log-decays cum_t = sum_{r <= t} dt_r A, L[t, s] =
    exp(cum_t - cum_s): 1 on the diagonal, decaying away from it.

    Shape:
        dt: ``(B, H, N)``; A: ``(H,)`` -> ``(B, H, N, N)``.
    """
    _check_ssd_mask(dt, A)
    n = dt.shape[-1]
    cum = (dt * A.unsqueeze(-1)).cumsum(dim=-1)  # (B, H, N)
    causal = torch.ones(n, n, dtype=torch.bool, device=dt.device).tril()
    return torch.where(causal, cum.unsqueeze(-1) - cum.unsqueeze(-2), float("-inf")).exp()  # (B, H, N, N)
# --8<-- [end:mask]


# --8<-- [start:attention]
def ssd_attention(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Y = (L * C B^T) (dt * X): attention with c as queries, b as keys, no softmax, mask L.

    Shape:
        x: ``(B, H, N, d)``; dt: ``(B, H, N)``; A: ``(H,)``; b, c: ``(B, H, N, d_state)``
        -> ``(B, H, N, d)``.
    """
    _check_ssd(x, dt, A, b, c)
    dtype, acc = x.dtype, _accumulator(x.dtype)
    x, dt, A, b, c = (t.to(acc) for t in (x, dt, A, b, c))
    scores = c @ b.transpose(-2, -1)  # (B, H, N, d_state) @ (B, H, d_state, N) -> (B, H, N, N)
    return ((ssd_mask(dt, A) * scores) @ (dt.unsqueeze(-1) * x)).to(dtype)  # (B, H, N, N) @ (B, H, N, d) -> (B, H, N, d)
# --8<-- [end:attention]


# --8<-- [start:chunked]
def ssd_chunked(
    x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, b: torch.Tensor, c: torch.Tensor, *, chunk_size: int = 64
) -> torch.Tensor:
    """The paper's four steps: diagonal blocks, chunk states, state passing, state to output.

    The length is padded to a multiple of ``chunk_size`` with dt = 0: a padded
    step neither decays the state (a = 1) nor writes to it (dt x = 0).

    Shape:
        x: ``(B, H, N, d)``; dt: ``(B, H, N)``; A: ``(H,)``; b, c: ``(B, H, N, d_state)``
        -> ``(B, H, N, d)``.
    """
    _check_ssd(x, dt, A, b, c)
    _check_chunk_size(chunk_size)
    dtype, acc = x.dtype, _accumulator(x.dtype)
    x, dt, A, b, c = (t.to(acc) for t in (x, dt, A, b, c))
    bsz, h, n, _ = x.shape
    pad = -n % chunk_size
    x, b, c = (F.pad(t, (0, 0, 0, pad)) for t in (x, b, c))
    dt = F.pad(dt, (0, pad))
    nc = (n + pad) // chunk_size
    x, b, c = (t.reshape(bsz, h, nc, chunk_size, t.shape[-1]) for t in (x, b, c))  # (B, H, n_c, C, .)
    dt = dt.reshape(bsz, h, nc, chunk_size)
    xdt = dt.unsqueeze(-1) * x  # (B, H, n_c, C, d)
    cum = (dt * A[:, None, None]).cumsum(dim=-1)  # (B, H, n_c, C): log-decay since the chunk's start

    # 1. Inside each chunk: the masked (attention) form on a C x C block.
    causal = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=x.device).tril()
    l_chunk = torch.where(causal, cum.unsqueeze(-1) - cum.unsqueeze(-2), float("-inf")).exp()  # (B, H, n_c, C, C)
    y = (l_chunk * (c @ b.transpose(-2, -1))) @ xdt  # (B, H, n_c, C, C) @ (B, H, n_c, C, d) -> (B, H, n_c, C, d)

    # 2. The state each chunk leaves behind, from its own tokens only.
    to_end = (cum[..., -1:] - cum).exp()  # (B, H, n_c, C)
    states = (b * to_end.unsqueeze(-1)).transpose(-2, -1) @ xdt  # (B, H, n_c, d_state, d)

    # 3. Pass states across chunk boundaries: a recurrence over n_c steps, not N.
    chunk_decay = cum[..., -1].exp()  # (B, H, n_c): a over a whole chunk
    entering = [torch.zeros_like(states[:, :, 0])]  # (B, H, d_state, d) before the first chunk
    for j in range(nc - 1):
        entering.append(chunk_decay[:, :, j, None, None] * entering[-1] + states[:, :, j])
    entering = torch.stack(entering, dim=2)  # (B, H, n_c, d_state, d)

    # 4. What each token reads from the state that entered its chunk.
    y = y + (c * cum.exp().unsqueeze(-1)) @ entering  # (B, H, n_c, C, d_state) @ (B, H, n_c, d_state, d)
    return y.reshape(bsz, h, nc * chunk_size, -1)[:, :, :n].to(dtype)  # (B, H, N, d)
# --8<-- [end:chunked]
