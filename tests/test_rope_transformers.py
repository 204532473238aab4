"""Long-context RoPE against the ``transformers`` library (no download).

For every type the site implements ("default", "linear", "dynamic", "yarn",
"llama3"), across several configurations (full and partial rotary, the released
Llama 3.1 and 3.2 values, YaRN with and without truncation, DeepSeek's two
mscale coefficients, dynamic NTK below, at and beyond the original length), the
inverse frequencies and the attention factor must equal those of
``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS``; "default" is not in
that table in transformers 5, so each model class's
``compute_default_rope_parameters`` is the oracle. Then the rotation itself:
cos, sin and the rotated q and k of ``LlamaRotaryEmbedding`` and
``GPTNeoXRotaryEmbedding`` (partial rotary) against ``ScaledRotaryEmbedding``.

Without ``transformers`` these tests skip, except in CI (the CI environment
variable set), where they fail: CI installs requirements-extra.txt.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from torch.testing import assert_close

from snippets.modern.long_context_rope import ScaledRotaryEmbedding, apply_partial_rotary, rope_inv_freq, rotary_angles

from transformers_support import require_transformers, skip_module_without_transformers, transformers

skip_module_without_transformers()



def rope_utils():
    require_transformers()
    return importlib.import_module("transformers.modeling_rope_utils")


def llama_config(d: int, params: dict, max_pos: int):
    hf = require_transformers()
    return hf.LlamaConfig(hidden_size=2 * d, num_attention_heads=2, num_key_value_heads=2, head_dim=d,
                          intermediate_size=8, num_hidden_layers=1, vocab_size=16,
                          max_position_embeddings=max_pos, rope_parameters=dict(params))


def ours(d: int, params: dict, max_pos: int, seq_len=None):
    """Our call for the same configuration: transformers' names, ``base`` for rope_theta;
    "dynamic" reads its original length from max_position_embeddings there."""
    kw = dict(params)
    kw["base"] = kw.pop("rope_theta")
    if kw["rope_type"] == "dynamic":
        kw["original_max_position_embeddings"] = max_pos
    return rope_inv_freq(d, seq_len=seq_len, **kw)


L31 = dict(rope_theta=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
           original_max_position_embeddings=8192)

# (head width d, rope_parameters, max_position_embeddings)
SCALED = [
    (32, dict(rope_type="linear", rope_theta=10000.0, factor=2.0), 64),
    (64, dict(rope_type="linear", rope_theta=500000.0, factor=4.5, partial_rotary_factor=0.5), 64),
    (128, dict(rope_type="llama3", **L31), 131072),  # Llama 3.1 as released
    (64, dict(rope_type="llama3", **{**L31, "factor": 32.0}), 131072),  # Llama 3.2's factor
    (32, dict(rope_type="llama3", rope_theta=10000.0, factor=4.0, low_freq_factor=2.0, high_freq_factor=8.0,
              original_max_position_embeddings=256), 1024),
    (64, dict(rope_type="llama3", partial_rotary_factor=0.5, **L31), 65536),
    (64, dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=64), 256),
    (128, dict(rope_type="yarn", rope_theta=10000.0, factor=16.0, original_max_position_embeddings=4096), 65536),
    (64, dict(rope_type="yarn", rope_theta=150000.0, factor=32.0, original_max_position_embeddings=4096,
              beta_fast=32.0, beta_slow=1.0, truncate=False), 131072),  # gpt-oss's form
    (64, dict(rope_type="yarn", rope_theta=10000.0, factor=40.0, original_max_position_embeddings=4096,
              mscale=1.0, mscale_all_dim=0.707), 163840),  # DeepSeek's two coefficients
    (64, dict(rope_type="yarn", rope_theta=10000.0, factor=8.0, original_max_position_embeddings=512,
              beta_fast=16.0, beta_slow=2.0, attention_factor=1.5), 4096),
    (64, dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=256,
              partial_rotary_factor=0.5), 1024),
]


# Released configurations with equal bounds: the ramp degenerates to a step.
# Kimi K2's config.json: YaRN, factor 32, beta_fast = beta_slow = 1, mscale and
# mscale_all_dim 1, original 4,096, rope_theta 50,000, a 64-wide rotary part.
KIMI_K2 = dict(rope_type="yarn", rope_theta=50000.0, factor=32.0, beta_fast=1.0, beta_slow=1.0, mscale=1.0,
               mscale_all_dim=1.0, original_max_position_embeddings=4096)
# Llama 4 Scout's config.json (Meta's release): llama3, factor 16, low and high
# frequency factors 1 and 1, original 8,192, rope_theta 500,000, d = 128.
LLAMA4_SCOUT = dict(rope_type="llama3", rope_theta=500000.0, factor=16.0, low_freq_factor=1.0,
                    high_freq_factor=1.0, original_max_position_embeddings=8192)
SCALED += [(64, KIMI_K2, 131072), (128, LLAMA4_SCOUT, 10485760)]


@pytest.mark.parametrize("name,d,params,max_pos", [("kimi-k2", 64, KIMI_K2, 131072),
                                                   ("llama-4-scout", 128, LLAMA4_SCOUT, 10485760)])
def test_released_configs_with_equal_bounds(name, d, params, max_pos):
    """Both were refused before (beta_fast must exceed beta_slow; high_freq_factor
    must exceed low_freq_factor); transformers accepts them and so must we."""
    theirs, their_factor = rope_utils().ROPE_INIT_FUNCTIONS[params["rope_type"]](llama_config(d, params, max_pos), "cpu")
    mine, my_factor = ours(d, params, max_pos)
    assert torch.isfinite(mine).all()
    assert_close(mine, theirs.float())
    assert my_factor == pytest.approx(their_factor, rel=1e-12)
    base = rope_utils().ROPE_INIT_FUNCTIONS["linear"](llama_config(d, {"rope_type": "linear", "factor": 1.0,
                                                                       "rope_theta": params["rope_theta"]}, max_pos),
                                                      "cpu")[0]
    ratio = (base / mine).float()  # every plane is either kept (1) or divided (factor): a step
    assert (((ratio - 1).abs() < 1e-5) | ((ratio - params["factor"]).abs() < 1e-3 * params["factor"])).all()


@pytest.mark.parametrize("d,params,max_pos", SCALED, ids=lambda v: str(v) if not isinstance(v, dict) else v["rope_type"])
def test_scaled_types_equal_rope_init_functions(d, params, max_pos):
    theirs, their_factor = rope_utils().ROPE_INIT_FUNCTIONS[params["rope_type"]](llama_config(d, params, max_pos), "cpu")
    mine, my_factor = ours(d, params, max_pos)
    assert mine.shape == theirs.shape
    assert_close(mine, theirs.float())
    assert my_factor == pytest.approx(their_factor, rel=1e-12)


@pytest.mark.parametrize("factor", [1.0, 2.0, 4.0])
@pytest.mark.parametrize("seq_len", [None, 0, 100, 256, 257, 768, 2560])
@pytest.mark.parametrize("partial", [1.0, 0.5])
def test_dynamic_equals_rope_init_functions_below_at_and_beyond_the_window(factor, seq_len, partial):
    params = dict(rope_type="dynamic", rope_theta=10000.0, factor=factor, partial_rotary_factor=partial)
    theirs, their_factor = rope_utils().ROPE_INIT_FUNCTIONS["dynamic"](llama_config(64, params, 256), "cpu",
                                                                       seq_len=seq_len)
    mine, my_factor = ours(64, params, 256, seq_len=seq_len)
    assert_close(mine, theirs)
    assert my_factor == their_factor == 1.0


@pytest.mark.parametrize("d,theta,partial", [(64, 10000.0, 1.0), (128, 500000.0, 1.0), (96, 10000.0, 0.25),
                                             (64, 1e6, 0.5)])
def test_default_equals_the_models_default(d, theta, partial):
    hf = require_transformers()
    params = dict(rope_type="default", rope_theta=theta, partial_rotary_factor=partial)
    mine, my_factor = ours(d, params, 64)
    neox = hf.GPTNeoXConfig(hidden_size=2 * d, num_attention_heads=2, intermediate_size=8, num_hidden_layers=1,
                            vocab_size=16, max_position_embeddings=64, rope_parameters=dict(params))
    module = importlib.import_module("transformers.models.gpt_neox.modeling_gpt_neox")
    theirs, their_factor = module.GPTNeoXRotaryEmbedding.compute_default_rope_parameters(neox)
    assert_close(mine, theirs)
    assert my_factor == their_factor == 1.0
    if partial == 1.0:  # Llama's default ignores partial_rotary_factor; with the whole head it agrees
        llama = importlib.import_module("transformers.models.llama.modeling_llama")
        theirs, _ = llama.LlamaRotaryEmbedding.compute_default_rope_parameters(llama_config(d, params, 64))
        assert_close(mine, theirs)


def _their_rotation(rotary_module, apply, config, q, k, positions):
    rope = rotary_module(config)
    cos, sin = rope(q, positions)  # (B, M, r), halves repeated, times the attention factor
    m, n = k.shape[-2], q.shape[-2]
    q_rot, _ = apply(q, q, cos[:, m - n :], sin[:, m - n :])
    _, k_rot = apply(k, k, cos, sin)
    return cos, sin, q_rot, k_rot


@pytest.mark.parametrize("d,params,max_pos", [SCALED[0], SCALED[2], SCALED[7], SCALED[9], SCALED[11]],
                         ids=["linear", "llama3", "yarn", "yarn-mscale", "yarn-partial"])
def test_llama_rotary_embedding_end_to_end(d, params, max_pos):
    """cos, sin (with the attention factor) and the rotated q and k of Llama's code."""
    llama = importlib.import_module("transformers.models.llama.modeling_llama")
    if params.get("partial_rotary_factor", 1.0) != 1.0:  # Llama rotates whole heads; GPT-NeoX splits them
        llama = importlib.import_module("transformers.models.gpt_neox.modeling_gpt_neox")
        hf = require_transformers()
        config = hf.GPTNeoXConfig(hidden_size=2 * d, num_attention_heads=2, intermediate_size=8,
                                  num_hidden_layers=1, vocab_size=16, max_position_embeddings=max_pos,
                                  rope_parameters=dict(params))
        module_cls = llama.GPTNeoXRotaryEmbedding
    else:
        config = llama_config(d, params, max_pos)
        module_cls = llama.LlamaRotaryEmbedding
    g = torch.Generator(device=torch.get_default_device()).manual_seed(0)
    q, k = torch.randn(2, 2, 5, d, generator=g), torch.randn(2, 2, 9, d, generator=g)
    offset = 100
    positions = torch.arange(offset, offset + 9).expand(2, 9)
    cos, sin, q_theirs, k_theirs = _their_rotation(module_cls, llama.apply_rotary_pos_emb, config, q, k, positions)

    kw = dict(params)
    kw["base"] = kw.pop("rope_theta")
    rope = ScaledRotaryEmbedding(d, **kw)
    my_cos, my_sin = rotary_angles(rope.inv_freq, positions, attention_factor=rope.attention_factor)
    assert_close(torch.cat((my_cos, my_cos), -1), cos)
    assert_close(torch.cat((my_sin, my_sin), -1), sin)
    # The frequencies agree to a float32 step (about 1e-7); at position 100 the
    # angles, and so the rotated entries of size ~3, agree to a few 1e-5.
    tol = dict(atol=5e-5, rtol=1e-4)
    q_mine, k_mine = rope(q, k, offset=offset)
    assert_close(q_mine, q_theirs, **tol)
    assert_close(k_mine, k_theirs, **tol)
    assert_close(apply_partial_rotary(k, my_cos, my_sin), k_theirs, **tol)  # batched (B, M, r/2) angles too


