"""Identities proven for the softmax-that-forgets page."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from identities import identity
from snippets.linear import softmax_that_forgets as S

PAGE = "linear/softmax-that-forgets.md"


def _qkv(n=7):
    return tuple(torch.randn(2, 2, n, 8, dtype=torch.float64) for _ in range(3))


@identity("fox-constant-gate-is-alibi",
          "forgetting attention with a constant gate a equals ALiBi with slope -log a",
          page=PAGE, tol=1e-12)
def fox_constant_gate_is_alibi():
    q, k, v = _qkv()
    i, j = torch.arange(7)[:, None], torch.arange(7)
    alibi = ((i - j).double() * math.log(0.8)).masked_fill(j > i, float("-inf"))
    log_f = torch.full((2, 2, 7), math.log(0.8), dtype=torch.float64)
    return S.forgetting_attention(q, k, v, log_f), F.scaled_dot_product_attention(q, k, v, attn_mask=alibi)


@identity("fox-unit-gates-are-causal-softmax",
          "forgetting attention with every gate 1 equals causal softmax attention",
          page=PAGE, tol=1e-12)
def fox_unit_gates_are_causal_softmax():
    q, k, v = _qkv()
    zero = torch.zeros(2, 2, 7, dtype=torch.float64)
    return S.forgetting_attention(q, k, v, zero), F.scaled_dot_product_attention(q, k, v, is_causal=True)


@identity("stick-breaking-log-space-equals-definition",
          "stick-breaking weights in log space equal beta_ij prod (1 - beta_ik), entry by entry",
          page=PAGE, tol=1e-12)
def stick_breaking_log_space_equals_definition():
    z = torch.randn(1, 2, 6, 6, dtype=torch.float64) * 3
    beta = torch.sigmoid(z)
    a = torch.zeros_like(z)
    for i in range(6):
        for j in range(i):
            a[..., i, j] = beta[..., i, j] * torch.prod(1 - beta[..., i, j + 1:i], dim=-1)
    return S.stick_breaking_weights(z), a


def _path(n=9, d=5, beta_range=(0.0, 2.0)):
    q, k, v = (torch.randn(2, 2, n, d, dtype=torch.float64) for _ in range(3))
    w = F.normalize(torch.randn(2, 2, n, d, dtype=torch.float64), dim=-1)
    beta = beta_range[0] + (beta_range[1] - beta_range[0]) * torch.rand(2, 2, n, dtype=torch.float64)
    return q, k, v, w, beta


def _below(scores):
    return scores.masked_fill(torch.ones(scores.shape[-1], scores.shape[-1], dtype=torch.bool).triu(1), 0.0)


@identity("path-ut-form-equals-steps",
          "PaTH scores from one UT transform equal q_i^T H_i ... H_{j+1} k_j computed token by token",
          page=PAGE, tol=1e-12)
def path_ut_form_equals_steps():
    q, k, _, w, beta = _path()
    return _below(S.path_scores(q, k, w, beta)), _below(S.path_scores_by_steps(q, k, w, beta))


@identity("path-beta-zero-is-nope",
          "PaTH attention with every beta 0 equals causal softmax attention with no positions",
          page=PAGE, tol=1e-12)
def path_beta_zero_is_nope():
    q, k, v, w, _ = _path()
    zero = torch.zeros(2, 2, 9, dtype=torch.float64)
    return S.path_attention(q, k, v, w, zero), F.scaled_dot_product_attention(q, k, v, is_causal=True)


@identity("path-constant-transition-closed-form",
          "a constant transition gives q_i^T (I - (1 - (1 - beta)^(i-j)) w w^T) k_j: relative, not rotary",
          page=PAGE, tol=1e-12)
def path_constant_transition_closed_form():
    q, k, _, w, _ = _path()
    u = w[..., :1, :]  # (B, H, 1, d): one direction for every token
    beta = torch.full((2, 2, 9), 0.7, dtype=torch.float64)
    dist = (torch.arange(9)[:, None] - torch.arange(9)).clamp(min=0).double()
    qw_wk = (q @ u.transpose(-1, -2)) @ (u @ k.transpose(-1, -2))  # (q_i . w)(w . k_j)
    closed = q @ k.transpose(-1, -2) - (1 - (1 - 0.7) ** dist) * qw_wk
    return _below(S.path_scores(q, k, u.expand_as(w), beta)), _below(closed)


def fla_chunked_path(q, k, v, w, beta, g, scale, chunk=4):
    """The chunked algorithm of fla's PaTH reference, restated.

    Source: ``naive_path_attn`` in ``tests/ops/test_path_attn.py`` of
    fla-org/flash-linear-attention (also ``fla/ops/path_attn/naive.py`` in its
    forks). Inside each chunk a UT transform; the queries then walk back through
    the earlier chunks, each chunk's whole product applied at once. ``g`` is a
    log forget gate added *before* the scale, as fla does.
    """
    b, h, n, d = q.shape
    pad = (-n) % chunk
    q, k, w = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, w))
    beta = F.pad(beta, (0, pad))
    length, n_chunks = n + pad, (n + pad) // chunk
    qc, kc, wc = (t.unflatten(2, (n_chunks, chunk)) for t in (q, k, w))
    wbc = wc * beta.unflatten(2, (n_chunks, chunk)).unsqueeze(-1)
    strict = torch.ones(chunk, chunk, dtype=torch.bool).tril(-1)
    a = -(wbc @ wc.transpose(-1, -2)).masked_fill(~strict, 0)
    t = a.clone()
    for r in range(1, chunk):  # forward substitution: t = (I - a)^-1 - I, row by row
        t[..., r, :r] = a[..., r, :r] + (a[..., r, :r, None] * t[..., :r, :r]).sum(-2)
    t = t + torch.eye(chunk, dtype=q.dtype)
    right = t @ (wbc @ kc.transpose(-1, -2)).masked_fill(~strict, 0)
    qw = (qc @ wc.transpose(-1, -2)).tril()
    local = (qc @ kc.transpose(-1, -2)).tril() - qw @ right
    q_moved = qc - qw @ (t @ wbc)
    k_moved = kc - right.transpose(-1, -2) @ wc
    whole = wc.transpose(-1, -2) @ (t @ wbc)  # I - whole: one chunk's product, on rows
    scores = torch.zeros(b, h, length, length, dtype=q.dtype)
    for ci in range(n_chunks):
        qi, rows = q_moved[:, :, ci], slice(ci * chunk, (ci + 1) * chunk)
        for cj in range(ci - 1, -1, -1):
            scores[..., rows, cj * chunk:(cj + 1) * chunk] = qi @ k_moved[:, :, cj].transpose(-1, -2)
            qi = qi - qi @ whole[:, :, cj]
        scores[..., rows, rows] = local[:, :, ci]
    scores = scores.masked_fill(torch.ones(length, length, dtype=torch.bool).triu(1), float("-inf"))
    c = g.cumsum(-1)
    scores = (scores[..., :n, :n] + c[..., :, None] - c[..., None, :]) * scale
    return scores.softmax(-1) @ v


@identity("path-matches-fla-with-scaled-gate",
          "PaTH-FoX with log_f = g * scale equals fla's chunked PaTH reference with forget gate g",
          page=PAGE, tol=1e-12)
def path_matches_fla_with_scaled_gate():
    q, k, v, w, beta = _path(n=11, d=6)
    g = F.logsigmoid(torch.randn(2, 2, 11, dtype=torch.float64) + 3)
    scale = 6 ** -0.5
    return (S.path_attention(q, k, v, w, beta, log_f=g * scale, scale=scale),
            fla_chunked_path(q, k, v, w, beta, g, scale))
