"""Attention sinks: StreamingLLM's kept first tokens, and gpt-oss's learned sink logit.

Papers:
    Xiao, Tian, Chen, Han and Lewis (2023), "Efficient Streaming Language
    Models with Attention Sinks", arXiv:2309.17453 (keep the first tokens and
    a rolling window in the KV cache; section 3.2 gives positions by place in
    the cache and caches keys before RoPE).
    OpenAI (2025), "gpt-oss-120b & gpt-oss-20b Model Card", arXiv:2508.10925
    (a learned per-head bias in the softmax denominator).
Page: docs/modern/attention-sinks.md
Tested against: dense softmax attention under ``sink_window_mask`` with RoPE at
the original positions, and, for the cache positions StreamingLLM uses, dense
attention over the kept tokens re-numbered 0, 1, ...; the identity
``softmax over [scores, sink]`` = ``plain output * sigmoid(logsumexp(scores) - sink)``
written out independently; Hugging Face transformers' GptOssAttention with its
weights copied in, outputs and gradients (tests/test_sinks.py,
tests/test_modern_transformers.py).

Masks: a boolean ``attn_mask`` is True where a query MAY attend. A query row
with no allowed key returns zeros (with a learned sink, all its weight goes
to the sink, which carries no value).

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = [
    "sink_attention",
    "LearnedSinks",
    "sink_window_mask",
    "SinkCache",
    "streaming_attention",
    "rope_tables",
    "apply_rope",
]


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


def _check_sinks(sinks: object, q: torch.Tensor) -> None:
    h = q.shape[1]
    if not isinstance(sinks, torch.Tensor) or not sinks.is_floating_point() or tuple(sinks.shape) != (h,):
        got = tuple(sinks.shape) if isinstance(sinks, torch.Tensor) else type(sinks).__name__
        raise ValueError(f"sinks must be a floating tensor of shape (H,) = ({h},), got {got}")
    if sinks.device != q.device:
        raise ValueError(f"sinks must be on the device of q {q.device}, got {sinks.device}")


def _check_finite(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")


def _check_cache_update(k: object, v: object, keys: torch.Tensor | None, values: torch.Tensor | None) -> None:
    """New keys ``(B, H, n, d)`` and values ``(B, H, n, d_v)`` that fit each other and the cached ones."""
    for name, t, cached in (("k", k, keys), ("v", v, values)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"{name} must be a floating torch.Tensor, got {got}")
        if cached is not None and (t.dtype != cached.dtype or t.device != cached.device):
            raise TypeError(f"{name} must have the dtype and device of the cached ones ({cached.dtype}, "
                            f"{cached.device}), got {t.dtype} on {t.device}")
    if k.dim() != 4 or v.dim() != 4 or k.shape[:3] != v.shape[:3]:
        raise ValueError(f"k and v must be (B, H, n, d) with the same (B, H, n), got {tuple(k.shape)} and {tuple(v.shape)}")
    if k.dtype != v.dtype or k.device != v.device:
        raise TypeError(f"k and v must share one dtype and device, got {k.dtype} on {k.device} and {v.dtype} on {v.device}")
    if keys is not None and (k.shape[:2] != keys.shape[:2] or k.shape[-1] != keys.shape[-1]
                             or v.shape[-1] != values.shape[-1]):
        raise ValueError(f"k and v must have (B, H) = {tuple(keys.shape[:2])}, d = {keys.shape[-1]} and "
                         f"d_v = {values.shape[-1]} like the cached ones, got {tuple(k.shape)} and {tuple(v.shape)}")


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


def _int_at_least(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return value


# --8<-- [start:sink_attention]
def sink_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    sinks: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Softmax attention whose denominator holds one extra learned logit per head.

    The sink is a key with logit ``sinks[h]`` and no value: it takes a share
    of the weight and gives nothing back, so a head may attend to "nothing".

    Args:
        q: ``(B, H, N, d)``.
        k: ``(B, H, M, d)`` (key/value heads already repeated for GQA).
        v: ``(B, H, M, d_v)``.
        sinks: ``(H,)``, one logit per head.
        attn_mask: boolean, True = may attend, ``(N, M)`` or ``(B, H or 1, N, M)``.
        scale: the score scale; ``None`` means ``1 / sqrt(d)``.

    Returns:
        ``(B, H, N, d_v)``.
    """
    _check_kernel_args(q, k, v, attn_mask, scale)
    _check_sinks(sinks, q)
    b, h, n, d = q.shape
    m = k.shape[-2]
    scale = d**-0.5 if scale is None else scale
    # Scores and softmax in float32 for half inputs.
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    scores = (q.to(acc) @ k.to(acc).transpose(-2, -1)) * scale  # (B, H, N, d) @ (B, H, d, M) -> (B, H, N, M)
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    sink = sinks.to(acc).view(1, h, 1, 1).expand(b, h, n, 1)  # (H,) -> (B, H, N, 1)
    # The sink logit is finite, so no row is all -inf: a query whose keys are
    # all masked puts all its weight on the sink, and the softmax has no NaN.
    logits = torch.cat((scores, sink), dim=-1)  # (B, H, N, M + 1)
    weights = logits.softmax(dim=-1)[..., :m]  # (B, H, N, M): the sink's share is dropped
    return (weights @ v.to(acc)).to(v.dtype)  # (B, H, N, M) @ (B, H, M, d_v) -> (B, H, N, d_v)
