"""Tree speculative decoding (snippets/efficiency/tree_speculation.py).

Oracles: an explicit walk up the parent array for the mask and the positions;
the causal mask for a chain; the target run on each node's path alone;
step-by-step greedy decoding; a fresh prefill of the accepted tokens.
"""

from __future__ import annotations

import pytest
import torch

from identities.tree_speculation import PathModel, causal_run, greedy, path_of, random_tree, setup
from snippets.efficiency import tree_speculation as ts


def ancestor_loop_mask(parents: torch.Tensor, n0: int) -> torch.Tensor:
    """The tree mask by definition: row i, column j, one rule at a time."""
    n = len(parents)
    mask = torch.zeros(n0 + n, n0 + n, dtype=torch.bool)
    for i in range(n0 + n):
        for j in range(n0 + n):
            if i < n0:
                mask[i, j] = j <= i  # the prefix is an ordinary causal sequence
            elif j < n0:
                mask[i, j] = True  # every node follows the whole prefix
            else:
                node, seen = i - n0, False
                while node >= 0:  # j is i itself or one of its ancestors
                    seen = seen or node == j - n0
                    node = int(parents[node])
                mask[i, j] = seen
    return mask


@pytest.mark.parametrize("seed", range(4))
def test_mask_and_positions_follow_the_ancestors(seed):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    n, n0 = 3 + 3 * seed, seed
    parents, _ = random_tree(n, 5, g)
    assert torch.equal(ts.tree_attention_mask(parents, n0), ancestor_loop_mask(parents, n0))
    depth = [len(path_of(parents, i)) - 1 for i in range(n)]
    want = torch.tensor(list(range(n0)) + [n0 + d for d in depth])
    assert torch.equal(ts.tree_position_ids(parents, n0), want)


def test_a_chain_is_the_causal_mask_and_a_star_is_one_position():
    chain = torch.arange(6) - 1
    assert torch.equal(ts.tree_attention_mask(chain, 4), torch.ones(10, 10, dtype=torch.bool).tril())
    assert torch.equal(ts.tree_position_ids(chain, 4), torch.arange(10))
    star = torch.full((5,), -1)  # five alternatives for the same next token
    mask = ts.tree_attention_mask(star, 3)
    assert torch.equal(mask[3:, 3:], torch.eye(5, dtype=torch.bool))  # siblings never meet
    assert torch.equal(ts.tree_position_ids(star, 3)[3:], torch.full((5,), 3))


def test_int32_parents_and_an_empty_tree():
    parents = torch.tensor([-1, 0, 0], dtype=torch.int32)
    assert torch.equal(ts.tree_attention_mask(parents, 2), ts.tree_attention_mask(parents.long(), 2))
    empty = torch.zeros(0, dtype=torch.long)
    assert torch.equal(ts.tree_attention_mask(empty, 3), torch.ones(3, 3, dtype=torch.bool).tril())


