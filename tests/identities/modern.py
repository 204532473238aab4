"""Identities proven for the modern pages: each module against its transformers
counterpart with weights copied, and the exact equalities between the forms the
pages teach (absorbed and naive MLA, cached and full decoding, a sink at -inf
and plain attention, a huge cap and no cap, factor 1 and plain RoPE, a window
of N and a global layer)."""

from __future__ import annotations

import importlib

import torch
import torch.nn.functional as F

from identities import identity
from snippets.modern import attention_sinks as sinks
from snippets.modern import gates_and_caps as gates
from snippets.modern import latent_attention as mla
from snippets.modern import layer_patterns as patterns
from snippets.modern import long_context_rope as rope
from snippets.modern import modern_block as block

D, H, H_KV, D_HEAD, D_FF, N = 16, 4, 2, 8, 24, 6
TF = ("transformers",)


def _randomise(module, seed=0):
    """Every parameter random in float64, norms and sinks included (norms around 1)."""
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    module = module.double()
    with torch.no_grad():
        for name, p in module.named_parameters():
            centre = 1.0 if "norm" in name and p.dim() == 1 else 0.0
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.4 + centre)
    return module.eval()


def _config(cls, **kw):
    sizes = dict(hidden_size=D, num_attention_heads=H, num_key_value_heads=H_KV, head_dim=D_HEAD,
                 intermediate_size=D_FF, num_hidden_layers=1, vocab_size=32)
    c = cls(**{**sizes, **kw}, attn_implementation="eager")
    return c


def _tokens():
    x = torch.randn(2, N, D, dtype=torch.float64) + 0.3
    positions = torch.arange(N).expand(2, N)
    allowed = torch.ones(N, N, dtype=torch.bool).tril()[None, None].expand(2, 1, N, N)
    additive = torch.zeros(allowed.shape, dtype=torch.float64).masked_fill(~allowed, float("-inf"))
    return x, positions, allowed, additive


def _tables(positions, rotary_dim, base, twice=True):
    cos, sin = block.rotary_tables(positions, rotary_dim, base)
    return (torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)) if twice else (cos, sin)


def _qkv(n=5, m=7, d=4, seed=0):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    return (torch.randn(2, 3, n, d, generator=g, dtype=torch.float64),
            torch.randn(2, 3, m, d, generator=g, dtype=torch.float64),
            torch.randn(2, 3, m, d + 1, generator=g, dtype=torch.float64))


# --- modules against transformers ------------------------------------------------


@identity("modern-decoder-layer-equals-llama",
          "DecoderLayer equals transformers' LlamaDecoderLayer with its state dict loaded unchanged "
          "(RMSNorm eps 1e-5, every weight random)",
          page="modern/modern-block.md", tol=1e-4, needs=TF)
def decoder_layer_equals_llama():
    hf = importlib.import_module("transformers")
    llama = importlib.import_module("transformers.models.llama.modeling_llama")
    c = _config(hf.LlamaConfig, rms_norm_eps=1e-5)
    theirs = _randomise(llama.LlamaDecoderLayer(c, layer_idx=0))
    ours = block.DecoderLayer(block.DecoderAttention(D, H, H_KV, d_head=D_HEAD), D, D_FF, norm_eps=1e-5)
    ours = ours.double().eval()
    ours.load_state_dict(theirs.state_dict())
    x, positions, allowed, additive = _tokens()
    rope_tables = _tables(positions, D_HEAD, c.rope_parameters["rope_theta"])
    want = theirs(x, attention_mask=additive, position_ids=positions, position_embeddings=rope_tables)
    want = want[0] if isinstance(want, tuple) else want
    return ours(x, attn_mask=allowed), want


@identity("qk-norm-per-head-equals-qwen3",
          "DecoderLayer with qk_norm='head' equals transformers' Qwen3DecoderLayer",
          page="modern/modern-block.md", tol=1e-4, needs=TF)
def qk_norm_head_equals_qwen3():
    hf = importlib.import_module("transformers")
    qwen3 = importlib.import_module("transformers.models.qwen3.modeling_qwen3")
    c = _config(hf.Qwen3Config)
    theirs = _randomise(qwen3.Qwen3DecoderLayer(c, layer_idx=0))
    ours = block.DecoderLayer(block.DecoderAttention(D, H, H_KV, d_head=D_HEAD, qk_norm="head"), D, D_FF)
    ours = ours.double().eval()
    ours.load_state_dict(theirs.state_dict())
    x, positions, allowed, additive = _tokens()
    rope_tables = _tables(positions, D_HEAD, c.rope_parameters["rope_theta"])
    want = theirs(x, attention_mask=additive, position_ids=positions, position_embeddings=rope_tables)
    want = want[0] if isinstance(want, tuple) else want
    return ours(x, attn_mask=allowed), want


