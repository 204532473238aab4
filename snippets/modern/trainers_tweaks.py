"""The trainers' tweaks: small changes to causal attention, each with an off switch.

Papers and code:
    Zhou, Wu, Jiang, Obeid and Lan (2024), "Value Residual Learning",
    arXiv:2410.17897 (ResFormer: every later layer attends over a mix of its own
    values and the first layer's, 0.5 and 0.5 in the authors' code). nanochat
    and modded-nanogpt add a per-token value embedding instead, scaled by a
    sigmoid gate that lies strictly between 0 and its top (3 in nanochat).
    Golovneva, Wang, Weston and Sukhbaatar (2025), "Multi-Token Attention",
    arXiv:2504.00927 (a per-head 2-D convolution over the scores before the
    softmax and over the weights after it; the key axis of the kernel is centred,
    and causality comes from zeroing future scores before each convolution and
    masking them after it).
    Allen-Zhu (2025), "Physics of Language Models: Part 4.1, Architecture Design
    and the Magic of Canon Layers", arXiv:2512.17351 (a causal depthwise
    convolution of width 4 added to the hidden states with a residual).
    Zhai (2026), "Exclusive Self Attention", arXiv:2603.09078 (the output of
    each token loses its component along the token's own value).
Off switches: no value embedding (or keep = 1, gate = 0); delta kernels; a zero
Canon kernel; exclusion strength 0. Each gives back what the guide already proves.
Page: docs/modern/trainers-tweaks.md
Tested against: the equations written as loops, F.scaled_dot_product_attention
(is_causal=True) for every off switch, and nn.Conv1d for the Canon layer
(tests/test_trainers_tweaks.py).

Attention here is causal self-attention: q, k and v hold the same N tokens.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["value_residual_attention", "value_gate", "multi_token_attention",
           "delta_kernel", "canon", "exclusive_attention"]


# --8<-- [start:value_residual]
def value_residual(q, k, v, extra, keep, gate, scale):
    """Causal attention over the mixed values keep * v + gate * extra."""
    mixed = keep * v + gate * extra  # (B, H, N, d_v); gate: a number or (B, H, N, 1)
    return F.scaled_dot_product_attention(q, k, mixed, is_causal=True, scale=scale)
# --8<-- [end:value_residual]


# --8<-- [start:value_gate]
def sigmoid_gate(x, weight, top):
    """top * sigmoid(W x[..., :c]): one gate per head and token, inside (0, top)."""
    c = weight.shape[-1]
    logits = x[..., :c] @ weight.transpose(0, 1)  # (B, N, c) @ (c, H) -> (B, N, H)
    return (top * torch.sigmoid(logits)).transpose(1, 2).unsqueeze(-1)  # (B, H, N, 1)
# --8<-- [end:value_gate]


# --8<-- [start:kq_conv]
def kq_conv(scores, kernel, allowed):
    """Per-head 2-D convolution: c_q queries back, c_k keys centred, future zeroed."""
    h, c_q, c_k = kernel.shape
    zeroed = scores.masked_fill(~allowed, 0.0)  # a future score never leaks in
    # (B, H, N + c_q - 1, N + c_k - 1): c_q - 1 rows above, c_k // 2 columns left
    padded = F.pad(zeroed, (c_k // 2, (c_k - 1) // 2, c_q - 1, 0))
    return F.conv2d(padded, kernel.unsqueeze(1), groups=h)  # (B, H, N, N)
# --8<-- [end:kq_conv]


# --8<-- [start:multi_token]
def multi_token(q, k, v, pre, post, scale):
    """MTA: convolve scores, causal softmax, convolve weights, mask, attend."""
    n = q.shape[-2]
    allowed = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()  # (N, N)
    # (B, H, N, d) @ (B, H, d, N) -> (B, H, N, N)
    scores = q @ k.transpose(-2, -1) * scale
    scores = kq_conv(scores, pre, allowed).masked_fill(~allowed, -math.inf)
    weights = torch.softmax(scores, dim=-1)  # the diagonal keeps every row non-empty
    if post is not None:
        weights = kq_conv(weights, post, allowed).masked_fill(~allowed, 0.0)
    return weights @ v  # (B, H, N, N) @ (B, H, N, d_v) -> (B, H, N, d_v)
# --8<-- [end:multi_token]


# --8<-- [start:canon]
def canon_layer(x, kernel):
    """x_t + sum_s w_s * x_(t - c + 1 + s): a causal depthwise convolution, residual."""
    c = kernel.shape[-1]
    past = F.pad(x.transpose(1, 2), (c - 1, 0))  # (B, D, c - 1 + N): zeros before t = 0
    mixed = F.conv1d(past, kernel.unsqueeze(1), groups=x.shape[-1])  # (B, D, N)
    return x + mixed.transpose(1, 2)  # (B, N, D)
# --8<-- [end:canon]


# --8<-- [start:exclusive]
def exclusive(q, k, v, strength, scale, eps):
    """XSA: causal attention minus its component along the token's own value."""
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    along = (y * v).sum(-1, keepdim=True)  # (B, H, N, 1): <y_i, v_i>
    norm2 = (v * v).sum(-1, keepdim=True).clamp_min(eps)  # ||v_i||^2, never 0
    return y - strength * along / norm2 * v  # (B, H, N, d_v)
