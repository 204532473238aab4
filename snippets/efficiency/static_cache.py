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
        self.n_layers, self.max_len = n_layers, max_len
        for layer in range(n_layers):
            for kind in ("k", "v"):
                self.register_buffer(f"{kind}_{layer}", torch.zeros(
                    batch, n_kv_heads, max_len, d_head, dtype=dtype, device=device))

    @classmethod
    def for_model(cls, model: nn.Module, batch: int, max_len: int) -> "StaticKVCache":
        """A cache shaped for ``model``'s layers, heads, dtype and device."""
        a, w = model.attn[0], model.head.weight
        return cls(len(model.attn), batch, a.n_kv_heads, a.d_head, max_len, dtype=w.dtype, device=w.device)

    def write(self, layer: int, positions: torch.Tensor, k: torch.Tensor,
              v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``k, v`` ``(B, H_kv, N, d)`` at ``positions`` ``(N,)``; return the whole buffers."""
        buf_k, buf_v = getattr(self, f"k_{layer}"), getattr(self, f"v_{layer}")
        buf_k.index_copy_(2, positions, k)  # in place: same storage, same shape, every step
        buf_v.index_copy_(2, positions, v)
        return buf_k, buf_v  # (B, H_kv, max_len, d) each

    def mask(self, positions: torch.Tensor) -> torch.Tensor:
        """True = may attend: the query at position p sees keys 0..p, never the empty slots after."""
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
    if not isinstance(prompt, torch.Tensor) or prompt.dim() != 2 or prompt.is_floating_point():
        got = f"{tuple(prompt.shape)} {prompt.dtype}" if isinstance(prompt, torch.Tensor) else type(prompt).__name__
        raise ValueError(f"prompt must be a (B, N0) tensor of integer ids, got {got}")
    if isinstance(n_new, bool) or not isinstance(n_new, int) or n_new < 0:
        raise ValueError(f"n_new must be a non-negative int, got {n_new!r}")
    if compile_options is not None and not isinstance(compile_options, dict):
        raise TypeError(f"compile_options must be a dict or None, got {type(compile_options).__name__}")
    B, N0 = prompt.shape
    if N0 + n_new > model.max_len:
        raise ValueError(f"positions run to {N0 + n_new}, beyond max_len={model.max_len} of the position table")
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
