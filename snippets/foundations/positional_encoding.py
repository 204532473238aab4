"""Positional encodings: the sinusoidal table and a learned table.

Paper: Vaswani, Shazeer, Parmar, Uszkoreit, Jones, Gomez, Kaiser and Polosukhin
(2017), "Attention Is All You Need", arXiv:1706.03762, section 3.5:

    PE(pos, 2i)     = sin(pos / 10000^(2i / D))
    PE(pos, 2i + 1) = cos(pos / 10000^(2i / D))

Learned position embeddings (one trained vector per position) are the
alternative the same section compares against, after Gehring, Auli, Grangier,
Yarats and Dauphin (2017), "Convolutional Sequence to Sequence Learning",
arXiv:1705.03122.
Page: docs/foundations/positional-encoding.md
Tested against: the formula above written out element by element, the
rotation that maps PE[pos] to PE[pos + k], and the permutation equivariance of
attention without positions (tests/test_positional_encoding.py).

The table is computed for the length it is asked for, never stored at a fixed
maximum length, so a longer input than any seen before still works. A learned
table asked for a position past its end raises a ValueError that names the
positions and the table size, not torch's IndexError.

Kernels (the equations): ``sinusoids``, ``offset_rotation`` and each module's
``forward``; faces (arguments, checks, dtypes): ``sinusoidal_positional_encoding``
and the modules' constructors.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = [
    "sinusoidal_positional_encoding",
    "offset_rotation",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEncoding",
]


# --8<-- [start:sinusoidal]
def sinusoids(pos: torch.Tensor, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """PE[pos, 2i] = sin(pos w_i), PE[pos, 2i+1] = cos(pos w_i), w_i = base^(-2i/D)."""
    two_i = torch.arange(0, d_model, 2, dtype=pos.dtype, device=pos.device)  # (D/2,)
    freq = base ** (-two_i / d_model)  # w_i, (D/2,)
    angle = pos.unsqueeze(-1) * freq  # (N, 1) * (D/2,) -> (N, D/2)
    pe = torch.stack([angle.sin(), angle.cos()], dim=-1)  # (N, D/2, 2)
    return pe.flatten(-2)  # (N, D/2, 2) -> (N, D): sin, cos interleaved
# --8<-- [end:sinusoidal]


# --8<-- [start:offset]
def offset_rotation(
    k: int, d_model: int, *, base: float = 10000.0, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """R_k (D, D) with PE[pos + k] = R_k @ PE[pos]: each pair turns by k w_i."""
    _check_table(1, d_model, 0, base, dtype)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (D/2,)
    theta = k * base ** (-two_i / d_model)  # k * w_i, (D/2,)
    cos, sin = theta.cos(), theta.sin()
    rows = (torch.stack([cos, sin], -1), torch.stack([-sin, cos], -1))  # (D/2, 2) each
    blocks = torch.stack(rows, -2)  # (D/2, 2, 2): [[cos, sin], [-sin, cos]]
    return torch.block_diag(*blocks).to(dtype)  # D/2 blocks of (2, 2) -> (D, D)
# --8<-- [end:offset]


# --8<-- [start:table]
def sinusoidal_positional_encoding(
    n_positions: int,
    d_model: int,
    *,
    start: int = 0,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The sinusoidal table for positions ``start .. start + N - 1``.

    Args:
        n_positions: N, how many positions (rows).
        d_model: D, the model width; even.
        start: the first position (use the cache length when decoding step by step).
        base: 10000 in the paper.
        dtype: dtype of the table; it is computed in float64 and then cast.
        device: where to build it.

    Returns:
        A ``(N, D)`` tensor, ``PE[pos, 2i] = sin(pos w_i)``,
        ``PE[pos, 2i + 1] = cos(pos w_i)``.
    """
    _check_table(n_positions, d_model, start, base, dtype)
    # float64: pos * w_i loses the low digits of large positions in float32
    # (MPS has no float64).
    mps = torch.device(device or "cpu").type == "mps"
    wide = torch.float32 if mps else torch.float64
    pos = torch.arange(start, start + n_positions, dtype=wide, device=device)  # (N,)
    return sinusoids(pos, d_model, base).to(dtype)  # (N, D)
# --8<-- [end:table]


# --8<-- [start:sinusoidal_module]
class SinusoidalPositionalEncoding(nn.Module):
    """x + PE[start : start + N], then dropout (the paper uses P_drop = 0.1).

    Args:
        d_model: D, even.
        dropout: dropout probability applied to the sum, in training only.
        base: 10000 in the paper.

    Shape:
        ``(B, N, D) -> (B, N, D)``.
    """

    def __init__(
        self, d_model: int, *, dropout: float = 0.0, base: float = 10000.0
    ) -> None:
        super().__init__()
        _check_table(1, d_model, 0, base, torch.float32, dropout)
        self.d_model, self.base, self.dropout = d_model, base, float(dropout)
