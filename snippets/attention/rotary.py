"""Rotary position embedding (RoPE): turn q and k by an angle that grows with position.

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

``rotary_tables(positions, r)`` gives the cos and sin of every position's
angles; ``apply_rotary(x, cos, sin)`` rotates the first r dimensions of each
head of x, whose N tokens must match the N rows of the tables (a table that
does not fit x is refused by name, never broadcast or indexed out of range).

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["rotary_tables", "apply_rotary", "RotaryEmbedding"]


# --8<-- [start:check_rotary]
def _check_rotary_tables(positions: torch.Tensor, rotary_dim: int, base: float) -> None:
    """Refuse what would silently give wrong angles."""
    if not isinstance(positions, torch.Tensor) or positions.is_floating_point() \
            or positions.dtype == torch.bool or positions.dim() not in (1, 2):
        got = f"{positions.dtype} {tuple(positions.shape)}" if isinstance(
            positions, torch.Tensor) else type(positions).__name__
        raise TypeError(f"positions must be an integer tensor (N,) or (B, N), "
                        f"got {got}")
    if not isinstance(rotary_dim, int) or rotary_dim < 2 or rotary_dim % 2:
        raise ValueError(f"rotary_dim must be an even int >= 2, got {rotary_dim!r}")
    if not (isinstance(base, (int, float)) and math.isfinite(base) and base > 1):
        raise ValueError(f"base must be a finite number > 1, got {base!r}")


def _check_apply_rotary(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> None:
    """Refuse tables that do not fit x: a silent broadcast rotates the wrong rows."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() != 4:
        got = f"{x.dtype} {tuple(x.shape)}" if isinstance(x, torch.Tensor) \
            else type(x).__name__
        raise TypeError(f"x must be a floating tensor (B, H, N, d), got {got}")
    for name, t in (("cos", cos), ("sin", sin)):
        if not isinstance(t, torch.Tensor) or t.dim() not in (2, 3):
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must be (N, r/2) or (B, N, r/2), got {got}")
        if t.device != x.device:
            raise ValueError(f"{name} must be on x's device {x.device}, got {t.device}")
    if cos.shape != sin.shape:
        raise ValueError(f"cos and sin must have one shape, got {tuple(cos.shape)} and "
                         f"{tuple(sin.shape)}")
    n, d, half = x.shape[-2], x.shape[-1], cos.shape[-1]
    batch_ok = cos.dim() == 2 or cos.shape[0] == x.shape[0]
    if cos.shape[-2] != n or 2 * half > d or not batch_ok:
        raise ValueError(f"cos must be (N, r/2) or (B, N, r/2) with N = {n}, "
                         f"r <= d = {d} and B = {x.shape[0]}, got {tuple(cos.shape)}")
# --8<-- [end:check_rotary]


# --8<-- [start:rotary_tables]
def rotary_tables(
    positions: torch.Tensor, rotary_dim: int, base: float = 10000.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of t * base^(-2i / r) for every position t, each (..., N, r/2)."""
    _check_rotary_tables(positions, rotary_dim, base)
    # float64 angles: t * theta loses digits in float32 at large t (no float64 on MPS)
    wide = torch.float32 if positions.device.type == "mps" else torch.float64
    i = torch.arange(0, rotary_dim, 2, dtype=wide, device=positions.device)  # (r/2,)
    inv_freq = base ** (-i / rotary_dim)  # theta_i, (r/2,)
    # (..., N, 1) * (r/2,) -> (..., N, r/2)
    angles = positions.to(wide).unsqueeze(-1) * inv_freq
    return angles.cos(), angles.sin()
# --8<-- [end:rotary_tables]


# --8<-- [start:apply_rotary]
def apply_rotary(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, interleaved: bool = False
) -> torch.Tensor:
    """Rotate the first r = 2 cos.shape[-1] dims of each head; the rest pass."""
    _check_apply_rotary(x, cos, sin)
    if cos.dim() == 3:  # (B, N, r/2) -> (B, 1, N, r/2): one table per sequence
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    acc = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    r = 2 * cos.shape[-1]
    rot, c, s = x[..., :r].to(acc), cos.to(acc), sin.to(acc)
    if interleaved:  # pairs (2i, 2i + 1): the paper and Meta's own code
        x1, x2 = rot[..., 0::2], rot[..., 1::2]  # (B, H, N, r/2) each
    else:  # pairs (i, i + r/2): GPT-NeoX and the Hugging Face port of Llama
        x1, x2 = rot[..., : r // 2], rot[..., r // 2 :]  # (B, H, N, r/2) each
    r1, r2 = x1 * c - x2 * s, x1 * s + x2 * c  # (B, H, N, r/2) each
    if interleaved:  # back to (2i, 2i + 1) order
        out = torch.stack((r1, r2), dim=-1).flatten(-2)
    else:
        out = torch.cat((r1, r2), dim=-1)
    return torch.cat((out.to(x.dtype), x[..., r:]), dim=-1)  # (B, H, N, d)
# --8<-- [end:apply_rotary]


# --8<-- [start:module]
class RotaryEmbedding(nn.Module):
    """Applies RoPE to q and k, the queries taking the last N of the M key positions.

    Args:
        d_head: d, the head width (even); every dimension is rotated.
        base: the 10000 of ``theta_i = base^(-2i/d)``.
        interleaved: the pairing of dimensions (see ``apply_rotary``).

    Shape:
        q ``(B, H, N, d)`` and k ``(B, H_kv, M, d)`` with N <= M -> the same.
    """

    def __init__(
        self, d_head: int, *, base: float = 10000.0, interleaved: bool = False
    ) -> None:
        super().__init__()
        _check_rotary_tables(torch.zeros(0, dtype=torch.long), d_head, base)
        self.d_head, self.base, self.interleaved = d_head, base, interleaved

    def _check_forward(self, q: torch.Tensor, k: torch.Tensor, offset: int) -> None:
        """Refuse q and k that are not (B, heads, length, d_head) floats on one device,
        q longer than k, or an offset that is not an int >= 0."""
        for name, t in (("k", k), ("q", q)):  # k first: q must be on k's device
            is_tensor = isinstance(t, torch.Tensor)
            ok = is_tensor and t.is_floating_point() and t.dim() == 4
            if not ok or t.shape[-1] != self.d_head or t.device != k.device:
                got = f"{t.dtype} {tuple(t.shape)} on {t.device}" if is_tensor else t
                want = f"a floating tensor (B, heads, length, {self.d_head})"
                error = ValueError if ok else TypeError
                raise error(f"{name} must be {want} on k's device, got {got}")
        if q.shape[-2] > k.shape[-2]:
            raise ValueError(f"q may not be longer than k, got N={q.shape[-2]} and "
                             f"M={k.shape[-2]}")
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be an int >= 0, got {offset!r}")
    # --8<-- [end:module]

    # --8<-- [start:forward]
    def forward(
        self, q: torch.Tensor, k: torch.Tensor, *, offset: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate k at offset .. offset + M - 1 and q at the last N of them."""
        self._check_forward(q, k, offset)
        n, m = q.shape[-2], k.shape[-2]
        k_pos = torch.arange(offset, offset + m, device=k.device)  # (M,)
        cos, sin = rotary_tables(k_pos, self.d_head, self.base)  # (M, d/2) each
        # lower-right alignment: query i sits at key position i + (M - N)
        q = apply_rotary(q, cos[m - n :], sin[m - n :], interleaved=self.interleaved)
        k = apply_rotary(k, cos, sin, interleaved=self.interleaved)
        return q, k  # (B, H, N, d), (B, H_kv, M, d)
    # --8<-- [end:forward]
