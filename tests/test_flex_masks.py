"""FlexAttention masks and biases equal the site's dense references; the
conventions table on the FlexAttention page holds for the libraries installed here.

Eager flex_attention runs on the CPU (forward only). Each new mask_mod or
score_mod costs a trace of about half a second, so the shapes are tiny and the
flex calls few.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, create_mask, flex_attention
from torch.testing import assert_close

from snippets.attention.alibi import alibi_attention, alibi_bias, alibi_slopes
from snippets.efficiency.flex_attention import (
    alibi_score_mod,
    block_mask_fraction,
    block_tiles,
    causal_mask_mod,
    computed_block_fraction,
    dense_mask,
    document_ids_from_lengths,
    document_mask_mod,
    flash_attn_window_size,
    flex_attend,
    prefix_lm_mask_mod,
    sliding_window_mask_mod,
    soft_cap_score_mod,
)
from snippets.efficiency.sliding_window import sliding_window_attention, sliding_window_mask
from snippets.foundations.masks import causal_mask

# Eager flex_attention warns that it is not the fused kernel; that is the point here.
pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning")]


@pytest.fixture(autouse=True)
def _one_thread():
    # Tiny shapes gain nothing from threads, and on a busy machine two
    # spinning threads make each small call many times slower.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _cpu_only(device):
    if device != "cpu":
        pytest.skip("eager flex_attention is the CPU path; GPUs run the compiled kernel")


def _qkv(b=2, h=2, n=9, m=None, d=8, h_kv=None, seed=0):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    m = n if m is None else m
    h_kv = h if h_kv is None else h_kv
    return (torch.randn(b, h, n, d, generator=g), torch.randn(b, h_kv, m, d, generator=g),
            torch.randn(b, h_kv, m, d, generator=g))


def _sdpa(q, k, v, mask, **kw):
    """SDPA with a boolean mask, empty rows zeroed (the site's convention)."""
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)
    return out.masked_fill(~mask.any(-1, keepdim=True), 0.0)


# --- mask_mods against the dense masks the other pages build (no flex call) --


@pytest.mark.parametrize("n, m", [(5, 5), (3, 7), (7, 3), (1, 6), (0, 4)])
def test_causal_mask_mod_is_the_lower_right_causal_mask(n, m):
    assert torch.equal(dense_mask(causal_mask_mod(n, m), n, m)[0, 0], causal_mask(n, m))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("window", [1, 2, 3, 9, 20])
def test_sliding_window_mask_mod_is_the_sliding_window_page_mask(window, causal):
    n = 9
    got = dense_mask(sliding_window_mask_mod(window, n, n, causal=causal), n, n)[0, 0]
    assert torch.equal(got, sliding_window_mask(n, window, causal=causal))
    if causal and window <= n:  # w keys, the query included, once w - 1 keys lie behind it
        assert got[window - 1 :].sum(-1).eq(window).all()


@pytest.mark.parametrize("causal", [True, False])
def test_sliding_window_for_fewer_queries_is_the_last_rows(causal):
    # N queries after M - N cached keys: the last N rows of the M x M band.
    n, m, w = 3, 10, 4
    got = dense_mask(sliding_window_mask_mod(w, n, m, causal=causal), n, m)[0, 0]
    assert torch.equal(got, sliding_window_mask(m, w, causal=causal)[-n:])


def test_prefix_lm_is_causal_plus_the_prefix_columns():
    n, p = 7, 3
    j = torch.arange(n)
    want = causal_mask(n, n) | (j < p)  # every query sees the prefix keys
    assert torch.equal(dense_mask(prefix_lm_mask_mod(p), n, n)[0, 0], want)
    assert dense_mask(prefix_lm_mask_mod(p), n, n)[0, 0, :p, :p].all()  # the prefix is bidirectional
    assert torch.equal(dense_mask(prefix_lm_mask_mod(0), n, n)[0, 0], causal_mask(n, n))