# --8<-- [end:sinusoidal_module]

    # --8<-- [start:sinusoidal_forward]
    def forward(self, x: torch.Tensor, *, start: int = 0) -> torch.Tensor:
        """x + PE[start : start + N] for x (B, N, D), then dropout in training."""
        _check_x(x, self.d_model)  # start is checked by sinusoidal_positional_encoding
        pe = sinusoidal_positional_encoding(
            x.shape[1], self.d_model, start=start, base=self.base, dtype=x.dtype,
            device=x.device)  # (N, D)
        dropout_p = self.dropout if self.training else 0.0
        return nn.functional.dropout(x + pe, dropout_p)  # (B, N, D) + (N, D)
    # --8<-- [end:sinusoidal_forward]


# --8<-- [start:learned_module]
class LearnedPositionalEncoding(nn.Module):
    """x + E[start : start + N] with E a trained ``(max_len, D)`` table.

    Unlike the sinusoids, a learned table knows nothing past ``max_len``: a
    longer input is a ValueError that names the positions, not a silent
    wrap-around or torch's IndexError.

    Args:
        max_len: the number of positions the table holds.
        d_model: D.
        dropout: dropout probability applied to the sum, in training only.

    Shape:
        ``(B, N, D) -> (B, N, D)``.
    """

    def __init__(self, max_len: int, d_model: int, *, dropout: float = 0.0) -> None:
        super().__init__()
        _check_ranges(max_len=(max_len, 1, math.inf), d_model=(d_model, 1, math.inf),
                      dropout=(dropout, 0.0, 1.0))
        self.embedding = nn.Embedding(max_len, d_model)
        # Small, so that the words dominate at the start of training.
        nn.init.normal_(self.embedding.weight, std=0.02)
        self.max_len, self.d_model, self.dropout = max_len, d_model, float(dropout)

    def _check_forward(self, x: torch.Tensor, start: int) -> None:
        _check_x(x, self.d_model, self.embedding.weight.device)
        last = self.max_len - x.shape[1]  # the last start at which N positions fit
        if not (isinstance(start, int) and 0 <= start <= last):
            raise ValueError(f"positions start..start+N-1 must fit the table, got "
                             f"start={start!r}, N={x.shape[1]}, max_len={self.max_len}")
# --8<-- [end:learned_module]

    # --8<-- [start:learned_forward]
    def forward(self, x: torch.Tensor, *, start: int = 0) -> torch.Tensor:
        """x + E[start : start + N] for x (B, N, D), then dropout in training."""
        self._check_forward(x, start)
        positions = torch.arange(start, start + x.shape[1], device=x.device)  # (N,)
        dropout_p = self.dropout if self.training else 0.0
        # (B, N, D) + (N, D) -> (B, N, D)
        return nn.functional.dropout(x + self.embedding(positions), dropout_p)
    # --8<-- [end:learned_forward]


# --8<-- [start:validate]
def _check_ranges(**bounds: tuple) -> None:
    """Refuse each ``name=(value, low, high)`` unless low <= value < high, and an int
    where low is an int (a size, a position); a float low also admits an int."""
    for name, (value, low, high) in bounds.items():
        kind = type(low).__name__  # int for a size or a position, float for a rate
        if not isinstance(value, (type(low), int)) or not low <= value < high:
            raise ValueError(f"{name} must be {kind} in [{low}, {high}), got {value!r}")


def _check_table(n_positions, d_model, start, base, dtype, dropout=0.0) -> None:
    """Refuse sizes, a start, a base, a dtype or a dropout that give a wrong table."""
    _check_ranges(n_positions=(n_positions, 1, math.inf), start=(start, 0, math.inf),
                  d_model=(d_model, 2, math.inf), dropout=(dropout, 0.0, 1.0))
    odd, base_ok = d_model % 2, isinstance(base, (int, float)) and base > 1
    if odd or not base_ok or not getattr(dtype, "is_floating_point", False):
        raise ValueError(f"d_model must be even, base a number > 1 and dtype floating, "
                         f"got {d_model}, {base!r} and {dtype!r}")


def _check_x(x: torch.Tensor, d_model: int, device: torch.device | None = None) -> None:
    """Refuse x unless it is a floating (B, N, d_model) tensor (on ``device``)."""
    ok = torch.is_tensor(x) and x.is_floating_point() and x.dim() == 3
    if not (ok and x.shape[-1] == d_model and x.device == (device or x.device)):
        got = (tuple(x.shape), x.dtype, x.device) if torch.is_tensor(x) else type(x)
        raise ValueError(f"x must be a floating (B, N, {d_model}) tensor on "
                         f"{device or 'any device'}, got {got}")
# --8<-- [end:validate]
