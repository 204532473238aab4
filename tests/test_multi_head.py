"""Tests for snippets/attention/multi_head.py.

Oracles: nn.MultiheadAttention with its weights copied in (self and cross,
batch_first True and False, kdim/vdim, boolean masks of the opposite polarity,
float masks, key padding, per-head weights); the explicit path (the equation)
for the F.scaled_dot_product_attention fast path; single-head attention and the
1/sqrt(d) scale written out here; a lower-right causal triangle built here
with ``tril``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from snippets.attention.multi_head import MultiHeadAttention
from tolerance import assert_within_baseline

SNIPPET = Path(__file__).resolve().parents[1] / "snippets" / "attention" / "multi_head.py"
B, N, M, D, H = 2, 5, 7, 16, 4


def torch_mha(*, batch_first=True, kdim=None, vdim=None, bias=True, seed=0, dtype=torch.float32):
    """A seeded nn.MultiheadAttention in eval mode, with non-zero biases."""
    torch.manual_seed(seed)
    mha = nn.MultiheadAttention(D, H, batch_first=batch_first, kdim=kdim, vdim=vdim, bias=bias)
    if bias:  # torch starts biases at zero; random ones prove they are copied
        with torch.no_grad():
            mha.in_proj_bias.normal_()
            mha.out_proj.bias.normal_()
    return mha.to(dtype).eval()


def run_torch(mha, query, key, value, **kwargs):
    """Call nn.MultiheadAttention with batch-first tensors whatever its layout."""
    if not mha.batch_first:
        query, key, value = (t.transpose(0, 1) for t in (query, key, value))
    out, weights = mha(query, key, value, **kwargs)
    if not mha.batch_first:
        out = out.transpose(0, 1)
    return out, weights


def random_bool_mask(n, m, seed=1):
    """A random (n, m) mask, True = may attend, with no fully masked row."""
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    mask = torch.rand(n, m, generator=g) > 0.5
    mask[:, 0] = True
    return mask


# ----------------------------------------------------------------------------
# Against nn.MultiheadAttention
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("need_weights", [False, True])
def test_self_attention_matches_torch(batch_first, need_weights):
    mha = torch_mha(batch_first=batch_first)
    ours = MultiHeadAttention.from_torch(mha)
    x = torch.randn(B, N, D)
    expected, _ = run_torch(mha, x, x, x, need_weights=False)
    out, weights = ours(x, need_weights=need_weights)
    assert out.shape == (B, N, D)
    assert_close(out, expected)
    assert (weights is None) != need_weights


@pytest.mark.parametrize("kdim, vdim", [(None, None), (12, 20), (D, 8)])
@pytest.mark.parametrize("need_weights", [False, True])
def test_cross_attention_matches_torch(kdim, vdim, need_weights):
    mha = torch_mha(kdim=kdim, vdim=vdim)
    ours = MultiHeadAttention.from_torch(mha)
    assert ours.fused == (kdim is None)
    query = torch.randn(B, N, D)
    key = torch.randn(B, M, kdim or D)
    value = torch.randn(B, M, vdim or D)
    expected, expected_w = run_torch(mha, query, key, value, average_attn_weights=False)
    out, weights = ours(query, key, value, need_weights=need_weights)
    assert_close(out, expected)
    if need_weights:
        assert weights.shape == (B, H, N, M)
        assert_close(weights, expected_w)


@pytest.mark.parametrize("need_weights", [False, True])
def test_bool_mask_polarity_is_converted(need_weights):
    mha = torch_mha()
    ours = MultiHeadAttention.from_torch(mha)
    query, memory = torch.randn(B, N, D), torch.randn(B, M, D)
    may_attend = random_bool_mask(N, M)
    expected, expected_w = run_torch(
        mha, query, memory, memory, attn_mask=~may_attend, average_attn_weights=False
    )  # nn.MultiheadAttention: True = blocked
    out, weights = ours(query, memory, attn_mask=may_attend, need_weights=need_weights)
    assert_close(out, expected)
    if need_weights:
        assert_close(weights, expected_w)
        assert (weights[..., ~may_attend] == 0).all()
    # The same mask passed with MHA's polarity must give something else.
    wrong, _ = ours(query, memory, attn_mask=~may_attend | (torch.arange(M) == 0))
    assert not torch.allclose(wrong, expected)


@pytest.mark.parametrize("need_weights", [False, True])
def test_float_mask_and_per_head_mask_match_torch(need_weights):
    mha = torch_mha()
    ours = MultiHeadAttention.from_torch(mha)
    x = torch.randn(B, N, D)
    bias = torch.randn(B, H, N, N)  # a float mask is added to the scores
    expected, _ = run_torch(mha, x, x, x, attn_mask=bias.reshape(B * H, N, N))
    out, _ = ours(x, attn_mask=bias, need_weights=need_weights)
    assert_close(out, expected)
    per_head = torch.rand(B, H, N, N) > 0.4
    per_head[..., 0] = True
    expected, _ = run_torch(mha, x, x, x, attn_mask=~per_head.reshape(B * H, N, N))
    out, _ = ours(x, attn_mask=per_head, need_weights=need_weights)
    assert_close(out, expected)
    # (B, 1, N, M) broadcasts over the heads.
    out, _ = ours(x, attn_mask=per_head[:, :1], need_weights=need_weights)
    expected, _ = run_torch(
        mha, x, x, x, attn_mask=~per_head[:, :1].expand(B, H, N, N).reshape(B * H, N, N)
    )
    assert_close(out, expected)


@pytest.mark.parametrize("need_weights", [False, True])
def test_key_mask_matches_key_padding_mask(need_weights):
    mha = torch_mha()
    ours = MultiHeadAttention.from_torch(mha)
    query, memory = torch.randn(B, N, D), torch.randn(B, M, D)
    key_mask = torch.ones(B, M, dtype=torch.bool)
    key_mask[0, 4:] = False  # the first sequence has 4 real keys
    expected, expected_w = run_torch(
        mha, query, memory, memory, key_padding_mask=~key_mask, average_attn_weights=False
    )  # nn.MultiheadAttention: True = padded
    out, weights = ours(query, memory, key_mask=key_mask, need_weights=need_weights)
    assert_close(out, expected)
    if need_weights:
        assert_close(weights, expected_w)


@pytest.mark.parametrize("n, m", [(N, N), (3, M), (1, M)])
@pytest.mark.parametrize("need_weights", [False, True])
def test_is_causal_is_lower_right(n, m, need_weights):
    mha = torch_mha()
    ours = MultiHeadAttention.from_torch(mha)
    query, memory = torch.randn(B, n, D), torch.randn(B, m, D)
    # Query i is position i + (m - n): it sees keys j <= i + (m - n).
    blocked = ~torch.ones(n, m, dtype=torch.bool).tril(diagonal=m - n)
    expected, _ = run_torch(mha, query, memory, memory, attn_mask=blocked)
    out, _ = ours(query, memory, is_causal=True, need_weights=need_weights)
    assert_close(out, expected)


def test_need_weights_returns_per_head_weights():
    mha = torch_mha()
    ours = MultiHeadAttention.from_torch(mha)
    x = torch.randn(B, N, D)
    _, expected = mha(x, x, x, need_weights=True, average_attn_weights=False)
    _, weights = ours(x, need_weights=True)
    assert weights.shape == (B, H, N, N)
    assert_close(weights, expected)


# ----------------------------------------------------------------------------
# Fast path (SDPA) against the explicit path
# ----------------------------------------------------------------------------


def test_fast_and_explicit_paths_agree_with_every_mask_combined():
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H).eval()
    query, memory = torch.randn(B, N, D), torch.randn(B, M, D)
    key_mask = torch.ones(B, M, dtype=torch.bool)
    key_mask[1, 5:] = False
    bool_mask = random_bool_mask(N, M)
    float_mask = torch.randn(B, 1, N, M)
    for attn_mask in (None, bool_mask, float_mask, float_mask[0, 0]):  # float (N, M) too
        for is_causal in (False, True):
            kwargs = dict(attn_mask=attn_mask, key_mask=key_mask, is_causal=is_causal)
            fast, none = mha(query, memory, **kwargs)
            slow, weights = mha(query, memory, need_weights=True, **kwargs)
            assert none is None
            assert_close(fast, slow)
            if is_causal:
                causal = torch.ones(N, M, dtype=torch.bool).tril(M - N)
                assert (weights[..., ~causal] == 0).all()
            assert (weights[1, ..., 5:] == 0).all()


def test_fully_masked_row_returns_zeros_in_both_paths():
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H, bias=False).eval()
    x = torch.randn(B, N, D)
    mask = torch.ones(N, N, dtype=torch.bool)
    mask[2] = False  # query 2 may attend to nothing
    fast, _ = mha(x, attn_mask=mask)
    slow, weights = mha(x, attn_mask=mask, need_weights=True)
    for out in (fast, slow):
        assert torch.isfinite(out).all()
        assert (out[:, 2] == 0).all()  # no bias: zeros stay zeros through out_proj
    assert (weights[:, :, 2] == 0).all()
    assert_close(fast, slow)


# ----------------------------------------------------------------------------
# Properties
# ----------------------------------------------------------------------------


def test_weights_rows_sum_to_one_and_normalise_over_keys():
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H).eval()
    _, weights = mha(torch.randn(B, N, D), torch.randn(B, M, D), need_weights=True)
    assert_close(weights.sum(-1), torch.ones(B, H, N))
    assert (weights >= 0).all()


@pytest.mark.parametrize("need_weights", [False, True])
def test_gradcheck_float64(need_weights):
    torch.manual_seed(0)
    mha = MultiHeadAttention(4, 2, kdim=3).double().eval()
    query = torch.randn(1, 3, 4, dtype=torch.float64, requires_grad=True)
    key = torch.randn(1, 4, 3, dtype=torch.float64, requires_grad=True)
    value = torch.randn(1, 4, 4, dtype=torch.float64, requires_grad=True)
    key_mask = torch.tensor([[True, True, True, False]])

    def f(q, k, v):
        return mha(q, k, v, key_mask=key_mask, is_causal=True, need_weights=need_weights)[0]

    assert torch.autograd.gradcheck(f, (query, key, value))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("need_weights", [False, True])
def test_finite_with_large_inputs(dtype, need_weights):
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H).to(dtype).eval()
    # Scores near 1e6: beyond exp's range in every dtype, and beyond float16's
    # 65504 unless the scores are accumulated in float32.
    x = (torch.randn(B, N, D) * 1000).to(dtype)
    mask = torch.ones(N, N, dtype=torch.bool).tril()
    out, weights = mha(x, attn_mask=mask, need_weights=need_weights)
    assert out.dtype == dtype
    assert torch.isfinite(out).all()
    if need_weights:
        assert torch.isfinite(weights).all()
        assert_close(weights.float().sum(-1), torch.ones(B, H, N), atol=1e-2, rtol=0)


@pytest.mark.parametrize("need_weights", [False, True])
def test_float16_beyond_its_range_matches_float64(need_weights):
    # Inputs of 1000: per-head q . k reaches ~1e6, far past float16's 65504, so
    # the scores must be formed in float32. The reference is causal attention in
    # float64 on the module's own float16 projections.
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H).half().eval()
    with torch.no_grad():
        mha.in_proj.bias.normal_()
    x = (torch.randn(B, N, D) * 1000).half()
    out, _ = mha(x, is_causal=True, need_weights=need_weights)
    q, k, v = (t.double().view(B, N, H, D // H).transpose(1, 2) for t in mha.in_proj(x).chunk(3, dim=-1))
    assert (q @ k.transpose(-2, -1)).abs().max() > 65504
    attended = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    attended = attended.transpose(1, 2).reshape(B, N, D)
    want = torch.nn.functional.linear(attended, mha.out_proj.weight.double(), mha.out_proj.bias.double())
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    assert_close(out.double(), want, rtol=1e-2, atol=1e-2 * want.abs().max().item())
    # PyTorch in float16 on the same float16 projections: SDPA, then out_proj.
    q, k, v = (t.half() for t in (q, k, v))
    baseline = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    baseline = mha.out_proj(baseline.transpose(1, 2).reshape(B, N, D))
    ratio = assert_within_baseline(out, baseline, want)
    print(f"multi-head float16 past 65504: ratio {ratio:.3g}")


@pytest.mark.parametrize("need_weights", [False, True])
def test_causal_output_ignores_future_tokens(need_weights):
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H).eval()
    x = torch.randn(B, N, D)
    changed = x.clone()
    changed[:, 3:] = torch.randn(B, N - 3, D)  # rewrite tokens 3, 4
    before, _ = mha(x, is_causal=True, need_weights=need_weights)
    after, _ = mha(changed, is_causal=True, need_weights=need_weights)
    assert_close(after[:, :3], before[:, :3])
    assert not torch.allclose(after[:, 3:], before[:, 3:])


@pytest.mark.parametrize("need_weights", [False, True])
def test_padded_keys_never_change_real_outputs(need_weights):
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H).eval()
    query, memory = torch.randn(B, N, D), torch.randn(B, M, D)
    key_mask = torch.ones(B, M, dtype=torch.bool)
    key_mask[:, 4:] = False
    out, _ = mha(query, memory, key_mask=key_mask, need_weights=need_weights)
    garbage = memory.clone()
    garbage[:, 4:] = 1e4 * torch.randn(B, M - 4, D)
    out2, _ = mha(query, garbage, key_mask=key_mask, need_weights=need_weights)
    assert_close(out2, out)
    truncated, _ = mha(query, memory[:, :4], need_weights=need_weights)  # as if never padded
    assert_close(out, truncated)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
def test_masks_hold_at_huge_scores(bias, need_weights):
    # The key rows of in_proj are minus its query rows, so in every head a token
    # scores -|q_t|^2 / sqrt(d) against itself: about -1e9 and below for inputs of
    # 1e5 (float32). Token 0 of sequence 0 (causal) and token 4 of sequence 1
    # (left padded) may see only themselves. The keys hidden from them are then
    # set to -10 times their input, so those keys score +10 |q|^2 / sqrt(d) and
    # carry huge values. With -inf masking nothing they must not see moves; a
    # fill of -1e4 (or -1e9), from a boolean or a float mask, would leak.
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H).eval()
    with torch.no_grad():
        mha.in_proj.weight[D : 2 * D] = -mha.in_proj.weight[:D]
        mha.in_proj.bias.normal_()
        mha.in_proj.bias[D : 2 * D] = -mha.in_proj.bias[:D]
    x = torch.randn(B, N, D) * 1e5
    key_mask = torch.tensor([[True] * N, [False] * (N - 1) + [True]])
    attn_mask = torch.randn(N, N) if bias else None  # a finite float mask joins the -inf
    kwargs = dict(attn_mask=attn_mask, key_mask=key_mask, is_causal=True, need_weights=need_weights)
    out, weights = mha(x, **kwargs)
    hidden = x.clone()
    hidden[0, 3:] = -10 * x[0, 0]  # the future of tokens 0..2
    hidden[1, : N - 1] = -10 * x[1, N - 1]  # the left padding
    moved, _ = mha(hidden, **kwargs)
    assert torch.isfinite(out).all() and torch.isfinite(moved).all()
    tol = dict(rtol=1e-5, atol=1e-5 * out.abs().max().item())
    assert_close(moved[0, :3], out[0, :3], **tol)
    assert_close(moved[1, N - 1], out[1, N - 1], **tol)
    if need_weights:
        assert torch.equal(weights[0, :, 0], torch.eye(N)[0].expand(H, N))
        assert torch.equal(weights[1, :, N - 1], torch.eye(N)[N - 1].expand(H, N))


def test_dropout_only_in_training():
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H, dropout=0.5)
    x = torch.randn(B, N, D)
    mha.eval()
    a, w = mha(x, need_weights=True)
    b, _ = mha(x)
    assert_close(a, b)
    assert_close(w.sum(-1), torch.ones(B, H, N))
    mha.train()
    for need_weights in (False, True):
        c, _ = mha(x, need_weights=need_weights)
        d, _ = mha(x, need_weights=need_weights)
        assert not torch.allclose(c, d)


def test_from_torch_keeps_dtype_mode_and_bias_flag():
    mha = torch_mha(bias=False, batch_first=False, dtype=torch.float64)
    mha.train()
    ours = MultiHeadAttention.from_torch(mha)
    assert ours.training and ours.out_proj.bias is None
    assert ours.in_proj.weight.dtype == torch.float64
    ours.eval(), mha.eval()
    x = torch.randn(B, N, D, dtype=torch.float64)
    assert_close(ours(x)[0], run_torch(mha, x, x, x)[0])


def test_scale_uses_head_width():
    """Written out here: softmax(q k^T / sqrt(d)) with d = D / H, not sqrt(D)."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H, bias=False).eval()
    x = torch.randn(1, N, D)
    w_q, w_k, _ = mha.in_proj.weight.chunk(3)
    q = (x @ w_q.T).view(1, N, H, D // H).transpose(1, 2)
    k = (x @ w_k.T).view(1, N, H, D // H).transpose(1, 2)
    expected = torch.softmax(q @ k.transpose(-2, -1) / (D // H) ** 0.5, dim=-1)
    assert_close(mha(x, need_weights=True)[1], expected)


# ----------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(d_model=10, n_heads=4), ValueError, r"n_heads must be a divisor of d_model = 10, got 4"),
        (dict(d_model=0, n_heads=1), ValueError, r"d_model must be an int > 0, got 0"),
        (dict(d_model=8, n_heads=2.5), ValueError, r"n_heads must be an int > 0, got 2.5"),
        (dict(d_model=8, n_heads=2, dropout=1.0), ValueError, r"dropout must be a float in \[0, 1\), got 1.0"),
        (dict(d_model=8, n_heads=2, kdim=-3), ValueError, r"kdim must be an int > 0, got -3"),
    ],
)
def test_constructor_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        MultiHeadAttention(**kwargs)


def _call_errors():
    x = torch.randn(B, N, D)
    mem = torch.randn(B, M, D)
    return [
        (dict(query=[1.0]), TypeError, r"query must be a torch.float32 tensor \(B, N, 16\) on cpu, got \[1.0\]"),
        (dict(query=x.long()), TypeError, r"query must be a torch.float32 tensor .*, got torch.int64"),
        (dict(query=x[0]), ValueError, r"query must be a torch.float32 tensor \(B, N, 16\) on cpu, got torch.float32 \(5, 16\)"),
        (dict(query=torch.randn(B, N, 8)), ValueError, r"query must be .* \(B, N, 16\) on cpu, got torch.float32 \(2, 5, 8\)"),
        (dict(query=x, key=torch.randn(B, M, 8)), ValueError, r"key must be a torch.float32 tensor \(2, M, 16\) on cpu, got torch.float32 \(2, 7, 8\)"),
        (dict(query=x, key=mem, value=torch.randn(B, M)), ValueError, r"value must be a torch.float32 tensor \(2, 7, 16\) on cpu, got torch.float32 \(2, 7\)"),
        (dict(query=x, key=torch.randn(3, M, D)), ValueError, r"key must be .* \(2, M, 16\) on cpu, got torch.float32 \(3, 7, 16\)"),
        (dict(query=x, key=mem, value=torch.randn(B, 6, D)), ValueError, r"value must be .* \(2, 7, 16\) on cpu, got torch.float32 \(2, 6, 16\)"),
        (dict(query=x, attn_mask=[[True]]), TypeError, r"attn_mask must be a torch.bool or torch.float32 tensor .* got \[\[True\]\]"),
        (dict(query=x, attn_mask=torch.ones(N, N, dtype=torch.int64)), TypeError, r"attn_mask must be a torch.bool or torch.float32 tensor \(broadcasting to 2, 4, 5, 5\) on cpu, got torch.int64"),
        (dict(query=x, attn_mask=torch.ones(N, N, dtype=torch.float64)), TypeError, r"attn_mask must be a torch.bool or torch.float32 .* got torch.float64"),
        (dict(query=x, key=mem, attn_mask=torch.ones(N, N, dtype=torch.bool)), ValueError, r"attn_mask must be .* \(broadcasting to 2, 4, 5, 7\) on cpu, got torch.bool \(5, 5\)"),
        (dict(query=x, attn_mask=torch.ones(B, 3, N, N, dtype=torch.bool)), ValueError, r"attn_mask must be .* got torch.bool \(2, 3, 5, 5\)"),
        (dict(query=x, attn_mask=torch.ones(N, dtype=torch.bool)), ValueError, r"attn_mask must be .* got torch.bool \(5,\)"),
        (dict(query=x, key_mask=torch.ones(B, N)), TypeError, r"key_mask must be a torch.bool tensor \(2, 5\) on cpu, got torch.float32"),
        (dict(query=x, key=mem, key_mask=torch.ones(B, N, dtype=torch.bool)), ValueError, r"key_mask must be a torch.bool tensor \(2, 7\) on cpu, got torch.bool \(2, 5\)"),
    ]


@pytest.mark.parametrize("kwargs, error, match", _call_errors())
@pytest.mark.parametrize("need_weights", [False, True])
def test_forward_errors(kwargs, error, match, need_weights):
    mha = MultiHeadAttention(D, H)
    here = torch.get_default_device()  # the cases are made on the CPU, at collection
    kwargs = {k: v.to(here) if torch.is_tensor(v) else v for k, v in kwargs.items()}
    query = kwargs.pop("query")
    with pytest.raises(error, match=match):
        mha(query, **kwargs, need_weights=need_weights)


def test_from_torch_errors():
    with pytest.raises(ValueError, match=r"mha must be an nn.MultiheadAttention .*, got Linear"):
        MultiHeadAttention.from_torch(nn.Linear(4, 4))
    with pytest.raises(ValueError, match=r"mha must be .* without add_bias_kv or add_zero_attn, got MultiheadAttention"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, add_bias_kv=True))


# ----------------------------------------------------------------------------
# The file stands alone
# ----------------------------------------------------------------------------




# ----------------------------------------------------------------------------
# The page's exercises
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("n_heads", [1, 2, 4, 8])
def test_exercise_parameter_count(n_heads):
    mha = MultiHeadAttention(D, n_heads)
    assert sum(p.numel() for p in mha.parameters()) == 4 * D * D + 4 * D


def test_exercise_average_weights():
    mha = torch_mha()
    ours = MultiHeadAttention.from_torch(mha)
    x = torch.randn(B, N, D)
    _, averaged = mha(x, x, x, need_weights=True, average_attn_weights=True)
    _, weights = ours(x, need_weights=True)
    assert_close(weights.mean(dim=1), averaged)


def test_exercise_one_head():
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, 1).eval()
    x = torch.randn(B, N, D)
    w_q, w_k, w_v = mha.in_proj.weight.chunk(3)
    b_q, b_k, b_v = mha.in_proj.bias.chunk(3)
    q, k, v = x @ w_q.T + b_q, x @ w_k.T + b_k, x @ w_v.T + b_v
    weights = torch.softmax(q @ k.transpose(-2, -1) / D**0.5, dim=-1)
    expected = (weights @ v) @ mha.out_proj.weight.T + mha.out_proj.bias
    assert_close(mha(x)[0], expected)


def test_errors_for_module_dtype_devices_and_dropout():
    mha = MultiHeadAttention(D, H)
    x, mem = torch.randn(B, N, D), torch.randn(B, M, D)
    with pytest.raises(TypeError, match=r"query must be a torch.float32 tensor .*, got torch.float64"):
        mha(x.double())
    with pytest.raises(TypeError, match=r"value must be a torch.float32 tensor .*, got torch.float64"):
        mha(x, mem, mem.double())
    with pytest.raises(ValueError, match=r"key must be .* on cpu, got torch.float32 \(2, 7, 16\) on meta"):
        mha(x, mem.to("meta"), mem)
    with pytest.raises(ValueError, match=r"attn_mask must be .* on cpu, got torch.bool \(5, 5\) on meta"):
        mha(x, attn_mask=torch.ones(N, N, dtype=torch.bool, device="meta"))
    with pytest.raises(ValueError, match=r"key_mask must be .* on cpu, got torch.bool \(2, 5\) on meta"):
        mha(x, key_mask=torch.ones(B, N, dtype=torch.bool, device="meta"))
    with pytest.raises(ValueError, match=r"dropout must be a float in \[0, 1\), got -0.1"):
        MultiHeadAttention(D, H, dropout=-0.1)
