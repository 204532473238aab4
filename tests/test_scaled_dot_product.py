"""snippets/foundations/scaled_dot_product.py against PyTorch's SDPA and the equation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right
from torch.testing import assert_close

from huge_scores import assert_matches, expected_output, signed_qk
from snippets.foundations.scaled_dot_product import causal_mask, scaled_dot_product_attention
from tolerance import assert_within_baseline


def qkv(*lead, n=5, m=7, d=8, dv=6, dtype=torch.float64, seed=0):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    q = torch.randn(*lead, n, d, generator=g, dtype=dtype)
    k = torch.randn(*lead, m, d, generator=g, dtype=dtype)
    v = torch.randn(*lead, m, dv, generator=g, dtype=dtype)
    return q, k, v


def equation(q, k, v, allowed=None, scale=None):
    """Equation (1) of Vaswani et al. (2017), one query row at a time, in plain loops."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    n, m = q.shape[0], k.shape[0]
    out = torch.zeros(n, v.shape[-1], dtype=q.dtype)
    for i in range(n):
        keys = [j for j in range(m) if allowed is None or bool(allowed[i, j])]
        if not keys:
            continue
        s = torch.stack([(q[i] * k[j]).sum() * scale for j in keys])
        e = torch.exp(s - s.max())
        for w, j in zip(e / e.sum(), keys):
            out[i] += w * v[j]
    return out


# --------------------------------------------------------------- oracles ----
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lead", [(), (3,), (2, 4), (2, 3, 2)])
def test_matches_torch_without_mask(dtype, lead):
    q, k, v = qkv(*lead, dtype=dtype)
    out, _ = scaled_dot_product_attention(q, k, v)
    assert_close(out, F.scaled_dot_product_attention(q, k, v))


def test_matches_the_equation_written_out():
    q, k, v = qkv(n=4, m=6)
    allowed = torch.rand(4, 6, generator=torch.Generator(device=torch.get_default_device()).manual_seed(1)) > 0.4
    out, _ = scaled_dot_product_attention(q, k, v, allowed)
    assert_close(out, equation(q, k, v, allowed))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_boolean_mask_true_means_attend(dtype):
    q, k, v = qkv(2, 3, dtype=dtype)
    mask = torch.rand(2, 3, 5, 7, generator=torch.Generator(device=torch.get_default_device()).manual_seed(2)) > 0.3
    mask[..., 0] = True  # keep every row non-empty: SDPA's empty rows are checked separately
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


def test_broadcast_mask():
    q, k, v = qkv(2, 3)
    mask = torch.rand(1, 1, 5, 7, generator=torch.Generator(device=torch.get_default_device()).manual_seed(3)) > 0.3
    mask[..., 0] = True
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


def test_float_mask_is_added():
    q, k, v = qkv(2, 3)
    bias = torch.randn(5, 7, dtype=torch.float64)
    bias[0, 2] = float("-inf")
    out, weights = scaled_dot_product_attention(q, k, v, bias)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=bias))
    assert torch.all(weights[..., 0, 2] == 0)


@pytest.mark.parametrize("n, m", [(6, 6), (1, 9), (4, 9)])
def test_causal_is_lower_right(n, m):
    q, k, v = qkv(2, 2, n=n, m=m)
    out, weights = scaled_dot_product_attention(q, k, v, is_causal=True)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(n, m)))
    assert torch.equal(causal_mask(n, m), torch.ones(n, m).tril(diagonal=m - n).bool())
    # The last query is the newest position: it sees every key.
    assert torch.all(weights[..., -1, :] > 0)


def test_causal_equals_torch_is_causal_when_square():
    q, k, v = qkv(3, n=6, m=6)
    out, _ = scaled_dot_product_attention(q, k, v, is_causal=True)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))


@pytest.mark.parametrize("scale", [0.05, 1.0, 3.0])
def test_custom_scale(scale):
    q, k, v = qkv(2)
    out, _ = scaled_dot_product_attention(q, k, v, scale=scale)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=scale))