@identity("qk-norm-over-heads-equals-olmo2",
          "DecoderAttention with qk_norm='full' equals transformers' Olmo2Attention",
          page="modern/modern-block.md", tol=1e-4, needs=TF)
def qk_norm_full_equals_olmo2():
    hf = importlib.import_module("transformers")
    olmo2 = importlib.import_module("transformers.models.olmo2.modeling_olmo2")
    c = _config(hf.Olmo2Config)
    theirs = _randomise(olmo2.Olmo2Attention(c, layer_idx=0))
    ours = block.DecoderAttention(D, H, H_KV, d_head=D_HEAD, qk_norm="full", norm_eps=c.rms_norm_eps)
    ours = ours.double().eval()
    ours.load_state_dict(theirs.state_dict())
    x, positions, allowed, additive = _tokens()
    want, _ = theirs(x, _tables(positions, D_HEAD, c.rope_parameters["rope_theta"]), additive)
    return ours(x, attn_mask=allowed), want


@identity("learned-sinks-equal-gpt-oss",
          "DecoderAttention with LearnedSinks equals transformers' GptOssAttention (biases and sinks random)",
          page="modern/attention-sinks.md", tol=1e-10, needs=TF)
def sinks_equal_gpt_oss():
    hf = importlib.import_module("transformers")
    gpt_oss = importlib.import_module("transformers.models.gpt_oss.modeling_gpt_oss")
    c = _config(hf.GptOssConfig, rope_parameters={"rope_type": "default", "rope_theta": 150000.0})
    theirs = _randomise(gpt_oss.GptOssAttention(c, layer_idx=0))
    ours = block.DecoderAttention(D, H, H_KV, d_head=D_HEAD, bias=True, rope_base=150000.0,
                                  attend=sinks.LearnedSinks(H)).double().eval()
    ours.load_state_dict({("attend.sinks" if k == "sinks" else k): v for k, v in theirs.state_dict().items()})
    x, positions, allowed, additive = _tokens()
    want, _ = theirs(x, _tables(positions, D_HEAD, 150000.0, twice=False), additive)
    return ours(x, attn_mask=allowed), want


@identity("output-gate-equals-qwen3-next",
          "DecoderAttention with an OutputGate equals transformers' Qwen3NextAttention (fused q_proj split per head)",
          page="modern/gates-and-caps.md", tol=1e-4, needs=TF)
def output_gate_equals_qwen3_next():
    hf = importlib.import_module("transformers")
    qwen3_next = importlib.import_module("transformers.models.qwen3_next.modeling_qwen3_next")
    c = _config(hf.Qwen3NextConfig)
    theirs = _randomise(qwen3_next.Qwen3NextAttention(c, layer_idx=0), seed=3)
    r = int(D_HEAD * c.rope_parameters["partial_rotary_factor"])
    ours = block.DecoderAttention(D, H, H_KV, d_head=D_HEAD, qk_norm="head", norm_eps=c.rms_norm_eps,
                                  rotary_dim=r, output_gate=gates.OutputGate(D, H, D_HEAD)).double().eval()
    q_w, g_w = gates.split_fused_q_gate(theirs.q_proj.weight.detach(), H, D_HEAD)
    ours.load_state_dict({
        "q_proj.weight": q_w, "output_gate.gate_proj.weight": g_w, "k_proj.weight": theirs.k_proj.weight,
        "v_proj.weight": theirs.v_proj.weight, "o_proj.weight": theirs.o_proj.weight,
        "q_norm.weight": 1 + theirs.q_norm.weight, "k_norm.weight": 1 + theirs.k_norm.weight})
    x, positions, allowed, additive = _tokens()
    want, _ = theirs(x, _tables(positions, r, c.rope_parameters["rope_theta"]), additive)
    return ours(x, attn_mask=allowed), want


@identity("softcap-equals-gemma2",
          "DecoderAttention with SoftCap(1.5) equals transformers' Gemma2Attention with the same cap",
          page="modern/gates-and-caps.md", tol=1e-4, needs=TF)
