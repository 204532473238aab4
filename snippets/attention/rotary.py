"""Rotary position embedding (RoPE): rotate q and k by an angle that grows with position.

Paper: Su, Lu, Pan, Murtadha, Wen and Liu (2021), "RoFormer: Enhanced
Transformer with Rotary Position Embedding", arXiv:2104.09864, equations
(14)-(16) and (34) (the rotation of dimension pairs with theta_i = 10000^(-2i/d)).
Page: docs/attention/rotary.md
Tested against: the rotation matrix of the paper written out in
tests/test_rotary.py, plus the properties that make RoPE useful (scores depend
only on the offset between positions; norms are preserved).

Two ways to pair the d dimensions of a head into d/2 planes are in use:

* ``interleaved=True``: planes (0, 1), (2, 3), ... as in the paper, GPT-J
  (``rotate_every_two``) and Meta's reference Llama code (pairs viewed as
  complex numbers);
* ``interleaved=False``: planes (i, i + d/2), the "rotate half" layout of
  GPT-NeoX and of the Hugging Face port of Llama.

They are the same rotation applied to a permuted head: a checkpoint trained
with one needs its q/k projection rows permuted to run with the other, which
is what Hugging Face's Llama conversion script does to Meta's weights.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["rotary_cache", "apply_rotary", "RotaryEmbedding"]


# --8<-- [start:cache]
def rotary_cache(
    n_positions: int,
    d_head: int,
    *,
    base: float = 10000.0,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the angle ``t * theta_i`` for every position t and plane i.

    Args:
        n_positions: how many positions (0 .. n_positions - 1) to tabulate.
        d_head: d, the head width; must be even (dimensions rotate in pairs).
        base: the 10000 of ``theta_i = base^(-2i/d)``.
        device: where to build the tables.
        dtype: their dtype (float32 by default; float64 for gradcheck).

    Returns:
        ``(cos, sin)``, each ``(n_positions, d / 2)``.
    """
    if isinstance(n_positions, bool) or not isinstance(n_positions, int) or n_positions < 0:
        raise ValueError(f"n_positions must be a non-negative int, got {n_positions!r}")
    if isinstance(d_head, bool) or not isinstance(d_head, int) or d_head < 2 or d_head % 2:
        raise ValueError(f"d_head must be an even int >= 2, got {d_head!r}")
    _check_base(base)
    _check_float_dtype(dtype)
    # theta_i = base^(-2i/d): plane 0 turns by 1 radian per position, the last
    # plane barely turns, so the planes cover many wavelengths.
    theta = base ** (-torch.arange(0, d_head, 2, device=device, dtype=dtype) / d_head)  # (d/2,)
    t = torch.arange(n_positions, device=device, dtype=dtype)  # (n_positions,)
    angles = torch.outer(t, theta)  # (n_positions,) x (d/2,) -> (n_positions, d/2)
    return angles.cos(), angles.sin()
# --8<-- [end:cache]


# --8<-- [start:validate]
def _check_base(base: object) -> None:
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not base > 1:
        raise ValueError(f"base must be a number > 1, got {base!r}")


def _check_float_dtype(dtype: object) -> None:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")


def _check_rotary_inputs(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor | None
) -> None:
    """Raise a clear error unless x (..., N, d), the (P, d/2) tables and positions fit."""
    for name, t in (("x", x), ("cos", cos), ("sin", sin)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must have a floating dtype, got {t.dtype}")
        if t.device != x.device:
            raise ValueError(f"{name} must be on x's device {x.device}, got {t.device}")
    if x.dim() < 2:
        raise ValueError(f"x must have at least 2 dimensions (..., N, d), got shape {tuple(x.shape)}")
    n, d = x.shape[-2], x.shape[-1]
    if cos.shape != sin.shape or cos.dim() != 2 or 2 * cos.shape[-1] != d:
        raise ValueError(
            f"cos and sin must both be (P, d/2) = (P, {d // 2}) for a head of width "
            f"d={d}, got {tuple(cos.shape)} and {tuple(sin.shape)}"
        )
    if positions is None:
        return
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"positions must be a torch.Tensor or None, got {type(positions).__name__}")
    if positions.dtype.is_floating_point or positions.dtype.is_complex or positions.dtype == torch.bool:
        raise TypeError(f"positions must hold integers, got {positions.dtype}")
    if positions.device != x.device:
        raise ValueError(f"positions must be on x's device {x.device}, got {positions.device}")
    if positions.dim() not in (1, 2) or positions.shape[-1] != n:
        raise ValueError(
            f"positions must be (N,) or (B, N) with N={n}, got {tuple(positions.shape)}"
        )
    if positions.dim() == 2 and (x.dim() < 4 or positions.shape[0] not in (1, x.shape[-4])):
        raise ValueError(
            "positions of shape (B, N) need x of shape (B, H, N, d) with the same B, got "
            f"positions {tuple(positions.shape)} and x {tuple(x.shape)}"
        )
    if positions.numel() and int(positions.min()) < 0:
        raise ValueError(f"positions must be >= 0, got a minimum of {int(positions.min())}")
    if positions.numel() and int(positions.max()) >= cos.shape[0]:
        raise ValueError(
            f"positions must be < {cos.shape[0]}, the length of the cos/sin cache (build it "
            f"with n_positions > {int(positions.max())}), got a maximum of {int(positions.max())}"
        )


