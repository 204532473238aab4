"""Each mistake in snippets/attention/common_mistakes.py, pinned both ways.

For every pair the test shows how the wrong function differs from the oracle
(F.scaled_dot_product_attention, nn.MultiheadAttention, or a formula written out
here) and that the fix equals the oracle.
"""

from __future__ import annotations

import math
import pathlib

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import snippets.attention.common_mistakes as cm
from huge_scores import assert_matches, expected_output, signed_qk

SNIPPET = pathlib.Path(__file__).resolve().parents[1] / "snippets/attention/common_mistakes.py"


def sdpa_weights(q, k, attn_mask=None, scale=None):
    """The oracle's weights: SDPA with the identity as values returns them as output."""
    m = k.shape[-2]
    eye = torch.eye(m, dtype=q.dtype).expand(*k.shape[:-2], m, m)
    return F.scaled_dot_product_attention(q, k, eye, attn_mask=attn_mask, scale=scale)


def qk(seed=0, n=5, m=7, d=8):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    return (torch.randn(2, n, d, generator=g, dtype=torch.float64),
            torch.randn(2, m, d, generator=g, dtype=torch.float64))


def differs(a, b, at_least=1e-3):
    return (a - b).abs().max().item() > at_least


# ----------------------------------------------------------- softmax axis
def test_softmax_over_the_wrong_axis():
    q, k = qk()
    oracle = sdpa_weights(q, k)
    wrong, right = cm.weights_wrong_axis(q, k), cm.weights_right_axis(q, k)
    torch.testing.assert_close(right, oracle)
    torch.testing.assert_close(right.sum(-1), torch.ones(2, 5, dtype=torch.float64))
    # how it is wrong: columns sum to 1 instead of rows
    torch.testing.assert_close(wrong.sum(-2), torch.ones(2, 7, dtype=torch.float64))
    assert differs(wrong.sum(-1), torch.ones(2, 5, dtype=torch.float64), 0.1)
    assert differs(wrong, oracle)


# ------------------------------------------------------------------ scale
def test_forgotten_scale_saturates_softmax_as_d_grows():
    q, k = qk(d=16)
    torch.testing.assert_close(cm.weights_scaled(q, k), sdpa_weights(q, k))
    # the wrong one is exactly attention with scale 1
    torch.testing.assert_close(cm.weights_unscaled(q, k), sdpa_weights(q, k, scale=1.0))
    peak_wrong, peak_right = [], []
    for d in (4, 64, 1024):
        q, k = qk(seed=d, n=16, m=16, d=d)
        peak_wrong.append(cm.weights_unscaled(q, k).amax(-1).mean().item())
        peak_right.append(cm.weights_scaled(q, k).amax(-1).mean().item())
    assert peak_wrong[0] < peak_wrong[1] < peak_wrong[2]
    assert peak_wrong[2] > 0.95  # nearly one-hot: gradients vanish
    assert max(peak_right) < 0.5 and max(peak_right) - min(peak_right) < 0.15


# ------------------------------------------------------- value projection
def test_value_projection_with_the_query_weights():
    torch.manual_seed(0)
    D = 8
    x = torch.randn(2, 5, D, dtype=torch.float64)
    w_q, w_k, w_v = (torch.randn(D, D, dtype=torch.float64) / math.sqrt(D) for _ in range(3))

    def oracle(w_v_used):
        mha = nn.MultiheadAttention(D, 1, bias=False, batch_first=True, dtype=torch.float64)
        with torch.no_grad():
            # nn.Linear computes x @ W^T, the snippet x @ W: transpose to copy.
            mha.in_proj_weight.copy_(torch.cat([w_q.T, w_k.T, w_v_used.T]))
            mha.out_proj.weight.copy_(torch.eye(D, dtype=torch.float64))
        return mha(x, x, x, need_weights=False)[0]

    torch.testing.assert_close(cm.self_attention(x, w_q, w_k, w_v), oracle(w_v))
    wrong = cm.self_attention_wrong_value(x, w_q, w_k, w_v)
    assert differs(wrong, oracle(w_v))
    # how: it is the attention you would get with w_v replaced by w_q, and w_v is ignored
    torch.testing.assert_close(wrong, oracle(w_q))
    torch.testing.assert_close(wrong, cm.self_attention_wrong_value(x, w_q, w_k, 2 * w_v))


