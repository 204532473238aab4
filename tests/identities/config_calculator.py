"""Identities proven for the calculator that reads config.json (models page)."""

from __future__ import annotations

import torch

from identities import identity
from snippets.modern import config_calculator as cc

PAGE = "modern/models.md"


@identity("config-cache-equals-transformers-hybrid",
          "the calculator's bytes for a tiny Qwen3-Next config (3 Gated DeltaNet layers, "
          "1 GQA layer) equal the .nbytes of the cache transformers holds after 1 to 9 tokens",
          page=PAGE, tol=0.0, needs=("transformers",))
def config_cache_equals_transformers_hybrid():
    import transformers

    config = transformers.Qwen3NextConfig(
        vocab_size=40, hidden_size=16, intermediate_size=16, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=6,
        linear_conv_kernel_dim=3, num_experts=2, num_experts_per_tok=1,
        moe_intermediate_size=8, shared_expert_intermediate_size=8)
    model = transformers.Qwen3NextForCausalLM(config).eval()
    held, ours = [], []
    for tokens in range(1, 10):
        cache = model(torch.randint(0, 40, (1, tokens)), use_cache=True).past_key_values
        held.append(sum(t.nbytes for layer in cache.layers for t in _tensors(layer)))
        ours.append(cc.cache_from_config(config.to_dict(), tokens, kv_dtype_bytes=4)["total"])
    return torch.tensor(ours, dtype=torch.float64), torch.tensor(held, dtype=torch.float64)


def _tensors(layer):
    for name in ("keys", "values"):
        if isinstance(getattr(layer, name, None), torch.Tensor):
            yield getattr(layer, name)
    for name in ("conv_states", "recurrent_states"):
        yield from (t for t in (getattr(layer, name, None) or {}).values()
                    if isinstance(t, torch.Tensor))


@identity("config-prefill-step-is-decode",
          "prefill FLOPs of T tokens minus those of T - 1 equal the decode FLOPs of token T "
          "(full, sliding and chunked layers, T = 2 ... 2,100)", page=PAGE, tol=0.0)
def config_prefill_step_is_decode():
    config = {"num_hidden_layers": 3, "num_attention_heads": 8, "num_key_value_heads": 2,
              "head_dim": 64, "sliding_window": 512, "attention_chunk_size": 1000,
              "layer_types": ["sliding_attention", "chunked_attention", "full_attention"]}
    steps, decode = [], []
    for t in range(2, 2101, 7):
        steps.append(cc.flops_from_config(config, t)["prefill_total"]
                     - cc.flops_from_config(config, t - 1)["prefill_total"])
        decode.append(cc.flops_from_config(config, t)["decode_total"])
    return torch.tensor(steps, dtype=torch.float64), torch.tensor(decode, dtype=torch.float64)
