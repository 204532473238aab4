"""Gates and caps: the output gate of gated attention, and logit soft-capping.

Papers:
    Qiu, Wang, Zheng, Huang, Wen, Yang, Men, Yu, Huang, Huang, Liu, Zhou and
    Lin (2025), "Gated Attention for Large Language Models: Non-linearity,
    Sparsity, and Attention-Sink-Free", arXiv:2505.06708 (a sigmoid gate,
    computed from the layer's input, multiplies each head's attention output
    before the output projection; used in Qwen3-Next).
    Gemma Team (2024), "Gemma 2: Improving Open Language Models at a Practical
    Size", arXiv:2408.00118 (attention logits soft-capped as c * tanh(s / c),
    c = 50).
Page: docs/modern/gates-and-caps.md
Tested against: the equations written out in tests/test_gates.py; Hugging
Face transformers' Qwen3NextAttention (gated) and Gemma2Attention (eager,
soft-capped), each built from a tiny random config with its weights copied in,
outputs and gradients (tests/test_modern_transformers.py).

Both plug into the modern block's ``DecoderAttention``: ``SoftCap(c)`` as its
``attend`` kernel, ``OutputGate(...)`` as its ``output_gate``.

Masks: a boolean ``attn_mask`` is True where a query MAY attend. A query row
with no allowed key returns zeros.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = [
    "softcap", "softcap_attention", "SoftCap", "OutputGate", "split_fused_q_gate"
]


def _got(t: object) -> str:
    """What a message says it got: a tensor's dtype, shape and device, else t."""
    is_tensor = torch.is_tensor(t)
    return f"{t.dtype} {tuple(t.shape)} on {t.device}" if is_tensor else repr(t)


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


# --8<-- [start:masked_softmax]
def _masked_softmax(
    scores: torch.Tensor, allowed: torch.Tensor | None
) -> torch.Tensor:
    """Softmax over the last dim where allowed (True = may attend); empty rows -> 0."""
    if allowed is None:
        return torch.softmax(scores, dim=-1)
    # Neutral scores in a row with no allowed key: zeros out, no NaN in the gradient.
    empty = ~allowed.any(dim=-1, keepdim=True)
    scores = scores.masked_fill(~allowed, float("-inf")).masked_fill(empty, 0.0)
    return torch.softmax(scores, dim=-1).masked_fill(~allowed, 0.0)
# --8<-- [end:masked_softmax]


# --8<-- [start:softcap]
def softcap(scores: torch.Tensor, cap: float) -> torch.Tensor:
    """c tanh(s / c): the identity for |s| << c, never beyond +-c."""
    _check_num(cap=cap)  # any scores: integers are promoted
    return cap * torch.tanh(scores / cap)


def capped_attention(q, k, v, cap: float, allowed, scale: float) -> torch.Tensor:
    """softmax(mask(c tanh(q k^T scale / c))) v: cap first, then mask."""
    # (B, H, N, d) @ (B, H, d, M) -> (B, H, N, M)
    scores = softcap((q @ k.transpose(-2, -1)) * scale, cap)
    # Masking after the cap keeps -inf: tanh would turn it into a finite -c.
    weights = _masked_softmax(scores, allowed)  # (B, H, N, M)
    return weights @ v  # (B, H, N, M) @ (B, H, M, d_v) -> (B, H, N, d_v)
# --8<-- [end:softcap]


