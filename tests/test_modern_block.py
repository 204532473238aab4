"""Tests for snippets/modern/modern_block.py, with torch alone.

Oracles: torch.nn.RMSNorm; the RMSNorm, SwiGLU, RoPE and grouped-query
attention equations written out here (a rotation matrix per plane, a loop over
heads); properties (scale invariance of QK-norm, causality, the zero-branch
identity of pre-norm). The comparisons with Hugging Face's LlamaDecoderLayer,
Qwen3DecoderLayer and Olmo2Attention are in tests/test_modern_transformers.py.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

from snippets.modern.modern_block import (
    DecoderAttention,
    DecoderLayer,
    RMSNorm,
    SwiGLU,
    apply_rotary,
    meta_to_half_split,
    rotary_tables,
    sdpa_attend,
    swiglu_width,
)
import transformers_support
from tolerance import assert_within_baseline

ROOT = Path(__file__).resolve().parents[1]
B, N, D, H, H_KV, D_FF = 2, 6, 16, 4, 2, 24


def randomised(module: nn.Module, seed: int = 0) -> nn.Module:
    """Every parameter random, norm weights around 1, so no weight hides a bug."""
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.4 + (1.0 if p.dim() == 1 else 0.0))
    return module


def shifted_input(*shape, dtype=torch.float64, seed=1):
    """Random tokens with a non-zero mean: RMSNorm and LayerNorm differ on them."""
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype) + 0.7


# --- RMSNorm ---------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(3, 8), (2, 5, 8), (8,)])
def test_rmsnorm_equals_nn_rmsnorm(shape):
    ours = randomised(RMSNorm(8, eps=1e-5)).double()
    ref = nn.RMSNorm(8, eps=1e-5).double()
    ref.weight.data.copy_(ours.weight.data)
    x = shifted_input(*shape)
    assert_close(ours(x), ref(x), rtol=1e-12, atol=1e-12)


def test_rmsnorm_equals_its_equation():
    ours = randomised(RMSNorm(8, eps=1e-6)).double()
    x = shifted_input(4, 8)
    rms = (x.pow(2).sum(-1, keepdim=True) / 8 + 1e-6).sqrt()
    assert_close(ours(x), x / rms * ours.weight, rtol=1e-12, atol=1e-12)


def test_rmsnorm_keeps_the_mean_unlike_layernorm():
    """No centring: a shift of the input is not removed, a positive scale is."""
    norm = RMSNorm(8, eps=1e-12).double()
    x = shifted_input(5, 8)
    assert_close(norm(3.0 * x), norm(x), rtol=1e-10, atol=1e-10)
    assert not torch.allclose(norm(x + 1.0), norm(x), atol=1e-3)
    assert not torch.allclose(norm(x), F.layer_norm(x, (8,), eps=1e-12), atol=1e-3)


def test_rmsnorm_gradcheck():
    norm = randomised(RMSNorm(5)).double()
    x = shifted_input(2, 3, 5).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: norm(t), (x,))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rmsnorm_half_precision_large_inputs(dtype):
    """Entries up to 3e4: their squares overflow float16 unless the norm upcasts."""
    norm = randomised(RMSNorm(16)).to(dtype)
    x = shifted_input(4, 16, dtype=torch.float32) * 2e4
    out = norm(x.to(dtype))
    assert out.dtype == dtype and torch.isfinite(out).all()
    ref = randomised(RMSNorm(16))(x.to(dtype).float())
    assert_close(out.float(), ref, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rmsnorm_half_precision_within_twice_llamas_error(dtype):
    """Hugging Face's LlamaRMSNorm in the same dtype, with the same rounded
    weight, is the baseline; skipped without the library, except in CI."""
    if transformers_support.transformers is None and not transformers_support.IN_CI:
        pytest.skip("transformers is not installed")
    transformers_support.require_transformers()
    norm = randomised(RMSNorm(16)).to(dtype)
    x = shifted_input(4, 16, dtype=torch.float32) * 2e4
    out = norm(x.to(dtype))
    from transformers.models.llama.modeling_llama import LlamaRMSNorm
    theirs = LlamaRMSNorm(16, eps=norm.eps).to(dtype)
    with torch.no_grad():
        theirs.weight.copy_(norm.weight)
    exact = RMSNorm(16).double()
    with torch.no_grad():
        exact.weight.copy_(norm.weight.double())
    ratio = assert_within_baseline(out, theirs(x.to(dtype)), exact(x.to(dtype).double()))
    print(f"rmsnorm {dtype}: ratio {ratio:.3g}")


def test_exercise_rmsnorm_is_layernorm_on_centred_input():
    """Exercise 2: on an input whose mean is zero, RMSNorm = LayerNorm without bias."""
    x = shifted_input(6, 8)
    x = x - x.mean(-1, keepdim=True)
    w = torch.randn(8, dtype=torch.float64)
    rms = RMSNorm(8, eps=1e-5).double()
    rms.weight.data.copy_(w)
    assert_close(rms(x), F.layer_norm(x, (8,), weight=w, eps=1e-5), rtol=1e-12, atol=1e-12)


# --- SwiGLU --------------------------------------------------------------------


def test_swiglu_equals_its_equation():
    mlp = randomised(SwiGLU(D, D_FF)).double()
    x = shifted_input(B, N, D)
    a = x @ mlp.gate_proj.weight.T
    gated = a * torch.sigmoid(a) * (x @ mlp.up_proj.weight.T)  # Swish_1(xW) * xV
    assert_close(mlp(x), gated @ mlp.down_proj.weight.T, rtol=1e-12, atol=1e-12)
    assert all(m.bias is None for m in (mlp.gate_proj, mlp.up_proj, mlp.down_proj))


def test_swiglu_width_of_llama_models():
    assert swiglu_width(4096) == 11008  # Llama 2 7B (and LLaMA 7B)
    assert swiglu_width(4096, 1024, 1.3) == 14336  # Llama 3 8B
    assert swiglu_width(5120) == 13824  # Llama 2 13B


def test_swiglu_with_two_thirds_width_has_the_parameters_of_a_4d_mlp():
    d = 96
    swiglu = SwiGLU(d, 8 * d // 3)
    mlp = nn.Sequential(nn.Linear(d, 4 * d, bias=False), nn.Linear(4 * d, d, bias=False))
    assert sum(p.numel() for p in swiglu.parameters()) == sum(p.numel() for p in mlp.parameters()) == 8 * d * d


# --- RoPE ----------------------------------------------------------------------


def rotation_reference(x, positions, rotary_dim, base):
    """Rotate plane (i, i + r/2) of each head by positions * base^(-2i/r) with a 2x2 matrix."""
    out = x.clone()
    half = rotary_dim // 2
    for i in range(half):
        theta = base ** (-2 * i / rotary_dim)
        for t, p in enumerate(positions.tolist()):
            a = p * theta
            rot = torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=x.dtype)
            pair = torch.stack((x[..., t, i], x[..., t, i + half]), dim=-1)  # (B, H, 2)
            turned = pair @ rot.T
            out[..., t, i], out[..., t, i + half] = turned[..., 0], turned[..., 1]
    return out


@pytest.mark.parametrize("rotary_dim", [8, 4, 2])
def test_rope_equals_rotation_matrices(rotary_dim):
    x = shifted_input(2, 3, 5, 8)
    positions = torch.tensor([0, 1, 4, 9, 30])
    cos, sin = rotary_tables(positions, rotary_dim, base=100.0)
    assert cos.shape == (5, rotary_dim // 2) and cos.dtype == torch.float64
    got = apply_rotary(x, cos, sin)
    assert_close(got, rotation_reference(x, positions, rotary_dim, 100.0), rtol=1e-12, atol=1e-12)
    assert torch.equal(got[..., rotary_dim:], x[..., rotary_dim:])  # partial rotary: the rest passes


def test_rope_scores_depend_only_on_the_offset():
    q, k = shifted_input(1, 1, 1, 8), shifted_input(1, 1, 1, 8, seed=2)

    def score(m, n):
        cq, sq = rotary_tables(torch.tensor([m]), 8)
        ck, sk = rotary_tables(torch.tensor([n]), 8)
        return (apply_rotary(q, cq, sq) * apply_rotary(k, ck, sk)).sum()

    assert_close(score(7, 3), score(104, 100), rtol=1e-10, atol=1e-10)
    assert not torch.allclose(score(7, 3), score(7, 4))


def test_rope_per_batch_positions():
    x = shifted_input(2, 3, 4, 8)
    positions = torch.tensor([[0, 1, 2, 3], [5, 6, 7, 8]])
    cos, sin = rotary_tables(positions, 8)
    got = apply_rotary(x, cos, sin)
    for b in range(2):
        assert_close(got[b : b + 1], rotation_reference(x[b : b + 1], positions[b], 8, 10000.0), rtol=1e-12, atol=1e-12)


# --- DecoderAttention against the equations -------------------------------------


def attention_reference(attn: DecoderAttention, x, allowed):
    """Grouped-query attention head by head: projections, QK-norm, RoPE, softmax."""
    b, n, _ = x.shape
    h, h_kv, d = attn.n_heads, attn.n_kv_heads, attn.d_head
    q, k, v = x @ attn.q_proj.weight.T, x @ attn.k_proj.weight.T, x @ attn.v_proj.weight.T

    def rms(t, w, eps):
        return t / (t.pow(2).mean(-1, keepdim=True) + eps).sqrt() * w

    if attn.qk_norm == "full":
        q, k = rms(q, attn.q_norm.weight, attn.q_norm.eps), rms(k, attn.k_norm.weight, attn.k_norm.eps)
    heads = []
    positions = torch.arange(n)
    for head in range(h):
        g = head // (h // h_kv)  # the key/value head this query head reads
        qh, kh, vh = q[..., head * d : (head + 1) * d], k[..., g * d : (g + 1) * d], v[..., g * d : (g + 1) * d]
        if attn.qk_norm == "head":
            qh, kh = rms(qh, attn.q_norm.weight, attn.q_norm.eps), rms(kh, attn.k_norm.weight, attn.k_norm.eps)
        qh = rotation_reference(qh.unsqueeze(1), positions, attn.rotary_dim, attn.rope_base).squeeze(1)
        kh = rotation_reference(kh.unsqueeze(1), positions, attn.rotary_dim, attn.rope_base).squeeze(1)
        scores = (qh @ kh.transpose(-2, -1)) / math.sqrt(d)  # (B, N, N)
        scores = scores.masked_fill(~allowed, float("-inf"))
        heads.append(scores.softmax(-1) @ vh)
    return torch.cat(heads, dim=-1) @ attn.o_proj.weight.T


@pytest.mark.parametrize("qk_norm", [None, "head", "full"])
@pytest.mark.parametrize("h_kv", [4, 2, 1])
def test_attention_equals_the_equations(qk_norm, h_kv):
    attn = randomised(DecoderAttention(D, H, h_kv, qk_norm=qk_norm, rope_base=50.0)).double()
    x = shifted_input(B, N, D)
    causal = torch.ones(N, N, dtype=torch.bool).tril()
    assert_close(attn(x), attention_reference(attn, x, causal), rtol=1e-10, atol=1e-10)
    extra = torch.rand(B, 1, N, N, generator=torch.Generator(device=torch.get_default_device()).manual_seed(3)) > 0.3
    extra[..., 0] = True
    assert_close(attn(x, attn_mask=extra), attention_reference(attn, x, causal & extra[:, 0]), rtol=1e-10, atol=1e-10)


def test_head_and_full_qk_norm_differ_but_agree_for_one_head():
    x = shifted_input(1, 5, 8)
    outs = {}
    for kind in ("head", "full"):
        torch.manual_seed(0)
        outs[kind] = randomised(DecoderAttention(8, 2, qk_norm=kind), seed=4).double()(x)
    assert not torch.allclose(outs["head"], outs["full"], atol=1e-4)
    one = {}
    for kind in ("head", "full"):
        one[kind] = randomised(DecoderAttention(8, 1, qk_norm=kind), seed=4).double()(x)
    assert_close(one["head"], one["full"], rtol=1e-12, atol=1e-12)


def test_exercise_qk_norm_ignores_the_scale_of_w_q():
    """Exercise 3: multiplying W_q and W_k by 100 leaves a QK-normed layer unchanged
    (up to eps), and changes a plain one."""
    x = shifted_input(1, 5, D)
    for qk_norm, same in (("head", True), ("full", True), (None, False)):
        attn = randomised(DecoderAttention(D, H, H_KV, qk_norm=qk_norm), seed=5).double()
        before = attn(x)
        with torch.no_grad():
            attn.q_proj.weight.mul_(100.0)
            attn.k_proj.weight.mul_(100.0)
        assert torch.allclose(attn(x), before, atol=1e-6) == same, qk_norm


def test_no_rope_and_custom_scale():
    attn = randomised(DecoderAttention(D, H, rope_base=None, scale=0.1)).double()
    x = shifted_input(1, 4, D)
    q = (x @ attn.q_proj.weight.T).view(1, 4, H, 4).transpose(1, 2)
    k = (x @ attn.k_proj.weight.T).view(1, 4, H, 4).transpose(1, 2)
    v = (x @ attn.v_proj.weight.T).view(1, 4, H, 4).transpose(1, 2)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.1)
    assert_close(attn(x), out.transpose(1, 2).reshape(1, 4, D) @ attn.o_proj.weight.T)


def test_causal_output_ignores_future_tokens():
    layer = randomised(DecoderLayer(DecoderAttention(D, H, H_KV, qk_norm="head"), D, D_FF)).double()
    x = shifted_input(1, N, D)
    y = x.clone()
    y[:, 4:] = shifted_input(1, N - 4, D, seed=9)
    assert_close(layer(x)[:, :4], layer(y)[:, :4], rtol=1e-12, atol=1e-12)
    assert not torch.allclose(layer(x)[:, 4:], layer(y)[:, 4:])


def test_fully_masked_row_returns_zeros():
    attn = randomised(DecoderAttention(D, H, H_KV)).double()
    x = shifted_input(B, N, D)
    mask = torch.ones(N, N, dtype=torch.bool)
    mask[2] = False
    out = attn(x, attn_mask=mask)
    assert torch.equal(out[:, 2], torch.zeros_like(out[:, 2]))
    q = shifted_input(1, 2, 3, 4)
    allowed = torch.tensor([[True, False, False], [False, False, False], [True, True, True]])
    got = sdpa_attend(q, q, q, attn_mask=allowed)
    assert torch.equal(got[..., 1, :], torch.zeros(1, 2, 4, dtype=torch.float64))
    assert_close(got[..., 0, :], q[..., 0, :])


def test_attention_gradcheck():
    attn = randomised(DecoderAttention(4, 2, 1, qk_norm="head", rope_base=100.0)).double()
    x = shifted_input(1, 3, 4).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: attn(t), (x,))


# --- DecoderLayer ------------------------------------------------------------------


def test_layer_is_pre_norm_with_rmsnorm_and_swiglu():
    layer = randomised(DecoderLayer(DecoderAttention(D, H, H_KV), D, D_FF)).double()
    x = shifted_input(B, N, D)
    h = x + layer.self_attn(layer.input_layernorm(x))
    assert_close(layer(x), h + layer.mlp(layer.post_attention_layernorm(h)), rtol=1e-12, atol=1e-12)
    assert isinstance(layer.input_layernorm, RMSNorm) and isinstance(layer.mlp, SwiGLU)
    assert not any(name.endswith("bias") for name, _ in layer.named_parameters())


def test_zero_branches_give_the_identity():
    layer = randomised(DecoderLayer(DecoderAttention(D, H, H_KV), D, D_FF)).double()
    with torch.no_grad():
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
    x = shifted_input(B, N, D)
    assert torch.equal(layer(x), x)


def test_state_dict_uses_llama_names():
    layer = DecoderLayer(DecoderAttention(D, H, H_KV, qk_norm="head"), D, D_FF)
    assert sorted(layer.state_dict()) == sorted([
        "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
        "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
        "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
        "input_layernorm.weight", "post_attention_layernorm.weight",
    ])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_layer_half_precision_large_inputs(dtype):
    layer = randomised(DecoderLayer(DecoderAttention(D, H, H_KV, qk_norm="head"), D, D_FF))
    x = shifted_input(B, N, D, dtype=torch.float32) * 3e3
    out = layer.to(dtype)(x.to(dtype))
    assert out.dtype == dtype and torch.isfinite(out).all()


def layer_parameters(d_model, n_heads, n_kv_heads, d_ff):
    """The solution's count: q and o are D x H d, k and v are D x H_kv d, three
    D x d_ff SwiGLU matrices, two RMSNorm weights; no biases."""
    d = d_model // n_heads
    return 2 * d_model * n_heads * d + 2 * d_model * n_kv_heads * d + 3 * d_model * d_ff + 2 * d_model


def test_exercise_llama3_8b_parameters():
    """Exercise 1: the count, checked on a small real layer, then Llama 3 8B's sizes."""
    small = DecoderLayer(DecoderAttention(64, 8, 2), 64, swiglu_width(64, 32, 1.3))
    assert sum(p.numel() for p in small.parameters()) == layer_parameters(64, 8, 2, swiglu_width(64, 32, 1.3))
    per_layer = layer_parameters(4096, 32, 8, swiglu_width(4096, 1024, 1.3))
    assert per_layer == 218_112_000
    vocab, n_layers = 128256, 32
    total = n_layers * per_layer + 2 * vocab * 4096 + 4096  # embedding, untied output head, final norm
    assert total == 8_030_261_248


