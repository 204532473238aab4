"""RoPE for long context: the base, partial rotary, the scalings, and NoPE.

Papers:
* Chen, Wong, Chen and Tian (2023), "Extending Context Window of Large Language
  Models via Positional Interpolation", arXiv:2306.15595 (linear scaling:
  positions divided by the scale factor s).
* Peng, Quesnelle, Fan and Shippole (2023), "YaRN: Efficient Context Window
  Extension of Large Language Models", arXiv:2309.00071: the "NTK-aware" base
  change b' = b s^(d/(d-2)) (eq. 16), "NTK-by-parts" with its ramp (eqs. 17-20),
  dynamic scaling (section 3.3) and YaRN's attention factor
  sqrt(1/t) = 0.1 ln s + 1 (eq. 22).
* Llama 3's frequency-dependent scaling: the released code of Llama 3.1
  (meta-llama/llama-models, ``apply_scaling``: factor 8, low_freq_factor 1,
  high_freq_factor 4, original context 8192), the models of
  "The Llama 3 Herd of Models" (2024), arXiv:2407.21783.
* Partial rotary: GPT-NeoX-20B, Black et al. (2022), arXiv:2204.06745, whose
  released config rotates a quarter of each head (``rotary_pct = 0.25``).
* NoPE: Kazemnejad, Padhi, Natesan Ramamurthy, Das and Reddy (2023), "The
  Impact of Positional Encoding on Length Generalization in Transformers",
  arXiv:2305.19466; Haviv, Ram, Press, Izsak and Levy (2022), "Transformer
  Language Models without Positional Encodings Still Learn Positional
  Information", arXiv:2203.16634.

Page: docs/modern/long-context-rope.md
Tested against: ``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS`` and the
rotary code of the ``transformers`` Llama and GPT-NeoX models
(tests/test_rope_transformers.py), and the papers' equations written out in
tests/test_rope_scaling.py.

Layout: half-split planes (i, i + r/2) inside the first r = rotary dimensions
of each head, as GPT-NeoX and Hugging Face's port of Llama pair them (Meta's
own Llama code pairs (2i, 2i + 1)); the remaining d - r dimensions pass
through unrotated.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "ROPE_TYPES",
    "rope_frequencies",
    "rotary_dims",
    "linear_scaling",
    "ntk_aware_base",
    "dynamic_ntk_base",
    "yarn_ramp",
    "yarn_scaling",
    "yarn_attention_factor",
    "llama3_scaling",
    "rope_inv_freq",
    "rotary_angles",
    "apply_partial_rotary",
    "ScaledRotaryEmbedding",
    "nope_positions",
]

ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3")


# --8<-- [start:checks]
# Where each named argument may lie: (bound, ">=" or ">" the bound, kind)
_NUM, _INT, _EVEN = "a finite number", "an int", "an even int"
_RANGES = {
    "base": (1.0, ">", _NUM), "factor": (1.0, ">=", _NUM),
    "beta_slow": (0.0, ">", _NUM), "beta_fast": (0.0, ">=", _NUM),
    "low_freq_factor": (0.0, ">", _NUM), "high_freq_factor": (0.0, ">=", _NUM),
    "attention_factor": (0.0, ">", _NUM), "mscale": (0.0, ">=", _NUM),
    "mscale_all_dim": (0.0, ">=", _NUM), "d_rot": (2, ">=", _EVEN),
    "d_head": (2, ">=", _INT), "seq_len": (0, ">=", _INT), "offset": (0, ">=", _INT),
    "bos_id": (0, ">=", _INT), "original_length": (1, ">=", _INT),
}


def _check_rope_args(**values: object) -> None:
    """Each value within its ``_RANGES`` entry; a pair (value, low) raises the floor."""
    for name, value in values.items():
        low, sign, kind = _RANGES[name]
        value, low = value if isinstance(value, tuple) else (value, low)
        num = isinstance(value, int) or kind == _NUM and isinstance(value, float)
        ok = num and low <= value < math.inf and (sign == ">=" or value > low)
        if not ok or kind == _EVEN and value % 2:
            raise ValueError(f"{name} must be {kind} {sign} {low}, got {value!r}")


def _check_rope_tensor(name: str, t: object, ranks: tuple, kind="real", device=None):
    """A tensor of a rank in ``ranks`` on ``device``, of a ``kind`` dtype.

    kind: "real" (any but bool), "floating" or "integer".
    """
    ok = torch.is_tensor(t) and t.dtype != torch.bool and t.dim() in ranks
    if not ok or kind == ("floating", "integer")[t.is_floating_point()] \
            or device not in (None, t.device):
        got = f"{t.dtype} {tuple(t.shape)} on {t.device}" if torch.is_tensor(t) else t
        raise ValueError(f"{name} must be a tensor ({kind} dtype, rank in {ranks}) on "
                         f"{device or 'one device'}, got {got}")


def _check_rope_rotary_inputs(x: object, cos: object, sin: object) -> None:
    """x (B, H, N, d); cos and sin (N, r/2) or (B, N, r/2), r <= d, on x's device."""
    _check_rope_tensor("x", x, (4,), "floating")
    for name, t in (("cos", cos), ("sin", sin)):
        _check_rope_tensor(name, t, (2, 3), "floating", x.device)
    (b, _, n, d), half = x.shape, cos.shape[-1]
    if cos.shape != sin.shape or cos.shape[-2] != n or not 1 <= 2 * half <= d \
            or cos.dim() == 3 and cos.shape[0] not in (1, b):
        raise ValueError(f"cos and sin must be (N, r/2) or (B, N, r/2), B={b}, N={n}, "
                         f"r <= d={d}, got {tuple(cos.shape)}, {tuple(sin.shape)}")


