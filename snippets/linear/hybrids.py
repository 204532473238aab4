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


def _check_hybrid_int(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def _check_bytes(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise ValueError(f"{name} must be a finite number of bytes >= 0, got {value!r}")


def _hf_ints(hf: object, keys: tuple[str, ...], where: str = "hf") -> dict[str, int]:
    """The positive ints ``keys`` of a config.json read as a dict, or a clear error naming what is wrong."""
    if not isinstance(hf, dict):
        raise TypeError(f"{where} must be a dict read from config.json, got {type(hf).__name__}")
    missing = [key for key in keys if key not in hf]
    if missing:
        raise ValueError(f"{where} must hold {', '.join(keys)}; got no {', '.join(missing)}")
    for key in keys:
        _check_hybrid_int(f"{where}[{key!r}]", hf[key])
    return {key: hf[key] for key in keys}


# --8<-- [start:pattern]
def layer_pattern(n_layers: int, full_attention_interval: int = 4) -> tuple[str, ...]:
    """"linear" everywhere except every ``full_attention_interval``-th layer, which is "full".

    ``layer_pattern(8, 4)`` is (linear, linear, linear, full) twice: three
    linear layers per full-attention layer, as Qwen3-Next's config sets it.
    """
    _check_hybrid_int("n_layers", n_layers)
    _check_hybrid_int("full_attention_interval", full_attention_interval)
    return tuple("full" if (i + 1) % full_attention_interval == 0 else "linear" for i in range(n_layers))


def pattern_from_full_layers(n_layers: int, full_layers: list[int]) -> tuple[str, ...]:
    """The pattern from a list of full-attention layers numbered from 1, as Kimi Linear's config lists them."""
    _check_hybrid_int("n_layers", n_layers)
    if not isinstance(full_layers, (list, tuple)):
        raise TypeError(f"full_layers must be a list of layer numbers, got {type(full_layers).__name__}")
    bad = [i for i in full_layers if isinstance(i, bool) or not isinstance(i, int) or not 1 <= i <= n_layers]
    if bad:
        raise ValueError(f"full_layers must be layer numbers from 1 to n_layers={n_layers}, got {bad}")
    return tuple("full" if i + 1 in set(full_layers) else "linear" for i in range(n_layers))
# --8<-- [end:pattern]


# --8<-- [start:config]
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
        if not isinstance(self.name, str):
            raise TypeError(f"name must be a str, got {type(self.name).__name__}")
        if not isinstance(self.layer_types, (tuple, list)) or not self.layer_types \
                or set(self.layer_types) - {"linear", "full"}:
            raise ValueError(f"layer_types must be a non-empty sequence of 'linear' and 'full', got {self.layer_types!r}")
        for name in ("kv_per_token", "state_per_layer", "conv_per_layer"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")

    @property
    def n_full(self) -> int:
        return self.layer_types.count("full")

    @property
    def n_linear(self) -> int:
        return self.layer_types.count("linear")

    def all_full(self) -> HybridConfig:
        """The same model with every layer full attention: the baseline a hybrid is measured against."""
        return replace(self, name=f"{self.name}, all full", layer_types=("full",) * len(self.layer_types))


def cache_bytes(
    config: HybridConfig, context: int, *, batch: int = 1, kv_bytes: float = 2, state_bytes: float = 4
) -> dict[str, float]:
    """Bytes held per batch of sequences after ``context`` tokens.

    Args:
        kv_bytes: bytes per cached key/value number (2 for bfloat16).
        state_bytes: bytes per state number (4: recurrent states are usually
            kept in float32, since they add up a long product of decays).

    Returns:
        ``{"kv": ..., "state": ..., "total": ...}`` in bytes.
    """
    if not isinstance(config, HybridConfig):
        raise TypeError(f"config must be a HybridConfig, got {type(config).__name__}")
    if isinstance(context, bool) or not isinstance(context, int) or context < 0:
        raise ValueError(f"context must be an int >= 0, got {context!r}")
    _check_hybrid_int("batch", batch)
    _check_bytes("kv_bytes", kv_bytes)
    _check_bytes("state_bytes", state_bytes)
    kv = batch * config.n_full * context * config.kv_per_token * kv_bytes
    state = batch * config.n_linear * (config.state_per_layer * state_bytes + config.conv_per_layer * kv_bytes)
    return {"kv": kv, "state": state, "total": kv + state}
# --8<-- [end:config]


# --8<-- [start:published]
def qwen3_next_config(hf: dict) -> HybridConfig:
    """Read a Qwen3-Next ``config.json`` (as a dict): Gated DeltaNet layers and gated full attention."""
    _hf_ints(hf, ("num_hidden_layers", "full_attention_interval", "num_key_value_heads", "head_dim",
                  "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                  "linear_value_head_dim", "linear_conv_kernel_dim"))
    h_k, h_v = hf["linear_num_key_heads"], hf["linear_num_value_heads"]
    d_k, d_v = hf["linear_key_head_dim"], hf["linear_value_head_dim"]
    # One (d_k, d_v) state per value head; keys are shared by h_v / h_k value heads.
    conv_channels = 2 * h_k * d_k + h_v * d_v  # q, k and v pass through the short convolution
    return HybridConfig(
        name="Qwen3-Next",
        layer_types=layer_pattern(hf["num_hidden_layers"], hf["full_attention_interval"]),
        kv_per_token=2 * hf["num_key_value_heads"] * hf["head_dim"],
        state_per_layer=h_v * d_k * d_v,
        conv_per_layer=(hf["linear_conv_kernel_dim"] - 1) * conv_channels,
    )


def kimi_linear_config(hf: dict) -> HybridConfig:
    """Read a Kimi Linear ``config.json`` (as a dict): KDA layers and MLA layers."""
    _hf_ints(hf, ("num_hidden_layers", "kv_lora_rank", "qk_rope_head_dim"))
    if not isinstance(hf.get("linear_attn_config"), dict):
        raise TypeError(f"hf['linear_attn_config'] must be a dict, got {type(hf.get('linear_attn_config')).__name__}")
    _hf_ints(hf["linear_attn_config"], ("num_heads", "head_dim", "short_conv_kernel_size"), "hf['linear_attn_config']")
    lin = hf["linear_attn_config"]
    h, d = lin["num_heads"], lin["head_dim"]
    return HybridConfig(
        name="Kimi Linear",
        layer_types=pattern_from_full_layers(hf["num_hidden_layers"], lin["full_attn_layers"]),
        # MLA caches one compressed latent and one shared RoPE key per token.
        kv_per_token=hf["kv_lora_rank"] + hf["qk_rope_head_dim"],
        state_per_layer=h * d * d,
        conv_per_layer=(lin["short_conv_kernel_size"] - 1) * 3 * h * d,
    )
# --8<-- [end:published]
