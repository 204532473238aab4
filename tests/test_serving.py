"""Serving-time attention: paged decoding equals contiguous decoding exactly,
ragged masks equal each sequence alone, split-KV equals full attention, and
speculative decoding emits exactly the greedy tokens."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from snippets.efficiency.kv_cache import TinyDecoder, generate
from snippets.efficiency.paged_kv_cache import (
    PagedKVCache,
    paged_decode,
    ragged_causal_mask,
    split_kv_attention,
    speculative_generate,
)


@pytest.fixture(autouse=True)
def _one_thread():
    # Tiny shapes gain nothing from threads, and on a busy machine two
    # spinning threads make each small call many times slower.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator(device=torch.get_default_device()).manual_seed(seed), dtype=dtype)


# --- the paged cache ---------------------------------------------------------


def test_pages_are_allocated_as_sequences_grow_and_returned_on_free():
    cache = PagedKVCache(n_pages=6, page_size=4, n_kv_heads=2, d_head=3)
    a, b = cache.add_sequence(), cache.add_sequence()
    cache.append(a, _randn(2, 3, 3), _randn(2, 3, 3))  # 3 tokens: one page
    assert cache.block_table(a) == [0]
    cache.append(b, _randn(2, 5, 3), _randn(2, 5, 3))  # 5 tokens: two pages
    assert cache.block_table(b) == [1, 2]
    cache.append(a, _randn(2, 1, 3), _randn(2, 1, 3))  # 4 tokens: still one page
    assert cache.block_table(a) == [0]
    cache.append(a, _randn(2, 1, 3), _randn(2, 1, 3))  # the 5th token opens a page
    assert cache.block_table(a) == [0, 3]
    cache.free(b)
    assert sorted(cache.free_pages) == [1, 2, 4, 5]
    with pytest.raises(ValueError, match=r"seq must be a live sequence \[0\], got 1"):
        cache.block_table(b)


def test_paged_decoding_equals_contiguous_decoding_exactly():
    # Three sequences grow token by token, interleaved, so their pages interleave in the pool.
    H, H_kv, d, page = 4, 2, 8, 3
    lengths = [7, 2, 11]
    cache = PagedKVCache(n_pages=12, page_size=page, n_kv_heads=H_kv, d_head=d)
    seqs = [cache.add_sequence() for _ in lengths]
    full_k = [_randn(H_kv, n, d, seed=10 + s) for s, n in enumerate(lengths)]
    full_v = [_randn(H_kv, n, d, seed=20 + s) for s, n in enumerate(lengths)]
    for t in range(max(lengths)):
        for s, n in enumerate(lengths):
            if t < n:
                cache.append(seqs[s], full_k[s][:, t : t + 1], full_v[s][:, t : t + 1])
    assert len({p for s in seqs for p in cache.block_table(s)}) == sum(-(-n // page) for n in lengths)
    q = _randn(3, H, 1, d, seed=1)
    got = paged_decode(q, cache, seqs)
    for s in range(3):
        k, v = cache.gather(seqs[s])
        assert torch.equal(k, full_k[s]) and torch.equal(v, full_v[s])
        want = F.scaled_dot_product_attention(q[s : s + 1], full_k[s][None], full_v[s][None], enable_gqa=True)
        assert torch.equal(got[s : s + 1], want)


def test_pool_exhaustion_and_bad_shapes_are_named():
    cache = PagedKVCache(n_pages=2, page_size=2, n_kv_heads=1, d_head=4)
    s = cache.add_sequence()
    with pytest.raises(ValueError, match=r"k must fit the free pages \(2\), got 5 tokens that need 3"):
        cache.append(s, torch.zeros(1, 5, 4), torch.zeros(1, 5, 4))
    with pytest.raises(ValueError, match=r"k must be floating \(1, n, 4\) on cpu, got torch.float32 \(1, 2, 3\)"):
        cache.append(s, torch.zeros(1, 2, 3), torch.zeros(1, 2, 3))
    with pytest.raises(ValueError, match=r"page_size must be an int >= 1, got 0"):
        PagedKVCache(n_pages=2, page_size=0, n_kv_heads=1, d_head=4)
    with pytest.raises(ValueError, match=r"seqs must be a list of B = 2 sequence ids, got \[0\]"):
        paged_decode(torch.zeros(2, 1, 1, 4), cache, [s])


def test_paged_cache_bad_input_is_named():
    cache = PagedKVCache(n_pages=4, page_size=2, n_kv_heads=2, d_head=4)
    s = cache.add_sequence()
    x = torch.zeros(2, 3, 4)
    with pytest.raises(TypeError, match=r"dtype must be floating, got torch.int64"):
        PagedKVCache(n_pages=2, page_size=2, n_kv_heads=1, d_head=4, dtype=torch.int64)
    with pytest.raises(TypeError, match=r"v must be floating \(2, 3, 4\) on cpu, got torch.int64"):
        cache.append(s, x, x.long())
    with pytest.raises(ValueError, match=r"k must be floating \(2, n, 4\) on cpu, got torch.float32 \(2, 3, 4\) on meta"):
        cache.append(s, x.to("meta"), x)
    cache.append(s, x, x)
    q = torch.zeros(1, 4, 1, 4)
    with pytest.raises(ValueError, match=r"seq must be a live sequence \[0\], got 7"):
        paged_decode(q, cache, [7])  # gather's own check
    with pytest.raises(ValueError, match=r"q must have a multiple of H_kv = 2 heads, got 3"):
        paged_decode(torch.zeros(1, 3, 1, 4), cache, [s])
    with pytest.raises(ValueError, match=r"q must be .* torch.float32 on cpu, got torch.float64"):
        paged_decode(q.double(), cache, [s])
    with pytest.raises(ValueError, match=r"q must be .* torch.float32 on cpu, got torch.float32 \(1, 4, 1, 4\) on meta"):
        paged_decode(q.to("meta"), cache, [s])


# --- ragged batches ------------------------------------------------------------


@pytest.mark.parametrize("padding", ["left", "right"])
def test_ragged_batch_equals_each_sequence_alone(padding):
    lengths, n, H, d = [5, 2, 7, 0], 7, 2, 4
    q, k, v = (_randn(len(lengths), H, n, d, seed=s) for s in range(3))
    mask = ragged_causal_mask(lengths, n, padding=padding)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out = out.masked_fill(~mask.any(-1, keepdim=True), 0.0)  # padding rows: zeros
    for b, length in enumerate(lengths):
        real = slice(0, length) if padding == "right" else slice(n - length, n)
        alone = F.scaled_dot_product_attention(q[b : b + 1, :, real], k[b : b + 1, :, real],
                                               v[b : b + 1, :, real], is_causal=True)
        assert_close(out[b : b + 1, :, real], alone)
        pad = torch.ones(n, dtype=torch.bool)
        pad[real] = False
        assert torch.equal(out[b, :, pad], torch.zeros_like(out[b, :, pad]))


def test_ragged_triangle_sits_at_each_sequences_real_tokens():
    right = ragged_causal_mask([2], 4, padding="right")[0, 0]
    left = ragged_causal_mask([2], 4, padding="left")[0, 0]
    assert right.int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    assert left.int().tolist() == [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, 0], [0, 0, 1, 1]]
    with pytest.raises(ValueError, match=r"padding must be left or right, got middle"):
        ragged_causal_mask([2], 4, padding="middle")
    with pytest.raises(ValueError, match=r"lengths must be a list of ints in \[0, n = 4\], got \[2, 5\]"):
        ragged_causal_mask([2, 5], 4)
    with pytest.raises(ValueError, match=r"lengths must be a list of ints in \[0, n = 4\], got \[-1\]"):
        ragged_causal_mask([-1], 4)


# --- split-KV decoding ---------------------------------------------------------


@pytest.mark.parametrize("n_splits", [1, 2, 3, 7, 29])
def test_split_kv_equals_full_attention(n_splits):
    q = _randn(2, 3, 1, 16, seed=1)
    k, v = _randn(2, 3, 29, 16, seed=2), _randn(2, 3, 29, 16, seed=3)
    got = split_kv_attention(q, k, v, n_splits)
    assert_close(got, F.scaled_dot_product_attention(q, k, v), rtol=0, atol=1e-6)


def test_split_kv_survives_large_scores():
    q = 100 * _randn(1, 1, 1, 8, seed=4)
    k, v = 100 * _randn(1, 1, 20, 8, seed=5), _randn(1, 1, 20, 8, seed=6)
    got = split_kv_attention(q, k, v, 4)
    assert torch.isfinite(got).all()
    assert_close(got, F.scaled_dot_product_attention(q, k, v), rtol=0, atol=1e-6)


def test_split_kv_bad_input():
    x = torch.zeros(1, 1, 3, 4)
    with pytest.raises(ValueError, match=r"n_splits must be an int in \[1, M = 3\], got 4"):
        split_kv_attention(x, x, x, 4)
    with pytest.raises(ValueError, match=r"k must be floating \(1, 1, M, 4\) torch.float32 on cpu, got torch.float32 \(3, 4\)"):
        split_kv_attention(x, x[0, 0], x, 1)
    with pytest.raises(ValueError, match=r"k must be floating \(1, 1, M, 4\) torch.float32 on cpu, "
                                         r"got torch.float32 \(2, 1, 3, 4\)"):
        split_kv_attention(x, torch.zeros(2, 1, 3, 4), x, 1)
    with pytest.raises(ValueError, match=r"k must be floating .* got torch.float64"):
        split_kv_attention(x, x.double(), x, 1)
    with pytest.raises(ValueError, match=r"v must be .* on cpu, got .* on meta"):
        split_kv_attention(x, x, x.to("meta"), 1)


# --- speculative decoding ------------------------------------------------------


def _models():
    torch.manual_seed(0)
    target = TinyDecoder(50, 32, 4, 2, max_len=64).eval()
    draft = TinyDecoder(50, 16, 2, 1, max_len=64).eval()
    return target, draft


@pytest.mark.parametrize("n_draft", [1, 3, 5])
def test_speculative_tokens_equal_greedy_tokens(n_draft):
    target, draft = _models()
    prompt = torch.randint(0, 50, (1, 6), generator=torch.Generator(device=torch.get_default_device()).manual_seed(1))
    want = generate(target, prompt, 20, use_cache=False)
    got, stats = speculative_generate(target, draft, prompt, 20, n_draft=n_draft)
    assert torch.equal(got, want)
    assert stats["target_calls"] <= 20 and stats["accepted"] <= stats["proposed"]


def test_a_perfect_draft_is_always_accepted():
    target, _ = _models()
    prompt = torch.randint(0, 50, (1, 5), generator=torch.Generator(device=torch.get_default_device()).manual_seed(2))
    got, stats = speculative_generate(target, target, prompt, 12, n_draft=4)
    assert torch.equal(got, generate(target, prompt, 12, use_cache=False))
    assert stats["accepted"] == stats["proposed"]
    assert stats["target_calls"] == 3  # 4 + 1 bonus, 4 + 1, then the last 2 of 12


def test_speculative_bad_input():
    target, draft = _models()
    with pytest.raises(ValueError, match=r"prompt must be integer \(1, N0\), got torch.int64 \(2, 3\)"):
        speculative_generate(target, draft, torch.zeros(2, 3, dtype=torch.long), 4)
    with pytest.raises(ValueError, match=r"n_draft must be an int >= 1, got 0"):
        speculative_generate(target, draft, torch.zeros(1, 3, dtype=torch.long), 4, n_draft=0)
    with pytest.raises(TypeError, match=r"prompt must be integer \(1, N0\), got torch.bool \(1, 3\)"):
        speculative_generate(target, draft, torch.zeros(1, 3, dtype=torch.bool), 4)


# --- speculative decoding that agrees again after a mismatch ------------------


class _TableModel:
    """A model whose logits after a prefix depend only on the prefix's last token."""

    def __init__(self, table: torch.Tensor) -> None:
        self.table = table  # (V, V): row t holds the logits after token t

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table[ids]  # (1, N) -> (1, N, V)


