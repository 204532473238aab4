"""Tests for snippets/history/luong_attention.py (Luong, Pham and Manning 2015, arXiv:1508.04025).

The oracle is the paper's equations (5) to (10) written out here, one query and
one source position at a time.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from snippets.history.luong_attention import SCORES, LuongAttention

ROOT = Path(__file__).resolve().parents[1]
SNIPPET = ROOT / "snippets" / "history" / "luong_attention.py"


def _score(att: LuongAttention, h_t, hs):
    if att.score == "dot":
        return torch.dot(h_t, hs)  # h_t^T hs
    if att.score == "general":
        return torch.dot(h_t, att.w_a.weight @ hs)  # h_t^T W_a hs
    return torch.dot(att.v_a.weight[0], torch.tanh(att.w_a.weight @ torch.cat([h_t, hs])))  # concat


def _loop(att: LuongAttention, query, keys, key_mask=None):
    b, n, d = query.shape
    m = keys.shape[1]
    weights = torch.zeros(b, n, m, dtype=query.dtype)
    h_tilde = torch.zeros(b, n, d, dtype=query.dtype)
    for bi in range(b):
        real = [s for s in range(m) if key_mask is None or bool(key_mask[bi, s])]
        for t in range(n):
            h_t = query[bi, t]
            if att.window is None:
                window = real
            else:
                big_s = len(real)
                p_t = big_s * torch.sigmoid(torch.dot(att.v_p.weight[0], torch.tanh(att.w_p.weight @ h_t)))
                window = [s for s in real if abs(s - float(p_t.detach())) <= att.window]
            e = torch.stack([_score(att, h_t, keys[bi, s]) for s in window])
            align = torch.exp(e - e.max()) / torch.exp(e - e.max()).sum()
            for idx, s in enumerate(window):
                a = align[idx]
                if att.window is not None:
                    sigma = att.window / 2
                    a = a * torch.exp(-((s - p_t) ** 2) / (2 * sigma**2))
                weights[bi, t, s] = a
            c_t = sum(weights[bi, t, s] * keys[bi, s] for s in range(m))
            h_tilde[bi, t] = torch.tanh(att.w_c.weight @ torch.cat([c_t, h_t]))
    return h_tilde, weights


def _prefix_mask(lengths, m):
    return torch.arange(m) < torch.tensor(lengths).unsqueeze(-1)


@pytest.mark.parametrize("window", [None, 1, 2])
@pytest.mark.parametrize("score", SCORES)
def test_matches_paper_equations_with_loops(score, window):
    torch.manual_seed(0)
    att = LuongAttention(4, score, window=window).double()
    query, keys = torch.randn(2, 3, 4).double(), torch.randn(2, 6, 4).double()
    key_mask = _prefix_mask([6, 4], 6)
    h_tilde, weights = att(query, keys, key_mask=key_mask)
    want_h, want_w = _loop(att, query, keys, key_mask)
    assert_close(weights, want_w)
    assert_close(h_tilde, want_h)


@pytest.mark.parametrize("score", SCORES)
def test_global_rows_sum_to_one_and_padding_gets_zero(score):
    torch.manual_seed(1)
    att = LuongAttention(4, score)
    key_mask = _prefix_mask([5, 2], 5)
    _, weights = att(torch.randn(2, 3, 4), torch.randn(2, 5, 4), key_mask=key_mask)
    assert_close(weights.sum(-1), torch.ones(2, 3))
    assert bool((weights[~key_mask.unsqueeze(1).expand_as(weights)] == 0).all())


def test_local_p_is_a_window_times_a_gaussian():
    torch.manual_seed(2)
    att = LuongAttention(4, "general", window=2)
    query, keys = torch.randn(2, 5, 4), torch.randn(2, 9, 4)
    key_mask = _prefix_mask([9, 6], 9)
    _, weights = att(query, keys, key_mask=key_mask)
    p = att.predict_position(query, key_mask.sum(-1))  # (B, N, 1)
    assert bool(((p >= 0) & (p <= key_mask.sum(-1).view(-1, 1, 1))).all())
    outside = (torch.arange(9) - p).abs() > 2
    assert bool((weights[outside] == 0).all())
    assert bool((weights[~key_mask.unsqueeze(1).expand_as(weights)] == 0).all())
    assert bool((weights.sum(-1) <= 1 + 1e-6).all()) and bool((weights.sum(-1) > 0).all())
    # gradients reach v_p through the Gaussian: the predicted position is learned
    weights.sum().backward()
    assert att.v_p.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("window", [None, 2])
def test_padded_keys_never_change_real_outputs(window):
    torch.manual_seed(3)
    att = LuongAttention(4, "concat", window=window)
    query, keys = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    key_mask = _prefix_mask([3, 5], 5)
    changed = keys.clone()
    changed[~key_mask] = 1e3 * torch.randn(int((~key_mask).sum()), 4)
    assert_close(att(query, changed, key_mask=key_mask), att(query, keys, key_mask=key_mask))


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("window", [None, 2])
@pytest.mark.parametrize("score", SCORES)
def test_padded_keys_stay_out_at_huge_scores(score, window, sign):
    # Scores of about +-1e9 and beyond in float32: inputs of 1e5 for dot and
    # general, v_a times 1e10 for concat. Flipping the sign of the query (dot,
    # general) or of v_a (concat) flips every score, so in one of the two runs
    # the only real source position of sentence 0 scores far below zero. The
    # padded positions, which are also the values, are then made huge. With
    # -inf masking their weights stay exactly 0 and nothing moves; a finite fill
    # (-1e4, even -1e9) would hand sentence 0 to the padding.
    torch.manual_seed(4)
    att = LuongAttention(4, score, window=window)
    query, keys = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    if score == "concat":
        with torch.no_grad():
            att.v_a.weight.mul_(sign * 1e10)
    else:
        query, keys = sign * 1e5 * query, 1e5 * keys
    key_mask = _prefix_mask([1, 3], 5)
    h_tilde, weights = att(query, keys, key_mask=key_mask)
    padded = torch.where(key_mask[..., None], keys, 1e6 * torch.randn(2, 5, 4))
    moved, moved_weights = att(query, padded, key_mask=key_mask)
    assert torch.isfinite(h_tilde).all() and torch.isfinite(weights).all()
    assert_close(moved, h_tilde, rtol=1e-5, atol=1e-5)
    assert torch.equal(moved_weights, weights)
    assert (weights[~key_mask.unsqueeze(1).expand(2, 3, 5)] == 0).all()
    assert (weights[0, :, 1:] == 0).all()


def test_fully_masked_row_returns_zero_context():
    att = LuongAttention(4, "dot")
    key_mask = torch.tensor([[False, False, False], [True, True, False]])
    query, keys = torch.randn(2, 1, 4), torch.randn(2, 3, 4)
    h_tilde, weights = att(query, keys, key_mask=key_mask)
    assert torch.isfinite(h_tilde).all()
    assert_close(weights[0], torch.zeros(1, 3))
    assert_close(h_tilde[0], torch.tanh(att.w_c(torch.cat([torch.zeros(1, 4), query[0]], -1))))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("score", SCORES)
def test_finite_for_large_inputs(score, dtype):
    torch.manual_seed(4)
    att = LuongAttention(4, score, window=2).to(dtype)
    query, keys = (300 * torch.randn(2, 3, 4)).to(dtype), (300 * torch.randn(2, 5, 4)).to(dtype)
    h_tilde, weights = att(query, keys, key_mask=_prefix_mask([5, 3], 5))
    assert torch.isfinite(h_tilde).all() and torch.isfinite(weights).all()


@pytest.mark.parametrize("window", [None, 2])
@pytest.mark.parametrize("score", ["dot", "general"])
def test_float16_beyond_its_range_matches_float64(score, window):
    # States of 300 in width 4: h_t . hs reaches ~3e5, past float16's 65504, so
    # the dot products must be taken in float32. Reference: the same float16
    # weights and inputs run in float64.
    torch.manual_seed(4)
    att = LuongAttention(4, score, window=window).half()
    query, keys = (300 * torch.randn(2, 3, 4)).half(), (300 * torch.randn(2, 5, 4)).half()
    key_mask = _prefix_mask([5, 3], 5)
    h_tilde, weights = att(query, keys, key_mask=key_mask)
    exact = att.double()  # the float16 weights, now held in float64 (exactly)
    assert exact.scores(query.double(), keys.double()).abs().max() > 65504
    want_h, want_w = exact(query.double(), keys.double(), key_mask=key_mask)
    assert torch.isfinite(h_tilde).all() and torch.isfinite(weights).all()
    assert_close(weights.double(), want_w, rtol=0, atol=1e-2)
    assert_close(h_tilde.double(), want_h, rtol=0, atol=1e-2)


@pytest.mark.parametrize("window", [None, 2])
@pytest.mark.parametrize("score", SCORES)
def test_gradcheck_float64(score, window):
    torch.manual_seed(5)
    att = LuongAttention(2, score, window=window).double()
    query = torch.randn(2, 2, 2, dtype=torch.float64, requires_grad=True)
    keys = torch.randn(2, 4, 2, dtype=torch.float64, requires_grad=True)
    key_mask = _prefix_mask([4, 3], 4)
    assert torch.autograd.gradcheck(lambda q, k: att(q, k, key_mask=key_mask), (query, keys))


def test_validation_messages():
    with pytest.raises(ValueError, match=r"d_model must be an int >= 1, got \{'d_model': 0\}"):
        LuongAttention(0)
    with pytest.raises(ValueError, match=r"score must be one of dot, general, concat, got 'cosine'"):
        LuongAttention(4, "cosine")
    with pytest.raises(ValueError, match=r"window must be an int >= 1, got \{'window': 0\}"):
        LuongAttention(4, window=0)
    att = LuongAttention(4)
    q, k = torch.randn(2, 1, 4), torch.randn(2, 3, 4)
    with pytest.raises(ValueError, match=r"query must have shape \(None, None, 4\), got \(1, 4\)"):
        att(torch.randn(1, 4), k)
    with pytest.raises(ValueError, match=r"keys must have shape \(2, None, 4\), got str"):
        att(q, "keys")
    with pytest.raises(ValueError, match=r"keys must have shape \(2, None, 4\), got \(2, 3, 5\)"):
        att(q, torch.randn(2, 3, 5))
    with pytest.raises(ValueError, match=r"keys must have shape \(2, None, 4\), got \(1, 3, 4\)"):
        att(q, torch.randn(1, 3, 4))
    with pytest.raises(ValueError, match=r"key_mask must have shape \(2, 3\), got list"):
        att(q, k, key_mask=[True])
    with pytest.raises(TypeError, match=r"key_mask must have dtype \(torch.bool,\) on cpu, got torch.float32"):
        att(q, k, key_mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"key_mask must have shape \(2, 3\), got \(3,\)"):
        att(q, k, key_mask=torch.ones(3, dtype=torch.bool))


def _section(path: Path, name: str) -> str:
    text = path.read_text()
    found = re.search(rf"# --8<-- \[start:{name}\]\n(.*?)# --8<-- \[end:{name}\]", text, re.S)
    assert found, f"{path.name} has no section {name}"
    return found.group(1)


def test_repeated_helpers_are_identical():
    """Both files carry the same tensor checks and the canonical masked softmax."""
    additive = ROOT / "snippets" / "history" / "additive_attention.py"
    for name in ("tensor_checks", "masked_softmax"):
        assert _section(SNIPPET, name) == _section(additive, name)




def test_general_with_identity_is_dot():
    """Exercise 1 of the page: h_t^T I hs = h_t^T hs."""
    torch.manual_seed(6)
    general, dot = LuongAttention(4, "general"), LuongAttention(4, "dot")
    with torch.no_grad():
        general.w_a.weight.copy_(torch.eye(4))
        dot.w_c.weight.copy_(general.w_c.weight)
    query, keys = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    assert_close(general(query, keys), dot(query, keys))


def test_gaussian_at_window_edge_is_exp_minus_two():
    """Exercise 2 of the page: at |s - p_t| = R the Gaussian keeps exp(-2) of the softmax weight."""
    for window in (1, 4, 10):
        att = LuongAttention(2, "dot", window=window)
        torch.nn.init.zeros_(att.v_p.weight)  # sigmoid(0) = 1/2, so p_t = S / 2
        big_s = 2 * window + 4
        query, keys = torch.zeros(1, 1, 2), torch.zeros(1, big_s, 2)  # equal scores: a flat softmax
        _, weights = att(query, keys)
        p_t = big_s // 2
        in_window = 2 * window + 1
        assert_close(weights[0, 0, p_t + window], torch.tensor(math.exp(-2) / in_window))
        assert_close(weights[0, 0, p_t], torch.tensor(1 / in_window))
        assert weights[0, 0, p_t + window + 1] == 0


def test_dot_score_variance_is_d_sigma_to_the_fourth():
    """Score-functions page, exercise 1: Var(q.k) = d sigma^4, so 1/(sigma^2 sqrt(d)) restores 1."""
    gen = torch.Generator(device=torch.get_default_device()).manual_seed(7)
    att = LuongAttention(64, "dot")
    for sigma in (1.0, 2.0):
        q = sigma * torch.randn(1, 400, 64, generator=gen)
        k = sigma * torch.randn(1, 100, 64, generator=gen)
        scores = att.scores(q, k)
        assert scores.var().item() == pytest.approx(64 * sigma**4, rel=0.1)
        assert (scores / (sigma**2 * 8)).var().item() == pytest.approx(1.0, rel=0.1)


@pytest.mark.parametrize("score", SCORES)
def test_errors_for_dtypes_and_devices(score):
    torch.manual_seed(0)
    m = LuongAttention(4, score, window=1)
    query, keys = torch.randn(2, 1, 4), torch.randn(2, 3, 4)
    with pytest.raises(TypeError, match=r"query must have dtype torch.float32 on cpu, got torch.int64"):
        m(query.long(), keys)
    with pytest.raises(TypeError, match=r"keys must have dtype torch.float32 on cpu, got torch.float64"):
        m(query, keys.double())
    with pytest.raises(TypeError, match=r"keys must have dtype .* on cpu, got .* on meta"):
        m(query, keys.to("meta"))
    with pytest.raises(TypeError, match=r"key_mask must have dtype .* on cpu, got .* on meta"):
        m(query, keys, key_mask=torch.ones(2, 3, dtype=torch.bool, device="meta"))
