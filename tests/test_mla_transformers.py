"""Latent attention and layer patterns against the ``transformers`` library, randomly initialised.

No download: every ``transformers`` object is built from a small config.

* ``MultiHeadLatentAttention`` against ``DeepseekV3Attention`` (eager attention)
  with weights copied in and every weight and bias randomised: outputs,
  gradients of the input and of every parameter, in the naive and the absorbed
  form, with ``rope_interleave`` on and off, with and without query
  compression. The latent cache holds what the library's cache holds.
* ``periodic_layer_types`` and ``rope_layers`` against the ``layer_types`` (and
  ``no_rope_layers``) that ``Gemma3TextConfig``, ``Gemma2Config``,
  ``GptOssConfig``, ``Llama4TextConfig`` and ``Qwen3NextConfig`` derive.
* ``layer_mask`` against ``transformers.masking_utils``: ``sdpa_mask`` with
  the library's causal, sliding-window and chunked mask functions (with an
  offset, as after a cache), and ``create_sliding_window_causal_mask`` /
  ``create_chunked_causal_mask`` from a config.

Without ``transformers`` these tests skip, except in CI (the CI environment
variable set), where they fail: CI installs requirements-extra.txt.
"""

from __future__ import annotations


import pytest
import torch
from torch.testing import assert_close

from snippets.modern.layer_patterns import layer_mask, periodic_layer_types, rope_layers
from snippets.modern.latent_attention import LatentCache, MultiHeadLatentAttention

from tolerance import assert_within_baseline
from transformers_support import require_transformers, skip_module_without_transformers, transformers

skip_module_without_transformers()



# --- multi-head latent attention -------------------------------------------------

RENAME = {  # transformers' DeepseekV3Attention -> MultiHeadLatentAttention
    "q_proj": "q_proj", "q_a_proj": "q_down", "q_a_layernorm": "q_norm", "q_b_proj": "q_up",
    "kv_a_proj_with_mqa": "kv_down", "kv_a_layernorm": "kv_norm", "kv_b_proj": "kv_up", "o_proj": "out_proj",
}