# --- bad input -----------------------------------------------------------------------


def bad_heads():
    """q (1, 2, 3, 4), k and v (1, 2, 5, 4): the heads a kernel receives."""
    return torch.ones(1, 2, 3, 4), torch.ones(1, 2, 5, 4), torch.ones(1, 2, 5, 4)


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: RMSNorm(0), ValueError, r"d must be a finite number > 0.0, got 0"),
        (lambda: RMSNorm(4, eps=0.0), ValueError, r"eps must be a finite number > 0.0, got 0.0"),
        (lambda: RMSNorm(4)(torch.ones(2, 5)), ValueError, r"x must be torch\.\w+ \(None, 4\).*got torch\.\w+ \(2, 5\)"),
        (lambda: RMSNorm(4)(torch.ones(2, 4, dtype=torch.long)), TypeError, r"x must be a float tensor, got torch.int64"),
        (lambda: SwiGLU(4, -1), ValueError, r"d_ff must be a finite number > 0.0, got -1"),
        (lambda: swiglu_width(4096, 0), ValueError, r"multiple_of must be a finite number > 0.0, got 0"),
        (lambda: swiglu_width(64, 8, -1.0), ValueError, r"ffn_dim_multiplier must be a finite number > 0.0, got -1.0"),
        (lambda: swiglu_width(64, 8, float("inf")), ValueError, r"ffn_dim_multiplier must be a finite number > 0.0, got inf"),
        (lambda: RMSNorm(4)(torch.ones(2, 4, device="meta")), ValueError, r"x must be .* on cpu, got .* on meta"),
        (lambda: SwiGLU(4, 8)(torch.ones(2, 5)), ValueError, r"x must be torch\.\w+ \(None, 4\).*got torch\.\w+ \(2, 5\)"),
        (lambda: SwiGLU(4, 8)([1.0] * 4), TypeError, r"x must be a float tensor, got \[1.0"),
        (lambda: SwiGLU(4, 8)(torch.ones(2, 3, 4, dtype=torch.float64)), ValueError,
         r"x must be torch.float32 .* on cpu, got torch.float64 .* on cpu"),
        (lambda: rotary_tables(torch.zeros(1, 1, 3), 4), ValueError, r"positions must be \(N,\) or \(B, N\), .*got .*\(1, 1, 3\)"),
        (lambda: rotary_tables(torch.arange(3), 3), ValueError, r"rotary_dim even >= 2 and base > 1, got .*rotary_dim=3"),
        (lambda: rotary_tables(torch.arange(3), 4, base=1.0), ValueError, r"base > 1, got .*base=1.0"),
        (lambda: apply_rotary(torch.ones(1, 1, 3, 4, dtype=torch.long), *rotary_tables(torch.arange(3), 4)), TypeError,
         r"x must be a floating tensor \(B, H, N, d\)"),
        (lambda: apply_rotary(torch.ones(1, 1, 3, 4, device="meta"), *rotary_tables(torch.arange(3), 4)), ValueError,
         r"cos must be .* on meta, .*got .* on cpu"),
        (lambda: apply_rotary(torch.ones(1, 1, 3, 4), *rotary_tables(torch.arange(3), 6)), ValueError,
         r"cos must be \(N, r/2\) or \(B, N, r/2\) like cos on cpu, N=3, B=1, r <= d=4"),
        (lambda: sdpa_attend(torch.ones(2, 3, 4), *bad_heads()[1:]), ValueError,
         r"q must be torch\.\w+ \(None, None, None, None\).*got torch\.\w+ \(2, 3, 4\)"),
        (lambda: sdpa_attend(bad_heads()[0].long(), *bad_heads()[1:]), TypeError, r"q must be a float tensor, got torch.int64"),
        (lambda: sdpa_attend(bad_heads()[0], bad_heads()[1].to("meta"), bad_heads()[2]), ValueError,
         r"k must be .* on cpu, got .* on meta"),
        (lambda: sdpa_attend(*bad_heads()[:2], bad_heads()[2].double()), ValueError,
         r"v must be torch.float32 .* on cpu, got torch.float64 .* on cpu"),
        (lambda: sdpa_attend(bad_heads()[0], torch.ones(1, 2, 5, 3), bad_heads()[2]), ValueError,
         r"k must be torch\.\w+ \(1, 2, None, 4\).*got torch\.\w+ \(1, 2, 5, 3\)"),
        (lambda: sdpa_attend(*bad_heads(), attn_mask=torch.ones(3, 5)), ValueError,
         r"attn_mask must be bool and broadcast to .* got torch.float32"),
        (lambda: sdpa_attend(*bad_heads(), attn_mask=torch.ones(2, 2, 3, 5, dtype=torch.bool)), ValueError,
         r"attn_mask must be bool and broadcast to \(1, 2, 3, 5\) on cpu, got torch.bool \(2, 2, 3, 5\) on cpu"),
        (lambda: sdpa_attend(*bad_heads(), attn_mask=torch.ones(3, 5, dtype=torch.bool, device="meta")), ValueError,
         r"attn_mask must be bool and broadcast to \(1, 2, 3, 5\) on cpu, got torch.bool \(3, 5\) on meta"),
        (lambda: sdpa_attend(*bad_heads(), scale=-1.0), ValueError, r"scale must be a finite number > 0.0, got -1.0"),
        (lambda: DecoderAttention(8, 3), ValueError, r"n_heads d_model, got n_kv_heads=3, n_heads=3, d_model=8"),
        (lambda: DecoderAttention(8, 4, 3), ValueError, r"n_kv_heads must divide n_heads .*got n_kv_heads=3, n_heads=4"),
        (lambda: DecoderAttention(8, 2, qk_norm="layer"), ValueError, r"qk_norm must be None, 'head' or 'full', got 'layer'"),
        (lambda: DecoderAttention(8, 2, rotary_dim=6), ValueError, r"rotary_dim must be even, 2..4, got 6"),
        (lambda: DecoderAttention(8, 2, rotary_dim=3), ValueError, r"rotary_dim must be even, 2..4, got 3"),
        (lambda: DecoderAttention(8, 2, rope_base=1.0), ValueError, r"rope_base must be a finite number > 1.0, got 1.0"),
        (lambda: DecoderAttention(8, 2, qk_norm="head", norm_eps=0.0), ValueError, r"eps must be a finite number > 0.0, got 0.0"),
        (lambda: DecoderAttention(8, 2)(torch.ones(1, 3, 8, dtype=torch.long)), TypeError,
         r"x must be a float tensor, got torch.int64"),
        (lambda: DecoderAttention(8, 2)(torch.ones(1, 3, 8, dtype=torch.float64)), ValueError,
         r"x must be torch.float32 .* on cpu, got torch.float64 .* on cpu"),
        (lambda: DecoderAttention(8, 2)(torch.ones(1, 3, 8, device="meta")), ValueError, r"x must be .* on cpu, got .* on meta"),
        (lambda: DecoderAttention(8, 2)(torch.ones(1, 3, 8), positions=[0, 1, 2]), ValueError,
         r"positions must be \(N,\) or \(B, N\), .*got \[0, 1, 2\]"),
        (lambda: DecoderAttention(8, 2)(torch.ones(1, 3, 8), positions=torch.arange(3, device="meta")), ValueError,
         r"cos must be .* on cpu, .*got torch.float64 \(3, 2\) on meta"),
        (lambda: DecoderLayer(DecoderAttention(8, 2), 8, 16, norm_eps=-1.0), ValueError,
         r"eps must be a finite number > 0.0, got -1.0"),
        (lambda: DecoderAttention(8, 2, scale=0), ValueError, r"scale must be a finite number > 0.0, got 0"),
        (lambda: DecoderAttention(8, 2)(torch.ones(1, 3, 8), attn_mask=torch.ones(3, 4, dtype=torch.bool)), ValueError,
         r"attn_mask must be bool and broadcast to \(1, 2, 3, 3\) on cpu, got torch.bool \(3, 4\) on cpu"),
        (lambda: DecoderAttention(8, 2)(torch.ones(1, 3, 8), positions=torch.arange(4)), ValueError,
         r"cos must be \(N, r/2\) or \(B, N, r/2\) like cos on cpu, N=3, .*got torch.float64 \(4, 2\)"),
        (lambda: DecoderLayer(DecoderAttention(8, 2), 8, 16)(torch.ones(3, 8)), ValueError,
         r"x must be torch\.\w+ \(None, None, 8\).*got torch\.\w+ \(3, 8\)"),
        (lambda: meta_to_half_split(torch.ones(6, 4), 2), ValueError,
         r"weight rows must be a multiple of 4, got 6"),
    ],
)
def test_bad_input_raises_named_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()