@pytest.mark.parametrize("causal", [True, False])
def test_document_mask_is_block_diagonal(causal):
    lengths = [3, 1, 4]
    blocks = [torch.ones(n, n, dtype=torch.bool) for n in lengths]
    if causal:
        blocks = [b.tril() for b in blocks]
    want = torch.block_diag(*blocks)
    ids = document_ids_from_lengths(lengths)
    assert ids.tolist() == [0, 0, 0, 1, 2, 2, 2, 2]
    assert torch.equal(dense_mask(document_mask_mod(ids, causal=causal), 8, 8)[0, 0], want)


def test_dense_mask_matches_torch_create_mask():
    ids = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 2, 2]])
    mods = [(document_mask_mod(ids), 2, 5, 5), (causal_mask_mod(3, 5), 1, 3, 5),
            (sliding_window_mask_mod(2, 5, 5, causal=False), 1, 5, 5)]
    for mod, b, n, m in mods:
        assert torch.equal(dense_mask(mod, n, m, batch=b, heads=2), create_mask(mod, b, 2, n, m, device="cpu"))


# --- flex_attention (eager, CPU) against SDPA with the dense mask -----------


def test_flex_causal_with_cache_and_grouped_heads_equals_sdpa():
    n, m = 4, 11
    q, k, v = _qkv(h=4, h_kv=2, n=n, m=m)
    got = flex_attend(q, k, v, mask_mod=causal_mask_mod(n, m), block_size=4)
    assert_close(got, _sdpa(q, k, v, causal_mask(n, m), enable_gqa=True))


def test_flex_fully_masked_rows_return_zeros():
    # N > M: the first N - M queries sit before every key and see nothing.
    n, m = 7, 4
    q, k, v = _qkv(n=n, m=m)
    got = flex_attend(q, k, v, mask_mod=causal_mask_mod(n, m), block_size=4)
    assert torch.equal(got[:, :, : n - m], torch.zeros_like(got[:, :, : n - m]))
    assert_close(got, _sdpa(q, k, v, causal_mask(n, m)))


@pytest.mark.parametrize("causal", [True, False])
def test_flex_sliding_window_equals_dense_and_chunked(causal):
    n, w = 13, 4
    q, k, v = _qkv(n=n)
    got = flex_attend(q, k, v, mask_mod=sliding_window_mask_mod(w, n, n, causal=causal), block_size=4)
    assert_close(got, _sdpa(q, k, v, sliding_window_mask(n, w, causal=causal)))
    assert_close(got, sliding_window_attention(q, k, v, w, causal=causal, chunk_size=5))


def test_flex_prefix_lm_equals_sdpa():
    n, p = 10, 4
    q, k, v = _qkv(n=n)
    got = flex_attend(q, k, v, mask_mod=prefix_lm_mask_mod(p), block_size=4)
    assert_close(got, _sdpa(q, k, v, dense_mask(prefix_lm_mask_mod(p), n, n)))


def test_flex_documents_equal_each_document_alone():
    # Two rows packed differently; each document attended alone must give the same numbers.
    ids = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 2, 2], [0, 0, 0, 0, 0, 1, 1, 1, 1]])
    q, k, v = _qkv(n=9)
    got = flex_attend(q, k, v, mask_mod=document_mask_mod(ids), block_size=4)
    for b in range(2):
        for doc in ids[b].unique():
            idx = (ids[b] == doc).nonzero().flatten()
            alone = F.scaled_dot_product_attention(q[b, :, idx], k[b, :, idx], v[b, :, idx], is_causal=True)
            assert_close(got[b, :, idx], alone)


def test_flex_alibi_equals_the_alibi_page():
    n, m, h = 5, 9, 4
    q, k, v = _qkv(h=h, n=n, m=m)
    slopes = alibi_slopes(h)
    got = flex_attend(q, k, v, mask_mod=causal_mask_mod(n, m), score_mod=alibi_score_mod(slopes, n, m), block_size=4)
    assert_close(got, alibi_attention(q, k, v, slopes))


