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

Parameter names follow Hugging Face's port of Llama (``self_attn.q_proj``,
``mlp.gate_proj``, ``input_layernorm``, ...), so the state dict of a
``transformers`` ``LlamaDecoderLayer`` loads into ``DecoderLayer`` unchanged;
that port pairs RoPE dimensions (i, i + d/2), the default here. Meta's own
Llama code names its weights ``wq``, ``w1``, ``w2``, ``w3`` and rotates
adjacent pairs (2i, 2i + 1): load such weights with ``interleaved=True``
(or permute their q/k rows once with ``meta_to_half_split``).

RMSNorm's eps defaults to 1e-6 (Qwen, DeepSeek, Gemma); Llama 2 and 3 use
1e-5: pass ``norm_eps=1e-5`` for them.

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
    "rotary_tables",
    "apply_rotary",
    "meta_to_half_split",
    "sdpa_attend",
    "DecoderAttention",
    "DecoderLayer",
]


# --8<-- [start:checks]
def _check_num(low: float = 0.0, optional: bool = False, **values: object) -> None:
    """Each value (size, eps, scale) a finite number > low, or None where optional."""
    for name, value in values.items():
        ok = isinstance(value, (int, float)) and low < value < math.inf
        if not ok and not (optional and value is None):
            raise ValueError(f"{name} must be a finite number > {low}, got {value!r}")


def _check_float_tensor(name: str, t: object, shape, like=None, dtype=True) -> None:
    """A float tensor of ``shape`` (None: any size; an int d: (..., d)) like ``like``.

    ``like`` fixes the device and, unless ``dtype`` is False or autocast is on,
    the dtype.
    """
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        raise TypeError(f"{name} must be a float tensor, got {getattr(t, 'dtype', t)}")
    shape = (None,) * (t.dim() - 1) + (shape,) if isinstance(shape, int) else shape
    like, kind = t if like is None else like, t.device.type
    cast = torch.amp.is_autocast_available(kind) and torch.is_autocast_enabled(kind)
    dt = like.dtype if dtype and not cast else t.dtype  # the dtype t must have
    fits = t.dim() == len(shape) and all(s in (None, n) for s, n in zip(shape, t.shape))
    if not fits or (t.device, t.dtype) != (like.device, dt):
        raise ValueError(f"{name} must be {dt} {shape} on {like.device}, got {_got(t)}")


def _check_bool_mask(name: str, mask: object, shape: tuple, device) -> None:
    """None, or a bool mask (True = may attend) on device that broadcasts to shape."""
    if mask is not None and (getattr(mask, "dtype", None) != torch.bool
                             or mask.dim() > len(shape) or mask.device != device or any(
            a not in (1, b) for a, b in zip(mask.shape[::-1], shape[::-1]))):
        raise ValueError(f"{name} must be bool and broadcast to {shape} on {device}, "
                         f"got {_got(mask)}")


def _check_attend_args(q, k, v, attn_mask, scale) -> None:
    """q (B, H, N, d), k (B, H, M, d), v (B, H, M, d_v), a mask for (B, H, N, M)."""
    _check_float_tensor("q", q, (None,) * 4)
    _check_float_tensor("k", k, (*q.shape[:2], None, q.shape[3]), like=q)
    _check_float_tensor("v", v, (*k.shape[:3], None), like=q)
    _check_bool_mask("attn_mask", attn_mask, (*q.shape[:3], k.shape[2]), q.device)
    _check_num(optional=True, scale=scale)
# --8<-- [end:checks]


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


