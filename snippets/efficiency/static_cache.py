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
        _check_kv_sizes(1, dtype, n_layers=n_layers, batch=batch, n_kv_heads=n_kv_heads,
                        d_head=d_head, max_len=max_len)
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
        _check_given(isinstance(layer, int) and 0 <= layer < self.n_layers, "layer",
                     f"be an int in [0, {self.n_layers})", repr(layer))
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


def _describe(t: object) -> str:
    if isinstance(t, torch.Tensor):
        return f"{t.dtype} {tuple(t.shape)} on {t.device}"
    return type(t).__name__


def _check_given(ok: object, name: str, want: str, got: object, error=ValueError):
    """Raise error("<name> must <want>, got <got>") unless ok."""
    if not ok:
        raise error(f"{name} must {want}, got {got}")


def _check_kv_sizes(minimum: int, dtype: object = torch.float32, **values: object):
    """Refuse a non-dtype dtype, or sizes that are not ints >= minimum."""
    _check_given(isinstance(dtype, torch.dtype), "dtype", "be a torch.dtype", dtype)
    for name, value in values.items():
        ok = isinstance(value, int) and value >= minimum
        _check_given(ok, name, f"be an int >= {minimum}", repr(value))


def _check_prompt_ids(name: str, ids: object, vocab_size: int, like: torch.Tensor):
    """Refuse anything but (B, N) integer ids in [0, vocab_size) on like's device."""
    ok = isinstance(ids, torch.Tensor) and ids.dtype in (torch.int64, torch.int32)
    ok = ok and ids.dim() == 2 and ids.device == like.device
    _check_given(ok, name, f"be (B, N) integer ids on {like.device}", _describe(ids))
    bad = ids[(ids < 0) | (ids >= vocab_size)].unique().tolist()  # one sync
    _check_given(not bad, name, f"lie in [0, vocab_size={vocab_size})", bad[:8])


def _check_new_kv(k: object, v: object, buffer: torch.Tensor) -> None:
    """Refuse k and v that are not (B, H_kv, N, d) tensors fitting the buffer."""
    (b, h, _, d), like = buffer.shape, (buffer.dtype, buffer.device)
    for name, t in (("k", k), ("v", v)):
        ok = isinstance(t, torch.Tensor) and t.dim() == 4 and t.shape[2] == k.shape[2]
        ok = ok and (*t.shape[:2], t.shape[3], t.dtype, t.device) == (b, h, d, *like)
        want = f"fit the cache: ({b}, {h}, N, {d}) {buffer.dtype} on {buffer.device}"
        _check_given(ok, name, want, _describe(t))


def _check_step_positions(p: object, n: int | None = None, device=None) -> None:
    """Refuse positions p that are not an int64 (N,) tensor beside the tokens."""
    ok = isinstance(p, torch.Tensor) and p.dtype == torch.int64 and p.dim() == 1
    ok = ok and len(p) == (n or len(p)) and p.device == (device or p.device)
    _check_given(ok, "positions", f"be int64 ({n or 'N'},) on {device}", _describe(p))


def _check_static_call(model: nn.Module, cache, tokens, positions) -> None:
    """Refuse (B, N) tokens and (N,) positions that do not fit the model.

    The cache checks its own fit (layers, batch, heads) in ``write``."""
    _check_prompt_ids("tokens", tokens, model.embed.num_embeddings, model.head.weight)
    _check_step_positions(positions, tokens.shape[1], tokens.device)


def _check_generate_static(model, prompt, n_new, compile_options) -> None:
    _check_prompt_ids("prompt", prompt, model.embed.num_embeddings, model.head.weight)
    _check_kv_sizes(0, n_new=n_new)
    end, n_pos = prompt.shape[1] + n_new, model.pos.num_embeddings
    _check_given(end <= n_pos, "n_new", f"keep N0 + n_new <= {n_pos}", end)


# --8<-- [end:face]
