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

__all__ = ["softcap", "softcap_attention", "SoftCap", "OutputGate", "split_fused_q_gate"]


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


def _check_capped_scores(scores: object) -> None:
    if not isinstance(scores, torch.Tensor) or not scores.is_floating_point():
        got = scores.dtype if isinstance(scores, torch.Tensor) else type(scores).__name__
        raise TypeError(f"scores must be a floating torch.Tensor, got {got}")


def _check_gate_inputs(x: object, out: object, weight: torch.Tensor, width: int) -> None:
    """x ``(B, N, D)`` and out ``(B, N, H * d)``, floating, on the device (and dtype) of the gate's weight."""
    for name, t in (("x", x), ("out", out)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"{name} must be a floating torch.Tensor, got {got}")
    if x.dim() != 3 or x.shape[-1] != weight.shape[-1]:
        raise ValueError(f"x must be (B, N, D) with D = {weight.shape[-1]}, got {tuple(x.shape)}")
    if out.dim() != 3 or out.shape[-1] != width or out.shape[:2] != x.shape[:2]:
        raise ValueError(
            f"out must be (B, N, H * d) = ({x.shape[0]}, {x.shape[1]}, {width}) to match x, got {tuple(out.shape)}"
        )
    _check_like_module("x", x, weight)
    _check_like_module("out", out, weight)


def _check_cap(cap: object) -> float:
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not cap > 0 or cap == float("inf"):
        raise ValueError(f"cap must be a positive finite number, got {cap!r}")
    return float(cap)


# --8<-- [start:softcap]
def softcap(scores: torch.Tensor, cap: float) -> torch.Tensor:
    """``cap * tanh(scores / cap)``: close to the identity for ``|s| << cap``,
    never beyond ``+-cap``."""
    _check_capped_scores(scores)
    cap = _check_cap(cap)
    return cap * torch.tanh(scores / cap)


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
        attn_mask: boolean, True = may attend, ``(N, M)`` or ``(B, H or 1, N, M)``.
        scale: the score scale; ``None`` means ``1 / sqrt(d)``.

    Returns:
        ``(B, H, N, d_v)``.
    """
    _check_kernel_args(q, k, v, attn_mask, scale)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype  # softmax in float32 for half
    scores = (q.to(acc) @ k.to(acc).transpose(-2, -1)) * scale  # (B, H, N, d) @ (B, H, d, M) -> (B, H, N, M)
    scores = softcap(scores, cap)  # bounded to (-c, c) before the mask
    if attn_mask is not None:
        # Neutralise rows with no allowed key before the softmax (no NaN, no
        # NaN gradient), then zero their output.
        empty = ~attn_mask.any(dim=-1, keepdim=True)  # (..., N, 1)
        scores = scores.masked_fill(~attn_mask & ~empty, float("-inf"))
    weights = scores.softmax(dim=-1)  # (B, H, N, M)
    if attn_mask is not None:
        weights = weights.masked_fill(empty, 0.0)
    return (weights @ v.to(acc)).to(v.dtype)  # (B, H, N, M) @ (B, H, M, d_v) -> (B, H, N, d_v)
# --8<-- [end:softcap]


class SoftCap(nn.Module):
    """Gemma 2's attention kernel: ``softcap_attention`` with a fixed cap.

    Pass it as ``attend`` to the modern block's ``DecoderAttention``.

    Args:
        cap: c, 50.0 in Gemma 2.
    """

    def __init__(self, cap: float = 50.0) -> None:
        super().__init__()
        self.cap = _check_cap(cap)

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        scale: float | None = None,
    ) -> torch.Tensor:
        return softcap_attention(q, k, v, cap=self.cap, attn_mask=attn_mask, scale=scale)

    def extra_repr(self) -> str:
        return f"cap={self.cap}"


# --8<-- [start:gate]
class OutputGate(nn.Module):
    """``out * sigmoid(x W_g)``: a gate per head (and per channel) on the
    attention output, computed from the layer's input x, before ``o_proj``.

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

    def __init__(self, d_model: int, n_heads: int, d_head: int, *, per: str = "element", bias: bool = False) -> None:
        super().__init__()
        for name, value in (("d_model", d_model), ("n_heads", n_heads), ("d_head", d_head)):
            _positive_int(name, value)
        if per not in ("element", "head"):
            raise ValueError(f"per must be 'element' or 'head', got {per!r}")
        self.n_heads, self.d_head, self.per = n_heads, d_head, per
        self.gate_proj = nn.Linear(d_model, n_heads * d_head if per == "element" else n_heads, bias=bias)

    def forward(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        h, d = self.n_heads, self.d_head
        _check_gate_inputs(x, out, self.gate_proj.weight, h * d)
        gate = torch.sigmoid(self.gate_proj(x))  # (B, N, D) -> (B, N, H*d) or (B, N, H)
        if self.per == "head":
            gate = gate.repeat_interleave(d, dim=-1)  # (B, N, H) -> (B, N, H*d): one value per head
        return out * gate  # (B, N, H*d)
# --8<-- [end:gate]


def split_fused_q_gate(weight: torch.Tensor, n_heads: int, d_head: int) -> tuple[torch.Tensor, torch.Tensor]:
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
    _positive_int("n_heads", n_heads)
    _positive_int("d_head", d_head)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or weight.shape[0] != 2 * n_heads * d_head:
        got = tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__
        raise ValueError(f"weight must be (H * 2d, D) with H * 2d = {2 * n_heads * d_head}, got {got}")
    per_head = weight.view(n_heads, 2 * d_head, -1)  # (H * 2d, D) -> (H, 2d, D)
    q_weight = per_head[:, :d_head].reshape(n_heads * d_head, -1)  # (H * d, D)
    gate_weight = per_head[:, d_head:].reshape(n_heads * d_head, -1)  # (H * d, D)
    return q_weight, gate_weight