# ----------------------------------------------------- mask after softmax
def test_mask_applied_after_softmax():
    q, k = qk(n=5, m=5)
    allowed = torch.ones(5, 5, dtype=torch.bool).tril()
    eye = torch.eye(5, dtype=torch.float64)
    wrong_w = cm.masked_attention_wrong(q, k, eye, allowed)  # identity values -> weights
    right_w = cm.masked_attention(q, k, eye, allowed)
    torch.testing.assert_close(right_w, sdpa_weights(q, k, attn_mask=allowed))
    torch.testing.assert_close(right_w.sum(-1), torch.ones(2, 5, dtype=torch.float64))
    # how: rows sum to less than 1 (all but the last, which masks nothing)
    assert (wrong_w.sum(-1)[:, :-1] < 0.99).all()
    # ...and the blocked future still leaks in through the softmax denominator
    v = torch.randn(2, 5, 3, dtype=torch.float64)
    k2 = k.clone()
    k2[:, -1] += 3.0  # change only the last key, which query 0 may not see
    assert differs(cm.masked_attention_wrong(q, k, v, allowed)[:, 0],
                   cm.masked_attention_wrong(q, k2, v, allowed)[:, 0])
    torch.testing.assert_close(cm.masked_attention(q, k, v, allowed)[:, 0],
                               cm.masked_attention(q, k2, v, allowed)[:, 0])
    torch.testing.assert_close(cm.masked_attention(q, k, v, allowed),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=allowed))


def test_masked_attention_row_with_no_key_returns_zeros_like_sdpa():
    q, k = qk(n=3, m=4)
    v = torch.randn(2, 4, 3, dtype=torch.float64)
    allowed = torch.tensor([[True, False, True, False], [False] * 4, [True] * 4])
    out = cm.masked_attention(q, k, v, allowed)
    assert (out[:, 1] == 0).all()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=allowed))


