"""The KV-cache economy: prefix caching, quantization and eviction, each against
the full-precision, fully recomputed cache it replaces."""

from __future__ import annotations

import itertools
import random

import pytest
import torch
import torch.nn.functional as F

from snippets.efficiency import kv_eviction as E
from snippets.efficiency import kv_quantization as Q
from snippets.efficiency import prefix_cache as PC


def _rope(x, positions, base=10000.0):
    """Half-split RoPE written out for these tests: x (B, H, T, d), positions (T,)."""
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = positions.double()[:, None] * theta  # (T, d/2)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


# --- prefix caching ---------------------------------------------------------


def test_identical_prefixes_give_identical_chains():
    a = [5, 1, 4, 1, 5, 9, 2, 6, 5]
    b = a[:8] + [7, 7, 7]
    assert PC.block_hashes(a, 4) == PC.block_hashes(b, 4)  # the same two full blocks
    assert len(PC.block_hashes(a, 4)) == 2, "a partial block is never hashed"


@pytest.mark.parametrize("changed", range(12))
def test_one_changed_token_changes_its_block_and_every_later_hash(changed):
    tokens = list(range(100, 112))
    other = tokens.copy()
    other[changed] += 1
    h1, h2 = PC.block_hashes(tokens, 3), PC.block_hashes(other, 3)
    block = changed // 3
    assert h1[:block] == h2[:block]
    assert all(x != y for x, y in zip(h1[block:], h2[block:]))


def test_hashes_name_the_prefix_not_the_block():
    """The same block after different prefixes gets different hashes: the chain matters."""
    assert PC.block_hashes([1, 2, 9, 9], 2)[1] != PC.block_hashes([3, 4, 9, 9], 2)[1]


def test_decoding_over_a_reused_prefix_equals_recomputing(device):
    torch.manual_seed(0)
    vocab, d, h = 50, 8, 2
    emb = torch.randn(vocab, h * d, dtype=torch.float64)
    wq, wk, wv = (torch.randn(h * d, h * d, dtype=torch.float64) for _ in range(3))

    def heads(x):  # (T, h * d) -> (1, h, T, d)
        return x.view(1, -1, h, d).transpose(1, 2)

    def project(tokens, start):
        x = emb[torch.tensor(tokens)]
        pos = torch.arange(start, start + len(tokens))
        return _rope(heads(x @ wq), pos), _rope(heads(x @ wk), pos), heads(x @ wv)

    store = {}
    first = [3, 14, 15, 9, 26, 5, 35, 8]
    q, k, v = project(first, 0)
    for i, name in enumerate(PC.block_hashes(first, 4)):  # cache each full block's K/V
        store[name] = (k[..., 4 * i:4 * i + 4, :], v[..., 4 * i:4 * i + 4, :])
    second = first[:8] + [42, 7, 1]
    names = PC.block_hashes(second, 4)
    reused = [store[n] for n in names if n in store]
    assert len(reused) == 2
    k_pre = torch.cat([kk for kk, _ in reused], dim=-2)
    v_pre = torch.cat([vv for _, vv in reused], dim=-2)
    qs, ks, vs = project(second[8:], 8)
    ours = PC.attend_with_prefix(qs, ks, vs, k_pre, v_pre)
    qa, ka, va = project(second, 0)
    full = F.scaled_dot_product_attention(qa, ka, va, is_causal=True)[..., 8:, :]
    torch.testing.assert_close(ours, full, rtol=0, atol=1e-12)


def test_radix_match_is_the_longest_common_prefix():
    rng = random.Random(0)
    cache, stored = PC.RadixCache(), []
    for _ in range(40):
        seq = [rng.randrange(3) for _ in range(rng.randrange(1, 8))]
        cache.insert(seq)
        stored.append(seq)
        probe = [rng.randrange(3) for _ in range(rng.randrange(1, 9))]
        best = max(sum(1 for _ in itertools.takewhile(lambda p: p[0] == p[1], zip(s, probe)))
                   for s in stored)
        assert cache.match(probe) == best, (stored, probe)


# --- quantization -----------------------------------------------------------


