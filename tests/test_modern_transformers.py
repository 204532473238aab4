"""The modern decoder pieces against the ``transformers`` library, randomly initialised.

No download: every Hugging Face module is built from a tiny config with
``attn_implementation="eager"`` and random weights (norm weights included),
and its weights are copied into ours. Compared in float32, outputs and
gradients (of the input and of every weight):

* RMSNorm, SwiGLU and the RoPE tables against LlamaRMSNorm, LlamaMLP and
  LlamaRotaryEmbedding; ``DecoderLayer`` against LlamaDecoderLayer;
* per-head QK-norm against Qwen3DecoderLayer, all-heads QK-norm against
  Olmo2Attention;
* ``LearnedSinks`` against GptOssAttention (learned sink logit per head);
* ``OutputGate`` against Qwen3NextAttention (sigmoid gate before o_proj);
* ``SoftCap`` against Gemma2Attention (eager, logit soft-capping).

Without ``transformers`` these tests skip, except in CI (the CI environment
variable set), where they fail: CI installs requirements-extra.txt.
"""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from snippets.modern.modern_block import DecoderAttention, DecoderLayer, RMSNorm, SwiGLU, rotary_tables
from snippets.modern.gates_and_caps import OutputGate, SoftCap, split_fused_q_gate
from snippets.modern.attention_sinks import LearnedSinks, sink_window_mask

from transformers_support import require_transformers, skip_module_without_transformers, transformers

skip_module_without_transformers()
if transformers is not None:  # one import of every model family used below
    from transformers.models.gemma2 import modeling_gemma2
    from transformers.models.gpt_oss import modeling_gpt_oss
    from transformers.models.llama import modeling_llama
    from transformers.models.olmo2 import modeling_olmo2
    from transformers.models.qwen3 import modeling_qwen3
    from transformers.models.qwen3_next import modeling_qwen3_next



B, N, D, H, H_KV, D_HEAD, D_FF = 2, 6, 16, 4, 2, 8, 24
# Both sides run in float64, but the HF modules take their RMSNorm and their
# eager softmax through float32 (``.to(torch.float32)``, ``dtype=torch.float32``),
# so they agree with ours to float32 precision: 1e-5 relative on values up to
# a few hundred. gpt-oss's eager kernel stays in float64 and agrees to 1e-12.
FLOAT32_INSIDE = dict(rtol=1e-5, atol=1e-5)
FLOAT64 = dict(rtol=1e-12, atol=1e-12)
SIZES = dict(hidden_size=D, num_attention_heads=H, num_key_value_heads=H_KV, head_dim=D_HEAD,
             intermediate_size=D_FF, num_hidden_layers=1, vocab_size=32, pad_token_id=0,
             bos_token_id=1, eos_token_id=2)


def config(cls, **kw):
    c = cls(**{**SIZES, **kw}, attn_implementation="eager")
    assert c._attn_implementation == "eager"
    return c


def randomised(module: nn.Module, seed: int = 0) -> nn.Module:
    """Every weight random, in float64; norm weights (1-D, not a bias or a sink) around 1."""
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    module = module.double()
    with torch.no_grad():
        for name, p in module.named_parameters():
            centre = 1.0 if p.dim() == 1 and "bias" not in name and "sinks" not in name else 0.0
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.4 + centre)
    return module.eval()


def inputs(seed: int = 1):
    """Tokens, positions, and a causal mask with right padding in the second sequence."""
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    x = torch.randn(B, N, D, generator=g, dtype=torch.float64) + 0.3
    positions = torch.arange(N).expand(B, N)
    real = torch.ones(B, N, dtype=torch.bool)
    real[1, 4:] = False
    allowed = torch.ones(N, N, dtype=torch.bool).tril() & real[:, None, None, :]  # (B, 1, N, N)
    return x, positions, allowed


def additive(allowed: torch.Tensor) -> torch.Tensor:
    """The float mask the eager HF kernels add to the scores."""
    return torch.zeros(allowed.shape, dtype=torch.float64).masked_fill(~allowed, torch.finfo(torch.float64).min)