def test_flex_bidirectional_alibi_equals_the_symmetric_bias():
    n, h = 6, 2
    q, k, v = _qkv(h=h, n=n)
    slopes = alibi_slopes(h)
    got = flex_attend(q, k, v, score_mod=alibi_score_mod(slopes, n, n, causal=False))
    bias = alibi_bias(slopes, n, n, causal=False)  # (H, N, M)
    assert_close(got, F.scaled_dot_product_attention(q, k, v, attn_mask=bias))


def test_flex_soft_cap_equals_the_formula_written_out():
    cap = 2.0
    q, k, v = _qkv(n=6)
    q = 4 * q  # large scores, so the cap bites
    got = flex_attend(q, k, v, score_mod=soft_cap_score_mod(cap))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    assert scores.abs().max() > 3 * cap
    want = torch.softmax(cap * torch.tanh(scores / cap), dim=-1) @ v
    assert_close(got, want)
    plain = F.scaled_dot_product_attention(q, k, v)
    assert (got - plain).abs().max() > 1e-2  # capping changed something


def test_score_mod_sees_the_scaled_score():
    # score_mod doubles its input; that matches SDPA with scale 2/sqrt(d), so
    # the input was q.k/sqrt(d): a bias in score_mod is added after the scale.
    q, k, v = _qkv(n=5)
    got = flex_attention(q, k, v, score_mod=lambda s, b, h, i, j: 2 * s)
    assert_close(got, F.scaled_dot_product_attention(q, k, v, scale=2 / math.sqrt(q.shape[-1])))


def test_flex_backward_is_not_available_on_the_cpu():
    q, k, v = _qkv(n=4)
    with pytest.raises(NotImplementedError, match="backward"):
        flex_attention(q.requires_grad_(), k, v)


# --- block masks: which tiles the kernel computes ---------------------------


def test_causal_computes_the_lower_triangle_of_tiles():
    n, block = 1024, 128
    tiles = n // block
    computed, partial = computed_block_fraction(dense_mask(causal_mask_mod(n, n), n, n)[0, 0], block)
    assert computed == pytest.approx(tiles * (tiles + 1) / 2 / tiles**2)  # 36 of 64
    assert partial == pytest.approx(tiles / tiles**2)  # only the diagonal tiles are mixed


@pytest.mark.parametrize("name", ["causal", "window", "bidirectional window", "prefix", "documents", "offset"])
def test_block_fraction_from_the_dense_mask_equals_the_block_mask(name):
    n, m, block = 200, 200, 32
    mods = {
        "causal": causal_mask_mod(n, m),
        "window": sliding_window_mask_mod(40, n, m),
        "bidirectional window": sliding_window_mask_mod(40, n, m, causal=False),
        "prefix": prefix_lm_mask_mod(70),
        "documents": document_mask_mod(document_ids_from_lengths([50, 90, 60])),
    }
    if name == "offset":
        n, mods[name] = 70, causal_mask_mod(70, m)
    mod = mods[name]
    computed, _ = computed_block_fraction(dense_mask(mod, n, m)[0, 0], block)
    bm = create_block_mask(mod, None, None, n, m, device="cpu", BLOCK_SIZE=block)
    assert block_mask_fraction(bm) == pytest.approx(computed)
    assert 0 < computed < 1
    # The tiles with every pair allowed are the ones the block mask runs without a mask.
    assert (block_tiles(dense_mask(mod, n, m)[0, 0], block) == 2).sum() == bm.full_kv_num_blocks.sum()


def test_no_mask_computes_every_tile_and_a_window_few():
    n = 512
    full = torch.ones(n, n, dtype=torch.bool)
    assert computed_block_fraction(full, 64) == (1.0, 0.0)
    window, _ = computed_block_fraction(sliding_window_mask(n, 64), 64)
    assert window == pytest.approx((8 + 7) / 64)  # the diagonal tiles and the ones just left of them


# --- the conventions table ----------------------------------------------------


