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

Two paths compute the same thing. With ``need_weights=True`` the scores,
softmax and ``weights @ v`` are written out (the reference, and the only way to
see the weights); otherwise the heads run on ``F.scaled_dot_product_attention``,
which never holds the (N, M) matrix of a whole head when a fused kernel serves it.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["MultiHeadAttention"]


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


class MultiHeadAttention(nn.Module):
    """Multi-head attention, batch-first, with a fused input projection.

    Args:
        d_model: D, the width of the queries and of the output.
        n_heads: H, the number of heads; ``d_model`` must be divisible by it.
        dropout: probability of zeroing an attention weight, in training only.
        bias: give the projections a bias.
        kdim: width of the keys before projection (``d_model`` when None).
        vdim: width of the values before projection (``d_model`` when None).

    Shape:
        query ``(B, N, D)``, key ``(B, M, kdim)``, value ``(B, M, vdim)`` ->
        output ``(B, N, D)`` and, on request, weights ``(B, H, N, M)``.
    """

    # --8<-- [start:init]
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
        for name, value in (("d_model", d_model), ("n_heads", n_heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if d_model % n_heads != 0:
            raise ValueError(
                f"d_model must be divisible by n_heads, got d_model={d_model} and "
                f"n_heads={n_heads} (d_model / n_heads = {d_model / n_heads:g})"
            )
        _check_dropout("dropout", dropout)
        for name, value in (("kdim", kdim), ("vdim", vdim)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value <= 0
            ):
                raise ValueError(f"{name} must be a positive int or None, got {value!r}")
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_head = d_model // n_heads  # d = D / H
        self.dropout = float(dropout)
        self.kdim = d_model if kdim is None else kdim
        self.vdim = d_model if vdim is None else vdim
        self.fused = self.kdim == d_model and self.vdim == d_model

        if self.fused:
            # One (3D, D) matrix: rows [0, D) make q, [D, 2D) make k, [2D, 3D) make v.
            # Self-attention then projects with a single matmul.
            self.in_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
            nn.init.xavier_uniform_(self.in_proj.weight)
        else:
            # Keys and values arrive with other widths: three matrices of their own.
            self.q_proj = nn.Linear(d_model, d_model, bias=bias)
            self.k_proj = nn.Linear(self.kdim, d_model, bias=bias)
            self.v_proj = nn.Linear(self.vdim, d_model, bias=bias)
            for proj in (self.q_proj, self.k_proj, self.v_proj):
                nn.init.xavier_uniform_(proj.weight)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        if bias:  # zero biases at initialisation, as nn.MultiheadAttention does
            for module in self.modules():
                if isinstance(module, nn.Linear):
                    nn.init.zeros_(module.bias)
    # --8<-- [end:init]

    # --8<-- [start:project]
    def _project(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Project to q, k, v of width D each (still (B, length, D))."""
        if not self.fused:
            return self.q_proj(query), self.k_proj(key), self.v_proj(value)
        if query is key and key is value:  # self-attention: one matmul for all three
            return self.in_proj(query).chunk(3, dim=-1)  # (B, N, 3D) -> 3 x (B, N, D)
        w_q, w_k, w_v = self.in_proj.weight.chunk(3, dim=0)  # (3D, D) -> 3 x (D, D)
        b = self.in_proj.bias
        b_q, b_k, b_v = b.chunk(3) if b is not None else (None, None, None)
        return F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        b, length, _ = x.shape
        x = x.view(b, length, self.n_heads, self.d_head)  # (B, L, D) -> (B, L, H, d)
        return x.transpose(1, 2)  # (B, L, H, d) -> (B, H, L, d)
    # --8<-- [end:project]

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
        """Attend from ``query`` to ``key``/``value`` with H heads.

        Args:
            query: ``(B, N, D)``.
            key: ``(B, M, kdim)``; None means ``query`` (self-attention).
            value: ``(B, M, vdim)``; None means ``key``.
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
        _check_input("key", key, self.kdim, "kdim")
        _check_input("value", value, self.vdim, "vdim")
        for name, t in (("query", query), ("key", key), ("value", value)):
            _check_like_module(name, t, self.out_proj.weight)
        B, N, D = query.shape
        M = key.shape[1]
        if key.shape[0] != B or value.shape[0] != B:
            raise ValueError(
                f"query, key and value must share the batch size B, got query "
                f"{tuple(query.shape)}, key {tuple(key.shape)} and value {tuple(value.shape)}"
            )
        if value.shape[1] != M:
            raise ValueError(
                f"key and value must have the same length M, got key "
                f"{tuple(key.shape)} and value {tuple(value.shape)}"
            )
        _check_masks(attn_mask, key_mask, (B, self.n_heads, N, M), query.dtype, query.device)
        mask = _combine_masks(attn_mask, key_mask, is_causal, N, M, query.device)

        q, k, v = self._project(query, key, value)  # (B, N, D), (B, M, D), (B, M, D)
        q, k, v = map(self._split_heads, (q, k, v))  # -> (B, H, N, d), (B, H, M, d) x 2
        dropout_p = self.dropout if self.training else 0.0

        if need_weights:
            out, weights = self._attend_explicit(q, k, v, mask, dropout_p)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)  # (B, H, N, d)
            out = _zero_empty_rows(out, mask)  # the same zeros on every backend
            weights = None

        out = out.transpose(1, 2).reshape(B, N, D)  # (B, H, N, d) -> (B, N, H, d) -> (B, N, D)
        return self.out_proj(out), weights  # (B, N, D) @ (D, D) -> (B, N, D)
    # --8<-- [end:forward]

    # --8<-- [start:explicit]
    def _attend_explicit(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None,
        dropout_p: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """softmax(q k^T / sqrt(d) + mask) v, head by head, keeping the weights."""
        # Half-precision heads are scored in float32: a dot product of large fp16
        # entries overflows 65504 before softmax can rescale it.
        acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
        scale = 1.0 / math.sqrt(self.d_head)  # sqrt of the head width d, not of D
        scores = (q.to(acc) * scale) @ k.to(acc).transpose(-2, -1)  # (B, H, N, d) @ (B, H, d, M) -> (B, H, N, M)
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
        out = dropped @ v.to(acc)  # (B, H, N, M) @ (B, H, M, d) -> (B, H, N, d)
        return out.to(q.dtype), weights.to(q.dtype)
    # --8<-- [end:explicit]

    # --8<-- [start:from_torch]
    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention) -> "MultiHeadAttention":
        """Build an equivalent module from ``nn.MultiheadAttention``, weights copied.

        Works for ``batch_first`` True or False (the weights are the same; only
        the layout of the inputs differs, and this module is always batch-first).

        Args:
            mha: the module to copy.

        Returns:
            A ``MultiHeadAttention`` on the same device and dtype.
        """
        if not isinstance(mha, nn.MultiheadAttention):
            raise TypeError(f"mha must be an nn.MultiheadAttention, got {type(mha).__name__}")
        if mha.bias_k is not None or mha.add_zero_attn:
            raise ValueError(
                "mha must not use add_bias_kv or add_zero_attn (they append extra keys), "
                f"got add_bias_kv={mha.bias_k is not None}, add_zero_attn={mha.add_zero_attn}"
            )
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
