"""Tree speculative decoding: a tree of drafted tokens, verified in one target pass.

Papers: Miao et al. (2023), "SpecInfer: Accelerating Large Language Model
Serving with Tree-based Speculative Inference and Verification",
arXiv:2305.09781 (a token tree verified in one pass under a tree attention
mask); Cai et al. (2024), "Medusa: Simple LLM Inference Acceleration
Framework with Multiple Decoding Heads", arXiv:2401.10774 (candidate trees
from extra decoding heads, the same tree mask and tree positions).
Page: docs/efficiency/serving.md
Tested against: an explicit ancestor loop for the mask, the causal mask for a
chain, step-by-step greedy decoding, the target run on each node's own path
alone, and a fresh prefill of the accepted tokens (tests/test_tree_speculation.py).

A draft tree is a parent array: node i's parent is ``parents[i] < i``, or -1
when node i follows the last committed token directly. Parents come before
their children, so one pass in index order sees every ancestor first.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = [
    "tree_attention_mask",
    "tree_position_ids",
    "tree_verify",
    "accepted_kv",
]


# --8<-- [start:tree_mask]
def tree_mask(parents: torch.Tensor, n_prefix: int) -> torch.Tensor:
    """Causal over the prefix; node i sees the prefix, its ancestors and itself."""
    n, dev = parents.shape[0], parents.device
    seen = torch.eye(n, dtype=torch.bool, device=dev)  # (n, n): each node sees itself
    for i, p in enumerate(parents.tolist()):  # a parent's row is done before its child
        if p >= 0:
            seen[i] |= seen[p]  # the parent's ancestors are the child's ancestors
    L = n_prefix + n
    mask = torch.ones(L, L, dtype=torch.bool, device=dev).tril()  # (L, L)
    mask[n_prefix:, n_prefix:] = seen  # node rows: the whole prefix, then its path
    return mask
# --8<-- [end:tree_mask]


# --8<-- [start:tree_positions]
def tree_positions(mask: torch.Tensor) -> torch.Tensor:
    """A row's position is how many tokens it sees before itself: N0 + depth."""
    return mask.sum(-1) - 1  # (L, L) -> (L,)
# --8<-- [end:tree_positions]


# --8<-- [start:tree_walk]
def tree_walk(choice: torch.Tensor, tokens: torch.Tensor, parents: torch.Tensor):
    """From the root, follow each child whose token is the target's pick there."""
    # choice: (n + 1,) the target's argmax after the prefix (0) and after node i (1 + i)
    path, node = [], -1
    while True:
        hit = ((parents == node) & (tokens == choice[node + 1])).nonzero()  # (h, 1)
        if len(hit) == 0:  # no child agrees: the target's own pick ends the round
            return path, choice[node + 1]
        node = int(hit[0])
        path.append(node)
# --8<-- [end:tree_walk]


# --8<-- [start:keep_branch]
def keep_branch(kv: torch.Tensor, n_prefix: int, accepted: torch.Tensor):
    """Keep the prefix rows and the accepted nodes' rows; drop every other branch."""
    prefix = torch.arange(n_prefix, device=kv.device)  # (N0,)
    keep = torch.cat([prefix, n_prefix + accepted.to(kv.device)])  # (N0 + a,)
    return kv.index_select(-2, keep)  # (..., N0 + n, d) -> (..., N0 + a, d)
# --8<-- [end:keep_branch]


# --8<-- [start:face]
def tree_attention_mask(parents: torch.Tensor, n_prefix: int) -> torch.Tensor:
    """The attention mask of a committed prefix followed by a draft tree.

    Args:
        parents: ``(n,)`` integer parent array, ``parents[i]`` in ``[-1, i)``;
            -1 marks a child of the last committed token.
        n_prefix: N0, committed tokens before the tree.

    Returns:
        ``(N0 + n, N0 + n)`` boolean, True = may attend: causal over the
        prefix; tree node i sees the whole prefix, its ancestors and itself,
        never a sibling or a cousin.
    """
    _check_parents(parents, n_prefix)
    return tree_mask(parents, n_prefix)


def tree_position_ids(parents: torch.Tensor, n_prefix: int) -> torch.Tensor:
    """Position ids of a prefix followed by a draft tree.

    Args:
        parents: ``(n,)`` integer parent array, as for ``tree_attention_mask``.
        n_prefix: N0.

    Returns:
        ``(N0 + n,)`` int64: ``0 .. N0 - 1`` for the prefix, then
        ``N0 + depth(i)`` for node i (a child of the last committed token has
        depth 0), the position node i would have on its own path.
    """
    _check_parents(parents, n_prefix)
    return tree_positions(tree_mask(parents, n_prefix))


