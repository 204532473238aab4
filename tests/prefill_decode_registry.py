"""Registry for tests/test_prefill_decode.py: every snippet that keeps a cache or a state.

One ``Case`` per decoding path. Its ``build(dtype, seed)`` makes small random inputs
(and, for a model, small random weights) and returns two callables with nothing
left to pass:

- ``full()``: the whole sequence in one call, the snippet's own full forward;
- ``decode()``: the same sequence fed through the snippet's cache/state/step API,
  a prompt first where the API takes one, then one token at a time (and, where
  the API allows it, a chunk of several tokens after a cached prefix, the case
  whose causal mask must be aligned to the lower right).

Both return a tensor or a tuple of tensors with the same shapes; the test asks
them to agree. A new cached variant joins with one more ``Case(...)`` line in
``CASES``. A snippet the coverage rule flags (see ``flags_cache`` in the test
file) that has no token-by-token path goes in ``GAPS`` with the reason instead.

Sizes are tiny on purpose: the whole file runs in a few seconds on one core.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch
import torch.nn.functional as F

Outputs = torch.Tensor | tuple[torch.Tensor, ...]
Build = Callable[[torch.dtype, int], tuple[Callable[[], Outputs], Callable[[], Outputs]]]


@dataclasses.dataclass(frozen=True)
class Case:
    """One decoding path: ``module`` is the snippet's dotted name."""

    name: str
    module: str
    build: Build
    note: str = ""


@dataclasses.dataclass(frozen=True)
class Gap:
    """A flagged snippet with no token-by-token path to compare, and why."""

    name: str
    module: str
    reason: str


# ----------------------------------------------------------------------------
# Helpers: inputs on torch's default device (the conftest sets it per device).
# ----------------------------------------------------------------------------
def _gen(seed: int) -> torch.Generator:
    return torch.Generator(device=torch.get_default_device()).manual_seed(seed)


def _randn(gen, dtype, *shape) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=dtype)


def _rand(gen, dtype, *shape) -> torch.Tensor:
    return torch.rand(*shape, generator=gen, dtype=dtype)


def _qkv(gen, dtype, b=2, h=4, h_kv=4, n=9, d=8):
    q = _randn(gen, dtype, b, h, n, d)
    return q, _randn(gen, dtype, b, h_kv, n, d), _randn(gen, dtype, b, h_kv, n, d)


# The schedule every cache-taking case follows: a prompt of PROMPT tokens, then a
# chunk of CHUNK tokens after it (N != M: the lower-right mask), then one at a time.
PROMPT, CHUNK = 3, 2


def _spans(n: int, prompt: int = PROMPT, chunk: int = CHUNK) -> list[tuple[int, int]]:
    """[(0, prompt), (prompt, prompt + chunk), then (t, t + 1) for every later t]."""
    spans = [(0, prompt), (prompt, prompt + chunk)]
    return spans + [(t, t + 1) for t in range(prompt + chunk, n)]


# ----------------------------------------------------------------------------
# efficiency/
# ----------------------------------------------------------------------------
def _tiny_decoder(dtype, seed, n_kv_heads):
    from snippets.efficiency.kv_cache import TinyDecoder

    torch.manual_seed(seed)
    model = TinyDecoder(11, 16, 4, 2, n_kv_heads=n_kv_heads, max_len=16).to(dtype).eval()
    tokens = torch.randint(0, 11, (2, 9), generator=_gen(seed))
    return model, tokens


def kv_cache_case(n_kv_heads):
    def build(dtype, seed):
        model, tokens = _tiny_decoder(dtype, seed, n_kv_heads)

        def decode():
            cache = model.new_cache(tokens.shape[0], tokens.shape[1])
            return torch.cat([model(tokens[:, s:e], cache) for s, e in _spans(9)], dim=1)

        return lambda: model(tokens), decode
    return build


def static_cache(dtype, seed):
    from snippets.efficiency.static_cache import StaticKVCache, static_forward

    model, tokens = _tiny_decoder(dtype, seed, 2)

    def decode():
        cache = StaticKVCache.for_model(model, tokens.shape[0], tokens.shape[1])
        return torch.cat([static_forward(model, cache, tokens[:, s:e], torch.arange(s, e))
                          for s, e in _spans(9)], dim=1)

    return lambda: model(tokens), decode


