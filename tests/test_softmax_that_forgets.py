"""Softmax that forgets: FoX's forget gate and stick-breaking attention, each
against its definition written out independently, and each reduced to
something the guide already proves."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F

from identities.forgetting import fla_chunked_path
from snippets.linear import softmax_that_forgets as S


def _heads(b=2, h=2, n=7, d=8, dtype=torch.float64):
    return tuple(torch.randn(b, h, n, d, dtype=dtype) for _ in range(3))


def _log_gates(b=2, h=2, n=7, dtype=torch.float64):
    return F.logsigmoid(torch.randn(b, h, n, dtype=dtype) + 2)


def fox_by_products(q, k, v, log_f):
    """FoX's equation with explicit gate products: w_ij ~ exp(q_i k_j / sqrt(d)) prod f_l."""
    n, d = q.shape[-2], q.shape[-1]
    f = log_f.exp()
    out = torch.zeros_like(v)
    for i in range(n):
        num = []
        for j in range(i + 1):
            gates = torch.ones_like(f[..., 0])
            for l in range(j + 1, i + 1):
                gates = gates * f[..., l]
            num.append(torch.exp((q[..., i, :] * k[..., j, :]).sum(-1) / math.sqrt(d)) * gates)
        w = torch.stack(num, -1)
        w = w / w.sum(-1, keepdim=True)
        out[..., i, :] = (w.unsqueeze(-1) * v[..., : i + 1, :]).sum(-2)
    return out


def stick_by_definition(scores):
    """A_ij = beta_ij prod_{j<k<i} (1 - beta_ik) for j < i, one entry at a time."""
    beta = torch.sigmoid(scores)
    n = scores.shape[-1]
    a = torch.zeros_like(scores)
    for i in range(n):
        for j in range(i):
            w = beta[..., i, j]
            for k in range(j + 1, i):
                w = w * (1 - beta[..., i, k])
            a[..., i, j] = w
    return a


def test_fox_equals_the_product_of_gates(device):
    torch.manual_seed(0)
    q, k, v = _heads()
    log_f = _log_gates()
    torch.testing.assert_close(S.forgetting_attention(q, k, v, log_f), fox_by_products(q, k, v, log_f),
                               rtol=0, atol=1e-12)


def test_gates_of_one_are_causal_softmax(device):
    torch.manual_seed(1)
    q, k, v = _heads()
    zero = torch.zeros(2, 2, 7, dtype=torch.float64)
    torch.testing.assert_close(S.forgetting_attention(q, k, v, zero),
                               F.scaled_dot_product_attention(q, k, v, is_causal=True), rtol=0, atol=1e-12)


@pytest.mark.parametrize("a", [0.5, 0.9, 0.99])
def test_a_constant_gate_is_alibi(device, a):
    """ALiBi adds -m (i - j); a constant gate a gives (i - j) log a: slope m = -log a."""
    torch.manual_seed(2)
    q, k, v = _heads()
    n = 7
    i, j = torch.arange(n)[:, None], torch.arange(n)
    m = -math.log(a)
    alibi = ((i - j).double() * -m).masked_fill(j > i, float("-inf"))
    log_f = torch.full((2, 2, n), math.log(a), dtype=torch.float64)
    torch.testing.assert_close(S.forgetting_attention(q, k, v, log_f),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=alibi), rtol=0, atol=1e-12)


