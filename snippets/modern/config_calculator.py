"""Decoding cache and attention FLOPs of a model, read from its ``config.json``.

Papers: Ainslie et al. (2023), "GQA", arXiv:2305.13245 (H_kv heads cached);
DeepSeek-AI (2024), "DeepSeek-V2", arXiv:2405.04434, Section 2.1.4 (the latent
cache, d_c + d_R per token); Yang, Kautz and Hatamizadeh (2024), "Gated Delta
Networks", arXiv:2412.06464 (the d_k x d_v state of a linear-attention layer).
Page: docs/modern/models.md (the calculator section).
Tested against: the bytes of the caches that tiny ``transformers`` 5.23 models
(Llama, Qwen2, Gemma 3, Gemma 3n, Qwen3-Next) and the guide's ``LatentCache``
hold after a forward of T tokens, the rows of docs/data/models.yaml, and sums
written out as loops (tests/test_config_calculator.py).

The fields read, after stepping into ``text_config`` when the file has one:
``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads``
(default: the query heads), ``head_dim`` (default ``hidden_size //
num_attention_heads``); ``layer_types``, or else one full layer closing each
group of ``full_attention_interval`` (the others linear) or of
``sliding_window_pattern`` (the others sliding), or else every layer sliding
when ``sliding_window`` is set and ``use_sliding_window`` is not false, full
otherwise; ``sliding_window``, ``attention_chunk_size``; for latent attention
``kv_lora_rank``, ``qk_rope_head_dim``, ``qk_nope_head_dim``, ``v_head_dim`` and
an indexer's ``index_head_dim``; for Gated DeltaNet layers (Qwen3-Next,
Qwen3.5) ``linear_num_key_heads``, ``linear_num_value_heads``,
``linear_key_head_dim``, ``linear_value_head_dim``, ``linear_conv_kernel_dim``;
and Gemma 3n's ``num_kv_shared_layers`` (the last that many layers read the
cache of an earlier layer and keep none of their own).

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

__all__ = ["cache_from_config", "flops_from_config"]

SOFTMAX = ("full_attention", "sliding_attention", "chunked_attention")
KINDS = SOFTMAX + ("linear_attention",)


# --8<-- [start:per_token]
def kv_per_token(n_kv_heads: int, d_k: int, d_v: int) -> int:
    """Numbers one softmax layer caches per token: H_kv (d_k + d_v)."""
    return n_kv_heads * (d_k + d_v)


def latent_per_token(kv_lora_rank: int, rope_dim: int, index_dim: int = 0) -> int:
    """Numbers one latent-attention layer caches per token: d_c + d_R (+ index key)."""
    return kv_lora_rank + rope_dim + index_dim


def kept_tokens(kind: str, tokens: int, span: int | None) -> int:
    """Tokens a layer keeps after T tokens: all of them, or at most its window/chunk."""
    return tokens if kind == "full_attention" else min(tokens, span)


# --8<-- [end:per_token]


# --8<-- [start:state]
def delta_state_bytes(n_k: int, n_v: int, d_k: int, d_v: int, kernel: int,
                      conv_bytes: int, state_bytes: int) -> int:
    """Bytes of one Gated DeltaNet layer: its conv window and H_v d_k x d_v states."""
    conv = (2 * n_k * d_k + n_v * d_v) * kernel  # the q, k, v channels of the conv
    return conv * conv_bytes + n_v * d_k * d_v * state_bytes


# --8<-- [end:state]


# --8<-- [start:pairs]
def keys_read(kind: str, t: int, span: int | None) -> int:
    """Keys the query at 1-based position t reads: t, min(t, w), or its chunk so far."""
    if kind == "sliding_attention":
        return min(t, span)
    if kind == "chunked_attention":
        return (t - 1) % span + 1
    return t


def causal_pairs(kind: str, tokens: int, span: int | None) -> int:
    """Query-key pairs of a causal prefill of T tokens: the sum of keys_read over t."""
    if kind == "full_attention" or tokens <= span:
        return tokens * (tokens + 1) // 2
    if kind == "sliding_attention":  # a triangle, then w keys for each later query
        return span * (span + 1) // 2 + (tokens - span) * span
    whole, rest = divmod(tokens, span)  # chunked: one triangle per chunk
    return whole * span * (span + 1) // 2 + rest * (rest + 1) // 2


# --8<-- [end:pairs]


# --8<-- [start:flops]
def attention_flops(n_heads: int, d_qk: int, d_v: int, pairs: int) -> int:
    """FLOPs of QK^T and PV: 2 H (d_qk + d_v) per query-key pair."""
    return 2 * n_heads * (d_qk + d_v) * pairs


# --8<-- [end:flops]


# --8<-- [start:face]
def _check_calc_ints(**values: object) -> None:
    """Every value is an int >= 1."""
    for name, value in values.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def _field(cfg: dict, name: str, default: object = None, minimum: int = 1) -> int:
    """``cfg[name]`` (or the default), refused unless an int >= minimum."""
    value = cfg.get(name) if cfg.get(name) is not None else default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"config[{name!r}] must be an int >= {minimum}, got {value!r}")
    return value


def _read(config: object) -> dict:
    """The numbers both faces need, read from the (text) config."""
    if not isinstance(config, dict):
        raise TypeError(f"config must be a dict (json.load of a file), got {config!r}")
    nested = config.get("text_config")
    cfg = nested if isinstance(nested, dict) else config
    if cfg.get("compress_ratios"):  # DeepSeek-V4: entries per m tokens, not per token
        raise ValueError("config['compress_ratios'] (compressed caches) is not read "
                         f"here, got {cfg['compress_ratios']!r}")
    n, h = _field(cfg, "num_hidden_layers"), _field(cfg, "num_attention_heads")
    spec = {"layers": n, "heads": h, "h_kv": _field(cfg, "num_key_value_heads", h),
            "shared": _field(cfg, "num_kv_shared_layers", 0, minimum=0)}
    sliding = cfg.get("sliding_window") and cfg.get("use_sliding_window") is not False
    local = "linear_attention" if cfg.get("full_attention_interval") else (
        "sliding_attention" if sliding else "full_attention")
    every = _field(cfg, "full_attention_interval", 0, minimum=0) or _field(
        cfg, "sliding_window_pattern", n + 1)  # one full layer closes each group
    types = cfg.get("layer_types") or [
        KINDS[0] if (i + 1) % every == 0 else local for i in range(n)]
    if not isinstance(types, list) or len(types) != n or not set(types) <= set(KINDS):
        raise ValueError(f"config['layer_types'] must list {n} of {KINDS}, "
                         f"got {types!r}")
    spec["types"] = types
    spec["span"] = {SOFTMAX[0]: None,
                    SOFTMAX[1]: _field(cfg, "sliding_window") if SOFTMAX[1] in types
                    else None, SOFTMAX[2]: _field(cfg, "attention_chunk_size")
                    if SOFTMAX[2] in types else None}
    if cfg.get("kv_lora_rank") is not None:  # latent attention
        rope = _field(cfg, "qk_rope_head_dim", minimum=0)
        index = _field(cfg, "index_head_dim", 0, minimum=0)  # DeepSeek Sparse Attention
        spec["per_token"] = latent_per_token(_field(cfg, "kv_lora_rank"), rope, index)
        spec["d_qk"] = _field(cfg, "qk_nope_head_dim", minimum=0) + rope
        spec["d_v"] = _field(cfg, "v_head_dim")
    else:
        d = _field(cfg, "head_dim") if cfg.get("head_dim") is not None \
            else _field(cfg, "hidden_size") // h
        spec["per_token"] = kv_per_token(spec["h_kv"], d, d)
        spec["d_qk"] = spec["d_v"] = d
    if "linear_attention" in types:
        spec["linear"] = [_field(cfg, f"linear_{f}") for f in (
            "num_key_heads", "num_value_heads", "key_head_dim", "value_head_dim",
            "conv_kernel_dim")]
    return spec


def cache_from_config(config: dict, tokens: int, kv_dtype_bytes: int = 2, *,
                      state_dtype_bytes: int = 4, batch: int = 1) -> dict:
    """The decoding cache of a model after ``tokens`` tokens, layer kind by layer kind.

    Args:
        config: the parsed ``config.json`` (a dict; ``text_config`` is entered).
        tokens: T, tokens per sequence (prompt plus generated).
        kv_dtype_bytes: bytes per cached key/value number (2: bfloat16; 1: FP8);
            the short-convolution window of a linear layer is kept in it too.
        state_dtype_bytes: bytes per number of a linear layer's recurrent state
            (4: transformers keeps it in float32 even in a bfloat16 model).
        batch: B.

    Returns:
        A dict: ``per_token`` (numbers one softmax layer caches per token),
        ``layers`` (how many layers of each kind keep a cache; ``shared``, those
        that keep none), ``bytes_per_token`` (bytes one token adds over the
        layers of each softmax kind while it is under its window or chunk),
        ``bytes`` (bytes after T tokens per kind; ``linear_attention``: the
        fixed state) and ``total``.
    """
    _check_calc_ints(tokens=tokens, kv_dtype_bytes=kv_dtype_bytes,
                  state_dtype_bytes=state_dtype_bytes, batch=batch)
    s = _read(config)
    own = s["types"][: s["layers"] - s["shared"]]  # shared layers keep no cache
    out = {"per_token": s["per_token"], "layers": {k: own.count(k) for k in KINDS},
           "bytes_per_token": {}, "bytes": {}}
    out["layers"]["shared"] = s["shared"]
    for kind in SOFTMAX:
        step = batch * kv_dtype_bytes * s["per_token"] * own.count(kind)
        out["bytes_per_token"][kind] = step
        out["bytes"][kind] = step and step * kept_tokens(kind, tokens, s["span"][kind])
    state = delta_state_bytes(*s["linear"], kv_dtype_bytes, state_dtype_bytes) \
        if "linear" in s else 0
    out["bytes"]["linear_attention"] = batch * state * own.count("linear_attention")
    out["total"] = sum(out["bytes"].values())
    return out


def flops_from_config(config: dict, tokens: int) -> dict:
    """Attention FLOPs of one sequence: a causal prefill of T tokens, and token T.

    Counted: the products QK^T and PV only, 2 FLOPs per multiply-add, over the
    keys each query reads (its window, its chunk so far, or every earlier
    token); latent attention in its expanded form (H (d_nope + d_R + d_v) per
    pair); a Gated DeltaNet layer as three d_k x d_v products per head and token
    (read the state, S k, the rank-one write). Not counted: projections, softmax,
    norms, an indexer's scoring, batch (multiply by B).

    Args:
        config: the parsed ``config.json`` (a dict; ``text_config`` is entered).
        tokens: T.

    Returns:
        A dict: ``prefill`` and ``decode`` (the query at position T, so that
        prefill(T) - prefill(T - 1) = decode(T)), each by layer kind, and their
        ``prefill_total`` and ``decode_total``.
    """
    _check_calc_ints(tokens=tokens)
    s = _read(config)
    out = {"prefill": {}, "decode": {}}
    for kind in SOFTMAX:
        span, n = s["span"][kind], s["types"].count(kind)  # shared layers attend too
        cost = n * attention_flops(s["heads"], s["d_qk"], s["d_v"], 1)
        out["prefill"][kind] = cost and cost * causal_pairs(kind, tokens, span)
        out["decode"][kind] = cost and cost * keys_read(kind, tokens, span)
    n_k, n_v, d_k, d_v, _ = s.get("linear", (0,) * 5)
    step = s["types"].count("linear_attention") * 2 * 3 * n_v * d_k * d_v
    out["prefill"]["linear_attention"], out["decode"]["linear_attention"] = \
        step * tokens, step
    out["prefill_total"] = sum(out["prefill"].values())
    out["decode_total"] = sum(out["decode"].values())
    return out


# --8<-- [end:face]