def _check_rope_tokens(tokens: object, bos_id: object) -> None:
    """An integer (B, N) tensor whose rows hold bos_id first and only there."""
    _check_rope_tensor("tokens", tokens, (2,), "integer")
    _check_rope_args(bos_id=bos_id)
    is_bos = tokens == bos_id  # (B, N)
    if not tokens.shape[1] or not is_bos[:, 0].all() or is_bos[:, 1:].any():
        raise ValueError(f"tokens must hold bos_id={bos_id} first in each row and only "
                         f"there, got it at (row, column) {is_bos.nonzero().tolist()}")
# --8<-- [end:checks]


# --8<-- [start:frequencies]
def inverse_frequencies(d_rot: int, base: float, device=None) -> torch.Tensor:
    """theta_i = base^(-2i / r) in float64, rounded once to float32: (r/2,)."""
    exponent = torch.arange(0, d_rot, 2, dtype=torch.float64, device=device) / d_rot
    return (1.0 / base**exponent).float()  # (r/2,)


# --8<-- [end:frequencies]


def rope_frequencies(
    d_rot: int, base: float = 10000.0, *, device: torch.device | str | None = None
) -> torch.Tensor:
    """The unscaled RoPE frequencies theta_i = base^(-2i / r), i = 0 .. r/2 - 1.

    Args:
        d_rot: r, the number of rotated dimensions (even; the whole head d
            unless the rotary is partial).
        base: the 10000 of the RoFormer paper, "rope_theta" in configs
            (500000 for Llama 3, 1000000 for Code Llama).
        device: where to build them.

    Returns:
        ``(r/2,)`` float32, in radians per position, from 1 down to about 1/base.
    """
    _check_rope_args(d_rot=d_rot, base=base)  # dimensions rotate in pairs
    return inverse_frequencies(d_rot, base, device)


def rotary_dims(d_head: int, partial_rotary_factor: float = 1.0) -> int:
    """r = int(d * partial_rotary_factor): how many dimensions of a head rotate.

    GPT-NeoX-20B and Pythia rotate a quarter of each head (``rotary_pct`` 0.25);
    the other dimensions carry no position at all.
    """
    _check_rope_args(d_head=d_head)
    factor = partial_rotary_factor
    fits = isinstance(factor, (int, float)) and 0.0 < factor <= 1.0
    d_rot = int(d_head * factor) if fits else 0
    if d_rot < 2 or d_rot % 2:
        raise ValueError(f"partial_rotary_factor must be in (0, 1], int(d_head * it) "
                         f"even >= 2 for d_head={d_head}, got {factor!r}")
    return d_rot


