"""Proof for snippets/attention/grouped_query.py.

Proves: GroupedQueryAttention equals (a) ordinary multi-head attention on key
/value heads repeated with repeat_interleave, written out in this file, and (b)
F.scaled_dot_product_attention(..., enable_gqa=True); its written-out grouped kernel
equals its SDPA path under bool/float/key/causal masks, N != M; with H_kv = H
and weights copied it equals nn.MultiheadAttention; from_torch mean-pools the
key/value heads of each group (the GQA paper's conversion, written out here);
weights rows sum to 1, padded keys and future tokens change nothing, even at
scores of 1e9; finite in float32/bfloat16/float16, and in float16 past 65504
equal to float64; gradcheck in float64; the cache saving is H / H_kv;
the helper sections copied from multi_head.py are identical; every error message
is raised; the file runs alone from an empty folder.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from snippets.attention.grouped_query import GroupedQueryAttention, repeat_kv
from tolerance import assert_within_baseline

ROOT = Path(__file__).resolve().parents[1]
SNIPPET = ROOT / "snippets" / "attention" / "grouped_query.py"


def heads(x: torch.Tensor, h: int) -> torch.Tensor:
    b, n, _ = x.shape
    return x.view(b, n, h, -1).transpose(1, 2)


def reference(m: GroupedQueryAttention, x: torch.Tensor, mask=None) -> torch.Tensor:
    """Multi-head attention after copying each key/value head G times."""
    q = heads(m.q_proj(x), m.n_heads)
    k = heads(m.k_proj(x), m.n_kv_heads).repeat_interleave(m.n_heads // m.n_kv_heads, dim=1)
    v = heads(m.v_proj(x), m.n_kv_heads).repeat_interleave(m.n_heads // m.n_kv_heads, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    b, _, n, _ = out.shape
    return m.out_proj(out.transpose(1, 2).reshape(b, n, -1))


@pytest.mark.parametrize("n_kv_heads", [1, 2, 4, 8])
@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_equals_repeated_heads(n_kv_heads, need_weights, dtype):
    torch.manual_seed(0)
    m = GroupedQueryAttention(32, 8, n_kv_heads).to(dtype)
    x = torch.randn(2, 7, 32, dtype=dtype)
    mask = torch.ones(7, 7, dtype=torch.bool).tril()
    out, _ = m(x, is_causal=True, need_weights=need_weights)
    torch.testing.assert_close(out, reference(m, x, mask))


def test_equals_sdpa_enable_gqa():
    torch.manual_seed(0)
    m = GroupedQueryAttention(24, 6, 2)
    x = torch.randn(2, 5, 24)
    q, k, v = heads(m.q_proj(x), 6), heads(m.k_proj(x), 2), heads(m.v_proj(x), 2)
    expected = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    expected = m.out_proj(expected.transpose(1, 2).reshape(2, 5, 24))
    out_explicit, _ = m(x, need_weights=True)
    torch.testing.assert_close(out_explicit, expected)
    torch.testing.assert_close(m(x)[0], expected)


def test_repeat_kv_order():
    x = torch.arange(2.0).view(1, 2, 1, 1)  # two key/value heads holding 0 and 1
    assert repeat_kv(x, 3).flatten().tolist() == [0, 0, 0, 1, 1, 1]


def test_paths_agree_under_masks():
    torch.manual_seed(0)
    m = GroupedQueryAttention(16, 4, 2)
    query, key = torch.randn(2, 3, 16), torch.randn(2, 6, 16)
    key_mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    bool_mask = torch.rand(2, 4, 3, 6) > 0.3
    float_mask = torch.randn(3, 6)
    for kwargs in (
        {"attn_mask": bool_mask, "key_mask": key_mask},
        {"attn_mask": float_mask, "is_causal": True},
        {"key_mask": key_mask, "is_causal": True},
    ):
        fast, _ = m(query, key, **kwargs)
        slow, weights = m(query, key, need_weights=True, **kwargs)
        torch.testing.assert_close(fast, slow)
        row_sums = weights.sum(-1)
        torch.testing.assert_close(row_sums, torch.where(row_sums == 0, 0.0, 1.0))


def test_fully_masked_query_returns_bias_only():
    torch.manual_seed(0)
    m = GroupedQueryAttention(8, 4, 2)
    x = torch.randn(1, 3, 8)
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[1] = False
    for need_weights in (False, True):
        out, _ = m(x, attn_mask=mask, need_weights=need_weights)
        # attention output zero -> only the out_proj bias remains
        torch.testing.assert_close(out[0, 1], m.out_proj.bias)


def test_matches_nn_multihead_attention():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    with torch.no_grad():
        mha.in_proj_bias.normal_()
        mha.out_proj.bias.normal_()
    m = GroupedQueryAttention.from_torch(mha, n_kv_heads=4)
    x = torch.randn(2, 5, 16)
    key_mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    expected, expected_w = mha(x, x, x, key_padding_mask=~key_mask, average_attn_weights=False)
    out, w = m(x, key_mask=key_mask, need_weights=True)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(w, expected_w)
    torch.testing.assert_close(m(x, key_mask=key_mask)[0], expected)


def test_from_torch_mean_pools_groups():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, batch_first=True)
    with torch.no_grad():
        mha.in_proj_bias.normal_()
    m = GroupedQueryAttention.from_torch(mha, n_kv_heads=2)
    d = 4
    w_k = mha.in_proj_weight[16:32]
    b_v = mha.in_proj_bias[32:48]
    for kv in range(2):  # group kv holds query heads 2 kv and 2 kv + 1
        h0, h1 = 2 * kv, 2 * kv + 1
        pooled = (w_k[h0 * d:(h0 + 1) * d] + w_k[h1 * d:(h1 + 1) * d]) / 2
        torch.testing.assert_close(m.k_proj.weight[kv * d:(kv + 1) * d], pooled)
        pooled_b = (b_v[h0 * d:(h0 + 1) * d] + b_v[h1 * d:(h1 + 1) * d]) / 2
        torch.testing.assert_close(m.v_proj.bias[kv * d:(kv + 1) * d], pooled_b)
    torch.testing.assert_close(m.q_proj.weight, mha.in_proj_weight[:16])


def test_multi_query_has_one_kv_head_and_cache_saving():
    m = GroupedQueryAttention(64, 8, 1)
    assert m.k_proj.out_features == m.v_proj.out_features == 8
    x = torch.randn(1, 4, 64)
    k = heads(m.k_proj(x), m.n_kv_heads)
    full = GroupedQueryAttention(64, 8, 8)
    assert heads(full.k_proj(x), 8).numel() == 8 * k.numel()


def test_padded_keys_and_future_tokens_change_nothing():
    torch.manual_seed(0)
    m = GroupedQueryAttention(16, 4, 2)
    x = torch.randn(1, 6, 16)
    key_mask = torch.tensor([[True] * 4 + [False] * 2])
    out, _ = m(x, key_mask=key_mask)
    x2 = x.clone()
    x2[:, 4:] = torch.randn(1, 2, 16) * 10
    out2, _ = m(x2, key_mask=key_mask)
    torch.testing.assert_close(out[:, :4], out2[:, :4])
    out_c, _ = m(x, is_causal=True)
    out_c2, _ = m(x2, is_causal=True)
    torch.testing.assert_close(out_c[:, :4], out_c2[:, :4])
    assert not torch.allclose(out_c[:, 4:], out_c2[:, 4:])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("need_weights", [False, True])
def test_large_inputs_finite(dtype, need_weights):
    torch.manual_seed(0)
    m = GroupedQueryAttention(16, 4, 2).to(dtype)
    x = (torch.randn(1, 5, 16) * 100).to(dtype)
    out, _ = m(x, is_causal=True, need_weights=need_weights)
    assert out.dtype == dtype and torch.isfinite(out).all()


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
def test_masks_hold_at_huge_scores(bias, need_weights):
    # Each query head is minus its key/value head (W_q of head h = -W_k of
    # group h // G), so a token scores -|k_t|^2 / sqrt(d) against itself: about
    # -1e9 and below for inputs of 1e5 (float32). Token 0 of sequence 0 (causal)
    # and token 4 of sequence 1 (left padded) may see only themselves; the keys
    # hidden from them are set to -10 times their input, scoring
    # +10 |k|^2 / sqrt(d) with huge values. With -inf masking nothing they must
    # not see moves; a fill of -1e4 (or -1e9) would leak.
    torch.manual_seed(0)
    m = GroupedQueryAttention(16, 4, 2).eval()
    with torch.no_grad():
        m.k_proj.bias.normal_()
        m.q_proj.weight.copy_(-m.k_proj.weight.view(2, 1, 4, 16).expand(2, 2, 4, 16).reshape(16, 16))
        m.q_proj.bias.copy_(-m.k_proj.bias.view(2, 1, 4).expand(2, 2, 4).reshape(16))
    x = torch.randn(2, 5, 16) * 1e5
    key_mask = torch.tensor([[True] * 5, [False] * 4 + [True]])
    attn_mask = torch.randn(5, 5) if bias else None  # a finite float mask joins the -inf
    kwargs = dict(attn_mask=attn_mask, key_mask=key_mask, is_causal=True, need_weights=need_weights)
    out, weights = m(x, **kwargs)
    hidden = x.clone()
    hidden[0, 3:] = -10 * x[0, 0]  # the future of tokens 0..2
    hidden[1, :4] = -10 * x[1, 4]  # the left padding
    moved, _ = m(hidden, **kwargs)
    assert torch.isfinite(out).all() and torch.isfinite(moved).all()
    tol = dict(rtol=1e-5, atol=1e-5 * out.abs().max().item())
    torch.testing.assert_close(moved[0, :3], out[0, :3], **tol)
    torch.testing.assert_close(moved[1, 4], out[1, 4], **tol)
    if need_weights:
        assert torch.equal(weights[0, :, 0], torch.eye(5)[0].expand(4, 5))
        assert torch.equal(weights[1, :, 4], torch.eye(5)[4].expand(4, 5))


@pytest.mark.parametrize("need_weights", [False, True])
def test_float16_beyond_its_range_matches_float64(need_weights):
    # Inputs of 1000: the scores q . k reach ~1e6, far past float16's 65504, so
    # they must be formed in float32. The reference is the equation in float64
    # on the module's own float16 projections.
    torch.manual_seed(0)
    m = GroupedQueryAttention(16, 4, 2).half()
    x = (torch.randn(2, 5, 16) * 1000).half()
    out, _ = m(x, is_causal=True, need_weights=need_weights)
    q = heads(m.q_proj(x), 4).double()
    k = heads(m.k_proj(x), 2).double().repeat_interleave(2, dim=1)
    v = heads(m.v_proj(x), 2).double().repeat_interleave(2, dim=1)
    assert (q @ k.transpose(-2, -1)).abs().max() > 65504
    attended = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, 5, 16)
    want = F.linear(attended, m.out_proj.weight.double(), m.out_proj.bias.double())
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), want, rtol=1e-2, atol=1e-2 * want.abs().max().item())
    # PyTorch in float16 on the same float16 projections: SDPA with its own GQA.
    low = (heads(m.q_proj(x), 4), heads(m.k_proj(x), 2), heads(m.v_proj(x), 2))
    baseline = F.scaled_dot_product_attention(*low, is_causal=True, enable_gqa=True)
    baseline = m.out_proj(baseline.transpose(1, 2).reshape(2, 5, 16))
    ratio = assert_within_baseline(out, baseline, want)
    print(f"grouped-query float16 past 65504: ratio {ratio:.3g}")


def test_gradcheck_float64():
    torch.manual_seed(0)
    m = GroupedQueryAttention(8, 4, 2).double()
    x = torch.randn(1, 4, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: m(x, is_causal=True, need_weights=True)[0], (x,))


def test_dropout_only_in_training():
    torch.manual_seed(0)
    m = GroupedQueryAttention(8, 4, 2, dropout=0.5)
    x = torch.randn(1, 6, 8)
    m.eval()
    torch.testing.assert_close(m(x)[0], m(x)[0])
    m.train()
    assert not torch.allclose(m(x, need_weights=True)[0], m(x, need_weights=True)[0])


def _section(text: str, name: str) -> str:
    return re.search(rf"# --8<-- \[start:{name}\](.*?)# --8<-- \[end:{name}\]", text, re.S).group(1)


@pytest.mark.parametrize("name", ["split_heads", "merge_heads", "masked_softmax", "zero_empty_rows",
                                  "combine_masks", "check_inputs"])
def test_helper_copies_identical(name):
    mine = SNIPPET.read_text()
    theirs = (ROOT / "snippets" / "attention" / "multi_head.py").read_text()
    assert _section(mine, name) == _section(theirs, name)




@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        ((16, 4, 3), {}, r"n_kv_heads must be a divisor of n_heads = 4, got 3"),
        ((16, 3, 1), {}, r"n_heads must be a divisor of d_model = 16, got 3"),
        ((16, 4, 0), {}, r"n_kv_heads must be an int > 0, got 0"),
        ((16.0, 4, 2), {}, r"d_model must be an int > 0, got 16.0"),
        ((16, 4, 2), {"dropout": 1.0}, r"dropout must be a float in \[0, 1\), got 1.0"),
    ],
)
def test_init_errors(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        GroupedQueryAttention(*args, **kwargs)


def test_forward_errors():
    m = GroupedQueryAttention(16, 4, 2)
    x = torch.randn(2, 3, 16)
    cases = [
        (([1.0],), {}, TypeError, r"query must be a torch.float32 tensor \(B, N, 16\) on cpu, got \[1.0\]"),
        ((x.long(),), {}, TypeError, r"query must be a torch.float32 tensor .*, got torch.int64"),
        ((x[0],), {}, ValueError, r"query must be .* \(B, N, 16\) on cpu, got torch.float32 \(3, 16\)"),
        ((torch.randn(2, 3, 8),), {}, ValueError, r"query must be .* \(B, N, 16\) on cpu, got torch.float32 \(2, 3, 8\)"),
        ((x, torch.randn(1, 3, 16)), {}, ValueError, r"key must be .* \(2, M, 16\) on cpu, got torch.float32 \(1, 3, 16\)"),
        ((x, x, x[:, :2]), {}, ValueError, r"value must be .* \(2, 3, 16\) on cpu, got torch.float32 \(2, 2, 16\)"),
        ((x,), {"attn_mask": [[True]]}, TypeError, r"attn_mask must be a torch.bool or torch.float32 tensor .*, got \[\[True\]\]"),
        ((x,), {"attn_mask": torch.ones(3, 3, dtype=torch.long)}, TypeError,
         r"attn_mask must be a torch.bool or torch.float32 tensor \(broadcasting to 2, 4, 3, 3\) on cpu, got torch.int64"),
        ((x,), {"attn_mask": torch.ones(3, 4, dtype=torch.bool)}, ValueError,
         r"attn_mask must be .* \(broadcasting to 2, 4, 3, 3\) on cpu, got torch.bool \(3, 4\)"),
        ((x,), {"key_mask": torch.ones(2, 3)}, TypeError,
         r"key_mask must be a torch.bool tensor \(2, 3\) on cpu, got torch.float32"),
        ((x,), {"key_mask": torch.ones(2, 4, dtype=torch.bool)}, ValueError,
         r"key_mask must be a torch.bool tensor \(2, 3\) on cpu, got torch.bool \(2, 4\)"),
    ]
    for args, kwargs, exc, match in cases:
        with pytest.raises(exc, match=match):
            m(*args, **kwargs)


def test_helper_errors():
    with pytest.raises(ValueError, match=r"n_rep must be an int > 0, got 0"):
        repeat_kv(torch.randn(1, 2, 3, 4), 0)
    with pytest.raises(ValueError, match=r"mha must be an nn.MultiheadAttention .*, got Linear"):
        GroupedQueryAttention.from_torch(nn.Linear(2, 2), 1)
    with pytest.raises(ValueError, match=r"mha must be .* with kdim = vdim = embed_dim, .* got MultiheadAttention"):
        GroupedQueryAttention.from_torch(nn.MultiheadAttention(16, 4, kdim=8, vdim=8), 2)


@pytest.mark.parametrize("n_kv_heads, expected", [(32, 33_562_624), (8, 8_390_656), (1, 1_048_832)])
def test_exercise_kv_parameters(n_kv_heads, expected):
    with torch.device("meta"):  # count parameters without allocating 4096-wide matrices
        m = GroupedQueryAttention(4096, 32, n_kv_heads)
    count = sum(p.numel() for p in (*m.k_proj.parameters(), *m.v_proj.parameters()))
    assert count == expected


def test_errors_for_module_dtype_devices_dropout_and_repeat_kv():
    m = GroupedQueryAttention(16, 4, 2)
    x = torch.randn(2, 3, 16)
    with pytest.raises(TypeError, match=r"query must be a torch.float32 tensor .*, got torch.float64"):
        m(x.double())
    with pytest.raises(ValueError, match=r"value must be .* on cpu, got torch.float32 \(2, 3, 16\) on meta"):
        m(x, x, x.to("meta"))
    with pytest.raises(ValueError, match=r"attn_mask must be .* on cpu, got torch.float32 \(3, 3\) on meta"):
        m(x, attn_mask=torch.zeros(3, 3, device="meta"))
    with pytest.raises(ValueError, match=r"dropout must be a float in \[0, 1\), got None"):
        GroupedQueryAttention(16, 4, 2, dropout=None)
    with pytest.raises(ValueError, match=r"x must be a 4-D tensor \(B, H_kv, M, d\), got torch.Size\(\[2, 3, 4\]\)"):
        repeat_kv(torch.randn(2, 3, 4), 2)
    with pytest.raises(ValueError, match=r"x must be a 4-D tensor \(B, H_kv, M, d\), got \[1.0\]"):
        repeat_kv([1.0], 2)
