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
from torch import Tensor, nn

__all__ = ["GroupedQueryAttention", "repeat_kv"]


# --8<-- [start:split_heads]
def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """Columns [h d, (h + 1) d) of each token go to head h."""
    b, length, _ = x.shape
    # (B, L, H d) -> (B, L, H, d) -> (B, H, L, d)
    return x.view(b, length, n_heads, -1).transpose(1, 2)
# --8<-- [end:split_heads]


# --8<-- [start:grouped_attention]
def grouped_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, dropout_p: float = 0.0
) -> tuple[Tensor, Tensor]:
    """softmax(q k^T / sqrt(d) + A) v, the G query heads of a group sharing one k, v."""
    (b, h, n, d), (h_kv, m) = q.shape, k.shape[1:3]
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    qg = q.to(acc).reshape(b, h_kv, h // h_kv, n, d)  # (B, H_kv, G, N, d)
    # (B, H_kv, G, N, d) @ (B, H_kv, 1, d, M) -> (B, H_kv, G, N, M) -> (B, H, N, M)
    scores = (qg @ k.to(acc).unsqueeze(2).transpose(-2, -1)).reshape(b, h, n, m)
    scores = scores / math.sqrt(d)
    if mask is not None and mask.dtype != torch.bool:  # a float mask adds; -inf blocks
        scores = scores + mask.to(acc)
        mask = ~torch.isneginf(scores)
    weights = _masked_softmax(scores, mask)  # (B, H, N, M), each row sums to 1 (or 0)
    dropped = F.dropout(weights, dropout_p) if dropout_p > 0 else weights
    # (B, H_kv, G, N, M) @ (B, H_kv, 1, M, d) -> (B, H_kv, G, N, d) -> (B, H, N, d)
    out = dropped.reshape(b, h_kv, -1, n, m) @ v.to(acc).unsqueeze(2)
    return out.reshape(b, h, n, d).to(q.dtype), weights.to(q.dtype)
# --8<-- [end:grouped_attention]


# --8<-- [start:merge_heads]
def merge_heads(x: Tensor) -> Tensor:
    """Concatenate the heads back: (B, H, N, d) -> (B, N, H d)."""
    b, _, n, _ = x.shape
    return x.transpose(1, 2).reshape(b, n, -1)  # (B, N, H, d) -> (B, N, D)
# --8<-- [end:merge_heads]


# --8<-- [start:repeat_kv]
def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """Copy each key/value head n_rep times, next to itself: head h reads h // n_rep."""
    _check_repeat_kv(x, n_rep)
    return x.repeat_interleave(n_rep, dim=1)  # (B, H_kv, M, d) -> (B, H_kv G, M, d)
# --8<-- [end:repeat_kv]


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


# --8<-- [start:combine_masks]
def _combine_masks(
    attn_mask: Tensor | None, key_mask: Tensor | None, is_causal: bool, n: int, m: int
) -> Tensor | None:
    """attn_mask, key_mask and the causal triangle as one mask (None, bool or float)."""
    allowed = None if key_mask is None else key_mask[:, None, None, :]  # (B, 1, 1, M)
    if is_causal:
        device = key_mask.device if key_mask is not None else None
        device = attn_mask.device if attn_mask is not None else device
        i = torch.arange(n, device=device).unsqueeze(-1)  # (N, 1)
        causal = torch.arange(m, device=device) <= i + (m - n)  # lower right: (N, M)
        allowed = causal if allowed is None else allowed & causal  # -> (B, 1, N, M)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        allowed = attn_mask if allowed is None else allowed & attn_mask
    if attn_mask is None or attn_mask.dtype == torch.bool:
        return allowed
    if allowed is None:
        return attn_mask
    # -inf, not a large negative constant: exp(-inf) is exactly 0 in every dtype.
    return attn_mask.masked_fill(~allowed, float("-inf"))  # broadcasts to (B, H, N, M)
# --8<-- [end:combine_masks]


# --8<-- [start:validate]
def _check_repeat_kv(x: Tensor, n_rep: int) -> None:
    """Refuse x that is not (B, H_kv, M, d) and a count that is not an int > 0."""
    is_4d = isinstance(x, Tensor) and x.dim() == 4
    _check_heads_arg(is_4d, "x", getattr(x, "shape", x), "a 4-D tensor (B, H_kv, M, d)")
    _check_heads_arg(isinstance(n_rep, int) and n_rep > 0, "n_rep", n_rep, "an int > 0")
# --8<-- [end:validate]


# --8<-- [start:check_inputs]
def _check_heads_arg(ok: bool, name: str, got: object, want: str) -> None:
    """Raise a ValueError naming the argument, what it must be and what it got."""
    if not ok:
        raise ValueError(f"{name} must be {want}, got {got}")


def _check_heads_input(name, t, shape, like, dtypes=None, min_rank=0) -> None:
    """Refuse t unless it is a tensor of this shape, dtype and like's device.

    A letter in ``shape`` takes any size. ``dtypes=None`` asks for like's dtype
    (or any, under autocast); with dtypes given, t is a mask and may be None. With
    ``min_rank``, t may drop leading dimensions down to ``min_rank`` and hold 1
    anywhere: a mask that broadcasts.
    """
    is_tensor, mask = isinstance(t, Tensor), dtypes is not None
    fits = is_tensor and (min_rank or len(shape)) <= t.dim() <= len(shape) and all(
        isinstance(w, str) or s == w or (min_rank and s == 1)
        for s, w in zip(t.shape[::-1], shape[::-1]))
    kind = like.device.type  # under autocast the inputs may come in another dtype
    amp = torch.amp.is_autocast_available(kind) and torch.is_autocast_enabled(kind)
    dtypes = dtypes or (like.dtype,)
    typed = is_tensor and (t.dtype in dtypes or amp and not mask)  # a mask: never amp
    if not (fits and typed and t.device == like.device or mask and t is None):
        got = f"{t.dtype} {tuple(t.shape)} on {t.device}" if is_tensor else t
        dims = ("broadcasting to " if min_rank else "") + ", ".join(map(str, shape))
        want = f"a {' or '.join(map(str, dtypes))} tensor ({dims})"
        error = ValueError if is_tensor and t.dtype in dtypes else TypeError
        raise error(f"{name} must be {want} on {like.device}, got {got}")
# --8<-- [end:check_inputs]


# --8<-- [start:module]
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

    Calling the module: ``gqa(query, key=None, value=None, *, attn_mask=None,
    key_mask=None, is_causal=False, need_weights=False)``, the arguments of
    ``MultiHeadAttention`` (multi_head.py): ``key`` None means ``query``,
    ``value`` None means ``key``; ``attn_mask`` is boolean (True = may attend)
    or a float added to the scores, broadcastable to ``(B, H, N, M)``;
    ``key_mask`` is ``(B, M)``, True = a real key; ``is_causal`` applies the
    lower-right causal mask; ``need_weights`` runs the written-out kernel.

    Returns:
        ``(out, weights)``: ``out`` is ``(B, N, D)``; ``weights`` is
        ``(B, H, N, M)`` (softmax before dropout) or None.

    Shape:
        query ``(B, N, D)``, key/value ``(B, M, D)`` -> output ``(B, N, D)`` and,
        on request, weights ``(B, H, N, M)``.
    """

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
        sizes = {"d_model": d_model, "n_heads": n_heads, "n_kv_heads": n_kv_heads}
        for name, size in sizes.items():
            ok = isinstance(size, int) and size > 0
            _check_heads_arg(ok, name, size, "an int > 0")
        _check_heads_arg(d_model % n_heads == 0, "n_heads", n_heads,
                         f"a divisor of d_model = {d_model}")
        _check_heads_arg(n_heads % n_kv_heads == 0, "n_kv_heads", n_kv_heads,
                         f"a divisor of n_heads = {n_heads}")
        ok = isinstance(dropout, (int, float)) and 0 <= dropout < 1
        _check_heads_arg(ok, "dropout", dropout, "a float in [0, 1)")
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.d_head = d_model // n_heads  # d = D / H
        self.n_groups = n_heads // n_kv_heads  # G query heads per key/value head
        self.dropout = float(dropout)
        self.kdim = self.vdim = d_model
        d = self.d_head
        self.q_proj = nn.Linear(d_model, n_heads * d, bias=bias)  # (D) -> (H d)
        # The saving: keys and values get H_kv heads, not H.
        self.k_proj = nn.Linear(d_model, n_kv_heads * d, bias=bias)  # (D) -> (H_kv d)
        self.v_proj = nn.Linear(d_model, n_kv_heads * d, bias=bias)  # (D) -> (H_kv d)
        self.out_proj = nn.Linear(n_heads * d, d_model, bias=bias)  # (H d) -> (D)

    def _fast_attention(self, q: Tensor, k: Tensor, v: Tensor, mask) -> Tensor:
        """The heads on F.scaled_dot_product_attention, reading k, v without copies."""
        p = self.dropout if self.training else 0.0
        # enable_gqa: query head h reads key/value head h // G, nothing is repeated
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=p, enable_gqa=True
        )  # (B, H, N, d), (B, H_kv, M, d) x 2 -> (B, H, N, d)
        return _zero_empty_rows(out, mask)  # the same zeros on every backend

    def _check_forward(self, query, key, value, attn_mask, key_mask) -> None:
        """Refuse inputs and masks that do not fit this module or each other."""
        w = self.out_proj.weight
        _check_heads_input("query", query, ("B", "N", self.d_model), w)
        _check_heads_input("key", key, (len(query), "M", self.kdim), w)
        b, h, n, m = len(query), self.n_heads, query.shape[1], key.shape[1]
        _check_heads_input("value", value, (b, m, self.vdim), w)
        # attn_mask: bool (True = may attend) or float (added); key_mask: True = real
        _check_heads_input("attn_mask", attn_mask, (b, h, n, m), query,
                           (torch.bool, query.dtype), min_rank=2)
        _check_heads_input("key_mask", key_mask, (b, m), query, (torch.bool,))
    # --8<-- [end:module]

    # --8<-- [start:forward]
    def forward(
        self, query: Tensor, key: Tensor | None = None, value: Tensor | None = None, *,
        attn_mask: Tensor | None = None, key_mask: Tensor | None = None,
        is_causal: bool = False, need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """[head_1, ..., head_H] W^O, head_h reading key/value head h // G."""
        key = query if key is None else key
        value = key if value is None else value
        self._check_forward(query, key, value, attn_mask, key_mask)
        n, m = query.shape[1], key.shape[1]
        mask = _combine_masks(attn_mask, key_mask, is_causal, n, m)  # (B?, H?, N, M)
        q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        q = split_heads(q, self.n_heads)  # (B, N, H d) -> (B, H, N, d)
        k, v = (split_heads(t, self.n_kv_heads) for t in (k, v))  # (B, H_kv, M, d)
        if need_weights:  # written out: (B, H, N, d) and the weights (B, H, N, M)
            p = self.dropout if self.training else 0.0
            out, weights = grouped_attention(q, k, v, mask, p)
        else:
            out, weights = self._fast_attention(q, k, v, mask), None
        return self.out_proj(merge_heads(out)), weights  # (B, N, D) @ (D, D)^T
    # --8<-- [end:forward]

    # --8<-- [start:from_torch]
    @classmethod
    def from_torch(
        cls, mha: nn.MultiheadAttention, n_kv_heads: int
    ) -> GroupedQueryAttention:
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
        ok = isinstance(mha, nn.MultiheadAttention) and mha._qkv_same_embed_dim
        ok = ok and mha.bias_k is None and not mha.add_zero_attn  # no extra keys
        want = ("an nn.MultiheadAttention with kdim = vdim = embed_dim, without "
                "add_bias_kv or add_zero_attn")
        _check_heads_arg(ok, "mha", type(mha).__name__, want)
        bias = mha.in_proj_bias is not None
        ref = mha.out_proj.weight
        new = cls(mha.embed_dim, mha.num_heads, n_kv_heads, dropout=mha.dropout,
                  bias=bias).to(device=ref.device, dtype=ref.dtype)
        d, g = new.d_head, new.n_groups
        w_q, w_k, w_v = mha.in_proj_weight.chunk(3, dim=0)  # (3D, D) -> 3 x (D, D)
        b_q, b_k, b_v = mha.in_proj_bias.chunk(3) if bias else (None, None, None)

        def pool(t: Tensor) -> Tensor:
            # rows of head h are [h d, (h + 1) d): mean over the G heads of each group
            rest = t.shape[1:]
            return t.reshape(n_kv_heads, g, d, *rest).mean(1).reshape(-1, *rest)

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
