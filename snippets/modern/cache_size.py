"""How much a decoder caches per token: multi-head, grouped-query, multi-query and
latent attention,
and what local layers save.

Papers: Shazeer (2019), "Fast Transformer Decoding: One Write-Head is All You
Need", arXiv:1911.02150 (multi-query); Ainslie et al. (2023), "GQA: Training
Generalized Multi-Query Transformer Models from Multi-Head Checkpoints",
arXiv:2305.13245 (grouped-query); DeepSeek-AI (2024), "DeepSeek-V2",
arXiv:2405.04434, Section 2.1.4 and Table 1 (the cache per token of each kind:
2 n_h d_h l, 2 n_g d_h l, 2 d_h l and (d_c + d_h^R) l elements).
Page: docs/modern/latent-attention.md and docs/modern/local-global.md
Tested against: the formulas written out in the tests, the buffers that
``LatentCache`` and the site's ``KVCache`` allocate, and the per-model values in
docs/data/models.yaml (tests/test_latent_attention.py,
tests/test_layer_patterns.py, tests/test_models_data.py).

A local layer never needs more than its window (sliding) or its chunk
(chunked) of keys, so its cache is capped there; a linear-attention layer
(Qwen3-Next's Gated DeltaNet) keeps a fixed-size state instead of a cache and
is not counted here.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

__all__ = [
    "mha_cache_elements",
    "mla_cache_elements",
    "cached_tokens",
    "model_cache_bytes",
]


# --8<-- [start:validate]
KINDS = ("full_attention", "sliding_attention", "chunked_attention", "linear_attention")


def _check_cache_ints(**values: tuple) -> None:
    """Every name=(value, minimum): the value is an int >= minimum."""
    for name, (value, minimum) in values.items():
        if not isinstance(value, int) or value < minimum:
            raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


# --8<-- [end:validate]


# --8<-- [start:per_token]
def mha_cache_elements(n_kv_heads: int, d_k: int, d_v: int | None = None) -> int:
    """Numbers cached per token and layer when keys and values are stored per head.

    ``n_kv_heads * (d_k + d_v)``: multi-head attention with ``n_kv_heads = H``,
    grouped-query with ``H_kv``, multi-query with 1. ``d_v`` defaults to ``d_k``.
    """
    d_v = d_k if d_v is None else d_v
    _check_cache_ints(n_kv_heads=(n_kv_heads, 1), d_k=(d_k, 1), d_v=(d_v, 1))
    return n_kv_heads * (d_k + d_v)


def mla_cache_elements(kv_lora_rank: int, rope_dim: int) -> int:
    """Numbers cached per token and layer by multi-head latent attention: ``d_c + d_R``.

    The latent ``c`` and the one rotary key shared by all heads; no head count
    appears. DeepSeek-V3 and Kimi K2: 512 + 64 = 576.
    """
    _check_cache_ints(kv_lora_rank=(kv_lora_rank, 1), rope_dim=(rope_dim, 0))
    return kv_lora_rank + rope_dim


# --8<-- [end:per_token]


# --8<-- [start:cached_tokens]
def cached_tokens(
    kind: str, seq_len: int, *, window: int | None = None, chunk: int | None = None
) -> int:
    """Tokens one layer must keep after ``seq_len`` tokens.

    ``full_attention``: all of them; ``sliding_attention``: at most the window;
    ``chunked_attention``: at most one chunk (a query never looks past the
    start of its chunk; serving code allocates the whole chunk);
    ``linear_attention``: none (a fixed-size recurrent state, not a cache).
    """
    _check_cache_ints(seq_len=(seq_len, 0))
    if kind == "full_attention":
        return seq_len
    if kind == "sliding_attention":
        _check_cache_ints(window=(window, 1))  # None: the window was not given
        return min(seq_len, window)
    if kind == "chunked_attention":
        _check_cache_ints(chunk=(chunk, 1))
        return min(seq_len, chunk)
    if kind == "linear_attention":
        return 0
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


# --8<-- [end:cached_tokens]


# --8<-- [start:bytes]
def model_cache_bytes(
    seq_len: int,
    layer_types: list[str],
    elements_per_token: int,
    *,
    window: int | None = None,
    chunk: int | None = None,
    batch: int = 1,
    bytes_per_element: int = 2,
) -> int:
    """Bytes of the whole decoding cache after ``seq_len`` tokens.

    ``batch * bytes_per_element * elements_per_token`` times the sum over layers of
    ``cached_tokens``.

    Args:
        seq_len: M, tokens per sequence (prompt plus generated).
        layer_types: the kind of every layer (see ``cached_tokens``).
        elements_per_token: from ``mha_cache_elements`` or ``mla_cache_elements``.
        window: of the sliding layers.
        chunk: of the chunked layers.
        batch: B.
        bytes_per_element: 2 for bfloat16/float16.

    Returns:
        The size in bytes, an int.
    """
    if not isinstance(layer_types, (list, tuple)) or not set(layer_types) <= set(KINDS):
        raise ValueError(f"layer_types must be a list of {KINDS}, got {layer_types!r}")
    _check_cache_ints(elements_per_token=(elements_per_token, 1), batch=(batch, 0),
                      bytes_per_element=(bytes_per_element, 1))
    tokens = sum(
        cached_tokens(kind, seq_len, window=window, chunk=chunk) for kind in layer_types
    )
    return batch * bytes_per_element * elements_per_token * tokens


# --8<-- [end:bytes]