# ---------------------------------------------------- MHA mask polarity
def mha_oracle(mha, x, allowed):
    """nn.MultiheadAttention's math written out, with the site's mask given to SDPA."""
    B, N, D = x.shape
    H = mha.num_heads
    q, k, v = F.linear(x, mha.in_proj_weight, mha.in_proj_bias).chunk(3, dim=-1)
    q, k, v = (t.reshape(B, N, H, D // H).transpose(1, 2) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    return mha.out_proj(out.transpose(1, 2).reshape(B, N, D))


def test_sdpa_mask_passed_to_multihead_attention():
    torch.manual_seed(1)
    mha = nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64).eval()
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    allowed = torch.ones(4, 4, dtype=torch.bool).tril()  # causal, True = may attend
    with torch.no_grad():
        torch.testing.assert_close(cm.mha_masked(mha, x, allowed), mha_oracle(mha, x, allowed))
        wrong = cm.mha_masked_wrong(mha, x, allowed)
        # how: the mask is read as its complement, so query 0 sees only the future...
        torch.testing.assert_close(wrong[:, :-1], mha_oracle(mha, x, ~allowed)[:, :-1])
        x2 = x.clone()
        x2[:, -1] += 1.0
        assert differs(wrong[:, 0], cm.mha_masked_wrong(mha, x2, allowed)[:, 0])
        # ...and the last query, which may see every key, is blocked from all of them:
        # NaN on the CPU's fast path, zeros from the CUDA kernel (H200, torch 2.11)
        last = wrong[:, -1]
        assert torch.isnan(last).all() or (last == 0).all()


# ------------------------------------------------ is_causal with a KV cache
def test_is_causal_with_fewer_queries_than_keys():
    g = torch.Generator(device=torch.get_default_device()).manual_seed(2)
    B, H, M, N, d = 2, 2, 6, 2, 4
    q_all, k, v = (torch.randn(B, H, M, d, generator=g, dtype=torch.float64) for _ in range(3))
    # oracle: full causal attention over M positions, keep the last N query rows
    oracle = F.scaled_dot_product_attention(q_all, k, v, is_causal=True)[..., -N:, :]
    q = q_all[..., -N:, :]
    torch.testing.assert_close(cm.cached_decode(q, k, v), oracle)
    torch.testing.assert_close(cm.cached_decode_bias(q, k, v), oracle)
    assert differs(cm.cached_decode_wrong(q, k, v), oracle)
    # how: upper-left alignment; one new token sees only the first cached key
    one = q_all[..., -1:, :]
    torch.testing.assert_close(cm.cached_decode_wrong(one, k, v), v[..., :1, :])
    torch.testing.assert_close(cm.cached_decode(one, k, v), oracle[..., -1:, :])


def test_cached_decode_rejects_more_queries_than_keys():
    q = torch.randn(1, 1, 3, 4)
    with pytest.raises(ValueError, match=r"\(N <= M to decode\), got \[\(\(1, 1, 3, 4\), .*\(\(1, 1, 2, 4\), .*\(\(1, 1, 2, 4\), .*NoneType"):
        cm.cached_decode(q, q[..., :2, :], q[..., :2, :])


# --------------------------------------------------------- dropout in eval
def test_dropout_left_on_in_evaluation():
    g = torch.Generator(device=torch.get_default_device()).manual_seed(3)
    q, k, v = (torch.randn(2, 2, 6, 4, generator=g) for _ in range(3))
    oracle = F.scaled_dot_product_attention(q, k, v)
    wrong, right = cm.DropoutAttentionWrong(0.5).eval(), cm.DropoutAttention(0.5).eval()
    torch.testing.assert_close(right(q, k, v), oracle)
    torch.manual_seed(0)
    w1 = wrong(q, k, v)
    w2 = wrong(q, k, v)
    # how: eval() changes nothing, the output is random and off the oracle
    assert differs(w1, oracle) and differs(w1, w2)
    # in training both drop, identically for the same seed
    wrong.train(), right.train()
    torch.manual_seed(0)
    a = wrong(q, k, v)
    torch.manual_seed(0)
    b = right(q, k, v)
    torch.testing.assert_close(a, b)
    assert differs(b, oracle)


def test_dropout_validation():
    with pytest.raises(ValueError, match=r"dropout must be a float in \[0, 1\), got 1\.0"):
        cm.DropoutAttention(1.0)
    with pytest.raises(ValueError, match=r"dropout must be a float in \[0, 1\), got True"):
        cm.DropoutAttention(True)


# ------------------------------------------------------ -1e9 in half precision
def weights_oracle(scores, allowed):
    """Softmax over the allowed keys of each row, in float64; no allowed key -> zeros."""
    s = scores.double()
    out = torch.zeros_like(s)
    for i in range(s.shape[0]):
        keep = allowed[i]
        if keep.any():
            e = torch.exp(s[i, keep] - s[i, keep].max())
            out[i, keep] = e / e.sum()
    return out


ALLOWED = torch.tensor([[True, True, False, False],
                        [False, False, False, False],  # e.g. a padded query
                        [True, True, True, False]])


def allowed() -> torch.Tensor:
    """ALLOWED on the device under test (the module-level tensor is made on the CPU)."""
    return ALLOWED.to(torch.get_default_device())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_minus_1e9_fill_in_half_precision(dtype):
    scores = (torch.randn(3, 4, generator=torch.Generator(device=torch.get_default_device()).manual_seed(4)) * 4).to(dtype)
    oracle = weights_oracle(scores, allowed())
    right = cm.masked_weights(scores, allowed())
    tol = 1e-6 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(right.double(), oracle, rtol=tol, atol=tol)
    assert torch.isfinite(right).all() and (right[1] == 0).all()
    wrong = cm.masked_weights_wrong(scores, allowed())
    if dtype != torch.float16:
        # how (float32, bfloat16: -1e9 is finite): no NaN, but the empty row
        # spreads its weight evenly over keys it must not see
        torch.testing.assert_close(wrong[1], torch.full((4,), 0.25, dtype=dtype))
    else:
        # how (float16): -1e9 rounds to -inf, the empty row is softmax(-inf, ...) = NaN
        assert torch.isinf(torch.tensor(-1e9, dtype=dtype))
        assert torch.isnan(wrong[1]).all()
    # rows that keep a key are right either way
    torch.testing.assert_close(wrong[[0, 2]].double(), oracle[[0, 2]], rtol=tol, atol=tol)


def test_minus_1e9_masked_fill_raises_in_float16_and_finfo_min_is_the_partial_fix():
    scores = torch.randn(3, 4, generator=torch.Generator(device=torch.get_default_device()).manual_seed(5)).half()
    with pytest.raises(RuntimeError, match="overflow"):
        scores.masked_fill(~allowed(), -1e9)
    got = cm.masked_weights_finfo_min(scores, allowed())
    oracle = weights_oracle(scores, allowed())
    torch.testing.assert_close(got[[0, 2]].double(), oracle[[0, 2]], rtol=1e-2, atol=1e-2)
    # but a row with no allowed key is uniform, not zero
    torch.testing.assert_close(got[1], torch.full((4,), 0.25, dtype=torch.float16))


def test_masked_weights_matches_sdpa():
    q, k = qk(n=3, m=4)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    torch.testing.assert_close(cm.masked_weights(scores, allowed()),
                               sdpa_weights(q, k, attn_mask=allowed()))


def test_right_masking_holds_at_huge_scores():
    # Scores of +-3.5e9 in float32 (tests/huge_scores.py): every blocked key
    # outscores the allowed ones and query 0 may see only its own key, which
    # scores -3.5e9. Values are 1e6. The -inf fill keeps blocked keys at exactly
    # 0; -1e4, or -1e9 in float32, would give them row 0.
    n = 6
    q, k = signed_qk(n, 8)
    v = 1e6 * torch.randn(2, n, 5, generator=torch.Generator(device=torch.get_default_device()).manual_seed(7))
    allowed = torch.rand(n, n, generator=torch.Generator(device=torch.get_default_device()).manual_seed(8)) > 0.5
    allowed |= torch.eye(n, dtype=torch.bool)
    allowed[0] = torch.arange(n) == 0
    out = cm.masked_attention(q.expand(2, n, 8), k.expand(2, n, 8), v, allowed)
    assert_matches(out, expected_output(v, allowed))
    weights = cm.masked_weights(q @ k.T / math.sqrt(8), allowed)
    assert (weights[~allowed] == 0).all() and torch.equal(weights[0], torch.eye(n)[0])


def test_allowed_must_be_bool():
    scores = torch.zeros(3, 4)
    with pytest.raises(ValueError, match=r"allowed bool broadcasting to it on its device, got \[.*, \(\(3, 4\), torch.float32"):
        cm.masked_weights(scores, allowed().float())
    with pytest.raises(ValueError, match=r"q, k, v, allowed must fit .* <class 'list'>\]"):
        cm.masked_attention(scores, scores, scores, [[True]])
    mha = nn.MultiheadAttention(4, 1, batch_first=True)
    with pytest.raises(ValueError, match=r"allowed None or \(N, N\) bool there; got \[.*, \(\(3, 3\), torch.int64"):
        cm.mha_masked(mha, torch.zeros(1, 3, 4), torch.ones(3, 3, dtype=torch.long))


# ------------------------------------------------- sequence-first vs batch-first
def test_batch_first_tensors_into_a_sequence_first_module():
    torch.manual_seed(6)
    mha = nn.MultiheadAttention(8, 2, dtype=torch.float64)  # batch_first=False, the default
    assert not mha.batch_first
    oracle_mha = nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64)
    oracle_mha.load_state_dict(mha.state_dict())
    x = torch.randn(3, 5, 8, dtype=torch.float64)  # (B, N, D)
    oracle = oracle_mha(x, x, x, need_weights=False)[0]
    torch.testing.assert_close(cm.mha_self_attend(mha, x), oracle)
    torch.testing.assert_close(cm.mha_self_attend(oracle_mha, x), oracle)
    wrong = cm.mha_self_attend_wrong(mha, x)
    assert wrong.shape == oracle.shape and differs(wrong, oracle)  # no error, wrong numbers
    # how: examples leak into each other; changing example 2 moves example 0
    x2 = x.clone()
    x2[2] += 1.0
    assert differs(wrong[0], cm.mha_self_attend_wrong(mha, x2)[0])
    torch.testing.assert_close(cm.mha_self_attend(mha, x)[0], cm.mha_self_attend(mha, x2)[0])


