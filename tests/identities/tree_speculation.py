"""Identities proven for tree speculative decoding on the serving page.

The target is ``PathModel``: a two-layer pre-norm decoder with learned position
embeddings that takes an explicit mask and explicit positions, exactly the
interface a tree pass needs, and keeps each layer's keys and values.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import nn

from identities import identity
from snippets.efficiency import tree_speculation as ts
from snippets.efficiency.paged_kv_cache import verify_sampled

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
        return self.head(self.hidden(tokens, positions, mask))

    def hidden(self, tokens, positions, mask):
        """The last hidden states, before the output head: (B, L, D)."""
        B, L = tokens.shape
        x = self.embed(tokens) + self.pos(positions)  # (B, L, D)
        self.kv = []
        for qkv, out, n1, n2, mlp in zip(self.qkv, self.out, self.norm1, self.norm2, self.mlp):
            q, k, v = (t.view(B, L, self.heads, -1).transpose(1, 2) for t in qkv(n1(x)).chunk(3, -1))
            self.kv.append((k, v))
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, H, L, d)
            x = x + out(a.transpose(1, 2).reshape(B, L, -1))
            x = x + mlp(n2(x))
        return x


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
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    prefix = torch.randint(0, 11, (1, n0), generator=g)
    want = greedy(model, prefix, n + 1)
    parents, tokens = random_tree(n, 11, g, plant=want[0])
    return model, prefix, parents, tokens, want


@identity("tree-mask-equals-ancestor-loop",
          "the tree attention mask (prefix of 4, a random tree of 12 nodes) equals an explicit walk "
          "up each node's parents", page=PAGE, tol=0.0)
def tree_mask_equals_ancestor_loop():
    g = torch.Generator(device=torch.get_default_device()).manual_seed(1)
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


# ---------------------------------------------------------------------------
# Sampled verification: exact laws by enumeration
# ---------------------------------------------------------------------------

def law(ctx: tuple[int, ...], vocab: int, seed: int, sharp: float = 1.5) -> torch.Tensor:
    """A fixed random next-token distribution for each context: (V,) float64."""
    code = 1
    for t in ctx:
        code = code * (vocab + 1) + t + 1  # one code per context, no collisions
    g = torch.Generator(device=torch.get_default_device()).manual_seed(code * 7919 + seed)
    return torch.softmax(sharp * torch.randn(vocab, generator=g, dtype=torch.float64), -1)


def draft_trees(parents: list[int], ctx: tuple[int, ...], vocab: int, q_seed: int):
    """Every draft of a tree shape with its probability: (P, tokens, q rows)."""
    par = torch.tensor(parents)
    for tokens in itertools.product(range(vocab), repeat=len(parents)):
        qs = []
        for i in range(len(parents)):  # node i follows the prefix and its parent's path
            before = path_of(par, parents[i]) if parents[i] >= 0 else []
            qs.append(law(ctx + tuple(tokens[j] for j in before), vocab, q_seed))
        prob = 1.0
        for i, t in enumerate(tokens):
            prob *= float(qs[i][t])  # node i drawn from q after its parent's path
        if prob > 0:
            yield prob, torch.tensor(tokens), torch.stack(qs)


def target_rows(parents: list[int], ctx: tuple[int, ...], tokens: torch.Tensor, vocab: int,
                p_seed: int) -> torch.Tensor:
    """p after the prefix, then after each node's path: (n + 1, V)."""
    rows = [law(ctx, vocab, p_seed)]
    for i in range(len(parents)):
        rows.append(law(ctx + tuple(int(tokens[j]) for j in path_of(torch.tensor(parents), i)),
                        vocab, p_seed))
    return torch.stack(rows)


def first_token_law(parents, ctx, vocab, p_seed, q_seed, outcomes=None) -> torch.Tensor:
    """The exact law of a round's first emitted token, over every draft and branch: (V,)."""
    outcomes = outcomes or ts.tree_sampled_outcomes
    out = torch.zeros(vocab, dtype=torch.float64)
    par = torch.tensor(parents)
    for prob, tokens, q in draft_trees(parents, ctx, vocab, q_seed):
        stop, dist = outcomes(target_rows(parents, ctx, tokens, vocab, p_seed), q, tokens, par)
        out += prob * stop[0] * dist[0]  # nothing accepted: the drawn token comes first
        for i in range(len(parents)):
            out[int(tokens[path_of(par, i)[0]])] += prob * stop[1 + i]
    return out


def first_two_law(parents, ctx, vocab, p_seed, q_seed) -> torch.Tensor:
    """The exact law of the first two emitted tokens, a second round included: (V, V)."""
    out = torch.zeros(vocab, vocab, dtype=torch.float64)
    par = torch.tensor(parents)
    second = {a: first_token_law(parents, ctx + (a,), vocab, p_seed, q_seed) for a in range(vocab)}
    for prob, tokens, q in draft_trees(parents, ctx, vocab, q_seed):
        stop, dist = ts.tree_sampled_outcomes(target_rows(parents, ctx, tokens, vocab, p_seed),
                                              q, tokens, par)
        for a in range(vocab):  # one token this round; the next round draws the second
            out[a] += prob * stop[0] * dist[0, a] * second[a]
        for i in range(len(parents)):
            path = path_of(par, i)
            a = int(tokens[path[0]])
            if len(path) >= 2:
                out[a, int(tokens[path[1]])] += prob * stop[1 + i]
            else:
                out[a] += prob * stop[1 + i] * dist[1 + i]
    return out


