"""Identities proven for the differential-attention page."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from identities import identity
from snippets.modern import differential_attention as DA

PAGE = "modern/differential-attention.md"


def diffllama_pair(layer_idx=2, d_model=16, pairs=2):
    """Our module and transformers' DiffLlamaAttention with the same weights (float64)."""
    import transformers

    from transformers.models.diffllama.modeling_diffllama import DiffLlamaAttention

    config = transformers.DiffLlamaConfig(hidden_size=d_model, num_attention_heads=2 * pairs,
                                          num_key_value_heads=2 * pairs, intermediate_size=32,
                                          rms_norm_eps=1e-6, lambda_std_dev=0.3)
    config._attn_implementation = "sdpa"
    theirs = DiffLlamaAttention(config, layer_idx=layer_idx).double().eval()
    ours = DA.DifferentialAttention(d_model, pairs, lambda_init=DA.lambda_init_for_layer(layer_idx),
                                    eps=1e-6).double().eval()
    d = ours.d_head
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
        ours.q_proj.weight.copy_(theirs.q_proj.weight)  # heads 0..H-1 are q1, H..2H-1 are q2
        ours.k_proj.weight.copy_(theirs.k_proj.weight)
        wv = theirs.v_proj.weight.view(2 * pairs, d, d_model)
        # pair i reads the values of heads i and i + H side by side: width 2d
        ours.v_proj.weight.copy_(torch.cat([wv[:pairs], wv[pairs:]], dim=1).reshape(d_model, d_model))
        ours.out_proj.weight.copy_(theirs.o_proj.weight)
        for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
            getattr(ours, name).copy_(getattr(theirs, name))
    return ours, theirs


def _halves():
    q1, k1, q2, k2 = (torch.randn(2, 2, 6, 4, dtype=torch.float64) for _ in range(4))
    return q1, k1, q2, k2, torch.randn(2, 2, 6, 8, dtype=torch.float64)


@identity("differential-lambda-zero-is-attention",
          "differential attention with lambda = 0 (before the norm) equals SDPA on half-width heads",
          page=PAGE, tol=1e-12)
def differential_lambda_zero_is_attention():
    q1, k1, q2, k2, v = _halves()
    return (DA.differential_attention(q1, k1, q2, k2, v, 0.0),
            F.scaled_dot_product_attention(q1, k1, v, is_causal=True))


@identity("differential-rows-sum-to-one-minus-lambda",
          "each row of softmax(Q1 K1^T) - lambda softmax(Q2 K2^T) sums to 1 - lambda",
          page=PAGE, tol=1e-12)
def differential_rows_sum_to_one_minus_lambda():
    q1, k1, q2, k2, _ = _halves()
    out = DA.differential_attention(q1, k1, q2, k2, torch.ones(2, 2, 6, 8, dtype=torch.float64), 0.7)
    return out, torch.full_like(out, 0.3)


@identity("differential-equals-transformers-diffllama",
          "DifferentialAttention equals transformers' DiffLlamaAttention with weights copied "
          "(its lambda is summed in float32)",
          page=PAGE, tol=1e-6, needs=("transformers",))
def differential_equals_transformers_diffllama():
    ours, theirs = diffllama_pair()
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    rope = (torch.ones(2, 7, ours.d_head, dtype=torch.float64), torch.zeros(2, 7, ours.d_head, dtype=torch.float64))
    return ours(x), theirs(x, rope, attention_mask=None)[0]