# --- the exercises on the three pages name tests that exist ----------------------------


def test_exercise_solutions_name_existing_tests():
    pages = ["modern-block.md", "attention-sinks.md", "gates-and-caps.md"]
    named = []
    for page in pages:
        text = (ROOT / "docs" / "modern" / page).read_text(encoding="utf-8")
        found = re.findall(r"`(tests/test_\w+\.py)::(test_\w+)`", text)
        assert found, f"{page} names no test for its exercises"
        named += found
    for path, name in named:
        source = (ROOT / path).read_text(encoding="utf-8")
        assert re.search(rf"^def {name}\(", source, re.M), f"{path}::{name} does not exist"


@pytest.mark.parametrize("name", ["modern_block", "attention_sinks", "gates_and_caps"])
def test_snippet_docstring_names_paper_page_and_oracle(name):
    import ast

    doc = ast.get_docstring(ast.parse((ROOT / "snippets" / "modern" / f"{name}.py").read_text(encoding="utf-8")))
    assert re.search(r"arXiv:\d{4}\.\d{5}", doc), "no paper"
    page = re.search(r"^Page: (docs/modern/[\w-]+\.md)$", doc, re.M)
    assert page and (ROOT / page.group(1)).exists(), "no page, or a page that does not exist"
    assert "Tested against:" in doc and "only torch and the standard library" in doc