def test_sdpa_is_causal_aligns_upper_left_and_the_site_lower_right():
    n, m = 3, 6
    q, k, v = _qkv(n=n, m=m)
    upper_left = torch.ones(n, m, dtype=torch.bool).tril()
    got = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert_close(got, F.scaled_dot_product_attention(q, k, v, attn_mask=upper_left))
    lower_right = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(n, m))
    assert (got - lower_right).abs().max() > 1e-3


def test_mask_polarity_sdpa_true_attends_mha_true_blocks():
    n, d = 5, 8
    allowed = causal_mask(n, n)
    x = torch.randn(1, n, d)
    mha = torch.nn.MultiheadAttention(d, 1, batch_first=True, bias=False).eval()
    w_q, w_k, w_v = mha.in_proj_weight.chunk(3)
    q, k, v = (x @ w.T for w in (w_q, w_k, w_v))
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed) @ mha.out_proj.weight.T
    with torch.no_grad():
        got, _ = mha(x, x, x, attn_mask=~allowed)  # MHA: True = blocked
        wrong, _ = mha(x, x, x, attn_mask=allowed)
    assert_close(got, want)
    assert not torch.allclose(wrong, want, atol=1e-3)


def test_flash_attn_window_size_follows_its_documented_rule():
    # flash_attn_interface.py: query i sees keys [i + M - N - left, i + M - N + right] inclusive.
    n, m = 6, 10
    i = torch.arange(n).unsqueeze(-1)
    j = torch.arange(m)
    for w in (1, 3, 5):
        for causal in (True, False):
            left, right = flash_attn_window_size(w, causal=causal)
            rule = (j >= i + m - n - left) & (j <= i + m - n + right)
            assert torch.equal(rule, dense_mask(sliding_window_mask_mod(w, n, m, causal=causal), n, m)[0, 0])


def test_attention_gym_window_counts_one_more_key():
    # attention-gym's sliding window: causal and q_idx - kv_idx <= window, so w + 1 keys.
    n, w = 12, 3
    i, j = torch.arange(n).unsqueeze(-1), torch.arange(n)
    gym = (i >= j) & (i - j <= w)
    assert torch.equal(gym, sliding_window_mask(n, w + 1))
    assert gym[-1].sum() == w + 1


def test_gpt_oss_window_counts_w_keys():
    # gpt-oss's reference sdpa: -inf above the diagonal and on or below diagonal -w.
    n, w = 12, 3
    blocked = torch.ones(n, n).triu(1).bool() | torch.ones(n, n).tril(-w).bool()
    assert torch.equal(~blocked, sliding_window_mask(n, w))


def test_hugging_face_masks_match_the_site():
    masking_utils = pytest.importorskip("transformers.masking_utils")
    n, m, w = 4, 9, 3
    hf_window = masking_utils.sliding_window_causal_mask_function(w)  # a mask_mod with this signature
    assert torch.equal(create_mask(hf_window, 1, 1, m, m, device="cpu")[0, 0], sliding_window_mask(m, w))
    # Hugging Face passes absolute positions: a query offset of M - N is the lower-right triangle.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = masking_utils.sdpa_mask(batch_size=1, q_length=n, kv_length=m, q_offset=m - n,
                                     allow_is_causal_skip=False)
    assert torch.equal(hf[0, 0], causal_mask(n, m))


# --- bad input -----------------------------------------------------------------