def test_gpt_neox_partial_rotary_end_to_end():
    """GPT-NeoX-20B's layout: a quarter of a 96-wide head rotates, the rest passes."""
    hf = require_transformers()
    neox = importlib.import_module("transformers.models.gpt_neox.modeling_gpt_neox")
    params = dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25)
    config = hf.GPTNeoXConfig(hidden_size=192, num_attention_heads=2, intermediate_size=8, num_hidden_layers=1,
                              vocab_size=16, max_position_embeddings=64, rope_parameters=params)
    g = torch.Generator(device=torch.get_default_device()).manual_seed(1)
    q, k = torch.randn(1, 2, 7, 96, generator=g), torch.randn(1, 2, 7, 96, generator=g)
    positions = torch.arange(7)[None]
    _, _, q_theirs, k_theirs = _their_rotation(neox.GPTNeoXRotaryEmbedding, neox.apply_rotary_pos_emb, config,
                                               q, k, positions)
    q_mine, k_mine = ScaledRotaryEmbedding(96, partial_rotary_factor=0.25)(q, k)
    assert_close(q_mine, q_theirs)
    assert_close(k_mine, k_theirs)
    assert torch.equal(q_mine[..., 24:], q[..., 24:])


def test_dynamic_module_follows_the_length_like_transformers():
    """LlamaRotaryEmbedding recomputes its frequencies when the positions outgrow
    max_position_embeddings and goes back to the originals for short inputs."""
    llama = importlib.import_module("transformers.models.llama.modeling_llama")
    d, L = 32, 16
    params = dict(rope_type="dynamic", rope_theta=10000.0, factor=2.0)
    theirs = llama.LlamaRotaryEmbedding(llama_config(d, params, L))
    mine = ScaledRotaryEmbedding(d, rope_type="dynamic", factor=2.0, original_max_position_embeddings=L)
    g = torch.Generator(device=torch.get_default_device()).manual_seed(2)
    for m in (3 * L, 8, L + 1):
        q = torch.randn(1, 2, m, d, generator=g)
        cos, sin = theirs(q, torch.arange(m)[None])
        want_q, want_k = llama.apply_rotary_pos_emb(q, q, cos, sin)
        got_q, got_k = mine(q, q)
        assert_close(got_q, want_q)
        assert_close(got_k, want_k)
