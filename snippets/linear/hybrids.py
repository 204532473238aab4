"""Hybrid decoders: a layer pattern, and the memory a sequence holds at decoding time.

A hybrid stacks cheap linear-attention layers (a fixed-size state per
sequence) with a few full-attention layers (a KV cache that grows with the
context). Qwen3-Next (config.json of Qwen/Qwen3-Next-80B-A3B-Instruct:
full_attention_interval = 4, Gated DeltaNet in the other layers) and Kimi
Linear (Kimi Team, 2025, "Kimi Linear: An Expressive, Efficient Attention
Architecture", arXiv:2510.26692; config.json of
moonshotai/Kimi-Linear-48B-A3B-Instruct: Kimi Delta Attention layers and MLA
layers listed by number) both run three linear layers per full one.
Page: docs/linear/hybrids.md
Tested against: the published configs (docs/data/hybrids.yaml, every value
with its source) in tests/test_hybrid_memory.py: the layer lists, the cache
per token, and the KV saving the Kimi Linear report states.

The calculator counts what must be kept per sequence; it does not count
weights, activations, paging overhead or the copies a server keeps for
prefix caching. Dense and MLA decoders without linear layers are on the
modern-decoder pages.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = [
    "layer_pattern",
    "pattern_from_full_layers",
    "HybridConfig",
    "cache_bytes",
    "qwen3_next_config",
    "kimi_linear_config",
]


# --8<-- [start:pattern]
def periodic_pattern(n_layers, interval):
    """Layer i (from 1) is "full" when interval divides i, else "linear"."""
    return tuple(
        "full" if (i + 1) % interval == 0 else "linear" for i in range(n_layers)
    )
# --8<-- [end:pattern]


# --8<-- [start:memory]
def held_bytes(
    n_full, n_linear, context, kv_per_token, state, conv, kv_bytes, state_bytes
):
    """The KV cache grows with the context; a linear layer's state does not."""
    kv = n_full * context * kv_per_token * kv_bytes  # full-attention layers
    fixed = n_linear * (state * state_bytes + conv * kv_bytes)  # linear layers
    return {"kv": kv, "state": fixed, "total": kv + fixed}
# --8<-- [end:memory]


# --8<-- [start:face]
def layer_pattern(n_layers: int, full_attention_interval: int = 4) -> tuple[str, ...]:
    """The layer types of a periodic hybrid, as Qwen3-Next's config sets them.

    ``layer_pattern(8, 4)`` is (linear, linear, linear, full) twice: three
    linear layers per full-attention layer.

    Args:
        n_layers: layers in the model.
        full_attention_interval: every this many layers, one is full attention.

    Returns:
        ``n_layers`` strings, "linear" or "full", bottom to top.
    """
    _check_hybrid_int("n_layers", n_layers)
    _check_hybrid_int("full_attention_interval", full_attention_interval)
    return periodic_pattern(n_layers, full_attention_interval)


def pattern_from_full_layers(n_layers: int, full_layers: list[int]) -> tuple[str, ...]:
    """The layer types from a list of full-attention layers numbered from 1.

    Kimi Linear's config lists its MLA layers this way.

    Args:
        n_layers: layers in the model.
        full_layers: the full-attention layers, each in 1 ... n_layers.

    Returns:
        ``n_layers`` strings, "linear" or "full", bottom to top.
    """
    _check_hybrid_int("n_layers", n_layers)
    _check_full_layers(full_layers, n_layers)
    return tuple(
        "full" if i + 1 in set(full_layers) else "linear" for i in range(n_layers)
    )


@dataclass(frozen=True)
class HybridConfig:
    """What each kind of layer keeps for one sequence.

    Attributes:
        name: a label.
        layer_types: "linear" or "full" for each layer, bottom to top.
        kv_per_token: numbers one full-attention layer caches per token
            (2 * H_kv * d for keys and values; kv_lora_rank + rope width for MLA).
        state_per_layer: numbers one linear layer keeps whatever the length:
            its recurrent state (H_v * d_k * d_v for a delta-rule layer).
        conv_per_layer: numbers of the short convolution's rolling window, per
            linear layer ((kernel - 1) * channels).
    """

    name: str
    layer_types: tuple[str, ...]
    kv_per_token: int
    state_per_layer: int
    conv_per_layer: int = 0

    def __post_init__(self) -> None:
        _check_hybrid_config(self)

    @property
    def n_full(self) -> int:
        return self.layer_types.count("full")

    @property
    def n_linear(self) -> int:
        return self.layer_types.count("linear")

    def all_full(self) -> HybridConfig:
        """The same model with every layer full attention: the baseline."""
        return replace(
            self,
            name=f"{self.name}, all full",
            layer_types=("full",) * len(self.layer_types),
        )


def cache_bytes(
    config: HybridConfig,
    context: int,
    *,
    batch: int = 1,
    kv_bytes: float = 2,
    state_bytes: float = 4,
) -> dict[str, float]:
    """Bytes held per batch of sequences after ``context`` tokens.

    Args:
        config: the model's ``HybridConfig``.
        context: tokens seen so far.
        batch: sequences decoded together.
        kv_bytes: bytes per cached key/value number (2 for bfloat16).
        state_bytes: bytes per state number (4: recurrent states are usually
            kept in float32, since they add up a long product of decays).

    Returns:
        ``{"kv": ..., "state": ..., "total": ...}`` in bytes.
    """
    _check_cache_args(config, context, batch, kv_bytes, state_bytes)
    one = held_bytes(
        config.n_full,
        config.n_linear,
        context,
        config.kv_per_token,
        config.state_per_layer,
        config.conv_per_layer,
        kv_bytes,
        state_bytes,
    )
    return {key: batch * value for key, value in one.items()}


