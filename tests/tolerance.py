"""The suite's tolerance for low-precision results: the kernel's error against
a float64 reference, in units of a trusted implementation's error on the same
rounded inputs (FlashAttention's rule: at most twice PyTorch's).

    assert_within_baseline(ours, baseline, exact)          # factor 2
    assert_within_baseline(ours, baseline, exact, factor=3)

The ratio is ``error_ratio`` from snippets/efficiency/low_precision.py, the
function the tolerances page teaches. ``slack`` (in ulps of the output's dtype
at the reference's largest magnitude, 0 unless asked for) covers a baseline
that happens to be exact on a tiny input, where any rounding at all would be
an infinite ratio.
"""

from __future__ import annotations

import torch

from snippets.efficiency.low_precision import error_ratio


def assert_within_baseline(ours: torch.Tensor, baseline: torch.Tensor, exact: torch.Tensor,
                           *, factor: float = 2.0, slack: float = 0.0) -> float:
    """Fail unless max|ours - exact| <= factor * max|baseline - exact| + slack ulps."""
    exact = exact.double()
    ours_err = (ours.double() - exact).abs().max().item()
    base_err = (baseline.double() - exact).abs().max().item()
    ulp = torch.finfo(ours.dtype).eps * max(exact.abs().max().item(), torch.finfo(ours.dtype).tiny)
    ratio = error_ratio(ours, baseline, exact)
    assert ours_err <= factor * base_err + slack * ulp, (
        f"error {ours_err:.3g} is {ratio:.2f} times the baseline's error {base_err:.3g} "
        f"(allowed: {factor} times, plus {slack} ulp of {ours.dtype})")
    return ratio
