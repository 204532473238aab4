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
    """A decoder with every parameter drawn at random, the norms' weights and biases included.

    At their initial values (weight 1, bias 0) the two norms of a block are the
    same function, so code that swapped them would pass unseen.
    """
    torch.manual_seed(seed)
    model = TinyDecoder(vocab_size=37, d_model=32, n_heads=4, n_layers=2, n_kv_heads=2, max_len=40).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.5 * torch.randn_like(p))
            else:
                p.copy_(0.3 * torch.randn_like(p))
    return model


def test_every_parameter_is_randomised():
    init = TinyDecoder(vocab_size=37, d_model=32, n_heads=4, n_layers=2, n_kv_heads=2, max_len=40)
    for (name, ours), (_, theirs) in zip(tiny_model().named_parameters(), init.named_parameters()):
        assert not torch.equal(ours, theirs), f"{name} is still at its initial value"
        if "norm" in name:
            assert ours.std() > 0.1, f"{name} is nearly constant"


def test_tokens_equal_dynamic_cache_and_recompute():
    model = tiny_model()
    prompt = torch.randint(0, 37, (2, 5), generator=torch.Generator(device=torch.get_default_device()).manual_seed(1)).to(torch.get_default_device())
    ours = generate_static(model, prompt, 14)
    assert torch.equal(ours, generate(model, prompt, 14, use_cache=True))
    assert torch.equal(ours, generate(model, prompt, 14, use_cache=False))
    assert ours.shape == (2, 19) and torch.equal(ours[:, :5], prompt)


@torch.no_grad()
def test_step_logits_and_chunk_mask_equal_dynamic_cache():
    model = tiny_model(2)
    tokens = torch.randint(0, 37, (1, 12), generator=torch.Generator(device=torch.get_default_device()).manual_seed(3)).to(torch.get_default_device())
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
    prompt = torch.randint(0, 37, (1, 4), generator=torch.Generator(device=torch.get_default_device()).manual_seed(5)).to(torch.get_default_device())
    ours = generate_static(model, prompt, 8, compile_options={"backend": counter, "fullgraph": True})
    assert torch.equal(ours, generate(model, prompt, 8))
    assert counter.frame_count == 1, f"the step was compiled {counter.frame_count} times over 7 positions"
    torch._dynamo.reset()


def test_validation_messages():
    model = tiny_model()
    with pytest.raises(ValueError, match=r"max_len must be an int >= 1, got 0"):
        StaticKVCache(1, 1, 1, 4, 0)
    with pytest.raises(ValueError, match=r"batch must be an int >= 1, got -1"):
        StaticKVCache(1, -1, 1, 4, 8)
    with pytest.raises(ValueError, match=r"prompt must be \(B, N\) integer ids on cpu, got torch.float32"):
        generate_static(model, torch.zeros(1, 3), 2)
    with pytest.raises(ValueError, match=r"prompt must be \(B, N\) integer ids on cpu, got list"):
        generate_static(model, [1, 2], 2)
    with pytest.raises(ValueError, match=r"prompt must lie in \[0, vocab_size=37\), got \[37\]"):
        generate_static(model, torch.tensor([[0, 37]]), 2)
    with pytest.raises(ValueError, match=r"n_new must be an int >= 0, got -1"):
        generate_static(model, torch.zeros(1, 3, dtype=torch.long), -1)
    with pytest.raises(ValueError, match=r"n_new must keep N0 \+ n_new <= 40, got 41"):
        generate_static(model, torch.zeros(1, 3, dtype=torch.long), 38)


def test_cache_and_step_validation_messages():
    model = tiny_model()
    cache = StaticKVCache.for_model(model, 2, 8)
    tokens, positions = torch.zeros(2, 3, dtype=torch.long), torch.arange(3)
    # a cache that does not fit the model is refused by its own write
    with pytest.raises(ValueError, match=r"layer must be an int in \[0, 1\), got 1"):
        static_forward(model, StaticKVCache(1, 2, 2, 8, 8), tokens, positions)
    with pytest.raises(ValueError, match=r"k must fit the cache: \(2, 2, N, 8\) .*, got torch.float32 \(3, 2, 3, 8\)"):
        static_forward(model, cache, torch.zeros(3, 3, dtype=torch.long), positions)
    with pytest.raises(ValueError, match=r"tokens must be \(B, N\) integer ids on cpu, got torch.int64 \(2, 3\) on meta"):
        static_forward(model, cache, tokens.to("meta"), positions)
    with pytest.raises(ValueError, match=r"positions must be int64 \(3,\) on cpu, got torch.float32"):
        static_forward(model, cache, tokens, positions.float())
    with pytest.raises(ValueError, match=r"positions must be int64 \(3,\) on cpu, got torch.int64 \(4,\)"):
        static_forward(model, cache, tokens, torch.arange(4))
    with pytest.raises(ValueError, match=r"positions must be int64 \(3,\) on cpu, got torch.int64 \(3,\) on meta"):
        static_forward(model, cache, tokens, positions.to("meta"))
    k = torch.zeros(2, 2, 3, 8)
    with pytest.raises(ValueError, match=r"layer must be an int in \[0, 2\), got 2"):
        cache.write(2, positions, k, k)
    with pytest.raises(ValueError, match=r"v must fit the cache: .* on cpu, got torch.float64 \(2, 2, 3, 8\) on cpu"):
        cache.write(0, positions, k, k.double())
    with pytest.raises(ValueError, match=r"k must fit the cache: \(2, 2, N, 8\) torch.float32 on cpu, got torch.float32 \(2, 2, 3, 4\)"):
        cache.write(0, positions, k[..., :4], k[..., :4])
    with pytest.raises(ValueError, match=r"positions must be int64 \(3,\) on cpu, got torch.int64 \(2,\)"):
        cache.write(0, positions[:2], k, k)
    with pytest.raises(ValueError, match=r"positions must be int64 \(3,\) on cpu, got torch.int32"):
        cache.write(0, positions.int(), k, k)
    with pytest.raises(ValueError, match=r"positions must be int64 \(N,\) on None, got torch.int64 \(1, 3\)"):
        cache.mask(positions[None])
