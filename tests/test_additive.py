"""Tests for snippets/history/additive_attention.py (Bahdanau, Cho and Bengio 2014, arXiv:1409.0473).

The oracle is the paper's equations written out here with explicit loops:
e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j), alpha_ij = exp(e_ij) / sum_k exp(e_ik),
c_i = sum_j alpha_ij h_j.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from snippets.history.additive_attention import (
    BOS,
    EOS,
    PAD,
    AdditiveAttention,
    BahdanauEncoder,
    BahdanauSeq2Seq,
    accuracy_by_length,
    reversal_batch,
    train_toy_translation,
)

SNIPPET = Path(__file__).resolve().parents[1] / "snippets" / "history" / "additive_attention.py"


def _loop_attention(att: AdditiveAttention, query, keys, key_mask=None):
    """The paper's three equations, one scalar at a time."""
    w_a, u_a, v_a = att.w_a.weight, att.u_a.weight, att.v_a.weight[0]
    b, n, _ = query.shape
    m = keys.shape[1]
    context = torch.zeros(b, n, keys.shape[2], dtype=keys.dtype)
    weights = torch.zeros(b, n, m, dtype=keys.dtype)
    for bi in range(b):
        real = [j for j in range(m) if key_mask is None or bool(key_mask[bi, j])]
        for i in range(n):
            s_prev = query[bi, i]
            e = {j: torch.dot(v_a, torch.tanh(w_a @ s_prev + u_a @ keys[bi, j])) for j in real}
            if not real:
                continue
            top = max(float(x.detach()) for x in e.values())
            total = sum(math.exp(float(e[j].detach()) - top) for j in real)
            for j in real:
                alpha = math.exp(float(e[j].detach()) - top) / total
                weights[bi, i, j] = alpha
                context[bi, i] += alpha * keys[bi, j]
    return context, weights


def _prefix_mask(lengths, m):
    return torch.arange(m) < torch.tensor(lengths).unsqueeze(-1)


def test_matches_paper_equations_with_loops():
    torch.manual_seed(0)
    att = AdditiveAttention(5, 6, 7).double()
    query, keys = torch.randn(2, 3, 5).double(), torch.randn(2, 4, 6).double()
    mask = _prefix_mask([4, 2], 4)
    for key_mask in (None, mask):
        context, weights = att(query, keys, key_mask=key_mask)
        want_context, want_weights = _loop_attention(att, query, keys, key_mask)
        assert_close(weights, want_weights)
        assert_close(context, want_context)


def test_projected_keys_reuse_gives_same_result():
    torch.manual_seed(1)
    att = AdditiveAttention(4, 6, 5)
    query, keys = torch.randn(2, 3, 4), torch.randn(2, 5, 6)
    assert_close(att(query, keys, projected_keys=att.project_keys(keys)), att(query, keys))


def test_rows_sum_to_one_and_padding_gets_zero_weight():
    torch.manual_seed(2)
    att = AdditiveAttention(4, 6, 5)
    query, keys = torch.randn(3, 2, 4), torch.randn(3, 5, 6)
    key_mask = _prefix_mask([5, 3, 1], 5)
    _, weights = att(query, keys, key_mask=key_mask)
    assert_close(weights.sum(-1), torch.ones(3, 2))
    assert bool((weights.masked_select(~key_mask.unsqueeze(1).expand_as(weights)) == 0).all())


def test_padded_keys_never_change_real_outputs():
    torch.manual_seed(3)
    att = AdditiveAttention(4, 6, 5)
    query, keys = torch.randn(2, 3, 4), torch.randn(2, 5, 6)
    key_mask = _prefix_mask([3, 4], 5)
    changed = keys.clone()
    changed[~key_mask] = 1000.0 * torch.randn(int((~key_mask).sum()), 6)
    assert_close(att(query, changed, key_mask=key_mask), att(query, keys, key_mask=key_mask))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_padded_keys_stay_out_at_huge_scores(sign):
    # v_a is scaled by +-1e10, so the scores e_ij are about +-1e9 and beyond
    # (float32): in one of the two signs the only real key of sentence 0 scores
    # far below zero. The padded keys, which are also the values, are then made
    # huge. With -inf masking their weights stay exactly 0 and no context moves;
    # a finite fill (-1e4, even -1e9) would hand sentence 0 to the padding.
    torch.manual_seed(4)
    att = AdditiveAttention(4, 6, 5)
    with torch.no_grad():
        att.v_a.weight.mul_(sign * 1e10)
    query, keys = torch.randn(2, 3, 4), torch.randn(2, 5, 6)
    key_mask = _prefix_mask([1, 3], 5)
    context, weights = att(query, keys, key_mask=key_mask)
    padded = torch.where(key_mask[..., None], keys, 1e6 * torch.randn(2, 5, 6))
    moved, moved_weights = att(query, padded, key_mask=key_mask)
    assert torch.isfinite(context).all()
    assert_close(moved, context, rtol=1e-5, atol=1e-5)
    assert torch.equal(moved_weights, weights)
    assert (weights[~key_mask.unsqueeze(1).expand(2, 3, 5)] == 0).all()
    assert torch.equal(weights[0, :, 0], torch.ones(3))


