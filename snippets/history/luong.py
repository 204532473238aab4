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


# --8<-- [start:check_key_mask]
def _check_key_mask(
    key_mask: torch.Tensor | None, batch: int, n_keys: int, device: torch.device
) -> None:
    """Raise a clear error unless key_mask is None or a (B, M) bool tensor on device."""
    if key_mask is None:
        return
    if not isinstance(key_mask, torch.Tensor):
        raise TypeError(
            f"key_mask must be a torch.Tensor or None, got {type(key_mask).__name__}"
        )
    if key_mask.dtype != torch.bool:
        raise TypeError(
            f"key_mask must be torch.bool (True = real key), got {key_mask.dtype}"
        )
    if tuple(key_mask.shape) != (batch, n_keys):
        raise ValueError(
            f"key_mask must have shape (B, M) = ({batch}, {n_keys}), "
            f"got {tuple(key_mask.shape)}"
        )
    if key_mask.device != device:
        raise ValueError(
            f"key_mask must be on the device of the inputs {device}, got {key_mask.device}"
        )
# --8<-- [end:check_key_mask]


def _check_like_module(name: str, t: torch.Tensor, weight: torch.Tensor) -> None:
    """Raise unless t has the device (and, outside autocast, the dtype) of the module's weight."""
    if t.device != weight.device:
        raise ValueError(f"{name} must be on the module's device {weight.device}, got {t.device}")
    autocast = torch.amp.is_autocast_available(t.device.type) and torch.is_autocast_enabled(t.device.type)
    if t.dtype != weight.dtype and not autocast:
        raise TypeError(f"{name} must have the module's dtype {weight.dtype}, got {t.dtype}")


