"""Identities proven for the trainers'-tweaks page: each tweak's off switch, and one property each."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from identities import identity
from snippets.modern import trainers_tweaks as TT

PAGE = "modern/trainers-tweaks.md"
F64 = torch.float64


def _qkv(n=7, seed=0):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    return tuple(torch.randn(2, 3, n, 4, generator=g, dtype=F64) for _ in range(3))


def _causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@identity("value-residual-off-is-attention",
          "value_residual_attention with keep = 1, gate = 0 (no value embedding) equals causal SDPA",
          page=PAGE, tol=1e-12)
def value_residual_off_is_attention():
    q, k, v = _qkv(seed=1)
    return TT.value_residual_attention(q, k, v, torch.randn_like(v), keep=1.0, gate=0.0), _causal(q, k, v)


@identity("value-residual-is-one-map-over-two-value-sets",
          "ResFormer's 0.5 v + 0.5 v1 equals 0.5 SDPA(q, k, v) + 0.5 SDPA(q, k, v1): one map, two value sets",
          page=PAGE, tol=1e-12)
def value_residual_is_one_map_over_two_value_sets():
    q, k, v = _qkv(seed=2)
    v1 = torch.randn_like(v)
    return (TT.value_residual_attention(q, k, v, v1, keep=0.5, gate=0.5),
            0.5 * _causal(q, k, v) + 0.5 * _causal(q, k, v1))


@identity("mta-delta-kernels-are-attention",
          "multi_token_attention with delta kernels (6 x 11, before and after the softmax) equals causal SDPA",
          page=PAGE, tol=1e-12)
def mta_delta_kernels_are_attention():
    q, k, v = _qkv(n=12, seed=3)
    delta = TT.delta_kernel(3, 6, 11, dtype=F64)
    return TT.multi_token_attention(q, k, v, delta, delta), _causal(q, k, v)


@identity("mta-is-causal",
          "multi_token_attention with random 3 x 5 kernels: outputs before t = 4 ignore tokens from t = 4 on",
          page=PAGE, tol=1e-12)
def mta_is_causal():
    q, k, v = _qkv(n=9, seed=4)
    g = torch.Generator(device=torch.get_default_device()).manual_seed(5)
    pre, post = (torch.randn(3, 3, 5, generator=g, dtype=F64) for _ in range(2))
    q2, k2, v2 = (t.clone() for t in (q, k, v))
    for t in (q2, k2, v2):
        t[:, :, 4:] = torch.randn(t[:, :, 4:].shape, generator=g, dtype=F64)
    return (TT.multi_token_attention(q2, k2, v2, pre, post)[:, :, :4],
            TT.multi_token_attention(q, k, v, pre, post)[:, :, :4])


@identity("canon-zero-kernel-is-identity",
          "canon with a zero kernel returns its input",
          page=PAGE, tol=1e-12)
def canon_zero_kernel_is_identity():
    x = torch.randn(2, 9, 6, dtype=F64)
    return TT.canon(x, torch.zeros(6, 4, dtype=F64)), x


@identity("canon-equals-conv1d-residual",
          "canon equals x + nn.Conv1d(groups=D, padding=c-1) cut to the first N outputs (the authors' naive path)",
          page=PAGE, tol=1e-12)
def canon_equals_conv1d_residual():
    x, w = torch.randn(2, 9, 6, dtype=F64), torch.randn(6, 4, dtype=F64)
    conv = torch.nn.Conv1d(6, 6, 4, groups=6, padding=3, bias=False).double()
    with torch.no_grad():
        conv.weight.copy_(w.unsqueeze(1))
        theirs = x + conv(x.transpose(1, 2))[..., :9].transpose(1, 2)
    return TT.canon(x, w), theirs


@identity("canon-is-causal",
          "canon: outputs before t = 5 ignore the inputs from t = 5 on",
          page=PAGE, tol=1e-12)
def canon_is_causal():
    x, w = torch.randn(2, 9, 6, dtype=F64), torch.randn(6, 4, dtype=F64)
    x2 = x.clone()
    x2[:, 5:] = torch.randn(2, 4, 6, dtype=F64)
    return TT.canon(x2, w)[:, :5], TT.canon(x, w)[:, :5]


@identity("exclusive-orthogonal-to-own-value",
          "exclusive_attention: each output z_i has <z_i, v_i> = 0",
          page=PAGE, tol=1e-12)
def exclusive_orthogonal_to_own_value():
    q, k, v = _qkv(seed=6)
    dots = (TT.exclusive_attention(q, k, v) * v).sum(-1)
    return dots, torch.zeros_like(dots)


@identity("exclusive-strength-zero-is-attention",
          "exclusive_attention with strength 0 equals causal SDPA",
          page=PAGE, tol=1e-12)
def exclusive_strength_zero_is_attention():
    q, k, v = _qkv(seed=7)
    return TT.exclusive_attention(q, k, v, strength=0.0), _causal(q, k, v)