def test_bad_input_is_named():
    with pytest.raises(ValueError, match=r"window must be an int >= 1, got 0"):
        sliding_window_mask_mod(0, 4, 4)
    with pytest.raises(ValueError, match=r"n_keys must be an int >= 0, got -1"):
        causal_mask_mod(2, -1)
    with pytest.raises(ValueError, match=r"prefix_len must be an int >= 0, got 1.5"):
        prefix_lm_mask_mod(1.5)
    with pytest.raises(ValueError, match=r"lengths must be a non-empty list"):
        document_ids_from_lengths([])
    with pytest.raises(ValueError, match=r"lengths\[1\] must be an int >= 1, got 0"):
        document_ids_from_lengths([3, 0])
    with pytest.raises(ValueError, match=r"document_ids must have \(1, 2\) dims, dtype any, got \(1, 1, 4\)"):
        document_mask_mod(torch.zeros(1, 1, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"document_ids must have \(1, 2\) dims, dtype any, got \[0, 0, 1\]"):
        document_mask_mod([0, 0, 1])
    with pytest.raises(ValueError, match=r"slopes must have \(1,\) dims, dtype floating, got \(2, 2\)"):
        alibi_score_mod(torch.ones(2, 2), 3, 3)
    with pytest.raises(ValueError, match=r"cap must be a positive finite number, got -1.0"):
        soft_cap_score_mod(-1.0)
    with pytest.raises(ValueError, match=r"mask must have \(2, 3, 4\) dims, dtype bool, got \(4, 4\) torch.float32"):
        computed_block_fraction(torch.ones(4, 4))
    with pytest.raises(ValueError, match=r"block_size must be an int >= 1, got 0"):
        computed_block_fraction(torch.ones(4, 4, dtype=torch.bool), 0)
    with pytest.raises(ValueError, match=r"batch must be an int >= 1, got 0"):
        dense_mask(causal_mask_mod(2, 2), 2, 2, batch=0)
    with pytest.raises(TypeError, match=r"block_mask must be a BlockMask, got <class 'torch.Tensor'>"):
        block_mask_fraction(torch.ones(2))
    q, k, v = _qkv(n=4)
    with pytest.raises(ValueError, match=r"q must have \(4,\) dims, dtype floating, got \(4, 8\)"):
        flex_attend(q[0, 0], k, v)
    with pytest.raises(ValueError, match=r"k, v must be .* got q \(2, 2, 4, 8\), k \(2, 2, 4, 8\), v \(2, 2, 3, 8\)"):
        flex_attend(q, k, v[:, :, :3])
    with pytest.raises(ValueError, match=r"k, v must be .* got q \(2, 4, 4, 8\), k \(2, 3, 4, 8\)"):
        flex_attend(torch.randn(2, 4, 4, 8), torch.randn(2, 3, 4, 8), torch.randn(2, 3, 4, 8))
    with pytest.raises(ValueError, match=r"k must have \(4,\) dims, dtype torch.float32 on cpu, got \(2, 2, 4, 8\) torch.float64"):
        flex_attend(q.float(), k.double(), v.float())
    with pytest.raises(ValueError, match=r"v must have .* dtype torch.float32 on cpu, got \(2, 2, 4, 8\) torch.float32 on meta"):
        flex_attend(q.cpu(), k.cpu(), v.to("meta"))


def test_past_the_recompile_limit_a_compiled_function_runs_eagerly_or_raises():
    """The page's warning, on the CPU: dynamic=False compiles once per shape; past
    dynamo's recompile_limit the function runs uncompiled (still right, no longer
    compiled), and fail_on_recompile_limit_hit turns that into an error."""
    from torch._dynamo.utils import counters

    config = torch._dynamo.config
    saved = (config.recompile_limit, config.fail_on_recompile_limit_hit)

    def f(x):
        return x.sin() + 1

    try:
        config.recompile_limit, config.fail_on_recompile_limit_hit = 3, False
        torch._dynamo.reset()
        counters.clear()
        compiled = torch.compile(f, backend="eager", dynamic=False)
        for n in range(1, 7):
            x = torch.randn(n)
            torch.testing.assert_close(compiled(x), f(x))
        assert counters["frames"]["ok"] == 3  # shapes 4, 5 and 6 ran uncompiled

        config.fail_on_recompile_limit_hit = True
        torch._dynamo.reset()
        compiled = torch.compile(f, backend="eager", dynamic=False)
        for n in range(1, 4):
            compiled(torch.randn(n))
        with pytest.raises(torch._dynamo.exc.FailOnRecompileLimitHit):
            compiled(torch.randn(4))
    finally:
        config.recompile_limit, config.fail_on_recompile_limit_hit = saved
        torch._dynamo.reset()
