"""Identities proven for the packed-sequences page."""

from __future__ import annotations

import warnings

import torch

from identities import identity
from snippets.efficiency import packed_sequences as P

PAGE = "efficiency/packed-sequences.md"


def _packed(dtype=torch.float64):
    cu = P.cu_seqlens_from_lengths([3, 5, 1, 4])
    q, k, v = (torch.randn(13, 2, 8, dtype=dtype) for _ in range(3))
    return q, k, v, cu


@identity("packed-mask-equals-per-document",
          "packed attention with the document mask equals one SDPA call per document",
          page=PAGE, tol=1e-12)
def packed_mask_equals_per_document():
    q, k, v, cu = _packed()
    return P.packed_attention(q, k, v, cu), P.per_document_attention(q, k, v, cu)


@identity("packed-flex-equals-per-document",
          "FlexAttention with a document mask_mod equals one SDPA call per document",
          page=PAGE, tol=1e-5)
def packed_flex_equals_per_document():
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    q, k, v, cu = _packed(torch.float32)
    doc = P.document_ids(cu)
    block = create_block_mask(lambda b, h, i, j: (doc[i] == doc[j]) & (j <= i), None, None, 13, 13,
                              device=q.device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # eager flex on the CPU, on purpose
        out = flex_attention(*(t.transpose(0, 1)[None] for t in (q, k, v)), block_mask=block)
    return out[0].transpose(0, 1), P.per_document_attention(q, k, v, cu)


@identity("packed-varlen-fallback-exact",
          "varlen_attention's CPU fallback equals one SDPA call per document",
          page=PAGE, tol=1e-12)
def packed_varlen_fallback_exact():
    q, k, v, cu = _packed()
    return P.varlen_attention(q, k, v, cu), P.per_document_attention(q, k, v, cu)


@identity("packed-window-w-is-flash-w-minus-1",
          "a window of w keys equals FlashAttention's window_size=(w - 1, 0) inside each document",
          page=PAGE, tol=0.0)
def packed_window_w_is_flash_w_minus_1():
    doc = P.document_ids(P.cu_seqlens_from_lengths([3, 5, 1, 4]))
    left, right = P.varlen_window_size(3)
    i, j = torch.arange(13)[:, None], torch.arange(13)
    flash = (doc[:, None] == doc[None]) & (j >= i - left) & (j <= i + right)
    return P.document_mask(doc, window=3).double(), flash.double()