def target_two_law(ctx, vocab, p_seed) -> torch.Tensor:
    """p(a) p(b | a): (V, V)."""
    first = law(ctx, vocab, p_seed)
    return torch.stack([first[a] * law(ctx + (a,), vocab, p_seed) for a in range(vocab)])


TREE = [-1, -1, 0, 0, 2]  # two candidates, two after the first, one more after its first
CTX = (1, 0)


@identity("tree-sampled-first-token-is-target",
          "sampled tree verification (SpecInfer's multi-step rule, V = 3, a 5-node tree): the first "
          "emitted token, summed exactly over all 243 drafts and every accept/reject branch, has "
          "the target's distribution (float64)", page=PAGE, tol=1e-12)
def tree_sampled_first_token_is_target():
    return first_token_law(TREE, CTX, 3, 1, 2), law(CTX, 3, 1)


@identity("tree-sampled-first-two-tokens-are-target",
          "the first two emitted tokens (the second from the next round where a round emits one), "
          "enumerated exactly, have the target's joint distribution p(a) p(b | a) (V = 3, float64)",
          page=PAGE, tol=1e-12)
def tree_sampled_first_two_tokens_are_target():
    return first_two_law(TREE, CTX, 3, 1, 2), target_two_law(CTX, 3, 1)


def paper_ratios(p_row: torch.Tensor, q: torch.Tensor, kids: list[int], tokens) -> dict[int, float]:
    """SpecInfer's VerifyStochastic at one node, children in the order given."""
    out, p = {}, p_row.clone()
    for c in kids:
        x = int(tokens[c])
        out[c] = min(1.0, float(p[x] / q[c][x]))
        residual = torch.clamp(p - q[c], min=0)
        p = residual / residual.sum() if residual.sum() > 0 else residual
    return out


def walk_law(p, q, tokens, parents):
    """Run the sampled walk on every accept/reject pattern: {stop: (P, law)}."""
    n = len(parents)
    r = {}
    for node in range(-1, n):
        r.update(paper_ratios(p[node + 1], q, [c for c in range(n) if int(parents[c]) == node],
                              tokens))
    out = {}
    for passes in itertools.product((True, False), repeat=n):
        prob = 1.0
        for i, ok in enumerate(passes):
            prob *= r[i] if ok else 1 - r[i]
        if prob == 0:
            continue
        u = torch.tensor([r[i] / 2 if ok else (1 + r[i]) / 2 for i, ok in enumerate(passes)],
                         dtype=torch.float64)
        path, dist = ts.tree_walk_sampled(p, q, tokens, parents, u)
        stop = path[-1] if path else -1
        total, _ = out.get(stop, (0.0, dist))
        out[stop] = (total + prob, dist)
    return out


@identity("tree-sampled-walk-equals-outcomes",
          "the sampled walk, run on every accept/reject pattern of its uniform draws (thresholds from "
          "a loop of the paper's rule), stops at each node with the probability and draws from the "
          "law that tree_sampled_outcomes reports (three random 6-node trees, float64)",
          page=PAGE, tol=1e-12)
def tree_sampled_walk_equals_outcomes():
    ours, want = [], []
    for seed in range(3):
        g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
        parents, tokens = random_tree(6, 4, g)
        p = torch.softmax(2 * torch.randn(7, 4, generator=g, dtype=torch.float64), -1)
        q = torch.softmax(2 * torch.randn(6, 4, generator=g, dtype=torch.float64), -1)
        stop, dist = ts.tree_sampled_outcomes(p, q, tokens, parents)
        walked = walk_law(p, q, tokens, parents)
        for node in range(-1, 6):
            total, d = walked.get(node, (0.0, dist[node + 1]))
            ours += [torch.tensor([total], dtype=torch.float64), d]
            want += [stop[node + 1 : node + 2], dist[node + 1]]
    return torch.cat(ours), torch.cat(want)


@identity("tree-sampled-chain-is-verify-sampled",
          "on a chain (parents -1, 0, 1, ...) the sampled tree walk accepts as many tokens and returns "
          "the same last-token law as the single-chain rule verify_sampled, for the same uniform "
          "draws, bit for bit (60 random rounds, drafts identical, close and unrelated)",
          page=PAGE, tol=0.0)
