"""The modern decoder block: RMSNorm, SwiGLU, QK-norm, pre-norm, no biases.

Papers:
    Zhang and Sennrich (2019), "Root Mean Square Layer Normalization",
    arXiv:1910.07467 (RMSNorm: rescale by the root mean square, no centring).
    Shazeer (2020), "GLU Variants Improve Transformer", arXiv:2002.05202
    (SwiGLU: a SiLU-gated linear unit as the feed-forward layer).
    Xiong et al. (2020), "On Layer Normalization in the Transformer
    Architecture", arXiv:2002.04745 (pre-norm).
    Henry, Dachapally, Pawar and Chen (2020), "Query-Key Normalization for
    Transformers", arXiv:2010.04245, and Dehghani et al. (2023), "Scaling
    Vision Transformers to 22 Billion Parameters", arXiv:2302.05442 (QK-norm).
    Touvron et al. (2023), "LLaMA: Open and Efficient Foundation Language
    Models", arXiv:2302.13971 (the recipe: pre-norm RMSNorm, SwiGLU, RoPE).
Page: docs/modern/modern-block.md
Tested against: torch.nn.RMSNorm; Hugging Face transformers' LlamaRMSNorm,
LlamaMLP, LlamaRotaryEmbedding and LlamaDecoderLayer (outputs and gradients),
Qwen3DecoderLayer (QK-norm per head) and Olmo2Attention (QK-norm over all
heads), each built from a tiny random config with its weights copied in
(tests/test_modern_block.py, tests/test_modern_transformers.py).

Parameter names follow the Llama checkpoints (``self_attn.q_proj``,
``mlp.gate_proj``, ``input_layernorm``, ...), so the state dict of a Hugging
Face ``LlamaDecoderLayer`` loads into ``DecoderLayer`` unchanged.

``DecoderAttention`` receives two optional modules instead of importing them:
``attend(q, k, v, attn_mask=..., scale=...)``, the kernel that turns heads into
outputs (default: ``sdpa_attend``), and ``output_gate(x, out)``, applied to the
concatenated heads before ``o_proj``. The attention-sink and soft-cap kernels
and the output gate of the neighbouring files plug in there.

Masks: a boolean ``attn_mask`` is True where a query MAY attend. A query row
with no allowed key returns zeros.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "RMSNorm",
    "SwiGLU",
    "swiglu_width",
    "rope_tables",
    "apply_rope",
    "sdpa_attend",
    "DecoderAttention",
    "DecoderLayer",
]


def _positive_int(name: str, value: object) -> int:
    """Return ``value`` if it is a positive int (not a bool), else raise."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def _check_like_module(name: str, t: torch.Tensor, weight: torch.Tensor) -> None:
    """Raise unless t has the device (and, outside autocast, the dtype) of the module's weight."""
    if t.device != weight.device:
        raise ValueError(f"{name} must be on the module's device {weight.device}, got {t.device}")
    autocast = torch.amp.is_autocast_available(t.device.type) and torch.is_autocast_enabled(t.device.type)
    if t.dtype != weight.dtype and not autocast:
        raise TypeError(f"{name} must have the module's dtype {weight.dtype}, got {t.dtype}")