def tables(positions, rotary_dim, base, layout="halves twice"):
    """Our float64 RoPE tables in the layout a HF module takes: Llama-style
    modules want cos repeated over both halves, gpt-oss wants one half."""
    cos, sin = rotary_tables(positions, rotary_dim, base)  # (B, N, r/2)
    if layout == "halves twice":
        cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)  # (B, N, r)
    return cos, sin


def run(module, x, *args, **kw):
    """Output and input gradient of a loss that weighs every output entry differently."""
    x = x.clone().requires_grad_()
    out = module(x, *args, **kw)
    out = out[0] if isinstance(out, tuple) else out
    weights = torch.linspace(-1.0, 2.0, out.numel(), dtype=out.dtype).view(out.shape)
    (out * weights).sum().backward()
    return out.detach(), x.grad


def grads(module, rename=lambda name: name):
    return {rename(name): p.grad for name, p in module.named_parameters()}


# --- Llama: norm, MLP, RoPE, the whole layer --------------------------------------------


def test_rmsnorm_matches_llama_rmsnorm():
    require_transformers()
    theirs = randomised(modeling_llama.LlamaRMSNorm(D, eps=1e-5))
    ours = RMSNorm(D, eps=1e-5).double()
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(3, 5, D, dtype=torch.float64) * 4 + 1
    assert_close(ours(x), theirs(x), **FLOAT32_INSIDE)
    for dtype in (torch.bfloat16, torch.float16):  # both upcast, normalise, cast back, then scale
        assert_close(ours(x.to(dtype)), theirs(x.to(dtype)))


def test_swiglu_matches_llama_mlp():
    require_transformers()
    theirs = randomised(modeling_llama.LlamaMLP(config(transformers.LlamaConfig)))
    ours = SwiGLU(D, D_FF).double()
    ours.load_state_dict(theirs.state_dict())
    out, dx = run(ours, inputs()[0])
    out_hf, dx_hf = run(theirs, inputs()[0])
    assert_close(out, out_hf, **FLOAT64)
    assert_close(dx, dx_hf, **FLOAT64)
    assert_close(grads(ours), grads(theirs), **FLOAT64)


