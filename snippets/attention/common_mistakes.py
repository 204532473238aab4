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
def _mistake_got(*ts: object) -> list:
    """What a message says it got: each tensor's shape, dtype, device, or its type."""
    return [(tuple(t.shape), t.dtype, t.device) if torch.is_tensor(t) else type(t)
            for t in ts]


def _check_attn(q, k, v=None, allowed=None, decode: bool = False) -> None:
    """Refuse q (..., N, d), k (..., M, d), v (..., M, d_v) not floating alike on one
    device, allowed unless None or bool (..., N, M); a cached decode needs N <= M."""
    v = k if v is None else v
    try:  # the leading (batch, head) dimensions pair up as in torch.matmul
        lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        scores = (*lead, q.shape[-2], k.shape[-2])
        fits = torch.broadcast_shapes(getattr(allowed, "shape", ()), scores) == scores
        fits = fits and q.shape[-1] == k.shape[-1] and k.shape[-2] == v.shape[-2]
        fits = fits and not (decode and scores[-2] > scores[-1])
        fits = fits and all(t.is_floating_point() and (t.dtype, t.device) == (
            q.dtype, q.device) for t in (q, k, v))
        fits = fits and (allowed is None or (allowed.dtype, allowed.device) == (
            torch.bool, q.device))
    except (AttributeError, IndexError, RuntimeError):  # not tensors, or under 2-D
        fits = False
    if not fits:
        raise ValueError(f"q, k, v, allowed must fit (..., N, d), (..., M, d), (..., "
                         f"M, d_v) floating alike, (..., N, M) bool, on q's device "
                         f"(N <= M to decode), got {_mistake_got(q, k, v, allowed)}")


def _check_scores_allowed(scores: torch.Tensor, allowed: torch.Tensor) -> None:
    """Refuse scores unless floating (..., M), allowed unless bool and fitting it."""
    ok = torch.is_tensor(scores) and scores.is_floating_point() and scores.dim() >= 1
    ok = ok and torch.is_tensor(allowed) and allowed.dtype == torch.bool
    ok = ok and allowed.device == scores.device and allowed.dim() <= scores.dim()
    pairs = zip(allowed.shape[::-1], scores.shape[::-1]) if ok else ()  # broadcasts
    if not (ok and all(a in (1, s) for a, s in pairs)):
        raise ValueError(f"scores must be floating (..., M), allowed bool broadcasting "
                         f"to it on its device, got {_mistake_got(scores, allowed)}")


def _check_projections(x: torch.Tensor, *weights: torch.Tensor) -> None:
    """Refuse x unless floating (B, N, D), and each w unless a (D, D) matrix like it."""
    for name, t in zip(("x", "w_q", "w_k", "w_v"), (x, *weights)):
        ok = torch.is_tensor(t) and t.is_floating_point() and t.dim() == 2 + (t is x)
        if not (ok and (t is x or (*t.shape, t.dtype, t.device) == (
                x.shape[-1], x.shape[-1], x.dtype, x.device))):
            raise ValueError(f"{name} must be floating, x (B, N, D) and each w (D, D) "
                             f"of x's dtype and device, got {_mistake_got(t)}")


def _check_mha_call(mha, x: torch.Tensor, allowed: torch.Tensor | None = None) -> None:
    """Refuse x unless (B, N, D) like mha's weights, allowed unless None or an (N, N)
    bool mask on x's device."""
    w = mha.out_proj.weight
    got = _mistake_got(x, allowed)
    ok = torch.is_tensor(x) and (x.dtype, x.device, x.dim()) == (w.dtype, w.device, 3)
    ok = ok and x.shape[-1] == mha.embed_dim
    n = (x.shape[1] if mha.batch_first else x.shape[0]) if ok else -1  # what mha reads
    if not (ok and (allowed is None or got[1] == ((n, n), torch.bool, x.device))):
        raise ValueError(f"x must be (B, N, {mha.embed_dim}) of mha's {w.dtype} on "
                         f"{w.device}, allowed None or (N, N) bool there; got {got}")


def _check_dropout_rate(name: str, p: float) -> None:
    if not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise ValueError(f"{name} must be a float in [0, 1), got {p!r}")
# --8<-- [end:validate]


# --8<-- [start:softmax_axis_wrong]
def weights_wrong_axis(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """WRONG: normalises each column, over the N queries (``dim=0`` on (N, M))."""
    _check_attn(q, k)
    scores = (
        q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    )  # (..., N, d) @ (..., d, M) -> (..., N, M)
    return torch.softmax(scores, dim=-2)  # columns sum to 1, rows do not
# --8<-- [end:softmax_axis_wrong]


# --8<-- [start:softmax_axis_right]
def weights_right_axis(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Right: each query's row is a distribution over the M keys."""
    _check_attn(q, k)
    scores = (
        q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    )  # (..., N, d) @ (..., d, M) -> (..., N, M)
    return torch.softmax(scores, dim=-1)  # rows sum to 1
# --8<-- [end:softmax_axis_right]


# --8<-- [start:scale_wrong]
def weights_unscaled(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """WRONG: without 1/sqrt(d) the scores grow like sqrt(d) and softmax saturates."""
    _check_attn(q, k)
    scores = q @ k.transpose(-2, -1)  # (..., N, d) @ (..., d, M) -> (..., N, M)
    return torch.softmax(scores, dim=-1)
# --8<-- [end:scale_wrong]


# --8<-- [start:scale_right]
def weights_scaled(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Right: the scale keeps the score variance near 1 whatever d is."""
    _check_attn(q, k)
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
    _check_attn(q, k, v, allowed)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., N, M)
    weights = torch.softmax(scores, dim=-1) * allowed  # rows now sum to less than 1
    return weights @ v  # (..., N, M) @ (..., M, d) -> (..., N, d)
# --8<-- [end:mask_after_softmax_wrong]


# --8<-- [start:mask_after_softmax_right]
def masked_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor
) -> torch.Tensor:
    """Right: blocked scores become -inf before softmax; empty rows return zeros."""
    _check_attn(q, k, v, allowed)
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
    _check_attn(q, k, v, decode=True)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, N, d)
# --8<-- [end:causal_kv_cache_wrong]


# --8<-- [start:causal_kv_cache_right]
def cached_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Right: a lower-right aligned mask, query i sees keys j <= i + (M - N)."""
    _check_attn(q, k, v, decode=True)
    n, m = q.shape[-2], k.shape[-2]
    i = torch.arange(n, device=q.device).unsqueeze(-1)  # (N, 1)
    j = torch.arange(m, device=q.device)  # (M,)
    allowed = j <= i + (m - n)  # (N, 1) vs (M,) -> (N, M)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)  # (B, H, N, d)


def cached_decode_bias(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> torch.Tensor:
    """Right, with PyTorch's own lower-right causal bias object."""
    _check_attn(q, k, v, decode=True)
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
        _check_attn(q, k, v)
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
        _check_attn(q, k, v)
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