def _check_norm_eps(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a positive float, got {value!r}")


def _check_block_input(x: object, weight: torch.Tensor, width: str, *, match_dtype: bool) -> None:
    """x: a floating ``(..., width)`` tensor on the device of ``weight`` (width = its last dimension);
    with ``match_dtype``, of its dtype too (outside autocast)."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"x must be a floating torch.Tensor, got {got}")
    if x.dim() == 0 or x.shape[-1] != weight.shape[-1]:
        raise ValueError(f"x must have last dimension {width} = {weight.shape[-1]}, got shape {tuple(x.shape)}")
    if match_dtype:
        _check_like_module("x", x, weight)
    elif x.device != weight.device:
        raise ValueError(f"x must be on the module's device {weight.device}, got {x.device}")


def _check_hidden_states(x: object, weight: torch.Tensor) -> None:
    """x: a floating ``(B, N, D)`` tensor for a layer whose first projection has ``weight`` ``(*, D)``."""
    d_model = weight.shape[-1]
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != d_model:
        got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must have shape (B, N, D) with D = {d_model}, got {got}")
    if not x.is_floating_point():
        raise TypeError(f"x must have a floating dtype, got {x.dtype}")
    _check_like_module("x", x, weight)


def _check_multiplier(value: object) -> None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf")
    ):
        raise ValueError(f"ffn_dim_multiplier must be a positive finite number or None, got {value!r}")


def _check_rope_init(rope_base: object, rotary_dim: object, d_head: int) -> None:
    if rope_base is None:
        return
    if isinstance(rope_base, bool) or not isinstance(rope_base, (int, float)) or not 1 < rope_base < float("inf"):
        raise ValueError(f"rope_base must be a finite number > 1 or None, got {rope_base!r}")
    if isinstance(rotary_dim, bool) or not isinstance(rotary_dim, int) or rotary_dim < 2 or rotary_dim % 2:
        raise ValueError(f"rotary_dim must be an even int >= 2, got {rotary_dim!r}")
    if rotary_dim > d_head:
        raise ValueError(f"rotary_dim must be <= d_head = {d_head}, got {rotary_dim}")


def _check_positions(positions: object, b: int, n: int) -> None:
    """None, or integer RoPE positions ``(N,)`` or ``(B, N)``."""
    if positions is None:
        return
    if not isinstance(positions, torch.Tensor) or positions.is_floating_point() or positions.dtype == torch.bool:
        got = positions.dtype if isinstance(positions, torch.Tensor) else type(positions).__name__
        raise TypeError(f"positions must be an integer tensor, got {got}")
    if positions.shape not in ((n,), (b, n)):
        raise ValueError(f"positions must have shape (N,) or (B, N) = ({n},) or ({b}, {n}), got {tuple(positions.shape)}")


def _check_heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """q ``(B, H, N, d)``, k ``(B, H, M, d)``, v ``(B, H, M, d_v)``, floating, one dtype, one device."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"{name} must be a floating torch.Tensor, got {got}")
        if t.dim() != 4:
            raise ValueError(f"{name} must have 4 dimensions (B, H, length, d), got shape {tuple(t.shape)}")
    for name, t in (("k", k), ("v", v)):
        if t.device != q.device:
            raise ValueError(f"{name} must be on the device of q {q.device}, got {t.device}")
        if t.dtype != q.dtype:
            raise TypeError(f"{name} must have the dtype of q {q.dtype}, got {t.dtype}")
    if q.shape[:2] != k.shape[:2] or k.shape[:3] != v.shape[:3] or q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q (B, H, N, d), k (B, H, M, d) and v (B, H, M, d_v) disagree: got "
            f"{tuple(q.shape)}, {tuple(k.shape)} and {tuple(v.shape)}"
        )


def _check_bool_mask(attn_mask: torch.Tensor | None, q: torch.Tensor, k: torch.Tensor) -> None:
    """None, or a boolean mask (N, M) or (B, H or 1, N, M) for the scores of q and k, on their device."""
    if attn_mask is None:
        return
    if not isinstance(attn_mask, torch.Tensor) or attn_mask.dtype != torch.bool:
        got = attn_mask.dtype if isinstance(attn_mask, torch.Tensor) else type(attn_mask).__name__
        raise TypeError(f"attn_mask must be a boolean tensor (True = may attend), got {got}")
    (b, h, n, _), m = q.shape, k.shape[-2]
    shape = tuple(attn_mask.shape)
    if shape != (n, m) and (len(shape) != 4 or shape[0] != b or shape[1] not in (1, h) or shape[2:] != (n, m)):
        raise ValueError(
            f"attn_mask must be (N, M) or (B, H or 1, N, M) with (B, H, N, M) = {(b, h, n, m)}, got {shape}"
        )
    if attn_mask.device != q.device:
        raise ValueError(f"attn_mask must be on the device of q {q.device}, got {attn_mask.device}")


def _check_scale(scale: float | None) -> None:
    if scale is not None and (
        isinstance(scale, bool)
        or not isinstance(scale, (int, float))
        or not (math.isfinite(scale) and scale > 0)
    ):
        raise ValueError(f"scale must be a positive finite float or None, got {scale!r}")


def _check_kernel_args(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None, scale: float | None
) -> None:
    """The arguments every attention kernel of the modern block takes."""
    _check_heads(q, k, v)
    _check_bool_mask(attn_mask, q, k)
    _check_scale(scale)


