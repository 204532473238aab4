"""Luong attention: dot, general and concat scores; global and local-p attention.

Paper: Luong, Pham and Manning (2015), "Effective Approaches to Attention-based
Neural Machine Translation", arXiv:1508.04025 (EMNLP 2015), section 3,
equations (5) to (10).
Page: docs/history/luong-attention.md
Tested against: the paper's equations written out with explicit loops
(tests/test_luong.py).

The paper's equations, in its own letters (h_t the decoder state, h_s-bar the
source states, S the source length):

    score(h_t, hs) = h_t^T hs                      dot
                   = h_t^T W_a hs                  general
                   = v_a^T tanh(W_a [h_t; hs])     concat
    a_t(s)  = softmax_s(score(h_t, hs))           global attention
    c_t     = sum_s a_t(s) hs
    h~_t    = tanh(W_c [c_t; h_t])                the attentional hidden state
    p_t     = S * sigmoid(v_p^T tanh(W_p h_t))    local-p: predicted position
    a_t(s)  = align(h_t, hs) * exp(-(s - p_t)^2 / (2 sigma^2)),  sigma = R / 2

where align is the softmax over the window [p_t - R, p_t + R] (the paper calls
the half-width D; this site keeps D for the model width). Source positions s
count from 0 here. The local-p weights are a softmax times a Gaussian, so a row
sums to less than 1, exactly as in the paper.

Mask convention: ``key_mask`` is a ``(B, M)`` boolean tensor, True = a real
source token that may be attended. A query with no key to attend gets zero
weights and a zero context.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["LuongAttention", "SCORES"]

SCORES = ("dot", "general", "concat")


# --8<-- [start:tensor_checks]
def _check_positive_sizes(low: int, **values: object) -> None:
    """Refuse a size or a count that is not an int >= low."""
    if bad := {k: v for k, v in values.items() if not isinstance(v, int) or v < low}:
        raise ValueError(f"{', '.join(bad)} must be an int >= {low}, got {bad}")


def _check_tensor(name, t, shape, like: torch.Tensor, dtypes=None) -> None:
    """Refuse t unless it has this shape (None = any size), dtype and like's device."""
    got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
    fill = tuple(n if s is None else s for s, n in zip(shape, got))  # None takes got's
    if got != fill or len(got) != len(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {got}")
    amp = dtypes is None and torch.is_autocast_enabled(like.device.type)  # any dtype
    if t.dtype not in (dtypes or (like.dtype,)) and not amp or t.device != like.device:
        raise TypeError(f"{name} must have dtype {dtypes or like.dtype} on "
                        f"{like.device}, got {t.dtype} on {t.device}")
# --8<-- [end:tensor_checks]


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


# --8<-- [start:face]
class LuongAttention(nn.Module):
    """Luong's attention layer: scores, weights, context, h~_t = tanh(W_c [c_t; h_t]).

    Args:
        d_model: width D of the decoder and encoder states.
        score: ``"dot"``, ``"general"`` or ``"concat"``.
        window: half-width R of the local-p window; ``None`` for global attention.

    Forward args:
        query: decoder states h_t, ``(B, N, D)``.
        keys: source states hs, ``(B, M, D)``; they are also the values.
        key_mask: ``(B, M)`` bool, True = real source token; None = all real.

    Returns:
        ``(h_tilde, weights)``: ``(B, N, D)`` and ``(B, N, M)``.

    Shape:
        query ``(B, N, D)`` (the decoder states h_t), keys ``(B, M, D)`` (the
        source states, also the values) -> h~ ``(B, N, D)``, weights ``(B, N, M)``.
    """

    def __init__(self, d_model: int, score: str = "general", *, window=None) -> None:
        super().__init__()
        width = 1 if window is None else window  # None: global attention
        _check_positive_sizes(1, d_model=d_model, window=width)
        if score not in SCORES:
            raise ValueError(f"score must be one of {', '.join(SCORES)}, got {score!r}")
        self.d_model, self.score, self.window = d_model, score, window
        if score == "general":
            self.w_a = nn.Linear(d_model, d_model, bias=False)  # h_t^T W_a hs
        elif score == "concat":
            self.w_a = nn.Linear(2 * d_model, d_model, bias=False)  # W_a [h_t; hs]
            self.v_a = nn.Linear(d_model, 1, bias=False)
        if window is not None:  # p_t = S sigmoid(v_p^T tanh(W_p h_t))
            self.w_p = nn.Linear(d_model, d_model, bias=False)
            self.v_p = nn.Linear(d_model, 1, bias=False)
        self.w_c = nn.Linear(2 * d_model, d_model, bias=False)  # tanh(W_c [c_t; h_t])

    def _check_forward(self, query, keys, key_mask) -> None:
        """Refuse inputs that do not have width D, one batch and W_c's dtype."""
        weight, d = self.w_c.weight, self.d_model
        _check_tensor("query", query, (None, None, d), weight)
        _check_tensor("keys", keys, (query.shape[0], None, d), weight)
        if key_mask is not None:
            _check_tensor("key_mask", key_mask, keys.shape[:2], keys, (torch.bool,))
# --8<-- [end:face]

    # --8<-- [start:score]
    def scores(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """score(h_t, hs) for every query t and source position s, (B, N, M)."""
        # Half precision sums its D products in float32: fp16 overflows at 65504.
        acc = torch.promote_types(query.dtype, torch.float32)
        if self.score == "dot":  # (B, N, D) @ (B, D, M) -> (B, N, M)
            return query.to(acc) @ keys.to(acc).transpose(-2, -1)
        if self.score == "general":  # h_t^T (W_a hs): (B, N, D) @ (B, D, M)
            return query.to(acc) @ self.w_a(keys).to(acc).transpose(-2, -1)
        # concat: W_a [h_t; hs] = W_a[:, :D] h_t + W_a[:, D:] hs, no (B, N, M, 2D)
        w_query, w_keys = self.w_a.weight.split(self.d_model, dim=1)  # (D, D) each
        q_part, k_part = F.linear(query, w_query), F.linear(keys, w_keys)
        # (B, N, 1, D) + (B, 1, M, D) -> (B, N, M, D)
        hidden = torch.tanh(q_part.unsqueeze(2) + k_part.unsqueeze(1))
        return self.v_a(hidden).squeeze(-1).to(acc)  # (B, N, M, D) -> (B, N, M)
    # --8<-- [end:score]

    # --8<-- [start:forward]
    def forward(self, query, keys, *, key_mask=None):
        """Global (window=None) or local-p attention: (h~_t, a_t)."""
        self._check_forward(query, keys, key_mask)
        b, m = keys.shape[:2]
        real = keys.new_ones(b, m, dtype=torch.bool) if key_mask is None else key_mask
        scores = self.scores(query, keys)  # (B, N, M)
        if self.window is None:  # global: softmax over every real s
            weights = _masked_softmax(scores, real.unsqueeze(1))  # (B, N, M)
        else:  # local-p
            weights = self.local_weights(scores, real, query)  # (B, N, M)
        # c_t = sum_s a_t(s) hs: (B, N, M) @ (B, M, D) -> (B, N, D)
        context = (weights @ keys.to(weights.dtype)).to(query.dtype)
        # h~_t = tanh(W_c [c_t; h_t]): (B, N, 2D) -> (B, N, D)
        h_tilde = torch.tanh(self.w_c(torch.cat([context, query], dim=-1)))
        return h_tilde, weights.to(query.dtype)
    # --8<-- [end:forward]

    # --8<-- [start:local]
    def predict_position(self, query, source_lengths) -> torch.Tensor:
        """p_t = S * sigmoid(v_p^T tanh(W_p h_t)) in [0, S]: (B, N, 1)."""
        gate = torch.sigmoid(self.v_p(torch.tanh(self.w_p(query))))  # (B, N, 1)
        return source_lengths.to(query.dtype).view(-1, 1, 1) * gate  # (B, N, 1)

    def local_weights(self, scores, allowed, query) -> torch.Tensor:
        """Softmax inside [p_t - R, p_t + R], times the Gaussian centred on p_t."""
        m = scores.shape[-1]
        s = torch.arange(m, device=scores.device, dtype=scores.dtype)  # 0 .. M-1
        p = self.predict_position(query, allowed.sum(dim=-1))  # S = real length
        distance = s - p  # (M,) - (B, N, 1) -> (B, N, M)
        allowed = allowed.unsqueeze(1) & (distance.abs() <= self.window)  # (B, N, M)
        align = _masked_softmax(scores, allowed)  # (B, N, M)
        sigma = self.window / 2
        # p_t learns through the Gaussian (the window's edge is a hard cut).
        return align * torch.exp(-distance.square() / (2 * sigma**2))  # (B, N, M)
    # --8<-- [end:local]
