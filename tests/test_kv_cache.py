"""Proof for snippets/efficiency/kv_cache.py.

Proves: the memory calculator's arithmetic (Llama 2 7B: 2 GiB per 4096-token
sequence in fp16; Llama 2 70B's 8 key/value heads instead of 64: 8x smaller)
and that a KVCache allocates exactly what it predicts; CachedSelfAttention
without a cache equals causal attention written out here from the equation
(key/value heads repeated); prefill + token-by-token decoding, and chunked
prefill after a cached prefix (N != M, lower-right mask), reproduce the full
causal forward pass of TinyDecoder position for position, for H_kv = H and
H_kv < H; TinyDecoder's logits, full and cached, equal the model written out
from its weights here and nn.TransformerEncoderLayer with the weights copied
(so a broken block cannot hide behind cached == uncached), and greedy decoding
takes their argmax; a chunk after the cache keeps its future out even when
scores reach 1e9; greedy generation gives the same tokens with and without the cache;
future tokens never change past logits; every error message is raised; the
file runs alone from an empty folder.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

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




def decoder_by_hand(model: TinyDecoder, tokens: torch.Tensor) -> torch.Tensor:
    """TinyDecoder's logits written out from its weights: embeddings, then per layer
    x + attn(LN1(x)) and x + W2 gelu(W1 LN2(x) + b1) + b2, a final LN, the head."""
    B, N = tokens.shape
    x = model.embed.weight[tokens] + model.pos.weight[:N]
    for attn, norm1, norm2, (fc1, _, fc2) in zip(model.attn, model.norm1, model.norm2, model.mlp):
        h = F.layer_norm(x, x.shape[-1:], norm1.weight, norm1.bias, norm1.eps)
        g = attn.n_heads // attn.n_kv_heads
        q = F.linear(h, attn.q_proj.weight, attn.q_proj.bias).view(B, N, attn.n_heads, -1).transpose(1, 2)
        k = F.linear(h, attn.k_proj.weight, attn.k_proj.bias).view(B, N, attn.n_kv_heads, -1).transpose(1, 2)
        v = F.linear(h, attn.v_proj.weight, attn.v_proj.bias).view(B, N, attn.n_kv_heads, -1).transpose(1, 2)
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(~torch.ones(N, N, dtype=torch.bool).tril(), float("-inf"))
        heads = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, N, -1)
        x = x + F.linear(heads, attn.out_proj.weight, attn.out_proj.bias)
        h = F.layer_norm(x, x.shape[-1:], norm2.weight, norm2.bias, norm2.eps)
        x = x + F.linear(F.gelu(F.linear(h, fc1.weight, fc1.bias)), fc2.weight, fc2.bias)
    x = F.layer_norm(x, x.shape[-1:], model.norm.weight, model.norm.bias, model.norm.eps)
    return x @ model.head.weight.T


def randomised(model: TinyDecoder) -> TinyDecoder:
    """Norm weights away from 1 and biases away from 0, so that each one matters."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.normal_(mean=1.0 if name.endswith("weight") else 0.0, std=0.3)
    return model.eval()


@pytest.mark.parametrize("n_kv_heads", [None, 2, 1])
def test_decoder_equals_the_model_written_out(n_kv_heads):
    # Not the model against itself: the reference is written from the weights,
    # so a dropped residual, a skipped norm or a wrong head breaks the match,
    # whether the logits come from one full pass or from cached decoding.
    torch.manual_seed(0)
    model = randomised(TinyDecoder(40, 16, 4, 2, n_kv_heads=n_kv_heads, max_len=16))
    tokens = torch.randint(0, 40, (2, 9))
    want = decoder_by_hand(model, tokens)
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), want)
        cache = model.new_cache(2)
        steps = [model(tokens[:, :4], cache), model(tokens[:, 4:6], cache)]
        steps += [model(tokens[:, t : t + 1], cache) for t in range(6, 9)]
    torch.testing.assert_close(torch.cat(steps, dim=1), want)
    # Greedy decoding picks the argmax of the written-out logits at every step.
    generated = generate(model, tokens[:, :3], 5)
    for t in range(3, 8):
        assert torch.equal(generated[:, t], decoder_by_hand(model, generated[:, :t])[:, -1].argmax(-1))