def test_fully_masked_row_returns_zeros():
    att = AdditiveAttention(4, 6, 5)
    key_mask = torch.tensor([[False, False, False], [True, False, False]])
    context, weights = att(torch.randn(2, 1, 4), torch.randn(2, 3, 6), key_mask=key_mask)
    assert torch.isfinite(context).all() and torch.isfinite(weights).all()
    assert_close(context[0], torch.zeros(1, 6))
    assert_close(weights[1, 0], torch.tensor([1.0, 0.0, 0.0]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_finite_for_large_inputs(dtype):
    torch.manual_seed(4)
    att = AdditiveAttention(4, 6, 5).to(dtype)
    query = (1e4 * torch.randn(2, 3, 4)).to(dtype)
    keys = (1e4 * torch.randn(2, 5, 6)).to(dtype)
    context, weights = att(query, keys, key_mask=_prefix_mask([5, 2], 5))
    assert torch.isfinite(context).all() and torch.isfinite(weights).all()
    assert_close(weights.float().sum(-1), torch.ones(2, 3), atol=1e-2, rtol=0)


def test_gradcheck_float64():
    torch.manual_seed(5)
    att = AdditiveAttention(2, 2, 3).double()
    query = torch.randn(2, 2, 2, dtype=torch.float64, requires_grad=True)
    keys = torch.randn(2, 3, 2, dtype=torch.float64, requires_grad=True)
    key_mask = _prefix_mask([3, 2], 3)
    assert torch.autograd.gradcheck(lambda q, k: att(q, k, key_mask=key_mask), (query, keys))


def test_encoder_annotations_ignore_padding():
    """The backward RNN of a padded sentence starts at its last real token."""
    torch.manual_seed(6)
    enc = BahdanauEncoder(13, 8, 5)
    src = torch.tensor([[3, 4, 5, PAD, PAD], [6, 7, 8, 9, 10]])
    key_mask = src != PAD
    annotations = enc(src, key_mask)  # (2, 5, 10)
    alone = enc(src[:1, :3], key_mask[:1, :3])  # the short sentence with no padding at all
    assert_close(annotations[:1, :3], alone)
    assert_close(annotations[0, 3:], torch.zeros(2, 10))
    # forward half at j sees tokens <= j; backward half sees tokens >= j
    changed = src.clone()
    changed[1, 4] = 3
    other = enc(changed, key_mask)
    assert_close(other[1, :4, :5], annotations[1, :4, :5])
    assert not torch.allclose(other[1, :4, 5:], annotations[1, :4, 5:])


def test_decoder_step_follows_the_equations():
    """s_i = GRUCell([E y_{i-1}; c_i], s_{i-1}) with c_i from alpha computed on s_{i-1}."""
    torch.manual_seed(7)
    model = BahdanauSeq2Seq(13, 13, emb_dim=6, hidden_size=5, attn_dim=4).double()
    src = torch.tensor([[3, 4, 5, 6], [7, 8, PAD, PAD]])
    src_mask = src != PAD
    tgt_in = torch.tensor([[BOS, 6, 5], [BOS, 8, 7]])
    logits, weights = model(src, tgt_in, src_mask=src_mask)

    h = model.encoder(src, src_mask)
    s = torch.tanh(model.init_state(h[:, 0, 5:]))  # s_0 = tanh(W_s backward h_1)
    for i in range(tgt_in.shape[1]):
        c, alpha = _loop_attention(model.attention, s.unsqueeze(1), h, src_mask)
        assert_close(weights[:, i], alpha[:, 0])
        emb = model.tgt_embedding(tgt_in[:, i])
        s = model.cell(torch.cat([emb, c[:, 0]], -1), s)
        assert_close(logits[:, i], model.readout(torch.cat([s, c[:, 0], emb], -1)))


def test_baseline_uses_one_fixed_context():
    torch.manual_seed(8)
    model = BahdanauSeq2Seq(13, 13, emb_dim=6, hidden_size=5, use_attention=False)
    src = torch.tensor([[3, 4, 5, 6], [7, 8, PAD, PAD]])
    logits, weights = model(src, torch.tensor([[BOS, 6], [BOS, 8]]), src_mask=src != PAD)
    assert weights is None and model.attention is None
    _, summary, _ = model.encode(src, src != PAD)
    h = model.encoder(src, src != PAD)
    assert_close(summary[1], torch.cat([h[1, 1, :5], h[1, 0, 5:]]))  # forward at last real token, backward at first


def test_reversal_batch_and_decode_shapes():
    src, src_mask, tgt_in, tgt_out = reversal_batch(4, 2, 5, random.Random(0))
    b, m = src.shape
    assert tgt_in.shape == tgt_out.shape == (b, m + 1)
    for row in range(b):
        length = int(src_mask[row].sum())
        digits = src[row, :length].tolist()
        assert tgt_out[row, :length].tolist() == digits[::-1] and int(tgt_out[row, length]) == EOS
        assert tgt_in[row, 0] == BOS and tgt_in[row, 1 : length + 1].tolist() == digits[::-1]
    model = BahdanauSeq2Seq(13, 13, emb_dim=4, hidden_size=4, attn_dim=4)
    tokens, weights = model.greedy_decode(src, 6, src_mask=src_mask)
    assert tokens.shape == (b, 6) and weights.shape == (b, 6, m)
    losses = train_toy_translation(model, steps=2, batch_size=4, max_len=4)
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    acc = accuracy_by_length(model, [2, 3], n_per_length=4)
    assert set(acc) == {2, 3} and all(0.0 <= v <= 1.0 for v in acc.values())


def test_validation_messages():
    att = AdditiveAttention(4, 6, 5)
    q, k = torch.randn(2, 1, 4), torch.randn(2, 3, 6)
    cases = [
        (lambda: AdditiveAttention(4, 6, 0), ValueError, r"attn_dim must be an int >= 1, got \{'attn_dim': 0\}"),
        (lambda: att(torch.randn(2, 4), k), ValueError, r"query must have shape \(None, None, 4\), got \(2, 4\)"),
        (lambda: att(q, [1, 2]), ValueError, r"keys must have shape \(2, None, 6\), got list"),
        (lambda: att(q, torch.randn(3, 3, 6)), ValueError, r"keys must have shape \(2, None, 6\), got \(3, 3, 6\)"),
        (lambda: att(torch.randn(2, 1, 5), k), ValueError, r"query must have shape \(None, None, 4\), got \(2, 1, 5\)"),
        (lambda: att(q, torch.randn(2, 3, 7)), ValueError, r"keys must have shape \(2, None, 6\), got \(2, 3, 7\)"),
        (lambda: att(q, k, key_mask=[[True] * 3] * 2), ValueError, r"key_mask must have shape \(2, 3\), got list"),
        (lambda: att(q, k, key_mask=torch.ones(2, 3, dtype=torch.long)), TypeError,
         r"key_mask must have dtype \(torch.bool,\) on cpu, got torch.int64"),
        (lambda: att(q, k, key_mask=torch.ones(2, 4, dtype=torch.bool)), ValueError,
         r"key_mask must have shape \(2, 3\), got \(2, 4\)"),
    ]
    enc = BahdanauEncoder(13, 4, 3)
    src = torch.tensor([[3, 4, 5], [6, 7, 8]])
    cases += [
        (lambda: enc(src, torch.tensor([[True, True, True], [False, False, False]])), ValueError,
         r"key_mask must be right-padded, got \[\[1, 1, 1\], \[0, 0, 0\]\]"),
        (lambda: enc(src, torch.tensor([[True, True, True], [False, True, True]])), ValueError,
         r"key_mask must be right-padded"),
        (lambda: reversal_batch(2, 5, 3, random.Random(0)), ValueError, r"max_len must be an int >= 5, got \{'max_len': 3\}"),
    ]
    for make, error, match in cases:
        with pytest.raises(error, match=match):
            make()


def test_additive_scores_are_bounded_by_v_a():
    """Score-functions page, exercise 2: |v_a^T tanh(x)| <= ||v_a||_1 whatever the inputs."""
    torch.manual_seed(9)
    att = AdditiveAttention(8, 8, 6)
    scores = att.scores(1e4 * torch.randn(2, 5, 8), 1e4 * torch.randn(2, 7, 8))
    bound = att.v_a.weight.abs().sum()
    assert bool((scores.abs() <= bound + 1e-5).all())
    assert scores.abs().max() > 0.5 * bound  # saturated tanh: the bound is nearly reached


def test_attention_errors_for_dtypes_devices_and_projected_keys():
    torch.manual_seed(0)
    attn = AdditiveAttention(4, 6, 5)
    query, keys = torch.randn(2, 1, 4), torch.randn(2, 3, 6)
    cases = [
        ((query.long(), keys), {}, TypeError, r"query must have dtype torch.float32 on cpu, got torch.int64"),
        ((query, keys.to("meta")), {}, TypeError, r"keys must have dtype .* on cpu, got .* on meta"),
        ((query, keys), {"key_mask": torch.ones(2, 3, dtype=torch.bool, device="meta")}, TypeError,
         r"key_mask must have dtype .* on cpu, got .* on meta"),
        ((query, keys), {"projected_keys": [1.0]}, ValueError, r"projected_keys must have shape \(2, 3, 5\), got list"),
        ((query, keys), {"projected_keys": torch.randn(2, 3, 4)}, ValueError,
         r"projected_keys must have shape \(2, 3, 5\), got \(2, 3, 4\)"),
        ((query, keys), {"projected_keys": torch.randn(2, 3, 5, dtype=torch.float64)}, TypeError,
         r"projected_keys must have dtype torch.float32 on cpu, got torch.float64"),
    ]
    for args, kwargs, error, match in cases:
        with pytest.raises(error, match=match):
            attn(*args, **kwargs)


def test_model_and_training_errors():
    torch.manual_seed(0)
    model = BahdanauSeq2Seq(13, 13, emb_dim=4, hidden_size=4, attn_dim=4)
    src = torch.tensor([[3, 4, 5], [6, 7, 0]])
    mask = src != PAD
    tgt = torch.tensor([[BOS, 5], [BOS, 6]])
    cases = [
        (lambda: BahdanauEncoder(13, 4, 0), ValueError, r"hidden_size must be an int >= 1, got \{'hidden_size': 0\}"),
        (lambda: BahdanauSeq2Seq(13, 2.5), ValueError, r"tgt_vocab must be an int >= 1, got \{'tgt_vocab': 2.5\}"),
        (lambda: model.encoder(src.float(), mask), TypeError, r"src must have dtype \(torch.int64, torch.int32\) on cpu, got torch.float32"),
        (lambda: model.encoder(src[0], mask[0]), ValueError, r"src must have shape \(None, None\), got \(3,\)"),
        (lambda: model.encoder(src.to("meta"), mask), TypeError, r"src must have dtype .* on cpu, got .* on meta"),
                (lambda: model(src, tgt, src_mask=mask.long()), TypeError, r"src_mask must have dtype \(torch.bool,\) on cpu, got torch.int64"),
        (lambda: model(src, tgt, src_mask=mask[:, :2]), ValueError,
         r"src_mask must have shape \(2, 3\), got \(2, 2\)"),
        (lambda: model(src, tgt, src_mask=~mask), ValueError, r"src_mask must be right-padded, got \[\[0, 0, 0\], \[0, 0, 1\]\]"),
        (lambda: model(src, tgt, src_mask=torch.tensor([[True, False, True], [True, True, False]])), ValueError,
         r"src_mask must be right-padded, got \[\[1, 0, 1\], \[1, 1, 0\]\]"),
        (lambda: model(src, tgt[:1]), ValueError, r"tgt_in must have shape \(2, None\), got \(1, 2\)"),
        (lambda: model(src, tgt + 20), ValueError, r"tgt_in must lie in \[0, 13\), got \[21, 25, 26\]"),
        (lambda: model.greedy_decode(src, -1), ValueError, r"max_len must be an int >= 0, got \{'max_len': -1\}"),
        (lambda: reversal_batch(0, 1, 3, random.Random(0)), ValueError, r"batch_size must be an int >= 1, got \{'batch_size': 0\}"),
        (lambda: train_toy_translation(model, lr=0.0), ValueError, r"lr must be a finite float > 0, got 0.0"),
        (lambda: train_toy_translation(model, seed=None), ValueError, r"seed must be an int >= 0, got \{'seed': None\}"),
        (lambda: accuracy_by_length(model, 3), TypeError, r"'int' object is not iterable"),
        (lambda: accuracy_by_length(model, [2, 0]), ValueError, r"lengths\[1\] must be an int >= 1, got \{'lengths\[1\]': 0\}"),
    ]
    for make, error, match in cases:
        with pytest.raises(error, match=match):
            make()