def softcap_equals_gemma2():
    hf = importlib.import_module("transformers")
    gemma2 = importlib.import_module("transformers.models.gemma2.modeling_gemma2")
    c = _config(hf.Gemma2Config, attn_logit_softcapping=1.5, query_pre_attn_scalar=12)
    theirs = _randomise(gemma2.Gemma2Attention(c, layer_idx=0))
    ours = block.DecoderAttention(D, H, H_KV, d_head=D_HEAD, scale=12**-0.5,
                                  attend=gates.SoftCap(1.5)).double().eval()
    ours.load_state_dict(theirs.state_dict())
    x, positions, allowed, additive = _tokens()
    want, _ = theirs(3 * x, _tables(positions, D_HEAD, c.rope_parameters["rope_theta"]), additive)
    return ours(3 * x, attn_mask=allowed), want


@identity("mla-equals-deepseek-v3-attention",
          "MultiHeadLatentAttention equals transformers' DeepseekV3Attention (interleaved RoPE, query LoRA)",
          page="modern/latent-attention.md", tol=1e-5, needs=TF)
def mla_equals_deepseek_v3():
    hf = importlib.import_module("transformers")
    ds = importlib.import_module("transformers.models.deepseek_v3.modeling_deepseek_v3")
    config = hf.DeepseekV3Config(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=12, kv_lora_rank=8,
        qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5, num_hidden_layers=1, vocab_size=50,
        intermediate_size=16, moe_intermediate_size=8, n_routed_experts=4, n_group=1, topk_group=1,
        num_experts_per_tok=2, rope_interleave=True, rope_parameters={"rope_type": "default", "rope_theta": 1e4})
    config._attn_implementation = "eager"
    theirs = _randomise(ds.DeepseekV3Attention(config, layer_idx=0))
    rename = {"q_a_proj": "q_down", "q_a_layernorm": "q_norm", "q_b_proj": "q_up", "kv_a_proj_with_mqa": "kv_down",
              "kv_a_layernorm": "kv_norm", "kv_b_proj": "kv_up", "o_proj": "out_proj"}
    ours = mla.MultiHeadLatentAttention(32, 4, kv_lora_rank=8, q_lora_rank=12, qk_nope_head_dim=6, rope_dim=4,
                                        v_head_dim=5).double().eval()
    ours.load_state_dict({f"{rename[k.split('.', 1)[0]]}.{k.split('.', 1)[1]}": v
                          for k, v in theirs.state_dict().items()})
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    cos, sin = ds.DeepseekV3RotaryEmbedding(config)(x, torch.arange(7)[None].expand(2, 7))
    mask = torch.full((7, 7), float("-inf"), dtype=torch.float64).triu(1)[None, None]
    want, _ = theirs(x, (cos.double(), sin.double()), mask)
    return ours(x), want


@identity("yarn-kimi-k2-equals-transformers",
          "rope_inv_freq on Kimi K2's released YaRN configuration (beta_fast = beta_slow = 1, factor 32) "
          "equals transformers' ROPE_INIT_FUNCTIONS",
          page="modern/long-context-rope.md", tol=1e-6, needs=TF)
def yarn_kimi_k2():
    hf = importlib.import_module("transformers")
    utils = importlib.import_module("transformers.modeling_rope_utils")
    params = dict(rope_type="yarn", rope_theta=50000.0, factor=32.0, beta_fast=1.0, beta_slow=1.0, mscale=1.0,
                  mscale_all_dim=1.0, original_max_position_embeddings=4096)
    c = hf.LlamaConfig(hidden_size=128, num_attention_heads=2, num_key_value_heads=2, head_dim=64,
                       intermediate_size=8, num_hidden_layers=1, vocab_size=16, max_position_embeddings=131072,
                       rope_parameters=dict(params))
    theirs, _ = utils.ROPE_INIT_FUNCTIONS["yarn"](c, "cpu")
    kw = {k: v for k, v in params.items() if k != "rope_theta"}
    ours, _ = rope.rope_inv_freq(64, base=50000.0, **kw)
    return ours, theirs.float()


# --- equalities between the forms the pages teach ----------------------------------


def _mla_layer():
    m = mla.MultiHeadLatentAttention(32, 4, kv_lora_rank=8, q_lora_rank=12, qk_nope_head_dim=6, rope_dim=4,
                                     v_head_dim=5, bias=True)
    return _randomise(m)


@identity("mla-absorbed-equals-naive",
          "MLA's absorbed form (W^UK into the query, W^UV into the output) equals the naive form",
          page="modern/latent-attention.md", tol=1e-12)
def mla_absorbed_equals_naive():
    m = _mla_layer()
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    return m(x, absorbed=True), m(x)


@identity("mla-cached-decode-equals-full-pass",
          "prefill then token-by-token absorbed decoding from the latent cache equals one full causal pass",
          page="modern/latent-attention.md", tol=1e-12)
