"""Multi-head latent attention (MLA): cache one small latent per token, not H keys and values.

Paper: DeepSeek-AI (2024), "DeepSeek-V2: A Strong, Economical, and Efficient
Mixture-of-Experts Language Model", arXiv:2405.04434, Section 2.1 (equations
(9) to (19)): the low-rank joint compression of keys and values, the
compression of queries, the decoupled RoPE key shared by all heads, and the
absorption of W^UK into the queries and of W^UV into the output for
inference. DeepSeek-V3 (arXiv:2412.19437) and Kimi K2 (arXiv:2507.20534) use
the same layer.
Page: docs/modern/latent-attention.md
Tested against: the naive and absorbed forms against each other in float64,
token-by-token decoding from the latent cache against the full pass, and the
``transformers`` library's ``DeepseekV3Attention`` with copied weights
(tests/test_latent_attention.py, tests/test_mla_transformers.py).

Per token t the layer keeps only

* ``c_t = RMSNorm(W^DKV h_t)``, the latent of width ``kv_lora_rank`` (d_c), and
* ``k^R_t = RoPE(W^KR h_t)``, one rotated key of width ``rope_dim`` (d_R)
  shared by every head,

so the cache holds ``d_c + d_R`` numbers per token and layer (576 for
DeepSeek-V3) where multi-head attention holds ``2 H d``.

RoPE pairs: ``rope_interleaved=True`` rotates the planes (0, 1), (2, 3), ...
of the rotary part, as DeepSeek's released weights expect (``rope_interleave``
in the transformers config); ``False`` rotates (i, i + d_R/2).

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["latent_rope_angles", "rotate_rope_part", "LatentCache", "MultiHeadLatentAttention"]


# --8<-- [start:validate]
def _check_mla_size(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def _check_hidden(x: object, d_model: int) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"x must have a floating dtype, got {x.dtype}")
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise ValueError(f"x must be (B, N, D) with D={d_model}, got shape {tuple(x.shape)}")


def _check_like_module(name: str, t: torch.Tensor, weight: torch.Tensor) -> None:
    """Raise unless t has the device (and, outside autocast, the dtype) of the module's weight."""
    if t.device != weight.device:
        raise ValueError(f"{name} must be on the module's device {weight.device}, got {t.device}")
    autocast = torch.amp.is_autocast_available(t.device.type) and torch.is_autocast_enabled(t.device.type)
    if t.dtype != weight.dtype and not autocast:
        raise TypeError(f"{name} must have the module's dtype {weight.dtype}, got {t.dtype}")


def _check_float_dtype(dtype: object) -> None:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")