def test_default_scale_is_one_over_sqrt_d():
    q, k, v = qkv(d=16)
    out, _ = scaled_dot_product_attention(q, k, v)
    assert_close(out, equation(q, k, v, scale=0.25))


def test_key_and_value_widths_may_differ():
    q, k, v = qkv(2, d=8, dv=3)
    out, weights = scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 5, 3) and weights.shape == (2, 5, 7)


# ------------------------------------------------------------ properties ----
def test_weights_rows_sum_to_one_and_follow_the_scores():
    q, k, v = qkv(2, 3)
    _, weights = scaled_dot_product_attention(q, k, v)
    assert_close(weights.sum(-1), torch.ones(2, 3, 5, dtype=torch.float64))
    expected = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8), dim=-1)
    assert_close(weights, expected)


def test_fully_masked_row_gives_zeros_like_torch():
    q, k, v = qkv(2)
    mask = torch.ones(5, 7, dtype=torch.bool)
    mask[1] = False
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.all(out[:, 1] == 0) and torch.all(weights[:, 1] == 0)
    assert not torch.isnan(out).any()
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


def test_fully_masked_row_with_float_mask():
    q, k, v = qkv()
    bias = torch.zeros(5, 7, dtype=torch.float64)
    bias[3] = float("-inf")
    out, weights = scaled_dot_product_attention(q, k, v, bias)
    assert torch.all(out[3] == 0) and torch.all(weights[3] == 0)
    assert torch.isfinite(out).all()


def test_masked_keys_do_not_change_outputs():
    q, k, v = qkv(2)
    mask = torch.ones(5, 7, dtype=torch.bool)
    mask[:, 4:] = False
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    k2, v2 = k.clone(), v.clone()
    k2[:, 4:] += 100.0
    v2[:, 4:] -= 50.0
    out2, _ = scaled_dot_product_attention(q, k2, v2, mask)
    assert_close(out, out2)


def test_causal_output_ignores_future_tokens():
    q, k, v = qkv(2, n=6, m=6)
    out, _ = scaled_dot_product_attention(q, k, v, is_causal=True)
    t = 3
    k2, v2 = k.clone(), v.clone()
    k2[:, t + 1:] = torch.randn_like(k2[:, t + 1:])
    v2[:, t + 1:] = torch.randn_like(v2[:, t + 1:])
    out2, _ = scaled_dot_product_attention(q, k2, v2, is_causal=True)
    assert_close(out[:, : t + 1], out2[:, : t + 1])
    assert not torch.allclose(out[:, t + 1:], out2[:, t + 1:])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_large_logits_stay_finite(dtype):
    # Scores of order 1e4 overflow exp() in every dtype, and the raw products
    # (200 * 200 * 64) overflow float16 itself; the result must stay finite.
    q, k, v = qkv(2, n=4, m=6, d=64, dv=8, dtype=torch.float32)
    q, k, v = (200 * q).to(dtype), (200 * k).to(dtype), v.to(dtype)
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[0] = False
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert out.dtype == dtype and weights.dtype == dtype
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    reference, _ = scaled_dot_product_attention(q.double(), k.double(), v.double(), mask)
    assert_close(out.double(), reference, atol=0.05, rtol=0.05)
    # PyTorch's SDPA on the same rounded inputs; at these logits the softmax is
    # one-hot and SDPA may be exact, hence one ulp of slack.
    baseline = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    ratio = assert_within_baseline(out, baseline, reference, slack=1.0)
    print(f"large logits {dtype}: ratio {ratio:.3g}")


