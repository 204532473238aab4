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

RoPE here pairs dimensions (i, i + d/2) by default, as GPT-NeoX and Hugging
Face's port of Llama do; ``apply_rotary(..., interleaved=True)`` pairs
(2i, 2i + 1) as the RoFormer paper and Meta's Llama code do.

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
    "rotary_tables",
    "apply_rotary",
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


# --8<-- [start:sink_attention]
def attention_with_sink(q, k, v, sinks, allowed, scale):
    """softmax([q k^T * scale, sink]) without the sink's column, times v."""
    b, h, n, _ = q.shape
    # (B, H, N, d) @ (B, H, d, M) -> (B, H, N, M)
    scores = (q @ k.transpose(-2, -1)) * scale
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    sink = sinks.view(1, h, 1, 1).expand(b, h, n, 1)  # (H,) -> (B, H, N, 1)
    # The sink logit is finite, so no row is all -inf: a query with no allowed
    # key puts all its weight on the sink, and the softmax has no NaN.
    weights = torch.cat((scores, sink), dim=-1).softmax(dim=-1)  # (B, H, N, M + 1)
    return weights[..., :-1] @ v  # (B, H, N, M) @ (B, H, M, d_v) -> (B, H, N, d_v)
# --8<-- [end:sink_attention]


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
        attn_mask: boolean, True = may attend, broadcastable to ``(B, H, N, M)``.
        scale: the score scale; ``None`` means ``1 / sqrt(d)``.

    Returns:
        ``(B, H, N, d_v)``; scores and softmax run in float32 for half inputs.
    """
    _check_attend_args(q, k, v, attn_mask, scale)
    _check_float_tensor("sinks", sinks, (q.shape[1],), like=q, dtype=False)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    q, k, w, s = q.to(acc), k.to(acc), v.to(acc), sinks.to(acc)
    return attention_with_sink(q, k, w, s, attn_mask, scale).to(v.dtype)


class LearnedSinks(nn.Module):
    """gpt-oss's attention kernel: ``sink_attention`` with a learned logit per head.

    Pass it as ``attend`` to the modern block's ``DecoderAttention``.

    Args:
        n_heads: H.
        init: the starting value of every sink logit.
    """

    def __init__(self, n_heads: int, init: float = 0.0) -> None:
        super().__init__()
        _check_num(n_heads=n_heads)
        self.sinks = nn.Parameter(torch.full((n_heads,), float(init)))

    # --8<-- [start:learned_sinks]
    def forward(self, q, k, v, attn_mask=None, scale=None) -> torch.Tensor:
        """sink_attention with this layer's learned logits."""
        return sink_attention(q, k, v, self.sinks, attn_mask=attn_mask, scale=scale)
    # --8<-- [end:learned_sinks]


# --8<-- [start:mask]
def streaming_mask(query_pos, key_pos, n_sink: int, window: int) -> torch.Tensor:
    """Causal, and the key is a sink or among the last ``window``: (N, M)."""
    i, j = query_pos.unsqueeze(-1), key_pos  # (N, 1), (M,)
    return (j <= i) & ((j < n_sink) | (i - j < window))  # (N, M)
# --8<-- [end:mask]


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
    if not 0 <= n_queries <= n_keys or n_sink < 0 or window < 1:
        raise ValueError(f"need 0 <= n_queries <= n_keys, n_sink >= 0, window >= 1, "
                         f"got {(n_queries, n_keys, n_sink, window)}")
    query_pos = torch.arange(n_keys - n_queries, n_keys, device=device)  # (N,)
    key_pos = torch.arange(n_keys, device=device)  # (M,)
    return streaming_mask(query_pos, key_pos, n_sink, window)


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
        if n_sink < 0 or window < 1:
            raise ValueError(f"need n_sink >= 0, window >= 1, got {n_sink=}, {window=}")
        self.n_sink, self.window = n_sink, window
        self.keys: torch.Tensor | None = None  # (B, H, L, d), not rotated
        self.values: torch.Tensor | None = None  # (B, H, L, d_v)
        self.positions = torch.zeros(0, dtype=torch.long)  # (L,), original positions
        self.seen = 0  # tokens appended so far

    def __len__(self) -> int:
        return int(self.positions.numel())

    # --8<-- [start:cache]
    def update(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Append keys (B, H, n, d) and values (B, H, n, d_v), then evict."""
        self._check_update(k, v)
        new = torch.arange(self.seen, self.seen + k.shape[-2])  # (n,)
        self.seen += k.shape[-2]
        self.keys = k if self.keys is None else torch.cat((self.keys, k), dim=-2)
        self.values = v if self.values is None else torch.cat((self.values, v), dim=-2)
        self.positions = torch.cat((self.positions, new))  # (L + n,)
        length = len(self)
        if length > self.n_sink + self.window:  # keep the sinks and the last window
            keep = torch.cat((torch.arange(self.n_sink),
                              torch.arange(length - self.window, length)))
            self.keys = self.keys.index_select(-2, keep.to(self.keys.device))
            self.values = self.values.index_select(-2, keep.to(self.keys.device))
            self.positions = self.positions.index_select(0, keep)
    # --8<-- [end:cache]

    def _check_update(self, k: torch.Tensor, v: torch.Tensor) -> None:
        b, h, _, d = (None,) * 4 if self.keys is None else self.keys.shape
        _check_float_tensor("k", k, (b, h, None, d), like=self.keys)
        d_v = None if self.values is None else self.values.shape[3]
        _check_float_tensor("v", v, (*k.shape[:3], d_v), like=k)


# --8<-- [start:streaming]
def streaming_decode(q, k, v, n_sink: int, window: int, renumber: bool, base: float):
    """Decode token by token through a SinkCache, rotating q and k every step."""
    cache, outs = SinkCache(n_sink, window), []
    for t in range(q.shape[-2]):
        cache.update(k[..., t : t + 1, :], v[..., t : t + 1, :])  # now holds token t
        # StreamingLLM numbers the kept tokens 0 .. L-1; "original" keeps the text's.
        key_pos = torch.arange(len(cache)) if renumber else cache.positions  # (L,)
        cos, sin = rotary_tables(key_pos.to(q.device), q.shape[-1], base)  # (L, d/2)
        keys = apply_rotary(cache.keys, cos, sin)  # (B, H, L, d)
        query = apply_rotary(q[..., t : t + 1, :], cos[-1:], sin[-1:])  # (B, H, 1, d)
        # (B, H, 1, d) @ (B, H, d, L) -> (B, H, 1, L)
        scores = query @ keys.transpose(-2, -1) * q.shape[-1] ** -0.5
        outs.append(scores.softmax(dim=-1) @ cache.values)  # (B, H, 1, d_v)
    return torch.cat(outs, dim=-2)  # (B, H, N, d_v)
# --8<-- [end:streaming]


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
        ``(B, H, N, d_v)``, one output per step; float32 inside for half inputs.
    """
    _check_attend_args(q, k, v, None, None)
    if q.shape[-2] != k.shape[-2] or positions not in ("cache", "original"):
        raise ValueError(f"q and k must have one length N and positions be 'cache' or "
                         f"'original', got {q.shape[-2]}, {k.shape[-2]}, {positions!r}")
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    renumber = positions == "cache"
    q, k, w = q.to(acc), k.to(acc), v.to(acc)
    return streaming_decode(q, k, w, n_sink, window, renumber, base).to(v.dtype)