def _check_mla_number(name: str, value: object, low: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low < value < math.inf:
        raise ValueError(f"{name} must be a finite number > {low}, got {value!r}")


def _check_mla_rope(positions: object, dim: object, base: object) -> None:
    if not isinstance(positions, torch.Tensor) or positions.is_floating_point() or positions.dtype == torch.bool:
        got = positions.dtype if isinstance(positions, torch.Tensor) else type(positions).__name__
        raise TypeError(f"positions must be an integer tensor, got {got}")
    if positions.dim() != 1:
        raise ValueError(f"positions must have shape (N,), got {tuple(positions.shape)}")
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 2 or dim % 2:
        raise ValueError(f"dim must be an even int >= 2, got {dim!r}")
    _check_mla_number("base", base, 1)


def _check_rope_part(x: object, cos: object, sin: object) -> None:
    """x ``(..., N, dim)``; cos and sin ``(N, dim / 2)`` on x's device, all floating."""
    for name, t in (("x", x), ("cos", cos), ("sin", sin)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"{name} must be a floating torch.Tensor, got {got}")
    if x.dim() < 2 or x.shape[-1] % 2:
        raise ValueError(f"x must be (..., N, dim) with dim even, got shape {tuple(x.shape)}")
    want = (x.shape[-2], x.shape[-1] // 2)
    for name, t in (("cos", cos), ("sin", sin)):
        if tuple(t.shape) != want:
            raise ValueError(f"{name} must be (N, dim / 2) = {want} to match x, got {tuple(t.shape)}")
        if t.device != x.device:
            raise ValueError(f"{name} must be on the device of x {x.device}, got {t.device}")


def _check_latent_update(c: object, k_rope: object, cache: "LatentCache") -> None:
    """c ``(B, N, d_c)`` and k_rope ``(B, N, d_R)`` of the cache's B, widths, dtype and device."""
    b, _, d_c = cache.c.shape
    d_r = cache.k_rope.shape[-1]
    for name, t, width in (("c", c, d_c), ("k_rope", k_rope, d_r)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != cache.c.dtype:
            raise TypeError(f"{name} must have the cache's dtype {cache.c.dtype}, got {t.dtype}")
        if t.device != cache.c.device:
            raise ValueError(f"{name} must be on the cache's device {cache.c.device}, got {t.device}")
        if t.dim() != 3 or t.shape[0] != b or t.shape[-1] != width:
            raise ValueError(f"{name} must be (B, N, {width}) with B = {b}, got shape {tuple(t.shape)}")
    if c.shape[1] != k_rope.shape[1]:
        raise ValueError(f"c and k_rope must hold the same N tokens, got {c.shape[1]} and {k_rope.shape[1]}")


def _check_latent_cache(cache: object, x: torch.Tensor, kv_lora_rank: int, rope_dim: int) -> None:
    if cache is None:
        return
    if not isinstance(cache, LatentCache):
        raise TypeError(f"cache must be a LatentCache or None, got {type(cache).__name__}")
    want = (x.shape[0], kv_lora_rank, rope_dim)
    got = (cache.c.shape[0], cache.c.shape[-1], cache.k_rope.shape[-1])
    if got != want or cache.c.dtype != x.dtype or cache.c.device != x.device:
        raise ValueError(
            f"cache must hold (B, d_c, d_R) = {want} in {x.dtype} on {x.device} like x, "
            f"got {got} in {cache.c.dtype} on {cache.c.device}"
        )


def _check_latent_mask(attn_mask: object, shape: tuple[int, int, int, int], device: torch.device) -> None:
    """None, or a boolean mask that broadcasts to the scores' (B, H, N, M) without enlarging them."""
    if attn_mask is None:
        return
    if not isinstance(attn_mask, torch.Tensor) or attn_mask.dtype != torch.bool:
        got = attn_mask.dtype if isinstance(attn_mask, torch.Tensor) else type(attn_mask).__name__
        raise TypeError(f"attn_mask must be a boolean tensor (True = may attend), got {got}")
    try:
        fits = torch.broadcast_shapes(attn_mask.shape, shape) == shape
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"attn_mask must broadcast to (B, H, N, M) = {shape}, got shape {tuple(attn_mask.shape)}")
    if attn_mask.device != device:
        raise ValueError(f"attn_mask must be on the device of x {device}, got {attn_mask.device}")

# --8<-- [end:validate]


# --8<-- [start:rope]
def latent_rope_angles(
    positions: torch.Tensor, dim: int, *, base: float = 10000.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of ``t * base^(-2i/dim)`` for each position t and plane i.

    Args:
        positions: integer positions, ``(N,)``.
        dim: d_R, the width that rotates (even).
        base: the RoPE base (theta).

    Returns:
        ``(cos, sin)``, each ``(N, dim / 2)``, in float64 (``rotate_rope_part`` casts them
        to the precision it computes in).
    """
    _check_mla_rope(positions, dim, base)
    inv_freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float64, device=positions.device) / dim)  # (dim/2,)
    angles = positions.to(torch.float64)[:, None] * inv_freq  # (N, 1) * (dim/2,) -> (N, dim/2)
    return angles.cos(), angles.sin()


def rotate_rope_part(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, interleaved: bool) -> torch.Tensor:
    """Rotate each plane of the last dimension of x by its angle: ``(..., N, dim)``."""
    _check_rope_part(x, cos, sin)
    acc = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    c, s = cos.to(acc), sin.to(acc)  # (N, dim/2)
    x = x.to(acc)
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]  # planes (0, 1), (2, 3), ...: (..., N, dim/2) each
    else:
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]  # planes (i, i + dim/2): (..., N, dim/2) each
    r1, r2 = x1 * c - x2 * s, x1 * s + x2 * c  # (..., N, dim/2) each
    if interleaved:
        return torch.stack((r1, r2), dim=-1).flatten(-2)  # (..., N, dim/2, 2) -> (..., N, dim)
    return torch.cat((r1, r2), dim=-1)  # (..., N, dim)
# --8<-- [end:rope]


# --8<-- [start:cache]
class LatentCache:
    """The decoding cache of one MLA layer: latents ``c`` and the shared rotated keys ``k^R``.

    Nothing per head is stored: keys and values are rebuilt from ``c`` (naive
    form) or never built at all (absorbed form).

    Args:
        batch: B.
        kv_lora_rank: d_c, the width of the latent.
        rope_dim: d_R, the width of the shared rotary key.
        max_len: the most tokens a sequence may reach.
        dtype, device: of the buffers.
    """

    def __init__(self, batch: int, kv_lora_rank: int, rope_dim: int, max_len: int, *,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> None:
        for name, value in (("batch", batch), ("kv_lora_rank", kv_lora_rank),
                            ("rope_dim", rope_dim), ("max_len", max_len)):
            _check_mla_size(name, value)
        _check_float_dtype(dtype)
        self.c = torch.zeros(batch, max_len, kv_lora_rank, dtype=dtype, device=device)  # (B, max_len, d_c)
        self.k_rope = torch.zeros(batch, max_len, rope_dim, dtype=dtype, device=device)  # (B, max_len, d_R)
        self.seq_len = 0

    @property
    def nbytes(self) -> int:
        """Bytes allocated: ``B * max_len * (d_c + d_R) * bytes per element``."""
        return self.c.numel() * self.c.element_size() + self.k_rope.numel() * self.k_rope.element_size()

    def update(self, c: torch.Tensor, k_rope: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append N new tokens' ``c`` ``(B, N, d_c)`` and ``k^R`` ``(B, N, d_R)``; return all M so far."""
        _check_latent_update(c, k_rope, self)
        start, n = self.seq_len, c.shape[1]
        if start + n > self.c.shape[1]:
            raise ValueError(
                f"the cache holds max_len={self.c.shape[1]} tokens; it has {start} and got {n} more"
            )
        self.c[:, start:start + n] = c
        self.k_rope[:, start:start + n] = k_rope
        self.seq_len = start + n
        return self.c[:, : self.seq_len], self.k_rope[:, : self.seq_len]  # (B, M, d_c), (B, M, d_R)
# --8<-- [end:cache]


# --8<-- [start:softmax]
def _softmax_over_allowed(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Softmax over the keys where ``allowed`` (True = may attend); a row with
    no allowed key gets all-zero weights (and finite gradients)."""
    empty = ~allowed.any(dim=-1, keepdim=True)  # (..., N, 1)
    scores = scores.masked_fill(~allowed, float("-inf"))
    scores = scores.masked_fill(empty, 0.0)  # neutralise empty rows before the softmax
    return torch.softmax(scores, dim=-1).masked_fill(empty, 0.0)
# --8<-- [end:softmax]


# --8<-- [start:init]
class MultiHeadLatentAttention(nn.Module):
    """Causal multi-head latent attention with a decoupled RoPE key (DeepSeek-V2).

    Args:
        d_model: D, the model width.
        n_heads: H.
        kv_lora_rank: d_c, the width of the joint key/value latent that is cached.
        q_lora_rank: d_c', the width of the query latent; ``None`` projects the
            queries directly (as DeepSeek-V2-Lite does).
        qk_nope_head_dim: d_h, the per-head width of the query/key part without
            position (the part rebuilt from the latent).
        rope_dim: d_R, the per-head width of the rotary part of queries and the
            width of the one rotary key shared by all heads.
        v_head_dim: d_v, the per-head width of the values.
        rope_base: theta of RoPE.
        rope_interleaved: rotate planes (0, 1), (2, 3), ... (DeepSeek's layout).
        softmax_scale: multiplies the scores; ``None`` means
            ``1 / sqrt(d_h + d_R)``.
        bias: biases on the down-projections and the output, as
            ``attention_bias`` in the transformers config.
        norm_eps: epsilon of the two RMSNorms on the latents.

    Shape:
        x ``(B, N, D)`` -> ``(B, N, D)``.
    """

    def __init__(self, d_model: int, n_heads: int, *, kv_lora_rank: int, q_lora_rank: int | None,
                 qk_nope_head_dim: int, rope_dim: int, v_head_dim: int, rope_base: float = 10000.0,
                 rope_interleaved: bool = True, softmax_scale: float | None = None,
                 bias: bool = False, norm_eps: float = 1e-6) -> None:
        super().__init__()
        for name, value in (("d_model", d_model), ("n_heads", n_heads), ("kv_lora_rank", kv_lora_rank),
                            ("qk_nope_head_dim", qk_nope_head_dim), ("v_head_dim", v_head_dim)):
            _check_mla_size(name, value)
        if q_lora_rank is not None:
            _check_mla_size("q_lora_rank", q_lora_rank)
        if isinstance(rope_dim, bool) or not isinstance(rope_dim, int) or rope_dim < 2 or rope_dim % 2:
            raise ValueError(f"rope_dim must be an even int >= 2, got {rope_dim!r}")
        _check_mla_number("rope_base", rope_base, 1)
        _check_mla_number("norm_eps", norm_eps, 0)
        if softmax_scale is not None:
            _check_mla_number("softmax_scale", softmax_scale, 0)
        self.d_model, self.n_heads = d_model, n_heads
        self.kv_lora_rank, self.q_lora_rank = kv_lora_rank, q_lora_rank
        self.d_nope, self.d_rope, self.d_v = qk_nope_head_dim, rope_dim, v_head_dim
        self.rope_base, self.rope_interleaved = float(rope_base), rope_interleaved
        self.scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(qk_nope_head_dim + rope_dim)
        d_qk = qk_nope_head_dim + rope_dim
        if q_lora_rank is None:
            self.q_proj = nn.Linear(d_model, n_heads * d_qk, bias=False)  # [W^UQ; W^QR] applied to h
        else:
            self.q_down = nn.Linear(d_model, q_lora_rank, bias=bias)  # W^DQ
            self.q_norm = nn.RMSNorm(q_lora_rank, eps=norm_eps)
            self.q_up = nn.Linear(q_lora_rank, n_heads * d_qk, bias=False)  # [W^UQ; W^QR], per head
        self.kv_down = nn.Linear(d_model, kv_lora_rank + rope_dim, bias=bias)  # [W^DKV; W^KR]
        self.kv_norm = nn.RMSNorm(kv_lora_rank, eps=norm_eps)
        self.kv_up = nn.Linear(kv_lora_rank, n_heads * (qk_nope_head_dim + v_head_dim), bias=False)  # [W^UK; W^UV]
        self.out_proj = nn.Linear(n_heads * v_head_dim, d_model, bias=bias)  # W^O
# --8<-- [end:init]

    # --8<-- [start:project]
    def project(self, x: torch.Tensor, positions: torch.Tensor):
        """The per-token quantities: queries (two parts) and what goes to the cache.

        Returns ``q_nope (B, H, N, d_h)``, ``q_rope (B, H, N, d_R)``, the latent
        ``c (B, N, d_c)`` and the shared rotated key ``k_rope (B, N, d_R)``.
        """
        b, n, _ = x.shape
        if self.q_lora_rank is None:
            q = self.q_proj(x)  # (B, N, H (d_h + d_R))
        else:
            q = self.q_up(self.q_norm(self.q_down(x)))  # (B, N, d_c') -> (B, N, H (d_h + d_R))
        q = q.view(b, n, self.n_heads, self.d_nope + self.d_rope).transpose(1, 2)  # (B, H, N, d_h + d_R)
        q_nope, q_rope = q.split([self.d_nope, self.d_rope], dim=-1)  # (B, H, N, d_h), (B, H, N, d_R)
        c, k_rope = self.kv_down(x).split([self.kv_lora_rank, self.d_rope], dim=-1)  # (B, N, d_c), (B, N, d_R)
        c = self.kv_norm(c)  # (B, N, d_c)
        cos, sin = latent_rope_angles(positions, self.d_rope, base=self.rope_base)  # (N, d_R / 2) each
        # Position enters through the d_R-wide parts only; q_nope and c never rotate.
        q_rope = rotate_rope_part(q_rope, cos, sin, interleaved=self.rope_interleaved).to(x.dtype)  # (B, H, N, d_R)
        k_rope = rotate_rope_part(k_rope, cos, sin, interleaved=self.rope_interleaved).to(x.dtype)  # (B, N, d_R)
        return q_nope, q_rope, c, k_rope
    # --8<-- [end:project]

    # --8<-- [start:naive]
    def attend_naive(self, q_nope, q_rope, c, k_rope, allowed):
        """Rebuild per-head keys and values from the latents, then attend as usual."""
        b, _, n, _ = q_nope.shape
        m = c.shape[1]
        kv = self.kv_up(c).view(b, m, self.n_heads, self.d_nope + self.d_v).transpose(1, 2)  # (B, H, M, d_h + d_v)
        k_nope, v = kv.split([self.d_nope, self.d_v], dim=-1)  # (B, H, M, d_h), (B, H, M, d_v)
        k = torch.cat((k_nope, k_rope[:, None].expand(b, self.n_heads, m, self.d_rope)), dim=-1)  # (B, H, M, d_h + d_R)
        q = torch.cat((q_nope, q_rope), dim=-1)  # (B, H, N, d_h + d_R)
        acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
        scores = (q.to(acc) @ k.to(acc).transpose(-2, -1)) * self.scale  # (B, H, N, d_h + d_R) @ (B, H, d_h + d_R, M) -> (B, H, N, M)
        weights = _softmax_over_allowed(scores, allowed)  # (B, H, N, M)
        out = (weights @ v.to(acc)).to(q.dtype)  # (B, H, N, M) @ (B, H, M, d_v) -> (B, H, N, d_v)
        out = out.transpose(1, 2).reshape(b, n, self.n_heads * self.d_v)  # (B, N, H d_v)
        return self.out_proj(out)  # (B, N, D)
    # --8<-- [end:naive]

    # --8<-- [start:absorbed]
    def absorbed_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``W^UK`` per head ``(H, d_h, d_c)`` and ``W^O_h W^UV_h`` per head ``(H, d_c, D)``."""
        w_up = self.kv_up.weight.view(self.n_heads, self.d_nope + self.d_v, self.kv_lora_rank)  # (H, d_h + d_v, d_c)
        w_uk, w_uv = w_up.split([self.d_nope, self.d_v], dim=1)  # (H, d_h, d_c), (H, d_v, d_c)
        w_o = self.out_proj.weight.view(self.d_model, self.n_heads, self.d_v)  # (D, H, d_v)
        w_out = torch.einsum("hvc,dhv->hcd", w_uv, w_o)  # (H, d_c, D): W^UV folded into the output
        return w_uk, w_out

    def attend_absorbed(self, q_nope, q_rope, c, k_rope, allowed):
        """Attend over the cached latents directly: no per-head key or value is built.

        ``q_h^C . (W^UK_h c_j) = (W^UK_h^T q_h^C) . c_j``, so each head's query moves
        into the latent space; the rotary parts stay apart because a rotation
        between q and W^UK would depend on the positions of both tokens.
        """
        w_uk, w_out = self.absorbed_weights()
        acc = torch.float32 if q_nope.dtype in (torch.float16, torch.bfloat16) else q_nope.dtype
        q_latent = torch.einsum("bhnk,hkc->bhnc", q_nope.to(acc), w_uk.to(acc))  # (B, H, N, d_c)
        c, k_rope = c.to(acc)[:, None], k_rope.to(acc)[:, None]  # (B, 1, M, d_c), (B, 1, M, d_R): one "head" for all
        scores = (q_latent @ c.transpose(-2, -1)  # (B, H, N, d_c) @ (B, 1, d_c, M) -> (B, H, N, M)
                  + q_rope.to(acc) @ k_rope.transpose(-2, -1)) * self.scale  # + (B, H, N, d_R) @ (B, 1, d_R, M)
        weights = _softmax_over_allowed(scores, allowed)  # (B, H, N, M)
        context = weights @ c  # (B, H, N, M) @ (B, 1, M, d_c) -> (B, H, N, d_c)
        out = torch.einsum("bhnc,hcd->bnd", context, w_out.to(acc))  # sum over heads: (B, N, D)
        if self.out_proj.bias is not None:
            out = out + self.out_proj.bias.to(acc)
        return out.to(q_nope.dtype)
    # --8<-- [end:absorbed]

    # --8<-- [start:forward]
    def forward(self, x: torch.Tensor, *, cache: LatentCache | None = None, absorbed: bool = False,
                attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Causal attention of N new tokens over the M = P + N tokens seen so far.

        Args:
            x: ``(B, N, D)``, the new tokens.
            cache: a ``LatentCache`` holding the P earlier tokens; it is updated.
            absorbed: use the absorbed form (the decoding path) instead of
                rebuilding per-head keys and values.
            attn_mask: optional boolean mask, True = may attend, broadcastable to
                ``(B, H, N, M)``; combined with the causal mask. A query left
                with no key returns zeros.

        Returns:
            ``(B, N, D)``.
        """
        _check_hidden(x, self.d_model)
        _check_like_module("x", x, self.kv_down.weight)
        _check_latent_cache(cache, x, self.kv_lora_rank, self.d_rope)
        b, n, _ = x.shape
        past = 0 if cache is None else cache.seq_len
        _check_latent_mask(attn_mask, (b, self.n_heads, n, past + n), x.device)
        positions = torch.arange(past, past + n, device=x.device)  # (N,), absolute positions
        q_nope, q_rope, c, k_rope = self.project(x, positions)
        if cache is not None:
            c, k_rope = cache.update(c, k_rope)  # (B, M, d_c), (B, M, d_R)
        m = c.shape[1]
        # Lower-right causal mask: query i (absolute position past + i) sees keys j <= past + i.
        allowed = torch.arange(m, device=x.device) <= positions[:, None]  # (N, M)
        if attn_mask is not None:
            allowed = allowed & attn_mask  # (B, H, N, M) or broadcastable
        attend = self.attend_absorbed if absorbed else self.attend_naive
        return attend(q_nope, q_rope, c, k_rope, allowed)
    # --8<-- [end:forward]
