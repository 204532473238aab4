"""Identities proven for tree speculative decoding on the serving page.

The target is ``PathModel``: a two-layer pre-norm decoder with learned position
embeddings that takes an explicit mask and explicit positions, exactly the
interface a tree pass needs, and keeps each layer's keys and values.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from identities import identity
from snippets.efficiency import tree_speculation as ts

PAGE = "efficiency/serving.md"


class PathModel(nn.Module):
    """A tiny decoder: tokens, positions, boolean mask -> logits; keeps (k, v) per layer."""

    def __init__(self, vocab: int = 11, d: int = 16, heads: int = 2, layers: int = 2,
                 max_len: int = 64) -> None:
        super().__init__()
        self.heads = heads
        self.embed, self.pos = nn.Embedding(vocab, d), nn.Embedding(max_len, d)
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(layers))
        self.out = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.norm1 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.norm2 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.mlp = nn.ModuleList(nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
                                 for _ in range(layers))
        self.head = nn.Linear(d, vocab)
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] = []

    def forward(self, tokens, positions, mask):
        B, L = tokens.shape
        x = self.embed(tokens) + self.pos(positions)  # (B, L, D)
        self.kv = []
        for qkv, out, n1, n2, mlp in zip(self.qkv, self.out, self.norm1, self.norm2, self.mlp):
            q, k, v = (t.view(B, L, self.heads, -1).transpose(1, 2) for t in qkv(n1(x)).chunk(3, -1))
            self.kv.append((k, v))
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, H, L, d)
            x = x + out(a.transpose(1, 2).reshape(B, L, -1))
            x = x + mlp(n2(x))
        return self.head(x)


def causal_run(model: PathModel, tokens: torch.Tensor) -> torch.Tensor:
    """The model on ``tokens`` (1, L) as an ordinary causal sequence."""
    L = tokens.shape[1]
    return model(tokens, torch.arange(L), torch.ones(L, L, dtype=torch.bool).tril())


def greedy(model: PathModel, prefix: torch.Tensor, n: int) -> torch.Tensor:
    """Step-by-step greedy decoding, recomputing the whole sequence each step: (1, n)."""
    tokens = prefix
    for _ in range(n):
        nxt = causal_run(model, tokens)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
    return tokens[:, prefix.shape[1]:]


def random_tree(n: int, vocab: int, g: torch.Generator, plant: torch.Tensor | None = None):
    """A random parent array and tokens; ``plant`` writes tokens along one random path."""
    parents = torch.tensor([int(torch.randint(-1, i, (), generator=g)) for i in range(n)])
    tokens = torch.randint(0, vocab, (n,), generator=g)
    if plant is not None:
        path, node = [], int(torch.randint(0, n, (), generator=g))
        while node >= 0:
            path.append(node)
            node = int(parents[node])
        for depth, node in enumerate(reversed(path)):
            if depth < len(plant):
                tokens[node] = plant[depth]
    return parents, tokens


def path_of(parents: torch.Tensor, i: int) -> list[int]:
    """Node i's ancestors, root first, then i."""
    path = []
    while i >= 0:
        path.append(i)
        i = int(parents[i])
    return path[::-1]


def setup(seed: int = 0, n0: int = 5, n: int = 9):
    torch.manual_seed(seed)
    model = PathModel().double().eval()
    g = torch.Generator().manual_seed(seed)
    prefix = torch.randint(0, 11, (1, n0), generator=g)
    want = greedy(model, prefix, n + 1)
    parents, tokens = random_tree(n, 11, g, plant=want[0])
    return model, prefix, parents, tokens, want


@identity("tree-mask-equals-ancestor-loop",
          "the tree attention mask (prefix of 4, a random tree of 12 nodes) equals an explicit walk "
          "up each node's parents", page=PAGE, tol=0.0)
def tree_mask_equals_ancestor_loop():
    g = torch.Generator().manual_seed(1)
    parents, _ = random_tree(12, 5, g)
    n0, n = 4, 12
    want = torch.ones(n0 + n, n0 + n, dtype=torch.bool).tril()
    want[n0:, n0:] = False
    for i in range(n):
        for j in path_of(parents, i):
            want[n0 + i, n0 + j] = True
    return ts.tree_attention_mask(parents, n0).double(), want.double()


@identity("tree-chain-is-causal",
          "a chain tree (each node's parent the one before) gives the causal mask and positions "
          "0 .. N0 + n - 1", page=PAGE, tol=0.0)
def tree_chain_is_causal():
    parents, n0 = torch.arange(7) - 1, 3
    ours = torch.cat([ts.tree_attention_mask(parents, n0).double().flatten(),
                      ts.tree_position_ids(parents, n0).double()])
    want = torch.cat([torch.ones(10, 10).tril().double().flatten(), torch.arange(10.0).double()])
    return ours, want


@identity("tree-node-logits-equal-own-path",
          "in one tree pass (float64), every node's logits equal the target run on the prefix and "
          "that node's own path alone", page=PAGE, tol=1e-12)
def tree_node_logits_equal_own_path():
    model, prefix, parents, tokens, _ = setup(seed=2)
    n0 = prefix.shape[1]
    mask = ts.tree_attention_mask(parents, n0)
    full = torch.cat([prefix, tokens[None]], dim=1)
    logits = model(full, ts.tree_position_ids(parents, n0), mask)[0, n0:]  # (n, V)
    alone = [causal_run(model, torch.cat([prefix, tokens[path_of(parents, i)][None]], dim=1))[0, -1]
             for i in range(len(parents))]
    return logits, torch.stack(alone)


@identity("tree-verify-equals-greedy",
          "greedy tree verification (random 9-node trees, 5 seeds) emits exactly the next tokens "
          "of step-by-step greedy decoding", page=PAGE, tol=0.0)
def tree_verify_equals_greedy():
    ours, want = [], []
    for seed in range(5):
        model, prefix, parents, tokens, greedy_next = setup(seed=seed)
        new, _ = ts.tree_verify(model, prefix, tokens, parents)
        ours.append(new[0])
        want.append(greedy_next[0, : new.shape[1]])
    return torch.cat(ours).double(), torch.cat(want).double()


@identity("tree-accepted-kv-equals-prefill",
          "the keys and values the tree pass computed for the prefix and the accepted branch equal a "
          "fresh prefill of prefix + accepted tokens, in every layer (float64)", page=PAGE, tol=1e-12)
def tree_accepted_kv_equals_prefill():
    model, prefix, parents, tokens, _ = setup(seed=3)
    n0 = prefix.shape[1]
    new, accepted = ts.tree_verify(model, prefix, tokens, parents)
    tree_kv = model.kv
    causal_run(model, torch.cat([prefix, new[:, :-1]], dim=1))
    ours = [t for k, v in tree_kv for t in ts.accepted_kv(k, v, n0, accepted)]
    want = [t for k, v in model.kv for t in (k, v)]
    return torch.cat([t.flatten() for t in ours]), torch.cat([t.flatten() for t in want])
