"""Cross-attention: queries from one sequence, keys and values from another.

Paper: Vaswani, Shazeer, Parmar, Uszkoreit, Jones, Gomez, Kaiser and Polosukhin
(2017), "Attention Is All You Need", arXiv:1706.03762, section 3.2.3
("encoder-decoder attention"), for a single head; the idea of a decoder
attending over a source sentence goes back to Bahdanau, Cho and Bengio (2014),
"Neural Machine Translation by Jointly Learning to Align and Translate",
arXiv:1409.0473.
Page: docs/attention/cross-attention.md
Tested against: torch.nn.functional.scaled_dot_product_attention with the
projections applied in the test (tests/test_cross_attention.py).

``key_mask`` is True for real context tokens (NOT ``nn.MultiheadAttention``'s
``key_padding_mask``, whose True means padding).

Kernels: ``_attend`` and ``CrossAttention.forward``; the constructor, the fused
path and the checks are the face.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["CrossAttention"]


# --8<-- [start:attend]
def _attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    mask: torch.Tensor | None = None, dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T / sqrt(d_k) + mask) v and the weights; empty rows give zeros."""
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    # (B, N, d_k) @ (B, d_k, M) -> (B, N, M), in float32 for half precision
    scores = q.to(acc) @ k.to(acc).transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = mask
    if mask is not None and mask.dtype != torch.bool:  # a float mask is added
        scores, allowed = scores + mask.to(acc), ~torch.isneginf(mask)
    weights = _masked_softmax(scores, allowed)  # each query's row sums to 1 (or 0)
    dropped = torch.dropout(weights, dropout_p, True) if dropout_p > 0 else weights
    out = dropped @ v.to(acc)  # (B, N, M) @ (B, M, d_v) -> (B, N, d_v)
    return out.to(q.dtype), weights.to(q.dtype)
# --8<-- [end:attend]


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


# --8<-- [start:init]
class CrossAttention(nn.Module):
    """N query tokens (width D) read from M context tokens (width d_context).

    Args:
        d_model: D, the width of the query sequence (and of the output).
        d_context: width of the context sequence; ``d_model`` when ``None``.
        d_k: width of queries and keys; ``d_model`` when ``None``.
        d_v: width of values; ``d_model`` when ``None``.
        dropout: probability of zeroing an attention weight, in training only.
        bias: give the projections a bias.
        project_out: map the ``d_v``-wide result back to ``d_model`` with
            ``out_proj``; when False the output is ``d_v`` wide.

    Shape:
        ``(B, N, D)`` and ``(B, M, d_context)`` -> ``(B, N, D)``, weights
        ``(B, N, M)``. ``forward`` takes ``key_mask`` ``(B, M)`` (True = real
        context token) and ``need_weights`` (False: run on
        ``F.scaled_dot_product_attention``, weights ``None``).
    """

    def __init__(
        self,
        d_model: int,
        d_context: int | None = None,
        d_k: int | None = None,
        d_v: int | None = None,
        *,
        dropout: float = 0.0,
        bias: bool = True,
        project_out: bool = True,
    ) -> None:
        super().__init__()
        d_context = d_model if d_context is None else d_context
        d_k = d_model if d_k is None else d_k
        d_v = d_model if d_v is None else d_v
        _check_config(dropout, d_model=d_model, d_context=d_context, d_k=d_k, d_v=d_v)
        self.d_model, self.d_context, self.d_k, self.d_v = d_model, d_context, d_k, d_v
        self.dropout = float(dropout)
        self.q_proj = nn.Linear(d_model, d_k, bias=bias)  # queries come from x ...
        self.k_proj = nn.Linear(d_context, d_k, bias=bias)  # ... keys and values
        self.v_proj = nn.Linear(d_context, d_v, bias=bias)  # from the context
        out = nn.Linear(d_v, d_model, bias=bias) if project_out else nn.Identity()
        self.out_proj = out

    def _check_forward(self, x, context, key_mask) -> None:
        _check_seq(x, "x", self.d_model, self.q_proj.weight)
        _check_seq(context, "context", self.d_context, self.k_proj.weight, x.shape[0])
        _check_keys(key_mask, x.shape[0], context.shape[1], x.device)
# --8<-- [end:init]

    # --8<-- [start:forward]
    def forward(
        self, x: torch.Tensor, context: torch.Tensor, *,
        key_mask: torch.Tensor | None = None, need_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Let every token of ``x`` attend over the tokens of ``context``."""
        self._check_forward(x, context, key_mask)
        q = self.q_proj(x)  # (B, N, D) -> (B, N, d_k)
        # (B, M, d_context) -> (B, M, d_k), (B, M, d_v)
        k, v = self.k_proj(context), self.v_proj(context)
        # (B, M) -> (B, 1, M): the same real keys for every query
        mask = None if key_mask is None else key_mask[:, None, :]
        dropout_p = self.dropout if self.training else 0.0
        if not need_weights:  # the fast path: PyTorch's fused kernels
            return self.out_proj(_sdpa_path(q, k, v, mask, dropout_p)), None
        out, weights = _attend(q, k, v, mask, dropout_p)  # (B, N, d_v), (B, N, M)
        return self.out_proj(out), weights  # (B, N, d_v) -> (B, N, D)
    # --8<-- [end:forward]


# --8<-- [start:sdpa_path]
def _sdpa_path(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
    dropout_p: float,
) -> torch.Tensor:
    """One head through F.scaled_dot_product_attention; empty rows give zeros."""
    attn_mask = None if mask is None else mask.unsqueeze(-3)  # a head axis of 1
    # One head on its own axis: the fused kernels take 4-D input only.
    out = F.scaled_dot_product_attention(
        q[:, None], k[:, None], v[:, None], attn_mask=attn_mask, dropout_p=dropout_p
    )[:, 0]  # (B, 1, N, d_k), (B, 1, M, d_k) -> (B, 1, N, d_v) -> (B, N, d_v)
    return _zero_empty_rows(out, mask)  # the same zeros on every backend
# --8<-- [end:sdpa_path]


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


# --8<-- [start:checks]
def _check_config(dropout: float, **sizes: int) -> None:
    """Refuse a width that is not a positive int, or a dropout outside [0, 1)."""
    for name, value in sizes.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be a float in [0, 1), got {dropout!r}")


def _check_seq(x, name: str, width: int, weight: torch.Tensor, batch=None) -> None:
    """Refuse x unless it is (B, L, width), B = batch if given, like the weight."""
    kind = weight.device.type  # under autocast x may come in another floating dtype
    cast = torch.amp.is_autocast_available(kind) and torch.is_autocast_enabled(kind)
    ok = torch.is_tensor(x) and x.dim() == 3 and x.shape[-1] == width
    ok = ok and batch in (None, x.shape[0]) and x.device == weight.device
    if not (ok and (x.dtype == weight.dtype or cast and x.is_floating_point())):
        got = (tuple(x.shape), x.dtype, x.device) if torch.is_tensor(x) else type(x)
        raise ValueError(f"{name} must be (B, L, {width}) with B = {batch or 'any'}, "
                         f"{weight.dtype}, on {weight.device}; got {got}")


def _check_keys(key_mask, batch: int, n_keys: int, device: torch.device) -> None:
    """Refuse a key_mask unless it is None or a (B, M) bool tensor on device."""
    want, m = ((batch, n_keys), torch.bool, device), key_mask
    got = (tuple(m.shape), m.dtype, m.device) if torch.is_tensor(m) else m
    if got not in (None, want):
        raise ValueError(f"key_mask (True = real) must be None or {want}, got {got}")
# --8<-- [end:checks]
