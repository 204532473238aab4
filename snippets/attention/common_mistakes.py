"""Common attention mistakes, each as a wrong/right pair of small functions.

Every ``*_wrong`` function below contains one mistake that runs without an
error and returns a tensor of the right shape; its partner without the suffix
is the fix. The tests pin both: the wrong one differs from an oracle (and the
test says how), the fix equals it.

Paper: the attention being computed is scaled dot-product attention from
Vaswani, Shazeer, Parmar, Uszkoreit, Jones, Gomez, Kaiser and Polosukhin (2017),
"Attention Is All You Need", arXiv:1706.03762, equation (1).
Page: docs/attention/common-mistakes.md
Tested against: torch.nn.functional.scaled_dot_product_attention and
torch.nn.MultiheadAttention (tests/test_common_mistakes.py).

Mask convention of this site: a boolean ``allowed`` / ``attn_mask`` is True
where a query MAY attend, as in ``F.scaled_dot_product_attention``.

This file needs only torch and the standard library: copy it into a project.
Sections come in pairs, ``<mistake>_wrong`` and ``<mistake>_right``, so the
page can show them side by side. The wrong functions are kept only so that
the tests and the page can show what goes wrong; never call them in a model.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "weights_wrong_axis",
    "weights_right_axis",
    "weights_unscaled",
    "weights_scaled",
    "self_attention_wrong_value",
    "self_attention",
    "masked_attention_wrong",
    "masked_attention",
    "mha_masked_wrong",
    "mha_masked",
    "cached_decode_wrong",
    "cached_decode",
    "cached_decode_bias",
    "DropoutAttentionWrong",
    "DropoutAttention",
    "masked_weights_wrong",
    "masked_weights",
    "masked_weights_finfo_min",
    "mha_self_attend_wrong",
    "mha_self_attend",
]


# --8<-- [start:validate]
def _check_query_key(q: torch.Tensor, k: torch.Tensor) -> None:
    """Refuse q (..., N, d) and k (..., M, d) that cannot be scored together."""
    for name, t in (("q", q), ("k", k)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must have a floating dtype, got {t.dtype}")
        if t.dim() < 2:
            raise ValueError(
                f"{name} must have at least 2 dimensions (..., length, d), "
                f"got shape {tuple(t.shape)}"
            )
    if q.dtype != k.dtype:
        raise TypeError(f"q and k must share one dtype, got {q.dtype} and {k.dtype}")
    if q.device != k.device:
        raise ValueError(
            f"q and k must be on one device, got {q.device} and {k.device}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same last dimension d, got q {tuple(q.shape)} "
            f"and k {tuple(k.shape)}"
        )
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    except RuntimeError:
        raise ValueError(
            "q and k must have leading (batch, head) dimensions that broadcast, "
            f"got q {tuple(q.shape)} and k {tuple(k.shape)}"
        ) from None


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Raise a clear error unless q, k, v can be attended together."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must have a floating dtype, got {t.dtype}")
        if t.dim() < 2:
            raise ValueError(
                f"{name} must have at least 2 dimensions (..., length, width), "
                f"got shape {tuple(t.shape)}"
            )
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(
            f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}"
        )
    if not (q.device == k.device == v.device):
        raise ValueError(
            f"q, k and v must be on one device, got {q.device}, {k.device} "
            f"and {v.device}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same last dimension d, got q {tuple(q.shape)} "
            f"and k {tuple(k.shape)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same length M (dimension -2), got k "
            f"{tuple(k.shape)} and v {tuple(v.shape)}"
        )
    try:  # the leading (batch, head) dimensions pair up as in torch.matmul
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            "q, k and v must have leading (batch, head) dimensions that broadcast, "
            f"got q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)}"
        ) from None


def _check_allowed(
    allowed: torch.Tensor, shape: tuple[int, ...], device: torch.device
) -> None:
    """Refuse a mask that is not bool (True = may attend), on device, fitting shape."""
    if not isinstance(allowed, torch.Tensor) or allowed.dtype != torch.bool:
        got = (
            allowed.dtype
            if isinstance(allowed, torch.Tensor)
            else type(allowed).__name__
        )
        raise TypeError(
            f"allowed must be a torch.bool tensor (True = may attend), got {got}"
        )
    if allowed.device != device:
        raise ValueError(
            f"allowed must be on the device of the scores {device}, "
            f"got {allowed.device}"
        )
    try:
        fits = torch.broadcast_shapes(allowed.shape, shape) == shape
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"allowed must broadcast to the scores {tuple(shape)}, "
            f"got shape {tuple(allowed.shape)}"
        )


def _check_masked_inputs(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor
) -> None:
    _check_qkv(q, k, v)
    scores = (
        *torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]),
        q.shape[-2],
        k.shape[-2],
    )
    _check_allowed(allowed, scores, q.device)


def _check_scores_allowed(scores: torch.Tensor, allowed: torch.Tensor) -> None:
    if not isinstance(scores, torch.Tensor) or not scores.is_floating_point():
        got = (
            scores.dtype if isinstance(scores, torch.Tensor) else type(scores).__name__
        )
        raise TypeError(f"scores must be a floating tensor (..., M), got {got}")
    if scores.dim() < 1:
        raise ValueError("scores must have at least 1 dimension (..., M), got shape ()")
    _check_allowed(allowed, scores.shape, scores.device)


def _check_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    _check_qkv(q, k, v)
    n, m = q.shape[-2], k.shape[-2]
    if n > m:
        raise ValueError(
            "a cached decode step needs no more queries than keys "
            "(q no longer than k), "
            f"got N={n} queries and M={m} keys"
        )


def _check_projections(
    x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor
) -> None:
    """Refuse x unless floating (B, N, D), and each w unless a (D, D) matrix like it."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"x must be a floating tensor (B, N, D), got {got}")
    if x.dim() != 3:
        raise ValueError(f"x must have shape (B, N, D), got {tuple(x.shape)}")
    d = x.shape[-1]
    for name, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v)):
        if (
            not isinstance(w, torch.Tensor)
            or w.dtype != x.dtype
            or w.device != x.device
        ):
            got = (
                f"{w.dtype} on {w.device}"
                if isinstance(w, torch.Tensor)
                else type(w).__name__
            )
            raise TypeError(
                f"{name} must be a tensor of x's dtype {x.dtype} on {x.device}, "
                f"got {got}"
            )
        if tuple(w.shape) != (d, d):
            raise ValueError(
                f"{name} must have shape (D, D) = ({d}, {d}), got {tuple(w.shape)}"
            )


