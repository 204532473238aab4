"""Tests for snippets/modern/gates_and_caps.py, with torch alone.

Oracles: the equations written out here. Soft-capped attention:
softmax(c tanh(QK^T / (c sqrt d)) + mask) V with a small cap, so that a cap in
the wrong place (after the mask, after the softmax) changes the numbers.
Gated attention: O = (concat_h Attn_h(X) * sigmoid(X W_g)) W_o, head by head.
The comparisons with Hugging Face's Qwen3NextAttention and Gemma2Attention
are in tests/test_modern_transformers.py.
"""

from __future__ import annotations

import math
import types

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

from snippets.modern.modern_block import DecoderAttention
from snippets.modern.gates_and_caps import OutputGate, SoftCap, softcap, softcap_attention, split_fused_q_gate
import transformers_support
from tolerance import assert_within_baseline


def qkv(b=2, h=3, n=5, m=7, d=4, dtype=torch.float64, seed=0, spread=1.0):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    q = torch.randn(b, h, n, d, generator=g, dtype=dtype) * spread
    k = torch.randn(b, h, m, d, generator=g, dtype=dtype) * spread
    v = torch.randn(b, h, m, d, generator=g, dtype=dtype)
    return q, k, v


def random_mask(n, m, seed=1):
    mask = torch.rand(n, m, generator=torch.Generator(device=torch.get_default_device()).manual_seed(seed)) > 0.4
    mask[:, 0] = True
    return mask


def randomised(module: nn.Module, seed: int = 0) -> nn.Module:
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5 + (1.0 if p.dim() == 1 else 0.0))
    return module


# --- soft-capping ------------------------------------------------------------------------


def test_softcap_is_c_tanh_s_over_c():
    s = torch.linspace(-300, 300, 41, dtype=torch.float64)
    assert_close(softcap(s, 50.0), 50.0 * torch.tanh(s / 50.0), rtol=0, atol=0)
    assert softcap(s, 50.0).abs().max() < 50.0
    small = torch.tensor([1e-3, -2e-3], dtype=torch.float64)
    assert_close(softcap(small, 50.0), small, rtol=1e-6, atol=0)  # the identity near 0


@pytest.mark.parametrize("cap", [0.8, 2.0])
def test_softcap_attention_equals_its_equation(cap):
    """Cap, then mask, then softmax; a small cap makes the order visible."""
    q, k, v = qkv(spread=2.0)
    mask = random_mask(5, 7)
    scores = cap * torch.tanh((q @ k.transpose(-2, -1)) / 2.0 / cap)
    scores = scores + torch.zeros(5, 7, dtype=torch.float64).masked_fill(~mask, float("-inf"))
    expected = scores.softmax(-1) @ v
    assert_close(softcap_attention(q, k, v, cap=cap, attn_mask=mask), expected, rtol=1e-12, atol=1e-12)


def test_masked_keys_get_no_weight_even_with_a_small_cap():
    """Capping after the mask would turn -inf into -c and leak weight to hidden keys."""
    q, k, _ = qkv(b=1, h=1, n=3, m=4)
    v = torch.eye(4, dtype=torch.float64).view(1, 1, 4, 4)  # the output row is the weight row
    mask = torch.tensor([[True, False, False, False], [True, True, False, False], [True, True, True, False]])
    weights = softcap_attention(q, k, v, cap=0.5, attn_mask=mask)[0, 0]
    assert torch.equal(weights[~mask], torch.zeros(int((~mask).sum()), dtype=torch.float64))
    assert_close(weights.sum(-1), torch.ones(3, dtype=torch.float64))


def test_large_cap_is_plain_attention():
    q, k, v = qkv()
    assert_close(softcap_attention(q, k, v, cap=1e7), F.scaled_dot_product_attention(q, k, v), rtol=1e-10, atol=1e-10)


def test_softcap_fully_masked_row_returns_zeros_with_finite_gradients():
    q, k, v = (t.clone().requires_grad_() for t in qkv(n=3, m=4))
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[2] = False
    out = softcap_attention(q, k, v, cap=5.0, attn_mask=mask)
    assert torch.equal(out[..., 2, :], torch.zeros_like(out[..., 2, :]))
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_softcap_gradcheck():
    inputs = tuple(t.clone().requires_grad_() for t in qkv(b=1, h=1, n=3, m=3, d=2))
    mask = random_mask(3, 3)
    assert torch.autograd.gradcheck(lambda a, b, c: softcap_attention(a, b, c, cap=1.5, attn_mask=mask), inputs)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_softcap_half_precision_huge_logits(dtype):
    q, k, v = qkv(dtype=torch.float32, spread=200.0)  # raw scores ~ 1e5: inf in float16
    out = softcap_attention(q.to(dtype), k.to(dtype), v.to(dtype), cap=50.0, attn_mask=random_mask(5, 7))
    assert out.dtype == dtype and torch.isfinite(out).all()


