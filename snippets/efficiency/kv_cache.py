"""The KV cache: decode one token at a time without recomputing the past.

Papers: the cache is as old as autoregressive Transformer decoding (Vaswani et
al. (2017), "Attention Is All You Need", arXiv:1706.03762); its memory cost is
what multi-query attention (Shazeer (2019), "Fast Transformer Decoding: One
Write-Head is All You Need", arXiv:1911.02150) and grouped-query attention
(Ainslie et al. (2023), "GQA: Training Generalized Multi-Query Transformer
Models from Multi-Head Checkpoints", arXiv:2305.13245) cut down.
Page: docs/efficiency/kv-cache.md
Tested against: the same model run on the whole sequence with a causal mask
(tests/test_kv_cache.py): prefill plus token-by-token decoding must reproduce it.

During generation, the keys and values of past tokens never change (a causal
layer's token t depends only on tokens <= t). ``KVCache`` stores them, per layer,
in buffers allocated once; each new token only projects its own q, k, v and
attends to the stored keys. A chunk of N queries that follows M - N cached keys
uses the causal mask aligned to the lower right: query i sees keys j <= i + M - N.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "kv_cache_bytes",
    "KVCache",
    "CachedSelfAttention",
    "TinyDecoder",
    "generate",
]


# --8<-- [start:bytes]
def kv_cache_bytes(batch: int, seq_len: int, n_layers: int, n_kv_heads: int,
                   d_head: int, dtype: torch.dtype = torch.float16) -> int:
    """2 (k and v) x B x M x layers x H_kv x d x bytes per element."""
    _check_kv_sizes(0, dtype, batch=batch, seq_len=seq_len, n_layers=n_layers,
                    n_kv_heads=n_kv_heads, d_head=d_head)
    return 2 * batch * seq_len * n_layers * n_kv_heads * d_head * dtype.itemsize
# --8<-- [end:bytes]


# --8<-- [start:cache_append]
def cache_append(buf_k, buf_v, start: int, k, v):
    """Write N new keys and values after the start cached ones; return all M."""
    # buf_k, buf_v: (B, H_kv, max_len, d); k, v: (B, H_kv, N, d)
    end = start + k.shape[-2]
    buf_k[:, :, start:end] = k  # in place: the past is never copied
    buf_v[:, :, start:end] = v
    return buf_k[:, :, :end], buf_v[:, :, :end]  # (B, H_kv, M, d), M = start + N


# --8<-- [end:cache_append]


# --8<-- [start:lower_right]
def lower_right_causal(n: int, m: int, device) -> tuple[torch.Tensor | None, bool]:
    """(attn_mask, is_causal) for N new queries that follow M - N cached keys."""
    if n == m:  # no past: the ordinary triangle, which every backend knows
        return None, True
    if n == 1:  # one new token may see every cached key: no mask at all
        return None, False
    # A chunk after a cached prefix: SDPA's is_causal would align the triangle
    # to the upper left and hide most of the prefix. Query i sees j <= i + M - N.
    i = torch.arange(n, device=device).unsqueeze(-1)  # (N, 1)
    return torch.arange(m, device=device) <= i + (m - n), False  # (N, M)


# --8<-- [end:lower_right]


# --8<-- [start:forward]
class CachedSelfAttention(nn.Module):
    """Causal self-attention that can read and extend a ``KVCache``."""

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, layer: int = 0):
        """Attend causally over the cached tokens and the N new ones."""
        self._check_forward(x)
        B, N, D = x.shape
        q = self.q_proj(x).view(B, N, self.n_heads, -1).transpose(1, 2)  # (B, H, N, d)
        k = self.k_proj(x).view(B, N, self.n_kv_heads, -1).transpose(1, 2)
        v = self.v_proj(x).view(B, N, self.n_kv_heads, -1).transpose(1, 2)
        if cache is not None:  # (B, H_kv, N, d) -> (B, H_kv, M, d), M = cached + N
            k, v = cache.update(layer, k, v)
        mask, is_causal = lower_right_causal(N, k.shape[-2], x.device)
        gqa = self.n_kv_heads != self.n_heads
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                             is_causal=is_causal, enable_gqa=gqa)
        return self.out_proj(out.transpose(1, 2).reshape(B, N, D))  # (B, N, D)
    # --8<-- [end:forward]

    # --8<-- [start:attention_face]
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = None,
        *,
        bias: bool = True,
    ) -> None:
        """Causal self-attention with a cache.

        Args:
            d_model: D.
            n_heads: H, query heads; ``d_model`` must be divisible by it.
            n_kv_heads: H_kv, key/value heads (``n_heads`` when None); must
                divide ``n_heads``.
            bias: give the projections a bias.

        Shape:
            ``(B, N, D) -> (B, N, D)``; with a cache holding P tokens, the N
            new tokens attend to M = P + N keys.
        """
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        _check_kv_sizes(1, d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads)
        _check_given(d_model % n_heads == 0 == n_heads % n_kv_heads, "n_heads",
                     "divide d_model and n_kv_heads divide n_heads",
                     f"d_model={d_model}, n_heads={n_heads}, n_kv_heads={n_kv_heads}")
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.d_head = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def _check_forward(self, x: torch.Tensor) -> None:
        """Refuse x of the wrong width, dtype or device."""
        w = self.q_proj.weight
        cast = torch.is_autocast_enabled(w.device.type)  # x's dtype may then differ
        ok = isinstance(x, torch.Tensor) and x.dim() == 3 and x.shape[-1] == w.shape[1]
        ok = ok and x.device == w.device and (x.dtype == w.dtype or cast)
        want = f"be (B, N, {w.shape[1]}) {w.dtype} on {w.device}"
        _check_given(ok, "x", want, _describe(x))

    # --8<-- [end:attention_face]


# --8<-- [start:decoder]
class TinyDecoder(nn.Module):
    """A small decoder-only language model whose layers share one ``KVCache``."""

    def forward(
        self, tokens: torch.Tensor, cache: KVCache | None = None
    ) -> torch.Tensor:
        """Logits for every position of ``tokens``, continuing ``cache`` if given."""
        self._check_forward(tokens, cache)
        start = cache.seq_len() if cache is not None else 0  # positions go on after it
        pos = torch.arange(start, start + tokens.shape[1], device=tokens.device)  # (N,)
        x = self.embed(tokens) + self.pos(pos)  # (B, N) -> (B, N, D)
        blocks = zip(self.attn, self.norm1, self.norm2, self.mlp)
        for layer, (attn, norm1, norm2, mlp) in enumerate(blocks):
            x = x + attn(norm1(x), cache, layer)
            x = x + mlp(norm2(x))
        return self.head(self.norm(x))  # (B, N, D) -> (B, N, V)

    # --8<-- [end:decoder]

    # --8<-- [start:decoder_face]
    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        n_heads: int,
        n_layers: int,
        *,
        n_kv_heads: int | None = None,
        max_len: int = 512,
    ) -> None:
        """Token and learned position embeddings, ``n_layers`` pre-norm blocks.

        Each block is causal attention, then a GELU MLP; a final norm and an
        output projection follow.

        Args:
            vocab_size: V, the number of token ids.
            d_model: D.
            n_heads: H.
            n_layers: blocks.
            n_kv_heads: H_kv (``n_heads`` when None).
            max_len: the longest sequence the position table covers.

        Shape:
            tokens ``(B, N)`` (int64) -> logits ``(B, N, V)``.
        """
        super().__init__()
        _check_kv_sizes(1, vocab_size=vocab_size, d_model=d_model, n_layers=n_layers,
                        max_len=max_len)
        self.max_len = max_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.attn = nn.ModuleList(
            CachedSelfAttention(d_model, n_heads, n_kv_heads) for _ in range(n_layers)
        )
        self.norm1 = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(n_layers))
        self.norm2 = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(n_layers))
        self.mlp = nn.ModuleList(
            nn.Sequential(
                nn.Linear(d_model, 4 * d_model),
                nn.GELU(),
                nn.Linear(4 * d_model, d_model),
            )
            for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def new_cache(self, batch: int, max_len: int | None = None) -> KVCache:
        """An empty cache shaped for this model."""
        a, w = self.attn[0], self.head.weight
        return KVCache(
            len(self.attn),
            batch,
            a.n_kv_heads,
            a.d_head,
            max_len or self.max_len,
            dtype=w.dtype,
            device=w.device,
        )

    def _check_forward(self, tokens: torch.Tensor, cache: KVCache | None) -> None:
        """Refuse ids out of range and positions beyond the table."""
        _check_prompt_ids("tokens", tokens, self.embed.num_embeddings, self.head.weight)
        end = tokens.shape[1] + (cache.seq_len() if cache is not None else 0)
        _check_given(end <= self.max_len, "tokens", f"end by {self.max_len}", end)

    # --8<-- [end:decoder_face]


# --8<-- [start:generate]
def decode_greedy(model: TinyDecoder, prompt: torch.Tensor, n_new: int, cache: KVCache):
    """Prefill the cache with the prompt, then feed back one argmax token per step."""
    tokens, logits = prompt, model(prompt, cache)  # prefill: (B, N0) -> (B, N0, V)
    for step in range(n_new):
        next_token = logits[:, -1:].argmax(-1)  # (B, 1)
        tokens = torch.cat([tokens, next_token], dim=1)
        if step + 1 < n_new:
            logits = model(next_token, cache)  # one token: (B, 1) -> (B, 1, V)
    return tokens


# --8<-- [end:generate]


# --8<-- [start:face]
class KVCache:
    """Preallocated key and value buffers for every layer of a decoder.

    Args:
        n_layers: how many attention layers write to the cache.
        batch: B.
        n_kv_heads: H_kv, key/value heads per layer.
        d_head: d.
        max_len: the most tokens a sequence may reach (prompt plus generated).
        dtype, device: of the buffers.

    Shape:
        each layer holds keys and values of shape ``(B, H_kv, max_len, d)``, of
        which the first ``seq_len(layer)`` positions are filled.
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
        _check_kv_sizes(1, dtype, n_layers=n_layers, batch=batch, n_kv_heads=n_kv_heads,
                        d_head=d_head, max_len=max_len)
        shape = (batch, n_kv_heads, max_len, d_head)
        self.k = [
            torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)
        ]
        self.v = [
            torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)
        ]
        self.lengths = [0] * n_layers
        self.max_len = max_len

    def seq_len(self, layer: int = 0) -> int:
        """Tokens already stored for ``layer``."""
        return self.lengths[layer]

    @property
    def nbytes(self) -> int:
        """Bytes allocated by the buffers (all of ``max_len``, filled or not)."""
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    def update(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the new keys and values of ``layer``; return all stored so far.

        Args:
            layer: index of the attention layer.
            k: new keys, ``(B, H_kv, N, d)``.
            v: new values, ``(B, H_kv, N, d)``.

        Returns:
            ``(k_all, v_all)``, views of shape ``(B, H_kv, M, d)`` with
            M = previous length + N.
        """
        _check_given(isinstance(layer, int) and 0 <= layer < len(self.k), "layer",
                     f"be an int in [0, {len(self.k)})", repr(layer))
        _check_new_kv(k, v, self.k[layer])
        start, n = self.lengths[layer], k.shape[-2]
        _check_given(start + n <= self.max_len, "k", f"end by max_len={self.max_len}",
                     f"{n} tokens after {start}")
        self.lengths[layer] = start + n
        return cache_append(self.k[layer], self.v[layer], start, k, v)


@torch.no_grad()
def generate(
    model: TinyDecoder, prompt: torch.Tensor, n_new: int, *, use_cache: bool = True
) -> torch.Tensor:
    """Greedy decoding: append the most likely next token ``n_new`` times.

    Args:
        model: the decoder.
        prompt: token ids, ``(B, N0)``.
        n_new: tokens to generate.
        use_cache: prefill a KV cache with the prompt, then feed one token per
            step; if False, run the whole sequence again at every step.

    Returns:
        ``(B, N0 + n_new)`` token ids.
    """
    _check_prompt_ids("prompt", prompt, model.embed.num_embeddings, model.head.weight)
    _check_kv_sizes(0, n_new=n_new)
    if use_cache:
        cache = model.new_cache(prompt.shape[0], prompt.shape[1] + n_new)
        return decode_greedy(model, prompt, n_new, cache)
    tokens = prompt
    for _ in range(n_new):  # the whole past again at every step: (B, N0 + t, V)
        tokens = torch.cat([tokens, model(tokens)[:, -1:].argmax(-1)], dim=1)
    return tokens


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


# --8<-- [end:face]
