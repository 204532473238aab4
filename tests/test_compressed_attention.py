"""DeepSeek-V4's compressed attentions: transformers' layer, the equations by loop, limits.

The layer oracle is ``DeepseekV4Attention`` from transformers, built from a small
random configuration (tests/identities/compressed.py). It pools the compressor's
gates, normalises and rotates in float32 whatever the input dtype, so with
float64 inputs the whole layer agrees to about 1e-7 (asserted: 1e-6); its eager
attention core, its indexer's picks and the loops below agree exactly.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from identities.compressed import eager_core, run_v4
from snippets.linear import block_sparse_attention as bs
from snippets.linear import sparse_attention as sa
from snippets.linear.compressed_attention import (
    compress_entries,
    dense_cost,
    dsa_cost,
    entry_causal,
    minimax_cost,
    moba_cost,
    nsa_cost,
    select_entries,
    v4_attention,
    v4_cost,
)
from transformers_support import require_transformers

F64 = dict(atol=1e-12, rtol=1e-12)
CSA, HCA = "compressed_sparse_attention", "heavily_compressed_attention"


def _gen(seed):
    return torch.Generator(device=torch.get_default_device()).manual_seed(seed)


def _inputs(b=2, h=3, n=19, d=8, m=3, dtype=torch.float64, seed=0):
    g = _gen(seed)
    q = torch.randn(b, h, n, d, generator=g, dtype=dtype)
    kv = torch.randn(b, 1, n, d, generator=g, dtype=dtype)
    entries = torch.randn(b, 1, n // m, d, generator=g, dtype=dtype)
    sink = torch.randn(h, generator=g, dtype=dtype)
    return q, kv, entries, sink


# ------------------------------------------------------- the equations, by loop
def pool_by_loop(c, z, bias, m, overlap):
    """Entry by entry, channel by channel: softmax over the slots, weighted sum."""
    b, t, width = c.shape
    d = width // 2 if overlap else width
    out = torch.zeros(b, t // m, d, dtype=c.dtype)
    for w in range(t // m):
        slots, gates = [], []
        for j in range(m):
            tok = w * m + j
            if overlap:
                if w > 0:  # series a of the previous window
                    slots.append(c[:, tok - m, :d])
                    gates.append(z[:, tok - m, :d] + bias[j, :d])
                slots.append(c[:, tok, d:])
                gates.append(z[:, tok, d:] + bias[j, d:])
            else:
                slots.append(c[:, tok])
                gates.append(z[:, tok] + bias[j])
        weights = torch.stack(gates).softmax(dim=0)
        out[:, w] = (weights * torch.stack(slots)).sum(dim=0)
    return out


def attend_by_loop(q, kv, entries, m, window, selected, sink, scale):
    """Query by query: list the keys it may read, one softmax with the sink."""
    b, h, n, d = q.shape
    out = torch.zeros_like(q)
    for bi in range(b):
        for t in range(n):
            keys = [kv[bi, 0, j] for j in range(max(0, t - window + 1), t + 1)]
            for w in range(entries.shape[2]):
                done = (w + 1) * m - 1 <= t  # every pooled token is in the past
                if done and (selected is None or selected[bi, t, w]):
                    keys.append(entries[bi, 0, w])
            for hi in range(h):
                logits = [float(q[bi, hi, t] @ key) * scale for key in keys]
                if sink is not None:
                    logits.append(float(sink[hi]))
                if not logits:
                    continue  # nothing to read: zeros
                p = torch.tensor(logits, dtype=q.dtype).softmax(dim=0)
                for pj, key in zip(p, keys):
                    out[bi, hi, t] += pj * key
    return out


def index_scores_by_loop(q_idx, k_idx, w, m):
    """I[t, s] = sum_h w[t, h] ReLU(q_idx[t, h] . k_idx[s]) for ready entries, else None."""
    b, n, h, _ = q_idx.shape
    return [[[sum(float(w[bi, t, hh]) * max(float(q_idx[bi, t, hh] @ k_idx[bi, s]), 0.0)
                  for hh in range(h)) if (s + 1) * m <= t + 1 else None
              for s in range(k_idx.shape[1])] for t in range(n)] for bi in range(b)]


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("t,m", [(13, 4), (12, 4), (7, 1), (9, 3), (3, 4)])
def test_pooling_matches_the_equation(overlap, t, m):
    g = _gen(t * 10 + m)
    width = 10 if overlap else 5
    c, z = (torch.randn(2, t, width, generator=g, dtype=torch.float64) for _ in range(2))
    bias = torch.randn(m, width, generator=g, dtype=torch.float64)
    got = compress_entries(c, z, bias, compress_rate=m, overlap=overlap)
    assert got.shape == (2, t // m, width // (2 if overlap else 1))
    assert_close(got, pool_by_loop(c, z, bias, m, overlap), **F64)


@pytest.mark.parametrize("window,with_sink,picked", [(4, True, True), (4, True, False),
                                                      (0, False, False), (1, True, True),
                                                      (30, False, True)])
def test_attention_matches_the_equation(window, with_sink, picked):
    q, kv, entries, sink = _inputs()
    sink = sink if with_sink else None
    sel = torch.rand(2, 19, 6, generator=_gen(5)) < 0.5 if picked else None
    got = v4_attention(q, kv, entries, compress_rate=3, window=window, selected=sel,
                               sink=sink, scale=0.3)
    assert_close(got, attend_by_loop(q, kv, entries, 3, window, sel, sink, 0.3), **F64)


@pytest.mark.parametrize("n,m,top_k", [(19, 3, 2), (16, 4, 1), (16, 2, 50), (9, 1, 4)])
def test_selection_matches_the_equation(n, m, top_k):
    g = _gen(n + m)
    q_idx = torch.randn(2, n, 3, 4, generator=g, dtype=torch.float64)
    k_idx = torch.randn(2, n // m, 4, generator=g, dtype=torch.float64)
    w = torch.randn(2, n, 3, generator=g, dtype=torch.float64)
    got = select_entries(q_idx, k_idx, w, compress_rate=m, top_k=top_k)
    for bi, rows in enumerate(index_scores_by_loop(q_idx, k_idx, w, m)):
        for t, row in enumerate(rows):
            ready = [s for s, v in enumerate(row) if v is not None]
            kept = [s for s in range(len(row)) if got[bi, t, s]]
            assert set(kept) <= set(ready) and len(kept) == min(top_k, len(ready))
            dropped = [row[s] for s in ready if s not in kept]  # ties may go either way
            assert not dropped or min(row[s] for s in kept) >= max(dropped)


# ------------------------------------------------------------- transformers
@pytest.mark.parametrize("layer", [CSA, HCA])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-6), (torch.float32, 2e-6)])
def test_layer_equals_transformers(layer, dtype, tol):
    require_transformers()
    run = run_v4(layer, n=21, dtype=dtype)
    assert_close(run["got"], run["want"], atol=tol, rtol=tol)
    assert_close(run["entries"], run["model_entries"], atol=tol, rtol=tol)


@pytest.mark.parametrize("n,m,top_k", [(19, 2, 3), (23, 2, 1), (24, 4, 2), (17, 3, 40)])
def test_indexer_picks_the_same_entries_as_transformers(n, m, top_k):
    require_transformers()
    run = run_v4(CSA, n=n, m=m, top_k=top_k)
    assert torch.equal(run["selected"], run["model_selected"])
    assert (run["selected"].sum(-1) <= top_k).all()


@pytest.mark.parametrize("layer", [CSA, HCA])
def test_joint_softmax_equals_transformers_eager_core(layer):
    require_transformers()
    run = run_v4(layer, n=22)
    entries, attn = run["model_entries"], run["attn"]
    picked = run["model_selected"]
    if picked is None:  # HCA: the block bias is causality alone
        picked = run["block_bias"][:, 0] == 0
    ours = v4_attention(run["q"], run["kv"], entries, compress_rate=run["m"],
                                window=run["window"], selected=picked, sink=attn.sinks,
                                scale=attn.scaling)
    assert_close(ours.transpose(1, 2), eager_core(run, entries, picked), **F64)


@pytest.mark.parametrize("t", range(0, 14))
@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_the_cache_keeps_floor_t_over_m_complete_entries(t, m):
    c = torch.randn(1, t, 4, dtype=torch.float64)
    for overlap, width in ((False, 4), (True, 2)):
        got = compress_entries(c, c, torch.zeros(m, 4, dtype=torch.float64), compress_rate=m,
                               overlap=overlap)
        assert got.shape == (1, t // m, width)


@pytest.mark.parametrize("layer", [CSA, HCA])
def test_transformers_keeps_as_many_entries(layer):
    require_transformers()
    for n in (5, 8, 11):
        run = run_v4(layer, n=n, m=3, m_heavy=3)
        assert run["model_entries"].shape[2] == run["entries"].shape[2] == n // 3


# ------------------------------------------------------------------ reductions
@pytest.mark.parametrize("n", [1, 6, 21])
def test_m1_all_entries_no_window_no_sink_is_causal_mqa(n):
    g = _gen(n)
    q = torch.randn(2, 4, n, 8, generator=g, dtype=torch.float64)
    c, z = (torch.randn(2, n, 8, generator=g, dtype=torch.float64) for _ in range(2))
    entries = compress_entries(c, z, torch.randn(1, 8, dtype=torch.float64), compress_rate=1)
    assert_close(entries, c, **F64)  # a softmax over one slot is 1
    out = v4_attention(q, torch.randn(2, 1, n, 8, dtype=torch.float64),
                               entries.unsqueeze(1), compress_rate=1, window=0)
    kv = c.unsqueeze(1)
    want = F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)
    assert_close(out, want, **F64)


def test_the_reduction_needs_each_switch_off():
    """Window on, second series on, or a sink: no longer causal attention."""
    q, kv, _, sink = _inputs(n=12, m=1)
    c = torch.randn(2, 12, 16, dtype=torch.float64)
    bias = torch.zeros(1, 16, dtype=torch.float64)
    one = compress_entries(c[..., :8], c[..., :8], bias[:, :8], compress_rate=1).unsqueeze(1)
    two = compress_entries(c, c, bias, compress_rate=1, overlap=True).unsqueeze(1)
    want = F.scaled_dot_product_attention(q, one, one, is_causal=True, enable_gqa=True)
    base = dict(compress_rate=1, window=0)
    assert_close(v4_attention(q, kv, one, **base), want, **F64)
    for changed in (v4_attention(q, kv, one, compress_rate=1, window=2),
                    v4_attention(q, kv, two, **base),
                    v4_attention(q, kv, one, sink=sink, **base)):
        assert (changed - want).abs().max() > 1e-3


def test_an_entry_is_read_only_after_its_last_token():
    seen = entry_causal(13, 4, 3)
    for t in range(13):
        assert seen[t].tolist() == [(w + 1) * 3 - 1 <= t for w in range(4)]


def test_causal_future_tokens_change_nothing():
    """The whole pipeline: pooling, indexer, joint softmax; tokens after 10 changed."""
    g = _gen(3)
    n, m, cut = 20, 4, 11

    def pipeline(x):
        c, z, qi, kv = x[..., :16], x[..., 16:32], x[..., 32:40], x[..., 40:48]
        q = x[..., 48:64].unflatten(-1, (2, 8)).transpose(1, 2)
        bias = torch.linspace(-1, 1, m * 16, dtype=x.dtype).view(m, 16)
        entries = compress_entries(c, z, bias, compress_rate=m, overlap=True)
        keys = compress_entries(c, z, bias, compress_rate=m, overlap=True)[..., :4]
        sel = select_entries(qi.unflatten(-1, (2, 4)), keys, x[..., 64:66], compress_rate=m,
                             top_k=2)
        return v4_attention(q, kv.unsqueeze(1), entries.unsqueeze(1), compress_rate=m,
                                    window=3, selected=sel, sink=torch.zeros(2, dtype=x.dtype))

    x = torch.randn(2, n, 66, generator=g, dtype=torch.float64)
    y = x.clone()
    y[:, cut:] = torch.randn(2, n - cut, 66, generator=g, dtype=torch.float64)
    assert_close(pipeline(y)[:, :, :cut], pipeline(x)[:, :, :cut], **F64)
    assert (pipeline(y)[:, :, cut:] - pipeline(x)[:, :, cut:]).abs().max() > 1e-3


def test_an_empty_row_gives_zeros_and_the_sink_takes_weight():
    q, kv, entries, sink = _inputs(n=7, m=4)
    no_read = v4_attention(q, kv, entries, compress_rate=4, window=0)
    assert_close(no_read[:, :, :3], torch.zeros_like(no_read[:, :, :3]), **F64)  # t < 3
    assert_close(v4_attention(q, kv, entries, compress_rate=4, window=0, sink=sink)
                 [:, :, :3], torch.zeros_like(no_read[:, :, :3]), **F64)
    loud = torch.full((3,), 30.0, dtype=torch.float64)  # a sink that takes almost all
    quiet = v4_attention(q, kv, entries, compress_rate=4, window=3, sink=loud)
    assert quiet.abs().max() < 1e-6


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_finite_and_near_float32(dtype):
    q, kv, entries, sink = (t.float() for t in _inputs(n=64, d=16, m=4))
    q = q * 6  # scores of tens
    rounded = [t.to(dtype) for t in (q, kv, entries)]
    kw = dict(compress_rate=4, window=8, sink=sink)
    ref = v4_attention(*(t.float() for t in rounded), **kw)
    out = v4_attention(*rounded, **kw)
    assert out.dtype == dtype and torch.isfinite(out).all()
    assert (out.float() - ref).abs().max() <= 2 * torch.finfo(dtype).eps * ref.abs().max()
    c = (torch.randn(1, 64, 8) * 20).to(dtype)
    pooled = compress_entries(c, c, torch.zeros(4, 8), compress_rate=4, overlap=True)
    assert pooled.dtype == dtype and torch.isfinite(pooled).all()


def test_gradients_pass_gradcheck():
    q, kv, entries, sink = (t.requires_grad_() for t in _inputs(b=1, h=2, n=7, d=3, m=2))
    sel = torch.rand(1, 7, 3, generator=_gen(1)) < 0.6

    def attn(q, kv, entries, sink):
        return v4_attention(q, kv, entries, compress_rate=2, window=2, selected=sel,
                                    sink=sink)

    assert torch.autograd.gradcheck(attn, (q, kv, entries, sink))
    c, z = (torch.randn(1, 7, 4, dtype=torch.float64, requires_grad=True) for _ in range(2))
    bias = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    for overlap in (False, True):
        assert torch.autograd.gradcheck(
            lambda c, z, bias: compress_entries(c, z, bias, compress_rate=2, overlap=overlap),
            (c, z, bias))


def test_bad_input_is_named():
    q, kv, entries, sink = _inputs(n=8, m=2)
    kw = dict(compress_rate=2, window=2)
    with pytest.raises(TypeError, match=r"q must be a floating \(B, H, N, d\) tensor"):
        v4_attention(q[..., 0], kv, entries, **kw)
    with pytest.raises(ValueError, match=r"kv must be a floating \(2, 1, 8, 8\) tensor"):
        v4_attention(q, kv[:, :, :5], entries, **kw)
    with pytest.raises(ValueError, match=r"entries must be a floating \(2, 1, 4, 8\) tensor"):
        v4_attention(q, kv, entries[:, :, :3], **kw)
    with pytest.raises(ValueError, match="sink must be a floating"):
        v4_attention(q, kv, entries, sink=sink[:2], **kw)
    with pytest.raises(TypeError, match=r"selected must be None or \(torch.bool, \(2, 8, 4\), device"):
        v4_attention(q, kv, entries, selected=torch.ones(2, 8, 4), **kw)
    with pytest.raises(ValueError, match="window must be an int >= 0, got -1"):
        v4_attention(q, kv, entries, compress_rate=2, window=-1)
    with pytest.raises(ValueError, match="compress_rate must be an int >= 1, got 0"):
        v4_attention(q, kv, entries, compress_rate=0, window=2)
    with pytest.raises(ValueError, match="scale must be None or a finite number > 0"):
        v4_attention(q, kv, entries, scale=0.0, **kw)
    c = torch.randn(2, 8, 5)
    with pytest.raises(ValueError, match="c must have an even width"):
        compress_entries(c, c, torch.zeros(2, 5), compress_rate=2, overlap=True)
    with pytest.raises(ValueError, match=r"bias must be a floating \(2, 5\) tensor"):
        compress_entries(c, c, torch.zeros(3, 5), compress_rate=2)
    with pytest.raises(ValueError, match=r"k_idx must be a floating \(2, 4, 4\) tensor"):
        select_entries(torch.randn(2, 8, 3, 4), torch.randn(2, 3, 4), torch.randn(2, 8, 3),
                       compress_rate=2, top_k=2)
    with pytest.raises(ValueError, match="top_k must be an int >= 1, got 0"):
        select_entries(torch.randn(2, 8, 3, 4), torch.randn(2, 4, 4), torch.randn(2, 8, 3),
                       compress_rate=2, top_k=0)
    with pytest.raises(ValueError, match="context must be an int >= 1, got 0"):
        v4_cost(0, entry_bytes=1024, compress_rate=4)
    with pytest.raises(TypeError, match=r"selected must be None or \(torch.bool, \(2, 8, 4\), device"):
        v4_attention(q, kv, entries, selected=[[True]], **kw)
    with pytest.raises(ValueError, match="index_bytes must be an int >= 0, got -1"):
        v4_cost(8, entry_bytes=1024, compress_rate=4, top_k=2, index_bytes=-1)


# ---------------------------------------------------------------- cost calculator
@pytest.mark.parametrize("context", [1, 31, 32, 700, 65536, 131072])
def test_nsa_and_dsa_count_what_the_sparse_attention_page_counts(context):
    kw = dict(n_heads=1, d_qk=1, d_v=1, kv_bytes_per_token=1)
    assert nsa_cost(context, kv_bytes=1).keys == sa.nsa_decode_cost(context, **kw).keys
    assert dsa_cost(context, kv_bytes=1, index_bytes=1).keys == sa.dsa_decode_cost(context, **kw).keys


@pytest.mark.parametrize("context,block,top_k", [(16, 4, 2), (15, 4, 2), (37, 5, 3), (9, 4, 8)])
def test_moba_and_minimax_count_the_keys_their_masks_keep(context, block, top_k):
    g = _gen(context)
    q, k = (torch.randn(1, 1, context, 4, generator=g, dtype=torch.float64) for _ in range(2))
    kept = bs.moba_block_choice(q, k, block_size=block, top_k=top_k)[0, 0, -1]
    assert moba_cost(context, kv_bytes=1, block=block, top_k=top_k).keys == int(
        kept.repeat_interleave(block)[:context].sum())
    iq, ik = torch.randn(1, 1, context, 4, dtype=torch.float64), q[:, :, :, :4]
    kept = bs.group_block_choice(iq, ik, block_size=block, top_k=top_k)[0, 0, -1]
    assert minimax_cost(context, kv_bytes=1, index_bytes=1, block=block, top_k=top_k).keys == int(
        kept.repeat_interleave(block)[:context].sum())


@pytest.mark.parametrize("context,m,window,top_k", [(19, 3, 4, 2), (19, 3, 4, None),
                                                     (5, 4, 8, None), (64, 4, 8, 3),
                                                     (10, 4, 4, 5)])
def test_v4_counts_the_keys_its_last_query_reads(context, m, window, top_k):
    g = _gen(context)
    n_e = context // m
    if top_k is None:
        read = int(entry_causal(context, n_e, m)[-1].sum())
    else:
        sel = select_entries(torch.randn(1, context, 2, 4, generator=g), torch.randn(1, n_e, 4, generator=g),
                             torch.rand(1, context, 2, generator=g), compress_rate=m, top_k=top_k)
        read = int(sel[0, -1].sum())
    want = min(window, context) + read
    assert v4_cost(context, entry_bytes=1, compress_rate=m, window=window, top_k=top_k).keys == want


def test_nsa_reproduces_its_decoding_ratio_at_64k():
    """NSA's paper reports 11.6x for decoding at 64k: the ratio of keys read."""
    keys = nsa_cost(65536, kv_bytes=1).keys
    assert keys == 4095 + 1024 + 512
    assert round(65536 / keys, 1) == 11.6