# --8<-- [start:linear]
def interpolate(inv_freq: torch.Tensor, factor: float) -> torch.Tensor:
    """theta_i / s: position m turns as position m / s did in training."""
    return inv_freq / factor  # (r/2,)


# --8<-- [end:linear]


def linear_scaling(inv_freq: torch.Tensor, factor: float) -> torch.Tensor:
    """Position interpolation: every frequency divided by s.

    Rotating position m with theta_i / s is rotating position m / s with
    theta_i: a window s times longer is squeezed into the angles seen in training.
    """
    _check_rope_tensor("inv_freq", inv_freq, (1,), "floating")
    _check_rope_args(factor=factor)
    return interpolate(inv_freq, factor)


# --8<-- [start:ntk]
def ntk_base(base: float, factor: float, d_rot: int) -> float:
    """b' = b s^(r / (r - 2)): the slowest plane divided by s, the fastest kept."""
    return base * factor ** (d_rot / (d_rot - 2))


def dynamic_scale(factor: float, seq_len: int, original_length: int) -> float:
    """The scale for the current length: 1 up to L, then growing linearly."""
    seq_len = max(seq_len, original_length)  # never scale inside the trained window
    return factor * seq_len / original_length - (factor - 1)


# --8<-- [end:ntk]


def ntk_aware_base(base: float, factor: float, d_rot: int) -> float:
    """ "NTK-aware" scaling: a new base b' = b * s^(r / (r - 2)).

    The exponent is chosen so that the slowest plane (i = r/2 - 1) is divided by
    exactly s, like position interpolation, while the fastest (i = 0) keeps its
    frequency; the planes in between are divided by s^(2i / (r - 2)).
    """
    _check_rope_args(base=base, factor=factor, d_rot=(d_rot, 4))
    return ntk_base(base, factor, d_rot)


def dynamic_ntk_base(
    base: float, factor: float, seq_len: int, original_length: int, d_rot: int
) -> float:
    """Dynamic NTK: the NTK-aware base, recomputed for the current length.

    Below the original context length nothing changes; beyond it the base grows
    with the length, in the form ``transformers`` uses (for factor 1 the scale is
    the paper's s = max(1, l'/L)).
    """
    _check_rope_args(original_length=original_length, seq_len=seq_len, factor=factor)
    return ntk_aware_base(base, dynamic_scale(factor, seq_len, original_length), d_rot)


# --8<-- [start:yarn]
def ramp_indices(
    d_rot: int, base: float, length: int, beta_fast: float, beta_slow: float
):
    """The pair indices where a plane turns beta_fast and beta_slow times in L."""

    def index_at(turns: float) -> float:  # solve L base^(-2i/r) / (2 pi) = turns for i
        return d_rot * math.log(length / (2 * math.pi * turns)) / (2 * math.log(base))

    return index_at(beta_fast), index_at(beta_slow)


def ntk_by_parts(inv_freq: torch.Tensor, ramp: torch.Tensor, factor: float):
    """theta_i (1 - gamma_i) + (theta_i / s) gamma_i: keep fast planes, divide slow."""
    return inv_freq * (1 - ramp) + (inv_freq / factor) * ramp  # (r/2,)


# --8<-- [end:yarn]


def yarn_ramp(
    d_rot: int,
    base: float,
    original_length: int,
    *,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    truncate: bool = True,
) -> torch.Tensor:
    """How much each plane is interpolated: 0 keeps it, 1 divides it by s.

    A plane that turns r(i) = L theta_i / (2 pi) times in the original window L
    is kept when r > beta_fast and fully interpolated when r < beta_slow. As in
    the YaRN code (and ``transformers``), the ramp is linear in the pair index i
    between the two planes where r = beta_fast and r = beta_slow, rounded
    outwards to whole indices when ``truncate``.

    Returns:
        ``(r/2,)`` float32 in [0, 1], non-decreasing in i.
    """
    _check_rope_args(original_length=original_length, beta_slow=beta_slow,
                     beta_fast=(beta_fast, beta_slow))
    inv_freq = rope_frequencies(d_rot, base)  # validates d_rot and base
    low, high = ramp_indices(d_rot, base, original_length, beta_fast, beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d_rot - 1)
    if low == high:
        high += 0.001  # equal bounds (Kimi K2's beta_fast = beta_slow = 1): a step
    i = torch.arange(inv_freq.shape[0], dtype=torch.float32)  # (r/2,)
    return ((i - low) / (high - low)).clamp(0.0, 1.0)  # (r/2,)