def _check_mha_call(
    mha: nn.MultiheadAttention, x: torch.Tensor, allowed: torch.Tensor | None = None
) -> None:
    """Raise unless mha can read x (B, N, D) and allowed is an (N, N) bool mask."""
    if not isinstance(mha, nn.MultiheadAttention):
        raise TypeError(
            f"mha must be an nn.MultiheadAttention, got {type(mha).__name__}"
        )
    weight = mha.out_proj.weight
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != mha.embed_dim:
        got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(
            f"x must have shape (B, N, D) with D = {mha.embed_dim}, got {got}"
        )
    if x.dtype != weight.dtype or x.device != weight.device:
        raise TypeError(
            f"x must have mha's dtype {weight.dtype} on {weight.device}, "
            f"got {x.dtype} on {x.device}"
        )
    if allowed is not None:
        n = x.shape[1] if mha.batch_first else x.shape[0]  # the length mha will read
        _check_allowed(allowed, (n, n), x.device)
        if allowed.dim() != 2:
            raise ValueError(
                f"allowed must have shape (N, N) = ({n}, {n}), "
                f"got {tuple(allowed.shape)}"
            )


def _check_dropout_rate(name: str, p: float) -> None:
    if not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise ValueError(f"{name} must be a float in [0, 1), got {p!r}")
# --8<-- [end:validate]


