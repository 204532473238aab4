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
def _got(t: object) -> str:
    """What a message says it got: a tensor's dtype, shape and device, else t."""
    is_tensor = torch.is_tensor(t)
    return f"{t.dtype} {tuple(t.shape)} on {t.device}" if is_tensor else repr(t)


def _check_rotary_tables(positions: torch.Tensor, rotary_dim: int, base: float) -> None:
    """Refuse positions unless (N,) or (B, N), odd rotary_dim, base <= 1."""
    if not torch.is_tensor(positions) or positions.dim() not in (1, 2) or base is None \
            or not 1 < base < math.inf or rotary_dim < 2 or rotary_dim % 2:
        raise ValueError(f"positions must be (N,) or (B, N), rotary_dim even >= 2 and "
                         f"base > 1, got {_got(positions)}, {rotary_dim=}, {base=}")


def _check_apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    """Refuse x unless floating (B, H, N, d), cos and sin unless one table fitting x."""
    if not torch.is_tensor(x) or not x.is_floating_point() or x.dim() != 4:
        raise TypeError(f"x must be a floating tensor (B, H, N, d), got {_got(x)}")
    b, _, n, d = x.shape
    for name, t in (("cos", cos), ("sin", sin)):  # cos first: sin must match it
        if not torch.is_tensor(t) or t.shape != cos.shape or t.device != x.device \
                or t.shape[:-1] not in ((n,), (b, n)) or 2 * t.shape[-1] > d:
            raise ValueError(f"{name} must be (N, r/2) or (B, N, r/2) like cos on "
                             f"{x.device}, N={n}, B={b}, r <= d={d}, got {_got(t)}")
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
            if not torch.is_tensor(t) or not t.is_floating_point() or t.dim() != 4 \
                    or t.shape[-1] != self.d_head or t.device != k.device:
                raise ValueError(f"{name} must be a floating tensor (B, heads, length, "
                                 f"{self.d_head}) on k's device, got {_got(t)}")
        if q.shape[-2] > k.shape[-2] or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"q may not be longer than k, offset must be an int >= 0, "
                             f"got N={q.shape[-2]}, M={k.shape[-2]}, offset={offset!r}")
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
