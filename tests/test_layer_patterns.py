"""Proof for snippets/modern/layer_patterns.py and the per-layer part of
snippets/modern/cache_size.py.

Proves: the periodic layer types follow their definition (and Gemma 3's
"five local layers per global one", gpt-oss's alternation, Llama 4's NoPE
layer every fourth); every mask equals its definition entry by entry; a sliding
layer sees exactly its last w keys (not w + 1 or w - 1) and equals the site's
sliding-window page; a chunked layer equals causal attention run separately on
each chunk; the cache calculator caps local layers at their window or chunk and
adds up per layer as written out here. The comparison with transformers'
configs and masking utilities is in tests/test_mla_transformers.py; the values
of real models are in tests/test_models_data.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from snippets.efficiency.sliding_window import sliding_window_attention, sliding_window_mask
from snippets.modern.cache_size import cached_tokens, mha_cache_elements, model_cache_bytes
from snippets.modern.layer_patterns import (
    LAYER_KINDS,
    layer_mask,
    periodic_layer_types,
    rope_layers,
    summarize_layer_types,
)


# --- layer types -----------------------------------------------------------------


@pytest.mark.parametrize("n_layers, period", [(12, 6), (62, 6), (7, 2), (48, 4), (5, 1), (3, 8), (0, 3)])
def test_periodic_types_follow_the_definition(n_layers, period):
    types = periodic_layer_types(n_layers, period, local="chunked_attention")
    assert len(types) == n_layers
    for i, kind in enumerate(types):
        assert kind == ("full_attention" if i % period == period - 1 else "chunked_attention")


def test_gemma3_has_five_local_layers_per_global_one():
    types = periodic_layer_types(62, 6)
    assert types[:6] == ["sliding_attention"] * 5 + ["full_attention"]
    assert types.count("full_attention") == 10 and types.count("sliding_attention") == 52
    assert summarize_layer_types(types) == "5 sliding : 1 full (x10) + 2 sliding"


def test_gpt_oss_alternates_starting_with_a_local_layer():
    types = periodic_layer_types(36, 2)
    assert types[0] == "sliding_attention" and types[1] == "full_attention"
    assert all(a != b for a, b in zip(types, types[1:]))
    assert summarize_layer_types(types) == "1 sliding : 1 full (x18)"


def test_llama4_nope_every_fourth_layer():
    rope = rope_layers(48, nope_interval=4)
    assert [i for i, r in enumerate(rope) if not r] == list(range(3, 48, 4))
    assert rope_layers(3) == [True, True, True]


def test_summaries():
    assert summarize_layer_types(["full_attention"] * 32) == "all 32 full"
    assert summarize_layer_types(["sliding_attention"] * 2 + ["full_attention"]) == "2 sliding : 1 full"
    assert summarize_layer_types(periodic_layer_types(48, 4, local="linear_attention")) == "3 linear : 1 full (x12)"


# --- masks -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["full_attention", "sliding_attention", "chunked_attention"])
@pytest.mark.parametrize("n, m", [(9, 9), (3, 9), (1, 9), (0, 4)])
@pytest.mark.parametrize("size", [1, 3, 4, 30])
def test_mask_equals_definition(kind, n, m, size):
    mask = layer_mask(kind, n, m, window=size, chunk=size)
    assert mask.shape == (n, m) and mask.dtype == torch.bool
    for r in range(n):
        i = m - n + r  # the query's absolute position
        for j in range(m):
            want = j <= i
            if kind == "sliding_attention":
                want = want and i - size < j
            elif kind == "chunked_attention":
                want = want and j // size == i // size
            assert bool(mask[r, j]) == want, (kind, r, j)


@pytest.mark.parametrize("window", [1, 2, 5])
def test_sliding_window_sees_exactly_w_keys(window):
    """Off by one either way changes these counts: query i sees min(i + 1, w) keys."""
    mask = layer_mask("sliding_attention", 12, window=window)
    assert mask.sum(-1).tolist() == [min(i + 1, window) for i in range(12)]
    assert torch.equal(mask, sliding_window_mask(12, window))  # the site's sliding-window page


@pytest.mark.parametrize("chunk", [1, 3, 4])
def test_chunks_start_at_multiples_of_the_chunk(chunk):
    """Each query's first visible key is the start of its chunk, a multiple of C;
    misaligned boundaries move it."""
    mask = layer_mask("chunked_attention", 13, window=None, chunk=chunk)
    first = mask.int().argmax(-1)
    assert first.tolist() == [(i // chunk) * chunk for i in range(13)]
    assert mask.sum(-1).tolist() == [i % chunk + 1 for i in range(13)]


def _attend(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_chunked_attention_is_causal_attention_within_each_chunk():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 11, 8, dtype=torch.float64) for _ in range(3))
    got = _attend(q, k, v, layer_mask("chunked_attention", 11, chunk=4))
    pieces = [F.scaled_dot_product_attention(q[..., s:s + 4, :], k[..., s:s + 4, :], v[..., s:s + 4, :], is_causal=True)
              for s in range(0, 11, 4)]
    assert_close(got, torch.cat(pieces, dim=-2))


def test_sliding_layer_equals_the_site_sliding_window_attention():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 13, 8, dtype=torch.float64) for _ in range(3))
    assert_close(_attend(q, k, v, layer_mask("sliding_attention", 13, window=4)),
                 sliding_window_attention(q, k, v, 4, chunk_size=5))


def test_decoding_rows_are_the_last_rows_of_the_full_mask():
    for kind in ("full_attention", "sliding_attention", "chunked_attention"):
        full = layer_mask(kind, 10, window=3, chunk=4)
        assert torch.equal(layer_mask(kind, 2, 10, window=3, chunk=4), full[-2:])


# --- the cache calculator ---------------------------------------------------------


def test_cached_tokens_are_capped_for_local_layers():
    assert cached_tokens("full_attention", 5000) == 5000
    assert cached_tokens("sliding_attention", 5000, window=1024) == 1024
    assert cached_tokens("sliding_attention", 500, window=1024) == 500
    assert cached_tokens("chunked_attention", 20000, chunk=8192) == 8192
    assert cached_tokens("linear_attention", 20000) == 0


def test_model_cache_bytes_adds_up_layer_by_layer():
    types = periodic_layer_types(12, 6)  # 10 sliding, 2 full
    per_token = mha_cache_elements(4, 64)  # 512
    got = model_cache_bytes(32768, types, per_token, window=1024, batch=3, bytes_per_element=2)
    assert got == 3 * 2 * per_token * (10 * 1024 + 2 * 32768)
    # the same model with every layer global
    assert model_cache_bytes(32768, ["full_attention"] * 12, per_token) == 2 * per_token * 12 * 32768


def test_local_layers_matter_only_past_the_window():
    types = periodic_layer_types(12, 6)
    per_token = mha_cache_elements(4, 64)
    local = model_cache_bytes(1024, types, per_token, window=1024)
    assert local == model_cache_bytes(1024, ["full_attention"] * 12, per_token)
    assert model_cache_bytes(1025, types, per_token, window=1024) - local == 2 * per_token * 2  # only 2 global layers grow


# --- exercises on docs/modern/local-global.md -------------------------------------


def test_exercise_gemma3_saving_at_128k():
    """Exercise 1: with 5 local layers (window 1024) per global layer, the cache
    at 128k tokens is (1/6) + (5/6)(1024/131072) of an all-global one: 17.3%."""
    types = periodic_layer_types(60, 6)
    per_token = mha_cache_elements(16, 128)
    ratio = model_cache_bytes(131072, types, per_token, window=1024) / model_cache_bytes(
        131072, ["full_attention"] * 60, per_token)
    assert abs(ratio - (1 / 6 + 5 / 6 * 1024 / 131072)) < 1e-12
    assert round(100 * ratio, 1) == 17.3


def test_exercise_receptive_field_of_stacked_windows():
    """Exercise 2: L sliding layers of window w let information travel L (w - 1)
    positions back: position 0 reaches query i through L layers iff i <= L (w - 1)."""
    w, n = 3, 12
    step = layer_mask("sliding_attention", n, window=w).float()  # 0/1: exact in float
    reach = torch.eye(n)
    for layers in range(1, 5):
        reach = (step @ reach).clamp(max=1)
        assert [int(reach[i, 0]) for i in range(n)] == [int(i <= layers * (w - 1)) for i in range(n)]


def test_exercise_chunk_sees_less_than_window():
    """Exercise 3: averaged over a long sequence, a chunked layer of size C sees
    (C + 1) / 2 keys per query, a sliding layer of window w close to w."""
    n, c = 64, 8
    chunked = layer_mask("chunked_attention", n, chunk=c).sum(-1).double().mean()
    assert chunked == (c + 1) / 2
    sliding = layer_mask("sliding_attention", n, window=c).sum(-1).double().mean()
    assert sliding == (n * c - c * (c - 1) / 2) / n


# --- named errors -------------------------------------------------------------------


def test_errors():
    with pytest.raises(ValueError, match=r"period must be an int >= 1, got 0"):
        periodic_layer_types(4, 0)
    with pytest.raises(ValueError, match=r"n_layers must be an int >= 0, got -1"):
        periodic_layer_types(-1, 2)
    with pytest.raises(ValueError, match=r"local must be one of .*, got 'local'"):
        periodic_layer_types(4, 2, local="local")
    with pytest.raises(ValueError, match=r"nope_interval must be an int >= 1, got 0"):
        rope_layers(4, 0)
    with pytest.raises(ValueError, match=r"kind must be one of .*, got 'dense'"):
        layer_mask("dense", 3)
    with pytest.raises(ValueError, match=r"kind must be one of \('full_attention', 'sliding_attention', "
                                         r"'chunked_attention'\), got 'linear_attention'"):
        layer_mask("linear_attention", 3)
    with pytest.raises(ValueError, match=r"layer_types must be a non-empty list of .*, got \['full_attention', 'global'\]"):
        summarize_layer_types(["full_attention", "global"])
    with pytest.raises(ValueError, match=r"layer_types must be a list of .*, got \['full_attention', 'sliding_attention', 3\]"):
        model_cache_bytes(10, ["full_attention", "sliding_attention", 3], 8, window=4)
    with pytest.raises(ValueError, match=r"window must be an int >= 1, got None"):
        layer_mask("sliding_attention", 3)
    with pytest.raises(ValueError, match=r"chunk must be an int >= 1, got None"):
        layer_mask("chunked_attention", 3)
    with pytest.raises(ValueError, match=r"window must be an int >= 1, got 0"):
        layer_mask("sliding_attention", 3, window=0)
    with pytest.raises(ValueError, match=r"n_keys must be an int >= 4, got 3"):
        layer_mask("full_attention", 4, 3)
    with pytest.raises(ValueError, match=r"layer_types must be a non-empty list of .*, got \[\]"):
        summarize_layer_types([])
    with pytest.raises(ValueError, match=r"kind must be one of .*, got 'global'"):
        cached_tokens("global", 10)
    with pytest.raises(ValueError, match=r"window must be an int >= 1, got None"):
        cached_tokens("sliding_attention", 10)
    with pytest.raises(ValueError, match=r"seq_len must be an int >= 0, got -5"):
        cached_tokens("full_attention", -5)
    with pytest.raises(ValueError, match=r"layer_types must be a list of .*, got 'full_attention'"):
        model_cache_bytes(10, "full_attention", 8)
    assert set(LAYER_KINDS) == {"full_attention", "sliding_attention", "chunked_attention", "linear_attention"}