def _check_rope_args(positions: object, rotary_dim: object, base: object) -> None:
    """positions ``(N,)`` or ``(B, N)`` integers, an even ``rotary_dim`` >= 2, a finite ``base`` > 1."""
    if not isinstance(positions, torch.Tensor) or positions.is_floating_point() or positions.dtype == torch.bool:
        got = positions.dtype if isinstance(positions, torch.Tensor) else type(positions).__name__
        raise TypeError(f"positions must be an integer tensor, got {got}")
    if positions.dim() not in (1, 2):
        raise ValueError(f"positions must have shape (N,) or (B, N), got {tuple(positions.shape)}")
    if isinstance(rotary_dim, bool) or not isinstance(rotary_dim, int) or rotary_dim < 2 or rotary_dim % 2:
        raise ValueError(f"rotary_dim must be an even int >= 2, got {rotary_dim!r}")
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not 1 < base < float("inf"):
        raise ValueError(f"base must be a finite number > 1, got {base!r}")


def _check_rope_inputs(x: object, cos: object, sin: object) -> None:
    """x ``(B, H, N, d)`` floating; cos and sin alike, ``(N, r/2)`` or ``(B, N, r/2)``, r <= d, on x's device."""
    for name, t in (("x", x), ("cos", cos), ("sin", sin)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"{name} must be a floating torch.Tensor, got {got}")
    if cos.shape != sin.shape or cos.dim() not in (2, 3):
        raise ValueError(f"cos and sin must both be (N, r/2) or (B, N, r/2), got {tuple(cos.shape)} and {tuple(sin.shape)}")
    r, n = 2 * cos.shape[-1], cos.shape[-2]
    if x.dim() != 4 or x.shape[-2] != n or x.shape[-1] < r or (cos.dim() == 3 and cos.shape[0] != x.shape[0]):
        batch = f"B = {cos.shape[0]}, " if cos.dim() == 3 else ""
        raise ValueError(f"x must be (B, H, N, d) with {batch}N = {n} and d >= {r}, got {tuple(x.shape)}")
    for name, t in (("cos", cos), ("sin", sin)):
        if t.device != x.device:
            raise ValueError(f"{name} must be on the device of x {x.device}, got {t.device}")


# --8<-- [start:rms_norm]
class RMSNorm(nn.Module):
    """Root-mean-square normalisation: ``x / sqrt(mean(x^2) + eps) * weight``.

    Unlike LayerNorm it neither subtracts the mean nor adds a bias.

    Args:
        d: the width of the last dimension.
        eps: added to the mean square before the square root.

    Shape:
        ``(..., d)`` -> ``(..., d)``.
    """

    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.d = _positive_int("d", d)
        _check_norm_eps("eps", eps)
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_block_input(x, self.weight, "d", match_dtype=False)  # any floating dtype: it upcasts
        # Square in float32 for half inputs: x^2 overflows float16 above 256.
        acc = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
        h = x.to(acc)
        inv_rms = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)  # (..., 1)
        return self.weight * (h * inv_rms).to(x.dtype)  # (..., d)

    def extra_repr(self) -> str:
        return f"{self.d}, eps={self.eps}"
# --8<-- [end:rms_norm]


# --8<-- [start:swiglu]
class SwiGLU(nn.Module):
    """The gated feed-forward layer: ``down(silu(gate(x)) * up(x))``.

    Args:
        d_model: D.
        d_ff: the hidden width (see ``swiglu_width`` for Llama's choice).
        bias: give the three projections a bias (the models on this page
            have none).

    Shape:
        ``(B, N, D)`` -> ``(B, N, D)``.
    """

    def __init__(self, d_model: int, d_ff: int, *, bias: bool = False) -> None:
        super().__init__()
        _positive_int("d_model", d_model)
        _positive_int("d_ff", d_ff)
        self.gate_proj = nn.Linear(d_model, d_ff, bias=bias)  # W: D -> d_ff
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)  # V: D -> d_ff
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)  # W_2: d_ff -> D

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_block_input(x, self.gate_proj.weight, "d_model", match_dtype=True)
        hidden = F.silu(self.gate_proj(x)) * self.up_proj(x)  # (B, N, D) -> (B, N, d_ff)
        return self.down_proj(hidden)  # (B, N, d_ff) -> (B, N, D)