# --8<-- [end:sink_attention]


# --8<-- [start:learned_sinks]
class LearnedSinks(nn.Module):
    """gpt-oss's attention kernel: ``sink_attention`` with a learned logit per head.

    Pass it as ``attend`` to the modern block's ``DecoderAttention``.

    Args:
        n_heads: H.
        init: the starting value of every sink logit.
    """

    def __init__(self, n_heads: int, init: float = 0.0) -> None:
        super().__init__()
        _int_at_least("n_heads", n_heads, 1)
        _check_finite("init", init)
        self.sinks = nn.Parameter(torch.full((n_heads,), float(init)))

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        scale: float | None = None,
    ) -> torch.Tensor:
        return sink_attention(q, k, v, self.sinks, attn_mask=attn_mask, scale=scale)
# --8<-- [end:learned_sinks]


# --8<-- [start:mask]
def sink_window_mask(
    n_queries: int,
    n_keys: int,
    n_sink: int,
    window: int,
    *,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The StreamingLLM pattern as a dense mask, True = may attend.

    Query i (aligned to the lower right: it sits at key position
    ``i + n_keys - n_queries``) sees key j when ``j <= i`` and either j is
    one of the first ``n_sink`` keys or one of the last ``window`` (i itself
    included).

    Returns:
        ``(n_queries, n_keys)``, boolean.
    """
    _int_at_least("n_queries", n_queries, 0)
    _int_at_least("n_keys", n_keys, 0)
    _int_at_least("n_sink", n_sink, 0)
    _int_at_least("window", window, 1)
    if n_queries > n_keys:
        raise ValueError(f"n_queries must be <= n_keys, got {n_queries} > {n_keys}")
    i = torch.arange(n_keys - n_queries, n_keys, device=device).unsqueeze(-1)  # (N, 1) key positions of the queries
    j = torch.arange(n_keys, device=device)  # (M,)
    causal = j <= i  # (N, M)
    return causal & ((j < n_sink) | (i - j < window))  # (N, M)
# --8<-- [end:mask]


# --8<-- [start:cache]
class SinkCache:
    """A KV cache that keeps the first ``n_sink`` tokens and the last ``window``.

    Keys are stored *before* RoPE, with the original position of each token,
    so a step can rotate them by either numbering (see ``streaming_attention``).
    It never holds more than ``n_sink + window`` tokens.

    Args:
        n_sink: how many first tokens stay forever (StreamingLLM uses 4).
        window: how many recent tokens stay.
    """

    def __init__(self, n_sink: int, window: int) -> None:
        self.n_sink = _int_at_least("n_sink", n_sink, 0)
        self.window = _int_at_least("window", window, 1)
        self.keys: torch.Tensor | None = None  # (B, H, L, d), not rotated
        self.values: torch.Tensor | None = None  # (B, H, L, d_v)
        self.positions = torch.zeros(0, dtype=torch.long)  # (L,), original positions
        self.seen = 0  # tokens appended so far

    def __len__(self) -> int:
        return int(self.positions.numel())

    def update(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Append new keys ``(B, H, n, d)`` and values ``(B, H, n, d_v)``, then evict."""
        _check_cache_update(k, v, self.keys, self.values)
        new = torch.arange(self.seen, self.seen + k.shape[-2], device=self.positions.device)  # (n,)
        self.seen += k.shape[-2]
        self.keys = k if self.keys is None else torch.cat((self.keys, k), dim=-2)  # (B, H, L + n, d)
        self.values = v if self.values is None else torch.cat((self.values, v), dim=-2)
        self.positions = torch.cat((self.positions.to(new.device), new))  # (L + n,)
        length = len(self)
        if length > self.n_sink + self.window:
            keep = torch.cat((torch.arange(self.n_sink), torch.arange(length - self.window, length)))  # (n_sink + w,)
            keep = keep.to(self.keys.device)
            self.keys = self.keys.index_select(-2, keep)
            self.values = self.values.index_select(-2, keep)
            self.positions = self.positions.index_select(0, keep.to(self.positions.device))
# --8<-- [end:cache]


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


# --8<-- [start:streaming]
def streaming_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    n_sink: int,
    window: int,
    positions: str = "cache",
    base: float = 10000.0,
) -> torch.Tensor:
    """Decode one token at a time through a ``SinkCache``, RoPE applied per step.

    Args:
        q, k, v: un-rotated queries, keys and values, ``(B, H, N, d)``.
        n_sink: first tokens kept.
        window: recent tokens kept (the current one included).
        positions: ``"cache"``: number the cached tokens 0, 1, ... by their
            place in the cache, as StreamingLLM does (section 3.2);
            ``"original"``: keep each token's position in the text, which
            equals dense attention under ``sink_window_mask``.
        base: the RoPE base.

    Returns:
        ``(B, H, N, d)``, one output per step.
    """
    _check_heads(q, k, v)
    if q.shape[-2] != k.shape[-2]:
        raise ValueError(f"q and k must have the same length N for self-attention, got {q.shape[-2]} and {k.shape[-2]}")
    if positions not in ("cache", "original"):
        raise ValueError(f"positions must be 'cache' or 'original', got {positions!r}")
    d, dtype = q.shape[-1], q.dtype
    acc = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype  # softmax in float32 for half
    q, k, v = q.to(acc), k.to(acc), v.to(acc)
    cache = SinkCache(n_sink, window)
    outs = []
    for t in range(q.shape[-2]):
        cache.update(k[..., t : t + 1, :], v[..., t : t + 1, :])  # the cache holds token t now
        if positions == "cache":
            key_pos = torch.arange(len(cache), device=q.device)  # (L,) 0, 1, ..., L - 1
        else:
            key_pos = cache.positions.to(q.device)  # (L,) where each token stood in the text
        cos, sin = rope_tables(key_pos, d, base)  # (L, d/2)
        keys = apply_rope(cache.keys, cos, sin)  # (B, H, L, d), rotated afresh every step
        query = apply_rope(q[..., t : t + 1, :], cos[-1:], sin[-1:])  # (B, H, 1, d) at the newest slot
        scores = query @ keys.transpose(-2, -1) * d**-0.5  # (B, H, 1, d) @ (B, H, d, L) -> (B, H, 1, L)
        outs.append(scores.softmax(dim=-1) @ cache.values)  # (B, H, 1, L) @ (B, H, L, d) -> (B, H, 1, d)
    return torch.cat(outs, dim=-2).to(dtype)  # (B, H, N, d)
# --8<-- [end:streaming]
