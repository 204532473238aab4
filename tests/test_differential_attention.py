"""Differential attention against transformers' DiffLlamaAttention and its off switch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from snippets.modern import differential_attention as DA
from identities.differential import diffllama_pair
from transformers_support import skip_module_without_transformers

skip_module_without_transformers()


def _heads(b=2, h=2, n=6, d=4):
    return tuple(torch.randn(b, h, n, d, dtype=torch.float64) for _ in range(4)) + (
        torch.randn(b, h, n, 2 * d, dtype=torch.float64),)


def test_equals_transformers_diffllama():
    torch.manual_seed(0)
    ours, theirs = diffllama_pair()
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    identity_rope = (torch.ones(2, 7, ours.d_head, dtype=torch.float64),
                     torch.zeros(2, 7, ours.d_head, dtype=torch.float64))
    with torch.no_grad():
        expected, _ = theirs(x, identity_rope, attention_mask=None)
        # transformers sums lambda's dot products in float32 (dtype=torch.float32), so
        # its lambda carries float32 rounding: about 1e-8 here, everything else float64
        torch.testing.assert_close(ours(x), expected, rtol=0, atol=1e-6)



def test_lambda_zero_is_attention_on_half_width_heads():
    torch.manual_seed(1)
    q1, k1, q2, k2, v = _heads()
    torch.testing.assert_close(DA.differential_attention(q1, k1, q2, k2, v, 0.0),
                               F.scaled_dot_product_attention(q1, k1, v, is_causal=True), rtol=0, atol=1e-12)


@pytest.mark.parametrize("lam", [0.2, 0.8, -0.3])
def test_rows_of_the_difference_sum_to_one_minus_lambda(lam):
    torch.manual_seed(2)
    q1, k1, q2, k2, _ = _heads()
    ones = torch.ones(2, 2, 6, 8, dtype=torch.float64)
    out = DA.differential_attention(q1, k1, q2, k2, ones, lam)
    torch.testing.assert_close(out, torch.full_like(out, 1 - lam), rtol=0, atol=1e-12)


def test_equal_maps_cancel_to_one_minus_lambda_times_attention():
    torch.manual_seed(3)
    q1, k1, _, _, v = _heads()
    out = DA.differential_attention(q1, k1, q1, k1, v, 0.8)
    torch.testing.assert_close(out, 0.2 * F.scaled_dot_product_attention(q1, k1, v, is_causal=True),
                               rtol=0, atol=1e-12)


def test_causal_and_gradients():
    torch.manual_seed(4)
    module = DA.DifferentialAttention(16, 2).double()
    x = torch.randn(1, 6, 16, dtype=torch.float64)
    x2 = x.clone()
    x2[:, 4:] += 1
    torch.testing.assert_close(module(x2)[:, :4], module(x)[:, :4], rtol=0, atol=1e-12)
    small = DA.DifferentialAttention(8, 1).double()
    assert torch.autograd.gradcheck(small, (torch.randn(1, 4, 8, dtype=torch.float64, requires_grad=True),))


def test_lambda_init_schedule():
    assert DA.lambda_init_for_layer(0) == pytest.approx(0.2)
    assert DA.lambda_init_for_layer(100) == pytest.approx(0.8)


def test_named_errors():
    with pytest.raises(ValueError, match=r"d_model must be a multiple of 2 \* n_heads = 3 .*got d_model=16"):
        DA.DifferentialAttention(16, 3)
    with pytest.raises(ValueError, match=r"x must be \(B, N, D\) with D = 16"):
        DA.DifferentialAttention(16, 2)(torch.randn(1, 3, 8))
    q1, k1, q2, k2, v = _heads()
    with pytest.raises(ValueError, match=r"k1 must be a float \(B, H, N, d\) tensor like q1 .*got torch.float64 \(2, 2, 3, 4\)"):
        DA.differential_attention(q1, k1[..., :3, :], q2, k2, v, 0.5)
