"""Identities proven for the Kimi Delta Attention page."""

from __future__ import annotations

import importlib

import torch
import torch.nn.functional as F

from identities import identity
from snippets.linear import delta_rule as dr
from snippets.linear import gated_linear_attention as gla
from snippets.linear import generalised_delta_rule as gdr
from snippets.linear import kimi_delta_attention as kda

PAGE = "linear/kimi-delta-attention.md"


def _inputs(n=23, dtype=torch.float64):
    q, v = torch.randn(2, 3, n, 5, dtype=dtype), torch.randn(2, 3, n, 4, dtype=dtype)
    k = F.normalize(torch.randn(2, 3, n, 5, dtype=dtype), dim=-1)
    beta, g = torch.rand(2, 3, n, dtype=dtype), -torch.rand(2, 3, n, 5, dtype=dtype)
    return q, k, v, beta, g


@identity("kda-recurrent-equals-definition",
          "kda_recurrent equals S_t = (I - beta_t k_t k_t^T) Diag(alpha_t) S_{t-1} + "
          "beta_t k_t v_t^T written with explicit matrices", page=PAGE, tol=1e-12)
def kda_recurrent_equals_definition():
    q, k, v, beta, g = _inputs()
    s, eye, outs = torch.zeros(2, 3, 5, 4, dtype=torch.float64), torch.eye(5, dtype=torch.float64), []
    for t in range(q.shape[2]):
        kt, bt = k[:, :, t], beta[:, :, t, None, None]
        keep = (eye - bt * kt[..., :, None] * kt[..., None, :]) @ torch.diag_embed(g[:, :, t].exp())
        s = keep @ s + bt * kt[..., :, None] * v[:, :, t, None, :]
        outs.append(torch.einsum("bhij,bhi->bhj", s, q[:, :, t]) * 5 ** -0.5)
    return kda.kda_recurrent(q, k, v, beta, g)[0], torch.stack(outs, dim=2)


@identity("kda-chunked-equals-recurrent",
          "KDA's chunked form (chunks of 8, N = 37 padded) equals its recurrence, "
          "outputs and final state", page=PAGE, tol=1e-12)
def kda_chunked_equals_recurrent():
    q, k, v, beta, g = _inputs(n=37)
    return (torch.cat([t.flatten() for t in kda.kda_chunked(q, k, v, beta, g, chunk_size=8)]),
            torch.cat([t.flatten() for t in kda.kda_recurrent(q, k, v, beta, g)]))


@identity("kda-one-gate-is-gated-deltanet",
          "KDA with the same log decay in every key channel equals Gated DeltaNet",
          page=PAGE, tol=1e-12)
def kda_one_gate_is_gated_deltanet():
    q, k, v, beta, _ = _inputs()
    g = -torch.rand(2, 3, 23, dtype=torch.float64)
    return (kda.kda_recurrent(q, k, v, beta, g[..., None].expand(-1, -1, -1, 5))[0],
            dr.delta_rule_recurrent(q, k, v, beta, g))


@identity("kda-equals-transformers-kimi-linear",
          "kda_recurrent and kda_chunked equal transformers' recurrent_kimi_delta_attention "
          "and chunk_kimi_delta_attention (float32)", page=PAGE, tol=5e-5,
          needs=("transformers",))
def kda_equals_transformers():
    kimi = importlib.import_module("transformers.models.kimi_linear.modeling_kimi_linear")
    q, k, v, beta, g = _inputs(n=40, dtype=torch.float32)
    bnhd = [t.transpose(1, 2) for t in (q, k, v, g, beta)]
    theirs = kimi.recurrent_kimi_delta_attention(*bnhd, None, False)[0].transpose(1, 2)
    chunked = kimi.chunk_kimi_delta_attention(*bnhd, chunk_size=16)[0].transpose(1, 2)
    ours = (kda.kda_recurrent(q, k, v, beta, g)[0], kda.kda_chunked(q, k, v, beta, g, chunk_size=16)[0])
    return torch.cat([o.flatten() for o in ours]), torch.cat([theirs.flatten(), chunked.flatten()])


@identity("rwkv7-rule-contains-kda",
          "RWKV-7's generalised delta rule with a = -(alpha * k), b = beta k and key beta k "
          "equals Kimi Delta Attention", page=PAGE, tol=1e-12)
def rwkv7_rule_contains_kda():
    q, k, v, beta, g = _inputs()
    bk = beta.unsqueeze(-1) * k
    ours = gdr.generalised_delta_recurrent(q, bk, v, g, -(g.exp() * k), bk, scale=5 ** -0.5)
    return ours[0], kda.kda_recurrent(q, k, v, beta, g)[0]


@identity("rwkv7-rule-without-transition-is-gla",
          "RWKV-7's generalised delta rule with a = b = 0 equals gated linear attention",
          page=PAGE, tol=1e-12)
def rwkv7_rule_without_transition_is_gla():
    q, k, v, _, g = _inputs()
    zero = torch.zeros_like(k)
    return (gdr.generalised_delta_recurrent(q, k, v, g, zero, zero, scale=5 ** -0.5)[0],
            gla.gla_recurrent(q, k, v, g))