def paged_kv_cache(dtype, seed):
    """Two sequences of different lengths share a pool of 3-token pages, interleaved."""
    from snippets.efficiency.paged_kv_cache import PagedKVCache, paged_decode

    gen, lengths = _gen(seed), (6, 9)
    seqs = [_qkv(gen, dtype, b=1, h=4, h_kv=2, n=n, d=8) for n in lengths]

    def full():
        return torch.cat([F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                         enable_gqa=True).flatten(2)
                          for q, k, v in seqs], dim=-1)

    def decode():
        cache = PagedKVCache(8, 3, 2, 8, dtype=dtype)
        ids, outs = [cache.add_sequence() for _ in seqs], [[] for _ in seqs]
        for t in range(max(lengths)):
            live = [i for i, n in enumerate(lengths) if t < n]
            for i in live:  # the new token's key and value go in before it attends
                _, k, v = seqs[i]
                cache.append(ids[i], k[0, :, t : t + 1], v[0, :, t : t + 1])
            q = torch.cat([seqs[i][0][:, :, t : t + 1] for i in live])  # (B_live, H, 1, d)
            for i, out in zip(live, paged_decode(q, cache, [ids[i] for i in live])):
                outs[i].append(out[None])
        return torch.cat([torch.cat(o, dim=2).flatten(2) for o in outs], dim=-1)

    return full, decode


def prefix_cache(dtype, seed):
    from snippets.efficiency.prefix_cache import attend_with_prefix

    q, k, v = _qkv(_gen(seed), dtype)

    def full():
        return attend_with_prefix(q, k, v, k[:, :, :0], v[:, :, :0])

    def decode():
        return torch.cat([attend_with_prefix(q[:, :, s:e], k[:, :, s:e], v[:, :, s:e],
                                             k[:, :, :s], v[:, :, :s])
                          for s, e in _spans(9)], dim=2)

    return full, decode


def kv_eviction(dtype, seed):
    """A decode loop that evicts with H2O's rule each step, budget = the whole cache."""
    from snippets.efficiency.kv_eviction import evict, h2o_keep

    q, k, v = _qkv(_gen(seed), dtype)

    def decode():
        keys, values, heavy, outs = k[:, :, :0], v[:, :, :0], None, []
        for t in range(q.shape[2]):
            keys = torch.cat([keys, k[:, :, t : t + 1]], dim=2)
            values = torch.cat([values, v[:, :, t : t + 1]], dim=2)
            weights = torch.softmax(q[:, :, t : t + 1] @ keys.transpose(-2, -1)
                                    * q.shape[-1] ** -0.5, dim=-1)  # (B, H, 1, T)
            outs.append(weights @ values)
            seen = weights[:, :, 0]  # (B, H, T): attention each cached key received
            heavy = seen if heavy is None else F.pad(heavy, (0, 1)) + seen
            keep = h2o_keep(heavy, budget=keys.shape[2], recent=1)  # lossless budget
            keys, values = evict(keys, keep), evict(values, keep)
            heavy = heavy.gather(-1, keep)
        return torch.cat(outs, dim=2)

    return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), decode


def linear_attention(dtype, seed):
    from snippets.efficiency.linear_attention import linear_attention as full_form
    from snippets.efficiency.linear_attention import linear_attention_step

    q, k, v = _qkv(_gen(seed), dtype)

    def decode():
        state, outs = None, []
        for t in range(q.shape[2]):
            out, state = linear_attention_step(q[:, :, t], k[:, :, t], v[:, :, t], state)
            outs.append(out)
        return torch.stack(outs, dim=2)

    return lambda: full_form(q, k, v, causal=True), decode


def online_softmax(dtype, seed):
    """The running max and sum folded in one key at a time, against softmax at once."""
    from snippets.efficiency.tiled_attention import online_softmax as streamed

    x = _randn(_gen(seed), dtype, 2, 4, 9) * 4
    return lambda: torch.softmax(x, dim=-1), lambda: streamed(x, block_size=1)


