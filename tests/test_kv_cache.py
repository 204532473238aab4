"""Proof for snippets/efficiency/kv_cache.py.

Proves: the memory calculator's arithmetic (Llama 2 7B: 2 GiB per 4096-token
sequence in fp16; Llama 2 70B's 8 key/value heads instead of 64: 8x smaller)
and that a KVCache allocates exactly what it predicts; CachedSelfAttention
without a cache equals causal attention written out here from the equation
(key/value heads repeated); prefill + token-by-token decoding, and chunked
prefill after a cached prefix (N != M, lower-right mask), reproduce the full
causal forward pass of TinyDecoder position for position, for H_kv = H and
H_kv < H; greedy generation gives the same tokens with and without the cache;
future tokens never change past logits; every error message is raised; the
file runs alone from an empty folder.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from snippets.efficiency.kv_cache import (
    CachedSelfAttention,
    KVCache,
    TinyDecoder,
    generate,
    kv_cache_bytes,
)

SNIPPET = Path(__file__).resolve().parents[1] / "snippets" / "efficiency" / "kv_cache.py"
GiB = 2**30


def test_llama2_7b_is_2_gib_per_sequence():
    # 32 layers x 32 heads x d 128, fp16, 4096 tokens:
    # 2 * 4096 * 32 * 32 * 128 * 2 bytes = 2**31 bytes.
    assert kv_cache_bytes(1, 4096, 32, 32, 128, torch.float16) == 2 * GiB
    assert kv_cache_bytes(8, 4096, 32, 32, 128, torch.float16) == 16 * GiB
    assert kv_cache_bytes(1, 4096, 32, 32, 128, torch.float32) == 4 * GiB


def test_gqa_saving_llama2_70b_shape():
    # 80 layers, d 128, fp16, 4096 tokens: 64 kv heads (MHA) vs 8 (GQA) vs 1 (MQA).
    mha = kv_cache_bytes(1, 4096, 80, 64, 128)
    gqa = kv_cache_bytes(1, 4096, 80, 8, 128)
    mqa = kv_cache_bytes(1, 4096, 80, 1, 128)
    assert mha == 10 * GiB
    assert gqa * 4 == 5 * GiB  # 1.25 GiB
    assert mha == 8 * gqa == 64 * mqa


def test_cache_allocates_what_the_calculator_says():
    cache = KVCache(3, 2, 4, 8, 10, dtype=torch.float64)
    assert cache.nbytes == kv_cache_bytes(2, 10, 3, 4, 8, torch.float64)


def causal_reference(m: CachedSelfAttention, x: torch.Tensor) -> torch.Tensor:
    B, N, D = x.shape
    g = m.n_heads // m.n_kv_heads
    q = m.q_proj(x).view(B, N, m.n_heads, -1).transpose(1, 2)
    k = m.k_proj(x).view(B, N, m.n_kv_heads, -1).transpose(1, 2).repeat_interleave(g, dim=1)
    v = m.v_proj(x).view(B, N, m.n_kv_heads, -1).transpose(1, 2).repeat_interleave(g, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~torch.ones(N, N, dtype=torch.bool).tril(), float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    return m.out_proj(out.transpose(1, 2).reshape(B, N, D))


@pytest.mark.parametrize("n_kv_heads", [None, 2, 1])
def test_attention_layer_matches_equation(n_kv_heads):
    torch.manual_seed(0)
    m = CachedSelfAttention(16, 4, n_kv_heads)
    x = torch.randn(2, 6, 16)
    torch.testing.assert_close(m(x), causal_reference(m, x))


@pytest.mark.parametrize("n_kv_heads", [None, 2])
def test_layer_decoding_matches_full_pass(n_kv_heads):
    torch.manual_seed(0)
    m = CachedSelfAttention(16, 4, n_kv_heads)
    x = torch.randn(2, 9, 16)
    full = m(x)
    cache = KVCache(1, 2, m.n_kv_heads, m.d_head, 9)
    parts = [m(x[:, :4], cache)]  # prefill 4
    parts.append(m(x[:, 4:7], cache))  # a chunk of 3 after 4 cached: N=3, M=7
    parts += [m(x[:, t : t + 1], cache) for t in (7, 8)]  # then one at a time
    torch.testing.assert_close(torch.cat(parts, dim=1), full)
    assert cache.seq_len() == 9


@pytest.mark.parametrize("n_kv_heads", [None, 1])
def test_decoder_incremental_equals_full(n_kv_heads):
    torch.manual_seed(0)
    model = TinyDecoder(50, 32, 4, 2, n_kv_heads=n_kv_heads, max_len=32).eval()
    tokens = torch.randint(0, 50, (2, 12))
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache(2)
        steps = [model(tokens[:, :5], cache), model(tokens[:, 5:8], cache)]
        steps += [model(tokens[:, t : t + 1], cache) for t in range(8, 12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)


def test_generate_same_tokens_with_and_without_cache():
    torch.manual_seed(0)
    model = TinyDecoder(40, 32, 4, 2, n_kv_heads=2, max_len=40).eval()
    prompt = torch.randint(0, 40, (2, 6))
    with_cache = generate(model, prompt, 10, use_cache=True)
    without = generate(model, prompt, 10, use_cache=False)
    assert with_cache.shape == (2, 16)
    assert torch.equal(with_cache, without)
    assert torch.equal(with_cache[:, :6], prompt)
    assert torch.equal(generate(model, prompt, 0), prompt)


def test_future_tokens_do_not_change_past_logits():
    torch.manual_seed(0)
    model = TinyDecoder(30, 16, 2, 1, max_len=16).eval()
    a = torch.randint(0, 30, (1, 8))
    b = a.clone()
    b[:, 5:] = (b[:, 5:] + 1) % 30
    with torch.no_grad():
        la, lb = model(a), model(b)
    torch.testing.assert_close(la[:, :5], lb[:, :5])
    assert not torch.allclose(la[:, 5:], lb[:, 5:])




def test_errors():
    with pytest.raises(ValueError, match=r"seq_len must be a non-negative int, got -1"):
        kv_cache_bytes(1, -1, 1, 1, 1)
    with pytest.raises(TypeError, match=r"dtype must be a torch.dtype, got int"):
        kv_cache_bytes(1, 1, 1, 1, 1, 2)
    with pytest.raises(ValueError, match=r"max_len must be a positive int, got 0"):
        KVCache(1, 1, 1, 1, 0)
    cache = KVCache(1, 1, 2, 4, 3)
    with pytest.raises(ValueError, match=r"the cache holds max_len=3 tokens; layer 0 has 0 and got 4 more"):
        cache.update(0, torch.zeros(1, 2, 4, 4), torch.zeros(1, 2, 4, 4))
    with pytest.raises(ValueError, match=r"k and v must have shape \(B, H_kv, N, d\) = \(1, 2, N, 4\), got k \(1, 3, 1, 4\)"):
        cache.update(0, torch.zeros(1, 3, 1, 4), torch.zeros(1, 3, 1, 4))
    with pytest.raises(ValueError, match=r"n_kv_heads must divide n_heads, got n_heads=4 and n_kv_heads=3"):
        CachedSelfAttention(16, 4, 3)
    with pytest.raises(ValueError, match=r"d_model must be divisible by n_heads, got d_model=10 and n_heads=4"):
        CachedSelfAttention(10, 4)
    with pytest.raises(ValueError, match=r"n_heads must be a positive int, got 0"):
        CachedSelfAttention(16, 0)
    with pytest.raises(ValueError, match=r"x must have shape \(B, N, D\) with D = 16, got \(2, 16\)"):
        CachedSelfAttention(16, 4)(torch.zeros(2, 16))
    model = TinyDecoder(10, 8, 2, 1, max_len=4)
    with pytest.raises(TypeError, match=r"tokens must be an int64 or int32 tensor of token ids, got torch.float32"):
        model(torch.zeros(1, 2))
    with pytest.raises(ValueError, match=r"positions run to 5, beyond max_len=4"):
        model(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"n_new must be a non-negative int, got -1"):
        generate(model, torch.zeros(1, 2, dtype=torch.long), -1)


def test_exercise_cache_equals_weights():
    per_token = kv_cache_bytes(1, 1, 32, 32, 128, torch.float16)
    assert per_token == 2**19  # 0.5 MiB
    assert kv_cache_bytes(1, 25600, 32, 32, 128, torch.float16) * 2 == 25 * GiB  # 12.5 GiB


def test_errors_for_layers_devices_dtypes_and_ids():
    cache = KVCache(2, 1, 2, 4, 3)
    k = torch.zeros(1, 2, 1, 4)
    cases = [
        (lambda: KVCache(1, 1, 1, 1, 4, dtype=torch.int64), TypeError, r"dtype must be a floating torch.dtype, got torch.int64"),
        (lambda: cache.update(2, k, k), ValueError, r"layer must be an int in \[0, 2\), got 2"),
        (lambda: cache.update(-1, k, k), ValueError, r"layer must be an int in \[0, 2\), got -1"),
        (lambda: cache.update(0, [0.0], k), TypeError, r"k must be a torch.Tensor, got list"),
        (lambda: cache.update(0, k, k.double()), TypeError, r"v must have the cache's dtype torch.float32 on cpu, got torch.float64 on cpu"),
        (lambda: cache.update(0, k.to("meta"), k), TypeError, r"k must have the cache's dtype torch.float32 on cpu, got torch.float32 on meta"),
        (lambda: cache.update(0, k, k[..., :2]), ValueError, r"k and v must have shape \(B, H_kv, N, d\) = \(1, 2, N, 4\), got k \(1, 2, 1, 4\) and v \(1, 2, 1, 2\)"),
        (lambda: TinyDecoder(0, 8, 2, 1), ValueError, r"vocab_size must be an int >= 1, got 0"),
        (lambda: TinyDecoder(10, 8, 2, 1, max_len=2.5), ValueError, r"max_len must be an int >= 1, got 2.5"),
    ]
    for make, error, match in cases:
        with pytest.raises(error, match=match):
            make()


def test_model_and_attention_errors():
    attention = CachedSelfAttention(8, 2)
    x = torch.randn(1, 3, 8)
    model = TinyDecoder(10, 8, 2, 1, max_len=4)
    cases = [
        (lambda: attention(x.double()), TypeError, r"x must have the module's dtype torch.float32, got torch.float64"),
        (lambda: attention(x.to("meta")), ValueError, r"x must be on the module's device cpu, got meta"),
        (lambda: attention(x, "cache"), TypeError, r"cache must be a KVCache or None, got str"),
        (lambda: attention(x, KVCache(1, 1, 2, 4, 8), 1), ValueError, r"layer must be an int in \[0, 1\), got 1"),
        (lambda: attention(x, KVCache(1, 2, 2, 4, 8)), ValueError,
         r"cache must hold x's batch size B=1 in the module's dtype torch.float32 on cpu, got B=2, torch.float32 on cpu"),
        (lambda: model(torch.tensor([[1, 10]])), ValueError, r"tokens must lie in \[0, vocab_size=10\), got ids from 1 to 10"),
        (lambda: model(torch.ones(1, 2, dtype=torch.bool)), TypeError, r"tokens must be an int64 or int32 tensor of token ids, got torch.bool"),
        (lambda: model(torch.ones(1, 2, dtype=torch.long, device="meta")), ValueError, r"tokens must be on the model's device cpu, got meta"),
        (lambda: model(torch.ones(1, 2, dtype=torch.long), [1]), TypeError, r"cache must be a KVCache or None, got list"),
        (lambda: model(torch.ones(2, dtype=torch.long)), ValueError, r"tokens must have shape \(B, N\), got \(2,\)"),
        (lambda: generate("model", torch.ones(1, 2, dtype=torch.long), 2), TypeError, r"model must be a TinyDecoder, got str"),
        (lambda: generate(model, torch.tensor([[-1, 2]]), 2), ValueError, r"prompt must lie in \[0, vocab_size=10\), got ids from -1 to 2"),
    ]
    for make, error, match in cases:
        with pytest.raises(error, match=match):
            make()