def _check_qk(q: torch.Tensor, k: torch.Tensor, d_head: int) -> None:
    """Raise a clear error unless q (..., N, d) and k (..., M, d) are one dtype and device."""
    for name, t in (("q", q), ("k", k)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must have a floating dtype, got {t.dtype}")
        if t.dim() < 2 or t.shape[-1] != d_head:
            raise ValueError(
                f"{name} must have shape (..., length, d_head) with d_head={d_head}, "
                f"got shape {tuple(t.shape)}"
            )
    if q.dtype != k.dtype:
        raise TypeError(f"q and k must share one dtype, got {q.dtype} and {k.dtype}")
    if q.device != k.device:
        raise ValueError(f"q and k must be on one device, got {q.device} and {k.device}")
# --8<-- [end:validate]


# --8<-- [start:apply]
def apply_rotary(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    positions: torch.Tensor | None = None,
    interleaved: bool = False,
) -> torch.Tensor:
    """Rotate each pair of dimensions of x by its position's angle.

    For a plane with coordinates (x1, x2) and angle a:
    ``(x1, x2) -> (x1 cos a - x2 sin a, x1 sin a + x2 cos a)``.

    Args:
        x: queries or keys, ``(B, H, N, d)``.
        cos: from ``rotary_cache``, ``(P, d / 2)`` with P > every position.
        sin: from ``rotary_cache``, ``(P, d / 2)``.
        positions: the position of each of the N tokens, ``(N,)`` or ``(B, N)``
            integers; ``None`` means ``0 .. N - 1``. With a KV cache, pass the
            absolute positions of the new tokens.
        interleaved: pair dimensions (2i, 2i + 1) as in the paper and Meta's
            Llama code; otherwise (i, i + d/2) as in GPT-NeoX and the Hugging
            Face port of Llama.

    Returns:
        A tensor like x.
    """
    _check_rotary_inputs(x, cos, sin, positions)
    n, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(n, device=x.device)  # (N,)

    dtype = x.dtype
    # Rotate in float32 for half-precision inputs; cast back at the end.
    acc = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    c = cos.to(acc)[positions]  # (N, d/2) or (B, N, d/2)
    s = sin.to(acc)[positions]  # (N, d/2) or (B, N, d/2)
    if positions.dim() == 2:
        c, s = c.unsqueeze(-3), s.unsqueeze(-3)  # (B, N, d/2) -> (B, 1, N, d/2), shared by heads
    x = x.to(acc)
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]  # (B, H, N, d/2) each
    else:
        x1, x2 = x[..., : d // 2], x[..., d // 2 :]  # (B, H, N, d/2) each
    r1 = x1 * c - x2 * s  # (B, H, N, d/2)
    r2 = x1 * s + x2 * c  # (B, H, N, d/2)
    if interleaved:
        out = torch.stack((r1, r2), dim=-1).flatten(-2)  # (B, H, N, d/2, 2) -> (B, H, N, d)
    else:
        out = torch.cat((r1, r2), dim=-1)  # (B, H, N, d)
    return out.to(dtype)
# --8<-- [end:apply]


# --8<-- [start:module]
class RotaryEmbedding(nn.Module):
    """Applies RoPE to q and k, growing its cos/sin cache when a longer input comes.

    Args:
        d_head: d, the head width (even).
        base: the 10000 of ``theta_i = base^(-2i/d)``.
        interleaved: the pairing of dimensions (see ``apply_rotary``).
    """

    def __init__(self, d_head: int, *, base: float = 10000.0, interleaved: bool = False) -> None:
        super().__init__()
        rotary_cache(0, d_head, base=base)  # validates d_head and base
        self.d_head = d_head
        self.base = base
        self.interleaved = interleaved
        # Not a fixed-length buffer: the cache grows on demand, so no input is too long.
        self._cos: torch.Tensor | None = None
        self._sin: torch.Tensor | None = None

    def _tables(self, n_positions: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if self._cos is None or self._cos.shape[0] < n_positions or self._cos.device != device:
            size = max(n_positions, 2 * (0 if self._cos is None else self._cos.shape[0]))
            self._cos, self._sin = rotary_cache(size, self.d_head, base=self.base, device=device)
        return self._cos, self._sin

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, *, offset: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate q ``(B, H, N, d)`` and k ``(B, H_kv, M, d)``.

        The queries take the last N of the positions ``offset .. offset + M - 1``
        (lower-right alignment, as for a KV cache whose keys are all passed in);
        ``offset`` shifts everything, e.g. for a sequence that starts mid-stream.
        """
        _check_qk(q, k, self.d_head)
        n, m = q.shape[-2], k.shape[-2]
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be a non-negative int, got {offset!r}")
        if n > m:
            raise ValueError(f"q may not be longer than k, got N={n} and M={m}")
        cos, sin = self._tables(offset + m, q.device)
        k_pos = torch.arange(offset, offset + m, device=q.device)  # (M,)
        q_pos = k_pos[m - n :]  # (N,), the last N positions
        q = apply_rotary(q, cos, sin, positions=q_pos, interleaved=self.interleaved)
        k = apply_rotary(k, cos, sin, positions=k_pos, interleaved=self.interleaved)
        return q, k
# --8<-- [end:module]