def yarn_scaling(
    d_rot: int,
    base: float,
    factor: float,
    original_length: int,
    *,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    truncate: bool = True,
) -> torch.Tensor:
    """ "NTK-by-parts": fast planes kept, slow planes divided by s, a ramp between."""
    _check_rope_args(factor=factor)
    inv_freq = rope_frequencies(d_rot, base)  # (r/2,)
    ramp = yarn_ramp(
        d_rot,
        base,
        original_length,
        beta_fast=beta_fast,
        beta_slow=beta_slow,
        truncate=truncate,
    )
    return ntk_by_parts(inv_freq, ramp, factor)


def yarn_attention_factor(
    factor: float, mscale: float | None = None, mscale_all_dim: float | None = None
) -> float:
    """YaRN's sqrt(1/t) = 0.1 ln(s) + 1, the factor that multiplies cos and sin.

    q and k both get it, so the scores grow by its square: the softmax is
    sharpened to undo the flattening that a longer window brings. DeepSeek's
    configs give two coefficients and use their ratio.
    """
    # None (not given) passes as 0.0
    _check_rope_args(factor=factor, mscale=0.0 if mscale is None else mscale,
                     mscale_all_dim=0.0 if mscale_all_dim is None else mscale_all_dim)

    def m(scale: float, k: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * k * math.log(scale) + 1.0

    if mscale and mscale_all_dim:
        return m(factor, mscale) / m(factor, mscale_all_dim)
    return m(factor)


# --8<-- [start:llama3]
def llama3_rule(inv_freq, factor: float, low: float, high: float, length: int):
    """Keep planes with more than ``high`` turns in L, divide those under ``low``."""
    wavelength = 2 * math.pi / inv_freq  # (r/2,) tokens per turn
    turns = length / wavelength  # turns in the original window L
    # Blend in between, linear in the turns; equal bounds (Llama 4 Scout) make a step.
    smooth = ((turns - low) / (high - low if high > low else 1.0)).clamp(0.0, 1.0)
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    keep, divide = wavelength < length / high, wavelength > length / low
    return torch.where(keep, inv_freq, torch.where(divide, inv_freq / factor, blended))


# --8<-- [end:llama3]


def llama3_scaling(
    inv_freq: torch.Tensor,
    factor: float = 8.0,
    *,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
    original_length: int = 8192,
) -> torch.Tensor:
    """Llama 3.1's scaling, decided by each plane's wavelength 2 pi / theta_i.

    Wavelengths shorter than L / high_freq_factor (2048 tokens for Llama 3.1)
    are kept; longer than L / low_freq_factor (8192) are divided by the factor;
    in between, a blend linear in L / wavelength, the number of turns in the window.
    """
    _check_rope_tensor("inv_freq", inv_freq, (1,), "floating")
    _check_rope_args(factor=factor, low_freq_factor=low_freq_factor,
                     high_freq_factor=(high_freq_factor, low_freq_factor),
                     original_length=original_length)
    return llama3_rule(
        inv_freq, factor, low_freq_factor, high_freq_factor, original_length
    )


def rope_inv_freq(
    d_head: int,
    *,
    base: float = 10000.0,
    rope_type: str = "default",
    partial_rotary_factor: float = 1.0,
    factor: float = 1.0,
    original_max_position_embeddings: int | None = None,
    seq_len: int | None = None,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    truncate: bool = True,
    attention_factor: float | None = None,
    mscale: float | None = None,
    mscale_all_dim: float | None = None,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
) -> tuple[torch.Tensor, float]:
    """The frequencies and attention factor of one RoPE configuration.

    The keyword names follow the ``rope_parameters`` of Hugging Face configs
    (``base`` is their ``rope_theta``). One difference: for "dynamic",
    ``transformers`` reads the original length from ``max_position_embeddings``;
    here it is ``original_max_position_embeddings`` for every type.

    Args:
        d_head: d, the head width.
        base: theta's base.
        rope_type: one of ``ROPE_TYPES``.
        partial_rotary_factor: the fraction of the head that rotates.
        factor: s, the scale factor of every scaled type (>= 1).
        original_max_position_embeddings: L, the context length of
            pre-training ("dynamic", "yarn", "llama3").
        seq_len: the current length, read by "dynamic" only.
        beta_fast, beta_slow, truncate, attention_factor, mscale,
            mscale_all_dim: YaRN's parameters.
        low_freq_factor, high_freq_factor: Llama 3's parameters.

    Returns:
        ``(inv_freq, attention_factor)``: ``(r/2,)`` float32 frequencies and the
        number that multiplies cos and sin (1 except for YaRN).
    """
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"rope_type must be one of {ROPE_TYPES}, got {rope_type!r}")
    # L is checked as original_length, attention_factor by rotary_angles (its user)
    d_rot = rotary_dims(d_head, partial_rotary_factor)

    if rope_type == "default":
        return rope_frequencies(d_rot, base), 1.0
    if rope_type == "linear":
        return linear_scaling(rope_frequencies(d_rot, base), factor), 1.0
    if rope_type == "dynamic":
        length = original_max_position_embeddings if seq_len is None else seq_len
        new_base = dynamic_ntk_base(
            base, factor, length, original_max_position_embeddings, d_rot
        )
        return rope_frequencies(d_rot, new_base), 1.0
    if rope_type == "yarn":
        inv_freq = yarn_scaling(
            d_rot,
            base,
            factor,
            original_max_position_embeddings,
            beta_fast=beta_fast,
            beta_slow=beta_slow,
            truncate=truncate,
        )
        if attention_factor is None:
            attention_factor = yarn_attention_factor(factor, mscale, mscale_all_dim)
        return inv_freq, attention_factor
    inv_freq = llama3_scaling(
        rope_frequencies(d_rot, base),
        factor,
        low_freq_factor=low_freq_factor,
        high_freq_factor=high_freq_factor,
        original_length=original_max_position_embeddings,
    )
    return inv_freq, 1.0


