"""Multi-head latent attention (MLA): cache one small latent per token, not H keys.

Paper: DeepSeek-AI (2024), "DeepSeek-V2: A Strong, Economical, and Efficient
Mixture-of-Experts Language Model", arXiv:2405.04434, Section 2.1 (equations
(9) to (19)): the low-rank joint compression of keys and values, the
compression of queries, the decoupled RoPE key shared by all heads, and the
absorption of W^UK into the queries and of W^UV into the output for
inference; Section 3.1.2: the RMSNorms after the two compressed latents.
DeepSeek-V3 (arXiv:2412.19437) and Kimi K2 (arXiv:2507.20534) use the same
layer.
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

__all__ = ["rotary_tables", "apply_rotary", "LatentCache", "MultiHeadLatentAttention"]


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


class LatentCache:
    """One MLA layer's decoding cache: latents ``c`` and shared rotated keys ``k^R``.

    Nothing per head is stored: keys and values are rebuilt from ``c`` (naive
    form) or never built at all (absorbed form). The module makes its own
    with ``MultiHeadLatentAttention.make_cache(batch, max_len)``.

    Args:
        batch: B.
        kv_lora_rank: d_c, the width of the latent.
        rope_dim: d_R, the width of the shared rotary key.
        max_len: the most tokens a sequence may reach.
        dtype, device: of the buffers.
    """

    def __init__(self, batch: int, kv_lora_rank: int, rope_dim: int, max_len: int, *,
                 dtype: torch.dtype = torch.float32,
                 device: torch.device | str | None = None) -> None:
        _check_num(batch=batch, kv_lora_rank=kv_lora_rank, rope_dim=rope_dim,
                   max_len=max_len)
        b = batch
        self.c = torch.zeros(b, max_len, kv_lora_rank, dtype=dtype, device=device)
        self.k_rope = torch.zeros(b, max_len, rope_dim, dtype=dtype, device=device)
        self.seq_len = 0

    @property
    def nbytes(self) -> int:
        """Bytes allocated: ``B * max_len * (d_c + d_R) * bytes per element``."""
        return (self.c.numel() + self.k_rope.numel()) * self.c.element_size()

    # --8<-- [start:cache]
    def update(self, c: torch.Tensor, k_rope: torch.Tensor):
        """Write N new tokens' c (B, N, d_c) and k^R (B, N, d_R); return all M."""
        self._check_update(c, k_rope)
        start, n = self.seq_len, c.shape[1]
        self.c[:, start : start + n] = c
        self.k_rope[:, start : start + n] = k_rope
        self.seq_len = start + n
        # (B, M, d_c), (B, M, d_R)
        return self.c[:, : self.seq_len], self.k_rope[:, : self.seq_len]
    # --8<-- [end:cache]

    def _check_update(self, c: torch.Tensor, k_rope: torch.Tensor) -> None:
        (b, room, d_c), d_r = self.c.shape, self.k_rope.shape[2]
        _check_float_tensor("c", c, (b, None, d_c), like=self.c)
        _check_float_tensor("k_rope", k_rope, (b, c.shape[1], d_r), like=self.c)
        if self.seq_len + c.shape[1] > room:
            raise ValueError(f"the cache holds max_len={room} tokens; it has "
                             f"{self.seq_len} and got {c.shape[1]} more")


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
        norm_eps: epsilon of the two RMSNorms on the latents (DeepSeek-V2,
            Section 3.1.2; ``q_a_layernorm`` and ``kv_a_layernorm`` in
            ``transformers``).

    Shape:
        x ``(B, N, D)`` -> ``(B, N, D)``.
    """

    def __init__(self, d_model: int, n_heads: int, *, kv_lora_rank: int,
                 q_lora_rank: int | None, qk_nope_head_dim: int, rope_dim: int,
                 v_head_dim: int, rope_base: float = 10000.0,
                 rope_interleaved: bool = True, softmax_scale: float | None = None,
                 bias: bool = False, norm_eps: float = 1e-6) -> None:
        super().__init__()
        _check_num(d_model=d_model, n_heads=n_heads, kv_lora_rank=kv_lora_rank,
                   qk_nope_head_dim=qk_nope_head_dim, v_head_dim=v_head_dim,
                   norm_eps=norm_eps)
        # RoPE's own check: rope_dim is its rotary_dim, rope_base its base
        _check_rotary_tables(torch.zeros(0, dtype=torch.long), rope_dim, rope_base)
        _check_num(optional=True, q_lora_rank=q_lora_rank, softmax_scale=softmax_scale)
        self.d_model, self.n_heads = d_model, n_heads
        self.kv_lora_rank, self.q_lora_rank = kv_lora_rank, q_lora_rank
        self.d_nope, self.d_rope, self.d_v = qk_nope_head_dim, rope_dim, v_head_dim
        self.rope_base, self.rope_interleaved = float(rope_base), rope_interleaved
        d_qk = qk_nope_head_dim + rope_dim
        self.scale = d_qk**-0.5 if softmax_scale is None else softmax_scale
        if q_lora_rank is None:
            self.q_proj = nn.Linear(d_model, n_heads * d_qk, bias=False)  # [W^UQ; W^QR]
        else:
            self.q_down = nn.Linear(d_model, q_lora_rank, bias=bias)  # W^DQ
            self.q_norm = nn.RMSNorm(q_lora_rank, eps=norm_eps)
            self.q_up = nn.Linear(q_lora_rank, n_heads * d_qk, bias=False)  # W^UQ; W^QR
        # [W^DKV; W^KR]: D -> d_c + d_R
        self.kv_down = nn.Linear(d_model, kv_lora_rank + rope_dim, bias=bias)
        self.kv_norm = nn.RMSNorm(kv_lora_rank, eps=norm_eps)
        # [W^UK; W^UV]: d_c -> H (d_h + d_v)
        self.kv_up = nn.Linear(kv_lora_rank, n_heads * (qk_nope_head_dim + v_head_dim),
                               bias=False)
        self.out_proj = nn.Linear(n_heads * v_head_dim, d_model, bias=bias)  # W^O

    def make_cache(self, batch: int, max_len: int) -> LatentCache:
        """An empty ``LatentCache`` sized, typed and placed for this layer."""
        w = self.kv_down.weight
        return LatentCache(batch, self.kv_lora_rank, self.d_rope, max_len,
                           dtype=w.dtype, device=w.device)

    # --8<-- [start:project]
    def project(self, x: torch.Tensor, positions: torch.Tensor):
        """q^C, q^R per head; the latent c and the shared rotated key k^R."""
        b, n, _ = x.shape
        q = self.q_proj(x) if self.q_lora_rank is None else self.q_up(
            self.q_norm(self.q_down(x)))  # (B, N, H (d_h + d_R))
        q = q.view(b, n, self.n_heads, -1).transpose(1, 2)  # (B, H, N, d_h + d_R)
        q_nope, q_rope = q.split([self.d_nope, self.d_rope], dim=-1)
        # (B, N, d_c), (B, N, d_R)
        c, k_rope = self.kv_down(x).split([self.kv_lora_rank, self.d_rope], dim=-1)
        cos, sin = rotary_tables(positions, self.d_rope, self.rope_base)  # (N, d_R/2)
        # Position enters through the d_R-wide parts only; q_nope and c never rotate.
        pairs = self.rope_interleaved
        q_rope = apply_rotary(q_rope, cos, sin, interleaved=pairs)  # (B, H, N, d_R)
        k_rope = apply_rotary(k_rope[:, None], cos, sin, interleaved=pairs)
        return q_nope, q_rope, self.kv_norm(c), k_rope[:, 0]  # k^R: (B, N, d_R)
    # --8<-- [end:project]

    # --8<-- [start:naive]
    def attend_naive(self, q_nope, q_rope, c, k_rope, allowed):
        """Rebuild per-head keys and values from the latents, then attend."""
        (b, h, n, _), m = q_nope.shape, c.shape[1]
        kv = self.kv_up(c).view(b, m, h, -1).transpose(1, 2)  # (B, H, M, d_h + d_v)
        k_nope, v = kv.split([self.d_nope, self.d_v], dim=-1)
        k_r = k_rope[:, None].expand(b, h, m, self.d_rope)  # one key for every head
        k = torch.cat((k_nope, k_r), dim=-1)  # (B, H, M, d_h + d_R)
        q = torch.cat((q_nope, q_rope), dim=-1)  # (B, H, N, d_h + d_R)
        acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
        scores = (q.to(acc) @ k.to(acc).transpose(-2, -1)) * self.scale  # (B, H, N, M)
        weights = _masked_softmax(scores, allowed)  # (B, H, N, M)
        out = (weights @ v.to(acc)).to(q.dtype)  # (B, H, N, d_v)
        return self.out_proj(out.transpose(1, 2).reshape(b, n, -1))  # (B, N, D)
    # --8<-- [end:naive]

    def absorbed_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """W^UK per head (H, d_h, d_c) and W^O_h W^UV_h per head (H, d_c, D)."""
        w_up = self.kv_up.weight.view(self.n_heads, -1, self.kv_lora_rank)
        w_uk, w_uv = w_up.split([self.d_nope, self.d_v], dim=1)  # (H, d_h | d_v, d_c)
        w_o = self.out_proj.weight.view(self.d_model, self.n_heads, -1)  # (D, H, d_v)
        w_out = torch.einsum("hvc,dhv->hcd", w_uv, w_o)  # (H, d_c, D): W^UV folded in
        return w_uk, w_out

    # --8<-- [start:absorbed_scores]
    def absorbed_scores(self, q_nope, q_rope, c, k_rope, w_uk):
        """(W^UK_h^T q^C_h) . c_j + q^R_h . k^R_j, times the scale: (B, H, N, M)."""
        q_latent = torch.einsum("bhnk,hkc->bhnc", q_nope, w_uk)  # (B, H, N, d_c)
        # (B, H, N, d_c) @ (B, 1, d_c, M) + (B, H, N, d_R) @ (B, 1, d_R, M)
        content = q_latent @ c[:, None].transpose(-2, -1)
        position = q_rope @ k_rope[:, None].transpose(-2, -1)
        return (content + position) * self.scale  # (B, H, N, M)
    # --8<-- [end:absorbed_scores]

    # --8<-- [start:absorbed]
    def attend_absorbed(self, q_nope, q_rope, c, k_rope, allowed):
        """Attend over the cached latents: no per-head key or value is built."""
        w_uk, w_out = self.absorbed_weights()
        acc = torch.float32 if c.dtype in (torch.float16, torch.bfloat16) else c.dtype
        q_nope, q_rope, c, k_rope = (t.to(acc) for t in (q_nope, q_rope, c, k_rope))
        scores = self.absorbed_scores(q_nope, q_rope, c, k_rope, w_uk.to(acc))
        weights = _masked_softmax(scores, allowed)  # (B, H, N, M)
        # (B, H, N, M) @ (B, 1, M, d_c) -> (B, H, N, d_c)
        context = weights @ c[:, None]
        out = torch.einsum("bhnc,hcd->bnd", context, w_out.to(acc))  # sum over heads
        if self.out_proj.bias is not None:
            out = out + self.out_proj.bias.to(acc)
        return out.to(w_out.dtype)  # (B, N, D)
    # --8<-- [end:absorbed]

    # --8<-- [start:forward]
    def forward(self, x, *, cache=None, absorbed=False, attn_mask=None):
        """N new tokens over the M = P + N seen so far: (B, N, D) -> (B, N, D)."""
        self._check_forward(x, cache, attn_mask)
        past = 0 if cache is None else cache.seq_len
        positions = torch.arange(past, past + x.shape[1], device=x.device)  # (N,)
        q_nope, q_rope, c, k_rope = self.project(x, positions)
        if cache is not None:
            c, k_rope = cache.update(c, k_rope)  # (B, M, d_c), (B, M, d_R)
        # Lower-right causal: query at position past + i sees keys j <= past + i.
        allowed = torch.arange(c.shape[1], device=x.device) <= positions[:, None]
        if attn_mask is not None:
            allowed = allowed & attn_mask  # broadcast to (B, H, N, M)
        attend = self.attend_absorbed if absorbed else self.attend_naive
        return attend(q_nope, q_rope, c, k_rope, allowed)  # (B, N, D)
    # --8<-- [end:forward]

    def _check_forward(self, x, cache, attn_mask) -> None:
        """x, and a bool mask (True = may attend) that broadcasts to (B, H, N, M).

        cache.update refuses a cache that the new c does not fit.
        """
        _check_float_tensor("x", x, (None, None, self.d_model), self.kv_down.weight)
        b, n, _ = x.shape
        want = (b, self.n_heads, n, n + (0 if cache is None else cache.seq_len))
        if attn_mask is not None and (getattr(attn_mask, "dtype", None) != torch.bool
                or attn_mask.dim() > 4 or attn_mask.device != x.device or any(
                a not in (1, c) for a, c in zip(attn_mask.shape[::-1], want[::-1]))):
            raise ValueError(f"attn_mask must be bool and broadcast to {want} on "
                             f"{x.device}, got {_got(attn_mask)}")