# --8<-- [end:exclusive]


# --8<-- [start:face]
def value_residual_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    extra: torch.Tensor | None = None, *, keep: float = 0.5,
    gate: float | torch.Tensor = 0.5, scale: float | None = None,
) -> torch.Tensor:
    """Causal attention whose values mix in a second set: keep * v + gate * extra.

    ResFormer passes the first layer's values as ``extra`` with keep = gate =
    0.5; nanochat and modded-nanogpt pass a value embedding of each token with
    keep = 1 and a sigmoid ``gate`` (``value_gate``).

    Args:
        q: queries.
        k: keys.
        v: this layer's values.
        extra: the second values (first layer's, or a value embedding), or
            None for plain causal attention: the off switch.
        keep: weight of this layer's values.
        gate: weight of ``extra``: a number, or one per head and token.
        scale: score scale; default ``1 / sqrt(d)``.

    Returns:
        The attended values in the input dtype.

    Shape:
        q, k ``(B, H, N, d)``; v, extra ``(B, H, N, d_v)``; gate ``(B, H, N, 1)``
        -> ``(B, H, N, d_v)``.
    """
    _check_tweak_qkv(q, k, v, scale, extra=extra, gate=gate)
    if extra is None:  # no second values: the block the guide already proves
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    acc = torch.promote_types(q.dtype, torch.float32)  # mix and attend in float32+
    gate = gate.to(acc) if torch.is_tensor(gate) else gate
    wide = (t.to(acc) for t in (q, k, v, extra))
    return value_residual(*wide, keep, gate, scale).to(q.dtype)


def value_gate(
    x: torch.Tensor, weight: torch.Tensor, *, top: float = 3.0
) -> torch.Tensor:
    """nanochat's value-embedding gate: top * sigmoid of the first c channels.

    Args:
        x: the block's normalised input.
        weight: ``(H, c)``, one row per head; reads only the first c channels.
        top: the gate's supremum (nanochat: 3; modded-nanogpt: 2).

    Returns:
        Gates strictly inside ``(0, top)``, shaped to scale values per head.

    Shape:
        x ``(B, N, D)``, weight ``(H, c)`` with c <= D -> ``(B, H, N, 1)``.
    """
    _check_tweak_gate(x, weight, top)
    return sigmoid_gate(x, weight, top)


def multi_token_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pre: torch.Tensor,
    post: torch.Tensor | None = None, *, scale: float | None = None,
) -> torch.Tensor:
    """Multi-token attention: key-query convolutions before and after the softmax.

    Args:
        q: queries.
        k: keys (the same N tokens).
        v: values.
        pre: the kernel over the scores, ``(H, c_q, c_k)``; entry ``[h, a, b]``
            weighs query ``i - c_q + 1 + a`` and key ``j - c_k // 2 + b``
            (the paper's c_k is odd, so the key axis is centred).
        post: the kernel over the weights, same layout, or None.
        scale: score scale; default ``1 / sqrt(d)``.

    Returns:
        The attended values in the input dtype, computed in float32 or wider.

    Shape:
        q, k ``(B, H, N, d)``; v ``(B, H, N, d_v)`` -> ``(B, H, N, d_v)``.
    """
    _check_tweak_qkv(q, k, v, scale, pre=pre, post=post)
    acc = torch.promote_types(q.dtype, torch.float32)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    post = None if post is None else post.to(acc)
    out = multi_token(q.to(acc), k.to(acc), v.to(acc), pre.to(acc), post, scale)
    return out.to(q.dtype)