def test_fox_as_a_flex_score_mod(device):
    if device != "cpu":
        pytest.skip("eager flex_attention is the CPU path; GPUs run the compiled kernel")
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    torch.manual_seed(3)
    q, k, v = _heads(dtype=torch.float32)
    log_f = _log_gates(dtype=torch.float32)
    block = create_block_mask(lambda b, h, i, j: j <= i, None, None, 7, 7, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # eager flex on the CPU, on purpose
        out = flex_attention(q, k, v, score_mod=S.fox_score_mod(log_f), block_mask=block)
    torch.testing.assert_close(out, S.forgetting_attention(q, k, v, log_f), rtol=1e-5, atol=1e-5)


def test_fox_is_causal(device):
    torch.manual_seed(4)
    q, k, v = _heads()
    log_f = _log_gates()
    out = S.forgetting_attention(q, k, v, log_f)
    k2, v2 = k.clone(), v.clone()
    k2[..., 4:, :] += 5
    v2[..., 4:, :] -= 3
    log_f2 = log_f.clone()
    log_f2[..., 4:] -= 1
    torch.testing.assert_close(S.forgetting_attention(q, k2, v2, log_f2)[..., :4, :], out[..., :4, :],
                               rtol=0, atol=1e-12)


def test_stick_breaking_log_space_equals_the_definition(device):
    torch.manual_seed(5)
    scores = torch.randn(2, 3, 6, 6, dtype=torch.float64) * 3
    torch.testing.assert_close(S.stick_breaking_weights(scores), stick_by_definition(scores), rtol=0, atol=1e-12)


def test_stick_breaking_rows_sum_to_at_most_one_and_the_rest_is_named(device):
    torch.manual_seed(6)
    q, k, v = _heads()
    out, rem = S.stick_breaking_attention(q, k, v, remainder_to_self=False)
    a = S.stick_breaking_weights(q @ k.transpose(-1, -2) / math.sqrt(8))
    assert (a.sum(-1) <= 1 + 1e-12).all() and (a >= 0).all()
    torch.testing.assert_close(rem[..., 0], 1 - a.sum(-1), rtol=0, atol=1e-12)
    assert torch.equal(rem[..., 0, 0], torch.ones_like(rem[..., 0, 0])), "the first token has no key"
    full, _ = S.stick_breaking_attention(q, k, v)
    torch.testing.assert_close(full, out + rem * v, rtol=0, atol=1e-12)
    torch.testing.assert_close(full[..., 0, :], v[..., 0, :], rtol=0, atol=1e-12)


def test_stick_breaking_is_causal_and_prefers_the_nearest(device):
    torch.manual_seed(7)
    scores = torch.full((1, 1, 5, 5), 4.0, dtype=torch.float64)  # every beta the same
    a = S.stick_breaking_weights(scores)[0, 0, 4]  # query 4 over keys 0..3
    assert (a[:4].diff() > 0).all(), "equal scores: the nearest key gets the most"
    q, k, v = _heads()
    out, _ = S.stick_breaking_attention(q, k, v)
    k2 = k.clone()
    k2[..., 5:, :] += 3
    torch.testing.assert_close(S.stick_breaking_attention(q, k2, v)[0][..., :5, :], out[..., :5, :],
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_within_the_reference_error(device, dtype):
    """Long sequences whose cumulative log gates reach the hundreds, and logits past float16."""
    torch.manual_seed(8)
    n = 256
    q, k, v = _heads(1, 2, n, 16)
    q = q * 4
    log_f = F.logsigmoid(torch.randn(1, 2, n, dtype=torch.float64) - 0.5)  # sums reach -250
    assert log_f.sum(-1).min() < -100
    q, k, v, log_f = (t.to(dtype).double() for t in (q, k, v, log_f))  # rounded inputs
    exact = S.forgetting_attention(q, k, v, log_f)
    low = S.forgetting_attention(q.to(dtype), k.to(dtype), v.to(dtype), log_f.to(dtype)).double()
    ref = F.scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype),
                                         attn_mask=S.forget_gate_bias(log_f).masked_fill(
                                             torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf")
                                         ).to(dtype)).double()
    assert torch.isfinite(low).all()
    assert (low - exact).abs().max() <= 2 * (ref - exact).abs().max() + torch.finfo(dtype).eps
    big = torch.randn(1, 1, 32, 32, dtype=torch.float64) * 2e5  # overflows float16
    sb = S.stick_breaking_weights(big.to(dtype)).double()
    assert torch.isfinite(sb).all()
    assert (sb - S.stick_breaking_weights(big.to(dtype).double())).abs().max() < 1e-3


def test_gradients(device):
    torch.manual_seed(9)
    q, k, v = (t.requires_grad_() for t in _heads(1, 1, 4, 3))
    log_f = _log_gates(1, 1, 4).requires_grad_()
    assert torch.autograd.gradcheck(S.forgetting_attention, (q, k, v, log_f))
    assert torch.autograd.gradcheck(lambda a, b, c: S.stick_breaking_attention(a, b, c)[0], (q, k, v))