def test_quantizer_error_is_at_most_half_a_step(device):
    torch.manual_seed(1)
    x = torch.randn(6, 40, dtype=torch.float64) * 3
    for bits in (2, 4, 8):
        step = (x.amax(-1, keepdim=True) - x.amin(-1, keepdim=True)) / (2**bits - 1)
        err = (Q.fake_quantize(x, bits, dim=-1) - x).abs()
        assert (err <= step / 2 + 1e-12).all()
        assert len(torch.unique(Q.fake_quantize(x, bits, dim=-1)[0])) <= 2**bits


@pytest.mark.parametrize("t", [64, 70, 95])
def test_kivi_keeps_the_right_tokens_exact(device, t):
    torch.manual_seed(2)
    k, v = torch.randn(1, 2, t, 64), torch.randn(1, 2, t, 64)
    kq, vq = Q.kivi_keys(k, 2, 32), Q.kivi_values(v, 2, 32, residual=32)
    exact_k = t % 32  # keys: the tokens that do not fill a group
    assert torch.equal(kq[..., t - exact_k:, :], k[..., t - exact_k:, :])
    assert (kq[..., : t - exact_k, :] != k[..., : t - exact_k, :]).any()
    assert torch.equal(vq[..., -32:, :], v[..., -32:, :])  # values: the newest R
    assert (vq[..., :-32, :] != v[..., :-32, :]).any(dim=-1).all()  # every older token


def test_per_channel_keys_win_on_outlier_channels(device):
    """Key caches have a few channels with large magnitude; per-channel groups absorb them."""
    torch.manual_seed(3)
    k = torch.randn(1, 4, 96, 64)
    k[..., [3, 17, 40]] += 15
    per_channel = Q.kivi_keys(k, 2, 32)
    per_token = Q.fake_quantize(k.view(1, 4, 96, 2, 32), 2, dim=-1).view_as(k)
    e_channel = (per_channel - k).norm() / k.norm()
    e_token = (per_token - k).norm() / k.norm()
    assert e_token > 2.5 * e_channel, (float(e_channel), float(e_token))


def test_fp8_saturates_and_rounds_within_its_spacing(device):
    sat = torch.tensor([1000.0, -1000.0, float("inf"), float("-inf"), float("nan")])
    out = sat.to(torch.float8_e4m3fn).float()
    if out.device.type == "cpu":  # the CPU's cast saturates
        assert out[:4].tolist() == [448.0, -448.0, 448.0, -448.0] and out[4].isnan()
    else:  # CUDA's gave NaN (H200, torch 2.11): never another finite value
        assert ((out[:4].abs() == 448) | out[:4].isnan()).all() and out[4].isnan()
    torch.manual_seed(4)
    x = torch.randn(4096, dtype=torch.float64)
    rt = Q.fp8_roundtrip(x)
    normal = x.abs() > x.abs().max() * 2.0**-6  # e4m3 normals after the scale
    assert ((rt - x).abs()[normal] <= x.abs()[normal] * 2.0**-4 + 1e-12).all()


# --- eviction ---------------------------------------------------------------


def test_a_budget_that_holds_every_key_is_exact(device):
    torch.manual_seed(5)
    q = torch.randn(1, 2, 1, 8, dtype=torch.float64)
    k, v = torch.randn(1, 2, 12, 8, dtype=torch.float64), torch.randn(1, 2, 12, 8, dtype=torch.float64)
    full = F.scaled_dot_product_attention(q, k, v)
    for keep in (E.h2o_keep(torch.rand(1, 2, 12), 12, 4), E.snapkv_keep(k[..., -3:, :], k, 20)):
        out = F.scaled_dot_product_attention(q, E.evict(k, keep), E.evict(v, keep))
        torch.testing.assert_close(out, full, rtol=0, atol=1e-12)


def test_h2o_keeps_the_recent_and_the_heaviest(device):
    scores = torch.tensor([[[5.0, 0.1, 4.0, 0.2, 3.0, 0.3, 9.0, 9.0]]])  # recent ones heavy too
    assert E.h2o_keep(scores, 5, 2).tolist() == [[[0, 2, 4, 6, 7]]]