def test_exercise_softcap_values_for_gemma2():
    """Exercise 1: with c = 50, scores 10, 25, 50, 100 come out as 9.87, 23.1, 38.1, 48.2."""
    got = softcap(torch.tensor([10.0, 25.0, 50.0, 100.0], dtype=torch.float64), 50.0)
    assert [round(x, 1) for x in got.tolist()] == [9.9, 23.1, 38.1, 48.2]
    assert round(got[0].item(), 2) == 9.87


def test_exercise_softcap_slope():
    """Exercise 3: d/ds c tanh(s / c) = 1 - tanh(s / c)^2; 0.42 at s = c, 0.07 at s = 2c."""
    s = torch.tensor([0.0, 50.0, 100.0], dtype=torch.float64, requires_grad=True)
    softcap(s, 50.0).sum().backward()
    assert_close(s.grad, 1 - torch.tanh(s.detach() / 50.0) ** 2)
    assert [round(x, 2) for x in s.grad.tolist()] == [1.0, 0.42, 0.07]


def test_softcap_plugs_into_decoder_attention():
    attn = randomised(DecoderAttention(8, 2, attend=SoftCap(1.0), rope_base=None)).double()
    x = torch.randn(1, 4, 8, dtype=torch.float64) * 3
    q = (x @ attn.q_proj.weight.T).view(1, 4, 2, 4).transpose(1, 2)
    k = (x @ attn.k_proj.weight.T).view(1, 4, 2, 4).transpose(1, 2)
    v = (x @ attn.v_proj.weight.T).view(1, 4, 2, 4).transpose(1, 2)
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    heads = softcap_attention(q, k, v, cap=1.0, attn_mask=causal).transpose(1, 2).reshape(1, 4, 8)
    assert_close(attn(x), heads @ attn.o_proj.weight.T, rtol=1e-12, atol=1e-12)


# --- the output gate ------------------------------------------------------------------------


def gated_reference(attn: DecoderAttention, x):
    """O = (concat_h softmax(q_h k_h^T / sqrt d + causal) v_h * sigmoid(x W_g)) W_o, no RoPE."""
    n, d = x.shape[1], attn.d_head
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    gate = torch.sigmoid(x @ attn.output_gate.gate_proj.weight.T)  # (B, N, H*d) or (B, N, H)
    heads = []
    for h in range(attn.n_heads):
        cols = slice(h * d, (h + 1) * d)
        qh, kh, vh = (x @ p.weight[cols].T for p in (attn.q_proj, attn.k_proj, attn.v_proj))
        scores = (qh @ kh.transpose(-2, -1) / math.sqrt(d)).masked_fill(~causal, float("-inf"))
        out_h = scores.softmax(-1) @ vh  # (B, N, d)
        g = gate[..., cols] if attn.output_gate.per == "element" else gate[..., h : h + 1]
        heads.append(out_h * g)
    return torch.cat(heads, dim=-1) @ attn.o_proj.weight.T


@pytest.mark.parametrize("per", ["element", "head"])
def test_gated_attention_equals_its_equation(per):
    d_model, h = 12, 3  # D = H * d, so a gate after o_proj would still run
    attn = randomised(DecoderAttention(d_model, h, rope_base=None, output_gate=OutputGate(d_model, h, 4, per=per))).double()
    x = torch.randn(2, 5, d_model, dtype=torch.float64)
    assert_close(attn(x), gated_reference(attn, x), rtol=1e-12, atol=1e-12)


def test_gate_of_one_gives_back_plain_attention():
    torch.manual_seed(0)
    plain = randomised(DecoderAttention(8, 2, 1)).double()
    gated = DecoderAttention(8, 2, 1, output_gate=OutputGate(8, 2, 4, bias=True)).double()
    gated.load_state_dict(plain.state_dict(), strict=False)
    with torch.no_grad():
        gated.output_gate.gate_proj.weight.zero_()
        gated.output_gate.gate_proj.bias.fill_(60.0)  # sigmoid(60) rounds to 1 in float64
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    assert torch.equal(gated(x), plain(x))
    with torch.no_grad():
        gated.output_gate.gate_proj.bias.fill_(-60.0)  # a closed gate: nothing gets through
    assert_close(gated(x), torch.zeros(2, 5, 8, dtype=torch.float64), rtol=0, atol=1e-20)


def test_gate_depends_on_the_query_token_only():
    """The gate for token i is computed from x_i: changing x_j (j != i) moves it not."""
    gate = randomised(OutputGate(8, 2, 4)).double()
    x = torch.randn(1, 4, 8, dtype=torch.float64)
    out = torch.ones(1, 4, 8, dtype=torch.float64)  # the output is the gate itself
    y = x.clone()
    y[:, 3] += 1.0
    assert torch.equal(gate(x, out)[:, :3], gate(y, out)[:, :3])
    assert not torch.equal(gate(x, out)[:, 3], gate(y, out)[:, 3])