def test_speculative_greedy_equals_greedy_for_a_draft_that_agrees_again_after_a_mismatch():
    # The target counts up (t -> t + 1 mod V); the draft agrees except after
    # token 1, where it proposes 3 instead of 2. From a prompt ending in 0 the
    # draft proposes 1, 3, 4, 5: a mismatch at the second proposal, then
    # proposals that agree with the target's choice after each drafted prefix.
    # Only the first one counts: everything after the mismatch must be dropped.
    V = 8
    target_table = torch.full((V, V), -5.0)
    target_table[torch.arange(V), (torch.arange(V) + 1) % V] = 5.0
    draft_table = target_table.clone()
    draft_table[1, 2], draft_table[1, 3] = -5.0, 5.0
    target, draft = _TableModel(target_table), _TableModel(draft_table)
    prompt = torch.tensor([[6, 7, 0]])
    want = torch.tensor([[6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2]])
    for n_draft in (1, 2, 3, 4, 6):
        got, stats = speculative_generate(target, draft, prompt, 10, n_draft=n_draft)
        assert torch.equal(got, want), (n_draft, got)
        assert n_draft == 1 or stats["accepted"] < stats["proposed"]  # a mismatch was met


def _joint_target_distribution(table: torch.Tensor, last: int) -> torch.Tensor:
    """P(x1, x2) = p(x1 | last) p(x2 | x1) for a table model, (V, V) in float64."""
    p = torch.softmax(table.double(), dim=-1)  # (V, V)
    return p[last].unsqueeze(-1) * p  # (V, 1) * (V, V) -> (V, V)