def tiled_attention(dtype, seed):
    """Causal attention one key per tile (the flash recurrence), against SDPA."""
    from snippets.efficiency.tiled_attention import tiled_attention as tiled

    q, k, v = _qkv(_gen(seed), dtype)
    return (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            lambda: tiled(q, k, v, is_causal=True, block_size_k=1, block_size_q=1))


# ----------------------------------------------------------------------------
# attention/
# ----------------------------------------------------------------------------
def common_mistakes(fn_name):
    def build(dtype, seed):
        import snippets.attention.common_mistakes as cm

        fn, q, k, v = getattr(cm, fn_name), *_qkv(_gen(seed), dtype)

        def decode():
            return torch.cat([fn(q[:, :, s:e], k[:, :, :e], v[:, :, :e])
                              for s, e in _spans(9)], dim=2)

        return lambda: cm.cached_decode(q, k, v), decode
    return build


def _rotary_cached(rope, q, k, v, scale=None):
    """Rotate each span at its offset, keep the rotated keys, attend over them."""
    keys, outs = k[:, :, :0], []
    for s, e in _spans(q.shape[2]):
        q_s, k_s = rope(q[:, :, s:e], k[:, :, s:e], offset=s)
        keys = torch.cat([keys, k_s], dim=2)
        allowed = torch.arange(e) <= torch.arange(s, e)[:, None]  # lower right
        outs.append(F.scaled_dot_product_attention(q_s, keys, v[:, :, :e],
                                                   attn_mask=allowed, scale=scale))
    return torch.cat(outs, dim=2)


def _rotary_full(rope, q, k, v, scale=None):
    q_r, k_r = rope(q, k)
    return F.scaled_dot_product_attention(q_r, k_r, v, is_causal=True, scale=scale)


def rotary(dtype, seed):
    from snippets.attention.rotary import RotaryEmbedding

    rope, (q, k, v) = RotaryEmbedding(8), _qkv(_gen(seed), dtype)
    return lambda: _rotary_full(rope, q, k, v), lambda: _rotary_cached(rope, q, k, v)


# ----------------------------------------------------------------------------
# modern/
# ----------------------------------------------------------------------------
def scaled_rope(**rope_kw):
    def build(dtype, seed):
        from snippets.modern.long_context_rope import ScaledRotaryEmbedding

        rope = ScaledRotaryEmbedding(8, **rope_kw).to(dtype)
        q, k, v = _qkv(_gen(seed), dtype)
        return (lambda: _rotary_full(rope, q, k, v), lambda: _rotary_cached(rope, q, k, v))
    return build


def latent_attention(absorbed):
    """MLA decoding through a LatentCache, against the naive full forward."""
    def build(dtype, seed):
        from snippets.modern.latent_attention import MultiHeadLatentAttention

        torch.manual_seed(seed)
        mla = MultiHeadLatentAttention(16, 2, kv_lora_rank=6, q_lora_rank=8,
                                       qk_nope_head_dim=4, rope_dim=4, v_head_dim=5,
                                       bias=True).to(dtype).eval()
        x = _randn(_gen(seed), dtype, 2, 9, 16)

        def decode():
            cache = mla.make_cache(2, 9)
            return torch.cat([mla(x[:, s:e], cache=cache, absorbed=absorbed)
                              for s, e in _spans(9)], dim=1)

        return lambda: mla(x), decode
    return build


def attention_sinks(dtype, seed):
    """StreamingLLM's SinkCache (original positions) against dense masked attention."""
    from snippets.modern.attention_sinks import (
        apply_rotary, rotary_tables, sink_window_mask, streaming_attention)

    q, k, v = _qkv(_gen(seed), dtype)

    def full():
        cos, sin = rotary_tables(torch.arange(9), 8, 10000.0)
        mask = sink_window_mask(9, 9, 2, 3)
        return F.scaled_dot_product_attention(apply_rotary(q, cos, sin),
                                              apply_rotary(k, cos, sin), v, attn_mask=mask)

    return full, lambda: streaming_attention(q, k, v, n_sink=2, window=3,
                                             positions="original")