# --8<-- [start:apply]
def rotate_half_split(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """Turn planes (i, i + r/2) of the first r dims; pass the other d - r."""
    half = cos.shape[-1]
    # (B, H, N, r/2), (B, H, N, r/2), (B, H, N, d - r)
    x1, x2, rest = x[..., :half], x[..., half : 2 * half], x[..., 2 * half :]
    rotated = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)  # (.., r)
    return torch.cat((rotated, rest), dim=-1)  # (B, H, N, d)


# --8<-- [end:apply]


def rotary_angles(
    inv_freq: torch.Tensor, positions: torch.Tensor, *, attention_factor: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of position * theta_i, times the attention factor.

    Args:
        inv_freq: ``(r/2,)`` from ``rope_inv_freq``.
        positions: ``(N,)`` or ``(B, N)``, integers or (for interpolated
            positions) floats.
        attention_factor: multiplies cos and sin, so q . k by its square.

    Returns:
        ``(cos, sin)``, each ``positions.shape + (r/2,)``, float32.
    """
    _check_rope_tensor("inv_freq", inv_freq, (1,), "floating")
    _check_rope_tensor("positions", positions, (1, 2))
    _check_rope_args(attention_factor=attention_factor)
    # float32 angles, as the model code this is compared with computes them
    angles = positions.float()[..., None] * inv_freq.float().to(
        positions.device
    )  # (..., N, 1) * (r/2,) -> (..., N, r/2)
    return angles.cos() * attention_factor, angles.sin() * attention_factor


def apply_partial_rotary(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> torch.Tensor:
    """Rotate the first r = 2 * cos.shape[-1] dimensions of x, pass the rest.

    Planes (i, i + r/2) inside the rotated block: the half-split layout of
    GPT-NeoX and Llama. With r = d this is plain RoPE.

    Args:
        x: queries or keys, ``(B, H, N, d)``.
        cos, sin: from ``rotary_angles``, ``(N, r/2)`` or ``(B, N, r/2)``.

    Returns:
        A tensor like x.
    """
    _check_rope_rotary_inputs(x, cos, sin)
    dtype = x.dtype
    acc = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    c, s = cos.to(acc), sin.to(acc)
    if c.dim() == 3:
        c, s = (
            c[:, None],
            s[:, None],
        )  # (B, N, r/2) -> (B, 1, N, r/2), shared by the heads
    return rotate_half_split(x.to(acc), c, s).to(dtype)


class ScaledRotaryEmbedding(nn.Module):
    """Applies (partial, scaled) RoPE to q and k; "dynamic" rescales per call.

    Args:
        d_head: d, the head width.
        **rope: the keywords of ``rope_inv_freq`` (base, rope_type, factor, ...).
    """

    def __init__(self, d_head: int, **rope: object) -> None:
        super().__init__()
        rope.pop("seq_len", None)  # the length comes with each call
        inv_freq, attention_factor = rope_inv_freq(
            d_head, **rope
        )  # validates everything
        self.d_head, self.rope = d_head, rope
        self.rope_type = rope.get("rope_type", "default")
        self.attention_factor = attention_factor
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def _check_forward(self, q: torch.Tensor, k: torch.Tensor, offset: int) -> None:
        for name, t in (("q", q), ("k", k)):
            _check_rope_tensor(name, t, (4,), "floating", self.inv_freq.device)
        _check_rope_args(offset=offset)
        if q.shape[-2] > k.shape[-2] or {q.shape[-1], k.shape[-1]} != {self.d_head}:
            raise ValueError(f"q (B, H, N, d) and k (B, H_kv, M, d) must have N <= M, "
                             f"d={self.d_head}, got {tuple(q.shape)}, {tuple(k.shape)}")

    # --8<-- [start:module]
    def forward(self, q: torch.Tensor, k: torch.Tensor, *, offset: int = 0):
        """Rotate q (B, H, N, d), the last N of the keys k (B, H_kv, M, d)."""
        self._check_forward(q, k, offset)
        n, m = q.shape[-2], k.shape[-2]
        inv_freq, scale = self.inv_freq, self.attention_factor
        if self.rope_type == "dynamic":  # the frequencies follow the current length
            inv_freq, scale = rope_inv_freq(
                self.d_head, **self.rope, seq_len=offset + m
            )
        positions = torch.arange(offset, offset + m, device=k.device)  # (M,)
        cos, sin = rotary_angles(
            inv_freq, positions, attention_factor=scale
        )  # (M, r/2) each
        q = apply_partial_rotary(q, cos[m - n :], sin[m - n :])  # queries: last N
        return q, apply_partial_rotary(k, cos, sin)

    # --8<-- [end:module]


# --8<-- [start:nope]
def first_token_share(is_first: torch.Tensor, causal: bool) -> torch.Tensor:
    """Uniform attention over the visible keys, each valued "am I first?": (B, N)."""
    b, n = is_first.shape
    q = torch.zeros(b, 1, n, 1, device=is_first.device)  # no content, no position
    k = torch.zeros_like(q)  # every score is 0: uniform weights over the visible keys
    v = is_first.float()[:, None, :, None]  # (B, 1, N, 1)
    share = F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # 1 / (i + 1)
    return share[:, 0, :, 0]  # (B, N)


# --8<-- [end:nope]


def nope_positions(
    tokens: torch.Tensor, bos_id: int, *, causal: bool = True
) -> torch.Tensor:
    """Read each token's position out of one attention layer that has no positions.

    The query ignores the content (every score equal), the value says "I am
    the first token": a causal layer then returns, at position i, the share of
    the i + 1 visible tokens that are the first one, 1 / (i + 1). Without the
    causal mask every token sees all N and gets 1 / N.

    Args:
        tokens: ``(B, N)`` token ids, each row starting with ``bos_id`` (once).
        bos_id: the beginning-of-sequence token.
        causal: mask the future, as a decoder does.

    Returns:
        ``(B, N)`` float32: 0, 1, 2, ... when causal; N - 1 everywhere when not.
    """
    _check_rope_tokens(tokens, bos_id)
    return 1.0 / first_token_share(tokens == bos_id, causal) - 1.0  # visible keys - 1
