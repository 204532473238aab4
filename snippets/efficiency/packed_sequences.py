"""Packed sequences: several documents in one row, attention kept inside each.

Packing concatenates documents of different lengths into one sequence of T
tokens, so no compute is spent on padding. Two things must then restart at
every document boundary: the attention (a block-diagonal, causal mask) and the
positions. ``cu_seqlens`` (cumulative lengths, starting at 0) describes the
boundaries, as in FlashAttention's ``flash_attn_varlen_func`` and PyTorch's
``torch.nn.attention.varlen.varlen_attn``.

Window convention: this file's ``window`` is the number of keys a query sees,
itself included (the guide's convention). FlashAttention and ``varlen_attn``
take ``window_size=(left, right)`` and let query i see keys i - left .. i +
right, so their ``(W, 0)`` is W + 1 keys: ``varlen_window_size`` converts.

Page: docs/efficiency/packed-sequences.md
Tested against: one ``F.scaled_dot_product_attention`` call per document, and
FlexAttention's document mask (tests/test_packed_sequences.py).

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = [
    "cu_seqlens_from_lengths",
    "document_ids",
    "position_ids",
    "document_mask",
    "packed_attention",
    "per_document_attention",
    "varlen_window_size",
    "varlen_attention",
]


# --8<-- [start:boundaries]
def cu_seqlens_from_lengths(lengths: list[int]) -> torch.Tensor:
    """Cumulative lengths [0, l0, l0 + l1, ...] as int32, the varlen kernels' format."""
    _check_doc_lengths(lengths)
    return torch.tensor([0, *lengths], dtype=torch.int64).cumsum(0).to(torch.int32)


def document_ids(cu_seqlens: torch.Tensor) -> torch.Tensor:
    """Which document each of the T packed tokens belongs to, (T,)."""
    _check_cu_seqlens(cu_seqlens)
    lengths = cu_seqlens[1:] - cu_seqlens[:-1]  # (n_docs,)
    docs = torch.arange(len(lengths), device=cu_seqlens.device)
    return docs.repeat_interleave(lengths.long())  # (T,)


def position_ids(cu_seqlens: torch.Tensor) -> torch.Tensor:
    """Positions that restart at 0 in every document, (T,)."""
    doc = document_ids(cu_seqlens)  # (T,)
    t = torch.arange(len(doc), device=doc.device)  # (T,)
    return t - cu_seqlens[:-1].long()[doc]  # token index minus its document's start
# --8<-- [end:boundaries]


# --8<-- [start:mask]
def document_mask(
    doc: torch.Tensor, *, causal: bool = True, window: int | None = None
) -> torch.Tensor:
    """True where query i may read key j: same document, j <= i, within the window."""
    _check_mask_args(doc, window)
    t = torch.arange(len(doc), device=doc.device)
    i, j = t.unsqueeze(1), t  # (T, 1) query index, (T,) key index
    allowed = doc.unsqueeze(1) == doc.unsqueeze(0)  # (T, 1) vs (1, T) -> (T, T)
    if causal:
        allowed = allowed & (j <= i)
    if window is not None:
        allowed = allowed & (i - j < window)  # window keys, the query's own included
    return allowed
# --8<-- [end:mask]