@pytest.mark.parametrize("kind", ["bool", "float", "causal"])
def test_masked_keys_stay_out_at_huge_scores(kind):
    # Scores of +-3.5e9 (float32) and values of 1e6: every masked key outscores
    # the allowed ones, and row 0 may see only its own key, which scores -3.5e9.
    # Only -inf keeps the masked keys at weight 0; -1e4 or -1e9 would not.
    n = 6
    q, k = signed_qk(n, 8)
    q, k = q.expand(2, 3, n, 8), k.expand(2, 3, n, 8)
    v = 1e6 * torch.randn(2, 3, n, 5, generator=torch.Generator(device=torch.get_default_device()).manual_seed(5))
    allowed = torch.rand(n, n, generator=torch.Generator(device=torch.get_default_device()).manual_seed(6)) > 0.5
    allowed |= torch.eye(n, dtype=torch.bool)
    allowed[0] = torch.arange(n) == 0
    if kind == "causal":
        allowed = causal_mask(n, n)
        out, weights = scaled_dot_product_attention(q, k, v, is_causal=True)
    elif kind == "float":
        bias = torch.zeros(n, n).masked_fill(~allowed, float("-inf"))
        out, weights = scaled_dot_product_attention(q, k, v, bias)
    else:
        out, weights = scaled_dot_product_attention(q, k, v, allowed)
    assert_matches(out, expected_output(v, allowed))
    assert torch.all(weights[..., ~allowed] == 0)
    assert torch.equal(out[..., 0, :], v[..., 0, :])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n, m, d, dv, spread", [(5, 7, 8, 6, 1.0), (16, 24, 32, 16, 3.0)])
def test_half_precision_close_to_float32(dtype, n, m, d, dv, spread):
    # The second size has scores of several units: rounding them to the input's
    # dtype (a softmax without its float32 upcast) shows there, not at the first.
    q, k, v = qkv(2, 3, n=n, m=m, d=d, dv=dv, dtype=torch.float32)
    q, k = q * spread, k * spread
    out, _ = scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype), is_causal=True)
    if spread == 1.0:  # the float32 reference sees unrounded inputs: only at spread 1
        ref, _ = scaled_dot_product_attention(q, k, v, is_causal=True)
        assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)
    low = tuple(t.to(dtype) for t in (q, k, v))
    allowed = causal_mask(q.shape[-2], k.shape[-2])  # lower right, as the snippet (N != M)
    exact = F.scaled_dot_product_attention(*(t.double() for t in low), attn_mask=allowed)
    baseline = F.scaled_dot_product_attention(*low, attn_mask=allowed)
    ratio = assert_within_baseline(out, baseline, exact)
    print(f"half precision {dtype} N={n} spread={spread}: ratio {ratio:.3g}")


def test_gradcheck_float64():
    q, k, v = (t.requires_grad_() for t in qkv(2, n=3, m=4, d=3, dv=2))
    mask = torch.tensor([[True, False, True, True], [True, True, True, True], [False, False, True, True]])
    assert torch.autograd.gradcheck(lambda a, b, c: scaled_dot_product_attention(a, b, c, mask)[0], (q, k, v))
    assert torch.autograd.gradcheck(
        lambda a, b, c: scaled_dot_product_attention(a, b, c, is_causal=True)[0], (q, k, v)
    )


def test_dropout_statistics_and_zero_means_identity():
    q, k, v = qkv(n=4, m=4)
    plain, weights = scaled_dot_product_attention(q, k, v)
    same, _ = scaled_dot_product_attention(q, k, v, dropout_p=0.0)
    assert torch.equal(plain, same)
    torch.manual_seed(0)
    queries = torch.ones(4000, 1, dtype=torch.float64)
    keys = torch.ones(2, 1, dtype=torch.float64)
    out, w = scaled_dot_product_attention(queries, keys, keys, dropout_p=0.25)
    # Each kept weight is scaled by 1/(1 - p); the returned weights are pre-dropout.
    assert_close(w.sum(-1), torch.ones(4000, dtype=torch.float64))
    assert 0.95 < out.mean().item() < 1.05
    # Both weights of a row are dropped with probability 1/16: some rows are 0.
    assert 100 < (out == 0).sum().item() < 400


# -------------------------------------------------------------- exercises ----
def test_exercise_shift_invariance():
    s = torch.randn(3, 5, dtype=torch.float64)
    assert_close(torch.softmax(s + 7.5, dim=-1), torch.softmax(s, dim=-1))


