"""Tree speculative decoding: a tree of drafted tokens, verified in one target pass.

Papers: Miao et al. (2023), "SpecInfer: Accelerating Large Language Model
Serving with Tree-based Speculative Inference and Verification",
arXiv:2305.09781 (a token tree verified in one pass under a tree attention
mask); Cai et al. (2024), "Medusa: Simple LLM Inference Acceleration
Framework with Multiple Decoding Heads", arXiv:2401.10774 (candidate trees
from extra decoding heads, the same tree mask and tree positions).
Sampled verification is SpecInfer's multi-step speculative sampling
(VerifyStochastic in its Algorithm 2); the drafter of the last part is
DeepSeek-AI (2024), "DeepSeek-V3 Technical Report", arXiv:2412.19437, section
2.2 (multi-token prediction modules, equations 21 to 23).
Page: docs/efficiency/serving.md
Tested against: an explicit ancestor loop for the mask, the causal mask for a
chain, step-by-step greedy decoding, the target run on each node's own path
alone, a fresh prefill of the accepted tokens, the single-chain rule
``verify_sampled`` of paged_kv_cache.py, the target's own distribution
computed exactly by enumerating every draft and every accept/reject branch,
and a loop of DeepSeek-V3's equation 21 (tests/test_tree_speculation.py).

A draft tree is a parent array: node i's parent is ``parents[i] < i``, or -1
when node i follows the last committed token directly. Parents come before
their children, so one pass in index order sees every ancestor first.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

__all__ = [
    "tree_attention_mask",
    "tree_position_ids",
    "tree_verify",
    "accepted_kv",
    "tree_verify_sampled",
    "tree_sampled_outcomes",
    "MTPModule",
    "mtp_draft",
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


# --8<-- [start:multistep]
def multistep_ratios(p: torch.Tensor, q: torch.Tensor, xs: torch.Tensor):
    """Try children in turn; a rejection leaves p the residual norm(max(0, p - q))."""
    # p: (V,) target after the parent; q: (k, V) each child's draft law; xs: (k,) ids
    ratios = []
    for q_j, x in zip(q, xs.tolist()):
        ratios.append((p[x] / q_j[x]).clamp(max=1))  # min(1, p(x_j) / q_j(x_j))
        residual = (p - q_j).clamp(min=0)  # what p has left that q_j did not cover
        p = residual / residual.sum().clamp(min=torch.finfo(p.dtype).tiny)
    return torch.stack(ratios), p  # (k,) acceptance of each child, (V,) final law
# --8<-- [end:multistep]


# --8<-- [start:tree_walk_sampled]
def tree_walk_sampled(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor,
                      parents: torch.Tensor, u: torch.Tensor):
    """From the root, take the first child whose draw passes; stop where none does."""
    # p: (n + 1, V) target after the prefix (row 0) and after node i (row 1 + i)
    # q: (n, V) the law node i was drawn from; u: (n,) one U[0, 1) draw per node
    path, node = [], -1
    while True:
        kids = (parents == node).nonzero().flatten()  # (k,) in index order
        if len(kids) == 0:  # a leaf was accepted: the next token comes from p there
            return path, p[node + 1]
        ratios, residual = multistep_ratios(p[node + 1], q[kids], tokens[kids])
        hit = (u[kids] < ratios).nonzero()  # child j passes with probability ratios[j]
        if len(hit) == 0:  # every child rejected: draw from what p has left
            return path, residual
        node = int(kids[hit[0]])
        path.append(node)
# --8<-- [end:tree_walk_sampled]


# --8<-- [start:tree_outcomes]
def tree_outcomes(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor,
                  parents: torch.Tensor):
    """The walk's law: P(it stops after node i), and the law of the token then drawn."""
    # p: (n + 1, V); q: (n, V); entry 0 is the root (the prefix), entry 1 + i node i
    reach = torch.zeros_like(p[:, 0])  # (n + 1,) P(the walk accepts node i)
    reach[0] = 1
    none, dist = torch.ones_like(reach), p.clone()  # a leaf stops once reached
    for node in range(-1, len(parents)):  # a parent's reach is final before its kids
        kids = (parents == node).nonzero().flatten()
        if len(kids):
            r, dist[node + 1] = multistep_ratios(p[node + 1], q[kids], tokens[kids])
            before = torch.cat([r.new_ones(1), (1 - r).cumprod(0)])  # all before j fail
            reach[kids + 1] = reach[node + 1] * before[:-1] * r
            none[node + 1] = before[-1]  # every child of this node rejected
    return reach * none, dist  # (n + 1,) summing to 1, (n + 1, V)
# --8<-- [end:tree_outcomes]