def test_named_errors(device):
    q, k, v = _heads()
    with pytest.raises(ValueError, match=r"log_f must lie in \[-inf, 0\], got 1 to 1"):
        S.forgetting_attention(q, k, v, torch.ones(2, 2, 7, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"log_f must be a floating \(B, H, N\) tensor, \(2, 2, 7\) on "):
        S.forgetting_attention(q, k, v, torch.zeros(2, 2, 6, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"k must be a floating \(B, H, N, d\) tensor of q's dtype, device "
                                         r"and sizes, got torch.float64 \(2, 2, 5, 8\)"):
        S.stick_breaking_attention(q, k[..., :5, :], v)
    with pytest.raises(ValueError, match=r"v must be a floating .* of q's dtype, device and sizes, got torch.float32"):
        S.stick_breaking_attention(q, k, v.float())


def test_exercise_gate_for_a_slope():
    assert math.isclose(-math.log(math.exp(-0.5)), 0.5)
    a = S.stick_breaking_weights(torch.zeros(1, 1, 6, 6, dtype=torch.float64))  # beta = 1/2
    assert math.isclose(float(a[0, 0, 5, 2]), 1 / 8)


# ---------------------------------------------------------------------------
# PaTH: keys moved by accumulated Householder-like transitions
# ---------------------------------------------------------------------------


def _path_inputs(b=2, h=2, n=9, d=5, dtype=torch.float64, beta_range=(0.0, 2.0)):
    q, k, v = _heads(b, h, n, d, dtype)
    w = F.normalize(torch.randn(b, h, n, d, dtype=dtype), dim=-1)
    lo, hi = beta_range
    beta = lo + (hi - lo) * torch.rand(b, h, n, dtype=dtype)
    return q, k, v, w, beta


def path_scores_by_products(q, k, w, beta):
    """The paper's score with every matrix built: q_i^T (H_i H_{i-1} ... H_{j+1}) k_j."""
    n, d = q.shape[-2], q.shape[-1]
    scores = torch.full(q.shape[:-2] + (n, n), float("-inf"), dtype=q.dtype)
    for i in range(n):
        for j in range(i + 1):
            p = torch.eye(d, dtype=q.dtype).expand(*q.shape[:-2], d, d)
            for s in range(j + 1, i + 1):  # H_s multiplies on the left: H_i ends leftmost
                ws = w[..., s, :]
                h_s = torch.eye(d, dtype=q.dtype) - beta[..., s, None, None] * ws[..., :, None] * ws[..., None, :]
                p = h_s @ p
            scores[..., i, j] = (q[..., i, None, :] @ p @ k[..., j, :, None])[..., 0, 0]
    return scores


def _lower(scores):
    """The finite (causal) part of a score matrix, zeros above the diagonal."""
    n = scores.shape[-1]
    return scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), 0.0)


def test_path_transition_is_the_paper_matrix(device):
    torch.manual_seed(10)
    _, _, _, w, beta = _path_inputs()
    h = S.householder_transition(w, beta)
    i = 3
    want = torch.eye(5, dtype=torch.float64) - beta[0, 1, i] * torch.outer(w[0, 1, i], w[0, 1, i])
    torch.testing.assert_close(h[0, 1, i], want, rtol=0, atol=1e-15)


def test_path_steps_and_ut_form_equal_the_products(device):
    """Both forms against every matrix product built; the UT form against the steps to 1e-12."""
    torch.manual_seed(11)
    q, k, _, w, beta = _path_inputs()
    want = path_scores_by_products(q, k, w, beta)
    steps, ut = S.path_scores_by_steps(q, k, w, beta), S.path_scores(q, k, w, beta)
    for got in (steps, ut):
        assert torch.equal(got.isinf(), want.isinf()), "-inf exactly above the diagonal"
        torch.testing.assert_close(_lower(got), _lower(want), rtol=0, atol=1e-12)
    torch.testing.assert_close(_lower(ut), _lower(steps), rtol=0, atol=1e-12)


def test_path_attention_is_softmax_of_the_products(device):
    torch.manual_seed(12)
    q, k, v, w, beta = _path_inputs()
    want = torch.softmax(path_scores_by_products(q, k, w, beta) / math.sqrt(5), -1) @ v
    torch.testing.assert_close(S.path_attention(q, k, v, w, beta), want, rtol=0, atol=1e-12)


def test_path_beta_zero_is_nope(device):
    """beta = 0: every H_t = I, no position at all: causal SDPA."""
    torch.manual_seed(13)
    q, k, v, w, _ = _path_inputs()
    zero = torch.zeros(2, 2, 9, dtype=torch.float64)
    torch.testing.assert_close(S.path_attention(q, k, v, w, zero),
                               F.scaled_dot_product_attention(q, k, v, is_causal=True), rtol=0, atol=1e-12)


def _constant_path(beta_value, n=9, d=5):
    q, k, _, w, _ = _path_inputs(n=n, d=d)
    w = w[..., :1, :].expand_as(w)  # one direction for every token
    beta = torch.full(q.shape[:-1], beta_value, dtype=torch.float64)
    return q, k, w, beta


