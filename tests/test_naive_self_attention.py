"""Tests for snippets/attention/naive_self_attention.py.

Oracles: F.scaled_dot_product_attention with q = k = v = X and scale=1, and
softmax(X X^T) X written out row by row here. Properties: rows sum to 1,
permutation equivariance (order-blindness), finite outputs in low precision,
gradcheck in float64.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from snippets.attention.naive_self_attention import NaiveSelfAttention, naive_self_attention
from tolerance import assert_within_baseline


def _x(b=2, n=5, d=4, dtype=torch.float32, seed=0):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    return torch.randn(b, n, d, generator=g, dtype=dtype)


def test_matches_sdpa_with_unit_scale():
    x = _x()
    out, _ = naive_self_attention(x)
    assert_close(out, F.scaled_dot_product_attention(x, x, x, scale=1.0))


def test_matches_equation_row_by_row():
    x = _x(b=1, n=4, d=3)
    out, weights = naive_self_attention(x)
    for i in range(4):
        s = torch.stack([x[0, i].dot(x[0, j]) for j in range(4)])  # similarity of token i to each token
        a = s.exp() / s.exp().sum()
        assert_close(weights[0, i], a)
        assert_close(out[0, i], (a[:, None] * x[0]).sum(0))


def test_rows_sum_to_one_and_shapes():
    x = _x(b=3, n=6, d=2)
    out, weights = NaiveSelfAttention()(x)
    assert out.shape == (3, 6, 2) and weights.shape == (3, 6, 6)
    assert_close(weights.sum(-1), torch.ones(3, 6))


def test_no_parameters():
    assert list(NaiveSelfAttention().parameters()) == []


def test_permutation_equivariant():
    # Shuffle the tokens and the output is shuffled the same way: nothing in
    # softmax(X X^T) X knows where a token stands.
    x = _x(b=2, n=7, d=4)
    perm = torch.randperm(7, generator=torch.Generator(device=torch.get_default_device()).manual_seed(1))
    out, weights = naive_self_attention(x)
    out_p, weights_p = naive_self_attention(x[:, perm])
    assert_close(out_p, out[:, perm])
    assert_close(weights_p, weights[:, perm][:, :, perm])


def test_exercise_a_token_need_not_attend_most_to_itself():
    # Exercise solution: a longer vector in the same direction wins the dot product.
    x = torch.tensor([[[1.0, 0.0], [3.0, 0.0]]])
    _, weights = naive_self_attention(x)
    assert weights[0, 0, 1] > weights[0, 0, 0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_finite_for_large_inputs(dtype):
    # float16 holds at most 65504; these scores reach ~1e5 and would overflow
    # if the scores were formed in float16.
    x = (_x(n=6, d=8) * 100).to(dtype)
    out, weights = naive_self_attention(x)
    assert out.dtype == dtype
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    ref, _ = naive_self_attention(x.double())
    assert_close(out.double(), ref, atol=0.5, rtol=2e-2)
    # PyTorch's SDPA in the same dtype with scale 1 (no 1/sqrt(d) here);
    # one ulp of slack for near one-hot rows, where both may be exact.
    baseline = F.scaled_dot_product_attention(x, x, x, scale=1.0)
    ratio = assert_within_baseline(out, baseline, ref, slack=1.0)
    print(f"naive {dtype}: ratio {ratio:.3g}")


def test_gradcheck_float64():
    x = _x(b=1, n=3, d=2, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: naive_self_attention(t)[0], (x,))


def test_errors():
    with pytest.raises(TypeError, match=r"x must be a float \(B, N, D\) tensor, batch first, got <class 'list'>"):
        naive_self_attention([[1.0]])
    with pytest.raises(TypeError, match=r"x must be a float \(B, N, D\) tensor, .* got \(\(1, 2, 3\), torch.int64\)"):
        naive_self_attention(torch.ones(1, 2, 3, dtype=torch.long))
    with pytest.raises(TypeError, match=r"x must be a float \(B, N, D\) tensor, .* got \(\(2, 3\), torch.float32\)"):
        naive_self_attention(torch.ones(2, 3))


def test_exercise_scaled_version_is_sdpa_default():
    # softmax(X X^T / sqrt(D)) X is what F.scaled_dot_product_attention(x, x, x) computes.
    x = _x(d=6)
    scores = x @ x.transpose(-2, -1) / 6**0.5
    assert_close(F.scaled_dot_product_attention(x, x, x), torch.softmax(scores, -1) @ x)
    assert not torch.allclose(F.scaled_dot_product_attention(x, x, x), naive_self_attention(x)[0])
