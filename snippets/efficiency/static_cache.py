"""A static KV cache: fixed-shape decoding that torch.compile and CUDA graphs can capture.

Papers: the KV cache itself is as old as autoregressive Transformer decoding
(Vaswani et al. (2017), "Attention Is All You Need", arXiv:1706.03762); a
static cache only changes where its tensors live and which shapes the decode
step sees.
Page: docs/efficiency/kv-cache.md (section "Fast decoding on a GPU")
Tested against: the dynamic cache of snippets/efficiency/kv_cache.py, token for
token (tests/test_static_cache.py), and torch.compile with fullgraph=True.

The dynamic cache hands attention a key length M that grows by one per step.
On a GPU that costs twice: every step launches dozens of tiny kernels from
Python (the step is launch-bound), and a new M is a new shape, which makes
cuDNN's attention build a new plan and torch.compile recompile. Here every
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


def _check_float_dtype(dtype: object) -> None:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")


def _check_ids(
    name: str, ids: object, vocab_size: int | None = None, device: torch.device | None = None
) -> tuple[int, int]:
    """Raise unless ``ids`` is a (B, N) integer tensor of ids in [0, vocab_size); return (B, N)."""
    if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.int64, torch.int32):
        got = ids.dtype if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise TypeError(f"{name} must be an int64 or int32 tensor of token ids, got {got}")
    if ids.dim() != 2:
        raise ValueError(f"{name} must have shape (B, N), got {tuple(ids.shape)}")
    if device is not None and ids.device != device:
        raise ValueError(f"{name} must be on the model's device {device}, got {ids.device}")
    if vocab_size is not None and bool(((ids < 0) | (ids >= vocab_size)).any()):  # one sync
        raise ValueError(
            f"{name} must lie in [0, vocab_size={vocab_size}), "
            f"got ids from {int(ids.min())} to {int(ids.max())}"
        )
    return ids.shape[0], ids.shape[1]


def _check_layer(layer: object, n_layers: int) -> None:
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < n_layers:
        raise ValueError(f"layer must be an int in [0, {n_layers}), got {layer!r}")


def _check_new_kv(k: object, v: object, buffer: torch.Tensor) -> None:
    """Raise unless k and v are (B, H_kv, N, d) tensors that fit the cache's ``buffer``."""
    b, h, _, d = buffer.shape
    for name, t in (("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != buffer.dtype or t.device != buffer.device:
            raise TypeError(
                f"{name} must have the cache's dtype {buffer.dtype} on {buffer.device}, "
                f"got {t.dtype} on {t.device}"
            )
    if k.dim() != 4 or k.shape[:2] != (b, h) or k.shape[-1] != d or v.shape != k.shape:
        raise ValueError(
            f"k and v must have shape (B, H_kv, N, d) = ({b}, {h}, N, {d}), "
            f"got k {tuple(k.shape)} and v {tuple(v.shape)}"
        )


# The parts of a decoder that these functions read (kv_cache.py's TinyDecoder has them all).
_DECODER_PARTS = ("embed", "pos", "attn", "norm1", "norm2", "mlp", "norm", "head")


def _check_decoder(model: object) -> None:
    if not isinstance(model, nn.Module) or not all(hasattr(model, part) for part in _DECODER_PARTS):
        raise TypeError(
            f"model must be a decoder laid out like kv_cache.py's TinyDecoder (with "
            f"{', '.join(_DECODER_PARTS)}), got {type(model).__name__}"
        )


def _check_step_positions(positions: object, n: int | None = None, device: torch.device | None = None) -> None:
    """Raise unless ``positions`` is an int64 ``(N,)`` tensor (of length ``n``, on ``device``, when given)."""
    if not isinstance(positions, torch.Tensor) or positions.dtype != torch.int64:
        got = positions.dtype if isinstance(positions, torch.Tensor) else type(positions).__name__
        raise TypeError(f"positions must be an int64 tensor, got {got}")
    if positions.dim() != 1 or (n is not None and positions.shape[0] != n):
        want = "(N,)" if n is None else f"(N,) = ({n},), one per token"
        raise ValueError(f"positions must have shape {want}, got {tuple(positions.shape)}")
    if device is not None and positions.device != device:
        raise ValueError(f"positions must be on the device of the tokens {device}, got {positions.device}")


def _check_static_call(model: nn.Module, cache: object, tokens: object, positions: object) -> None:
    """Raise unless the decoder, its cache, the (B, N) tokens and their (N,) positions fit together."""
    _check_decoder(model)
    if not isinstance(cache, StaticKVCache):
        raise TypeError(f"cache must be a StaticKVCache, got {type(cache).__name__}")
    if cache.n_layers != len(model.attn):
        raise ValueError(f"cache must have one layer per attention layer of model ({len(model.attn)}), "
                         f"got {cache.n_layers}")
    b, n = _check_ids("tokens", tokens, None, model.head.weight.device)
    if b != cache.k_0.shape[0]:
        raise ValueError(f"tokens must have the cache's batch size {cache.k_0.shape[0]}, got shape {(b, n)}")
    _check_step_positions(positions, n, tokens.device)


def _check_generate_static(model: object, prompt: object, n_new: object, compile_options: object) -> None:
    _check_decoder(model)
    _check_ids("prompt", prompt, model.embed.num_embeddings, model.head.weight.device)  # one sync, before the loop
    if isinstance(n_new, bool) or not isinstance(n_new, int) or n_new < 0:
        raise ValueError(f"n_new must be a non-negative int, got {n_new!r}")
    if compile_options is not None and not isinstance(compile_options, dict):
        raise TypeError(f"compile_options must be a dict or None, got {type(compile_options).__name__}")
    n_positions = model.pos.num_embeddings
    if prompt.shape[1] + n_new > n_positions:
        raise ValueError(
            f"n_new must keep N0 + n_new within the {n_positions} positions of the model's position "
            f"table, got n_new={n_new} after a prompt of N0={prompt.shape[1]}"
        )


# --8<-- [start:cache]
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

    def __init__(self, n_layers: int, batch: int, n_kv_heads: int, d_head: int, max_len: int,
                 *, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> None:
        super().__init__()
        for name, value in (("n_layers", n_layers), ("batch", batch), ("n_kv_heads", n_kv_heads),
                            ("d_head", d_head), ("max_len", max_len)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        _check_float_dtype(dtype)
        self.n_layers, self.max_len = n_layers, max_len
        for layer in range(n_layers):
            for kind in ("k", "v"):
                self.register_buffer(f"{kind}_{layer}", torch.zeros(
                    batch, n_kv_heads, max_len, d_head, dtype=dtype, device=device))

    @classmethod
    def for_model(cls, model: nn.Module, batch: int, max_len: int) -> "StaticKVCache":
        """A cache shaped for ``model``'s layers, heads, dtype and device."""
        _check_decoder(model)
        a, w = model.attn[0], model.head.weight
        return cls(len(model.attn), batch, a.n_kv_heads, a.d_head, max_len, dtype=w.dtype, device=w.device)

    def write(self, layer: int, positions: torch.Tensor, k: torch.Tensor,
              v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``k, v`` ``(B, H_kv, N, d)`` at ``positions`` ``(N,)``; return the whole buffers."""
        _check_layer(layer, self.n_layers)
        buf_k, buf_v = getattr(self, f"k_{layer}"), getattr(self, f"v_{layer}")
        _check_new_kv(k, v, buf_k)
        _check_step_positions(positions, k.shape[2], buf_k.device)
        buf_k.index_copy_(2, positions, k)  # in place: same storage, same shape, every step
        buf_v.index_copy_(2, positions, v)
        return buf_k, buf_v  # (B, H_kv, max_len, d) each

    def mask(self, positions: torch.Tensor) -> torch.Tensor:
        """True = may attend: the query at position p sees keys 0..p, never the empty slots after."""
        _check_step_positions(positions)
        keys = torch.arange(self.max_len, device=positions.device)  # (max_len,)
        return keys <= positions.unsqueeze(-1)  # (N, 1) vs (max_len,) -> (N, max_len)
# --8<-- [end:cache]


def _attend_static(attn: nn.Module, x: torch.Tensor, cache: StaticKVCache, layer: int,
            positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    B, N, D = x.shape
    q = attn.q_proj(x).view(B, N, attn.n_heads, attn.d_head).transpose(1, 2)  # (B, N, D) -> (B, H, N, d)
    k = attn.k_proj(x).view(B, N, attn.n_kv_heads, attn.d_head).transpose(1, 2)  # (B, N, D) -> (B, H_kv, N, d)
    v = attn.v_proj(x).view(B, N, attn.n_kv_heads, attn.d_head).transpose(1, 2)  # (B, N, D) -> (B, H_kv, N, d)
    k, v = cache.write(layer, positions, k, v)  # -> (B, H_kv, max_len, d): a fixed M
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, enable_gqa=attn.n_kv_heads != attn.n_heads
    )  # (B, H, N, d) x (B, H_kv, max_len, d) -> (B, H, N, d)
    return attn.out_proj(out.transpose(1, 2).reshape(B, N, D))  # (B, H, N, d) -> (B, N, D)


# --8<-- [start:forward]
def static_forward(model: nn.Module, cache: StaticKVCache, tokens: torch.Tensor,
                   positions: torch.Tensor) -> torch.Tensor:
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
    x = model.embed(tokens) + model.pos(positions)  # (B, N) -> (B, N, D)
    mask = cache.mask(positions)  # (N, max_len), the same shape at every step
    for layer, (attn, norm1, norm2, mlp) in enumerate(zip(model.attn, model.norm1, model.norm2, model.mlp)):
        x = x + _attend_static(attn, norm1(x), cache, layer, positions, mask)
        x = x + mlp(norm2(x))
    return model.head(model.norm(x))  # (B, N, D) -> (B, N, V)
# --8<-- [end:forward]


# --8<-- [start:generate]
@torch.no_grad()
def generate_static(model: nn.Module, prompt: torch.Tensor, n_new: int, *,
                    compile_options: dict | None = None) -> torch.Tensor:
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
    B, N0 = prompt.shape
    cache = StaticKVCache.for_model(model, B, N0 + n_new)
    step = static_forward if compile_options is None else torch.compile(static_forward, **compile_options)
    logits = static_forward(model, cache, prompt, torch.arange(N0, device=prompt.device))  # prefill, eager
    position = torch.tensor([N0], device=prompt.device)  # (1,): advanced in place, never rebuilt
    tokens = prompt
    for i in range(n_new):
        next_token = logits[:, -1:].argmax(-1)  # (B, 1); read before the next replay overwrites logits
        tokens = torch.cat([tokens, next_token], dim=1)
        if i + 1 < n_new:
            logits = step(model, cache, next_token, position)  # (B, 1) -> (B, 1, V), one fixed shape
            position += 1
    return tokens
# --8<-- [end:generate]