@torch.no_grad()
def tree_verify(
    target: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    prefix: torch.Tensor,
    tree_tokens: torch.Tensor,
    parents: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy verification of a draft tree in one target pass (SpecInfer, Medusa).

    The target reads the prefix and every tree node at once, under the tree
    mask and the tree positions, so the logits at node i are those of node
    i's own path. From the root, the walk accepts a child whose token is the
    target's argmax at its parent, and stops where no child agrees; the
    target's argmax there is appended. The result is exactly what plain
    greedy decoding with the target would emit next.

    Args:
        target: a model mapping ``(tokens (1, L), positions (L,), mask (L, L))``
            to logits ``(1, L, V)``; mask is boolean, True = may attend.
        prefix: ``(1, N0)`` committed token ids, N0 >= 1.
        tree_tokens: ``(n,)`` drafted token ids, one per tree node.
        parents: ``(n,)`` parent array, ``parents[i]`` in ``[-1, i)``.

    Returns:
        ``(new, accepted)``: ``(1, a + 1)`` ids (the a accepted tokens, then
        the target's own next token) and the ``(a,)`` accepted node indices,
        root first, for ``accepted_kv``.
    """
    _check_tree_verify(target, prefix, tree_tokens, parents)
    n0 = prefix.shape[1]
    mask = tree_mask(parents, n0)  # (N0 + n, N0 + n)
    tokens = torch.cat([prefix, tree_tokens.to(prefix)[None]], dim=1)  # (1, N0 + n)
    logits = target(tokens, tree_positions(mask), mask)  # one pass: (1, N0 + n, V)
    choice = logits[0, n0 - 1 :].argmax(-1).to(tokens.device)  # (n + 1,)
    path, last = tree_walk(choice, tokens[0, n0:], parents.to(tokens.device))
    accepted = torch.tensor(path, dtype=torch.long, device=tokens.device)  # (a,)
    return torch.cat([tokens[0, n0 + accepted], last[None]])[None], accepted


def accepted_kv(k: torch.Tensor, v: torch.Tensor, n_prefix: int,
                accepted: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The cache after verification: the prefix and the accepted branch only.

    The keys and values the tree pass computed for the accepted nodes equal
    a fresh prefill of the prefix plus the accepted tokens (each node saw
    exactly its path, at its path position), so the cache keeps them and
    drops the rest of the tree.

    Args:
        k, v: ``(B, H, N0 + n, d)`` keys and values of the tree pass.
        n_prefix: N0.
        accepted: ``(a,)`` node indices, as ``tree_verify`` returns them.

    Returns:
        ``(k, v)``, each ``(B, H, N0 + a, d)``.
    """
    _check_accepted_kv(k, v, n_prefix, accepted)
    return keep_branch(k, n_prefix, accepted), keep_branch(v, n_prefix, accepted)


def _describe(t: object) -> str:
    if isinstance(t, torch.Tensor):
        return f"{t.dtype} {tuple(t.shape)} on {t.device}"
    return type(t).__name__


def _check_given(ok: object, name: str, want: str, got: object, error=ValueError):
    """Raise error("<name> must <want>, got <got>") unless ok."""
    if not ok:
        raise error(f"{name} must {want}, got {got}")


_IDS = (torch.int64, torch.int32)


def _check_parents(parents: object, n_prefix: object) -> None:
    """Refuse a parent array that is not (n,) ints with parents[i] in [-1, i)."""
    ok = isinstance(parents, torch.Tensor) and parents.dtype in _IDS
    want = "be an int64 or int32 tensor"
    _check_given(ok, "parents", want, _describe(parents), TypeError)
    _check_given(parents.dim() == 1, "parents", "be (n,)", _describe(parents))
    bad = [(i, p) for i, p in enumerate(parents.tolist()) if not -1 <= p < i]
    _check_given(not bad, "parents", "hold parents[i] in [-1, i)", f"(i, p) {bad[:3]}")
    ok = isinstance(n_prefix, int) and not isinstance(n_prefix, bool) and n_prefix >= 0
    _check_given(ok, "n_prefix", "be an int >= 0", repr(n_prefix))


def _check_tree_verify(target: object, prefix: object, tree_tokens: object,
                       parents: object) -> None:
    """Refuse anything but a model, a (1, N0) prefix and an (n,) tree of ids."""
    _check_given(callable(target), "target", "be a model", type(target).__name__,
                 TypeError)
    ok = isinstance(prefix, torch.Tensor) and prefix.dtype in _IDS and prefix.dim() == 2
    ok = ok and len(prefix) == 1 and prefix.shape[1] >= 1
    _check_given(ok, "prefix", "be (1, N0) integer ids, N0 >= 1", _describe(prefix))
    _check_parents(parents, 0)
    ok = isinstance(tree_tokens, torch.Tensor) and tree_tokens.dtype in _IDS
    ok = ok and tree_tokens.shape == parents.shape
    want = f"be integer ids shaped like parents {tuple(parents.shape)}"
    _check_given(ok, "tree_tokens", want, _describe(tree_tokens))


def _check_accepted_kv(k: object, v: object, n_prefix: object,
                       accepted: object) -> None:
    """Refuse k, v that differ or are not (B, H, L, d), and nodes outside the tree."""
    for name, t in (("k", k), ("v", v)):
        ok = isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() == 4
        ok = ok and (t.shape[:3], t.dtype, t.device) == (k.shape[:3], k.dtype, k.device)
        _check_given(ok, name, "be a floating (B, H, L, d) tensor like k", _describe(t))
    L = k.shape[2]
    ok = isinstance(n_prefix, int) and not isinstance(n_prefix, bool)
    _check_given(ok and 0 <= n_prefix <= L, "n_prefix", f"be an int in [0, {L}]",
                 repr(n_prefix))
    ok = isinstance(accepted, torch.Tensor) and accepted.dtype in _IDS
    ok = ok and accepted.dim() == 1 and bool(((0 <= accepted)
                                              & (accepted < L - n_prefix)).all())
    want = f"be (a,) integer node indices in [0, {L - n_prefix})"
    _check_given(ok, "accepted", want, _describe(accepted))


# --8<-- [end:face]