ROTARY = [  # (family, config class, rotary module, extra config, base, fraction of d rotated, layout)
    ("llama", "LlamaConfig", "modeling_llama.LlamaRotaryEmbedding",
     {"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}}, 500000.0, 1, "halves twice"),
    ("qwen3_next", "Qwen3NextConfig", "modeling_qwen3_next.Qwen3NextRotaryEmbedding", {}, 10000.0, 4, "halves twice"),
    ("gpt_oss", "GptOssConfig", "modeling_gpt_oss.GptOssRotaryEmbedding",
     {"rope_parameters": {"rope_type": "default", "rope_theta": 150000.0}}, 150000.0, 1, "one half"),
    ("gemma2", "Gemma2Config", "modeling_gemma2.Gemma2RotaryEmbedding", {}, 10000.0, 1, "halves twice"),
]


@pytest.mark.parametrize("family, config_name, rotary, extra, base, fraction, layout", ROTARY, ids=[r[0] for r in ROTARY])
def test_rope_tables_match_the_rotary_embeddings(family, config_name, rotary, extra, base, fraction, layout):
    """The tables the layer tests below hand to both sides are each family's own.
    HF forms the angles in float32, so large positions agree to about 1e-4."""
    require_transformers()
    c = config(getattr(transformers, config_name), **extra)
    module_name, class_name = rotary.split(".")
    embed = getattr(globals()[module_name], class_name)(c)
    for positions, atol in ((torch.arange(N).expand(B, N), 1e-6), (torch.tensor([[0, 7, 100, 1000]]), 1e-4)):
        cos_hf, sin_hf = embed(torch.zeros(1, dtype=torch.float64), positions)
        cos, sin = tables(positions, D_HEAD // fraction, base, layout)
        assert cos.shape == cos_hf.shape
        assert_close(cos, cos_hf, rtol=0, atol=atol)
        assert_close(sin, sin_hf, rtol=0, atol=atol)


def test_decoder_layer_matches_llama_decoder_layer():
    """Outputs and gradients; the HF state dict loads unchanged (same names)."""
    require_transformers()
    c = config(transformers.LlamaConfig, rms_norm_eps=1e-5)
    theirs = randomised(modeling_llama.LlamaDecoderLayer(c, layer_idx=0))
    ours = DecoderLayer(DecoderAttention(D, H, H_KV, d_head=D_HEAD), D, D_FF, norm_eps=1e-5).double()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x, positions, allowed = inputs()
    rope = tables(positions, D_HEAD, c.rope_parameters["rope_theta"])
    out_hf, dx_hf = run(theirs, x, attention_mask=additive(allowed), position_ids=positions, position_embeddings=rope)
    out, dx = run(ours, x, attn_mask=allowed)
    assert_close(out, out_hf, **FLOAT32_INSIDE)
    assert_close(dx, dx_hf, **FLOAT32_INSIDE)
    assert_close(grads(ours), grads(theirs), **FLOAT32_INSIDE)


# --- QK-norm: per head (Qwen3) and over all heads (OLMo 2) ---------------------------------


def test_qk_norm_per_head_matches_qwen3_decoder_layer():
    require_transformers()
    c = config(transformers.Qwen3Config)
    theirs = randomised(modeling_qwen3.Qwen3DecoderLayer(c, layer_idx=0))
    assert tuple(theirs.self_attn.q_norm.weight.shape) == (D_HEAD,)  # one weight of width d, shared by heads
    ours = DecoderLayer(DecoderAttention(D, H, H_KV, d_head=D_HEAD, qk_norm="head"), D, D_FF).double()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x, positions, allowed = inputs()
    rope = tables(positions, D_HEAD, c.rope_parameters["rope_theta"])
    out_hf, dx_hf = run(theirs, x, attention_mask=additive(allowed), position_ids=positions, position_embeddings=rope)
    out, dx = run(ours, x, attn_mask=allowed)
    assert_close(out, out_hf, **FLOAT32_INSIDE)
    assert_close(dx, dx_hf, **FLOAT32_INSIDE)
    assert_close(grads(ours), grads(theirs), **FLOAT32_INSIDE)


def test_qk_norm_over_all_heads_matches_olmo2_attention():
    require_transformers()
    c = config(transformers.Olmo2Config)
    theirs = randomised(modeling_olmo2.Olmo2Attention(c, layer_idx=0))
    assert tuple(theirs.q_norm.weight.shape) == (H * D_HEAD,)  # one norm across the heads
    ours = DecoderAttention(D, H, H_KV, d_head=D_HEAD, qk_norm="full", norm_eps=c.rms_norm_eps).double()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x, positions, allowed = inputs()
    rope = tables(positions, D_HEAD, c.rope_parameters["rope_theta"])
    out_hf, dx_hf = run(theirs, x, rope, additive(allowed))
    out, dx = run(ours, x, attn_mask=allowed)
    assert_close(out, out_hf, **FLOAT32_INSIDE)
    assert_close(dx, dx_hf, **FLOAT32_INSIDE)
    assert_close(grads(ours), grads(theirs), **FLOAT32_INSIDE)


# --- gpt-oss: a learned sink logit per head ---------------------------------------------


@pytest.mark.parametrize("window", [None, 3])
def test_learned_sinks_match_gpt_oss_attention(window):
    require_transformers()
    c = config(transformers.GptOssConfig, rope_parameters={"rope_type": "default", "rope_theta": 150000.0})
    theirs = randomised(modeling_gpt_oss.GptOssAttention(c, layer_idx=0))
    assert theirs.q_proj.bias is not None  # gpt-oss keeps biases
    ours = DecoderAttention(D, H, H_KV, d_head=D_HEAD, bias=True, rope_base=150000.0, attend=LearnedSinks(H)).double()
    state = {("attend.sinks" if k == "sinks" else k): v for k, v in theirs.state_dict().items()}
    ours.load_state_dict(state, strict=True)
    x, positions, allowed = inputs()
    if window is not None:  # a banded layer, as gpt-oss alternates
        allowed = allowed & sink_window_mask(N, N, 0, window)
    rope = tables(positions, D_HEAD, 150000.0, "one half")
    out_hf, dx_hf = run(theirs, x, rope, additive(allowed))
    out, dx = run(ours, x, attn_mask=allowed)
    assert_close(out, out_hf, **FLOAT64)
    assert_close(dx, dx_hf, **FLOAT64)
    assert_close(grads(ours), grads(theirs, lambda n: "attend.sinks" if n == "sinks" else n), **FLOAT64)


# --- Qwen3-Next: the output gate ----------------------------------------------------------


def test_output_gate_matches_qwen3_next_attention():
    """Qwen3-Next fuses the gate into q_proj and writes its norms as (1 + w);
    its rotary covers a quarter of each head (partial_rotary_factor 0.25)."""
    require_transformers()
    c = config(transformers.Qwen3NextConfig)
    theirs = randomised(modeling_qwen3_next.Qwen3NextAttention(c, layer_idx=0), seed=3)
    x, positions, allowed = inputs()
    rotary_dim = int(D_HEAD * c.rope_parameters["partial_rotary_factor"])
    assert rotary_dim == D_HEAD // 4
    rope = tables(positions, rotary_dim, c.rope_parameters["rope_theta"])
    ours = DecoderAttention(D, H, H_KV, d_head=D_HEAD, qk_norm="head", norm_eps=c.rms_norm_eps,
                            rotary_dim=rotary_dim, output_gate=OutputGate(D, H, D_HEAD)).double()
    q_weight, gate_weight = split_fused_q_gate(theirs.q_proj.weight.detach(), H, D_HEAD)
    ours.load_state_dict({
        "q_proj.weight": q_weight, "output_gate.gate_proj.weight": gate_weight,
        "k_proj.weight": theirs.k_proj.weight, "v_proj.weight": theirs.v_proj.weight,
        "o_proj.weight": theirs.o_proj.weight,
        "q_norm.weight": 1 + theirs.q_norm.weight, "k_norm.weight": 1 + theirs.k_norm.weight,
    }, strict=True)
    out_hf, dx_hf = run(theirs, x, rope, additive(allowed))
    out, dx = run(ours, x, attn_mask=allowed)
    assert_close(out, out_hf, **FLOAT32_INSIDE)
    assert_close(dx, dx_hf, **FLOAT32_INSIDE)
    ours_grads, their_grads = grads(ours), grads(theirs)
    dq, dgate = split_fused_q_gate(their_grads.pop("q_proj.weight"), H, D_HEAD)
    assert_close(ours_grads.pop("q_proj.weight"), dq, **FLOAT32_INSIDE)
    assert_close(ours_grads.pop("output_gate.gate_proj.weight"), dgate, **FLOAT32_INSIDE)
    assert_close(ours_grads, their_grads, **FLOAT32_INSIDE)


# --- Gemma 2: logit soft-capping ---------------------------------------------------------


@pytest.mark.parametrize("cap", [50.0, 1.5])
def test_softcap_matches_gemma2_attention(cap):
    """Gemma 2's cap is 50; 1.5 makes the cap bite on these small scores."""
    require_transformers()
    c = config(transformers.Gemma2Config, attn_logit_softcapping=cap, query_pre_attn_scalar=12)
    theirs = randomised(modeling_gemma2.Gemma2Attention(c, layer_idx=0))
    ours = DecoderAttention(D, H, H_KV, d_head=D_HEAD, scale=12**-0.5, attend=SoftCap(cap)).double()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x, positions, allowed = inputs()
    if cap < 10:
        x = 3 * x  # larger scores, so the small cap is far from the identity
    rope = tables(positions, D_HEAD, c.rope_parameters["rope_theta"])
    out_hf, dx_hf = run(theirs, x, rope, additive(allowed))
    out, dx = run(ours, x, attn_mask=allowed)
    assert_close(out, out_hf, **FLOAT32_INSIDE)
    assert_close(dx, dx_hf, **FLOAT32_INSIDE)
    assert_close(grads(ours), grads(theirs), **FLOAT32_INSIDE)
    assert transformers.Gemma2Config().attn_logit_softcapping == 50.0  # the released default
