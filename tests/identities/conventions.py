"""Identities proven for the conventions-across-libraries page."""

from __future__ import annotations

import importlib
import math

import torch
import torch.nn.functional as F

from identities import identity
from snippets.efficiency import conventions as cv

PAGE = "efficiency/conventions.md"
F64 = torch.float64


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator(device=torch.get_default_device()).manual_seed(seed), dtype=F64)


@identity("conventions-flash-window-is-hf-window",
          "a window of W keys (transformers' sliding_window_causal_mask_function(W), "
          "run through SDPA) equals the band FlashAttention reads with "
          "window_size = flash_window(W) = (W - 1, 0)", page=PAGE, tol=1e-12,
          needs=("transformers",))
def flash_window_is_hf_window():
    mu = importlib.import_module("transformers.masking_utils")
    n, w = 20, 5
    q, k, v = (_randn(1, 2, n, 8, seed=s) for s in range(3))
    hf = mu.sdpa_mask(batch_size=1, q_length=n, kv_length=n, allow_is_causal_skip=False,
                      mask_function=mu.sliding_window_causal_mask_function(w))
    left, right = cv.flash_window(w)
    return (F.scaled_dot_product_attention(q, k, v, attn_mask=hf),
            F.scaled_dot_product_attention(
                q, k, v, attn_mask=cv.band_mask(n, n, left=left, right=right)))


@identity("conventions-lower-right-is-cache-offset",
          "band_mask(N, M) (lower right) equals transformers' causal sdpa_mask with "
          "q_offset = M - N, run through SDPA (N = 3, M = 11)", page=PAGE, tol=1e-12,
          needs=("transformers",))
def lower_right_is_cache_offset():
    mu = importlib.import_module("transformers.masking_utils")
    q, k, v = _randn(1, 2, 3, 8), _randn(1, 2, 11, 8, seed=1), _randn(1, 2, 11, 8, seed=2)
    hf = mu.sdpa_mask(batch_size=1, q_length=3, kv_length=11, q_offset=8,
                      allow_is_causal_skip=False)
    return (F.scaled_dot_product_attention(q, k, v, attn_mask=cv.band_mask(3, 11)),
            F.scaled_dot_product_attention(q, k, v, attn_mask=hf))


@identity("conventions-lse-base2-to-natural",
          "lse_to_natural of a base-2 log-sum-exp computed as FlashInfer's state does "
          "(m + log2 d over scores times log2 e) equals torch.logsumexp", page=PAGE,
          tol=1e-12)
def lse_base2_to_natural():
    s = _randn(2, 4, 6, 9) * 3
    t = s * math.log2(math.e)
    m = t.amax(-1)
    lse2 = m + torch.log2(torch.exp2(t - m[..., None]).sum(-1))
    return cv.lse_to_natural(lse2), torch.logsumexp(s, -1)


@identity("conventions-gqa-permutation",
          "a model trained with repeat (query head h reads kv head h % H_kv) equals a "
          "repeat_interleave kernel (SDPA enable_gqa) fed q[:, perm], read back with "
          "out[:, perm.argsort()] (H = 8, H_kv = 2)", page=PAGE, tol=1e-12)
def gqa_permutation():
    q, k, v = _randn(2, 8, 5, 8), _randn(2, 2, 7, 8, seed=1), _randn(2, 2, 7, 8, seed=2)
    trained = F.scaled_dot_product_attention(q, k.repeat(1, 4, 1, 1), v.repeat(1, 4, 1, 1))
    perm = cv.gqa_head_permutation(8, 2)
    kernel = F.scaled_dot_product_attention(q[:, perm], k, v, enable_gqa=True)
    return kernel[:, perm.argsort()], trained


@identity("conventions-rope-half-split-order",
          "transformers' half-split RoPE (apply_rotary_pos_emb, rotate_half) equals "
          "interleaved RoPE conjugated by rope_half_split_order(d)", page=PAGE, tol=1e-12,
          needs=("transformers",))
def rope_half_split_order():
    llama = importlib.import_module("transformers.models.llama.modeling_llama")
    n, d = 7, 16
    x = _randn(1, 2, n, d)
    angles = torch.arange(n, dtype=F64)[:, None] * 1e4 ** (-torch.arange(0, d, 2) / d)
    cos, sin = angles.cos(), angles.sin()
    half, _ = llama.apply_rotary_pos_emb(x, x, torch.cat([cos, cos], -1)[None],
                                         torch.cat([sin, sin], -1)[None])
    order = cv.rope_half_split_order(d)
    y = x[..., order.argsort()]  # the same vector in the interleaved layout
    a, b = y[..., 0::2], y[..., 1::2]
    inter = torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)
    return inter[..., order], half


@identity("conventions-sinks-equal-gpt-oss",
          "attention_with_sinks equals transformers' gpt-oss eager attention (a learned "
          "logit per head in the denominator only)", page=PAGE, tol=1e-12,
          needs=("transformers",))
def sinks_equal_gpt_oss():
    oss = importlib.import_module("transformers.models.gpt_oss.modeling_gpt_oss")
    q, k, v = _randn(1, 4, 6, 8), _randn(1, 4, 6, 8, seed=1), _randn(1, 4, 6, 8, seed=2)
    sinks = _randn(4, seed=3)
    module = torch.nn.Module()
    module.num_key_value_groups, module.sinks, module.training = 1, sinks, False
    keep = cv.band_mask(6, 6)
    bias = torch.zeros(6, 6, dtype=F64).masked_fill(~keep, -math.inf)
    out, _ = oss.eager_attention_forward(module, q, k, v, bias, scaling=0.3)
    return cv.attention_with_sinks(q, k, v, sinks, attn_mask=keep, scale=0.3), \
        out.transpose(1, 2)


@identity("conventions-softcap-is-flex-score-mod",
          "softmax of soft_capped_scores equals flex_attention with the score_mod "
          "cap * tanh(score / cap): flex hands score_mod the scaled score", page=PAGE,
          tol=1e-12)
def softcap_is_flex_score_mod():
    from torch.nn.attention.flex_attention import flex_attention
    q, k, v = _randn(1, 2, 5, 8), _randn(1, 2, 6, 8, seed=1), _randn(1, 2, 6, 8, seed=2)
    ours = torch.softmax(cv.soft_capped_scores(q, k, cap=1.5), -1) @ v
    return ours, flex_attention(q, k, v, score_mod=lambda s, b, h, i, j: 1.5 * torch.tanh(
        s / 1.5))