def test_exercise_one_query_sees_all_keys():
    assert causal_mask(1, 5).tolist() == [[True] * 5]
    q, k, v = qkv(n=1, m=5)
    upper_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert_close(upper_left, v[:1])  # PyTorch's alignment: the query sees key 0 only
    ours, _ = scaled_dot_product_attention(q, k, v, is_causal=True)
    assert_close(ours, F.scaled_dot_product_attention(q, k, v))


# ----------------------------------------------------------------- errors ----
def test_errors_name_the_argument():
    q, k, v = qkv()
    with pytest.raises(TypeError, match=r"q must be a 2-D\+ tensor of q's floating dtype .* got <class 'list'>"):
        scaled_dot_product_attention([1.0], k, v)
    with pytest.raises(TypeError, match=r"k must be a 2-D\+ tensor .* got \(\(7, 8\), torch.int64, device\(type='cpu'\)\)"):
        scaled_dot_product_attention(q, k.long(), v)
    with pytest.raises(TypeError, match=r"v must be a 2-D\+ tensor .* got \(\(6,\), torch.float64"):
        scaled_dot_product_attention(q, k, v[0])
    with pytest.raises(TypeError, match=r"k must be a 2-D\+ tensor of q's floating dtype .* torch.float64"):
        scaled_dot_product_attention(q.float(), k, v)
    with pytest.raises(ValueError, match=r"q, k, v, attn_mask must fit .* got \[\(5, 8\), \(7, 4\), \(7, 6\), \(\)\]"):
        scaled_dot_product_attention(q, k[:, :4], v)
    with pytest.raises(ValueError, match=r"q, k, v, attn_mask must fit .* got \[\(5, 8\), \(7, 8\), \(6, 6\), \(\)\]"):
        scaled_dot_product_attention(q, k, v[:6])
    with pytest.raises(ValueError, match=r"attn_mask None if is_causal; got 0.0, None, True, Tensor"):
        scaled_dot_product_attention(q, k, v, torch.ones(5, 7, dtype=torch.bool), is_causal=True)
    with pytest.raises(TypeError, match=r"attn_mask must be .*or bool.* got \(\(5, 7\), torch.int64"):
        scaled_dot_product_attention(q, k, v, torch.ones(5, 7, dtype=torch.long))
    with pytest.raises(TypeError, match=r"attn_mask must be .* got <class 'list'>"):
        scaled_dot_product_attention(q, k, v, [[True]])
    with pytest.raises(ValueError, match=r"must fit .* \(\.\.\., N, M\); got \[.*, \(5, 6\)\]"):
        scaled_dot_product_attention(q, k, v, torch.ones(5, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\), .* got 1.0, None"):
        scaled_dot_product_attention(q, k, v, dropout_p=1.0)
    with pytest.raises(ValueError, match=r"scale > 0 and finite or None, .* got 0.0, -1.0"):
        scaled_dot_product_attention(q, k, v, scale=-1.0)
    with pytest.raises(ValueError, match=r"n_keys must be an int >= 0, got -2"):
        causal_mask(3, -2)


def test_errors_for_leading_dims_devices_and_masks():
    """Heads that disagree, tensors on another device, masks that do not fit the scores."""
    q, k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 2, 7, 4), torch.randn(2, 2, 7, 6)
    with pytest.raises(ValueError, match=r"q, k, v, attn_mask must fit .* got \[\(2, 3, 5, 4\), "
                                         r"\(2, 2, 7, 4\), \(2, 2, 7, 6\), \(\)\]"):
        scaled_dot_product_attention(q, k, v)
    q = q[:, :2]
    with pytest.raises(TypeError, match=r"k must be .* on q's device, got .*device\(type='meta'\)"):
        scaled_dot_product_attention(q, k.to("meta"), v)
    with pytest.raises(ValueError, match=r"must fit .* got \[.*, \(3, 5, 7\)\]"):
        scaled_dot_product_attention(q, k, v, torch.ones(3, 5, 7, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"attn_mask must be .* on q's device, got .*meta"):
        scaled_dot_product_attention(q, k, v, torch.ones(5, 7, dtype=torch.bool, device="meta"))
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\), .* got '0.1'"):
        scaled_dot_product_attention(q, k, v, dropout_p="0.1")