class RMSNorm(nn.Module):
    """Root-mean-square normalisation: ``x / sqrt(mean(x^2) + eps) * weight``.

    Unlike LayerNorm it neither subtracts the mean nor adds a bias.

    Args:
        d: the width of the last dimension.
        eps: added to the mean square before the square root. 1e-6 here, as
            in Qwen, DeepSeek and Gemma; Llama 2 and 3 use 1e-5.

    Shape:
        ``(..., d)`` -> ``(..., d)``.
    """

    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        _check_num(d=d, eps=eps)
        self.d, self.eps = d, float(eps)
        self.weight = nn.Parameter(torch.ones(d))

    # --8<-- [start:rms_norm]
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x / sqrt(mean(x^2) + eps) * weight, squared in float32 for half inputs."""
        _check_float_tensor("x", x, self.d, self.weight, dtype=False)  # (..., d)
        # x^2 overflows float16 above 256: square in float32.
        acc = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
        h = x.to(acc)
        inv_rms = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)  # (..., 1)
        return self.weight * (h * inv_rms).to(x.dtype)  # (..., d)
    # --8<-- [end:rms_norm]

    def extra_repr(self) -> str:
        return f"{self.d}, eps={self.eps}"


class SwiGLU(nn.Module):
    """The gated feed-forward layer: ``down(silu(gate(x)) * up(x))``.

    Args:
        d_model: D.
        d_ff: the hidden width (see ``swiglu_width`` for Llama's choice).
        bias: give the three projections a bias (gpt-oss has them; Llama,
            Qwen and Gemma do not).

    Shape:
        ``(B, N, D)`` -> ``(B, N, D)``.
    """

    def __init__(self, d_model: int, d_ff: int, *, bias: bool = False) -> None:
        super().__init__()
        _check_num(d_model=d_model, d_ff=d_ff)
        self.gate_proj = nn.Linear(d_model, d_ff, bias=bias)  # W: D -> d_ff
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)  # V: D -> d_ff
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)  # W_2: d_ff -> D

    # --8<-- [start:swiglu]
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """W_2 (silu(x W) * (x V))."""
        _check_float_tensor("x", x, self.gate_proj.in_features, self.up_proj.weight)
        # (B, N, D) -> (B, N, d_ff)
        hidden = F.silu(self.gate_proj(x)) * self.up_proj(x)
        return self.down_proj(hidden)  # (B, N, d_ff) -> (B, N, D)
    # --8<-- [end:swiglu]


def swiglu_width(
    d_model: int, multiple_of: int = 256, ffn_dim_multiplier: float | None = None
) -> int:
    """Llama's hidden width: 2/3 of 4D, times a multiplier, rounded up.

    2/3 of 4D gives the three matrices the parameters of a 4D two-matrix MLP.

    Args:
        d_model: D.
        multiple_of: round up to a multiple of this.
        ffn_dim_multiplier: an optional factor (1.3 for Llama 3 8B).

    Returns:
        The width: ``swiglu_width(4096)`` = 11008 (Llama 2 7B),
        ``swiglu_width(4096, 1024, 1.3)`` = 14336 (Llama 3 8B).
    """
    _check_num(d_model=d_model, multiple_of=multiple_of)
    _check_num(optional=True, ffn_dim_multiplier=ffn_dim_multiplier)
    hidden = int(2 * (4 * d_model) / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)




def meta_to_half_split(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Permute a q or k projection from Meta's RoPE pairs to Hugging Face's.

    Meta's Llama code rotates dimensions (2i, 2i + 1) of each head; Hugging
    Face's port rotates (i, i + d/2) and permutes the rows of ``wq`` and
    ``wk`` once when it converts a checkpoint. This is that permutation: with
    it, Meta-format weights run under ``interleaved=False``; without it they
    need ``interleaved=True``. It assumes the whole head rotates.

    Args:
        weight: ``(H * d, D)``, the rows of ``wq`` (or ``wk`` with H_kv heads).
        n_heads: the heads in those rows.

    Returns:
        ``(H * d, D)``: row 2i + c of each head moves to c * d/2 + i.
    """
    _check_num(n_heads=n_heads)
    _check_float_tensor("weight", weight, (None, None))
    rows, cols = weight.shape
    if rows % (2 * n_heads):  # H heads of d rows, d even
        raise ValueError(f"weight rows must be a multiple of {2 * n_heads}, got {rows}")
    # (H*d, D) -> (H, d/2, 2, D) -> (H, 2, d/2, D) -> (H*d, D)
    pairs = weight.reshape(n_heads, rows // n_heads // 2, 2, cols)
    return pairs.transpose(1, 2).reshape(rows, cols)


def sdpa_attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Plain softmax attention through ``F.scaled_dot_product_attention``.

    Args:
        q: ``(B, H, N, d)``.
        k: ``(B, H, M, d)``, key/value heads already repeated.
        v: ``(B, H, M, d_v)``.
        attn_mask: boolean, True = may attend, anything that broadcasts to
            ``(B, H, N, M)`` (as SDPA accepts).
        scale: the score scale; ``None`` means ``1 / sqrt(d)``.

    Returns:
        ``(B, H, N, d_v)``; a row with no allowed key is zero (some GPU
        backends return unmasked attention for it, so it is zeroed here).
    """
    _check_attend_args(q, k, v, attn_mask, scale)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale)
    if attn_mask is not None:
        out = out.masked_fill(~attn_mask.any(-1, keepdim=True), 0.0)
    return out  # (B, H, N, d_v)


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
        norm_eps: the eps of the QK-norms (1e-6; Llama-family models use 1e-5).
        rope_base: the RoPE base; ``None`` turns RoPE off.
        rotary_dim: how many dimensions of each head rotate (even, <= d);
            ``None`` means all d.
        interleaved: rotate pairs (2i, 2i + 1) as Meta's Llama code does;
            ``False`` (the default) pairs (i, i + r/2) as Hugging Face's port.
        scale: the score scale; ``None`` means ``1 / sqrt(d)``.
        attend: the kernel ``attend(q, k, v, attn_mask=..., scale=...)``;
            ``None`` means ``sdpa_attend``.
        output_gate: a module called as ``output_gate(x, out)`` on the
            concatenated heads ``out`` ``(B, N, H * d)`` before ``o_proj``.

    Shape:
        ``(B, N, D)`` -> ``(B, N, D)``. ``forward`` takes ``attn_mask``
        (boolean, True = may attend, broadcastable to ``(B, H, N, N)``, e.g. a
        key-padding mask ``(B, 1, 1, N)``; combined with the causal mask),
        ``positions`` (RoPE positions ``(N,)`` or ``(B, N)``, default
        ``0 .. N - 1``) and ``is_causal``.
    """

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
        interleaved: bool = False,
        scale: float | None = None,
        attend: Callable[..., torch.Tensor] | None = None,
        output_gate: nn.Module | None = None,
    ) -> None:
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        _check_num(d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads)
        _check_num(optional=True, d_head=d_head, scale=scale)
        _check_num(1.0, optional=True, rope_base=rope_base)
        if n_heads % n_kv_heads or d_head is None and d_model % n_heads:
            raise ValueError(f"n_kv_heads must divide n_heads and n_heads d_model, got"
                             f" n_kv_heads={n_kv_heads}, n_heads={n_heads}, {d_model=}")
        if qk_norm not in (None, "head", "full"):
            raise ValueError(f"qk_norm must be None, 'head' or 'full', got {qk_norm!r}")
        d_head = d_model // n_heads if d_head is None else d_head
        rotary_dim = d_head if rotary_dim is None else rotary_dim
        if rope_base is not None and (rotary_dim % 2 or not 2 <= rotary_dim <= d_head):
            raise ValueError(f"rotary_dim must be even, 2..{d_head}, got {rotary_dim}")
        self.d_model, self.n_heads = d_model, n_heads
        self.n_kv_heads, self.d_head = n_kv_heads, d_head
        self.qk_norm, self.rope_base, self.rotary_dim = qk_norm, rope_base, rotary_dim
        self.interleaved = interleaved
        self.scale = d_head**-0.5 if scale is None else float(scale)
        self.q_proj = nn.Linear(d_model, n_heads * d_head, bias=bias)  # D -> H * d
        self.k_proj = nn.Linear(d_model, n_kv_heads * d_head, bias=bias)  # D -> H_kv d
        self.v_proj = nn.Linear(d_model, n_kv_heads * d_head, bias=bias)  # D -> H_kv d
        self.o_proj = nn.Linear(n_heads * d_head, d_model, bias=bias)  # H * d -> D
        if qk_norm is not None:  # "head": over d; "full": over all heads' H * d
            width = (d_head, d_head) if qk_norm == "head" else (
                n_heads * d_head, n_kv_heads * d_head)
            self.q_norm = RMSNorm(width[0], norm_eps)
            self.k_norm = RMSNorm(width[1], norm_eps)
        self.attend = sdpa_attend if attend is None else attend
        self.output_gate = output_gate

    # --8<-- [start:qk_norm]
    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Project and split into heads, with QK-norm over all heads or per head."""
        b, n, _ = x.shape
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)  # (B, N, H*d), ...
        if self.qk_norm == "full":  # OLMo 2: one norm across all heads
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(b, n, -1, self.d_head).transpose(1, 2)  # (B, H, N, d)
        k = k.view(b, n, -1, self.d_head).transpose(1, 2)  # (B, H_kv, N, d)
        v = v.view(b, n, -1, self.d_head).transpose(1, 2)  # (B, H_kv, N, d)
        if self.qk_norm == "head":  # Qwen3, Gemma 3: each head on its own
            q, k = self.q_norm(q), self.k_norm(k)
        return q, k, v
    # --8<-- [end:qk_norm]

    # --8<-- [start:forward]
    def forward(self, x, *, attn_mask=None, positions=None, is_causal=True):
        """Grouped-query attention with RoPE: (B, N, D) -> (B, N, D)."""
        self._check_forward(x, attn_mask)
        b, n, _ = x.shape
        q, k, v = self.heads(x)  # (B, H, N, d), (B, H_kv, N, d), (B, H_kv, N, d)
        if self.rope_base is not None:
            pos = torch.arange(n, device=x.device) if positions is None else positions
            cos, sin = rotary_tables(pos, self.rotary_dim, self.rope_base)
            q = apply_rotary(q, cos, sin, interleaved=self.interleaved)
            k = apply_rotary(k, cos, sin, interleaved=self.interleaved)
        k = k.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)  # (B, H, N, d)
        v = v.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)  # (B, H, N, d)
        allowed = self._allowed(attn_mask, is_causal, n, x.device)
        out = self.attend(q, k, v, attn_mask=allowed, scale=self.scale)  # (B, H, N, d)
        out = out.transpose(1, 2).reshape(b, n, -1)  # (B, N, H*d)
        if self.output_gate is not None:
            out = self.output_gate(x, out)  # gated before the output projection
        return self.o_proj(out)  # (B, N, H*d) -> (B, N, D)
    # --8<-- [end:forward]

    def _check_forward(self, x, attn_mask) -> None:
        """x and the mask; rotary_tables and apply_rotary check the positions."""
        _check_float_tensor("x", x, (None, None, self.d_model), self.q_proj.weight)
        b, n, _ = x.shape
        _check_bool_mask("attn_mask", attn_mask, (b, self.n_heads, n, n), x.device)

    @staticmethod
    def _allowed(attn_mask, is_causal: bool, n: int, device) -> torch.Tensor | None:
        """The boolean mask the kernel sees: the caller's mask AND causality."""
        if not is_causal:
            return attn_mask
        causal = torch.ones(n, n, dtype=torch.bool, device=device).tril()  # (N, N)
        return causal if attn_mask is None else attn_mask & causal


class DecoderLayer(nn.Module):
    """A pre-norm decoder layer: ``h = x + attn(norm(x)); y = h + mlp(norm(h))``.

    Args:
        attention: the self-attention, called as ``attention(x, attn_mask=...,
            positions=...)`` and returning ``(B, N, D)`` (e.g. ``DecoderAttention``).
        d_model: D.
        d_ff: the SwiGLU hidden width.
        norm_eps: the eps of the two RMSNorms: 1e-6 (Qwen, DeepSeek, Gemma);
            pass 1e-5 for Llama 2 and 3.

    Shape:
        ``(B, N, D)`` -> ``(B, N, D)``.
    """

    def __init__(
        self, attention: nn.Module, d_model: int, d_ff: int, *, norm_eps: float = 1e-6
    ) -> None:
        super().__init__()
        self.self_attn = attention
        self.mlp = SwiGLU(d_model, d_ff)
        self.input_layernorm = RMSNorm(d_model, norm_eps)  # before attention
        self.post_attention_layernorm = RMSNorm(d_model, norm_eps)  # before the MLP

    # --8<-- [start:layer]
    def forward(self, x, *, attn_mask=None, positions=None):
        """Pre-norm: each branch reads a normalised copy and adds its result back."""
        # The residual stream itself is never normalised.
        normed = self.input_layernorm(x)
        # (B, N, D) + (B, N, D)
        h = x + self.self_attn(normed, attn_mask=attn_mask, positions=positions)
        return h + self.mlp(self.post_attention_layernorm(h))  # (B, N, D)
    # --8<-- [end:layer]
