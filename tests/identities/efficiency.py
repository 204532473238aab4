"""Identities proven for the efficiency pages."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from identities import identity
from snippets.efficiency import flex_attention as flex
from snippets.efficiency import kv_cache as kvc
from snippets.efficiency import linear_attention as lin
from snippets.efficiency import paged_kv_cache as paged
from snippets.efficiency import sliding_window as sw
from snippets.efficiency import static_cache as sc
from snippets.efficiency import tiled_attention as ta

F64 = torch.float64


def _lower_right(n: int, m: int) -> torch.Tensor:
    return torch.ones(n, m, dtype=torch.bool).tril(diagonal=m - n)


def _decoder() -> kvc.TinyDecoder:
    """A grouped-query TinyDecoder in float64 with every parameter random, norms included."""
    model = kvc.TinyDecoder(23, 16, 4, 2, n_kv_heads=2, max_len=16).double().eval()
    for p in model.parameters():
        p.copy_(0.3 * torch.randn_like(p))
    for name, p in model.named_parameters():
        if "norm" in name and name.endswith("weight"):
            p.add_(1.0)  # norm gains near 1, each different
    return model


@identity("online-softmax-equals-softmax",
          "the one-pass online softmax (blocks of 3) equals torch.softmax, -inf entries included",
          page="efficiency/tiled-attention.md", tol=1e-12)
def online_softmax_equals_softmax():
    x = 4 * torch.randn(3, 5, 13, dtype=F64)
    x[0, 0, :7] = float("-inf")
    return ta.online_softmax(x, block_size=3), torch.softmax(x, dim=-1)


@identity("tiled-equals-sdpa",
          "tiled attention (query blocks of 2, key blocks of 3, causal, N = 5 < M = 11) equals SDPA "
          "with a lower-right mask",
          page="efficiency/tiled-attention.md", tol=1e-12)
def tiled_equals_sdpa():
    q = torch.randn(2, 3, 5, 8, dtype=F64)
    k, v = torch.randn(2, 3, 11, 8, dtype=F64), torch.randn(2, 3, 11, 6, dtype=F64)
    ours = ta.tiled_attention(q, k, v, is_causal=True, block_size_k=3, block_size_q=2)
    return ours, F.scaled_dot_product_attention(q, k, v, attn_mask=_lower_right(5, 11))


@identity("tiled-lse-equals-logsumexp",
          "the log-sum-exp the tile loop returns (m + log l) equals torch.logsumexp of the masked scores",
          page="efficiency/tiled-attention.md", tol=1e-12)
def tiled_lse_equals_logsumexp():
    q, k, v = torch.randn(2, 3, 7, 8, dtype=F64), torch.randn(2, 3, 9, 8, dtype=F64), \
        torch.randn(2, 3, 9, 4, dtype=F64)
    _, lse = ta.tiled_attention(q, k, v, is_causal=True, block_size_k=4, block_size_q=3,
                                return_lse=True)
    scores = (q @ k.mT / 8 ** 0.5).masked_fill(~_lower_right(7, 9), float("-inf"))
    return lse, torch.logsumexp(scores, dim=-1)


@identity("kv-cache-decode-equals-full-forward",
          "prefill plus one-token cached decoding gives the logits of one causal pass over the "
          "whole sequence (grouped-query TinyDecoder, every weight random)",
          page="efficiency/kv-cache.md", tol=1e-12)
def kv_cache_decode_equals_full_forward():
    model = _decoder()
    tokens = torch.randint(0, 23, (2, 9))
    cache = model.new_cache(2, 9)
    steps = [model(tokens[:, :5], cache)] + [model(tokens[:, t : t + 1], cache) for t in range(5, 9)]
    return torch.cat(steps, dim=1), model(tokens)


@identity("kv-cache-chunks-equal-full-pass",
          "a chunk of 3 queries after 4 cached tokens (the lower-right mask) gives the full pass's "
          "logits at those positions",
          page="efficiency/kv-cache.md", tol=1e-12)
def kv_cache_chunks_equal_full_pass():
    model = _decoder()
    tokens = torch.randint(0, 23, (2, 7))
    cache = model.new_cache(2, 7)
    model(tokens[:, :4], cache)
    return model(tokens[:, 4:], cache), model(tokens)[:, 4:]


@identity("static-cache-equals-dynamic-cache",
          "decoding with the static cache (fixed buffers, a position tensor, a computed mask) gives "
          "the dynamic cache's logits, prefill, a chunk and single tokens",
          page="efficiency/kv-cache.md", tol=1e-12)
def static_cache_equals_dynamic_cache():
    model = _decoder()
    tokens = torch.randint(0, 23, (2, 9))
    dynamic, static = model.new_cache(2, 9), sc.StaticKVCache.for_model(model, 2, 9)
    ours, theirs = [], []
    for start, stop in ((0, 4), (4, 7), (7, 8), (8, 9)):
        theirs.append(model(tokens[:, start:stop], dynamic))
        ours.append(sc.static_forward(model, static, tokens[:, start:stop], torch.arange(start, stop)))
    return torch.cat(ours, dim=1), torch.cat(theirs, dim=1)


def _filled_pool():
    cache = paged.PagedKVCache(n_pages=12, page_size=3, n_kv_heads=2, d_head=4, dtype=F64)
    seqs = [cache.add_sequence() for _ in range(3)]
    full = {s: (torch.empty(2, 0, 4, dtype=F64), torch.empty(2, 0, 4, dtype=F64)) for s in seqs}
    for n, s in ((4, 0), (2, 1), (5, 2), (3, 0), (1, 1)):  # interleaved growth
        k, v = torch.randn(2, n, 4, dtype=F64), torch.randn(2, n, 4, dtype=F64)
        cache.append(s, k, v)
        full[s] = (torch.cat([full[s][0], k], dim=1), torch.cat([full[s][1], v], dim=1))
    return cache, seqs, full


@identity("paged-gather-equals-contiguous",
          "keys and values written to pages in interleaved order and gathered by block table equal "
          "the contiguous tensors, bit for bit",
          page="efficiency/serving.md", tol=0.0)
def paged_gather_equals_contiguous():
    cache, seqs, full = _filled_pool()
    ours = torch.cat([torch.cat(cache.gather(s), dim=1) for s in seqs], dim=1)
    return ours, torch.cat([torch.cat(full[s], dim=1) for s in seqs], dim=1)


@identity("paged-decode-equals-sdpa",
          "decoding three sequences of lengths 7, 3 and 5 from pages (GQA, 4 query heads) equals SDPA "
          "on each sequence's contiguous keys",
          page="efficiency/serving.md", tol=1e-12)
def paged_decode_equals_sdpa():
    cache, seqs, full = _filled_pool()
    q = torch.randn(3, 4, 1, 4, dtype=F64)
    ours = paged.paged_decode(q, cache, seqs)
    theirs = torch.cat([F.scaled_dot_product_attention(q[b : b + 1], full[s][0][None], full[s][1][None],
                                                       enable_gqa=True) for b, s in enumerate(seqs)])
    return ours, theirs


@identity("ragged-batch-equals-each-alone",
          "a left-padded batch of lengths 5, 2 and 7 under ragged causal masks gives, at the real "
          "tokens, what causal SDPA gives on each sequence alone",
          page="efficiency/serving.md", tol=1e-12)
def ragged_batch_equals_each_alone():
    lengths, n = [5, 2, 7], 7
    x = torch.randn(3, 2, n, 4, dtype=F64)
    out = F.scaled_dot_product_attention(x, x, x, attn_mask=paged.ragged_causal_mask(lengths, n,
                                                                                       padding="left"))
    ours = torch.cat([out[b, :, n - L:] for b, L in enumerate(lengths)], dim=1)
    theirs = torch.cat([F.scaled_dot_product_attention(x[b, :, n - L:], x[b, :, n - L:], x[b, :, n - L:],
                                                       is_causal=True) for b, L in enumerate(lengths)], dim=1)
    return ours, theirs


@identity("split-kv-equals-attention",
          "split-KV decoding (5 chunks, merged by their log-sum-exp) equals SDPA over all keys",
          page="efficiency/serving.md", tol=1e-12)
def split_kv_equals_attention():
    q, k, v = torch.randn(2, 3, 1, 8, dtype=F64), torch.randn(2, 3, 23, 8, dtype=F64), \
        torch.randn(2, 3, 23, 8, dtype=F64)
    return paged.split_kv_attention(q, k, v, 5), F.scaled_dot_product_attention(q, k, v)


@identity("speculative-greedy-equals-greedy",
          "greedy speculative decoding (a smaller draft, 3 proposals a round) emits greedy decoding's "
          "tokens with the target",
          page="efficiency/serving.md", tol=0.0)
def speculative_greedy_equals_greedy():
    target = kvc.TinyDecoder(31, 16, 2, 1, max_len=16).eval()
    draft = kvc.TinyDecoder(31, 8, 2, 1, max_len=16).eval()
    prompt = torch.randint(0, 31, (1, 4))
    ours, _ = paged.speculative_generate(target, draft, prompt, 8, n_draft=3)
    return ours, kvc.generate(target, prompt, 8, use_cache=False)


@identity("sliding-window-equals-banded-sdpa",
          "chunked sliding-window attention (w = 3, chunks of 4, causal and not) equals SDPA with the "
          "dense banded mask",
          page="efficiency/sliding-window.md", tol=1e-12)
def sliding_window_equals_banded_sdpa():
    q, k, v = (torch.randn(2, 3, 13, 8, dtype=F64) for _ in range(3))
    ours = torch.stack([sw.sliding_window_attention(q, k, v, 3, causal=c, chunk_size=4)
                        for c in (True, False)])
    theirs = torch.stack([F.scaled_dot_product_attention(q, k, v, attn_mask=sw.sliding_window_mask(13, 3,
                                                                                                   causal=c))
                          for c in (True, False)])
    return ours, theirs


@identity("flex-mask-equals-dense-mask",
          "FlexAttention with the packed-documents mask_mod (and GQA) equals SDPA with the dense mask "
          "that mask_mod evaluates to",
          page="efficiency/flex-attention.md", tol=1e-12)
def flex_mask_equals_dense_mask():
    q = torch.randn(1, 4, 12, 8, dtype=F64)
    k, v = torch.randn(1, 2, 12, 8, dtype=F64), torch.randn(1, 2, 12, 8, dtype=F64)
    mod = flex.document_mask_mod(flex.document_ids_from_lengths([5, 4, 3]))
    ours = flex.flex_attend(q, k, v, mask_mod=mod, block_size=4)
    return ours, F.scaled_dot_product_attention(q, k, v, attn_mask=flex.dense_mask(mod, 12, 12),
                                                enable_gqa=True)


@identity("flex-alibi-equals-bias",
          "FlexAttention with the ALiBi score_mod and a causal mask_mod equals SDPA with the ALiBi "
          "bias added to a causal float mask",
          page="efficiency/flex-attention.md", tol=1e-12)
def flex_alibi_equals_bias():
    q, k, v = (torch.randn(1, 2, 9, 8, dtype=F64) for _ in range(3))
    slopes = torch.tensor([0.5, 0.25], dtype=F64)
    ours = flex.flex_attend(q, k, v, mask_mod=flex.causal_mask_mod(9, 9),
                            score_mod=flex.alibi_score_mod(slopes, 9, 9), block_size=4)
    i, j = torch.arange(9)[:, None], torch.arange(9)
    bias = -slopes.view(2, 1, 1) * (i - j)  # (H, N, M)
    bias = bias.masked_fill(j > i, float("-inf"))
    return ours, F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


@identity("linear-attention-recurrent-equals-parallel",
          "causal linear attention token by token (the RNN with state S, z) equals the parallel "
          "prefix-sum form",
          page="efficiency/linear-attention.md", tol=1e-12)
def linear_attention_recurrent_equals_parallel():
    q, k, v = torch.randn(2, 3, 11, 4, dtype=F64), torch.randn(2, 3, 11, 4, dtype=F64), \
        torch.randn(2, 3, 11, 5, dtype=F64)
    state, outs = None, []
    for t in range(11):
        out, state = lin.linear_attention_step(q[..., t, :], k[..., t, :], v[..., t, :], state)
        outs.append(out)
    return torch.stack(outs, dim=-2), lin.linear_attention(q, k, v, causal=True)


@identity("linear-attention-equals-quadratic",
          "causal linear attention equals its quadratic form phi(Q) phi(K)^T, masked and row-normalised, "
          "times V",
          page="efficiency/linear-attention.md", tol=1e-12)
def linear_attention_equals_quadratic():
    q, k, v = torch.randn(2, 3, 9, 4, dtype=F64), torch.randn(2, 3, 9, 4, dtype=F64), \
        torch.randn(2, 3, 9, 5, dtype=F64)
    weights = (F.elu(q) + 1) @ (F.elu(k) + 1).mT * _lower_right(9, 9)  # (B, H, N, M)
    quadratic = weights @ v / (weights.sum(-1, keepdim=True) + 1e-6)
    return lin.linear_attention(q, k, v, causal=True), quadratic