def test_v4_flash_reads_and_keeps():
    """V4-Flash sizes (transformers' config): m = 4, m' = 128, window 128, top-k 512."""
    context = 1 << 20
    csa = v4_cost(context, entry_bytes=1, compress_rate=4, top_k=512, index_bytes=0)
    hca = v4_cost(context, entry_bytes=1, compress_rate=128)
    assert (csa.keys, hca.keys) == (128 + 512, 128 + 8192)
    assert csa.cache_bytes_per_token == pytest.approx(0.25 + 128 / context)
    assert hca.cache_bytes_per_token == pytest.approx(1 / 128 + 128 / context)


# ------------------------------------------------------------------ exercises
def test_exercise_keys_read_at_a_million_tokens():
    csa = v4_cost(1_000_000, entry_bytes=1, compress_rate=4, top_k=512)
    hca = v4_cost(1_000_000, entry_bytes=1, compress_rate=128)
    assert (csa.keys, hca.keys) == (640, 128 + 7812)


def test_exercise_which_entries_query_six_may_read():
    assert entry_causal(8, 2, 4)[6].tolist() == [True, False]  # token 7 is still ahead
    assert entry_causal(8, 2, 4)[7].tolist() == [True, True]


def test_exercise_cache_ratio_against_a_full_cache():
    """Per token and layer, in entry-sized units: CSA keeps 1/4 (+ window), HCA 1/128."""
    full = dense_cost(1 << 20, kv_bytes=1).cache_bytes_per_token
    csa = v4_cost(1 << 20, entry_bytes=1, compress_rate=4, top_k=512)
    assert csa.cache_bytes_per_token / full == pytest.approx(0.25, abs=1e-3)
    assert math.isclose(v4_cost(1 << 20, entry_bytes=1, compress_rate=128).cache_bytes_per_token,
                        1 / 128, rel_tol=0.02)