# ----------------------------------------------------------------------------
# linear/
# ----------------------------------------------------------------------------
def _linear_inputs(gen, dtype, b=2, h=2, n=10, d_k=4, d_v=3):
    q = _randn(gen, dtype, b, h, n, d_k)
    k = F.normalize(_randn(gen, dtype, b, h, n, d_k), dim=-1)
    return q, k, _randn(gen, dtype, b, h, n, d_v)


def _steps(step, n, *per_token):
    """Run ``step(*token_t, state) -> (out, state)`` over t; stack the outputs."""
    state, outs = None, []
    for t in range(n):
        out, state = step(*(x[:, :, t] for x in per_token), state)
        outs.append(out)
    return torch.stack(outs, dim=2)


def delta_rule(gated):
    def build(dtype, seed):
        from snippets.linear.delta_rule import delta_rule_chunked, delta_rule_step

        gen = _gen(seed)
        q, k, v = _linear_inputs(gen, dtype)
        beta = _rand(gen, dtype, 2, 2, 10)
        g = -_rand(gen, dtype, 2, 2, 10) if gated else None
        if not gated:
            return (lambda: delta_rule_chunked(q, k, v, beta, chunk_size=4),
                    lambda: _steps(lambda *a: delta_rule_step(*a[:4], None, a[4]),
                                   10, q, k, v, beta))
        return (lambda: delta_rule_chunked(q, k, v, beta, g, chunk_size=4),
                lambda: _steps(delta_rule_step, 10, q, k, v, beta, g))
    return build


def gated_linear_attention(dtype, seed):
    from snippets.linear.gated_linear_attention import gla_chunked, gla_step

    gen = _gen(seed)
    q, k, v = _linear_inputs(gen, dtype)
    g = -_rand(gen, dtype, 2, 2, 10, 4)
    return (lambda: gla_chunked(q, k, v, g, chunk_size=4, sub_chunk_size=2),
            lambda: _steps(gla_step, 10, q, k, v, g))


def kimi_delta_attention(dtype, seed):
    """A chunked prefill hands its state to kda_step for the rest of the sequence."""
    from snippets.linear.kimi_delta_attention import kda_chunked, kda_step

    gen = _gen(seed)
    q, k, v = _linear_inputs(gen, dtype)
    beta, g = _rand(gen, dtype, 2, 2, 10), -_rand(gen, dtype, 2, 2, 10, 4)

    def decode():
        outs, state = kda_chunked(*(x[:, :, :PROMPT] for x in (q, k, v, beta, g)),
                                  chunk_size=2)
        outs = [outs]
        for t in range(PROMPT, 10):
            out, state = kda_step(*(x[:, :, t] for x in (q, k, v, beta, g)), state)
            outs.append(out[:, :, None])
        return torch.cat(outs, dim=2), state

    return lambda: kda_chunked(q, k, v, beta, g, chunk_size=4), decode


def generalised_delta_rule(dtype, seed):
    """RWKV-7's recurrence resumed from ``initial_state``, a prompt then one token."""
    from snippets.linear.generalised_delta_rule import generalised_delta_recurrent as gdr

    gen = _gen(seed)
    r, k, v = _linear_inputs(gen, dtype)
    w, a_in = -_rand(gen, dtype, 2, 2, 10, 4), _rand(gen, dtype, 2, 2, 10, 4)
    args = (r, k, v, w, -k, k * a_in)  # RWKV-7: a = -k, b = k * a_in

    def decode():
        outs, state = [], None
        for s, e in _spans(10):
            out, state = gdr(*(x[:, :, s:e] for x in args), initial_state=state)
            outs.append(out)
        return torch.cat(outs, dim=2), state

    return lambda: gdr(*args), decode


def state_space_duality(dtype, seed):
    """Mamba-2's one-token recurrence (ssd_step) against the chunked prefill."""
    from snippets.linear.state_space_duality import ssd_chunked, ssd_step

    gen = _gen(seed)
    x, dt = _randn(gen, dtype, 2, 2, 10, 3), _rand(gen, dtype, 2, 2, 10) * 0.5
    a = -_rand(gen, dtype, 2) * 2 - 0.1
    b, c = _randn(gen, dtype, 2, 2, 10, 4), _randn(gen, dtype, 2, 2, 10, 4)

    def decode():
        h, outs = x.new_zeros(2, 2, 4, 3), []
        for t in range(10):
            y, h = ssd_step(h, x[:, :, t], dt[:, :, t], a, b[:, :, t], c[:, :, t])
            outs.append(y)
        return torch.stack(outs, dim=2)

    return lambda: ssd_chunked(x, dt, a, b, c, chunk_size=4), decode