def test_split_fused_q_gate_layout():
    h, d, d_model = 3, 2, 5
    rows = torch.arange(h * 2 * d, dtype=torch.float64).unsqueeze(-1).expand(-1, d_model)
    q_w, g_w = split_fused_q_gate(rows, h, d)
    assert q_w[:, 0].tolist() == [0, 1, 4, 5, 8, 9]  # per head: first d rows are the query
    assert g_w[:, 0].tolist() == [2, 3, 6, 7, 10, 11]  # next d rows are the gate


def test_exercise_gate_parameters():
    """Exercise 2: an elementwise gate adds D * H * d weights, a headwise one D * H."""
    d_model, h, d = 64, 8, 16
    assert sum(p.numel() for p in OutputGate(d_model, h, d).parameters()) == d_model * h * d
    assert sum(p.numel() for p in OutputGate(d_model, h, d, per="head").parameters()) == d_model * h


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gated_attention_half_precision_large_inputs(dtype):
    attn = randomised(DecoderAttention(8, 2, 1, qk_norm="head", output_gate=OutputGate(8, 2, 4)))
    x = torch.randn(2, 5, 8) * 3e3
    out = attn.to(dtype)(x.to(dtype))
    assert out.dtype == dtype and torch.isfinite(out).all()


# --- bad input -------------------------------------------------------------------------------


def test_softcap_takes_integer_scores():
    """No dtype check on the scores: integers are promoted by s / c."""
    s = torch.arange(-6, 7)
    torch.testing.assert_close(softcap(s, 4.0), softcap(s.double(), 4.0).float())


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: softcap(torch.ones(2), 0.0), ValueError, r"cap must be a finite number > 0.0, got 0.0"),
        (lambda: SoftCap(float("inf"))(*qkv()), ValueError, r"cap must be a finite number > 0.0, got inf"),
        (lambda: softcap_attention(torch.ones(2, 3, 4), *qkv()[1:], cap=1.0), ValueError,
         r"q must be torch\.\w+ \(None, None, None, None\).*got torch\.\w+ \(2, 3, 4\)"),
        (lambda: softcap_attention(qkv()[0], torch.ones(2, 3, 7, 5, dtype=torch.float64), qkv()[2], cap=1.0), ValueError,
         r"k must be torch\.\w+ \(2, 3, None, 4\).*got torch\.\w+ \(2, 3, 7, 5\)"),
        (lambda: softcap_attention(qkv()[0].float(), *qkv()[1:], cap=1.0), ValueError,
         r"k must be torch.float32 .* on .*, got torch.float64 .* on"),
        (lambda: softcap_attention(*qkv()[:2], qkv()[2].to("meta"), cap=1.0), ValueError, r"v must be .* on cpu, got .* on meta"),
        (lambda: softcap_attention(*qkv(), cap=1.0, scale=-1.0), ValueError, r"scale must be a finite number > 0.0, got -1.0"),
        (lambda: SoftCap(2.0)(*qkv(), attn_mask=torch.ones(5, 7, dtype=torch.bool, device="meta")), ValueError,
         r"attn_mask must be bool and broadcast to \(2, 3, 5, 7\) on cpu, got torch.bool \(5, 7\) on meta"),
        (lambda: softcap_attention(*qkv(), cap=1.0, attn_mask=torch.ones(5, 7, dtype=torch.long)), ValueError,
         r"attn_mask must be bool and broadcast to .* got torch.int64"),
        (lambda: softcap_attention(*qkv(), cap=1.0, attn_mask=torch.ones(7, 5, dtype=torch.bool)), ValueError,
         r"attn_mask must be bool and broadcast to \(2, 3, 5, 7\) on cpu, got torch.bool \(7, 5\) on cpu"),
        (lambda: OutputGate(8, 2, 4)([1.0], torch.ones(1, 3, 8)), TypeError, r"x must be a float tensor, got \["),
        (lambda: OutputGate(8, 2, 4)(torch.ones(1, 3, 8), torch.ones(1, 3, 8, dtype=torch.long)), TypeError,
         r"out must be a float tensor, got torch.int64"),
        (lambda: OutputGate(8, 2, 4)(torch.ones(1, 3, 7), torch.ones(1, 3, 8)), ValueError,
         r"x must be torch\.\w+ \(None, None, 8\).*got torch\.\w+ \(1, 3, 7\)"),
        (lambda: OutputGate(8, 2, 4)(torch.ones(1, 3, 8, device="meta"), torch.ones(1, 3, 8, device="meta")), ValueError,
         r"x must be .* on cpu, got .* on meta"),
        (lambda: OutputGate(8, 2, 4)(torch.ones(1, 3, 8), torch.ones(1, 3, 8, dtype=torch.float64)), ValueError,
         r"out must be torch.float32 .* on .*, got torch.float64 .* on"),
        (lambda: split_fused_q_gate(torch.ones(12, 4), -2, 3), ValueError, r"n_heads must be a finite number > 0.0, got -2"),
        (lambda: split_fused_q_gate(torch.ones(12, 4), 2, 0), ValueError, r"d_head must be a finite number > 0.0, got 0"),
        (lambda: OutputGate(8, 0, 4), ValueError, r"n_heads must be a finite number > 0.0, got 0"),
        (lambda: OutputGate(8, 2, 4, per="channel"), ValueError, r"per must be 'element' or 'head', got 'channel'"),
        (lambda: OutputGate(8, 2, 4)(torch.ones(1, 3, 8), torch.ones(1, 3, 6)), ValueError,
         r"out must be torch\.\w+ \(1, 3, 8\).*got torch\.\w+ \(1, 3, 6\)"),
        (lambda: split_fused_q_gate(torch.ones(10, 4), 2, 3), ValueError,
         r"weight must be torch\.\w+ \(12, None\).*got torch\.\w+ \(10, 4\)"),
    ],
)
def test_bad_input_raises_named_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()


