"""A static KV cache: fixed-shape decoding that torch.compile and CUDA graphs capture.

Papers: the KV cache itself is as old as autoregressive Transformer decoding
(Vaswani et al. (2017), "Attention Is All You Need", arXiv:1706.03762); a
static cache only changes where its tensors live and which shapes the decode
step sees.
Page: docs/efficiency/kv-cache.md (section "Fast decoding on a GPU")
Tested against: the dynamic cache of snippets/efficiency/kv_cache.py, token for
token (tests/test_static_cache.py), and torch.compile with fullgraph=True.

The dynamic cache hands attention a key length M that grows by one per step.
A new M is a new shape: torch.compile recompiles for it (or compiles a
dynamic-shape graph), a CUDA graph cannot replay it, and a backend that plans
per shape (cuDNN's attention) plans again. On a GPU each step also launches
dozens of small kernels from Python; bench/gpu.py measures what that costs. Here every
buffer has its final size from the start, the position of the new token is a
tensor, and the mask is computed from it: key j is visible to the query at
position p when j <= p (the causal triangle aligned to the lower right of the
filled part). The decode step then has one shape forever, so it can be
captured once as a CUDA graph and replayed.

The functions take the model, they do not subclass it: any decoder with the
attributes of kv_cache.py's ``TinyDecoder`` (``embed``, ``pos``, ``attn`` with
``q_proj``/``k_proj``/``v_proj``/``out_proj``, ``norm1``, ``norm2``, ``mlp``,
``norm``, ``head``) decodes with the same weights.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["StaticKVCache", "static_forward", "generate_static"]


# --8<-- [start:mask]
def static_mask(positions: torch.Tensor, max_len: int) -> torch.Tensor:
    """True = may attend: the query at position p sees keys 0..p, no empty slot."""
    keys = torch.arange(max_len, device=positions.device)  # (max_len,)
    return keys <= positions.unsqueeze(-1)  # (N, 1) vs (max_len,) -> (N, max_len)


# --8<-- [end:mask]


# --8<-- [start:attend]
def attend_static(attn: nn.Module, x: torch.Tensor, cache: StaticKVCache, layer: int,
                  positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """One attention layer whose keys are the whole fixed-size buffer, masked."""
    B, N, D = x.shape
    q = attn.q_proj(x).view(B, N, attn.n_heads, -1).transpose(1, 2)  # (B, H, N, d)
    k = attn.k_proj(x).view(B, N, attn.n_kv_heads, -1).transpose(1, 2)
    v = attn.v_proj(x).view(B, N, attn.n_kv_heads, -1).transpose(1, 2)
    k, v = cache.write(layer, positions, k, v)  # -> (B, H_kv, max_len, d): a fixed M
    gqa = attn.n_kv_heads != attn.n_heads
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
    return attn.out_proj(out.transpose(1, 2).reshape(B, N, D))  # (B, N, D)
# --8<-- [end:attend]


# --8<-- [start:step]
def decode_step(
    model: nn.Module,
    cache: StaticKVCache,
    tokens: torch.Tensor,
    positions: torch.Tensor,
) -> torch.Tensor:
    """Logits for tokens (B, N) at positions (N,): every shape is the same each step."""
    x = model.embed(tokens) + model.pos(positions)  # (B, N) -> (B, N, D)
    mask = static_mask(positions, cache.max_len)  # (N, max_len)
    blocks = zip(model.attn, model.norm1, model.norm2, model.mlp)
    for layer, (attn, norm1, norm2, mlp) in enumerate(blocks):
        x = x + attend_static(attn, norm1(x), cache, layer, positions, mask)
        x = x + mlp(norm2(x))
    return model.head(model.norm(x))  # (B, N, D) -> (B, N, V)


# --8<-- [end:step]


# --8<-- [start:generate]
def decode_greedy_static(model, prompt: torch.Tensor, n_new: int, step) -> torch.Tensor:
    """Prefill eagerly, then run one fixed-shape step per new token."""
    B, N0 = prompt.shape
    cache = StaticKVCache.for_model(model, B, N0 + n_new)
    logits = decode_step(model, cache, prompt, torch.arange(N0, device=prompt.device))
    position = torch.tensor([N0], device=prompt.device)  # (1,): advanced in place
    tokens = prompt
    for i in range(n_new):
        next_token = logits[:, -1:].argmax(-1)  # (B, 1), read before the next replay
        tokens = torch.cat([tokens, next_token], dim=1)
        if i + 1 < n_new:
            logits = step(model, cache, next_token, position)  # (B, 1, V), one shape
            position += 1
    return tokens


# --8<-- [end:generate]


# --8<-- [start:face]
class StaticKVCache(nn.Module):
    """Key and value buffers of their final size, registered as module buffers.

    As buffers, torch.compile treats them as fixed storage that the compiled
    step may write in place (what a CUDA graph needs: the same addresses every
    replay).

    Args:
        n_layers: attention layers.
        batch: B.
        n_kv_heads: H_kv.
        d_head: d.
        max_len: the most tokens a sequence may reach (prompt plus generated).
        dtype, device: of the buffers.

    Shape:
        ``k_{layer}`` and ``v_{layer}``: ``(B, H_kv, max_len, d)``.
    """

    def __init__(
        self,
        n_layers: int,
        batch: int,
        n_kv_heads: int,
        d_head: int,
        max_len: int,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        _check_positive(
            n_layers=n_layers,
            batch=batch,
            n_kv_heads=n_kv_heads,
            d_head=d_head,
            max_len=max_len,
        )
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
        self.n_layers, self.max_len = n_layers, max_len
        for layer in range(n_layers):
            for kind in ("k", "v"):
                self.register_buffer(
                    f"{kind}_{layer}",
                    torch.zeros(
                        batch, n_kv_heads, max_len, d_head, dtype=dtype, device=device
                    ),
                )

    @classmethod
    def for_model(cls, model: nn.Module, batch: int, max_len: int) -> StaticKVCache:
        """A cache shaped for ``model``'s layers, heads, dtype and device."""
        _check_decoder(model)
        a, w = model.attn[0], model.head.weight
        return cls(
            len(model.attn),
            batch,
            a.n_kv_heads,
            a.d_head,
            max_len,
            dtype=w.dtype,
            device=w.device,
        )

    def write(
        self, layer: int, positions: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v ``(B, H_kv, N, d)`` at positions ``(N,)``; return the buffers."""
        if not isinstance(layer, int) or not 0 <= layer < self.n_layers:
            raise ValueError(
                f"layer must be an int in [0, {self.n_layers}), got {layer!r}"
            )
        buf_k, buf_v = getattr(self, f"k_{layer}"), getattr(self, f"v_{layer}")
        _check_new_kv(k, v, buf_k)
        _check_step_positions(positions, k.shape[2], buf_k.device)
        buf_k.index_copy_(
            2, positions, k
        )  # in place: same storage and shape every step
        buf_v.index_copy_(2, positions, v)
        return buf_k, buf_v  # (B, H_kv, max_len, d) each

    def mask(self, positions: torch.Tensor) -> torch.Tensor:
        """``static_mask`` for this cache: ``(N, max_len)``, True = may attend."""
        _check_step_positions(positions)
        return static_mask(positions, self.max_len)


def static_forward(
    model: nn.Module,
    cache: StaticKVCache,
    tokens: torch.Tensor,
    positions: torch.Tensor,
) -> torch.Tensor:
    """Logits for ``tokens`` at ``positions``, reading and writing the static cache.

    Args:
        model: a decoder laid out like kv_cache.py's ``TinyDecoder``.
        cache: its ``StaticKVCache``.
        tokens: ``(B, N)`` token ids (N = 1 while decoding).
        positions: ``(N,)`` int64, the positions of those tokens; a tensor, not
            an int, so one captured step serves every position.

    Returns:
        ``(B, N, V)`` logits.
    """
    _check_static_call(model, cache, tokens, positions)
    return decode_step(model, cache, tokens, positions)


@torch.no_grad()
def generate_static(
    model: nn.Module,
    prompt: torch.Tensor,
    n_new: int,
    *,
    compile_options: dict | None = None,
) -> torch.Tensor:
    """Greedy decoding with a static cache: the same tokens as the dynamic cache.

    Args:
        model: the decoder (kv_cache.py's ``TinyDecoder`` or alike).
        prompt: token ids, ``(B, N0)``.
        n_new: tokens to generate.
        compile_options: None to run the step eagerly; else keyword arguments
            for ``torch.compile`` of the one-token step, e.g.
            ``{"mode": "reduce-overhead", "fullgraph": True}`` (CUDA graphs).

    Returns:
        ``(B, N0 + n_new)`` token ids.
    """
    _check_generate_static(model, prompt, n_new, compile_options)
    step = (
        decode_step
        if compile_options is None
        else torch.compile(decode_step, **compile_options)
    )
    return decode_greedy_static(model, prompt, n_new, step)


# The parts of a decoder that these functions read (kv_cache.py's TinyDecoder has them).
_DECODER_PARTS = ("embed", "pos", "attn", "norm1", "norm2", "mlp", "norm", "head")


def _describe(t: object) -> str:
    if isinstance(t, torch.Tensor):
        return f"{t.dtype} {tuple(t.shape)} on {t.device}"
    return type(t).__name__


def _check_positive(**values: object) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def _check_decoder(model: object) -> None:
    if not isinstance(model, nn.Module) or not all(
        hasattr(model, p) for p in _DECODER_PARTS
    ):
        raise TypeError(
            f"model must be a decoder laid out like kv_cache.py's TinyDecoder "
            f"(with {', '.join(_DECODER_PARTS)}), got {type(model).__name__}"
        )


def _check_token_tensor(name: str, ids: object, device: torch.device) -> None:
    """Refuse anything but a (B, N) integer tensor of ids on the model's device."""
    if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.int64, torch.int32):
        got = ids.dtype if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise TypeError(
            f"{name} must be an int64 or int32 tensor of token ids, got {got}"
        )
    if ids.dim() != 2 or ids.device != device:
        raise ValueError(
            f"{name} must have shape (B, N) on the model's device {device}, "
            f"got {_describe(ids)}"
        )


def _check_new_kv(k: object, v: object, buffer: torch.Tensor) -> None:
    """Refuse k and v that are not (B, H_kv, N, d) tensors fitting the buffer."""
    b, h, _, d = buffer.shape
    for name, t in (("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or (t.dtype, t.device) != (
            buffer.dtype,
            buffer.device,
        ):
            raise TypeError(
                f"{name} must have the cache's dtype {buffer.dtype} on "
                f"{buffer.device}, got {_describe(t)}"
            )
    if k.dim() != 4 or k.shape[:2] != (b, h) or k.shape[-1] != d or v.shape != k.shape:
        raise ValueError(
            f"k and v must have shape (B, H_kv, N, d) = ({b}, {h}, N, {d}), "
            f"got k {tuple(k.shape)} and v {tuple(v.shape)}"
        )


def _check_step_positions(
    positions: object, n: int | None = None, device: torch.device | None = None
) -> None:
    """Refuse positions that are not an int64 (N,) tensor beside the tokens."""
    if not isinstance(positions, torch.Tensor) or positions.dtype != torch.int64:
        got = (
            positions.dtype
            if isinstance(positions, torch.Tensor)
            else type(positions).__name__
        )
        raise TypeError(f"positions must be an int64 tensor, got {got}")
    if (
        positions.dim() != 1
        or positions.shape[0] != (n or positions.shape[0])
        or positions.device != (device or positions.device)
    ):
        raise ValueError(
            f"positions must have shape (N,), one per token (N = {n}), on "
            f"{device}, got {_describe(positions)}"
        )


def _check_static_call(
    model: nn.Module, cache: object, tokens: object, positions: object
) -> None:
    """Refuse a decoder, cache, (B, N) tokens and (N,) positions that do not fit."""
    _check_decoder(model)
    if not isinstance(cache, StaticKVCache):
        raise TypeError(f"cache must be a StaticKVCache, got {type(cache).__name__}")
    if cache.n_layers != len(model.attn):
        raise ValueError(
            f"cache must have one layer per attention layer of model "
            f"({len(model.attn)}), got {cache.n_layers}"
        )
    _check_token_tensor("tokens", tokens, model.head.weight.device)
    if tokens.shape[0] != cache.k_0.shape[0]:
        raise ValueError(
            f"tokens must have the cache's batch size {cache.k_0.shape[0]}, "
            f"got shape {tuple(tokens.shape)}"
        )
    _check_step_positions(positions, tokens.shape[1], tokens.device)


def _check_generate_static(
    model: object, prompt: object, n_new: object, compile_options: object
) -> None:
    _check_decoder(model)
    _check_token_tensor("prompt", prompt, model.head.weight.device)
    vocab = model.embed.num_embeddings
    if bool(((prompt < 0) | (prompt >= vocab)).any()):  # one sync, before the loop
        raise ValueError(
            f"prompt must lie in [0, vocab_size={vocab}), "
            f"got ids from {int(prompt.min())} to {int(prompt.max())}"
        )
    if not isinstance(n_new, int) or n_new < 0:
        raise ValueError(f"n_new must be a non-negative int, got {n_new!r}")
    if compile_options is not None and not isinstance(compile_options, dict):
        raise TypeError(
            f"compile_options must be a dict or None, "
            f"got {type(compile_options).__name__}"
        )
    n_positions = model.pos.num_embeddings
    if prompt.shape[1] + n_new > n_positions:
        raise ValueError(
            f"n_new must keep N0 + n_new within the {n_positions} positions of "
            f"the model's position table, got n_new={n_new} after a prompt of "
            f"N0={prompt.shape[1]}"
        )


# --8<-- [end:face]
