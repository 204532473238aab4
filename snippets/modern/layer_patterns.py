"""Local and global layers: which mask each layer of a decoder uses, and which
layers skip RoPE.

Papers and configurations:

* Gemma Team (2025), "Gemma 3 Technical Report", arXiv:2503.19786, Section 2:
  five local sliding-window layers (window 1024) for every global layer.
* OpenAI (2025), "gpt-oss-120b & gpt-oss-20b Model Card", arXiv:2508.10925:
  layers alternate between a 128-token banded window and full attention.
* Meta's Llama 4 release (April 2025; its transformers configuration
  ``Llama4TextConfig``): chunked attention (chunk 8192) in three layers of
  every four, the fourth attends globally without RoPE (a NoPE layer; Kazemnejad
  et al. (2023), "The Impact of Positional Encoding on Length Generalization in
  Transformers", arXiv:2305.19466).

Page: docs/modern/local-global.md
Tested against: the ``layer_types`` that the transformers configurations
``Gemma3TextConfig``, ``GptOssConfig`` and ``Llama4TextConfig`` derive, and the
masks of ``transformers.masking_utils`` (tests/test_layer_patterns.py).

Layer kinds use the transformers names: ``"full_attention"``,
``"sliding_attention"``, ``"chunked_attention"`` and ``"linear_attention"``
(a recurrent layer such as Qwen3-Next's Gated DeltaNet: no softmax mask).

Window semantics (w): a sliding layer's query at position i sees keys
``i - w < j <= i``, itself and the w - 1 before it (as transformers and gpt-oss
count it). Chunk semantics (C): a chunked layer's query sees the keys
``j <= i`` of its own chunk, ``j // C == i // C``.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import torch

__all__ = [
    "LAYER_KINDS",
    "periodic_layer_types",
    "rope_layers",
    "layer_mask",
    "summarize_layer_types",
]

LAYER_KINDS = (
    "full_attention",
    "sliding_attention",
    "chunked_attention",
    "linear_attention",
)


# --8<-- [start:validate]
def _check_layer_args(**values: tuple) -> None:
    """Each name=(value, minimum): an int >= minimum; each (value, kinds): a kind."""
    for name, (value, rule) in values.items():
        kinds = isinstance(rule, tuple)
        if not (value in rule if kinds else isinstance(value, int) and value >= rule):
            need = f"one of {rule}" if kinds else f"an int >= {rule}"
            raise ValueError(f"{name} must be {need}, got {value!r}")


# --8<-- [end:validate]


# --8<-- [start:pattern]
def periodic_layer_types(
    n_layers: int,
    period: int,
    *,
    local: str = "sliding_attention",
    glob: str = "full_attention",
) -> list[str]:
    """``period - 1`` local layers, then one global layer, repeated.

    Layer i (counting from 0) is global when ``(i + 1) % period == 0``, so the
    first layer is local and the last of every group is global: Gemma 3 uses
    period 6, gpt-oss and Gemma 2 period 2, Llama 4 period 4 (chunked local
    layers), Qwen3-Next period 4 (linear-attention local layers). Period 1
    makes every layer global.

    Args:
        n_layers: how many layers.
        period: the length of the repeating group.
        local: the kind of the local layers.
        glob: the kind of the global layers.

    Returns:
        A list of ``n_layers`` layer kinds.
    """
    _check_layer_args(n_layers=(n_layers, 0), period=(period, 1),
                      local=(local, LAYER_KINDS), glob=(glob, LAYER_KINDS))
    return [glob if (i + 1) % period == 0 else local for i in range(n_layers)]


def rope_layers(n_layers: int, nope_interval: int | None = None) -> list[bool]:
    """True for each layer that rotates q and k; every ``nope_interval``-th does not.

    Llama 4 drops RoPE in layers 3, 7, 11, ... (``nope_interval=4``); those are
    also its global layers. ``None`` means every layer uses RoPE.
    """
    _check_layer_args(n_layers=(n_layers, 0))
    if nope_interval is None:
        return [True] * n_layers
    _check_layer_args(nope_interval=(nope_interval, 1))
    return [(i + 1) % nope_interval != 0 for i in range(n_layers)]


# --8<-- [end:pattern]


# --8<-- [start:mask]
def layer_mask(
    kind: str,
    n_queries: int,
    n_keys: int | None = None,
    *,
    window: int | None = None,
    chunk: int | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The boolean mask of one layer, True = may attend.

    The N queries are the last N of the M positions (lower-right alignment,
    as when N new tokens follow M - N cached ones).

    Args:
        kind: ``"full_attention"``, ``"sliding_attention"`` or ``"chunked_attention"``.
        n_queries: N.
        n_keys: M >= N; ``None`` means M = N.
        window: w, required for sliding layers: keys ``i - w < j <= i``.
        chunk: C, required for chunked layers: keys j <= i with j // C == i // C.
        device: where to build the mask.

    Returns:
        ``(N, M)`` boolean tensor.
    """
    m = n_queries if n_keys is None else n_keys
    # a linear layer has no mask
    _check_layer_args(kind=(kind, LAYER_KINDS[:3]), n_queries=(n_queries, 0),
                      n_keys=(m, n_queries))
    i = torch.arange(m - n_queries, m, device=device)[
        :, None
    ]  # (N, 1), absolute query positions
    j = torch.arange(m, device=device)  # (M,), key positions
    allowed = j <= i  # (N, M): causal
    if kind == "sliding_attention":
        _check_layer_args(window=(window, 1))  # None: the window was not given
        allowed = allowed & (
            j > i - window
        )  # (N, M): the w most recent keys, itself included
    elif kind == "chunked_attention":
        _check_layer_args(chunk=(chunk, 1))
        allowed = allowed & (j // chunk == i // chunk)  # (N, M): same chunk only
    return allowed


# --8<-- [end:mask]


# --8<-- [start:summarize]
def summarize_layer_types(layer_types: list[str]) -> str:
    """Describe a layer pattern, e.g. "5 sliding : 1 full (x10) + 2 sliding".

    The smallest repeating group is named with its repeat count; a tail shorter
    than one group follows it.
    """
    if not isinstance(layer_types, (list, tuple)) or not layer_types or not all(
            kind in LAYER_KINDS for kind in layer_types):
        raise ValueError(f"layer_types must be a non-empty list of {LAYER_KINDS}, "
                         f"got {layer_types!r}")

    def runs(kinds) -> str:  # ["sliding", "sliding", "full"] -> "2 sliding : 1 full"
        out: list[list] = []
        for kind in kinds:
            short = kind.split("_")[0]
            if out and out[-1][1] == short:
                out[-1][0] += 1
            else:
                out.append([1, short])
        return " : ".join(f"{count} {short}" for count, short in out)

    n = len(layer_types)
    period = next(
        p
        for p in range(1, n + 1)
        if all(layer_types[k] == layer_types[k % p] for k in range(n))
    )
    if period == 1:
        return f"all {n} {layer_types[0].split('_')[0]}"
    repeats, tail = divmod(n, period)
    if repeats == 1:
        return runs(layer_types)
    return f"{runs(layer_types[:period])} (x{repeats})" + (
        f" + {runs(layer_types[n - tail :])}" if tail else ""
    )


# --8<-- [end:summarize]