# --8<-- [start:softmax_axis_wrong]
def weights_wrong_axis(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """WRONG: normalises each column, over the N queries (``dim=0`` on (N, M))."""
    _check_query_key(q, k)
    scores = (
        q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    )  # (..., N, d) @ (..., d, M) -> (..., N, M)
    return torch.softmax(scores, dim=-2)  # columns sum to 1, rows do not
# --8<-- [end:softmax_axis_wrong]


# --8<-- [start:softmax_axis_right]
def weights_right_axis(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Right: each query's row is a distribution over the M keys."""
    _check_query_key(q, k)
    scores = (
        q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    )  # (..., N, d) @ (..., d, M) -> (..., N, M)
    return torch.softmax(scores, dim=-1)  # rows sum to 1
# --8<-- [end:softmax_axis_right]


# --8<-- [start:scale_wrong]
def weights_unscaled(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """WRONG: without 1/sqrt(d) the scores grow like sqrt(d) and softmax saturates."""
    _check_query_key(q, k)
    scores = q @ k.transpose(-2, -1)  # (..., N, d) @ (..., d, M) -> (..., N, M)
    return torch.softmax(scores, dim=-1)
# --8<-- [end:scale_wrong]


# --8<-- [start:scale_right]
def weights_scaled(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Right: the scale keeps the score variance near 1 whatever d is."""
    _check_query_key(q, k)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., N, M)
    return torch.softmax(scores, dim=-1)
# --8<-- [end:scale_right]


# --8<-- [start:value_projection_wrong]
def self_attention_wrong_value(
    x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor
) -> torch.Tensor:
    """WRONG: the values are projected with the query's weights."""
    _check_projections(x, w_q, w_k, w_v)
    q, k = x @ w_q, x @ w_k  # (B, N, D) @ (D, D) -> (B, N, D)
    v = x @ w_q  # the bug: w_q where w_v belongs; w_v is never used
    weights = torch.softmax(
        q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1]), dim=-1
    )  # (B, N, N)
    return weights @ v  # (B, N, N) @ (B, N, D) -> (B, N, D)
# --8<-- [end:value_projection_wrong]


# --8<-- [start:value_projection_right]
def self_attention(
    x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor
) -> torch.Tensor:
    """Right: three projections, three weight matrices (x @ W, W of shape (D, D))."""
    _check_projections(x, w_q, w_k, w_v)
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (B, N, D) @ (D, D) -> (B, N, D)
    weights = torch.softmax(
        q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1]), dim=-1
    )  # (B, N, N)
    return weights @ v  # (B, N, N) @ (B, N, D) -> (B, N, D)
# --8<-- [end:value_projection_right]


# --8<-- [start:mask_after_softmax_wrong]
def masked_attention_wrong(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor
) -> torch.Tensor:
    """WRONG: the mask zeroes weights after softmax has already normalised them."""
    _check_masked_inputs(q, k, v, allowed)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., N, M)
    weights = torch.softmax(scores, dim=-1) * allowed  # rows now sum to less than 1
    return weights @ v  # (..., N, M) @ (..., M, d) -> (..., N, d)
# --8<-- [end:mask_after_softmax_wrong]


# --8<-- [start:mask_after_softmax_right]
def masked_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor
) -> torch.Tensor:
    """Right: blocked scores become -inf before softmax; empty rows return zeros."""
    _check_masked_inputs(q, k, v, allowed)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., N, M)
    scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = weights.masked_fill(
        ~allowed.any(dim=-1, keepdim=True), 0.0
    )  # 0/0 rows -> 0
    return weights @ v  # (..., N, M) @ (..., M, d) -> (..., N, d)
# --8<-- [end:mask_after_softmax_right]


# --8<-- [start:mha_mask_wrong]
def mha_masked_wrong(
    mha: nn.MultiheadAttention, x: torch.Tensor, allowed: torch.Tensor
) -> torch.Tensor:
    """WRONG: nn.MultiheadAttention reads a bool attn_mask as True = BLOCKED."""
    _check_mha_call(mha, x, allowed)
    return mha(x, x, x, attn_mask=allowed, need_weights=False)[0]
# --8<-- [end:mha_mask_wrong]


# --8<-- [start:mha_mask_right]
def mha_masked(
    mha: nn.MultiheadAttention, x: torch.Tensor, allowed: torch.Tensor
) -> torch.Tensor:
    """Right: flip the site's True = may-attend mask into MHA's True = blocked."""
    _check_mha_call(mha, x, allowed)
    return mha(x, x, x, attn_mask=~allowed, need_weights=False)[0]
# --8<-- [end:mha_mask_right]


# --8<-- [start:causal_kv_cache_wrong]
def cached_decode_wrong(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> torch.Tensor:
    """WRONG for N < M: PyTorch's is_causal aligns the triangle to the upper left."""
    # The N new queries are the LAST N positions, but upper-left alignment lets
    # query i see only keys 0..i: one decoded token sees only the first cached key.
    _check_decode(q, k, v)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, N, d)
# --8<-- [end:causal_kv_cache_wrong]