# --8<-- [start:mtp_combine]
def mtp_combine(h_prev: torch.Tensor, emb: torch.Tensor, w_h: torch.Tensor,
                w_e: torch.Tensor, proj: torch.Tensor, eps: float) -> torch.Tensor:
    """h'_i = M_k [RMSNorm(h^(k-1)_i); RMSNorm(Emb(t_(i+k)))], DeepSeek-V3 eq. 21."""
    # h_prev, emb: (B, T, D); w_h, w_e: (D,) norm weights; proj: M_k, (D, 2D)
    h = h_prev * torch.rsqrt(h_prev.pow(2).mean(-1, keepdim=True) + eps) * w_h
    e = emb * torch.rsqrt(emb.pow(2).mean(-1, keepdim=True) + eps) * w_e
    return torch.cat([h, e], dim=-1) @ proj.T  # (B, T, 2D) @ (2D, D) -> (B, T, D)
# --8<-- [end:mtp_combine]


# --8<-- [start:mtp_chain]
def mtp_chain(h0: torch.Tensor, tokens: torch.Tensor, modules, embed, head):
    """Depth k reads h^(k-1)_i and Emb(t_(i+k)); its last row guesses token L + k."""
    # h0: (1, L - 1, D) the target's last hidden states of t_1 .. t_(L-1)
    # tokens: (1, L) committed ids; embed and head are the target's own
    h, seq = h0, tokens
    for k, module in enumerate(modules, start=1):
        e = embed(seq[:, k : k + h.shape[1]])  # Emb(t_(i+k)), i = 1 .. L - 1
        h = module(h, e)  # TRM_k over the combined rows: (1, L - 1, D)
        guess = head(h[:, -1]).argmax(-1, keepdim=True)  # (1, 1): t_(L+k)
        seq = torch.cat([seq, guess.to(seq)], dim=1)
    return seq[:, tokens.shape[1] :]  # (1, D_mtp) the drafted chain