def deepseek_pair(*, interleave: bool, q_lora_rank: int | None, bias: bool):
    hf = require_transformers()
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

    config = hf.DeepseekV3Config(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=q_lora_rank,
        kv_lora_rank=8, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5, num_hidden_layers=1,
        vocab_size=50, intermediate_size=16, moe_intermediate_size=8, n_routed_experts=4, n_group=1,
        topk_group=1, num_experts_per_tok=2, rope_interleave=interleave, attention_bias=bias,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    theirs = ds.DeepseekV3Attention(config, layer_idx=0).eval()
    with torch.no_grad():
        for name, p in theirs.named_parameters():
            p.normal_(1.0 if "layernorm" in name else 0.0, 0.3)
    ours = MultiHeadLatentAttention(32, 4, kv_lora_rank=8, q_lora_rank=q_lora_rank, qk_nope_head_dim=6,
                                    rope_dim=4, v_head_dim=5, rope_interleaved=interleave, bias=bias)
    state = {}
    for key, value in theirs.state_dict().items():
        module, rest = key.split(".", 1)
        state[f"{RENAME[module]}.{rest}"] = value
    ours.load_state_dict(state, strict=True)
    # transformers' RMSNorm on the latents uses eps 1e-6, as ours does by default
    assert theirs.kv_a_layernorm.variance_epsilon == ours.kv_norm.eps
    return ours.eval(), theirs, ds.DeepseekV3RotaryEmbedding(config), ds


def their_forward(theirs, rotary, x, past_key_values=None, offset=0):
    b, n, _ = x.shape
    positions = torch.arange(offset, offset + n)[None].expand(b, n)
    cos, sin = rotary(x, positions)
    mask = torch.full((n, offset + n), float("-inf")).triu(offset + 1)[None, None]  # additive, causal
    out, _ = theirs(x, (cos, sin), mask, past_key_values=past_key_values)
    return out


@pytest.mark.parametrize("interleave", [True, False])
@pytest.mark.parametrize("q_lora_rank", [12, None])
@pytest.mark.parametrize("absorbed", [False, True])
def test_equals_deepseek_v3_attention_outputs_and_gradients(interleave, q_lora_rank, absorbed):
    ours, theirs, rotary, _ = deepseek_pair(interleave=interleave, q_lora_rank=q_lora_rank, bias=q_lora_rank is not None)
    x = torch.randn(2, 7, 32)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    got = ours(x1, absorbed=absorbed)
    want = their_forward(theirs, rotary, x2)
    assert_close(got, want, rtol=1e-5, atol=1e-5)
    g = torch.randn_like(got)
    got.backward(g)
    want.backward(g)
    assert_close(x1.grad, x2.grad, rtol=1e-4, atol=1e-5)
    theirs_grads = {f"{RENAME[k.split('.', 1)[0]]}.{k.split('.', 1)[1]}": p.grad for k, p in theirs.named_parameters()}
    for name, p in ours.named_parameters():
        assert_close(p.grad, theirs_grads[name], rtol=1e-4, atol=1e-5, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("absorbed", [False, True])
def test_half_precision_within_twice_deepseek_v3s_error(dtype, absorbed):
    """Both modules in the same dtype with the same rounded weights and inputs;
    the reference is ours in float64 from those rounded weights."""
    ours, theirs, rotary, _ = deepseek_pair(interleave=True, q_lora_rank=12, bias=True)
    ours, theirs = ours.to(dtype), theirs.to(dtype)
    exact = MultiHeadLatentAttention(32, 4, kv_lora_rank=8, q_lora_rank=12, qk_nope_head_dim=6, rope_dim=4,
                                     v_head_dim=5, rope_interleaved=True, bias=True).double().eval()
    exact.load_state_dict({k: v.double() for k, v in ours.state_dict().items()})
    x = (3 * torch.randn(2, 7, 32, generator=torch.Generator(device=torch.get_default_device()).manual_seed(1))).to(dtype)
    positions = torch.arange(7)[None].expand(2, 7)
    mask = torch.full((7, 7), float("-inf"), dtype=dtype).triu(1)[None, None]  # additive, in dtype
    with torch.no_grad():
        want = exact(x.double(), absorbed=absorbed)
        got = ours(x, absorbed=absorbed)
        baseline, _ = theirs(x, rotary(x, positions), mask)
    assert got.dtype == dtype and torch.isfinite(got).all()
    base_err = (baseline.double() - want).abs().max()
    assert base_err <= 0.02 * want.abs().max()  # the baseline computes the same function
    ratio = assert_within_baseline(got, baseline, want)
    print(f"latent attention {dtype} absorbed={absorbed}: ratio {ratio:.3g}, baseline error {base_err:.3g}")


def test_the_library_caches_the_same_latents():
    """transformers' cache for DeepSeek-V3 also holds (B, 1, M, d_c) latents and
    (B, 1, M, d_R) rotated keys; the latents are ours, and the keys are ours up
    to the order of their dimensions: with rope_interleave the library writes
    the rotated pairs as (x0', x2', ..., x1', x3', ...), which leaves every dot
    product, and so the attention, unchanged."""
    hf = require_transformers()
    ours, theirs, rotary, _ = deepseek_pair(interleave=True, q_lora_rank=12, bias=False)
    x = torch.randn(2, 6, 32)
    past = hf.DynamicCache(config=theirs.config)
    ours_cache = LatentCache(2, 8, 4, 6)
    with torch.no_grad():
        assert_close(ours(x[:, :4], cache=ours_cache), their_forward(theirs, rotary, x[:, :4], past), rtol=1e-5, atol=1e-5)
        for t in (4, 5):  # one token at a time from both caches, ours in the absorbed form
            got = ours(x[:, t:t + 1], cache=ours_cache, absorbed=True)
            want = their_forward(theirs, rotary, x[:, t:t + 1], past, offset=t)
            assert_close(got, want, rtol=1e-5, atol=1e-5)
    layer = past.layers[0]
    assert layer.keys.shape == (2, 1, 6, 8) and layer.values.shape == (2, 1, 6, 4)
    assert_close(layer.keys[:, 0], ours_cache.c)
    deinterleave = torch.cat([torch.arange(0, 4, 2), torch.arange(1, 4, 2)])
    assert_close(layer.values[:, 0], ours_cache.k_rope[..., deinterleave])


# --- layer patterns ----------------------------------------------------------------


@pytest.mark.parametrize(
    "config_name, kwargs, period, local",
    [
        ("Gemma3TextConfig", dict(num_hidden_layers=62), 6, "sliding_attention"),  # Gemma 3 27B
        ("Gemma3TextConfig", dict(num_hidden_layers=26), 6, "sliding_attention"),  # Gemma 3 1B
        ("Gemma2Config", dict(num_hidden_layers=42), 2, "sliding_attention"),
        ("GptOssConfig", dict(num_hidden_layers=36), 2, "sliding_attention"),  # gpt-oss-120b
        ("GptOssConfig", dict(num_hidden_layers=24), 2, "sliding_attention"),  # gpt-oss-20b
        ("Llama4TextConfig", dict(num_hidden_layers=48), 4, "chunked_attention"),  # Llama 4 Scout
        ("Qwen3NextConfig", dict(num_hidden_layers=48), 4, "linear_attention"),
    ],
)
def test_layer_types_equal_the_library_configs(config_name, kwargs, period, local):
    hf = require_transformers()
    config = getattr(hf, config_name)(**kwargs)
    assert config.layer_types == periodic_layer_types(kwargs["num_hidden_layers"], period, local=local)


def test_gemma3_pattern_from_the_legacy_field():
    """Released Gemma 3 configs carried ``sliding_window_pattern: 6``; the
    library turns it into the same layer types."""
    hf = require_transformers()
    config = hf.Gemma3TextConfig(num_hidden_layers=34, sliding_window_pattern=6)
    assert config.layer_types == periodic_layer_types(34, 6)


def test_llama4_nope_layers_are_its_global_layers():
    hf = require_transformers()
    config = hf.Llama4TextConfig(num_hidden_layers=48)
    uses_rope = rope_layers(48, nope_interval=4)
    assert config.no_rope_layers == [int(r) for r in uses_rope]  # 1 = uses RoPE, despite the name
    types = periodic_layer_types(48, 4, local="chunked_attention")
    assert all((kind == "full_attention") == (not rope) for kind, rope in zip(types, uses_rope))
    assert config.attention_chunk_size == 8192


# --- masks ----------------------------------------------------------------------


def _their_mask(function, n, m):
    from transformers import masking_utils as mu

    out = mu.sdpa_mask(batch_size=1, q_length=n, kv_length=m, q_offset=m - n, kv_offset=0,
                       mask_function=function, allow_is_causal_skip=False)
    return out[0, 0]


@pytest.mark.parametrize("n, m", [(12, 12), (3, 12), (1, 12), (5, 9)])
@pytest.mark.parametrize("window", [1, 2, 4, 20])
def test_sliding_mask_equals_masking_utils(n, m, window):
    require_transformers()
    from transformers import masking_utils as mu

    want = _their_mask(mu.sliding_window_causal_mask_function(window), n, m)
    assert torch.equal(layer_mask("sliding_attention", n, m, window=window), want)


@pytest.mark.parametrize("n, m", [(12, 12), (3, 12), (1, 12), (5, 9)])
@pytest.mark.parametrize("chunk", [1, 3, 4, 20])
def test_chunked_mask_equals_masking_utils(n, m, chunk):
    require_transformers()
    from transformers import masking_utils as mu

    want = _their_mask(mu.chunked_causal_mask_function(chunk, torch.zeros(1, dtype=torch.long)), n, m)
    assert torch.equal(layer_mask("chunked_attention", n, m, chunk=chunk), want)


def test_full_mask_equals_masking_utils():
    require_transformers()
    from transformers import masking_utils as mu

    assert torch.equal(layer_mask("full_attention", 4, 10), _their_mask(mu.causal_mask_function, 4, 10))


def test_masks_built_from_configs():
    hf = require_transformers()
    from transformers import masking_utils as mu

    x = torch.zeros(1, 11, 16)
    positions = torch.arange(11)[None]
    gemma = hf.Gemma3TextConfig(num_hidden_layers=6, sliding_window=3, hidden_size=16, num_attention_heads=2,
                                num_key_value_heads=1, head_dim=8)
    llama = hf.Llama4TextConfig(num_hidden_layers=4, attention_chunk_size=4, hidden_size=16,
                                num_attention_heads=2, num_key_value_heads=1, head_dim=8)
    for config in (gemma, llama):
        config._attn_implementation = "sdpa"
    sliding = mu.create_sliding_window_causal_mask(config=gemma, inputs_embeds=x, attention_mask=None,
                                                   past_key_values=None, position_ids=positions)
    chunked = mu.create_chunked_causal_mask(config=llama, inputs_embeds=x, attention_mask=None,
                                            past_key_values=None, position_ids=positions)
    assert torch.equal(sliding[0, 0], layer_mask("sliding_attention", 11, window=3))
    assert torch.equal(chunked[0, 0], layer_mask("chunked_attention", 11, chunk=4))
