"""Tests for snippets/foundations/masks.py.

Oracles: F.scaled_dot_product_attention (True = may attend), nn.MultiheadAttention
(batch_first=True, True = blocked) with its weights reused in the test, and
masks written out element by element here.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.bias import causal_lower_right
from torch.testing import assert_close

from huge_scores import assert_matches, expected_output, signed_qk
from snippets.foundations.masks import (
    additive_to_bool,
    bool_to_additive,
    causal_mask,
    combine_masks,
    from_mha_mask,
    key_mask_to_attn_mask,
    padding_mask,
    to_mha_mask,
)


def _qkv(b=2, h=2, n=3, m=5, d=4, dtype=torch.float32):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(0)
    return (
        torch.randn(b, h, n, d, generator=g, dtype=dtype),
        torch.randn(b, h, m, d, generator=g, dtype=dtype),
        torch.randn(b, h, m, d, generator=g, dtype=dtype),
    )


# ---- causal ---------------------------------------------------------------

@pytest.mark.parametrize("n,m", [(1, 1), (4, 4), (2, 5), (5, 2), (0, 3)])
def test_causal_mask_elementwise(n, m):
    want = torch.tensor(
        [[j <= i + (m - n) for j in range(m)] for i in range(n)], dtype=torch.bool
    ).reshape(n, m)
    assert torch.equal(causal_mask(n, m), want)


def test_causal_mask_square_is_lower_triangle():
    assert torch.equal(causal_mask(6, 6), torch.ones(6, 6, dtype=torch.bool).tril())


@pytest.mark.parametrize("n,m", [(3, 5), (1, 4), (4, 4)])
def test_causal_mask_matches_torch_lower_right(n, m):
    mask = causal_mask(n, m)
    assert torch.equal(mask, causal_lower_right(n, m)._materialize(device=mask.device))
    q, k, v = _qkv(n=n, m=m)
    assert_close(
        F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(n, m)),
        F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(n, m)),
    )


def test_is_causal_is_upper_left_when_lengths_differ():
    # The pitfall the page warns about: SDPA's is_causal keeps the triangle in
    # the upper-left corner, so a decoding query (N=1 against M cached keys)
    # sees only the first key.
    q, k, v = _qkv(n=1, m=5)
    upper_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert_close(upper_left, v[..., :1, :])
    ours = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(1, 5))
    assert_close(ours, F.scaled_dot_product_attention(q, k, v))  # sees all five
    assert not torch.allclose(upper_left, ours)


def test_causal_mask_errors():
    with pytest.raises(ValueError, match=r"n_queries must be an int >= 0, got -1"):
        causal_mask(-1, 3)
    with pytest.raises(ValueError, match=r"n_keys must be an int >= 0, got 2.0"):
        causal_mask(2, 2.0)


# ---- padding --------------------------------------------------------------

def test_padding_mask_elementwise():
    lengths = torch.tensor([2, 0, 4])
    want = torch.tensor(
        [[j < int(length) for j in range(5)] for length in lengths], dtype=torch.bool
    )
    assert torch.equal(padding_mask(lengths, 5), want)
    assert padding_mask(lengths).shape == (3, 4)  # max_len defaults to the longest


def test_padding_mask_errors():
    with pytest.raises(TypeError, match=r"lengths must be a tensor of \(torch.int64, torch.int32\), rank \(1,\), got list"):
        padding_mask([1, 2])
    with pytest.raises(TypeError, match=r"lengths must be a tensor .* rank \(1,\), got \(\(2, 1\), torch.int64\)"):
        padding_mask(torch.tensor([[1], [2]]))
    with pytest.raises(TypeError, match=r"lengths must be a tensor .* got \(\(2,\), torch.float32\)"):
        padding_mask(torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"max_len must be an int >= the longest length 3, got 2"):
        padding_mask(torch.tensor([1, 3]), 2)


# ---- key mask -> attention mask ---------------------------------------------

def test_key_mask_broadcast_equals_dropping_the_padded_keys():
    q, k, v = _qkv(b=3, n=4, m=6)
    lengths = torch.tensor([6, 2, 4])
    attn_mask = key_mask_to_attn_mask(padding_mask(lengths, 6))
    assert attn_mask.shape == (3, 1, 1, 6)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
    for b, length in enumerate(lengths.tolist()):
        # The oracle: the same sequence with its padding cut off.
        want = F.scaled_dot_product_attention(
            q[b : b + 1], k[b : b + 1, :, :length], v[b : b + 1, :, :length]
        )
        assert_close(out[b : b + 1], want)


def test_combine_masks_causal_and_padding_against_equation():
    q, k, v = _qkv(b=2, n=5, m=5)
    key_mask = padding_mask(torch.tensor([5, 3]), 5)
    mask = combine_masks(causal_mask(5, 5), key_mask)
    assert mask.shape == (2, 1, 5, 5)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    # The equation written out: score -inf unless j <= i and key j is real.
    d = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    for b in range(2):
        for i in range(5):
            for j in range(5):
                if not (j <= i and bool(key_mask[b, j])):
                    scores[b, :, i, j] = float("-inf")
    assert_close(out, torch.softmax(scores, dim=-1) @ v)


def test_combine_masks_passes_single_masks_through():
    cm = causal_mask(3, 3)
    assert combine_masks(cm) is cm
    assert combine_masks() is None
    km = torch.tensor([[True, False, True]])
    assert torch.equal(combine_masks(key_mask=km), km[:, None, None, :])
    three_d = torch.ones(2, 3, 3, dtype=torch.bool)
    assert combine_masks(three_d, km.expand(2, 3)).shape == (2, 1, 3, 3)


def test_fully_masked_rows_give_zeros():
    q, k, v = _qkv(b=2, n=3, m=4)
    mask = combine_masks(causal_mask(3, 4), padding_mask(torch.tensor([4, 0]), 4))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.isfinite(out).all()
    assert_close(out[1], torch.zeros_like(out[1]))
    additive = bool_to_additive(mask)
    assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=additive), out)


def test_key_mask_errors():
    with pytest.raises(TypeError, match=r"key_mask must be a tensor of \(torch.bool,\), rank \(2,\), got \(\(2, 3\), torch.int64\)"):
        key_mask_to_attn_mask(torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(TypeError, match=r"key_mask must be a tensor .* rank \(2,\), got \(\(3,\), torch.bool\)"):
        key_mask_to_attn_mask(torch.ones(3, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"attn_mask must be a tensor of \(torch.bool,\), .* torch.float32\)"):
        combine_masks(torch.zeros(3, 3))
    with pytest.raises(TypeError, match=r"attn_mask must be a tensor of \(torch.bool,\), .* got list"):
        combine_masks([[True]])
    with pytest.raises(TypeError, match=r"attn_mask must be a tensor of .* rank \(2, 3, 4\), got \(\(3,\), torch.bool\)"):
        combine_masks(torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"attn_mask must broadcast with key_mask \(B, M\) = \(2, 4\) on its device, got \(3, 3\) cpu"):
        combine_masks(causal_mask(3, 3), torch.ones(2, 4, dtype=torch.bool))


# ---- boolean <-> additive -------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_bool_to_additive_values_and_sdpa(dtype):
    mask = causal_mask(3, 5)
    additive = bool_to_additive(mask, dtype)
    assert additive.dtype == dtype
    assert torch.equal(additive == 0, mask)
    assert torch.isneginf(additive[~mask]).all()  # -inf, never a finite -1e9
    q, k, v = _qkv(n=3, m=5, dtype=dtype)
    assert_close(
        F.scaled_dot_product_attention(q, k, v, attn_mask=additive),
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
    )


@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_masks_hold_at_huge_scores(kind):
    # Scores of +-3.5e9 in float32 (see tests/huge_scores.py): every blocked key
    # outscores the allowed ones, and in the second sequence only key 0 is real,
    # so its row 0 has one allowed score, -3.5e9. Values are 1e6. A finite fill
    # in place of -inf would let the blocked keys take the rows.
    n = 6
    q, k = signed_qk(n, 8)
    q, k = q.expand(2, 2, n, 8), k.expand(2, 2, n, 8)
    v = 1e6 * torch.randn(2, 2, n, 4, generator=torch.Generator(device=torch.get_default_device()).manual_seed(3))
    mask = combine_masks(causal_mask(n, n), padding_mask(torch.tensor([6, 1]), n))  # (B, 1, N, M)
    attn_mask = mask if kind == "bool" else bool_to_additive(mask)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
    assert_matches(out, expected_output(v, mask))
    assert torch.equal(out[1], v[1, :, :1].expand(2, n, 4))  # the real key, and only it


def test_additive_to_bool_round_trip_and_biases():
    mask = combine_masks(causal_mask(4, 4), padding_mask(torch.tensor([4, 2]), 4))
    assert torch.equal(additive_to_bool(bool_to_additive(mask)), mask)
    biased = torch.tensor([[0.5, float("-inf"), -3.0]])
    assert torch.equal(additive_to_bool(biased), torch.tensor([[True, False, True]]))


def test_additive_errors():
    with pytest.raises(TypeError, match=r"mask must be a tensor of \(torch.bool,\), rank any, got \(\(2, 2\), torch.float32\)"):
        bool_to_additive(torch.zeros(2, 2))
    with pytest.raises(TypeError, match=r"dtype must be a floating dtype, got torch.int32"):
        bool_to_additive(causal_mask(2, 2), torch.int32)
    with pytest.raises(TypeError, match=r"mask must be a tensor of \(torch.float16, .* got \(\(2, 2\), torch.bool\)"):
        additive_to_bool(causal_mask(2, 2))
    with pytest.raises(TypeError, match=r"mask must be a tensor of .* got list"):
        additive_to_bool([0.0])


# ---- nn.MultiheadAttention's polarity ---------------------------------------------

def _mha_by_hand(mha, x, attn_mask):
    """nn.MultiheadAttention's computation written out with SDPA (True = may attend)."""
    b, n, e = x.shape
    h = mha.num_heads
    q, k, v = F.linear(x, mha.in_proj_weight, mha.in_proj_bias).chunk(3, dim=-1)
    q, k, v = (t.reshape(b, n, h, e // h).transpose(1, 2) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
    return mha.out_proj(out.transpose(1, 2).reshape(b, n, e))


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_converted_masks_drive_multihead_attention(kind):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(2, 5, 8)
    attn_mask = causal_mask(5, 5)
    key_mask = padding_mask(torch.tensor([5, 3]), 5)
    if kind == "float":
        attn_mask, key_mask = bool_to_additive(attn_mask), bool_to_additive(key_mask)
    with torch.no_grad():
        got, _ = mha(
            x, x, x,
            attn_mask=to_mha_mask(attn_mask),
            key_padding_mask=to_mha_mask(key_mask),
            need_weights=False,
        )
        want = _mha_by_hand(
            mha, x, combine_masks(causal_mask(5, 5), padding_mask(torch.tensor([5, 3]), 5))
        )
    assert_close(got, want)


def test_unconverted_mask_means_the_opposite_to_multihead_attention():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(1, 4, 8)
    with torch.no_grad():
        wrong, _ = mha(x, x, x, attn_mask=causal_mask(4, 4), need_weights=False)
        right, _ = mha(x, x, x, attn_mask=to_mha_mask(causal_mask(4, 4)), need_weights=False)
        want = _mha_by_hand(mha, x, causal_mask(4, 4))
    assert_close(right, want)
    assert not torch.allclose(wrong, want, atol=1e-3)


def test_from_mha_mask_inverts_to_mha_mask():
    mha_style = torch.tensor([[False, True, True]])  # True = blocked
    assert torch.equal(from_mha_mask(mha_style), torch.tensor([[True, False, False]]))
    mask = causal_mask(3, 4)
    assert torch.equal(from_mha_mask(to_mha_mask(mask)), mask)
    additive = bool_to_additive(mask)
    assert to_mha_mask(additive) is additive


def test_mha_conversion_errors():
    with pytest.raises(TypeError, match=r"mask must be a tensor of \(torch.bool, torch.float16, .* got \(\(2, 2\), torch.int64\)"):
        to_mha_mask(torch.ones(2, 2, dtype=torch.long))
    with pytest.raises(TypeError, match=r"mask must be a tensor of .* got NoneType"):
        from_mha_mask(None)


# ---- exercises on docs/foundations/masks.md -----------------------------------

def test_exercise_mha_key_padding_mask_to_sdpa():
    key_padding_mask = torch.tensor([[False, False, True], [False, True, True]])  # True = padding
    attn_mask = key_mask_to_attn_mask(from_mha_mask(key_padding_mask))
    assert torch.equal(attn_mask[:, 0, 0], torch.tensor([[True, True, False], [True, False, False]]))
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(4, 2, batch_first=True).eval()
    x = torch.randn(2, 3, 4)
    with torch.no_grad():
        got, _ = mha(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        assert_close(got, _mha_by_hand(mha, x, attn_mask))


def test_exercise_two_queries_four_keys():
    want = torch.tensor([[True, True, True, False], [True, True, True, True]])
    assert torch.equal(causal_mask(2, 4), want)
    upper_left = torch.ones(2, 4, dtype=torch.bool).tril()  # what is_causal=True uses
    q, k, v = _qkv(n=2, m=4)
    assert_close(
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
        F.scaled_dot_product_attention(q, k, v, attn_mask=upper_left),
    )


def test_combine_masks_names_batch_and_device_mismatches():
    keys = torch.ones(2, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"attn_mask must broadcast with key_mask \(B, M\) = "
                                         r"\(2, 4\) on its device, got \(3, 1, 3, 4\) cpu"):
        combine_masks(torch.ones(3, 1, 3, 4, dtype=torch.bool), keys)
    with pytest.raises(ValueError, match=r"attn_mask must broadcast with key_mask .* on its device, got \(3, 4\) meta"):
        combine_masks(torch.ones(3, 4, dtype=torch.bool, device="meta"), keys)
    with pytest.raises(TypeError, match=r"dtype must be a floating dtype, got 'float32'"):
        bool_to_additive(keys, "float32")