@pytest.mark.parametrize("seed", range(3))
def test_every_node_sees_only_its_own_path(seed):
    model, prefix, parents, tokens, _ = setup(seed=seed)
    n0 = prefix.shape[1]
    full = torch.cat([prefix, tokens[None]], dim=1)
    with torch.no_grad():
        logits = model(full, ts.tree_position_ids(parents, n0), ts.tree_attention_mask(parents, n0))
        for i in range(len(parents)):
            alone = causal_run(model, torch.cat([prefix, tokens[path_of(parents, i)][None]], dim=1))
            torch.testing.assert_close(logits[0, n0 + i], alone[0, -1], rtol=0, atol=1e-12)
        torch.testing.assert_close(logits[0, :n0], causal_run(model, prefix)[0], rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_one_round_emits_greedy_tokens(seed):
    model, prefix, parents, tokens, want = setup(seed=seed)
    new, accepted = ts.tree_verify(model, prefix, tokens, parents)
    assert len(accepted) >= 1  # the planted path starts at a child of the prefix
    assert torch.equal(new[0], want[0, : new.shape[1]])
    assert torch.equal(new[0, :-1], tokens[accepted])
    for a, b in zip(accepted[:-1].tolist(), accepted[1:].tolist()):
        assert int(parents[b]) == a  # the accepted nodes are one branch, root first
    assert int(parents[accepted[0]]) == -1


@pytest.mark.parametrize("seed", range(6))
def test_the_walk_goes_as_deep_as_the_tree_agrees_with_greedy(seed):
    model, prefix, parents, tokens, want = setup(seed=seed, n=12)
    for i in range(len(parents)):  # distinct siblings: the agreeing branch is unique
        while any(int(tokens[j]) == int(tokens[i]) for j in range(i) if parents[j] == parents[i]):
            tokens[i] = (tokens[i] + 1) % 11
    agree = [len(path_of(parents, i)) for i in range(len(parents))
             if torch.equal(tokens[path_of(parents, i)], want[0, : len(path_of(parents, i))])]
    new, accepted = ts.tree_verify(model, prefix, tokens, parents)
    assert len(accepted) == max(agree, default=0)
    assert torch.equal(new[0], want[0, : len(accepted) + 1])


def test_rounds_of_random_trees_decode_greedily():
    torch.manual_seed(5)
    model = PathModel().double().eval()
    g = torch.Generator(device=torch.get_default_device()).manual_seed(5)
    prompt = torch.randint(0, 11, (1, 3), generator=g)
    want = greedy(model, prompt, 14)
    tokens, rounds = prompt, 0
    while tokens.shape[1] < prompt.shape[1] + 14:
        done = tokens.shape[1] - prompt.shape[1]
        # trees with and without a correct branch planted in them
        plant = want[0, done:] if rounds % 2 == 0 else None
        parents, tree = random_tree(6, 11, g, plant=plant)
        new, _ = ts.tree_verify(model, tokens, tree, parents)
        tokens, rounds = torch.cat([tokens, new], dim=1), rounds + 1
    assert torch.equal(tokens[:, 3:17], want)
    assert rounds < 14  # the planted branches saved target passes


def test_a_tree_with_no_agreeing_child_still_adds_the_targets_token():
    model, prefix, parents, tokens, want = setup(seed=1)
    wrong = (want[0, 0] + 1) % 11
    star = torch.full((3,), -1)
    new, accepted = ts.tree_verify(model, prefix, torch.full((3,), int(wrong)), star)
    assert accepted.numel() == 0 and torch.equal(new, want[:, :1])


@pytest.mark.parametrize("seed", range(3))
def test_accepted_branch_kv_equals_a_fresh_prefill(seed):
    model, prefix, parents, tokens, _ = setup(seed=seed)
    n0 = prefix.shape[1]
    new, accepted = ts.tree_verify(model, prefix, tokens, parents)
    tree_kv = model.kv
    with torch.no_grad():
        causal_run(model, torch.cat([prefix, new[:, :-1]], dim=1))
    for (k, v), (k_ref, v_ref) in zip(tree_kv, model.kv):
        k_kept, v_kept = ts.accepted_kv(k, v, n0, accepted)
        torch.testing.assert_close(k_kept, k_ref, rtol=0, atol=1e-12)
        torch.testing.assert_close(v_kept, v_ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_low_precision_target_runs_and_keeps_the_dtype(dtype):
    torch.manual_seed(0)
    model = PathModel().to(dtype).eval()
    parents, tokens = torch.tensor([-1, 0, -1, 2]), torch.tensor([1, 2, 3, 4])
    new, accepted = ts.tree_verify(model, torch.tensor([[5, 6]]), tokens, parents)
    assert new.dtype == torch.long and 1 <= new.shape[1] <= 3
    k, v = model.kv[0]
    k_kept, v_kept = ts.accepted_kv(k, v, 2, accepted)
    assert k_kept.dtype == dtype and torch.isfinite(k_kept).all() and torch.isfinite(v_kept).all()


def test_named_errors():
    ok = torch.tensor([-1, 0, 0])
    with pytest.raises(TypeError, match=r"parents must be integer \(n\), got torch.float32"):
        ts.tree_attention_mask(ok.float(), 2)
    with pytest.raises(TypeError, match=r"parents must be integer .*got list"):
        ts.tree_position_ids([-1, 0], 2)
    with pytest.raises(ValueError, match=r"parents must be integer \(n\), got torch.int64 \(1, 3\)"):
        ts.tree_attention_mask(ok[None], 2)
    with pytest.raises(ValueError, match=r"parents must hold parents\[i\] in \[-1, i\), got \(i, p\) \[\(1, 1\)\]"):
        ts.tree_attention_mask(torch.tensor([-1, 1]), 2)  # a node as its own parent
    with pytest.raises(ValueError, match=r"got \(i, p\) \[\(0, 2\)\]"):
        ts.tree_attention_mask(torch.tensor([2, -1, 0]), 2)  # a parent after its child
    with pytest.raises(ValueError, match=r"got \(i, p\) \[\(2, -2\)\]"):
        ts.tree_position_ids(torch.tensor([-1, 0, -2]), 2)
    with pytest.raises(ValueError, match=r"n_prefix must be an int >= 0, got -1"):
        ts.tree_attention_mask(ok, -1)
    model = PathModel()
    with pytest.raises(ValueError, match=r"prefix must hold N0 >= 1 ids, got .*\(1, 0\)"):
        ts.tree_verify(model, torch.zeros(1, 0, dtype=torch.long), ok, ok)
    with pytest.raises(ValueError, match=r"tree_tokens must be integer \(3\), got "):
        ts.tree_verify(model, torch.tensor([[1]]), torch.tensor([1, 2]), ok)
    k = torch.randn(1, 2, 5, 4)
    with pytest.raises(ValueError, match=r"v must be floating \(1, 2, 5, d\) torch.float32 on cpu, got"):
        ts.accepted_kv(k, torch.randn(1, 2, 6, 4), 2, torch.tensor([0]))
    with pytest.raises(ValueError, match=r"n_prefix must be an int in \[0, 5\], got 6"):
        ts.accepted_kv(k, k, 6, torch.tensor([0]))
    with pytest.raises(ValueError, match=r"accepted must hold ids in \[0, 3\), got \[3\]"):
        ts.accepted_kv(k, k, 2, torch.tensor([3]))


# ---------------------------------------------------------------------------
# Sampled verification (SpecInfer's multi-step speculative sampling)
# ---------------------------------------------------------------------------

from identities.tree_speculation import (  # noqa: E402
    CTX, TREE, CausalBlock, combine_loop, first_token_law, first_two_law, hidden_run, law,
    mtp_generate, mtp_setup, paper_ratios, target_two_law, walk_law,
)
from snippets.efficiency.paged_kv_cache import verify_sampled  # noqa: E402


@pytest.mark.parametrize("vocab, tree, p_seed, q_seed", [
    (3, TREE, 1, 2),
    (4, [-1, -1, -1], 3, 4),  # three candidates for one token
    (4, [-1, 0, 1], 5, 6),  # a chain: the single-chain rule
    (3, [-1, -1, 0, 1, 1], 7, 7),  # the draft is the target
])
def test_first_token_has_the_targets_law_exactly(vocab, tree, p_seed, q_seed):
    got = first_token_law(tree, CTX, vocab, p_seed, q_seed)
    torch.testing.assert_close(got, law(CTX, vocab, p_seed), rtol=0, atol=1e-12)


def test_first_two_tokens_have_the_targets_joint_law_exactly():
    got = first_two_law([-1, -1, 0], (2,), 4, 8, 9)
    torch.testing.assert_close(got, target_two_law((2,), 4, 8), rtol=0, atol=1e-12)
    assert abs(float(got.sum()) - 1) < 1e-12


def test_the_sampled_walk_itself_gives_the_targets_first_token():
    """Enumerate the walk's own draws (not the outcome table) over every draft."""
    from identities.tree_speculation import draft_trees, target_rows
    tree, vocab = [-1, -1, 0], 3
    par = torch.tensor(tree)
    got = torch.zeros(vocab, dtype=torch.float64)
    for prob, tokens, q in draft_trees(tree, CTX, vocab, 2):
        p = target_rows(tree, CTX, tokens, vocab, 1)
        for stop, (mass, dist) in walk_law(p, q, tokens, par).items():
            got += prob * mass * (dist if stop < 0 else torch.eye(vocab, dtype=torch.float64)[
                int(tokens[path_of(par, stop)[0]])])
    torch.testing.assert_close(got, law(CTX, vocab, 1), rtol=0, atol=1e-12)


def naive_outcomes(first_child_only: bool):
    """Two wrong rules, in the shape of tree_sampled_outcomes, for the exact test to catch."""

    def outcomes(p, q, tokens, parents):
        n = len(parents)
        reach = torch.zeros(n + 1, dtype=torch.float64)
        reach[0] = 1
        none, dist = torch.ones(n + 1, dtype=torch.float64), p.clone()
        for node in range(-1, n):
            kids = [c for c in range(n) if int(parents[c]) == node]
            if not kids:
                continue
            if first_child_only:  # accept the first child with min(1, p/q), else draw from p
                kids = kids[:1]
            left = 1.0
            for c in kids:  # every child against the same p: no residual between siblings
                x = int(tokens[c])
                r = min(1.0, float(p[node + 1, x] / q[c, x]))
                reach[c + 1] = reach[node + 1] * left * r
                left *= 1 - r
            none[node + 1] = left
            if not first_child_only:
                residual = (p[node + 1] - q[kids[-1]]).clamp(min=0)
                dist[node + 1] = residual / residual.sum()
        return reach * none, dist

    return outcomes


def test_the_naive_rules_miss_the_targets_law():
    want = law(CTX, 3, 1)
    errors = {}
    for name, first in (("first child, then p", True), ("no residual between siblings", False)):
        got = first_token_law(TREE, CTX, 3, 1, 2, outcomes=naive_outcomes(first))
        errors[name] = float((got - want).abs().max())
    print(errors)  # measured: the page quotes these
    assert min(errors.values()) > 0.02, errors


@pytest.mark.parametrize("seed", range(6))
def test_a_chain_is_verify_sampled_draw_for_draw(seed):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(100 + seed)
    k, V = 4, 7
    p = torch.softmax(torch.randn(k + 1, V, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(k, V, generator=g, dtype=torch.float64), -1)
    drafted = torch.multinomial(q, 1, generator=g).flatten()
    for _ in range(20):
        u = torch.rand(k, generator=g, dtype=torch.float64)
        path, dist = ts.tree_walk_sampled(p, q, drafted, torch.arange(k) - 1, u)
        n_ok, dist_ref = verify_sampled(p, q, drafted, u)
        assert path == list(range(n_ok)) and torch.equal(dist, dist_ref)


@pytest.mark.parametrize("seed", range(3))
def test_the_kernels_ratios_are_the_papers(seed):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    V, k = 5, 4
    p = torch.softmax(2 * torch.randn(V, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(2 * torch.randn(k, V, generator=g, dtype=torch.float64), -1)
    xs = torch.randint(0, V, (k,), generator=g)
    ratios, residual = ts.multistep_ratios(p, q, xs)
    want = paper_ratios(p, q, list(range(k)), xs)
    torch.testing.assert_close(ratios, torch.tensor([want[c] for c in range(k)],
                                                    dtype=torch.float64), rtol=0, atol=1e-15)
    assert abs(float(residual.sum()) - 1) < 1e-12 and bool((residual >= 0).all())


def test_outcomes_sum_to_one_and_a_draft_equal_to_the_target_is_always_accepted():
    g = torch.Generator(device=torch.get_default_device()).manual_seed(0)
    parents = torch.tensor([-1, -1, 0, 1, 3])
    p = torch.softmax(torch.randn(6, 5, generator=g, dtype=torch.float64), -1)
    tokens = torch.tensor([0, 1, 2, 3, 4])
    q = p[torch.tensor([0, 0, 1, 2, 4])]  # node i drawn from p after its parent
    stop, dist = ts.tree_sampled_outcomes(p, q, tokens, parents)
    assert abs(float(stop.sum()) - 1) < 1e-12
    # q = p: the first child always passes, so the walk runs 0 -> 2 to a leaf
    torch.testing.assert_close(stop, torch.tensor([0, 0, 0, 1.0, 0, 0], dtype=torch.float64))


def draft_tree_sample(draft: PathModel, prefix, parents, g, memo=None):
    """Draw each node from the draft after the prefix and its parent's path: tokens, q."""
    tokens, qs, memo = torch.zeros(len(parents), dtype=torch.long), [], {} if memo is None else memo
    for i, par in enumerate(parents.tolist()):
        path = tokens[path_of(parents, par)] if par >= 0 else tokens[:0]
        key = tuple(path.tolist())
        if key not in memo:  # the draft's distribution depends on the path only
            memo[key] = torch.softmax(causal_run(draft, torch.cat([prefix, path[None]], 1))[0, -1], -1)
        q = memo[key]
        tokens[i] = torch.multinomial(q, 1, generator=g)
        qs.append(q)
    return tokens, torch.stack(qs)


def test_monte_carlo_first_token_follows_the_target():
    """A weaker, seeded second check through the public face and real models."""
    torch.manual_seed(0)
    target, draft = PathModel().double().eval(), PathModel().double().eval()
    prefix, parents = torch.tensor([[3, 1, 4]]), torch.tensor([-1, -1, 0, 0])
    g = torch.Generator(device=torch.get_default_device()).manual_seed(0)
    counts = torch.zeros(11, dtype=torch.float64)
    accepted = 0
    with torch.no_grad():
        p = torch.softmax(causal_run(target, prefix)[0, -1], -1)
        memo = {}
        for _ in range(300):
            tokens, q = draft_tree_sample(draft, prefix, parents, g, memo)
            new, acc = ts.tree_verify_sampled(target, prefix, tokens, parents, q, g)
            counts[int(new[0, 0])] += 1
            accepted += len(acc)
    tv = 0.5 * float((counts / counts.sum() - p).abs().sum())
    assert tv < 0.12, tv  # 300 rounds, 11 tokens: the expected distance is about 0.06
    assert accepted > 0


def test_the_face_is_the_tree_pass_then_the_walk_with_the_same_draws():
    torch.manual_seed(2)
    target, draft = PathModel().double().eval(), PathModel().double().eval()
    prefix, parents = torch.tensor([[7, 2]]), torch.tensor([-1, 0, -1, 1, 0])
    for seed in range(5):
        g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
        tokens, q = draft_tree_sample(draft, prefix, parents, g)
        state = g.get_state()
        new, accepted = ts.tree_verify_sampled(target, prefix, tokens, parents, q, g)
        g.set_state(state)
        with torch.no_grad():
            full = torch.cat([prefix, tokens[None]], 1)
            mask = ts.tree_attention_mask(parents, 2)
            p = torch.softmax(target(full, ts.tree_position_ids(parents, 2), mask)[0, 1:], -1)
        u = torch.rand(len(parents), generator=g, dtype=torch.float64)
        path, dist = ts.tree_walk_sampled(p, q, tokens, parents, u)
        last = torch.multinomial(dist, 1, generator=g)
        assert accepted.tolist() == path and torch.equal(new[0], torch.cat([tokens[path], last]))


def test_sampled_face_keeps_dtypes_and_accepts_a_perfect_draft():
    torch.manual_seed(1)
    model = PathModel().double().eval()
    prefix, parents = torch.tensor([[5, 6]]), torch.tensor([-1, 0, 0, 1])
    g = torch.Generator(device=torch.get_default_device()).manual_seed(0)
    tokens, q = draft_tree_sample(model, prefix, parents, g)  # the drafter is the target
    new, accepted = ts.tree_verify_sampled(model, prefix, tokens, parents, q, g)
    # q = p: every first child passes, down 0 -> 1 -> 3 to a leaf
    assert new.dtype == torch.long and accepted.tolist() == [0, 1, 3]
    assert torch.equal(new[0, :3], tokens[[0, 1, 3]])
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        low = PathModel().to(dtype).eval()
        new, _ = ts.tree_verify_sampled(low, prefix, tokens, parents, q.to(dtype), g)
        assert new.dtype == torch.long and 1 <= new.shape[1] <= 4


# ---------------------------------------------------------------------------
# Multi-token prediction modules as the drafter
# ---------------------------------------------------------------------------

def test_mtp_combine_is_equation_21():
    g = torch.Generator(device=torch.get_default_device()).manual_seed(3)
    h, e = (torch.randn(1, 4, 5, generator=g, dtype=torch.float64) for _ in range(2))
    w_h, w_e = torch.rand(5, generator=g, dtype=torch.float64), torch.ones(5, dtype=torch.float64)
    proj = torch.randn(5, 10, generator=g, dtype=torch.float64)
    torch.testing.assert_close(ts.mtp_combine(h, e, w_h, w_e, proj, 1e-5),
                               combine_loop(h, e, w_h, w_e, proj, 1e-5), rtol=0, atol=1e-12)
    # the order inside the brackets matters: swapping the halves of M_k swaps the inputs
    swapped = torch.cat([proj[:, 5:], proj[:, :5]], 1)
    torch.testing.assert_close(ts.mtp_combine(e, h, w_e, w_h, swapped, 1e-5),
                               ts.mtp_combine(h, e, w_h, w_e, proj, 1e-5), rtol=0, atol=1e-12)


def test_mtp_module_is_the_block_after_the_combine():
    torch.manual_seed(0)
    module = ts.MTPModule(16, CausalBlock()).double()
    h, e = torch.randn(1, 4, 16, dtype=torch.float64), torch.randn(1, 4, 16, dtype=torch.float64)
    with torch.no_grad():
        want = module.block(combine_loop(h, e, module.h_norm, module.e_norm, module.proj,
                                         module.eps))
        torch.testing.assert_close(module(h, e), want, rtol=0, atol=1e-12)
    torch.autograd.gradcheck(lambda a, b: module(a, b), (h[:, :2].requires_grad_(),
                                                          e[:, :2].requires_grad_()))


def test_mtp_draft_follows_the_causal_chain():
    """Depth k at row i reads h^(k-1)_i and Emb(t_(i+k)); rebuilt here one depth at a time."""
    model, modules = mtp_setup(seed=4)
    tokens = torch.tensor([[1, 5, 2, 7, 3]])
    with torch.no_grad():
        h0 = hidden_run(model, tokens[:, :-1])  # (1, 4, D)
        draft = ts.mtp_draft(h0, tokens, list(modules), model.embed, model.head)
        seq, h = tokens[0].tolist(), h0
        for k, module in enumerate(modules, start=1):
            emb = torch.stack([model.embed.weight[seq[i + k]] for i in range(h.shape[1])])[None]
            h = module.block(combine_loop(h, emb, module.h_norm, module.e_norm, module.proj,
                                          module.eps))
            seq.append(int(model.head(h[0, -1]).argmax()))
    assert draft[0].tolist() == seq[tokens.shape[1]:]


@pytest.mark.parametrize("seed", range(2))
def test_mtp_drafts_verified_greedily_are_greedy_decoding(seed):
    model, modules = mtp_setup(seed=10 + seed, depth=2)
    prompt = torch.randint(0, 11, (1, 3), generator=torch.Generator(device=torch.get_default_device()).manual_seed(seed))
    got, rounds = mtp_generate(model, modules, prompt, 9)
    assert torch.equal(got, greedy(model, prompt, 9))


def test_mtp_that_guesses_right_saves_rounds():
    """Modules whose head guess is forced to the target's greedy token are always accepted."""
    model, modules = mtp_setup(seed=2, depth=2)
    prompt = torch.tensor([[4, 2, 9]])
    want = greedy(model, prompt, 12)
    full = torch.cat([prompt, want], 1)

    def oracle_head(h):  # an output head that knows the answer: the draft is perfect
        oracle_head.calls += 1
        logits = torch.zeros(1, 11, dtype=torch.float64)
        logits[0, full[0, oracle_head.at + oracle_head.calls - 1]] = 1
        return logits

    tokens, rounds = prompt, 0
    with torch.no_grad():
        while tokens.shape[1] < full.shape[1]:
            oracle_head.at, oracle_head.calls = tokens.shape[1], 0
            draft = ts.mtp_draft(hidden_run(model, tokens[:, :-1]), tokens, list(modules),
                                 model.embed, oracle_head)
            new, _ = ts.tree_verify(model, tokens, draft[0], torch.arange(2) - 1)
            tokens, rounds = torch.cat([tokens, new], 1), rounds + 1
    assert torch.equal(tokens[:, : full.shape[1]], full) and rounds == 4  # 3 tokens a round


def test_sampled_and_mtp_named_errors():
    model = PathModel()
    ok, q = torch.tensor([-1, 0]), torch.full((2, 11), 1 / 11)
    with pytest.raises(ValueError, match=r"q must be floating \(2, V\), got"):
        ts.tree_verify_sampled(model, torch.tensor([[1]]), ok, ok, q[:1])
    p = torch.full((3, 4), 0.25, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"p must be floating \(3, V\), got"):
        ts.tree_sampled_outcomes(p[:2], p[:2], ok, ok)
    with pytest.raises(ValueError, match=r"q must be floating \(2, 4\) on cpu, got"):
        ts.tree_sampled_outcomes(p, p[:2, :3], ok, ok)
    with pytest.raises(ValueError, match=r"tree_tokens must be in \[0, 4\), got \[0, 4\]"):
        ts.tree_sampled_outcomes(p, p[:2], torch.tensor([0, 4]), ok)
    with pytest.raises(RuntimeError, match=r"negative dimension -1"):  # torch's own check
        ts.MTPModule(-1, CausalBlock())
    with pytest.raises(ValueError, match=r"eps must be a number > 0, got 0.0"):
        ts.MTPModule(16, CausalBlock(), eps=0.0)
    module = ts.MTPModule(16, CausalBlock())
    with pytest.raises(ValueError, match=r"emb must be floating \(1, 3, 16\) torch.float32 on cpu, got"):
        module(torch.randn(1, 3, 16), torch.randn(1, 4, 16))
    h0, tokens = torch.randn(1, 2, 16), torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match=r"tokens must hold L >= 2 ids, got"):
        ts.mtp_draft(h0, tokens[:, :1], [module], model.embed, model.head)
    with pytest.raises(ValueError, match=r"h0 must be floating \(1, 2, D\), got"):
        ts.mtp_draft(h0[:, :1], tokens, [module], model.embed, model.head)


def test_top_k_children_are_not_samples():
    """Children fixed as the drafter's two likeliest tokens break the equality."""
    p, q = law(CTX, 3, 1), law(CTX, 3, 2)
    top = q.argsort(descending=True)[:2]
    parents = torch.tensor([-1, -1])
    rows = torch.stack([p, law(CTX + (int(top[0]),), 3, 1), law(CTX + (int(top[1]),), 3, 1)])
    stop, dist = ts.tree_sampled_outcomes(rows, torch.stack([q, q]), top, parents)
    got = stop[0] * dist[0] + stop[1] * torch.eye(3, dtype=torch.float64)[top[0]] \
        + stop[2] * torch.eye(3, dtype=torch.float64)[top[1]]
    err = float((got - p).abs().max())
    print("top-k error", err)
    assert err > 0.02, err