def softcap_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    cap: float,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Softmax attention on soft-capped scores: cap first, then mask, then softmax.

    Args:
        q: ``(B, H, N, d)``.
        k: ``(B, H, M, d)`` (key/value heads already repeated for GQA).
        v: ``(B, H, M, d_v)``.
        cap: c > 0.
        attn_mask: boolean, True = may attend, broadcastable to ``(B, H, N, M)``.
        scale: the score scale; ``None`` means ``1 / sqrt(d)``.

    Returns:
        ``(B, H, N, d_v)``; a row with no allowed key is zero. Scores and
        softmax run in float32 for half inputs.
    """
    _check_attend_args(q, k, v, attn_mask, scale)  # softcap checks cap
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    out = capped_attention(q.to(acc), k.to(acc), v.to(acc), cap, attn_mask, scale)
    return out.to(v.dtype)


class SoftCap(nn.Module):
    """Gemma 2's attention kernel: ``softcap_attention`` with a fixed cap.

    Pass it as ``attend`` to the modern block's ``DecoderAttention``.

    Args:
        cap: c, 50.0 in Gemma 2.
    """

    def __init__(self, cap: float = 50.0) -> None:
        super().__init__()
        self.cap = cap  # softcap checks it on every call

    def forward(self, q, k, v, attn_mask=None, scale=None) -> torch.Tensor:
        cap = self.cap
        return softcap_attention(q, k, v, cap=cap, attn_mask=attn_mask, scale=scale)

    def extra_repr(self) -> str:
        return f"cap={self.cap}"


class OutputGate(nn.Module):
    """``out * sigmoid(x W_g)``: a gate on each head's output, from the layer's input.

    Applied to the concatenated heads before ``o_proj``.

    Args:
        d_model: D, the width of x.
        n_heads: H.
        d_head: d.
        per: ``"element"``: one gate for each of the H * d channels (the
            paper's best variant, used in Qwen3-Next); ``"head"``: one gate
            per head, shared by its d channels.
        bias: give the gate projection a bias.

    Shape:
        ``x`` ``(B, N, D)`` and ``out`` ``(B, N, H * d)`` -> ``(B, N, H * d)``.
    """

    def __init__(
        self, d_model: int, n_heads: int, d_head: int, *, per: str = "element",
        bias: bool = False,
    ) -> None:
        super().__init__()
        _check_num(d_model=d_model, n_heads=n_heads, d_head=d_head)
        if per not in ("element", "head"):
            raise ValueError(f"per must be 'element' or 'head', got {per!r}")
        self.n_heads, self.d_head, self.per = n_heads, d_head, per
        width = n_heads * d_head if per == "element" else n_heads
        self.gate_proj = nn.Linear(d_model, width, bias=bias)

    # --8<-- [start:gate]
    def forward(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """out * sigmoid(x W_g), one gate per channel or per head."""
        self._check_forward(x, out)
        gate = torch.sigmoid(self.gate_proj(x))  # (B, N, H*d) or (B, N, H)
        if self.per == "head":  # (B, N, H) -> (B, N, H*d): one value per head
            gate = gate.repeat_interleave(self.d_head, dim=-1)
        return out * gate  # (B, N, H*d)
    # --8<-- [end:gate]

    def _check_forward(self, x: torch.Tensor, out: torch.Tensor) -> None:
        _check_float_tensor("x", x, self.gate_proj.in_features, self.gate_proj.weight)
        _check_float_tensor("out", out, (*x.shape[:-1], self.n_heads * self.d_head), x)


def split_fused_q_gate(
    weight: torch.Tensor, n_heads: int, d_head: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Split Qwen3-Next's fused ``q_proj`` weight into query and gate weights.

    Qwen3-Next projects ``2 d`` rows per head, the head's query rows first
    and its gate rows next: ``[q_0 | g_0 | q_1 | g_1 | ...]``.

    Args:
        weight: ``(H * 2d, D)``.
        n_heads: H.
        d_head: d.

    Returns:
        ``(q_weight, gate_weight)``, each ``(H * d, D)``.
    """
    _check_num(n_heads=n_heads, d_head=d_head)
    _check_float_tensor("weight", weight, (2 * n_heads * d_head, None))
    per_head = weight.view(n_heads, 2 * d_head, -1)  # (H * 2d, D) -> (H, 2d, D)
    q_weight = per_head[:, :d_head].reshape(n_heads * d_head, -1)  # (H * d, D)
    gate_weight = per_head[:, d_head:].reshape(n_heads * d_head, -1)  # (H * d, D)
    return q_weight, gate_weight