def qwen3_next_config(hf: dict) -> HybridConfig:
    """Read a Qwen3-Next ``config.json`` (as a dict): Gated DeltaNet and full attention.

    Args:
        hf: the parsed config.json.

    Returns:
        The ``HybridConfig`` with its layer pattern, cache and state sizes.
    """
    _hf_ints(
        hf,
        (
            "num_hidden_layers",
            "full_attention_interval",
            "num_key_value_heads",
            "head_dim",
            "linear_num_key_heads",
            "linear_num_value_heads",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "linear_conv_kernel_dim",
        ),
    )
    h_k, h_v = hf["linear_num_key_heads"], hf["linear_num_value_heads"]
    d_k, d_v = hf["linear_key_head_dim"], hf["linear_value_head_dim"]
    # One (d_k, d_v) state per value head; keys are shared by h_v / h_k value heads.
    conv_channels = 2 * h_k * d_k + h_v * d_v  # q, k and v pass the short convolution
    return HybridConfig(
        name="Qwen3-Next",
        layer_types=layer_pattern(
            hf["num_hidden_layers"], hf["full_attention_interval"]
        ),
        kv_per_token=2 * hf["num_key_value_heads"] * hf["head_dim"],
        state_per_layer=h_v * d_k * d_v,
        conv_per_layer=(hf["linear_conv_kernel_dim"] - 1) * conv_channels,
    )


def kimi_linear_config(hf: dict) -> HybridConfig:
    """Read a Kimi Linear ``config.json`` (as a dict): KDA layers and MLA layers.

    Args:
        hf: the parsed config.json.

    Returns:
        The ``HybridConfig``; the MLA layers cache one latent and one shared
        RoPE-width key per token (they apply no rotation: NoPE, per the report).
    """
    _hf_ints(hf, ("num_hidden_layers", "kv_lora_rank", "qk_rope_head_dim"))
    _check_kimi_linear(hf)
    lin = hf["linear_attn_config"]
    h, d = lin["num_heads"], lin["head_dim"]
    return HybridConfig(
        name="Kimi Linear",
        layer_types=pattern_from_full_layers(
            hf["num_hidden_layers"], lin["full_attn_layers"]
        ),
        kv_per_token=hf["kv_lora_rank"] + hf["qk_rope_head_dim"],
        state_per_layer=h * d * d,
        conv_per_layer=(lin["short_conv_kernel_size"] - 1) * 3 * h * d,
    )
# --8<-- [end:face]


# --8<-- [start:checks]
def _check_hybrid_int(name: str, value: int) -> None:
    if not (isinstance(value, int) and value >= 1):
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def _check_full_layers(full_layers, n_layers) -> None:
    if not isinstance(full_layers, (list, tuple)):
        raise TypeError(
            f"full_layers must be a list of layer numbers, "
            f"got {type(full_layers).__name__}"
        )
    bad = [i for i in full_layers if not (isinstance(i, int) and 1 <= i <= n_layers)]
    if bad:
        raise ValueError(
            f"full_layers must be layer numbers from 1 to n_layers={n_layers}, "
            f"got {bad}"
        )


def _check_hybrid_config(config) -> None:
    if not isinstance(config.name, str):
        raise TypeError(f"name must be a str, got {type(config.name).__name__}")
    types = config.layer_types
    if (
        not isinstance(types, (tuple, list))
        or not types
        or set(types) - {"linear", "full"}
    ):
        raise ValueError(
            f"layer_types must be a non-empty sequence of 'linear' and 'full', "
            f"got {types!r}"
        )
    for name in ("kv_per_token", "state_per_layer", "conv_per_layer"):
        value = getattr(config, name)
        if not (isinstance(value, int) and value >= 0):
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")


def _check_cache_args(config, context, batch, kv_bytes, state_bytes) -> None:
    if not isinstance(config, HybridConfig):
        raise TypeError(f"config must be a HybridConfig, got {type(config).__name__}")
    if not (isinstance(context, int) and context >= 0):
        raise ValueError(f"context must be an int >= 0, got {context!r}")
    _check_hybrid_int("batch", batch)
    for name, value in (("kv_bytes", kv_bytes), ("state_bytes", state_bytes)):
        if not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
            raise ValueError(
                f"{name} must be a finite number of bytes >= 0, got {value!r}"
            )


def _hf_ints(hf: object, keys: tuple[str, ...], where: str = "hf") -> dict[str, int]:
    """The positive ints ``keys`` of a config.json read as a dict, or a named error."""
    if not isinstance(hf, dict):
        raise TypeError(
            f"{where} must be a dict read from config.json, got {type(hf).__name__}"
        )
    missing = [key for key in keys if key not in hf]
    if missing:
        raise ValueError(
            f"{where} must hold {', '.join(keys)}; got no {', '.join(missing)}"
        )
    for key in keys:
        _check_hybrid_int(f"{where}[{key!r}]", hf[key])
    return {key: hf[key] for key in keys}


def _check_kimi_linear(hf) -> None:
    lin = hf.get("linear_attn_config")
    if not isinstance(lin, dict):
        raise TypeError(
            f"hf['linear_attn_config'] must be a dict, got {type(lin).__name__}"
        )
    _hf_ints(
        lin,
        ("num_heads", "head_dim", "short_conv_kernel_size"),
        "hf['linear_attn_config']",
    )
# --8<-- [end:checks]
