"""Softmax that forgets: FoX's forget gate and stick-breaking attention, each
against its definition written out independently, and each reduced to
something the guide already proves."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F

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
    with pytest.raises(ValueError, match=r"log_f must be <= 0 \(gates in \(0, 1\]\)"):
        S.forgetting_attention(q, k, v, torch.ones(2, 2, 7, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"log_f must be a floating \(B, H, N\) tensor, \(2, 2, 7\) on "):
        S.forgetting_attention(q, k, v, torch.zeros(2, 2, 6, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"q and k must be \(B, H, N, d\)"):
        S.stick_breaking_attention(q, k[..., :5, :], v)
    with pytest.raises(ValueError, match=r"v must be a floating .* of q's dtype and device, got torch.float32"):
        S.stick_breaking_attention(q, k, v.float())


def test_exercise_gate_for_a_slope():
    assert math.isclose(-math.log(math.exp(-0.5)), 0.5)
    a = S.stick_breaking_weights(torch.zeros(1, 1, 6, 6, dtype=torch.float64))  # beta = 1/2
    assert math.isclose(float(a[0, 0, 5, 2]), 1 / 8)