# --- corrections: Meta's RoPE layout, SDPA's masks, the eps default ---------------------


def pairwise_rotation(x, positions, base=10000.0):
    """Meta's Llama RoPE written out: dims (2i, 2i + 1) turn by t * base^(-2i/d)."""
    out = x.clone()
    d = x.shape[-1]
    for i in range(d // 2):
        for t, p in enumerate(positions.tolist()):
            a = p * base ** (-2 * i / d)
            c, s = math.cos(a), math.sin(a)
            x1, x2 = x[..., t, 2 * i], x[..., t, 2 * i + 1]
            out[..., t, 2 * i], out[..., t, 2 * i + 1] = x1 * c - x2 * s, x1 * s + x2 * c
    return out


def test_meta_format_weights_give_the_right_output_only_with_the_interleaved_switch():
    """Weights laid out for Meta's code (adjacent pairs) used to load without
    error and give wrong outputs: there was no way to ask for that layout."""
    attn = randomised(DecoderAttention(D, H, H_KV, interleaved=True)).double()
    x = shifted_input(B, N, D)
    d = D // H
    q = (x @ attn.q_proj.weight.T).view(B, N, H, d).transpose(1, 2)
    k = (x @ attn.k_proj.weight.T).view(B, N, H_KV, d).transpose(1, 2)
    v = (x @ attn.v_proj.weight.T).view(B, N, H_KV, d).transpose(1, 2)
    q, k = pairwise_rotation(q, torch.arange(N)), pairwise_rotation(k, torch.arange(N))
    k, v = k.repeat_interleave(H // H_KV, 1), v.repeat_interleave(H // H_KV, 1)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    want = heads.transpose(1, 2).reshape(B, N, D) @ attn.o_proj.weight.T
    assert_close(attn(x), want, rtol=1e-12, atol=1e-12)
    half_split = DecoderAttention(D, H, H_KV).double()
    half_split.load_state_dict(attn.state_dict())
    assert not torch.allclose(half_split(x), want, atol=1e-3)  # the silent wrong answer
    state = dict(attn.state_dict())
    state["q_proj.weight"] = meta_to_half_split(state["q_proj.weight"], H)
    state["k_proj.weight"] = meta_to_half_split(state["k_proj.weight"], H_KV)
    half_split.load_state_dict(state)
    assert_close(half_split(x), want, rtol=1e-12, atol=1e-12)


def test_a_key_padding_mask_broadcasts_as_sdpa_accepts():
    """(B, 1, 1, N), which SDPA accepts, used to be refused."""
    attn = randomised(DecoderAttention(D, H, H_KV, qk_norm="head")).double()
    x = shifted_input(B, N, D)
    real = torch.ones(B, N, dtype=torch.bool)
    real[1, 4:] = False
    padding = real[:, None, None, :]  # (B, 1, 1, N)
    assert_close(attn(x, attn_mask=padding), attn(x, attn_mask=padding.expand(B, 1, N, N).clone()))
    assert_close(sdpa_attend(*[shifted_input(B, H, N, 4, seed=s) for s in range(3)], attn_mask=padding),
                 F.scaled_dot_product_attention(*[shifted_input(B, H, N, 4, seed=s) for s in range(3)],
                                                attn_mask=padding))


def test_the_eps_default_and_the_llama_value_are_stated_next_to_the_code():
    """A Llama user loses 1e-5 silently unless the default and its reason are said."""
    for doc in (RMSNorm.__doc__, DecoderLayer.__doc__):
        assert "1e-6" in doc and "1e-5" in doc and "Llama" in doc
    assert RMSNorm(4).eps == 1e-6
    page = (ROOT / "docs" / "modern" / "modern-block.md").read_text(encoding="utf-8")
    assert "norm_eps=1e-5" in page


def test_swapped_norms_change_the_output():
    """Every parameter random, norms included: two norms still at their init
    (all ones) could be swapped unseen."""
    layer = randomised(DecoderLayer(DecoderAttention(D, H, H_KV), D, D_FF)).double()
    for name, p in layer.named_parameters():
        assert not torch.all(p == p.flatten()[0]), f"{name} is constant"
    x = shifted_input(B, N, D)
    before = layer(x)
    with torch.no_grad():
        a, b = layer.input_layernorm.weight, layer.post_attention_layernorm.weight
        a_copy = a.clone()
        a.copy_(b)
        b.copy_(a_copy)
    assert not torch.allclose(layer(x), before, atol=1e-3)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("spread", [1.0, 300.0])
def test_rmsnorm_half_precision_within_rounding_of_float64(dtype, spread):
    """On the same rounded inputs, the half result is within twice the error of
    rounding the exact result to that dtype (300 overflows x^2 in float16)."""
    norm = randomised(RMSNorm(64))
    x = (shifted_input(4, 64, dtype=torch.float32) * spread).to(dtype)
    exact = norm.double()(x.double())
    got = norm.float().to(dtype)(x).double()
    rounding = (exact.to(dtype).double() - exact).abs().max()
    assert (got - exact).abs().max() <= 2 * rounding + torch.finfo(dtype).eps
