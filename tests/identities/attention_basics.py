"""Identities proven for the attention basics: naive, self, causal, cross and co-attention."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from identities import identity
from snippets.attention.causal import CausalSelfAttention
from snippets.attention.co_attention import ParallelCoAttention
from snippets.attention.cross_attention import CrossAttention
from snippets.attention.naive_self_attention import naive_self_attention
from snippets.attention.self_attention import SelfAttention

F64 = torch.float64


def _x(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=F64)


@identity("naive-equals-sdpa-scale-one",
          "naive self-attention softmax(X X^T) X equals F.scaled_dot_product_attention(x, x, x, "
          "scale=1)",
          page="attention/naive-self-attention.md", tol=1e-12)
def naive_equals_sdpa_scale_one():
    x = _x(2, 6, 8)
    return naive_self_attention(x)[0], F.scaled_dot_product_attention(x, x, x, scale=1.0)


@identity("naive-permutation-equivariant",
          "shuffling the tokens shuffles naive self-attention's outputs the same way: f(PX) = P f(X)",
          page="attention/naive-self-attention.md", tol=1e-12)
def naive_permutation_equivariant():
    x, perm = _x(2, 7, 8), torch.randperm(7)
    return naive_self_attention(x[:, perm])[0], naive_self_attention(x)[0][:, perm]


@identity("self-attention-equals-sdpa",
          "SelfAttention equals its own projections around F.scaled_dot_product_attention, "
          "with a boolean mask",
          page="attention/self-attention.md", tol=1e-12)
def self_attention_equals_sdpa():
    m = SelfAttention(8, d_k=4, d_v=6).to(F64)
    x, mask = _x(2, 5, 8), torch.rand(2, 5, 5) > 0.3
    mask[..., 0] = True
    q, k, v = m.q_proj(x), m.k_proj(x), m.v_proj(x)
    return m(x, attn_mask=mask)[0], m.out_proj(F.scaled_dot_product_attention(q, k, v, mask))


@identity("self-attention-empty-row-zeros",
          "a query of SelfAttention that may attend to no key gives zeros before out_proj, "
          "so its output is out_proj's bias",
          page="attention/self-attention.md", tol=0.0)
def self_attention_empty_row_zeros():
    m = SelfAttention(8).to(F64)
    mask = torch.ones(2, 5, 5, dtype=torch.bool)
    mask[:, 2] = False  # query 2 sees nothing
    out, _ = m(_x(2, 5, 8), attn_mask=mask)
    return out[:, 2], m.out_proj.bias.expand(2, 8)


@identity("causal-equals-sdpa-is-causal",
          "CausalSelfAttention equals its projections around F.scaled_dot_product_attention "
          "with is_causal=True (N = M)",
          page="attention/causal.md", tol=1e-12)
def causal_equals_sdpa_is_causal():
    m = CausalSelfAttention(8, d_k=4).to(F64).eval()
    x = _x(2, 6, 8)
    q, k, v = m.q_proj(x), m.k_proj(x), m.v_proj(x)
    oracle = m.out_proj(F.scaled_dot_product_attention(q, k, v, is_causal=True))
    return m(x)[0], oracle


@identity("causal-future-independent",
          "a causal output never changes when later tokens change: out[:t+1] is the same "
          "for any tokens after t",
          page="attention/causal.md", tol=0.0)
def causal_future_independent():
    m = CausalSelfAttention(8).to(F64).eval()
    x = _x(2, 7, 8)
    changed = x.clone()
    changed[:, 4:] = 100 * _x(2, 3, 8)
    return m(x)[0][:, :4], m(changed)[0][:, :4]


@identity("causal-padding-keys-inert",
          "with left padding given as key_mask, changing the padded tokens never changes the "
          "real tokens' outputs, on the from-scratch and the fused path",
          page="attention/causal.md", tol=1e-12)
def causal_padding_keys_inert():
    m = CausalSelfAttention(8).to(F64).eval()
    key_mask = torch.tensor([[True] * 6, [False, False] + [True] * 4])  # row 1 left-padded
    x = _x(2, 6, 8)
    changed = x.clone()
    changed[1, :2] = 50 * _x(2, 8)
    a = m(x, key_mask=key_mask)[0]
    b = m(changed, key_mask=key_mask, need_weights=False)[0]
    return a[key_mask], b[key_mask]


@identity("cross-attention-equals-mha",
          "CrossAttention equals nn.MultiheadAttention(num_heads=1, kdim, vdim) with the weights "
          "copied and key_padding_mask = ~key_mask",
          page="attention/cross-attention.md", tol=1e-12)
def cross_attention_equals_mha():
    ours = CrossAttention(8, d_context=6).to(F64)
    mha = nn.MultiheadAttention(8, 1, kdim=6, vdim=6, batch_first=True, dtype=F64)
    with torch.no_grad():
        mha.q_proj_weight.copy_(ours.q_proj.weight)
        mha.k_proj_weight.copy_(ours.k_proj.weight)
        mha.v_proj_weight.copy_(ours.v_proj.weight)
        mha.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        mha.out_proj.weight.copy_(ours.out_proj.weight)
        mha.out_proj.bias.copy_(ours.out_proj.bias)
    x, context = _x(2, 3, 8), _x(2, 5, 6)
    key_mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    theirs, _ = mha(x, context, context, key_padding_mask=~key_mask)
    return ours(x, context, key_mask=key_mask)[0], theirs


@identity("co-attention-parallel-equals-paper",
          "ParallelCoAttention equals Lu et al.'s equations written out per example in the "
          "paper's column layout (C, H^v, H^q, a^v, a^q, v_hat, q_hat)",
          page="attention/co-attention.md", tol=1e-12)
def co_attention_parallel_equals_paper():
    m = ParallelCoAttention(6, 5).to(F64)
    question, image = _x(2, 4, 6), _x(2, 3, 6)
    ours = torch.cat(m(question, image), dim=-1)  # q_hat, v_hat, a_q, a_v
    rows = []
    for qt, vt in zip(question, image):
        q, v = qt.T, vt.T  # the paper's Q (d, T), V (d, N)
        c = torch.tanh(q.T @ m.w_b @ v)  # (T, N)
        h_v = torch.tanh(m.w_v @ v + (m.w_q @ q) @ c)  # (k, N)
        h_q = torch.tanh(m.w_q @ q + (m.w_v @ v) @ c.T)  # (k, T)
        a_v, a_q = torch.softmax(m.w_hv @ h_v, -1)[0], torch.softmax(m.w_hq @ h_q, -1)[0]
        rows.append(torch.cat([q @ a_q, v @ a_v, a_q, a_v]))
    return ours, torch.stack(rows)


@identity("co-attention-padding-inert",
          "padding words and regions (masked) give ParallelCoAttention the same q_hat and v_hat "
          "as the unpadded example",
          page="attention/co-attention.md", tol=1e-12)
def co_attention_padding_inert():
    m = ParallelCoAttention(6, 5).to(F64)
    question, image = _x(1, 3, 6), _x(1, 2, 6)
    padded_q = torch.cat([question, 9 * _x(1, 2, 6)], dim=1)  # 2 padded words
    padded_v = torch.cat([image, 9 * _x(1, 3, 6)], dim=1)  # 3 padded regions
    q_mask = torch.tensor([[True, True, True, False, False]])
    v_mask = torch.tensor([[True, True, False, False, False]])
    q_hat, v_hat, _, _ = m(padded_q, padded_v, question_mask=q_mask, image_mask=v_mask)
    want_q, want_v, _, _ = m(question, image)
    return torch.cat([q_hat, v_hat], -1), torch.cat([want_q, want_v], -1)