def test_decoder_equals_torch_encoder_layers():
    # With H_kv = H each block is nn.TransformerEncoderLayer (pre-norm, GELU,
    # 4D hidden) under a causal mask; copy the weights in and compare.
    torch.manual_seed(1)
    model = randomised(TinyDecoder(30, 16, 4, 2, max_len=16))
    tokens = torch.randint(0, 30, (2, 7))
    x = model.embed.weight[tokens] + model.pos.weight[:7]
    for attn, norm1, norm2, (fc1, _, fc2) in zip(model.attn, model.norm1, model.norm2, model.mlp):
        layer = nn.TransformerEncoderLayer(16, 4, 64, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True).eval()
        with torch.no_grad():
            layer.self_attn.in_proj_weight.copy_(torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]))
            layer.self_attn.in_proj_bias.copy_(torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias]))
            layer.self_attn.out_proj.load_state_dict(attn.out_proj.state_dict())
            layer.norm1.load_state_dict(norm1.state_dict())
            layer.norm2.load_state_dict(norm2.state_dict())
            layer.linear1.load_state_dict(fc1.state_dict())
            layer.linear2.load_state_dict(fc2.state_dict())
            x = layer(x, src_mask=nn.Transformer.generate_square_subsequent_mask(7), is_causal=True)
    with torch.no_grad():
        want = model.head(model.norm(x))
        torch.testing.assert_close(model(tokens), want)
        cache = model.new_cache(2)
        steps = [model(tokens[:, :3], cache)] + [model(tokens[:, t : t + 1], cache) for t in range(3, 7)]
    torch.testing.assert_close(torch.cat(steps, dim=1), want)


@pytest.mark.parametrize("n_kv_heads", [None, 2])
def test_chunk_after_the_cache_hides_its_future_at_huge_scores(n_kv_heads):
    # W_q of every query head is minus W_k of its key/value head, so a token
    # scores -|k|^2 / sqrt(d) against a copy of itself: about -1e9 and below for
    # inputs of 1e5 (float32). The cache holds three copies of token u and the
    # chunk starts with u too, so the chunk's first query has nothing but such
    # scores. Its two later tokens are hidden from it by the lower-right mask;
    # set to -10 u they score +10 |k|^2 / sqrt(d) with huge values. With a
    # boolean mask (or -inf) the first query's output does not move; a float
    # mask of -1e4 (or -1e9) would hand it to them.
    torch.manual_seed(0)
    m = CachedSelfAttention(16, 4, n_kv_heads).eval()
    h_kv, g = m.n_kv_heads, m.n_heads // m.n_kv_heads
    with torch.no_grad():
        m.k_proj.bias.normal_()
        m.q_proj.weight.copy_(-m.k_proj.weight.view(h_kv, 1, 4, 16).expand(h_kv, g, 4, 16).reshape(16, 16))
        m.q_proj.bias.copy_(-m.k_proj.bias.view(h_kv, 1, 4).expand(h_kv, g, 4).reshape(16))
    u = torch.randn(2, 1, 16) * 1e5

    def first_query_of_chunk(later: torch.Tensor) -> torch.Tensor:
        cache = KVCache(1, 2, m.n_kv_heads, m.d_head, 6)
        with torch.no_grad():
            m(u.expand(2, 3, 16), cache)  # prefill: three copies of u
            return m(torch.cat([u, later], dim=1), cache)[:, 0]  # N = 3 queries, M = 6 keys

    out = first_query_of_chunk(torch.randn(2, 2, 16) * 1e5)
    moved = first_query_of_chunk(-10 * u.expand(2, 2, 16))
    assert torch.isfinite(out).all() and torch.isfinite(moved).all()
    torch.testing.assert_close(moved, out, rtol=1e-5, atol=1e-5 * out.abs().max().item())


def test_errors():
    with pytest.raises(ValueError, match=r"seq_len must be an int >= 0, got -1"):
        kv_cache_bytes(1, -1, 1, 1, 1)
    with pytest.raises(ValueError, match=r"dtype must be a torch.dtype, got 2"):
        kv_cache_bytes(1, 1, 1, 1, 1, 2)
    with pytest.raises(ValueError, match=r"max_len must be an int >= 1, got 0"):
        KVCache(1, 1, 1, 1, 0)
    cache = KVCache(1, 1, 2, 4, 3)
    with pytest.raises(ValueError, match=r"k must end by max_len=3, got 4 tokens after 0"):
        cache.update(0, torch.zeros(1, 2, 4, 4), torch.zeros(1, 2, 4, 4))
    with pytest.raises(ValueError, match=r"k must fit the cache: \(1, 2, N, 4\) torch.float32 on cpu, got torch.float32 \(1, 3, 1, 4\)"):
        cache.update(0, torch.zeros(1, 3, 1, 4), torch.zeros(1, 3, 1, 4))
    with pytest.raises(ValueError, match=r"n_kv_heads divide n_heads, got d_model=16, n_heads=4, n_kv_heads=3"):
        CachedSelfAttention(16, 4, 3)
    with pytest.raises(ValueError, match=r"n_heads must divide d_model .* got d_model=10, n_heads=4"):
        CachedSelfAttention(10, 4)
    with pytest.raises(ValueError, match=r"n_heads must be an int >= 1, got 0"):
        CachedSelfAttention(16, 0)
    with pytest.raises(ValueError, match=r"x must be \(B, N, 16\) torch.float32 on cpu, got torch.float32 \(2, 16\)"):
        CachedSelfAttention(16, 4)(torch.zeros(2, 16))
    model = TinyDecoder(10, 8, 2, 1, max_len=4)
    with pytest.raises(ValueError, match=r"tokens must be \(B, N\) integer ids on cpu, got torch.float32"):
        model(torch.zeros(1, 2))
    with pytest.raises(ValueError, match=r"tokens must end by 4, got 5"):
        model(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"n_new must be an int >= 0, got -1"):
        generate(model, torch.zeros(1, 2, dtype=torch.long), -1)


