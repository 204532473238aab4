"""Prefix caching: reuse the K/V of a prompt prefix another request already computed.

Two indexes are common. vLLM splits the tokens into fixed-size blocks and
names each full block by a hash of its tokens *and the previous block's
hash*, so a hash identifies the whole prefix up to that block (Kwon et al.,
2023, arXiv:2309.06180, and vLLM's automatic prefix caching). SGLang keeps a
radix tree of token sequences and matches the longest cached prefix
(RadixAttention: Zheng et al., 2023, arXiv:2312.07104).

Page: docs/efficiency/kv-economy.md
Tested against: recomputing the whole prompt (tests/test_kv_economy.py).

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import hashlib

import torch

__all__ = ["block_hashes", "RadixCache", "attend_with_prefix"]


# --8<-- [start:hashes]
def block_hashes(tokens: list[int], block_size: int) -> list[str]:
    """Chained hashes of the full blocks: h_i = H(h_{i-1}, tokens of block i)."""
    _check_blocks(block_size)
    hashes, parent = [], ""
    for start in range(0, len(tokens) - block_size + 1, block_size):
        block = tokens[start:start + block_size]
        parent = hashlib.sha256(f"{parent}|{block}".encode()).hexdigest()
        hashes.append(parent)  # names the whole prefix, not only this block
    return hashes
# --8<-- [end:hashes]


# --8<-- [start:radix]
class RadixCache:
    """A radix tree of cached token sequences: the longest cached prefix, fast."""

    def __init__(self) -> None:
        self.root: dict = {}  # edge label (tuple of tokens) -> child node

    def insert(self, tokens: list[int]) -> None:
        """Store ``tokens``, splitting an edge where it diverges from what is cached."""
        node, rest = self.root, tuple(tokens)
        while rest:
            edge = next((e for e in node if e[0] == rest[0]), None)
            if edge is None:
                node[rest] = {}
                return
            common = _common_length(edge, rest)
            if common < len(edge):  # split: edge[:common] -> {edge[common:]: old child}
                node[edge[:common]] = {edge[common:]: node.pop(edge)}
                edge = edge[:common]
            node, rest = node[edge], rest[common:]

    # --8<-- [start:radix_match]
    def match(self, tokens: list[int]) -> int:
        """How many leading tokens of ``tokens`` are cached."""
        node, rest, matched = self.root, tuple(tokens), 0
        while rest:
            edge = next((e for e in node if e[0] == rest[0]), None)
            if edge is None:
                break
            common = _common_length(edge, rest)
            matched += common
            if common < len(edge):
                break
            node, rest = node[edge], rest[common:]
        return matched
    # --8<-- [end:radix_match]


def _common_length(a: tuple, b: tuple) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n
# --8<-- [end:radix]


# --8<-- [start:reuse]
def attend_with_prefix(
    q: torch.Tensor,
    k_new: torch.Tensor,
    v_new: torch.Tensor,
    k_prefix: torch.Tensor,
    v_prefix: torch.Tensor,
) -> torch.Tensor:
    """The suffix's queries over cached prefix K/V plus their own: (B, H, N, d)."""
    _check_reuse(q, k_new, v_new, k_prefix, v_prefix)
    k = torch.cat([k_prefix, k_new], dim=-2)  # (B, H, P + N, d)
    v = torch.cat([v_prefix, v_new], dim=-2)  # (B, H, P + N, d_v)
    p, n = k_prefix.shape[-2], q.shape[-2]
    i = torch.arange(n, device=q.device).unsqueeze(-1)  # (N, 1)
    allowed = torch.arange(p + n, device=q.device) <= i + p  # (N, P + N), lower right
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
# --8<-- [end:reuse]


# --8<-- [start:validate]
def _describe(t: object) -> str:
    if isinstance(t, torch.Tensor):
        return f"{t.dtype} {tuple(t.shape)} on {t.device}"
    return type(t).__name__


def _check_blocks(block_size: int) -> None:
    if not (isinstance(block_size, int) and block_size >= 1):
        raise ValueError(f"block_size must be an int >= 1, got {block_size!r}")


def _check_reuse(q, k_new, v_new, k_prefix, v_prefix) -> None:
    sizes = {}  # B, H; N new rows, P prefix rows; d of q and k, e of v
    dims = ("BHNd", "BHNd", "BHNe", "BHPd", "BHPe")  # q, k_new, v_new, k_/v_prefix
    for (name, t), letters in zip(dict(locals()).items(), dims):
        ok = isinstance(t, torch.Tensor) and t.dim() == 4
        ok = ok and (t.dtype, t.device) == (q.dtype, q.device) and all(
            sizes.setdefault(c, n) == n for c, n in zip(letters, t.shape))
        if not ok:
            raise ValueError(f"{name} must be ({', '.join(letters)}) like q, sizes "
                             f"{sizes}, got {_describe(t)}")


# --8<-- [end:validate]