@pytest.mark.parametrize("b", [0.3, 1.0, 1.7, 2.0])
def test_path_constant_transition_closed_form(device, b):
    """H^m = I - (1 - (1 - beta)^m) w w^T for unit w: relative, but no rotation."""
    torch.manual_seed(14)
    q, k, w, beta = _constant_path(b)
    n, u = q.shape[-2], w[..., 0, :]  # (B, H, d)
    i, j = torch.arange(n)[:, None], torch.arange(n)
    decay = 1 - (1 - b) ** (i - j).clamp(min=0).double()  # (N, N)
    qk = q @ k.transpose(-1, -2)
    qw_wk = (q @ u[..., :, None]) @ (u[..., None, :] @ k.transpose(-1, -2))  # (q_i.w)(w.k_j)
    want = _lower(qk - decay * qw_wk)
    torch.testing.assert_close(_lower(S.path_scores(q, k, w, beta)), want, rtol=0, atol=1e-12)


def test_path_constant_transition_is_relative_and_data_dependent_is_not(device):
    """One q and one k at every position: S_ij depends on i - j alone, unless w_t, beta_t vary."""
    torch.manual_seed(15)
    q, k, w, beta = _constant_path(0.6)
    q, k = q[..., :1, :].expand_as(q), k[..., :1, :].expand_as(k)
    s = S.path_scores(q, k, w, beta)
    torch.testing.assert_close(s[..., 1:, 1:], s[..., :-1, :-1], rtol=0, atol=1e-12)
    _, _, _, w2, beta2 = _path_inputs()
    s2 = S.path_scores(q, k, w2, beta2)
    assert (s2[..., 1:, 1:] - s2[..., :-1, :-1]).nan_to_num().abs().max() > 1e-2


def test_path_beta_two_is_a_reflection(device):
    """beta = 2 and unit w: H is symmetric, orthogonal, its own inverse, det -1; w -> -w."""
    torch.manual_seed(16)
    w = F.normalize(torch.randn(6, 5, dtype=torch.float64), dim=-1)
    h = S.householder_transition(w, torch.full((6,), 2.0, dtype=torch.float64))
    eye = torch.eye(5, dtype=torch.float64).expand(6, 5, 5)
    torch.testing.assert_close(h @ h.transpose(-1, -2), eye, rtol=0, atol=1e-14)
    torch.testing.assert_close(h, h.transpose(-1, -2), rtol=0, atol=0)
    torch.testing.assert_close(torch.linalg.det(h), -torch.ones(6, dtype=torch.float64), rtol=0, atol=1e-14)
    torch.testing.assert_close((h @ w[..., None])[..., 0], -w, rtol=0, atol=1e-14)
    # a reflection preserves lengths, so the scores of a whole sequence keep |q| |k| as a bound
    q, k, _, w2, _ = _path_inputs()
    s = _lower(S.path_scores(q, k, w2, torch.full((2, 2, 9), 2.0, dtype=torch.float64)))
    bound = q.norm(dim=-1)[..., :, None] * k.norm(dim=-1)[..., None, :]
    assert (s.abs() <= bound + 1e-12).all()
    h_half = S.householder_transition(w, torch.full((6,), 1.0, dtype=torch.float64))
    assert (torch.linalg.matrix_norm(h_half @ h_half.transpose(-1, -2) - eye) > 0.5).all(), \
        "beta = 1 is a projection, not orthogonal"


@pytest.mark.parametrize("gated", [False, True])
def test_path_matches_fla_chunked_reference(device, gated):
    """fla's algorithm (chunks of 4 over 11 tokens: padding, local and inter-chunk parts)."""
    torch.manual_seed(17)
    q, k, v, w, beta = _path_inputs(n=11, d=6)
    scale = 6 ** -0.5
    g = F.logsigmoid(torch.randn(2, 2, 11, dtype=torch.float64) + 3) if gated else torch.zeros(2, 2, 11,
                                                                                                 dtype=torch.float64)
    want = fla_chunked_path(q, k, v, w, beta, g, scale)
    # fla adds g before the scale; this page's FoX bias comes after it: log_f = g * scale
    got = S.path_attention(q, k, v, w, beta, log_f=g * scale if gated else None, scale=scale)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    if gated:  # the conventions differ: the same g on both sides does not agree
        assert (S.path_attention(q, k, v, w, beta, log_f=g, scale=scale) - want).abs().max() > 1e-3