def test_exercise_cache_equals_weights():
    per_token = kv_cache_bytes(1, 1, 32, 32, 128, torch.float16)
    assert per_token == 2**19  # 0.5 MiB
    assert kv_cache_bytes(1, 25600, 32, 32, 128, torch.float16) * 2 == 25 * GiB  # 12.5 GiB


def test_errors_for_layers_devices_dtypes_and_ids():
    cache = KVCache(2, 1, 2, 4, 3)
    k = torch.zeros(1, 2, 1, 4)
    cases = [
        (lambda: KVCache(1, 1, 2, 4, 4, dtype=torch.int64).update(0, k, k), ValueError,
         r"k must fit the cache: \(1, 2, N, 4\) torch.int64 on cpu, got torch.float32"),
        (lambda: cache.update(2, k, k), ValueError, r"layer must be an int in \[0, 2\), got 2"),
        (lambda: cache.update(-1, k, k), ValueError, r"layer must be an int in \[0, 2\), got -1"),
        (lambda: cache.update(0, [0.0], k), ValueError, r"k must fit the cache: \(1, 2, N, 4\) torch.float32 on cpu, got list"),
        (lambda: cache.update(0, k, k.double()), ValueError, r"v must fit the cache: \(1, 2, N, 4\) torch.float32 on cpu, got torch.float64 \(1, 2, 1, 4\) on cpu"),
        (lambda: cache.update(0, k.to("meta"), k), ValueError, r"k must fit the cache: .* on cpu, got torch.float32 \(1, 2, 1, 4\) on meta"),
        (lambda: cache.update(0, k, k[..., :2]), ValueError, r"v must fit the cache: \(1, 2, N, 4\) torch.float32 on cpu, got torch.float32 \(1, 2, 1, 2\)"),
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
        (lambda: attention(x.double()), ValueError, r"x must be \(B, N, 8\) torch.float32 on cpu, got torch.float64 \(1, 3, 8\) on cpu"),
        (lambda: attention(x.to("meta")), ValueError, r"x must be \(B, N, 8\) torch.float32 on cpu, got torch.float32 \(1, 3, 8\) on meta"),
        (lambda: attention(x, KVCache(1, 1, 2, 4, 8), 1), ValueError, r"layer must be an int in \[0, 1\), got 1"),
        (lambda: attention(x, KVCache(1, 2, 2, 4, 8)), ValueError,
         r"k must fit the cache: \(2, 2, N, 4\) torch.float32 on cpu, got torch.float32 \(1, 2, 3, 4\)"),
        (lambda: model(torch.tensor([[1, 10]])), ValueError, r"tokens must lie in \[0, vocab_size=10\), got \[10\]"),
        (lambda: model(torch.ones(1, 2, dtype=torch.bool)), ValueError, r"tokens must be \(B, N\) integer ids on cpu, got torch.bool"),
        (lambda: model(torch.ones(1, 2, dtype=torch.long, device="meta")), ValueError, r"tokens must be \(B, N\) integer ids on cpu, got torch.int64 \(1, 2\) on meta"),
        (lambda: model(torch.ones(2, dtype=torch.long)), ValueError, r"tokens must be \(B, N\) integer ids on cpu, got torch.int64 \(2,\)"),
        (lambda: generate(model, torch.tensor([[-1, 2]]), 2), ValueError, r"prompt must lie in \[0, vocab_size=10\), got \[-1\]"),
    ]
    for make, error, match in cases:
        with pytest.raises(error, match=match):
            make()
