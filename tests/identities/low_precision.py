"""Identities proven for the tolerances and low-precision page."""

from __future__ import annotations

import torch

from identities import identity
from snippets.efficiency import low_precision as LP

PAGE = "efficiency/tolerances.md"


@identity("rotation-keeps-scores",
          "a Hadamard rotation with random signs applied to q and k leaves q k^T unchanged "
          "(d = 64, float64)", page=PAGE, tol=1e-12)
def rotation_keeps_scores():
    g = torch.Generator(device=torch.get_default_device()).manual_seed(0)
    q, k = (torch.randn(1, 2, 16, 64, generator=g, dtype=torch.float64) for _ in range(2))
    signs = torch.randint(0, 2, (64,), generator=g) * 2 - 1
    r = LP.hadamard(64, signs=signs, dtype=torch.float64)
    scale = (q @ k.transpose(-2, -1)).abs().max()  # compare relative to the scores' size
    return (q @ r) @ (k @ r).transpose(-2, -1) / scale, q @ k.transpose(-2, -1) / scale


@identity("fp8-exact-on-its-grid",
          "numbers of E4M3 times a power of two, largest 448 * 2^m, pass through fp8_quantize "
          "unchanged, per tensor and per block", page=PAGE, tol=0.0)
def fp8_exact_on_its_grid():
    g = torch.Generator(device=torch.get_default_device()).manual_seed(1)
    grid = (torch.randn(64, 16, generator=g) * 100).to(torch.float8_e4m3fn).float()
    grid[::8, 0] = 448.0  # every block of 8 tokens holds the largest number once
    x = grid * 2.0**-5
    return torch.cat([LP.fp8_quantize(x), LP.fp8_quantize(x, block=8)]), torch.cat([x, x])