def delta_kernel(
    n_heads: int, c_q: int, c_k: int, *, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """The kernel that leaves scores alone: 1 at (current query, centre key).

    Args:
        n_heads: H.
        c_q: queries the kernel reaches back, >= 1.
        c_k: keys it covers, centred, >= 1 (odd in the paper).
        dtype: the kernel's dtype (the attention's).

    Returns:
        ``(H, c_q, c_k)`` zeros with ``[:, -1, c_k // 2] = 1`` (the authors'
        "identity" initialisation).

    Shape:
        -> ``(H, c_q, c_k)``.
    """
    if not all(isinstance(n, int) and n >= 1 for n in (n_heads, c_q, c_k)):
        raise ValueError(f"need ints >= 1, got {n_heads=}, {c_q=}, {c_k=}")
    kernel = torch.zeros(n_heads, c_q, c_k, dtype=dtype)
    kernel[:, -1, c_k // 2] = 1.0
    return kernel


def canon(x: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """A Canon layer: hidden states plus their causal depthwise convolution.

    Args:
        x: hidden states.
        kernel: ``(D, c)``, one filter per channel; ``kernel[:, -1]`` weighs
            the current token, ``kernel[:, 0]`` the one c - 1 steps back.

    Returns:
        ``x`` plus the convolution, in the input dtype.

    Shape:
        x ``(B, N, D)``, kernel ``(D, c)`` -> ``(B, N, D)``.
    """
    _check_tweak_tensor("x", x, ("B", "N", "D"))
    _check_tweak_tensor("kernel", kernel, (x.shape[-1], "c"), ("x", x))
    acc = torch.promote_types(x.dtype, torch.float32)  # sum the taps in float32+
    return canon_layer(x.to(acc), kernel.to(acc)).to(x.dtype)


def exclusive_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, strength: float = 1.0,
    scale: float | None = None, eps: float = 1e-8,
) -> torch.Tensor:
    """Exclusive self attention: causal attention orthogonal to each own value.

    Args:
        q: queries.
        k: keys (the same N tokens).
        v: values, as wide as the output.
        strength: how much of the projection to remove, in [0, 1]; 1 is XSA,
            0 plain attention (modded-nanogpt learns tanh(alpha) per head).
        scale: score scale; default ``1 / sqrt(d)``.
        eps: floor of ``||v_i||^2`` so a zero value divides safely.

    Returns:
        The attended values in the input dtype.

    Shape:
        q, k ``(B, H, N, d)``; v ``(B, H, N, d_v)`` -> ``(B, H, N, d_v)``.
    """
    _check_tweak_qkv(q, k, v, scale, strength=strength, eps=eps)
    acc = torch.promote_types(q.dtype, torch.float32)  # the projection in float32+
    wide = (t.to(acc) for t in (q, k, v))
    return exclusive(*wide, strength, scale, eps).to(q.dtype)
# --8<-- [end:face]


# --8<-- [start:validate]
def _check_tweak_tensor(name, t, shape, like=None) -> None:
    """A floating tensor of ``shape`` (str: any size); like = (name, peer) to match."""
    peer, ref = like or (name, t)
    ok = torch.is_tensor(t) and t.is_floating_point()
    if not ok or t.dim() != len(shape) or any(s != n for s, n in zip(shape, t.shape)
            if isinstance(s, int)) or (t.device, t.dtype) != (ref.device, ref.dtype):
        got = f"{tuple(t.shape)} {t.dtype} on {t.device}" if torch.is_tensor(t) else t
        raise ValueError(f"{name} must be a floating ({', '.join(map(str, shape))}) "
                         f"tensor on {peer}'s device and dtype, got {got}")


def _check_tweak_number(name, value, high=math.inf) -> None:
    """A number in (0, high), or [0, 1] for a strength (high = 1)."""
    if not (isinstance(value, (int, float)) and 0 <= value <= high and (
            value > 0 or high == 1) and value < math.inf):
        span = "[0, 1]" if high == 1 else "(0, inf)"
        raise ValueError(f"{name} must be a number in {span}, got {value!r}")


def _check_tweak_qkv(q, k, v, scale, **extras) -> None:
    """Self-attention q, k (B, H, N, d), v (B, H, N, d_v); extra, gate, kernels."""
    _check_tweak_tensor("q", q, ("B", "H", "N", "d"))
    _check_tweak_tensor("k", k, q.shape, ("q", q))
    _check_tweak_tensor("v", v, (*q.shape[:3], "d_v"), ("q", q))
    head = (q.shape[1], "c_q", "c_k")
    shapes = {"extra": v.shape, "gate": (*q.shape[:3], 1), "pre": head, "post": head}
    for name, t in {**extras, "scale": 1.0 if scale is None else scale}.items():
        if name not in shapes:  # strength in [0, 1], eps and scale > 0
            _check_tweak_number(name, t, 1 if name == "strength" else math.inf)
        elif t is not None and not (name == "gate" and isinstance(t, (int, float))):
            _check_tweak_tensor(name, t, shapes[name], ("q", q))


def _check_tweak_gate(x, weight, top) -> None:
    """x (B, N, D); weight (H, c) reading c <= D channels; top > 0."""
    _check_tweak_tensor("x", x, ("B", "N", "D"))
    _check_tweak_tensor("weight", weight, ("H", "c"), ("x", x))
    _check_tweak_number("top", top)
    if weight.shape[-1] > x.shape[-1]:
        raise ValueError(f"weight must have c <= {x.shape[-1]}, got {weight.shape[-1]}")
# --8<-- [end:validate]