CHI2_999 = {15: 37.70, 24: 51.18, 35: 66.62}  # chi-square quantiles at 0.999, by degrees of freedom


def _sample_pairs(target, draft, n_draws: int, n_draft: int, seed: int) -> torch.Tensor:
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    counts = torch.zeros(target.table.shape[0] ** 2, dtype=torch.float64)
    prompt = torch.tensor([[0]])
    for _ in range(n_draws):
        tokens, _ = speculative_generate(target, draft, prompt, 2, n_draft=n_draft, sample=True,
                                         generator=g)
        counts[tokens[0, 1] * target.table.shape[0] + tokens[0, 2]] += 1
    return counts


@pytest.mark.parametrize("which", ["identical", "good", "bad"])
def test_speculative_sampling_follows_the_target_distribution(which):
    # Leviathan et al. (2022), Chen et al. (2023): with acceptance min(1, p/q)
    # and resampling from normalise(max(0, p - q)), each emitted token follows
    # p exactly, whatever the draft. Over seeded draws of two tokens (V = 5, so
    # 25 outcomes), the counts pass a chi-square test against P(x1, x2) at the
    # 0.999 quantile, and the total-variation distance is below 0.05. Resampling
    # from p instead of max(0, p - q), or accepting every proposal, fails both.
    V = 5
    g = torch.Generator(device=torch.get_default_device()).manual_seed(11)
    target_table = 1.5 * torch.randn(V, V, generator=g)
    draft_table = {"identical": target_table.clone(),
                   "good": target_table + 0.3 * torch.randn(V, V, generator=g),
                   "bad": 1.5 * torch.randn(V, V, generator=g)}[which]
    target, draft = _TableModel(target_table), _TableModel(draft_table)
    n_draws = 3000
    counts = _sample_pairs(target, draft, n_draws, 2, seed=5)
    expected = n_draws * _joint_target_distribution(target_table, 0).flatten()
    keep = expected > 5  # the usual rule for the chi-square approximation
    lumped_obs = torch.cat([counts[keep], counts[~keep].sum(0, keepdim=True)])
    lumped_exp = torch.cat([expected[keep], expected[~keep].sum(0, keepdim=True)])
    if lumped_exp[-1] == 0:
        lumped_obs, lumped_exp = lumped_obs[:-1], lumped_exp[:-1]
    chi2 = (((lumped_obs - lumped_exp) ** 2) / lumped_exp).sum().item()
    dof = len(lumped_exp) - 1
    critical = CHI2_999.get(dof) or dof + 3.09 * (2 * dof) ** 0.5 + 2  # Wilson-Hilferty-like margin
    tv = 0.5 * (counts / n_draws - expected / n_draws).abs().sum().item()
    assert chi2 < critical, f"{which}: chi-square {chi2:.1f} >= {critical:.1f} with {dof} degrees of freedom"
    assert tv < 0.05, f"{which}: total variation {tv:.3f}"