# -------------------------------------------------------------- standalone


# --------------------------------------------------------------- exercises
def test_exercise_three_queries_five_keys():
    q, k = (t.unsqueeze(0) for t in qk(seed=7, n=3, m=5))  # (1, 2, N, d), (1, 2, M, d)
    eye = torch.eye(5, dtype=torch.float64)
    seen_wrong = cm.cached_decode_wrong(q, k, eye)[..., 0, :] > 0  # weights of query 0
    seen_right = cm.cached_decode(q, k, eye)[..., 0, :] > 0
    assert seen_wrong.eq(torch.tensor([True, False, False, False, False])).all()
    assert seen_right.eq(torch.tensor([True, True, True, False, False])).all()


# ------------------------------------------------------ input checks, both halves
@pytest.mark.parametrize("fn", [cm.weights_wrong_axis, cm.weights_right_axis, cm.weights_unscaled, cm.weights_scaled])
def test_score_functions_check_q_and_k(fn):
    q, k = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 6, 4)
    cases = [
        ((q, [1.0]), ValueError, r"q, k, v, allowed must fit .* got \[.*, <class 'list'>, <class 'list'>, "),
        ((q.long(), k), ValueError, r"floating alike, .* got \[\(\(2, 3, 5, 4\), torch.int64"),
        ((q[0, 0, 0], k), ValueError, r"q, k, v, allowed must fit .* got \[\(\(4,\), torch.float32"),
        ((q, k.double()), ValueError, r"floating alike, .* got \[.*, \(\(2, 3, 6, 4\), torch.float64"),
        ((q, k.to("meta")), ValueError, r"on q's device .* got \[.*, \(\(2, 3, 6, 4\), torch.float32, device\(type='meta'\)"),
        ((q, k[..., :3]), ValueError, r"q, k, v, allowed must fit .* got \[\(\(2, 3, 5, 4\), .*\(\(2, 3, 6, 3\), "
                                      r".*\(\(2, 3, 6, 3\), .*NoneType"),
        ((q, k[:, :2]), ValueError, r"q, k, v, allowed must fit .* got \[\(\(2, 3, 5, 4\), .*\(\(2, 2, 6, 4\), "
                                    r".*\(\(2, 2, 6, 4\), .*NoneType"),
    ]
    for args, error, match in cases:
        with pytest.raises(error, match=match):
            fn(*args)