def tree_sampled_chain_is_verify_sampled():
    ours, want = [], []
    for seed in range(60):
        g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
        k, V = 1 + seed % 5, 6
        p = torch.softmax(torch.randn(k + 1, V, generator=g, dtype=torch.float64), -1)
        kind = seed % 3  # the draft equals the target, is close to it, or is unrelated
        noise = torch.randn(k, V, generator=g, dtype=torch.float64)
        q = [p[:k], torch.softmax(p[:k].log() + 0.3 * noise, -1), torch.softmax(noise, -1)][kind]
        drafted = torch.multinomial(q, 1, generator=g).flatten()
        u = torch.rand(k, generator=g, dtype=torch.float64)
        path, dist = ts.tree_walk_sampled(p, q, drafted, torch.arange(k) - 1, u)
        n_ok, dist_ref = verify_sampled(p, q, drafted, u)
        ours += [torch.tensor([float(len(path))], dtype=torch.float64), dist]
        want += [torch.tensor([float(n_ok)], dtype=torch.float64), dist_ref]
    return torch.cat(ours), torch.cat(want)


# ---------------------------------------------------------------------------
# Multi-token prediction (DeepSeek-V3) as the drafter
# ---------------------------------------------------------------------------

class CausalBlock(nn.Module):
    """TRM_k for the tests: a pre-norm causal self-attention and MLP block."""

    def __init__(self, d: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = (t.view(B, T, self.heads, -1).transpose(1, 2) for t in self.qkv(self.n1(x)).chunk(3, -1))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, d)
        x = x + self.out(a.transpose(1, 2).reshape(B, T, -1))
        return x + self.mlp(self.n2(x))


def hidden_run(model: PathModel, tokens: torch.Tensor) -> torch.Tensor:
    """The target's last hidden states of ``tokens`` (1, L) as a causal sequence."""
    L = tokens.shape[1]
    return model.hidden(tokens, torch.arange(L), torch.ones(L, L, dtype=torch.bool).tril())


def mtp_setup(seed: int = 0, depth: int = 3):
    torch.manual_seed(seed)
    model = PathModel().double().eval()
    modules = nn.ModuleList(ts.MTPModule(16, CausalBlock()) for _ in range(depth)).double().eval()
    return model, modules


def mtp_generate(model, modules, prompt, n_new):
    """Rounds of MTP drafting and greedy tree verification of the chain: ((1, n_new), rounds)."""
    tokens, rounds = prompt, 0
    chain = torch.arange(len(modules)) - 1
    with torch.no_grad():
        while tokens.shape[1] < prompt.shape[1] + n_new:
            h0 = hidden_run(model, tokens[:, :-1])  # what the last verification pass computed
            draft = ts.mtp_draft(h0, tokens, list(modules), model.embed, model.head)
            new, _ = ts.tree_verify(model, tokens, draft[0], chain)
            tokens, rounds = torch.cat([tokens, new], dim=1), rounds + 1
    return tokens[:, prompt.shape[1] : prompt.shape[1] + n_new], rounds


def combine_loop(h_prev, emb, w_h, w_e, proj, eps):
    """Equation 21 one position at a time, RMSNorm and the product written out."""
    B, T, D = h_prev.shape
    out = torch.zeros(B, T, D, dtype=h_prev.dtype)
    for b in range(B):
        for i in range(T):
            joined = []
            for x, w in ((h_prev[b, i], w_h), (emb[b, i], w_e)):
                rms = (sum(float(v) ** 2 for v in x) / D + eps) ** 0.5
                joined += [float(x[j]) / rms * float(w[j]) for j in range(D)]
            for r in range(D):
                out[b, i, r] = sum(float(proj[r, c]) * joined[c] for c in range(2 * D))
    return out


@identity("mtp-combine-equals-equation",
          "the MTP combine step equals DeepSeek-V3's equation 21 written as a loop over positions "
          "(RMSNorm of each input, concatenation, the projection M_k; float64)", page=PAGE, tol=1e-12)
def mtp_combine_equals_equation():
    g = torch.Generator(device=torch.get_default_device()).manual_seed(0)
    h, e = (torch.randn(2, 5, 6, generator=g, dtype=torch.float64) for _ in range(2))
    w_h, w_e = (1 + 0.1 * torch.randn(6, generator=g, dtype=torch.float64) for _ in range(2))
    proj = torch.randn(6, 12, generator=g, dtype=torch.float64)
    return ts.mtp_combine(h, e, w_h, w_e, proj, 1e-6), combine_loop(h, e, w_h, w_e, proj, 1e-6)


@identity("mtp-draft-verify-equals-greedy",
          "three MTP modules drafting chains that greedy tree verification checks emit exactly the "
          "target's step-by-step greedy tokens (10 tokens, 2 seeds)", page=PAGE, tol=0.0)
def mtp_draft_verify_equals_greedy():
    ours, want = [], []
    for seed in range(2):
        model, modules = mtp_setup(seed)
        prompt = torch.randint(0, 11, (1, 4), generator=torch.Generator(device=torch.get_default_device()).manual_seed(seed))
        ours.append(mtp_generate(model, modules, prompt, 10)[0])
        want.append(greedy(model, prompt, 10))
    return torch.cat(ours, 1).double(), torch.cat(want, 1).double()
