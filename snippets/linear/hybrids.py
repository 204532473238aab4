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
    _check_hybrid_numbers(**locals())  # both are counts >= 1
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
    # a count or a byte size: a float context only scales the bytes, as it should
    _check_hybrid_numbers(0, (int, float), context=context, batch=batch,
                          kv_bytes=kv_bytes, state_bytes=state_bytes)
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
    _check_hf(hf, ("num_hidden_layers", "full_attention_interval", "head_dim",
                   "num_key_value_heads", "linear_num_key_heads",
                   "linear_num_value_heads", "linear_key_head_dim",
                   "linear_value_head_dim", "linear_conv_kernel_dim"))
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
    _check_hf(hf, ("num_hidden_layers", "kv_lora_rank", "qk_rope_head_dim"))
    lin = hf.get("linear_attn_config")
    _check_hf(lin, ("num_heads", "head_dim", "short_conv_kernel_size"),
              "hf['linear_attn_config']")
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
def _check_hybrid_numbers(low=1, kind=int, **named) -> None:
    """Each value a finite ``kind`` (an int, or a tuple of types: a number) >= low."""
    for name, value in named.items():
        if not (isinstance(value, kind) and low <= value < float("inf")):
            what = getattr(kind, "__name__", "number")
            raise ValueError(f"{name} must be a finite {what} >= {low}, got {value!r}")


def _check_full_layers(full_layers, n_layers) -> None:
    _check_hybrid_numbers(n_layers=n_layers)
    if not isinstance(full_layers, (list, tuple)) or not all(
            isinstance(i, int) and 1 <= i <= n_layers for i in full_layers):
        raise ValueError(f"full_layers must be a list of layer numbers from 1 to "
                         f"n_layers={n_layers}, got {full_layers!r}")


def _check_hybrid_config(config) -> None:
    types = config.layer_types
    ok = isinstance(types, (tuple, list)) and types and set(types) <= {"linear", "full"}
    if not ok:
        raise ValueError(f"layer_types must be a non-empty sequence of 'linear' and "
                         f"'full', got {types!r}")
    sizes = ("kv_per_token", "state_per_layer", "conv_per_layer")
    _check_hybrid_numbers(0, **{name: getattr(config, name) for name in sizes})


def _check_hf(hf: object, keys: tuple[str, ...], where: str = "hf") -> None:
    """A config.json read as a dict that holds every key in ``keys`` as an int >= 1."""
    if not isinstance(hf, dict):
        raise TypeError(f"{where} must be a dict read from config.json, got {hf!r}")
    _check_hybrid_numbers(**{f"{where}[{key!r}]": hf.get(key) for key in keys})
# --8<-- [end:checks]