class LuongAttention(nn.Module):
    """Luong's attention layer: scores, weights, context and h~_t = tanh(W_c [c_t; h_t]).

    Args:
        d_model: width D of the decoder and encoder states.
        score: ``"dot"``, ``"general"`` or ``"concat"``.
        window: half-width R of the local-p window; ``None`` for global attention.

    Shape:
        query ``(B, N, D)`` (the decoder states h_t), keys ``(B, M, D)`` (the
        source states, also the values) -> h~ ``(B, N, D)``, weights ``(B, N, M)``.
    """

    # --8<-- [start:init]
    def __init__(self, d_model: int, score: str = "general", *, window: int | None = None) -> None:
        super().__init__()
        if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model <= 0:
            raise ValueError(f"d_model must be a positive int, got {d_model!r}")
        if score not in SCORES:
            raise ValueError(f"score must be one of {', '.join(SCORES)}, got {score!r}")
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
            raise ValueError(f"window must be a positive int (the half-width R) or None, got {window!r}")
        self.d_model, self.score, self.window = d_model, score, window
        if score == "general":
            self.w_a = nn.Linear(d_model, d_model, bias=False)  # h_t^T W_a hs
        elif score == "concat":
            self.w_a = nn.Linear(2 * d_model, d_model, bias=False)  # W_a [h_t; hs]
            self.v_a = nn.Linear(d_model, 1, bias=False)
        if window is not None:
            self.w_p = nn.Linear(d_model, d_model, bias=False)  # p_t = S sigmoid(v_p^T tanh(W_p h_t))
            self.v_p = nn.Linear(d_model, 1, bias=False)
        self.w_c = nn.Linear(2 * d_model, d_model, bias=False)  # h~_t = tanh(W_c [c_t; h_t])
    # --8<-- [end:init]

    # --8<-- [start:score]
    def scores(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """score(h_t, hs) for every query t and source position s, ``(B, N, M)``."""
        # Half-precision dot products are taken in float32: a sum of D products of
        # large fp16 entries overflows 65504 long before softmax can help.
        acc = torch.float32 if query.dtype in (torch.float16, torch.bfloat16) else query.dtype
        if self.score == "dot":
            return query.to(acc) @ keys.to(acc).transpose(-2, -1)  # (B, N, D) @ (B, D, M) -> (B, N, M)
        if self.score == "general":
            return query.to(acc) @ self.w_a(keys).to(acc).transpose(-2, -1)  # (B, N, D) @ (B, D, M) -> (B, N, M)
        # concat: W_a [h_t; hs] = W_a[:, :D] h_t + W_a[:, D:] hs, so the (B, N, M, 2D)
        # concatenation of every pair is never built.
        w_query, w_keys = self.w_a.weight.split(self.d_model, dim=1)  # two (D, D) halves
        hidden = torch.tanh(
            F.linear(query, w_query).unsqueeze(2) + F.linear(keys, w_keys).unsqueeze(1)
        )  # (B, N, 1, D) + (B, 1, M, D) -> (B, N, M, D)
        return self.v_a(hidden).squeeze(-1).to(acc)  # (B, N, M, D) -> (B, N, M)
    # --8<-- [end:score]

    # --8<-- [start:local]
    def predict_position(self, query: torch.Tensor, source_lengths: torch.Tensor) -> torch.Tensor:
        """p_t = S * sigmoid(v_p^T tanh(W_p h_t)), a real number in [0, S], ``(B, N, 1)``."""
        gate = torch.sigmoid(self.v_p(torch.tanh(self.w_p(query))))  # (B, N, D) -> (B, N, 1)
        return source_lengths.to(query.dtype).view(-1, 1, 1) * gate  # (B, 1, 1) * (B, N, 1)

    def local_weights(
        self, scores: torch.Tensor, allowed: torch.Tensor, query: torch.Tensor
    ) -> torch.Tensor:
        """Softmax inside the window [p_t - R, p_t + R], times the Gaussian centred on p_t."""
        b, n, m = scores.shape
        positions = torch.arange(m, device=scores.device, dtype=scores.dtype)  # s = 0 .. M-1
        p = self.predict_position(query, allowed.sum(dim=-1))  # S = real length, (B, N, 1)
        distance = positions - p  # (M,) - (B, N, 1) -> (B, N, M)
        allowed = allowed.unsqueeze(1) & (distance.abs() <= self.window)  # (B, 1, M) & (B, N, M)
        align = _masked_softmax(scores, allowed)  # (B, N, M)
        sigma = self.window / 2
        # p_t receives gradients through the Gaussian (the window's edge is a hard cut).
        return align * torch.exp(-distance.square() / (2 * sigma**2))  # (B, N, M)
    # --8<-- [end:local]

    # --8<-- [start:forward]
    def forward(
        self, query: torch.Tensor, keys: torch.Tensor, *, key_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Global (``window=None``) or local-p attention of decoder states over source states.

        Args:
            query: decoder states h_t, ``(B, N, D)``.
            keys: source states hs, ``(B, M, D)``; they are also the values.
            key_mask: ``(B, M)`` bool, True = real source token; None = all real.

        Returns:
            ``(h_tilde, weights)``: ``(B, N, D)`` and ``(B, N, M)``.
        """
        for name, t in (("query", query), ("keys", keys)):
            if not isinstance(t, torch.Tensor) or t.dim() != 3:
                shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"{name} must be a 3-D tensor (B, length, D), got {shape}")
            if t.shape[-1] != self.d_model:
                raise ValueError(f"{name} must have width d_model={self.d_model}, got {t.shape[-1]}")
        (b, n, _), (bk, m, _) = query.shape, keys.shape
        if bk != b:
            raise ValueError(f"query and keys must share the batch size B, got {b} and {bk}")
        _check_like_module("query", query, self.w_c.weight)
        _check_like_module("keys", keys, self.w_c.weight)
        _check_key_mask(key_mask, b, m, keys.device)
        allowed = key_mask if key_mask is not None else keys.new_ones(b, m, dtype=torch.bool)

        scores = self.scores(query, keys)  # (B, N, M)
        if self.window is None:
            weights = _masked_softmax(scores, allowed.unsqueeze(1))  # global: every real s
        else:
            weights = self.local_weights(scores, allowed, query)  # local-p
        context = (weights @ keys.to(weights.dtype)).to(query.dtype)  # (B, N, M) @ (B, M, D) -> (B, N, D)
        h_tilde = torch.tanh(self.w_c(torch.cat([context, query], dim=-1)))  # (B, N, 2D) -> (B, N, D)
        return h_tilde, weights.to(query.dtype)
    # --8<-- [end:forward]


# --8<-- [start:masked_softmax]
def _masked_softmax(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the last dimension, padding excluded (True = real).

    A row with no real entry returns zeros instead of 0/0 = NaN.
    """
    if mask is None:
        return torch.softmax(logits, dim=-1)
    # -inf, not a large negative constant: exp(-inf) is exactly 0 in every dtype.
    logits = logits.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(logits, dim=-1)
    return weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
# --8<-- [end:masked_softmax]
