"""Grouped-query and multi-query attention: fewer key/value heads than query heads.

Papers:
    Shazeer (2019), "Fast Transformer Decoding: One Write-Head is All You Need",
    arXiv:1911.02150 (multi-query attention: one key/value head, H_kv = 1).
    Ainslie, Lee-Thorp, de Jong, Zemlyanskiy, Lebron and Sanghai (2023), "GQA:
    Training Generalized Multi-Query Transformer Models from Multi-Head
    Checkpoints", arXiv:2305.13245 (grouped-query attention, 1 <= H_kv <= H, and
    uptraining a multi-head checkpoint by mean-pooling its key/value heads).
Page: docs/attention/grouped-query.md
Tested against: torch.nn.functional.scaled_dot_product_attention with
``enable_gqa=True``, the same attention with key/value heads repeated by
``repeat_interleave``, and torch.nn.MultiheadAttention (H_kv = H, weights copied)
(tests/test_grouped_query.py).

The H query heads are split into H_kv groups of G = H / H_kv consecutive heads;
query head ``h`` reads key/value head ``h // G``. Only H_kv heads of keys and
values are projected and, when decoding, cached: the cache shrinks by G.

Mask convention (the same as ``F.scaled_dot_product_attention``): a boolean
``attn_mask`` is True where a query MAY attend; a floating one is added to the
scores. ``key_mask`` is ``(B, M)``, True = a real key. ``is_causal=True`` aligns
the triangle to the lower right when N != M. A query that may attend to no key
returns zeros.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["GroupedQueryAttention", "repeat_kv"]


# --8<-- [start:validate]
def _check_input(name: str, t: object, width: int, width_name: str) -> None:
    """Raise a clear error unless ``t`` is a floating (B, length, width) tensor."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.is_floating_point():
        raise TypeError(f"{name} must have a floating dtype, got {t.dtype}")
    if t.dim() != 3:
        raise ValueError(
            f"{name} must have 3 dimensions (B, length, {width_name}), "
            f"got shape {tuple(t.shape)}"
        )
    if t.shape[-1] != width:
        raise ValueError(
            f"{name} must have last dimension {width_name} = {width}, "
            f"got shape {tuple(t.shape)}"
        )


def _check_like_module(name: str, t: torch.Tensor, weight: torch.Tensor) -> None:
    """Raise unless t has the device (and, outside autocast, the dtype) of the module's weight."""
    if t.device != weight.device:
        raise ValueError(f"{name} must be on the module's device {weight.device}, got {t.device}")
    autocast = torch.amp.is_autocast_available(t.device.type) and torch.is_autocast_enabled(t.device.type)
    if t.dtype != weight.dtype and not autocast:
        raise TypeError(f"{name} must have the module's dtype {weight.dtype}, got {t.dtype}")


def _check_dropout(name: str, p: float) -> None:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise ValueError(f"{name} must be a float in [0, 1), got {p!r}")


def _check_masks(
    attn_mask: torch.Tensor | None,
    key_mask: torch.Tensor | None,
    shape: tuple[int, int, int, int],
    dtype: torch.dtype,
    device: torch.device,
) -> None:
    """Raise a clear error unless the masks fit scores of ``shape`` = (B, H, N, M) on device."""
    b, _, _, m = shape
    for name, mask in (("attn_mask", attn_mask), ("key_mask", key_mask)):
        if isinstance(mask, torch.Tensor) and mask.device != device:
            raise ValueError(f"{name} must be on the device of the inputs {device}, got {mask.device}")
    if attn_mask is not None:
        if not isinstance(attn_mask, torch.Tensor):
            raise TypeError(
                f"attn_mask must be a torch.Tensor or None, got {type(attn_mask).__name__}"
            )
        if attn_mask.dtype != torch.bool and attn_mask.dtype != dtype:
            raise TypeError(
                f"attn_mask must be torch.bool (True = may attend) or {dtype} "
                f"(added to the scores), got {attn_mask.dtype}"
            )
        if not 2 <= attn_mask.dim() <= 4 or any(
            got not in (1, want) for got, want in zip(attn_mask.shape[::-1], shape[::-1])
        ):
            raise ValueError(
                f"attn_mask must broadcast to (B, H, N, M) = {shape}, "
                f"got shape {tuple(attn_mask.shape)}"
            )
    if key_mask is not None:
        if not isinstance(key_mask, torch.Tensor) or key_mask.dtype != torch.bool:
            got = key_mask.dtype if isinstance(key_mask, torch.Tensor) else type(key_mask).__name__
            raise TypeError(
                f"key_mask must be a torch.bool tensor (True = real key), got {got}"
            )
        if tuple(key_mask.shape) != (b, m):
            raise ValueError(
                f"key_mask must have shape (B, M) = {(b, m)}, got shape {tuple(key_mask.shape)}"
            )