def mla_cached_decode():
    m = _mla_layer()
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    cache = m.make_cache(2, 7)
    steps = [m(x[:, :3], cache=cache)] + [m(x[:, t : t + 1], cache=cache, absorbed=True) for t in range(3, 7)]
    return torch.cat(steps, dim=1), m(x)


@identity("sink-identity-sdpa-times-sigmoid",
          "sink attention equals SDPA times sigmoid(logsumexp(scores) - sink)",
          page="modern/attention-sinks.md", tol=1e-12)
def sink_identity():
    q, k, v = _qkv()
    sink = torch.randn(3, dtype=torch.float64)
    scores = q @ k.transpose(-2, -1) * 0.5
    gate = torch.sigmoid(torch.logsumexp(scores, -1, keepdim=True) - sink.view(1, 3, 1, 1))
    return sinks.sink_attention(q, k, v, sink), F.scaled_dot_product_attention(q, k, v) * gate


@identity("sink-to-minus-infinity-is-sdpa",
          "a sink logit of -inf gives plain attention: sink_attention equals SDPA, with a mask",
          page="modern/attention-sinks.md", tol=1e-12)
def sink_minus_infinity():
    q, k, v = _qkv()
    mask = torch.ones(5, 7, dtype=torch.bool).tril(2)
    sink = torch.full((3,), float("-inf"), dtype=torch.float64)
    return (sinks.sink_attention(q, k, v, sink, attn_mask=mask),
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


@identity("streaming-original-positions-equal-dense-mask",
          "StreamingLLM decoding with original positions equals dense attention under sink_window_mask",
          page="modern/attention-sinks.md", tol=1e-12)
def streaming_equals_dense():
    q, k, v = _qkv(n=9, m=9)
    v = v[..., :4]
    cos, sin = sinks.rotary_tables(torch.arange(9), 4)
    mask = sinks.sink_window_mask(9, 9, 2, 3)
    dense = F.scaled_dot_product_attention(sinks.apply_rotary(q, cos, sin), sinks.apply_rotary(k, cos, sin), v,
                                           attn_mask=mask)
    return sinks.streaming_attention(q, k, v, n_sink=2, window=3, positions="original"), dense


@identity("softcap-large-cap-is-plain-attention",
          "soft-capped attention with a cap of 1e8 equals plain attention (SDPA), with a mask",
          page="modern/gates-and-caps.md", tol=1e-12)
def softcap_large_cap():
    q, k, v = _qkv()
    mask = torch.ones(5, 7, dtype=torch.bool).tril(2)
    return (gates.softcap_attention(q, k, v, cap=1e8, attn_mask=mask),
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


@identity("llama3-factor-one-is-plain-rope",
          "llama3 and YaRN scaling with factor 1 give the unscaled RoPE frequencies",
          page="modern/long-context-rope.md", tol=1e-8)
def scaling_factor_one():
    plain = rope.rope_frequencies(128, 500000.0)
    llama3 = rope.llama3_scaling(plain, 1.0)
    yarn = rope.yarn_scaling(128, 500000.0, 1.0, 8192)
    return torch.stack((llama3, yarn)), torch.stack((plain, plain))


@identity("window-of-n-is-global",
          "a sliding-window layer whose window covers every key (w >= N) equals a global causal layer",
          page="modern/local-global.md", tol=0.0)
def window_of_n_is_global():
    q, k, v = _qkv(n=7, m=7)
    local = patterns.layer_mask("sliding_attention", 7, window=7)
    full = patterns.layer_mask("full_attention", 7)
    return (F.scaled_dot_product_attention(q, k, v, attn_mask=local),
            F.scaled_dot_product_attention(q, k, v, attn_mask=full))


@identity("meta-weights-interleaved-equals-permuted",
          "Meta-format q/k weights under interleaved=True equal the same weights permuted by "
          "meta_to_half_split under the Hugging Face layout",
          page="modern/modern-block.md", tol=1e-12)
def meta_weights():
    meta = _randomise(block.DecoderAttention(D, H, H_KV, d_head=D_HEAD, interleaved=True))
    hf = block.DecoderAttention(D, H, H_KV, d_head=D_HEAD).double().eval()
    state = dict(meta.state_dict())
    state["q_proj.weight"] = block.meta_to_half_split(state["q_proj.weight"], H)
    state["k_proj.weight"] = block.meta_to_half_split(state["k_proj.weight"], H_KV)
    hf.load_state_dict(state)
    x = torch.randn(2, N, D, dtype=torch.float64)
    return meta(x), hf(x)