def swiglu_width(d_model: int, multiple_of: int = 256, ffn_dim_multiplier: float | None = None) -> int:
    """Llama's hidden width: 2/3 of 4D (same parameters as a 4D two-matrix MLP),
    times an optional multiplier, rounded up to a multiple of ``multiple_of``.

    Llama 2 7B: ``swiglu_width(4096)`` = 11008. Llama 3 8B:
    ``swiglu_width(4096, 1024, 1.3)`` = 14336.
    """
    _positive_int("d_model", d_model)
    _positive_int("multiple_of", multiple_of)
    hidden = int(2 * (4 * d_model) / 3)
    _check_multiplier(ffn_dim_multiplier)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)
# --8<-- [end:swiglu]


# --8<-- [start:rope]
def rope_tables(
    positions: torch.Tensor, rotary_dim: int, base: float = 10000.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of ``t * base^(-2i / rotary_dim)`` for every position t.

    Args:
        positions: integer positions, ``(N,)`` or ``(B, N)``.
        rotary_dim: how many dimensions of a head rotate (even; the head
            width d for full RoPE, less for partial rotary).
        base: the RoPE base (10000 in the paper; Llama 3 uses 500000).

    Returns:
        ``(cos, sin)``, float64 (float32 on MPS; ``apply_rope`` casts them
        to its working dtype), each ``(*positions.shape, rotary_dim / 2)``.
    """
    _check_rope_args(positions, rotary_dim, base)
    # Angles in float64 (t * theta loses digits in float32 at large t); MPS has no float64.
    wide = torch.float32 if positions.device.type == "mps" else torch.float64
    exponent = torch.arange(0, rotary_dim, 2, dtype=wide, device=positions.device) / rotary_dim
    inv_freq = base ** (-exponent)  # (rotary_dim / 2,)
    angles = positions.to(wide).unsqueeze(-1) * inv_freq  # (..., N, 1) * (r/2,) -> (..., N, r/2)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first ``2 * cos.shape[-1]`` dimensions of each head, pairing
    dimension i with i + r/2 (the GPT-NeoX and Llama layout); the rest pass.

    Args:
        x: ``(B, H, N, d)``.
        cos: from ``rope_tables``, ``(N, r/2)`` or ``(B, N, r/2)``, r <= d.
        sin: like ``cos``.

    Returns:
        A tensor like ``x``.
    """
    _check_rope_inputs(x, cos, sin)
    r = 2 * cos.shape[-1]
    if cos.dim() == 3:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, N, r/2) -> (B, 1, N, r/2), shared by heads
    acc = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    rot = x[..., :r].to(acc)  # (B, H, N, r)
    x1, x2 = rot[..., : r // 2], rot[..., r // 2 :]  # (B, H, N, r/2) each
    c, s = cos.to(acc), sin.to(acc)
    turned = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)  # (B, H, N, r)
    return torch.cat((turned.to(x.dtype), x[..., r:]), dim=-1)  # (B, H, N, d)
# --8<-- [end:rope]


