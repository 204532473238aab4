"""KV-cache quantization: KIVI's per-channel keys and per-token values, and FP8.

KIVI (Liu, Yuan, Jin, Zhong, Xu, Braverman, Chen and Hu, 2024,
arXiv:2402.02750) stores the cache in 2 bits with asymmetric min-max
quantization, grouped differently for the two halves: keys per *channel*
(statistics over a group of R tokens, because a few key channels carry large
outliers), values per *token* (statistics over a group of G channels). The
newest tokens stay in full precision, differently for the two: keys keep the
T mod R tokens that do not yet fill a group, values the newest R tokens.

FP8: a cast to ``torch.float8_e4m3fn`` after dividing by a per-tensor scale.
The cast saturates: overflow and +-inf become +-448, NaN stays NaN.

Page: docs/efficiency/kv-economy.md
Tested against: the full-precision cache and the quantizer's own error bound
(tests/test_kv_economy.py).

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import torch

__all__ = ["fake_quantize", "kivi_keys", "kivi_values", "fp8_roundtrip"]


# --8<-- [start:quantize]
def fake_quantize(x: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """Asymmetric min-max quantization to 2^bits levels, statistics along ``dim``."""
    _check_quantize(x, bits)
    lo = x.amin(dim=dim, keepdim=True)
    hi = x.amax(dim=dim, keepdim=True)
    scale = (hi - lo).clamp_min(torch.finfo(x.dtype).tiny) / (2**bits - 1)
    q = ((x - lo) / scale).round().clamp(0, 2**bits - 1)  # integers in [0, 2^b - 1]
    return q * scale + lo  # what the cache gives back
# --8<-- [end:quantize]


# --8<-- [start:kivi_keys]
def kivi_keys(k: torch.Tensor, bits: int = 2, group: int = 32) -> torch.Tensor:
    """Keys per channel over groups of R tokens; the last T mod R stay exact."""
    _check_kivi(k, group, "k", bits)
    t, d = k.shape[-2], k.shape[-1]
    full = t - t % group  # tokens that fill whole groups
    # (..., full, d) -> (..., full / R, R, d): min and max over each group's tokens
    grouped = k[..., :full, :].reshape(*k.shape[:-2], full // group, group, d)
    quantized = fake_quantize(grouped, bits, dim=-2).reshape(*k.shape[:-2], full, d)
    return torch.cat([quantized, k[..., full:, :]], dim=-2)
# --8<-- [end:kivi_keys]


# --8<-- [start:kivi_values]
def kivi_values(v: torch.Tensor, bits: int = 2, group: int = 32,
                residual: int = 32) -> torch.Tensor:
    """Values per token over groups of G channels; the newest R stay exact."""
    _check_kivi(v, group, "v", bits)
    t, d = v.shape[-2], v.shape[-1]
    old = max(t - residual, 0)
    # (..., old, d) -> (..., old, d / G, G): min and max over each channel group
    grouped = v[..., :old, :].reshape(*v.shape[:-2], old, d // group, group)
    quantized = fake_quantize(grouped, bits, dim=-1).reshape(*v.shape[:-2], old, d)
    return torch.cat([quantized, v[..., old:, :]], dim=-2)
# --8<-- [end:kivi_values]


# --8<-- [start:fp8]
def fp8_roundtrip(x: torch.Tensor) -> torch.Tensor:
    """x scaled so its largest entry maps to 448, cast to float8_e4m3fn and back."""
    _check_quantize(x, 8)
    amax = x.abs().amax().clamp_min(torch.finfo(torch.float32).tiny)
    scale = 448.0 / amax.float()  # float8_e4m3fn's largest finite value is 448
    return ((x.float() * scale).to(torch.float8_e4m3fn).float() / scale).to(x.dtype)
# --8<-- [end:fp8]


# --8<-- [start:validate]
def _describe(t: object) -> str:
    if isinstance(t, torch.Tensor):
        return f"{t.dtype} {tuple(t.shape)} on {t.device}"
    return type(t).__name__


def _check_given(ok: object, name: str, want: str, got: object, error=ValueError):
    """Raise error("<name> must <want>, got <got>") unless ok."""
    if not ok:
        raise error(f"{name} must {want}, got {got}")


def _check_quantize(x: torch.Tensor, bits: int, name: str = "x", rank=0) -> None:
    ok = isinstance(x, torch.Tensor) and x.is_floating_point() and x.dim() >= rank
    _check_given(ok, name, f"be floating, {rank}+ dims", _describe(x), TypeError)
    ok = isinstance(bits, int) and 1 <= bits <= 16
    _check_given(ok, "bits", "be an int in [1, 16]", repr(bits))


def _check_kivi(x: torch.Tensor, group: int, name: str, bits: int) -> None:
    _check_quantize(x, bits, name, rank=2)  # (..., T, d)
    ok = isinstance(group, int) and group >= 1
    ok = ok and (name == "k" or x.shape[-1] % group == 0)  # v groups split d
    _check_given(ok, "group", f"be an int >= 1 dividing d = {x.shape[-1]}", group)
# --8<-- [end:validate]
