"""Identities proven for the foundations pages."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from identities import identity
from snippets.foundations import masks
from snippets.foundations import positional_encoding as pe
from snippets.foundations import scaled_dot_product as sdp


@identity("sdpa-equals-pytorch",
          "scaled_dot_product_attention equals F.scaled_dot_product_attention, with a boolean mask",
          page="foundations/scaled-dot-product.md", tol=1e-12)
def sdpa_equals_pytorch():
    q, k, v = (torch.randn(2, 3, 5, 8, dtype=torch.float64) for _ in range(3))
    mask = torch.rand(2, 1, 5, 5) > 0.3
    mask[..., 0] = True
    ours, _ = sdp.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return ours, F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@identity("sdpa-causal-lower-right",
          "is_causal=True with N < M equals SDPA given a lower-right causal mask (a KV cache's alignment)",
          page="foundations/scaled-dot-product.md", tol=1e-12)
def sdpa_causal_lower_right():
    q = torch.randn(2, 3, 3, 8, dtype=torch.float64)
    k, v = (torch.randn(2, 3, 7, 8, dtype=torch.float64) for _ in range(2))
    ours, _ = sdp.scaled_dot_product_attention(q, k, v, is_causal=True)
    mask = torch.ones(3, 7, dtype=torch.bool).tril(diagonal=7 - 3)
    return ours, F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@identity("sdpa-empty-row-zeros",
          "a query that may attend to no key returns zeros (not NaN), as SDPA does on the CPU",
          page="foundations/scaled-dot-product.md", tol=0.0)
def sdpa_empty_row_zeros():
    q, k, v = (torch.randn(2, 2, 4, 8, dtype=torch.float64) for _ in range(3))
    mask = torch.rand(2, 2, 4, 4) > 0.3
    mask[..., 1, :] = False  # query 1 may attend to nothing
    ours, _ = sdp.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return ours[..., 1, :], theirs[..., 1, :]


@identity("masks-bool-additive-roundtrip",
          "additive_to_bool(bool_to_additive(mask)) gives the boolean mask back, and SDPA "
          "gives the same output with either form",
          page="foundations/masks.md", tol=1e-12)
def masks_bool_additive_roundtrip():
    mask = masks.combine_masks(masks.causal_mask(5, 5),
                               masks.padding_mask(torch.tensor([5, 3]), 5))  # (2, 1, 5, 5)
    assert torch.equal(masks.additive_to_bool(masks.bool_to_additive(mask)), mask)
    q, k, v = (torch.randn(2, 3, 5, 8, dtype=torch.float64) for _ in range(3))
    with_bool = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    additive = masks.bool_to_additive(mask, torch.float64)
    return with_bool, F.scaled_dot_product_attention(q, k, v, attn_mask=additive)


@identity("masks-mha-polarity",
          "nn.MultiheadAttention given to_mha_mask(causal) and to_mha_mask(padding) equals "
          "SDPA given the site's combined mask, with the module's weights",
          page="foundations/masks.md", tol=1e-12)
def masks_mha_polarity():
    b, n, d, h = 2, 5, 8, 2
    mha = nn.MultiheadAttention(d, h, batch_first=True, dtype=torch.float64).eval()
    x = torch.randn(b, n, d, dtype=torch.float64)
    causal, real = masks.causal_mask(n, n), masks.padding_mask(torch.tensor([5, 3]), n)
    theirs, _ = mha(x, x, x, attn_mask=masks.to_mha_mask(causal),
                    key_padding_mask=masks.to_mha_mask(real), need_weights=False)
    q, k, v = F.linear(x, mha.in_proj_weight, mha.in_proj_bias).chunk(3, dim=-1)
    q, k, v = (t.view(b, n, h, d // h).transpose(1, 2) for t in (q, k, v))  # (B, H, N, d)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=masks.combine_masks(causal, real))
    return mha.out_proj(out.transpose(1, 2).reshape(b, n, d)), theirs


@identity("masks-padding-keys-inert",
          "with combine_masks(causal, key_mask), changing the padded keys and values never "
          "changes any output",
          page="foundations/masks.md", tol=0.0)
def masks_padding_keys_inert():
    q, k, v = (torch.randn(2, 2, 6, 8, dtype=torch.float64) for _ in range(3))
    key_mask = masks.padding_mask(torch.tensor([6, 4]), 6)  # (B, M), True = real
    mask = masks.combine_masks(masks.causal_mask(6, 6), key_mask)
    k2, v2 = k.clone(), v.clone()
    pad = ~key_mask[:, None, :, None].expand_as(k)  # (B, H, M, d)
    k2[pad], v2[pad] = 1e3 * torch.randn(int(pad.sum()), dtype=torch.float64), 7.0
    before, _ = sdp.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    after, _ = sdp.scaled_dot_product_attention(q, k2, v2, attn_mask=mask)
    return before, after


@identity("sinusoidal-equals-formula",
          "the sinusoidal table equals sin(pos / 10000^(2i/D)) and cos(pos / 10000^(2i/D)) "
          "written out element by element",
          page="foundations/positional-encoding.md", tol=1e-12)
def sinusoidal_equals_formula():
    n, d, start = 40, 16, 3
    table = pe.sinusoidal_positional_encoding(n, d, start=start, dtype=torch.float64)
    by_hand = torch.empty(n, d, dtype=torch.float64)
    for p in range(n):
        for i in range(d // 2):
            angle = (start + p) / 10000 ** (2 * i / d)
            by_hand[p, 2 * i], by_hand[p, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return table, by_hand


@identity("sinusoidal-offset-rotation",
          "PE[pos + k] = R_k PE[pos] for every pos: an offset is one fixed rotation",
          page="foundations/positional-encoding.md", tol=1e-9)
def sinusoidal_offset_rotation():
    d, k = 16, 7
    table = pe.sinusoidal_positional_encoding(60 + k, d, dtype=torch.float64)
    rotated = table[:60] @ pe.offset_rotation(k, d).T  # each row times R_k
    return rotated, table[k:]