# --- planted-bug classes: extreme scores, half precision, the cap's bound -------------------


def test_large_cap_is_shift_invariant_far_below_zero():
    """A cap of 1e14 is the identity on these scores; shift every score by -1e10
    and masked keys must still get exactly nothing (masking before the cap, or
    a finite fill, gives them weight)."""
    q, k, v = qkv()
    mask = torch.ones(5, 7, dtype=torch.bool).tril(2)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    scale = q.shape[-1] ** -0.5
    q2 = torch.cat((q, torch.full_like(q[..., :1], -1e10 / scale)), -1)
    k2 = torch.cat((k, torch.ones_like(k[..., :1])), -1)
    got = softcap_attention(q2, k2, v, cap=1e14, attn_mask=mask, scale=scale)
    assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("spread", [1.0, 300.0])
def test_softcap_attention_half_precision_within_rounding_of_float64(dtype, spread):
    """Same rounded inputs, twice the rounding error at most; spread 300 makes
    raw logits overflow float16 before the cap."""
    g = torch.Generator(device=torch.get_default_device()).manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 16, generator=g) * s for s in (spread, spread, 1.0))
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    exact = softcap_attention(q.double(), k.double(), v.double(), cap=50.0)
    got = softcap_attention(q, k, v, cap=50.0).double()
    rounding = (exact.to(dtype).double() - exact).abs().max()
    assert (got - exact).abs().max() <= 2 * rounding + torch.finfo(dtype).eps


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("spread", [1.0, 300.0])
def test_softcap_attention_half_precision_within_twice_gemma2s_error(dtype, spread):
    """Gemma 2's own capped attention (transformers' eager kernel) in the same
    dtype on the same rounded inputs is the baseline; skipped without the
    library, except in CI."""
    if transformers_support.transformers is None and not transformers_support.IN_CI:
        pytest.skip("transformers is not installed")
    transformers_support.require_transformers()
    from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward
    g = torch.Generator(device=torch.get_default_device()).manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 16, generator=g) * s for s in (spread, spread, 1.0))
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    exact = softcap_attention(q.double(), k.double(), v.double(), cap=50.0)
    got = softcap_attention(q, k, v, cap=50.0)
    module = types.SimpleNamespace(num_key_value_groups=1, training=False, head_dim=16)
    baseline, _ = eager_attention_forward(module, q, k, v, None, scaling=16 ** -0.5, softcap=50.0)
    ratio = assert_within_baseline(got, baseline.transpose(1, 2), exact)
    print(f"softcap {dtype} spread {spread}: ratio {ratio:.3g}")


def test_the_cap_bounds_each_logit_but_not_the_weight_ratio():
    """What the page now says: capped logits stay inside (-c, c), so their gap
    is below 2c, yet raw 100 and 30 at c = 50 still give a ratio near 2e9."""
    raw = torch.tensor([100.0, 30.0, -1e6, 1e6], dtype=torch.float64)
    capped = softcap(raw, 50.0)
    assert capped.abs().max() <= 50.0  # tanh rounds to 1 in floating point far out
    assert capped[0].item() == pytest.approx(48.2, abs=0.05) and capped[1].item() == pytest.approx(26.9, abs=0.05)
    assert 1e9 < math.exp(capped[0] - capped[1]) < 3e9
    slope = 1 - torch.tanh(torch.tensor(200.0 / 50.0)) ** 2
    assert slope < 2e-3  # 0.0013 at 4c: the gradient does vanish far beyond the cap