def test_path_fox_is_fox_when_beta_is_zero(device):
    torch.manual_seed(18)
    q, k, v, w, _ = _path_inputs()
    log_f = _log_gates(n=9)
    zero = torch.zeros(2, 2, 9, dtype=torch.float64)
    torch.testing.assert_close(S.path_attention(q, k, v, w, zero, log_f=log_f),
                               S.forgetting_attention(q, k, v, log_f), rtol=0, atol=1e-12)


def test_path_is_causal(device):
    torch.manual_seed(19)
    q, k, v, w, beta = _path_inputs()
    out = S.path_attention(q, k, v, w, beta)
    k2, v2, w2, beta2 = k.clone(), v.clone(), w.clone(), beta.clone()
    k2[..., 5:, :] += 3
    v2[..., 5:, :] -= 2
    w2[..., 5:, :] = F.normalize(torch.randn(2, 2, 4, 5, dtype=torch.float64), dim=-1)
    beta2[..., 5:] = 2 - beta2[..., 5:]
    torch.testing.assert_close(S.path_attention(q, k2, v2, w2, beta2)[..., :5, :], out[..., :5, :],
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_path_half_precision_within_the_reference_error(device, dtype):
    """Reflections over 256 tokens and logits past what a careless float16 softmax survives."""
    torch.manual_seed(20)
    q, k, v, w, beta = _path_inputs(1, 2, 256, 16, beta_range=(1.5, 2.0))
    q = q * 4
    q, k, v, w, beta = (t.to(dtype).double() for t in (q, k, v, w, beta))  # rounded inputs
    exact = S.path_attention(q, k, v, w, beta)
    low = S.path_attention(*(t.to(dtype) for t in (q, k, v, w, beta)))
    assert low.dtype == dtype and torch.isfinite(low).all()
    ref = F.scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype), is_causal=True).double()
    ref_err = (ref - F.scaled_dot_product_attention(q, k, v, is_causal=True)).abs().max()
    assert (low.double() - exact).abs().max() <= 2 * ref_err + torch.finfo(dtype).eps


def test_path_gradients(device):
    torch.manual_seed(21)
    q, k, v, w, beta = (t.requires_grad_() for t in _path_inputs(1, 1, 5, 3, beta_range=(0.2, 1.8)))
    log_f = _log_gates(1, 1, 5).requires_grad_()
    assert torch.autograd.gradcheck(lambda *t: S.path_attention(*t[:5], log_f=t[5]),
                                    (q, k, v, w, beta, log_f))
    assert torch.autograd.gradcheck(lambda *t: _lower(S.path_scores_by_steps(*t)), (q, k, w, beta))


def test_path_named_errors(device):
    q, k, v, w, beta = _path_inputs()
    with pytest.raises(ValueError, match=r"beta must lie in \[0, 2\], got 0 to 2.5"):
        S.path_attention(q, k, v, w, beta.clamp(max=1.0).index_fill(-1, torch.tensor([0]), 2.5)
                         .index_fill(-1, torch.tensor([1]), 0.0))
    with pytest.raises(ValueError, match=r"beta must be a floating \(B, H, N\) tensor, \(2, 2, 9\) on cpu, "
                                         r"got torch.float64 \(2, 2, 8\)"):
        S.path_attention(q, k, v, w, beta[..., :8])
    with pytest.raises(ValueError, match=r"w must be a floating \(B, H, N, d\) tensor of q's "
                                         r"dtype, device and sizes, got torch.float32"):
        S.path_attention(q, k, v, w.float(), beta)
    with pytest.raises(ValueError, match=r"log_f must lie in \[-inf, 0\], got 1 to 1"):
        S.path_attention(q, k, v, w, beta, log_f=torch.ones(2, 2, 9, dtype=torch.float64))


def test_exercise_constant_reflection():
    """beta = 2 with one w: keys at even distance keep q^T k, odd ones see q^T (I - 2 w w^T) k."""
    q, k, w, beta = _constant_path(2.0)
    s, u = S.path_scores(q, k, w, beta), w[..., 0, :]
    qk = q @ k.transpose(-1, -2)
    reflected = qk - 2 * (q @ u[..., :, None]) @ (u[..., None, :] @ k.transpose(-1, -2))
    torch.testing.assert_close(s[..., 6, 2], qk[..., 6, 2], rtol=0, atol=1e-12)
    torch.testing.assert_close(s[..., 6, 3], reflected[..., 6, 3], rtol=0, atol=1e-12)