def test_snapkv_keeps_its_window_and_pool_one_is_plain_top_k(device):
    torch.manual_seed(6)
    k = torch.randn(1, 2, 20, 8)
    qw = k[..., -4:, :] * 2
    keep = E.snapkv_keep(qw, k, 10, pool=1)
    assert (keep[..., -4:] == torch.arange(16, 20)).all()
    votes = torch.softmax(qw @ k[..., :16, :].transpose(-1, -2) / 8**0.5, -1).sum(-2)
    assert torch.equal(keep[..., :6], votes.topk(6, -1).indices.sort(-1).values)


def test_kept_keys_keep_their_true_positions(device):
    """Evicting rotated keys equals attention over the kept tokens at their own positions;
    renumbering the kept keys 0 .. budget - 1 (rotating them again) does not."""
    torch.manual_seed(7)
    t, budget = 16, 6
    raw_k, v = torch.randn(1, 1, t, 8, dtype=torch.float64), torch.randn(1, 1, t, 8, dtype=torch.float64)
    q = _rope(torch.randn(1, 1, 1, 8, dtype=torch.float64), torch.tensor([t]))
    k = _rope(raw_k, torch.arange(t))  # cached after rotation, at the true positions
    keep = E.h2o_keep(torch.rand(1, 1, t), budget, 2)
    ours = F.scaled_dot_product_attention(q, E.evict(k, keep), E.evict(v, keep))
    idx = keep[0, 0]
    truth = F.scaled_dot_product_attention(q, _rope(raw_k[..., idx, :], idx), v[..., idx, :])
    torch.testing.assert_close(ours, truth, rtol=0, atol=1e-12)
    renumbered = _rope(raw_k[..., idx, :], torch.arange(budget))
    assert (F.scaled_dot_product_attention(q, renumbered, v[..., idx, :]) - truth).abs().max() > 1e-3


def test_named_errors(device):
    with pytest.raises(ValueError, match=r"block_size must be an int >= 1, got 0"):
        PC.block_hashes([1, 2], 0)
    with pytest.raises(ValueError, match=r"bits must be an int in \[1, 16\], got 0"):
        Q.fake_quantize(torch.randn(3), 0, dim=-1)
    with pytest.raises(ValueError, match=r"group must be an int >= 1 dividing d = 10, got 4"):
        Q.kivi_values(torch.randn(1, 1, 5, 10), 2, 4)
    with pytest.raises(ValueError, match=r"recent must be an int in \[0, budget = 3\], got 5"):
        E.h2o_keep(torch.rand(1, 1, 8), 3, 5)
    with pytest.raises(ValueError, match=r"keep must index rows 0 .. 7, got \[9\]"):
        E.evict(torch.randn(1, 1, 8, 4), torch.tensor([[[0, 9]]]))
    with pytest.raises(ValueError, match=r"budget must be an int >= the window w = 4, got 2"):
        E.snapkv_keep(torch.randn(1, 1, 4, 8), torch.randn(1, 1, 10, 8), 2)
    with pytest.raises(ValueError, match=r"q_window must be a floating \(B, H, L, d\) tensor like k"):
        E.snapkv_keep(torch.randn(1, 2, 4, 8), torch.randn(1, 1, 10, 8), 6)
    with pytest.raises(ValueError, match=r"keep must be int64 \(B, H, budget\) like cache, got torch.int32"):
        E.evict(torch.randn(1, 1, 8, 4), torch.tensor([[[0, 7]]], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"k_new must be \(B, H, N, d\) like q, .*'N': 2.*got torch.float32 \(1, 1, 3, 4\)"):
        PC.attend_with_prefix(torch.randn(1, 1, 2, 4), torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4),
                              torch.randn(1, 1, 5, 4), torch.randn(1, 1, 5, 4))
    with pytest.raises(ValueError, match=r"v_prefix must be \(B, H, P, e\) like q, .*'e': 3.*\(1, 1, 5, 4\)"):
        PC.attend_with_prefix(torch.randn(1, 1, 2, 4), torch.randn(1, 1, 2, 4), torch.randn(1, 1, 2, 3),
                              torch.randn(1, 1, 5, 4), torch.randn(1, 1, 5, 4))


def test_exercise_blocks():
    assert len(PC.block_hashes(list(range(1000)), 16)) == 62