def log_linear_attention(dtype, seed):
    """Fenwick-level states stepped one token at a time, against the chunked form."""
    from snippets.linear.log_linear_attention import log_linear_chunked, log_linear_step

    gen = _gen(seed)
    q, k, v = _linear_inputs(gen, dtype)
    g, lam = -_rand(gen, dtype, 2, 2, 10), _rand(gen, dtype, 2, 2, 10, 5)

    def decode():
        states, outs = None, []
        for t in range(10):
            out, states = log_linear_step(*(x[:, :, t] for x in (q, k, v, g, lam)),
                                          states, position=t)
            outs.append(out)
        return torch.stack(outs, dim=2)

    return lambda: log_linear_chunked(q, k, v, g, lam, chunk_size=4), decode


def _prefix_rows(attend, n):
    """Row t from the queries of t alone over the keys 0..t: decoding with no cache
    object, the prefix keys being the cache."""
    return torch.cat([attend(t, t + 1) for t in range(n)], dim=2)


def dsa(dtype, seed):
    """DeepSeek Sparse Attention: indexer + top-k, decoded one query at a time."""
    from snippets.linear.sparse_attention import lightning_indexer, topk_sparse_attention

    gen = _gen(seed)
    q, k, v = _qkv(gen, dtype, n=10)
    # Positive indexer inputs: no ReLU clips a score to 0, so top-k meets no tie.
    q_idx, k_idx = _rand(gen, dtype, 2, 10, 2, 4), _rand(gen, dtype, 2, 10, 4)
    w = _rand(gen, dtype, 2, 10, 2)

    def attend(s, e):
        scores = lightning_indexer(q_idx[:, s:e], k_idx[:, :e], w[:, s:e])
        return topk_sparse_attention(q[:, :, s:e], k[:, :, :e], v[:, :, :e], scores, 3)

    return lambda: attend(0, 10), lambda: _prefix_rows(attend, 10)


def nsa(dtype, seed):
    """Native Sparse Attention's three branches, decoded one query at a time."""
    from snippets.linear.sparse_attention import nsa_attention

    gen = _gen(seed)
    q, k, v = _qkv(gen, dtype, n=13)
    gates = _rand(gen, dtype, 2, 4, 13, 3)

    def attend(s, e):
        return nsa_attention(q[:, :, s:e], k[:, :, :e], v[:, :, :e], gates[:, :, s:e],
                             block=3, n_select=2, window=4)

    return lambda: attend(0, 13), lambda: _prefix_rows(attend, 13)


# ----------------------------------------------------------------------------
# history/
# ----------------------------------------------------------------------------
def gpt(dtype, seed):
    """GPT's decode() re-reads the prefix each step: its last row, per prefix."""
    from snippets.architecture.transformer_block import TransformerBlock
    from snippets.attention.multi_head import MultiHeadAttention
    from snippets.history.gpt import GPT, GPTConfig

    def make_block(c):
        attention = MultiHeadAttention(c.d_model, c.n_heads, dropout=0.0)
        return TransformerBlock(attention, c.d_model, c.d_ff, dropout=0.0,
                                activation="gelu", norm_first=c.norm_first)

    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=13, d_model=16, n_layers=2, n_heads=4, d_ff=32,
                       max_len=10, dropout=0.0, norm_first=True)
    model = GPT(config, make_block).to(dtype).eval()
    ids = torch.randint(0, 13, (2, 9), generator=_gen(seed))
    return (lambda: model(ids),
            lambda: torch.stack([model(ids[:, : t + 1])[:, -1] for t in range(9)], dim=1))