# --8<-- [end:mtp_chain]


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
def _tree_pass(target, prefix: torch.Tensor, tree_tokens: torch.Tensor,
               parents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's one pass over the prefix and every tree node, under the tree
    mask and positions: ``tokens (1, N0 + n)`` and ``logits (1, N0 + n, V)``."""
    mask = tree_mask(parents, prefix.shape[1])  # (N0 + n, N0 + n)
    tokens = torch.cat([prefix, tree_tokens.to(prefix)[None]], dim=1)  # (1, N0 + n)
    return tokens, target(tokens, tree_positions(mask), mask)


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
    _check_tree_verify(prefix, tree_tokens, parents)
    n0 = prefix.shape[1]
    tokens, logits = _tree_pass(target, prefix, tree_tokens, parents)
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


@torch.no_grad()
def tree_verify_sampled(
    target: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    prefix: torch.Tensor,
    tree_tokens: torch.Tensor,
    parents: torch.Tensor,
    q: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sampled verification of a draft tree in one target pass (SpecInfer's MSS).

    One pass under the tree mask gives the target's distribution p after the
    prefix and after every node. From the root, the children of the current
    node are tried in index order: child x_j, drawn from q_j, is accepted
    with probability min(1, p(x_j) / q_j(x_j)); a rejection replaces p by
    norm(max(0, p - q_j)) before the next child. The walk moves to the
    accepted child; where every child is rejected it draws the next token
    from the residual, and after an accepted leaf from p there. Every
    emitted token then follows the target's distribution exactly, provided
    each node was drawn independently from the q it is given with. On a
    chain this is ``verify_sampled`` of paged_kv_cache.py, draw for draw.

    Args:
        target: a model mapping ``(tokens (1, L), positions (L,), mask (L, L))``
            to logits ``(1, L, V)``; mask is boolean, True = may attend.
        prefix: ``(1, N0)`` committed token ids, N0 >= 1.
        tree_tokens: ``(n,)`` drafted token ids, one per tree node.
        parents: ``(n,)`` parent array, ``parents[i]`` in ``[-1, i)``.
        q: ``(n, V)`` probabilities: row i is the law node i was drawn from
            (the drafter after the prefix and node i's ancestors).
        generator: the random source of the n acceptance draws and the last
            token.

    Returns:
        ``(new, accepted)``: ``(1, a + 1)`` ids (the a accepted tokens, then
        one drawn by the target) and the ``(a,)`` accepted node indices.
    """
    _check_tree_verify(prefix, tree_tokens, parents)
    _check_eff_tensor("q", q, (len(parents), "V"))
    n0 = prefix.shape[1]
    tokens, logits = _tree_pass(target, prefix, tree_tokens, parents)
    p = torch.softmax(logits[0, n0 - 1 :].double(), dim=-1)  # (n + 1, V)
    dev = p.device
    u = torch.rand(len(parents), generator=generator, dtype=p.dtype, device=dev)
    path, dist = tree_walk_sampled(p, q.to(p), tokens[0, n0:].to(dev),
                                   parents.to(dev), u)
    last = torch.multinomial(dist, 1, generator=generator).to(tokens.device)  # (1,)
    accepted = torch.tensor(path, dtype=torch.long, device=tokens.device)  # (a,)
    return torch.cat([tokens[0, n0 + accepted], last])[None], accepted


def tree_sampled_outcomes(p: torch.Tensor, q: torch.Tensor, tree_tokens: torch.Tensor,
                          parents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every outcome of sampled tree verification, with its exact probability.

    The walk of ``tree_verify_sampled`` ends after accepting some node (or
    none) and then draws one token. This returns, without drawing anything,
    the probability that it stops at each place and the law of the token
    drawn there, so the distribution of what a round emits can be written
    down exactly: stopping after node i emits the tokens of node i's path,
    then a token from ``dist[1 + i]``.

    Args:
        p: ``(n + 1, V)`` target probabilities after the prefix (row 0) and
            after node i (row 1 + i).
        q: ``(n, V)`` the law node i was drawn from.
        tree_tokens: ``(n,)`` drafted ids in ``[0, V)``.
        parents: ``(n,)`` parent array, ``parents[i]`` in ``[-1, i)``.

    Returns:
        ``(stop, dist)``: ``(n + 1,)`` probabilities that sum to one (entry 0:
        nothing accepted) and ``(n + 1, V)`` laws of the last token.
    """
    _check_outcomes(p, q, tree_tokens, parents)
    return tree_outcomes(p, q.to(p), tree_tokens, parents.to(p.device))


class MTPModule(nn.Module):
    """One multi-token prediction module of DeepSeek-V3 (section 2.2).

    It joins the previous depth's hidden state of token i with the shared
    embedding of token i + k (equation 21: RMSNorm of each, concatenated,
    projected by ``proj``, the matrix M_k of shape ``(D, 2D)``) and runs its
    own transformer block over the joined rows (equation 22). The output
    head that turns its rows into probabilities (equation 23) is the main
    model's, passed to ``mtp_draft``.

    Args:
        d_model: D.
        block: TRM_k, a causal transformer block mapping ``(B, T, D)`` to
            ``(B, T, D)``.
        eps: the RMSNorm epsilon.

    Shape:
        forward(h_prev ``(B, T, D)``, emb ``(B, T, D)``) -> ``(B, T, D)``.
    """

    def __init__(self, d_model: int, block: nn.Module, eps: float = 1e-6) -> None:
        super().__init__()
        _check_given(isinstance(eps, (int, float)) and 0 < eps < float("inf"), "eps",
                     "be a number > 0", repr(eps))
        self.block, self.eps = block, eps
        self.h_norm = nn.Parameter(torch.ones(d_model))
        self.e_norm = nn.Parameter(torch.ones(d_model))
        scale = (2 * d_model) ** -0.5
        self.proj = nn.Parameter(torch.randn(d_model, 2 * d_model) * scale)  # M_k

    def forward(self, h_prev: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        self._check_forward(h_prev, emb)
        x = mtp_combine(h_prev, emb, self.h_norm, self.e_norm, self.proj, self.eps)
        return self.block(x)  # (B, T, D)

    def _check_forward(self, h_prev: object, emb: object) -> None:
        """Refuse inputs that are not floating (B, T, D) pairs on the module's dtype."""
        w = self.proj  # (D, 2D)
        _check_eff_tensor("h_prev", h_prev, ("B", "T", len(w)), w.device, w.dtype)
        _check_eff_tensor("emb", emb, tuple(h_prev.shape), w.device, w.dtype)


@torch.no_grad()
def mtp_draft(h0: torch.Tensor, tokens: torch.Tensor, modules: list[nn.Module],
              embed: Callable[[torch.Tensor], torch.Tensor],
              head: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """A draft chain from DeepSeek-V3's sequential multi-token prediction modules.

    Module k (depth k) reads, for every position i, the depth k - 1 hidden
    state of token i (the main model's for k = 1) and the embedding of token
    i + k, where tokens past the committed ones are the guesses of earlier
    depths: the causal chain is kept from depth to depth. The last row of
    depth k, through the shared output head, guesses token L + k. The
    target's hidden states of every committed token but the last are exactly
    what its previous verification pass computed, so drafting costs one
    block per depth. The chain goes to ``tree_verify`` with parents
    ``[-1, 0, 1, ...]``.

    Args:
        h0: ``(1, L - 1, D)`` the target's last hidden states of tokens
            1 .. L - 1, before its output head.
        tokens: ``(1, L)`` committed ids, L >= 2.
        modules: the MTP modules, depth 1 first.
        embed: the target's embedding, ids ``(1, T)`` -> ``(1, T, D)``.
        head: the target's output head, ``(1, D)`` -> logits ``(1, V)``.

    Returns:
        ``(1, len(modules))`` drafted ids, greedy at every depth.
    """
    _check_mtp_draft(h0, tokens)
    return mtp_chain(h0, tokens, modules, embed, head)


def _describe(t: object) -> str:
    if isinstance(t, torch.Tensor):
        return f"{t.dtype} {tuple(t.shape)} on {t.device}"
    return type(t).__name__


def _check_given(ok: object, name: str, want: str, got: object, error=ValueError):
    """Raise error("<name> must <want>, got <got>") unless ok."""
    if not ok:
        raise error(f"{name} must {want}, got {got}")


_IDS = (torch.int64, torch.int32)


def _check_eff_tensor(name, t, shape, device=None, dtype=None, ids=False) -> None:
    """Refuse t unless a floating (ids: integer) tensor of shape, an int per fixed
    size and a letter per free one, on device and of dtype where they are given."""
    kind = torch.is_tensor(t) and (t.dtype in _IDS if ids else t.is_floating_point())
    ok = kind and t.dim() == len(shape) and t.device == (device or t.device)
    ok = ok and t.dtype == (dtype or t.dtype) and all(
        s == n for s, n in zip(shape, t.shape) if isinstance(s, int))
    want = f"be {'integer' if ids else 'floating'} ({', '.join(map(str, shape))})"
    want += (f" {dtype}" if dtype else "") + (f" on {device}" if device else "")
    _check_given(ok, name, want, _describe(t), ValueError if kind else TypeError)


def _check_parents(parents: object, n_prefix: object) -> None:
    """Refuse a parent array that is not (n,) ints with parents[i] in [-1, i)."""
    _check_eff_tensor("parents", parents, ("n",), ids=True)
    bad = [(i, p) for i, p in enumerate(parents.tolist()) if not -1 <= p < i]
    _check_given(not bad, "parents", "hold parents[i] in [-1, i)", f"(i, p) {bad[:3]}")
    ok = isinstance(n_prefix, int) and n_prefix >= 0
    _check_given(ok, "n_prefix", "be an int >= 0", repr(n_prefix))


def _check_tree_verify(prefix: object, tree_tokens: object, parents: object) -> None:
    """Refuse a prefix that is not (1, N0 >= 1) ids, or an (n,) tree that is not."""
    _check_eff_tensor("prefix", prefix, (1, "N0"), ids=True)
    _check_given(prefix.shape[1] >= 1, "prefix", "hold N0 >= 1 ids", _describe(prefix))
    _check_parents(parents, 0)
    _check_eff_tensor("tree_tokens", tree_tokens, tuple(parents.shape), ids=True)


def _check_accepted_kv(k: object, v: object, n_prefix: object,
                       accepted: object) -> None:
    """Refuse k, v that differ or are not (B, H, L, d), and nodes outside the tree."""
    _check_eff_tensor("k", k, ("B", "H", "L", "d"))
    _check_eff_tensor("v", v, (*k.shape[:3], "d"), k.device, k.dtype)
    L = k.shape[2]
    ok = isinstance(n_prefix, int) and 0 <= n_prefix <= L
    _check_given(ok, "n_prefix", f"be an int in [0, {L}]", repr(n_prefix))
    _check_eff_tensor("accepted", accepted, ("a",), ids=True)
    ok = bool(((0 <= accepted) & (accepted < L - n_prefix)).all())
    _check_given(ok, "accepted", f"hold ids in [0, {L - n_prefix})", accepted.tolist())


def _check_outcomes(p: object, q: object, tree_tokens: object, parents: object) -> None:
    """Refuse p, q that are not (n + 1, V) and (n, V), and ids outside [0, V)."""
    _check_parents(parents, 0)
    _check_eff_tensor("p", p, (len(parents) + 1, "V"))
    _check_eff_tensor("q", q, (len(parents), p.shape[-1]), p.device)
    _check_eff_tensor("tree_tokens", tree_tokens, (len(parents),), p.device, ids=True)
    ok = bool(((tree_tokens >= 0) & (tree_tokens < p.shape[-1])).all())
    _check_given(ok, "tree_tokens", f"be in [0, {p.shape[-1]})", tree_tokens.tolist())


def _check_mtp_draft(h0: object, tokens: object) -> None:
    """Refuse tokens that are not (1, L >= 2) ids, or h0 that is not (1, L - 1, D)."""
    _check_eff_tensor("tokens", tokens, (1, "L"), ids=True)
    _check_given(tokens.shape[1] >= 2, "tokens", "hold L >= 2 ids", _describe(tokens))
    _check_eff_tensor("h0", h0, (1, tokens.shape[1] - 1, "D"))


# --8<-- [end:face]