@pytest.mark.parametrize("fn", [cm.self_attention_wrong_value, cm.self_attention])
def test_projection_functions_check_x_and_weights(fn):
    x, w = torch.randn(2, 5, 4), torch.randn(4, 4)
    cases = [
        ((x.long(), w, w, w), ValueError, r"x must be floating, x \(B, N, D\) .* got \[\(\(2, 5, 4\), torch.int64"),
        ((x[0], w, w, w), ValueError, r"x must be floating, .* got \[\(\(5, 4\), torch.float32"),
        ((x, w, w.double(), w), ValueError, r"w_k must be floating, x \(B, N, D\) and each w \(D, D\) of x's "
                                            r"dtype and device, got \[\(\(4, 4\), torch.float64"),
        ((x, w, w, "w"), ValueError, r"w_v must be floating, .* got \[<class 'str'>\]"),
        ((x, w[:3], w, w), ValueError, r"w_q must be floating, .* got \[\(\(3, 4\), torch.float32"),
    ]
    for args, error, match in cases:
        with pytest.raises(error, match=match):
            fn(*args)


@pytest.mark.parametrize("fn", [cm.masked_attention_wrong, cm.masked_attention])
def test_masked_attention_checks_qkv_and_allowed(fn):
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    allowed = torch.ones(3, 5, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"q, k, v, allowed must fit .* got \[\(\(2, 3, 4\), .*\(\(2, 5, 4\), .*\(\(3, 5, 4\)"):
        fn(q, k, v[:1].expand(3, -1, -1), allowed)
    with pytest.raises(ValueError, match=r"q, k, v, allowed must fit .* got \[.*, \(\(3, 4\), torch.bool"):
        fn(q, k, v, allowed[:, :4])
    with pytest.raises(ValueError, match=r"\(\.\.\., N, M\) bool, on q's device .* got \[.*, \(\(3, 5\), torch.bool, device\(type='meta'\)\)\]"):
        fn(q, k, v, allowed.to("meta"))


@pytest.mark.parametrize("fn", [cm.masked_weights_wrong, cm.masked_weights, cm.masked_weights_finfo_min])
def test_masked_weights_check_scores_and_allowed(fn):
    scores, allowed = torch.randn(3, 4), torch.ones(3, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"scores must be floating \(\.\.\., M\), .* got \[\(\(3, 4\), torch.int64"):
        fn(scores.long(), allowed)
    with pytest.raises(ValueError, match=r"scores must be floating \(\.\.\., M\), .* got \[\(\(\), torch.float32"):
        fn(scores[0, 0], allowed[0, 0])
    with pytest.raises(ValueError, match=r"allowed bool broadcasting .* got \[.*, \(\(3, 4\), torch.float32"):
        fn(scores, allowed.float())
    with pytest.raises(ValueError, match=r"allowed bool broadcasting to it on its device, got \[.*, \(\(2, 3, 4\), torch.bool"):
        fn(scores, allowed.expand(2, 3, 4))


