"""Identities proven for the linear pages: GLA, the delta rule, SSD and sparse attention."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from identities import identity
from snippets.linear import delta_rule as dr
from snippets.linear import gated_linear_attention as gla
from snippets.linear import sparse_attention as sp
from snippets.linear import state_space_duality as ssd

GLA_PAGE = "linear/gated-linear-attention.md"
DELTA_PAGE = "linear/delta-rule.md"
SSD_PAGE = "linear/state-space-duality.md"
SPARSE_PAGE = "linear/sparse-attention.md"


def _gla_inputs(n=23):
    q, k, g = (torch.randn(2, 3, n, 5, dtype=torch.float64) for _ in range(3))
    v = torch.randn(2, 3, n, 4, dtype=torch.float64)
    return q, k, v, -g.abs()


@identity("gla-recurrent-equals-paper",
          "gla_recurrent equals S_t = Diag(alpha_t) S_{t-1} + k_t v_t^T written with "
          "explicit diagonal matrices", page=GLA_PAGE, tol=1e-12)
def gla_recurrent_equals_paper():
    q, k, v, g = _gla_inputs()
    s = torch.zeros(2, 3, 5, 4, dtype=torch.float64)
    outs = []
    for t in range(q.shape[2]):
        s = torch.diag_embed(g[:, :, t].exp()) @ s + k[:, :, t, :, None] * v[:, :, t, None, :]
        outs.append(torch.einsum("bhij,bhi->bhj", s, q[:, :, t]) * 5 ** -0.5)
    return gla.gla_recurrent(q, k, v, g), torch.stack(outs, dim=2)


@identity("gla-parallel-equals-recurrent",
          "GLA's parallel (masked attention) form equals its recurrence",
          page=GLA_PAGE, tol=1e-12)
def gla_parallel_equals_recurrent():
    q, k, v, g = _gla_inputs()
    return gla.gla_parallel(q, k, v, g), gla.gla_recurrent(q, k, v, g)


@identity("gla-chunked-equals-recurrent",
          "GLA's chunked form with secondary chunking (chunks of 8, sub-chunks of 4) "
          "equals its recurrence", page=GLA_PAGE, tol=1e-12)
def gla_chunked_equals_recurrent():
    q, k, v, g = _gla_inputs(n=37)
    return (gla.gla_chunked(q, k, v, g, chunk_size=8, sub_chunk_size=4),
            gla.gla_recurrent(q, k, v, g))


def _delta_inputs(n=23):
    q, v = torch.randn(2, 3, n, 5, dtype=torch.float64), torch.randn(2, 3, n, 4, dtype=torch.float64)
    k = F.normalize(torch.randn(2, 3, n, 5, dtype=torch.float64), dim=-1)
    beta, g = torch.rand(2, 3, n, dtype=torch.float64), -torch.rand(2, 3, n, dtype=torch.float64)
    return q, k, v, beta, g


@identity("delta-recurrent-equals-paper",
          "delta_rule_recurrent equals S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + "
          "beta_t k_t v_t^T with the matrices written out", page=DELTA_PAGE, tol=1e-12)
def delta_recurrent_equals_paper():
    q, k, v, beta, g = _delta_inputs()
    s, eye, outs = torch.zeros(2, 3, 5, 4, dtype=torch.float64), torch.eye(5, dtype=torch.float64), []
    for t in range(q.shape[2]):
        kt, bt = k[:, :, t], beta[:, :, t, None, None]
        s = g[:, :, t, None, None].exp() * (eye - bt * kt[..., None] * kt[..., None, :]) @ s \
            + bt * kt[..., None] * v[:, :, t, None, :]
        outs.append(torch.einsum("bhij,bhi->bhj", s, q[:, :, t]) * 5 ** -0.5)
    return dr.delta_rule_recurrent(q, k, v, beta, g), torch.stack(outs, dim=2)


@identity("delta-parallel-equals-recurrent",
          "Gated DeltaNet's triangular-solve form equals its recurrence",
          page=DELTA_PAGE, tol=1e-12)
def delta_parallel_equals_recurrent():
    q, k, v, beta, g = _delta_inputs()
    return dr.delta_rule_parallel(q, k, v, beta, g), dr.delta_rule_recurrent(q, k, v, beta, g)


@identity("delta-chunked-equals-recurrent",
          "Gated DeltaNet's chunked (WY) form equals its recurrence (chunks of 5)",
          page=DELTA_PAGE, tol=1e-12)
def delta_chunked_equals_recurrent():
    q, k, v, beta, g = _delta_inputs()
    return (dr.delta_rule_chunked(q, k, v, beta, g, chunk_size=5),
            dr.delta_rule_recurrent(q, k, v, beta, g))


def _ssd_inputs(n=23):
    x = torch.randn(2, 3, n, 4, dtype=torch.float64)
    dt, a = torch.rand(2, 3, n, dtype=torch.float64) * 0.5, -torch.rand(3, dtype=torch.float64) - 0.1
    b, c = (torch.randn(2, 3, n, 6, dtype=torch.float64) for _ in range(2))
    return x, dt, a, b, c


@identity("ssd-attention-equals-recurrent",
          "SSD's dual form (L o C B^T)(dt X) equals its recurrence", page=SSD_PAGE, tol=1e-12)
def ssd_attention_equals_recurrent():
    args = _ssd_inputs()
    return ssd.ssd_attention(*args), ssd.ssd_recurrent(*args)


@identity("ssd-chunked-equals-recurrent",
          "SSD's four-step chunked algorithm equals its recurrence (chunks of 5, padded)",
          page=SSD_PAGE, tol=1e-12)
def ssd_chunked_equals_recurrent():
    args = _ssd_inputs()
    return ssd.ssd_chunked(*args, chunk_size=5), ssd.ssd_recurrent(*args)


@identity("ssd-equals-gla-one-decay-per-head",
          "SSD equals gated linear attention with one decay per head on every channel "
          "(q = c, k = b, v = dt x, scale 1)", page=SSD_PAGE, tol=1e-12)
def ssd_equals_gla():
    x, dt, a, b, c = _ssd_inputs()
    g = (dt * a[:, None]).unsqueeze(-1).expand_as(b).contiguous()
    return gla.gla_parallel(c, b, dt.unsqueeze(-1) * x, g, scale=1.0), ssd.ssd_attention(x, dt, a, b, c)


def _qkv(n=20):
    return (torch.randn(2, 3, n, 8, dtype=torch.float64) for _ in range(3))


@identity("topk-all-equals-dense-causal",
          "top-k sparse attention that keeps every key equals dense causal SDPA",
          page=SPARSE_PAGE, tol=1e-12)
def topk_all_equals_dense():
    q, k, v = _qkv()
    scores = torch.randn(2, 20, 20, dtype=torch.float64)
    return sp.topk_sparse_attention(q, k, v, scores, 20), F.scaled_dot_product_attention(
        q, k, v, is_causal=True)


@identity("nsa-window-equals-dense-causal",
          "NSA gated to its sliding window, as long as the sequence, equals dense causal SDPA",
          page=SPARSE_PAGE, tol=1e-12)
def nsa_window_equals_dense():
    q, k, v = _qkv()
    gates = torch.zeros(2, 3, 20, 3, dtype=torch.float64)
    gates[..., 2] = 1
    return (sp.nsa_attention(q, k, v, gates, block=4, n_select=2, window=20),
            F.scaled_dot_product_attention(q, k, v, is_causal=True))


@identity("nsa-select-all-equals-dense-causal",
          "NSA gated to its selected branch, selecting every block, equals dense causal SDPA",
          page=SPARSE_PAGE, tol=1e-12)
def nsa_select_all_equals_dense():
    q, k, v = _qkv()
    gates = torch.zeros(2, 3, 20, 3, dtype=torch.float64)
    gates[..., 1] = 1
    return (sp.nsa_attention(q, k, v, gates, block=4, n_select=5, window=2),
            F.scaled_dot_product_attention(q, k, v, is_causal=True))