# --8<-- [start:face]
def packed_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor,
    *,
    causal: bool = True,
    window: int | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention over packed documents: one SDPA call with the document mask.

    Args:
        q: queries ``(T, H, d)``, the layout of ``varlen_attn``.
        k: keys ``(T, H, d)``.
        v: values ``(T, H, d_v)``.
        cu_seqlens: ``(n_docs + 1,)`` integer boundaries, from 0 to T.
        causal: each query reads only keys at or before it.
        window: at most this many keys per query, itself included; None: all.
        scale: the score scale; None means ``1 / sqrt(d)``.

    Returns:
        ``(T, H, d_v)``.
    """
    _check_packed(q, k, v, cu_seqlens, scale)  # window: checked where used
    allowed = document_mask(document_ids(cu_seqlens), causal=causal, window=window)
    return packed_kernel(q, k, v, allowed, scale)
# --8<-- [end:face]


# --8<-- [start:kernel]
def packed_kernel(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor,
    scale: float | None,
) -> torch.Tensor:
    """softmax(q k^T * scale, where allowed) v over all T tokens at once."""
    # (T, H, d) -> (1, H, T, d): one "batch" row holds every document
    q, k, v = (t.transpose(0, 1).unsqueeze(0) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)
    return out.squeeze(0).transpose(0, 1)  # (1, H, T, d_v) -> (T, H, d_v)
# --8<-- [end:kernel]


# --8<-- [start:reference]
def per_document_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor,
    *,
    causal: bool = True,
    scale: float | None = None,
) -> torch.Tensor:
    """The reference: one SDPA call per document, concatenated, ``(T, H, d_v)``."""
    _check_packed(q, k, v, cu_seqlens, scale)
    outs = []
    for start, end in zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist()):
        # (L, H, d) -> (H, L, d): this document alone
        qd, kd, vd = (t[start:end].transpose(0, 1) for t in (q, k, v))
        od = F.scaled_dot_product_attention(qd, kd, vd, is_causal=causal, scale=scale)
        outs.append(od.transpose(0, 1))  # (H, L, d_v) -> (L, H, d_v)
    return torch.cat(outs, dim=0)  # (T, H, d_v)
# --8<-- [end:reference]


# --8<-- [start:window]
def varlen_window_size(window: int | None) -> tuple[int, int]:
    """The guide's causal window of w keys as varlen/FlashAttention's (left, right)."""
    _check_window(window)
    return (-1, 0) if window is None else (window - 1, 0)  # (W, 0) shows W + 1 keys
# --8<-- [end:window]


# --8<-- [start:varlen]

def varlen_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor,
    *,
    window: int | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Causal packed attention through PyTorch's varlen kernel where it runs.

    ``torch.nn.attention.varlen.varlen_attn`` reaches FlashAttention, which
    has no CPU kernel (the dispatcher raises NotImplementedError for
    ``aten::_flash_attention_forward`` on the CPU), and the module exists only
    in recent torch releases. Anywhere it cannot run, the document-mask path
    computes the same numbers.

    Args:
        q: queries ``(T, H, d)``.
        k: keys ``(T, H, d)``.
        v: values ``(T, H, d)``.
        cu_seqlens: ``(n_docs + 1,)`` integer boundaries, from 0 to T.
        window: at most this many keys per query, itself included; None: all.
        scale: the score scale; None means ``1 / sqrt(d)``.

    Returns:
        ``(T, H, d)``.
    """
    _check_packed(q, k, v, cu_seqlens, scale)  # window: checked where used
    if q.device.type == "cuda" and q.dtype in (torch.float16, torch.bfloat16):
        try:
            from torch.nn.attention.varlen import varlen_attn
        except ImportError:
            varlen_attn = None
        if varlen_attn is not None:
            cu = cu_seqlens.to(device=q.device, dtype=torch.int32)
            longest = int((cu[1:] - cu[:-1]).max())
            return varlen_attn(q, k, v, cu, cu, longest, longest, scale=scale,
                               window_size=varlen_window_size(window))
    return packed_attention(q, k, v, cu_seqlens, window=window, scale=scale)
# --8<-- [end:varlen]


# --8<-- [start:validate]
def _dtype_and_shape(x: object) -> str:
    """A tensor's dtype, shape and device, or another object's type, for a message."""
    if isinstance(x, torch.Tensor):
        return f"{x.dtype} {tuple(x.shape)} on {x.device}"
    return type(x).__name__


def _check_given(ok: object, name: str, want: str, got: object, error=ValueError):
    """Raise error("<name> must <want>, got <got>") unless ok."""
    if not ok:
        raise error(f"{name} must {want}, got {got}")


def _check_doc_lengths(lengths: list[int]) -> None:
    ok = len(lengths) > 0 and all(isinstance(n, int) and n >= 1 for n in lengths)
    _check_given(ok, "lengths", "be a non-empty list of ints >= 1", repr(lengths))


def _check_cu_seqlens(cu: torch.Tensor) -> None:
    ok = isinstance(cu, torch.Tensor) and cu.dim() == 1 and len(cu) >= 2
    ok = ok and not cu.is_floating_point() and cu.dtype != torch.bool
    _check_given(ok, "cu_seqlens", "be 1-D integers [0, ..., T]", _dtype_and_shape(cu))
    ok = cu[0] == 0 and bool((cu[1:] > cu[:-1]).all())
    _check_given(ok, "cu_seqlens", "start at 0 and increase", cu.tolist())


def _check_window(window: int | None) -> None:
    ok = window is None or (isinstance(window, int) and window >= 1)
    _check_given(ok, "window", "be None or an int >= 1 (keys)", repr(window))


def _check_mask_args(doc: torch.Tensor, window: int | None) -> None:
    ok = isinstance(doc, torch.Tensor) and doc.dim() == 1
    ok = ok and not doc.is_floating_point()
    _check_given(ok, "doc", "be 1-D integer document ids", _dtype_and_shape(doc))
    _check_window(window)


def _check_packed(q, k, v, cu_seqlens, scale) -> None:
    for name, t, fixed in (("q", q, 3), ("k", k, 3), ("v", v, 2)):  # v may be wider
        ok = isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() == 3
        ok = ok and t.shape[:fixed] == q.shape[:fixed] and (t.dtype, t.device) == (
            q.dtype, q.device)
        _check_given(ok, name, "be floating (T, H, d) like q", _dtype_and_shape(t))
    got = getattr(cu_seqlens, "device", q.device)
    _check_given(got == q.device, "cu_seqlens", f"be on {q.device}", got)
    _check_cu_seqlens(cu_seqlens)
    ok = int(cu_seqlens[-1]) == q.shape[0]
    _check_given(ok, "cu_seqlens", f"end at T = {q.shape[0]}", cu_seqlens.tolist())
    ok = scale is None or (math.isfinite(scale) and scale > 0)
    _check_given(ok, "scale", "be None or a positive finite number", repr(scale))


# --8<-- [end:validate]
