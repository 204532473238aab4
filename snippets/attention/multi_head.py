"""Multi-head attention: H scaled dot-product attentions side by side.

Paper: Vaswani, Shazeer, Parmar, Uszkoreit, Jones, Gomez, Kaiser and Polosukhin
(2017), "Attention Is All You Need", arXiv:1706.03762, section 3.2.2.
Page: docs/attention/multi-head.md
Tested against: torch.nn.MultiheadAttention with its weights copied in, and
torch.nn.functional.scaled_dot_product_attention (tests/test_multi_head.py).

Mask convention (the same as ``F.scaled_dot_product_attention``, the opposite of
``nn.MultiheadAttention``): a boolean ``attn_mask`` is True where a query MAY
attend to a key; a floating ``attn_mask`` is added to the scores. ``key_mask``
is ``(B, M)`` and True marks a real key (``nn.MultiheadAttention``'s
``key_padding_mask`` is True for a padded key: pass ``~key_padding_mask``).
``is_causal=True`` aligns the triangle to the lower right when N != M. All three
may be given together; a key must be allowed by every one of them. A query
that may attend to no key returns zeros.

Two paths compute the same thing. With ``need_weights=True`` the kernel
``attention_per_head`` writes out the scores, softmax and ``weights @ v`` (the
reference, and the only way to see the weights); otherwise the heads run on
``F.scaled_dot_product_attention``, which never holds the (N, M) matrix of a
whole head when a fused kernel serves it.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["MultiHeadAttention"]


# --8<-- [start:split_heads]
def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """Columns [h d, (h + 1) d) of each token go to head h."""
    b, length, _ = x.shape
    # (B, L, H d) -> (B, L, H, d) -> (B, H, L, d)
    return x.view(b, length, n_heads, -1).transpose(1, 2)
# --8<-- [end:split_heads]


# --8<-- [start:attention_per_head]
def attention_per_head(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, dropout_p: float = 0.0
) -> tuple[Tensor, Tensor]:
    """softmax(q k^T / sqrt(d) + A) v for every head; a row with no key gives 0."""
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    # (B, H, N, d) @ (B, H, d, M) -> (B, H, N, M): the sqrt of one head's d, not of D
    scores = q.to(acc) @ k.to(acc).transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None and mask.dtype != torch.bool:  # a float mask adds; -inf blocks
        scores = scores + mask.to(acc)
        mask = ~torch.isneginf(scores)
    weights = _masked_softmax(scores, mask)  # (B, H, N, M), each row sums to 1 (or 0)
    dropped = F.dropout(weights, dropout_p) if dropout_p > 0 else weights
    out = dropped @ v.to(acc)  # (B, H, N, M) @ (B, H, M, d) -> (B, H, N, d)
    return out.to(q.dtype), weights.to(q.dtype)
# --8<-- [end:attention_per_head]


# --8<-- [start:merge_heads]
def merge_heads(x: Tensor) -> Tensor:
    """Concatenate the heads back: (B, H, N, d) -> (B, N, H d)."""
    b, _, n, _ = x.shape
    return x.transpose(1, 2).reshape(b, n, -1)  # (B, N, H, d) -> (B, N, D)
# --8<-- [end:merge_heads]


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
class MultiHeadAttention(nn.Module):
    """Multi-head attention, batch-first, with a fused input projection.

    Args:
        d_model: D, the width of the queries and of the output.
        n_heads: H, the number of heads; ``d_model`` must be divisible by it.
        dropout: probability of zeroing an attention weight, in training only.
        bias: give the projections a bias.
        kdim: width of the keys before projection (``d_model`` when None).
        vdim: width of the values before projection (``d_model`` when None).

    Calling the module: ``mha(query, key=None, value=None, *, attn_mask=None,
    key_mask=None, is_causal=False, need_weights=False)``. ``key`` None means
    ``query`` (self-attention) and ``value`` None means ``key``. ``attn_mask``
    is boolean (True = may attend) or a float added to the scores, broadcastable
    to ``(B, H, N, M)``; ``key_mask`` is ``(B, M)`` boolean, True = a real key;
    ``is_causal`` applies the lower-right aligned causal mask; ``need_weights``
    runs the written-out kernel and returns the per-head weights.

    Returns:
        ``(out, weights)``: ``out`` is ``(B, N, D)``; ``weights`` is
        ``(B, H, N, M)`` (softmax before dropout) or None.

    Shape:
        query ``(B, N, D)``, key ``(B, M, kdim)``, value ``(B, M, vdim)`` ->
        output ``(B, N, D)`` and, on request, weights ``(B, H, N, M)``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        dropout: float = 0.0,
        bias: bool = True,
        kdim: int | None = None,
        vdim: int | None = None,
    ) -> None:
        super().__init__()
        self.kdim = d_model if kdim is None else kdim
        self.vdim = d_model if vdim is None else vdim
        sizes = {"d_model": d_model, "n_heads": n_heads, "kdim": self.kdim,
                 "vdim": self.vdim}
        for name, size in sizes.items():
            ok = isinstance(size, int) and size > 0
            _check_heads_arg(ok, name, size, "an int > 0")
        _check_heads_arg(d_model % n_heads == 0, "n_heads", n_heads,
                         f"a divisor of d_model = {d_model}")
        ok = isinstance(dropout, (int, float)) and 0 <= dropout < 1
        _check_heads_arg(ok, "dropout", dropout, "a float in [0, 1)")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.dropout = float(dropout)
        self.fused = self.kdim == d_model and self.vdim == d_model
        if self.fused:
            # One (3D, D) matrix: rows [0, D) make q, [D, 2D) make k, [2D, 3D) make v.
            self.in_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
            projections = [self.in_proj]
        else:  # keys and values arrive with other widths: three matrices of their own
            self.q_proj = nn.Linear(d_model, d_model, bias=bias)
            self.k_proj = nn.Linear(self.kdim, d_model, bias=bias)
            self.v_proj = nn.Linear(self.vdim, d_model, bias=bias)
            projections = [self.q_proj, self.k_proj, self.v_proj]
        for proj in projections:  # nn.MultiheadAttention's initialisation
            nn.init.xavier_uniform_(proj.weight)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        for module in (*projections, self.out_proj) if bias else ():
            nn.init.zeros_(module.bias)

    def _project(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, ...]:
        """q, k, v of width D each (still (B, length, D))."""
        if not self.fused:
            return self.q_proj(query), self.k_proj(key), self.v_proj(value)
        if query is key and key is value:  # self-attention: one matmul for all three
            return self.in_proj(query).chunk(3, dim=-1)  # (B, N, 3D) -> 3 x (B, N, D)
        w_q, w_k, w_v = self.in_proj.weight.chunk(3, dim=0)  # (3D, D) -> 3 x (D, D)
        b = self.in_proj.bias
        b_q, b_k, b_v = b.chunk(3) if b is not None else (None, None, None)
        q, k = F.linear(query, w_q, b_q), F.linear(key, w_k, b_k)
        return q, k, F.linear(value, w_v, b_v)

    def _fast_attention(self, q: Tensor, k: Tensor, v: Tensor, mask) -> Tensor:
        """The heads on F.scaled_dot_product_attention: no (N, M) weights kept."""
        p = self.dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
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
        """[head_1, ..., head_H] W^O, head_h = softmax(Q_h K_h^T / sqrt(d) + A) V_h."""
        key = query if key is None else key
        value = key if value is None else value
        self._check_forward(query, key, value, attn_mask, key_mask)
        n, m = query.shape[1], key.shape[1]
        mask = _combine_masks(attn_mask, key_mask, is_causal, n, m)  # (B?, H?, N, M)
        q, k, v = self._project(query, key, value)  # (B, N, D), (B, M, D), (B, M, D)
        q, k, v = (split_heads(t, self.n_heads) for t in (q, k, v))  # (B, H, L, d)
        if need_weights:  # written out: (B, H, N, d) and the weights (B, H, N, M)
            p = self.dropout if self.training else 0.0
            out, weights = attention_per_head(q, k, v, mask, p)
        else:
            out, weights = self._fast_attention(q, k, v, mask), None
        return self.out_proj(merge_heads(out)), weights  # (B, N, D) @ (D, D)^T
    # --8<-- [end:forward]

    # --8<-- [start:from_torch]
    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention) -> MultiHeadAttention:
        """An equivalent batch-first module with the weights of ``mha`` copied in.

        Works for ``batch_first`` True or False (the weights are the same; only
        the layout of the inputs differs, and this module is always batch-first).

        Args:
            mha: the module to copy.

        Returns:
            A ``MultiHeadAttention`` on the same device and dtype.
        """
        ok = isinstance(mha, nn.MultiheadAttention)  # and no extra keys to attend to
        ok = ok and mha.bias_k is None and not mha.add_zero_attn
        want = "an nn.MultiheadAttention without add_bias_kv or add_zero_attn"
        _check_heads_arg(ok, "mha", type(mha).__name__, want)
        bias = mha.in_proj_bias is not None
        ref = mha.out_proj.weight
        new = cls(mha.embed_dim, mha.num_heads, dropout=mha.dropout, bias=bias,
                  kdim=mha.kdim, vdim=mha.vdim).to(device=ref.device, dtype=ref.dtype)
        with torch.no_grad():
            if new.fused:
                new.in_proj.weight.copy_(mha.in_proj_weight)
                if bias:
                    new.in_proj.bias.copy_(mha.in_proj_bias)
            else:
                projs = (new.q_proj, new.k_proj, new.v_proj)
                weights = (mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight)
                for proj, w in zip(projs, weights):
                    proj.weight.copy_(w)
                if bias:
                    for proj, b in zip(projs, mha.in_proj_bias.chunk(3)):
                        proj.bias.copy_(b)
            new.out_proj.weight.copy_(mha.out_proj.weight)
            if bias:
                new.out_proj.bias.copy_(mha.out_proj.bias)
        return new.train(mha.training)
    # --8<-- [end:from_torch]
