"""Proof for snippets/efficiency/static_cache.py.

Proves: greedy decoding with the static cache gives exactly the tokens of the
dynamic cache and of recomputing everything (kv_cache.py's TinyDecoder, with
grouped-query heads); each step's logits equal the dynamic cache's; a chunk of
queries after a cached prefix sees the lower-right triangle; the one-token step
compiles to one graph with fullgraph=True and is never recompiled as the
position advances (what a CUDA graph needs); every validation message is raised.
"""

from __future__ import annotations

import pytest
import torch

from snippets.efficiency.kv_cache import TinyDecoder, generate
from snippets.efficiency.static_cache import StaticKVCache, generate_static, static_forward


def tiny_model(seed: int = 0) -> TinyDecoder:
    torch.manual_seed(seed)
    return TinyDecoder(vocab_size=37, d_model=32, n_heads=4, n_layers=2, n_kv_heads=2, max_len=40).eval()


def test_tokens_equal_dynamic_cache_and_recompute():
    model = tiny_model()
    prompt = torch.randint(0, 37, (2, 5), generator=torch.Generator().manual_seed(1)).to(torch.get_default_device())
    ours = generate_static(model, prompt, 14)
    assert torch.equal(ours, generate(model, prompt, 14, use_cache=True))
    assert torch.equal(ours, generate(model, prompt, 14, use_cache=False))
    assert ours.shape == (2, 19) and torch.equal(ours[:, :5], prompt)


@torch.no_grad()
def test_step_logits_and_chunk_mask_equal_dynamic_cache():
    model = tiny_model(2)
    tokens = torch.randint(0, 37, (1, 12), generator=torch.Generator().manual_seed(3)).to(torch.get_default_device())
    dynamic = model.new_cache(1, 12)
    static = StaticKVCache.for_model(model, 1, 12)
    # prefill 5, a chunk of 4 (lower-right triangle over 9 keys), then 3 single tokens
    for start, stop in ((0, 5), (5, 9), (9, 10), (10, 11), (11, 12)):
        want = model(tokens[:, start:stop], dynamic)
        got = static_forward(model, static, tokens[:, start:stop], torch.arange(start, stop))
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(static.k_1[:, :, :12], dynamic.k[1][:, :, :12])


def test_compiled_step_is_one_graph_with_no_recompiles():
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    counter = CompileCounter()  # a backend that counts the graphs it is handed and runs them eagerly
    model = tiny_model(4)
    prompt = torch.randint(0, 37, (1, 4), generator=torch.Generator().manual_seed(5)).to(torch.get_default_device())
    ours = generate_static(model, prompt, 8, compile_options={"backend": counter, "fullgraph": True})
    assert torch.equal(ours, generate(model, prompt, 8))
    assert counter.frame_count == 1, f"the step was compiled {counter.frame_count} times over 7 positions"
    torch._dynamo.reset()


def test_validation_messages():
    model = tiny_model()
    with pytest.raises(ValueError, match=r"max_len must be a positive int, got 0"):
        StaticKVCache(1, 1, 1, 4, 0)
    with pytest.raises(ValueError, match=r"batch must be a positive int, got True"):
        StaticKVCache(1, True, 1, 4, 8)
    with pytest.raises(ValueError, match=r"prompt must be a \(B, N0\) tensor of integer ids, got \(1, 3\) torch.float32"):
        generate_static(model, torch.zeros(1, 3), 2)
    with pytest.raises(ValueError, match=r"prompt must be a \(B, N0\) tensor of integer ids, got list"):
        generate_static(model, [1, 2], 2)
    with pytest.raises(ValueError, match=r"n_new must be a non-negative int, got -1"):
        generate_static(model, torch.zeros(1, 3, dtype=torch.long), -1)
    with pytest.raises(TypeError, match=r"compile_options must be a dict or None, got list"):
        generate_static(model, torch.zeros(1, 3, dtype=torch.long), 2, compile_options=["eager"])
    with pytest.raises(ValueError, match=r"positions run to 43, beyond max_len=40"):
        generate_static(model, torch.zeros(1, 3, dtype=torch.long), 40)