# --8<-- [start:attend]
def sdpa_attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Plain softmax attention through ``F.scaled_dot_product_attention``.

    ``q`` is ``(B, H, N, d)``, ``k`` and ``v`` are ``(B, H, M, d)`` (key/value
    heads already repeated); ``attn_mask`` is boolean, True = may attend.
    Rows with no allowed key are set to zero after the call: some GPU
    backends return unmasked attention for them.
    """
    _check_kernel_args(q, k, v, attn_mask, scale)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale)  # (B, H, N, d)
    if attn_mask is not None:
        out = out.masked_fill(~attn_mask.any(-1, keepdim=True), 0.0)
    return out
# --8<-- [end:attend]


class DecoderAttention(nn.Module):
    """Grouped-query self-attention with RoPE and optional QK-norm, no biases.

    Args:
        d_model: D.
        n_heads: H, query heads.
        n_kv_heads: H_kv, key/value heads (divides H); ``None`` means H.
        d_head: d; ``None`` means D / H.
        bias: biases on the four projections (gpt-oss has them; Llama,
            Qwen3, Gemma do not).
        qk_norm: ``None``; ``"head"``: an RMSNorm over each head's d
            dimensions, one weight shared by the heads (Qwen3, Gemma 3);
            ``"full"``: an RMSNorm over all H * d query (H_kv * d key)
            dimensions before the split into heads (OLMo 2).
        norm_eps: the eps of the QK-norms.
        rope_base: the RoPE base; ``None`` turns RoPE off.
        rotary_dim: how many dimensions of each head rotate (even, <= d);
            ``None`` means all d.
        scale: the score scale; ``None`` means ``1 / sqrt(d)``.
        attend: the kernel ``attend(q, k, v, attn_mask=..., scale=...)``;
            ``None`` means ``sdpa_attend``.
        output_gate: a module called as ``output_gate(x, out)`` on the
            concatenated heads ``out`` ``(B, N, H * d)`` before ``o_proj``.

    Shape:
        ``(B, N, D)`` -> ``(B, N, D)``.
    """

    # --8<-- [start:init]
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = None,
        *,
        d_head: int | None = None,
        bias: bool = False,
        qk_norm: str | None = None,
        norm_eps: float = 1e-6,
        rope_base: float | None = 10000.0,
        rotary_dim: int | None = None,
        scale: float | None = None,
        attend: Callable[..., torch.Tensor] | None = None,
        output_gate: nn.Module | None = None,
    ) -> None:
        super().__init__()
        _positive_int("d_model", d_model)
        _positive_int("n_heads", n_heads)
        n_kv_heads = n_heads if n_kv_heads is None else _positive_int("n_kv_heads", n_kv_heads)
        if n_heads % n_kv_heads:
            raise ValueError(f"n_kv_heads must divide n_heads = {n_heads}, got {n_kv_heads}")
        if d_head is None:
            if d_model % n_heads:
                raise ValueError(f"d_model = {d_model} must be divisible by n_heads = {n_heads} when d_head is None")
            d_head = d_model // n_heads
        _positive_int("d_head", d_head)
        if qk_norm not in (None, "head", "full"):
            raise ValueError(f"qk_norm must be None, 'head' or 'full', got {qk_norm!r}")
        _check_norm_eps("norm_eps", norm_eps)
        rotary_dim = d_head if rotary_dim is None else rotary_dim
        _check_rope_init(rope_base, rotary_dim, d_head)
        if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0):
            raise ValueError(f"scale must be a positive number or None, got {scale!r}")
        if attend is not None and not callable(attend):
            raise TypeError(f"attend must be callable, got {type(attend).__name__}")
        if output_gate is not None and not isinstance(output_gate, nn.Module):
            raise TypeError(f"output_gate must be an nn.Module or None, got {type(output_gate).__name__}")
        self.d_model, self.n_heads, self.n_kv_heads, self.d_head = d_model, n_heads, n_kv_heads, d_head
        self.qk_norm, self.rope_base, self.rotary_dim = qk_norm, rope_base, rotary_dim
        self.scale = d_head**-0.5 if scale is None else float(scale)

        self.q_proj = nn.Linear(d_model, n_heads * d_head, bias=bias)  # D -> H * d
        self.k_proj = nn.Linear(d_model, n_kv_heads * d_head, bias=bias)  # D -> H_kv * d
        self.v_proj = nn.Linear(d_model, n_kv_heads * d_head, bias=bias)  # D -> H_kv * d
        self.o_proj = nn.Linear(n_heads * d_head, d_model, bias=bias)  # H * d -> D
        if qk_norm == "head":
            self.q_norm, self.k_norm = RMSNorm(d_head, norm_eps), RMSNorm(d_head, norm_eps)
        elif qk_norm == "full":
            self.q_norm = RMSNorm(n_heads * d_head, norm_eps)
            self.k_norm = RMSNorm(n_kv_heads * d_head, norm_eps)
        self.attend = sdpa_attend if attend is None else attend
        self.output_gate = output_gate
    # --8<-- [end:init]

    def _allowed(self, attn_mask: torch.Tensor | None, is_causal: bool, b: int, n: int, device) -> torch.Tensor | None:
        """The boolean mask the kernel sees: the caller's mask AND causality."""
        if attn_mask is not None:
            if not isinstance(attn_mask, torch.Tensor) or attn_mask.dtype != torch.bool:
                got = attn_mask.dtype if isinstance(attn_mask, torch.Tensor) else type(attn_mask).__name__
                raise TypeError(f"attn_mask must be a boolean tensor (True = may attend), got {got}")
            shapes = ((n, n), (b, 1, n, n), (b, self.n_heads, n, n))
            if tuple(attn_mask.shape) not in shapes:
                raise ValueError(f"attn_mask must have shape (N, N), (B, 1, N, N) or (B, H, N, N) = {shapes}, got {tuple(attn_mask.shape)}")
            if attn_mask.device != device:
                raise ValueError(f"attn_mask must be on the device of x {device}, got {attn_mask.device}")
        if not is_causal:
            return attn_mask
        causal = torch.ones(n, n, dtype=torch.bool, device=device).tril()  # (N, N)
        return causal if attn_mask is None else attn_mask & causal

    # --8<-- [start:forward]
    def forward(
        self,
        x: torch.Tensor,
        *,
        attn_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        is_causal: bool = True,
    ) -> torch.Tensor:
        """Attend.

        Args:
            x: ``(B, N, D)``.
            attn_mask: boolean, True = may attend: ``(N, N)``, ``(B, 1, N, N)``
                or ``(B, H, N, N)``; combined with the causal mask.
            positions: RoPE positions, ``(N,)`` or ``(B, N)``; ``None`` means
                ``0 .. N - 1``.
            is_causal: hide the keys after each query.

        Returns:
            ``(B, N, D)``.
        """
        _check_hidden_states(x, self.q_proj.weight)
        _check_positions(positions, x.shape[0], x.shape[1])
        b, n, _ = x.shape
        h, h_kv, d = self.n_heads, self.n_kv_heads, self.d_head
        allowed = self._allowed(attn_mask, is_causal, b, n, x.device)
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)  # (B, N, H*d), (B, N, H_kv*d) x 2
        if self.qk_norm == "full":  # OLMo 2: one norm across all heads
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(b, n, h, d)  # (B, N, H*d) -> (B, N, H, d)
        k, v = k.view(b, n, h_kv, d), v.view(b, n, h_kv, d)  # (B, N, H_kv, d)
        if self.qk_norm == "head":  # Qwen3, Gemma 3: each head on its own
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, H or H_kv, N, d)
        if self.rope_base is not None:
            if positions is None:
                positions = torch.arange(n, device=x.device)  # (N,)
            cos, sin = rope_tables(positions.to(x.device), self.rotary_dim, self.rope_base)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        k = k.repeat_interleave(h // h_kv, dim=1)  # (B, H_kv, N, d) -> (B, H, N, d)
        v = v.repeat_interleave(h // h_kv, dim=1)  # (B, H_kv, N, d) -> (B, H, N, d)
        out = self.attend(q, k, v, attn_mask=allowed, scale=self.scale)  # (B, H, N, d)
        out = out.transpose(1, 2).reshape(b, n, h * d)  # (B, H, N, d) -> (B, N, H*d)
        if self.output_gate is not None:
            out = self.output_gate(x, out)  # (B, N, H*d), gated before the output projection
        return self.o_proj(out)  # (B, N, H*d) -> (B, N, D)
    # --8<-- [end:forward]


class DecoderLayer(nn.Module):
    """A pre-norm decoder layer: ``h = x + attn(norm(x)); y = h + mlp(norm(h))``.

    Args:
        attention: the self-attention, called as ``attention(x, attn_mask=...,
            positions=...)`` and returning ``(B, N, D)`` (e.g. ``DecoderAttention``).
        d_model: D.
        d_ff: the SwiGLU hidden width.
        norm_eps: the eps of the two RMSNorms.

    Shape:
        ``(B, N, D)`` -> ``(B, N, D)``.
    """

    # --8<-- [start:layer]
    def __init__(self, attention: nn.Module, d_model: int, d_ff: int, *, norm_eps: float = 1e-6) -> None:
        super().__init__()
        if not isinstance(attention, nn.Module):
            raise TypeError(f"attention must be an nn.Module, got {type(attention).__name__}")
        self.d_model = _positive_int("d_model", d_model)
        _check_norm_eps("norm_eps", norm_eps)
        self.self_attn = attention
        self.mlp = SwiGLU(d_model, d_ff)
        self.input_layernorm = RMSNorm(d_model, norm_eps)  # before attention
        self.post_attention_layernorm = RMSNorm(d_model, norm_eps)  # before the MLP

    def forward(
        self,
        x: torch.Tensor,
        *,
        attn_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        _check_hidden_states(x, self.mlp.gate_proj.weight)
        # Pre-norm: the residual stream is never normalised; each branch reads a
        # normalised copy and adds its result back.
        h = x + self.self_attn(self.input_layernorm(x), attn_mask=attn_mask, positions=positions)
        return h + self.mlp(self.post_attention_layernorm(h))  # (B, N, D)
    # --8<-- [end:layer]