@pytest.mark.parametrize("fn", [cm.cached_decode_wrong, cm.cached_decode, cm.cached_decode_bias])
def test_cached_decode_checks_qkv(fn):
    q, k = torch.randn(1, 2, 1, 4), torch.randn(1, 2, 5, 4)
    with pytest.raises(ValueError, match=r"q, k, v, allowed must fit .* got \[\(\(1, 2, 1, 4\), .*\(\(1, 3, 5, 4\)"):
        fn(q, torch.randn(1, 3, 5, 4), torch.randn(1, 3, 5, 4))
    with pytest.raises(ValueError, match=r"floating alike, .* got \[.*, \(\(1, 2, 5, 4\), torch.int64"):
        fn(q, k, k.long())
    with pytest.raises(ValueError, match=r"\(N <= M to decode\), got \[\(\(1, 2, 5, 4\), .*\(\(1, 2, 1, 4\)"):
        fn(k, q, q)


@pytest.mark.parametrize("fn", [cm.mha_masked_wrong, cm.mha_masked, cm.mha_self_attend_wrong, cm.mha_self_attend])
def test_mha_helpers_check_the_module_and_x(fn):
    mha = nn.MultiheadAttention(4, 1, batch_first=True)
    extra = (torch.ones(3, 3, dtype=torch.bool),) if "masked" in fn.__name__ else ()
    with pytest.raises(ValueError, match=r"x must be \(B, N, 4\) of mha's torch.float32 on cpu, .* got \[\(\(1, 3, 5\), "):
        fn(mha, torch.zeros(1, 3, 5), *extra)
    with pytest.raises(ValueError, match=r"x must be \(B, N, 4\) of mha's torch.float32 .* got \[\(\(1, 3, 4\), torch.float64"):
        fn(mha, torch.zeros(1, 3, 4, dtype=torch.float64), *extra)


@pytest.mark.parametrize("fn", [cm.mha_masked_wrong, cm.mha_masked])
def test_mha_masks_must_be_square_over_the_length_mha_reads(fn):
    mha = nn.MultiheadAttention(4, 1, batch_first=True)
    x = torch.zeros(2, 3, 4)
    with pytest.raises(ValueError, match=r"allowed None or \(N, N\) bool there; got \[.*, \(\(2, 2\), torch.bool"):
        fn(mha, x, torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"allowed None or \(N, N\) bool there; got \[.*, \(\(3,\), torch.bool"):
        fn(mha, x, torch.ones(3, dtype=torch.bool))
    seq_first = nn.MultiheadAttention(4, 1)  # reads x (B, N, D) as (N=2, B=3, D)
    with pytest.raises(ValueError, match=r"allowed None or \(N, N\) bool there; got \[\(\(2, 3, 4\), .*\(\(3, 3\), torch.bool"):
        fn(seq_first, x, torch.ones(3, 3, dtype=torch.bool))


@pytest.mark.parametrize("cls", [cm.DropoutAttentionWrong, cm.DropoutAttention])
def test_dropout_modules_check_rate_and_inputs(cls):
    with pytest.raises(ValueError, match=r"dropout must be a float in \[0, 1\), got '0.1'"):
        cls("0.1")
    q = torch.randn(1, 2, 3, 4)
    with pytest.raises(ValueError, match=r"on q's device .* got \[.*, \(\(1, 2, 3, 4\), torch.float32, device\(type='meta'\)"):
        cls(0.1)(q, q.to("meta"), q)


def test_the_qkv_checks_of_this_file():
    q = torch.randn(1, 2, 3, 4)
    cases = [
        (([1.0], q, q), ValueError, r"q, k, v, allowed must fit .* got \[<class 'list'>, "),
        ((q, q[0, 0, 0], q), ValueError, r"q, k, v, allowed must fit .* got \[.*, \(\(4,\), torch.float32"),
        ((q, q, q.double()), ValueError, r"floating alike, .* got \[.*, \(\(1, 2, 3, 4\), torch.float64"),
        ((q, q[..., :2], q), ValueError, r"q, k, v, allowed must fit .* got \[\(\(1, 2, 3, 4\), .*"
                                         r"\(\(1, 2, 3, 2\), .*\(\(1, 2, 3, 4\), .*NoneType"),
        ((q, q, q[..., :2, :]), ValueError, r"q, k, v, allowed must fit .* got \[\(\(1, 2, 3, 4\), .*"
                                            r"\(\(1, 2, 3, 4\), .*\(\(1, 2, 2, 4\), .*NoneType"),
    ]
    for args, error, match in cases:
        with pytest.raises(error, match=match):
            cm.cached_decode(*args)