# --8<-- [end:validate]


# --8<-- [start:mask]
def _combine_masks(
    attn_mask: torch.Tensor | None,
    key_mask: torch.Tensor | None,
    is_causal: bool,
    n: int,
    m: int,
    device: torch.device,
) -> torch.Tensor | None:
    """Fold attn_mask, key_mask and the causal triangle into one mask.

    Returns None when nothing is masked, a boolean mask (True = may attend) when
    every part is boolean, else a float mask with -inf where a boolean part blocks.
    The result broadcasts to (B, H, N, M).
    """
    allowed = None
    if key_mask is not None:
        allowed = key_mask[:, None, None, :]  # (B, M) -> (B, 1, 1, M)
    if is_causal:
        i = torch.arange(n, device=device).unsqueeze(-1)  # (N, 1)
        j = torch.arange(m, device=device)  # (M,)
        causal = j <= i + (m - n)  # lower-right aligned: (N, 1) vs (M,) -> (N, M)
        allowed = causal if allowed is None else allowed & causal  # -> (B, 1, N, M)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        allowed = attn_mask if allowed is None else allowed & attn_mask
    if attn_mask is None or attn_mask.dtype == torch.bool:
        return allowed
    if allowed is None:
        return attn_mask
    # -inf, not a large negative constant: exp(-inf) is exactly 0 in every dtype.
    return attn_mask.masked_fill(~allowed, float("-inf"))  # broadcast -> (B?, H?, N, M)
# --8<-- [end:mask]