# --8<-- [start:causal_kv_cache_right]
def cached_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Right: a lower-right aligned mask, query i sees keys j <= i + (M - N)."""
    _check_decode(q, k, v)
    n, m = q.shape[-2], k.shape[-2]
    i = torch.arange(n, device=q.device).unsqueeze(-1)  # (N, 1)
    j = torch.arange(m, device=q.device)  # (M,)
    allowed = j <= i + (m - n)  # (N, 1) vs (M,) -> (N, M)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)  # (B, H, N, d)


def cached_decode_bias(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> torch.Tensor:
    """Right, with PyTorch's own lower-right causal bias object."""
    _check_decode(q, k, v)
    from torch.nn.attention.bias import causal_lower_right

    bias = causal_lower_right(q.shape[-2], k.shape[-2])  # acts as an (N, M) mask
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)  # (B, H, N, d)
# --8<-- [end:causal_kv_cache_right]


# --8<-- [start:dropout_eval_wrong]
class DropoutAttentionWrong(nn.Module):
    """WRONG: dropout_p is passed unconditionally, so eval() does not stop it."""

    def __init__(self, dropout: float = 0.1) -> None:
        super().__init__()
        _check_dropout_rate("dropout", dropout)
        self.dropout = dropout

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        _check_qkv(q, k, v)
        return F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout
        )  # (B, H, N, d)
# --8<-- [end:dropout_eval_wrong]


# --8<-- [start:dropout_eval_right]
class DropoutAttention(nn.Module):
    """Right: F.scaled_dot_product_attention knows nothing of self.training."""

    def __init__(self, dropout: float = 0.1) -> None:
        super().__init__()
        _check_dropout_rate("dropout", dropout)
        self.dropout = dropout

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        _check_qkv(q, k, v)
        dropout_p = self.dropout if self.training else 0.0
        return F.scaled_dot_product_attention(
            q, k, v, dropout_p=dropout_p
        )  # (B, H, N, d)
# --8<-- [end:dropout_eval_right]


# --8<-- [start:half_fill_wrong]
def masked_weights_wrong(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """WRONG: an additive -1e9 mask."""
    # In float16, -1e9 rounds to -inf: a row with no allowed key becomes
    # softmax(all -inf) = NaN. In float32 and bfloat16 it stays finite, and the
    # same row spreads its weight evenly over the keys it must not see.
    _check_scores_allowed(scores, allowed)
    return torch.softmax(scores + (~allowed).to(scores.dtype) * -1e9, dim=-1)
# --8<-- [end:half_fill_wrong]


# --8<-- [start:half_fill_right]
def masked_weights(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Right in every dtype: -inf, and rows with no allowed key return zeros."""
    _check_scores_allowed(scores, allowed)
    scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)


def masked_weights_finfo_min(
    scores: torch.Tensor, allowed: torch.Tensor
) -> torch.Tensor:
    """Right only when every row keeps at least one key (a causal mask, say)."""
    # The most negative finite number of the dtype cannot overflow; but a row
    # with no allowed key still comes out uniform, not zero.
    _check_scores_allowed(scores, allowed)
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1)
# --8<-- [end:half_fill_right]


# --8<-- [start:batch_first_wrong]
def mha_self_attend_wrong(mha: nn.MultiheadAttention, x: torch.Tensor) -> torch.Tensor:
    """WRONG: x is (B, N, D) but mha was built with the default batch_first=False."""
    # mha reads x as (N, B, D): each position attends across the batch, mixing
    # examples, and no error is raised because the shapes still fit.
    _check_mha_call(mha, x)
    return mha(x, x, x, need_weights=False)[0]
# --8<-- [end:batch_first_wrong]


# --8<-- [start:batch_first_right]
def mha_self_attend(mha: nn.MultiheadAttention, x: torch.Tensor) -> torch.Tensor:
    """Right: hand the module the layout it expects (better: batch_first=True)."""
    _check_mha_call(mha, x)
    if mha.batch_first:
        return mha(x, x, x, need_weights=False)[0]  # (B, N, D)
    x_seq = x.transpose(0, 1)  # (B, N, D) -> (N, B, D)
    out = mha(x_seq, x_seq, x_seq, need_weights=False)[0]  # (N, B, D)
    return out.transpose(0, 1)  # (N, B, D) -> (B, N, D)
# --8<-- [end:batch_first_right]