def bahdanau(dtype, seed):
    """Greedy decoding step by step against teacher forcing on the tokens it chose."""
    from snippets.history.additive_attention import BOS, BahdanauSeq2Seq

    torch.manual_seed(seed)
    model = BahdanauSeq2Seq(9, 9, emb_dim=6, hidden_size=8, attn_dim=8).to(dtype).eval()
    src = torch.randint(3, 9, (2, 5), generator=_gen(seed))
    tokens, weights = model.greedy_decode(src, 6)

    def full():
        tgt_in = torch.cat([torch.full_like(tokens[:, :1], BOS), tokens[:, :-1]], dim=1)
        logits, w = model(src, tgt_in)
        return F.one_hot(logits.argmax(-1), 9).to(dtype), w

    def decode():
        tokens, weights = model.greedy_decode(src, 6)
        return F.one_hot(tokens, 9).to(dtype), weights

    return full, decode


# ----------------------------------------------------------------------------
# The registry.
# ----------------------------------------------------------------------------
CASES: list[Case] = [
    Case("kv_cache", "snippets.efficiency.kv_cache", kv_cache_case(4)),
    Case("kv_cache_gqa", "snippets.efficiency.kv_cache", kv_cache_case(2)),
    Case("static_cache", "snippets.efficiency.static_cache", static_cache),
    Case("paged_kv_cache", "snippets.efficiency.paged_kv_cache", paged_kv_cache),
    Case("prefix_cache", "snippets.efficiency.prefix_cache", prefix_cache),
    Case("kv_eviction_full_budget", "snippets.efficiency.kv_eviction", kv_eviction,
         "lossless regime only: a smaller budget changes the answer by design"),
    Case("linear_attention", "snippets.efficiency.linear_attention", linear_attention),
    Case("online_softmax", "snippets.efficiency.tiled_attention", online_softmax),
    Case("tiled_attention", "snippets.efficiency.tiled_attention", tiled_attention),
    Case("cached_decode", "snippets.attention.common_mistakes",
         common_mistakes("cached_decode")),
    Case("cached_decode_bias", "snippets.attention.common_mistakes",
         common_mistakes("cached_decode_bias")),
    Case("rotary_offset", "snippets.attention.rotary", rotary),
    Case("rope_yarn", "snippets.modern.long_context_rope",
         scaled_rope(rope_type="yarn", factor=4.0, original_max_position_embeddings=4)),
    Case("rope_llama3", "snippets.modern.long_context_rope",
         scaled_rope(rope_type="llama3", factor=4.0, original_max_position_embeddings=4)),
    Case("rope_dynamic_within_original", "snippets.modern.long_context_rope",
         scaled_rope(rope_type="dynamic", factor=4.0, original_max_position_embeddings=16),
         "dynamic NTK only while the length stays within the original one: beyond it "
         "the frequencies follow the length, so a cache differs by design"),
    Case("mla_naive", "snippets.modern.latent_attention", latent_attention(False)),
    Case("mla_absorbed", "snippets.modern.latent_attention", latent_attention(True)),
    Case("attention_sinks", "snippets.modern.attention_sinks", attention_sinks),
    Case("delta_rule", "snippets.linear.delta_rule", delta_rule(False)),
    Case("gated_delta_rule", "snippets.linear.delta_rule", delta_rule(True)),
    Case("gated_linear_attention", "snippets.linear.gated_linear_attention",
         gated_linear_attention),
    Case("kimi_delta_attention", "snippets.linear.kimi_delta_attention",
         kimi_delta_attention),
    Case("generalised_delta_rule", "snippets.linear.generalised_delta_rule",
         generalised_delta_rule, "full form is the same recurrence: proves state resumption"),
    Case("log_linear_attention", "snippets.linear.log_linear_attention",
         log_linear_attention),
    Case("state_space_duality", "snippets.linear.state_space_duality", state_space_duality),
    Case("dsa", "snippets.linear.sparse_attention", dsa),
    Case("nsa", "snippets.linear.sparse_attention", nsa),
    Case("gpt", "snippets.history.gpt", gpt),
    Case("bahdanau_greedy", "snippets.history.additive_attention", bahdanau),
]

GAPS: list[Gap] = [
    Gap("hybrids_memory", "snippets.linear.hybrids",
        "held_bytes/cache_bytes count the bytes a KV cache and a recurrent state "
        "hold; the `state` argument is a size, and no tensor is decoded"),
]