# --8<-- [start:zero_empty_rows]
def _zero_empty_rows(out: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Zero the output of every query that may attend to no key.

    PyTorch's kernels disagree on such rows: the CPU kernels and CUDA's math and
    memory-efficient kernels return zeros, but cuDNN (fp16/bf16 on recent GPUs)
    returns attention over every key for a boolean mask row that is all False.
    Zeroing here gives the same answer on every backend.
    """
    if mask is None:
        return out
    allowed = mask if mask.dtype == torch.bool else ~torch.isneginf(mask)
    empty = ~allowed.any(dim=-1, keepdim=True)  # (..., N, M) -> (..., N, 1)
    return out.masked_fill(empty, 0.0)  # (..., N, d) with empty rows zeroed
# --8<-- [end:zero_empty_rows]


# --8<-- [start:repeat_kv]
def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """Repeat each key/value head ``n_rep`` times, next to itself.

    The copying form of grouped-query attention: after it, ordinary multi-head
    attention gives the same result. Head ``h`` of the output is head
    ``h // n_rep`` of the input.

    Args:
        x: keys or values, ``(B, H_kv, M, d)``.
        n_rep: G, the number of query heads per key/value head.

    Returns:
        ``(B, H_kv * n_rep, M, d)``.
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must be a 4-D tensor (B, H_kv, M, d), got {got}")
    if isinstance(n_rep, bool) or not isinstance(n_rep, int) or n_rep < 1:
        raise ValueError(f"n_rep must be a positive int, got {n_rep!r}")
    return x.repeat_interleave(n_rep, dim=1)  # (B, H_kv, M, d) -> (B, H_kv * G, M, d)
# --8<-- [end:repeat_kv]


class GroupedQueryAttention(nn.Module):
    """Attention with ``n_heads`` query heads sharing ``n_kv_heads`` key/value heads.

    ``n_kv_heads == n_heads`` is multi-head attention; ``n_kv_heads == 1`` is
    multi-query attention.

    Args:
        d_model: D, the width of the input and of the output.
        n_heads: H, the number of query heads; ``d_model`` must be divisible by it.
        n_kv_heads: H_kv, the number of key/value heads; it must divide ``n_heads``.
        dropout: probability of zeroing an attention weight, in training only.
        bias: give the projections a bias.

    Shape:
        query ``(B, N, D)``, key/value ``(B, M, D)`` -> output ``(B, N, D)`` and,
        on request, weights ``(B, H, N, M)``.
    """

    # --8<-- [start:init]
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int,
        *,
        dropout: float = 0.0,
        bias: bool = True,
    ) -> None:
        super().__init__()
        for name, value in (("d_model", d_model), ("n_heads", n_heads), ("n_kv_heads", n_kv_heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if d_model % n_heads != 0:
            raise ValueError(
                f"d_model must be divisible by n_heads, got d_model={d_model} and n_heads={n_heads}"
            )
        if n_heads % n_kv_heads != 0:
            raise ValueError(
                f"n_kv_heads must divide n_heads, got n_heads={n_heads} and "
                f"n_kv_heads={n_kv_heads} (n_heads / n_kv_heads = {n_heads / n_kv_heads:g})"
            )
        _check_dropout("dropout", dropout)
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.d_head = d_model // n_heads  # d = D / H
        self.n_groups = n_heads // n_kv_heads  # G query heads per key/value head
        self.dropout = float(dropout)
        self.kdim = self.vdim = d_model
        self.q_proj = nn.Linear(d_model, n_heads * self.d_head, bias=bias)  # (D) -> (H d)
        # The saving: keys and values get H_kv heads, not H.
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)  # (D) -> (H_kv d)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)  # (D) -> (H_kv d)
        self.out_proj = nn.Linear(n_heads * self.d_head, d_model, bias=bias)  # (H d) -> (D)
    # --8<-- [end:init]

    def _split_heads(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        b, length, _ = x.shape
        x = x.view(b, length, heads, self.d_head)  # (B, L, heads * d) -> (B, L, heads, d)
        return x.transpose(1, 2)  # (B, L, heads, d) -> (B, heads, L, d)

    # --8<-- [start:forward]
    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        *,
        attn_mask: torch.Tensor | None = None,
        key_mask: torch.Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``query`` to ``key``/``value``, H query heads over H_kv key/value heads.

        Args:
            query: ``(B, N, D)``.
            key: ``(B, M, D)``; None means ``query`` (self-attention).
            value: ``(B, M, D)``; None means ``key``.
            attn_mask: None, a boolean mask (True = may attend) or a float mask
                added to the scores, broadcastable to ``(B, H, N, M)``.
            key_mask: ``(B, M)`` boolean, True = a real key that may be attended.
            is_causal: apply the lower-right aligned causal mask.
            need_weights: also return the per-head weights (explicit path).

        Returns:
            ``(out, weights)``: ``out`` is ``(B, N, D)``; ``weights`` is
            ``(B, H, N, M)`` (softmax before dropout) or None.
        """
        key = query if key is None else key
        value = key if value is None else value
        _check_input("query", query, self.d_model, "D")
        _check_input("key", key, self.d_model, "D")
        _check_input("value", value, self.d_model, "D")
        for name, t in (("query", query), ("key", key), ("value", value)):
            _check_like_module(name, t, self.out_proj.weight)
        B, N, D = query.shape
        M = key.shape[1]
        if key.shape[0] != B or value.shape[0] != B or value.shape[1] != M:
            raise ValueError(
                f"key and value must have shape (B, M, D) with the query's B, got query "
                f"{tuple(query.shape)}, key {tuple(key.shape)} and value {tuple(value.shape)}"
            )
        _check_masks(attn_mask, key_mask, (B, self.n_heads, N, M), query.dtype, query.device)
        mask = _combine_masks(attn_mask, key_mask, is_causal, N, M, query.device)

        q = self._split_heads(self.q_proj(query), self.n_heads)  # (B, N, D) -> (B, H, N, d)
        k = self._split_heads(self.k_proj(key), self.n_kv_heads)  # (B, M, D) -> (B, H_kv, M, d)
        v = self._split_heads(self.v_proj(value), self.n_kv_heads)  # (B, M, D) -> (B, H_kv, M, d)
        dropout_p = self.dropout if self.training else 0.0

        if need_weights:
            out, weights = self._attend_grouped(q, k, v, mask, dropout_p)
        else:
            # enable_gqa lets the kernel read head h // G of k and v without copying them.
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout_p, enable_gqa=True
            )  # (B, H, N, d), (B, H_kv, M, d) x 2 -> (B, H, N, d)
            out = _zero_empty_rows(out, mask)  # the same zeros on every backend
            weights = None

        out = out.transpose(1, 2).reshape(B, N, D)  # (B, H, N, d) -> (B, N, H, d) -> (B, N, D)
        return self.out_proj(out), weights  # (B, N, D) @ (D, D) -> (B, N, D)
    # --8<-- [end:forward]

    # --8<-- [start:explicit]
    def _attend_grouped(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None,
        dropout_p: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """softmax(q k^T / sqrt(d) + mask) v with the G heads of a group sharing k, v.

        Instead of copying k and v G times, the query heads are viewed as
        (H_kv, G) and broadcasting pairs every group with its one key/value head.
        """
        B, H, N, d = q.shape
        M = k.shape[-2]
        acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
        q = q.reshape(B, self.n_kv_heads, self.n_groups, N, d)  # (B, H, N, d) -> (B, H_kv, G, N, d)
        k = k.unsqueeze(2)  # (B, H_kv, M, d) -> (B, H_kv, 1, M, d)
        v = v.unsqueeze(2)  # (B, H_kv, M, d) -> (B, H_kv, 1, M, d)
        scale = 1.0 / math.sqrt(d)
        scores = (q.to(acc) * scale) @ k.to(acc).transpose(-2, -1)  # (B, H_kv, G, N, d) @ (B, H_kv, 1, d, M) -> (B, H_kv, G, N, M)
        scores = scores.reshape(B, H, N, M)  # (B, H_kv, G, N, M) -> (B, H, N, M), head h = group h // G
        if mask is not None and mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        elif mask is not None:
            scores = scores + mask.to(acc)
        # A query with no allowed key has a row of only -inf: softmax would give
        # 0/0 = NaN (and NaN gradients through a float mask). Score it 0 instead,
        # then give it zero weights, so it returns zeros.
        empty_row = torch.isneginf(scores).all(dim=-1, keepdim=True)  # (B, H, N, 1)
        weights = torch.softmax(scores.masked_fill(empty_row, 0.0), dim=-1)  # each query's row over its M keys sums to 1
        weights = weights.masked_fill(empty_row, 0.0)
        dropped = F.dropout(weights, dropout_p) if dropout_p > 0 else weights
        dropped = dropped.reshape(B, self.n_kv_heads, self.n_groups, N, M)  # (B, H, N, M) -> (B, H_kv, G, N, M)
        out = dropped @ v.to(acc)  # (B, H_kv, G, N, M) @ (B, H_kv, 1, M, d) -> (B, H_kv, G, N, d)
        out = out.reshape(B, H, N, d)  # (B, H_kv, G, N, d) -> (B, H, N, d)
        return out.to(q.dtype), weights.to(q.dtype)
    # --8<-- [end:explicit]

    # --8<-- [start:from_torch]
    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention, n_kv_heads: int) -> "GroupedQueryAttention":
        """Convert ``nn.MultiheadAttention`` to grouped-query attention.

        The query and output projections are copied; the key and value
        projections of the G heads in each group are mean-pooled into one head,
        the conversion Ainslie et al. found best before uptraining. With
        ``n_kv_heads == mha.num_heads`` nothing is pooled and the result equals
        ``mha``.

        Args:
            mha: a self-attention ``nn.MultiheadAttention`` (kdim = vdim = D).
            n_kv_heads: H_kv for the new module.

        Returns:
            A ``GroupedQueryAttention`` on the same device and dtype.
        """
        if not isinstance(mha, nn.MultiheadAttention):
            raise TypeError(f"mha must be an nn.MultiheadAttention, got {type(mha).__name__}")
        if not mha._qkv_same_embed_dim or mha.bias_k is not None or mha.add_zero_attn:
            raise ValueError(
                "mha must have kdim = vdim = embed_dim and no add_bias_kv or add_zero_attn, got "
                f"kdim={mha.kdim}, vdim={mha.vdim}, embed_dim={mha.embed_dim}, "
                f"add_bias_kv={mha.bias_k is not None}, add_zero_attn={mha.add_zero_attn}"
            )
        bias = mha.in_proj_bias is not None
        ref = mha.out_proj.weight
        new = cls(mha.embed_dim, mha.num_heads, n_kv_heads, dropout=mha.dropout,
                  bias=bias).to(device=ref.device, dtype=ref.dtype)
        d, g = new.d_head, new.n_groups
        w_q, w_k, w_v = mha.in_proj_weight.chunk(3, dim=0)  # (3D, D) -> 3 x (D, D)
        b_q, b_k, b_v = mha.in_proj_bias.chunk(3) if bias else (None, None, None)

        def pool(t: torch.Tensor) -> torch.Tensor:
            # rows of head h are [h d, (h + 1) d): mean over the G heads of each group
            return t.reshape(n_kv_heads, g, d, *t.shape[1:]).mean(dim=1).reshape(n_kv_heads * d, *t.shape[1:])

        with torch.no_grad():
            new.q_proj.weight.copy_(w_q)
            new.k_proj.weight.copy_(pool(w_k))
            new.v_proj.weight.copy_(pool(w_v))
            new.out_proj.weight.copy_(mha.out_proj.weight)
            if bias:
                new.q_proj.bias.copy_(b_q)
                new.k_proj.bias.copy_(pool(b_k))
                new.v_proj.bias.copy_(pool(b_v))
                new.out_proj.bias.copy_(mha.out_proj.bias)
        return new.train(mha.training)
    # --8<-- [end:from_torch]
