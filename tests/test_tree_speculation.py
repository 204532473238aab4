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
    g = torch.Generator().manual_seed(seed)
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
    g = torch.Generator().manual_seed(5)
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
    with pytest.raises(TypeError, match=r"parents must be an int64 or int32 tensor, got torch.float32"):
        ts.tree_attention_mask(ok.float(), 2)
    with pytest.raises(TypeError, match=r"parents must be an int64 .*got list"):
        ts.tree_position_ids([-1, 0], 2)
    with pytest.raises(ValueError, match=r"parents must be \(n,\), got torch.int64 \(1, 3\)"):
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
    with pytest.raises(TypeError, match=r"target must be a model, got int"):
        ts.tree_verify(3, torch.tensor([[1]]), ok, ok)
    with pytest.raises(ValueError, match=r"prefix must be \(1, N0\) integer ids, N0 >= 1, got .*\(1, 0\)"):
        ts.tree_verify(model, torch.zeros(1, 0, dtype=torch.long), ok, ok)
    with pytest.raises(ValueError, match=r"tree_tokens must be integer ids shaped like parents \(3,\), got "):
        ts.tree_verify(model, torch.tensor([[1]]), torch.tensor([1, 2]), ok)
    k = torch.randn(1, 2, 5, 4)
    with pytest.raises(ValueError, match=r"v must be a floating \(B, H, L, d\) tensor like k, got"):
        ts.accepted_kv(k, torch.randn(1, 2, 6, 4), 2, torch.tensor([0]))
    with pytest.raises(ValueError, match=r"n_prefix must be an int in \[0, 5\], got 6"):
        ts.accepted_kv(k, k, 6, torch.tensor([0]))
    with pytest.raises(ValueError, match=r"accepted must be \(a,\) integer node indices in \[0, 3\), got"):
        ts.accepted_kv(k, k, 2, torch.tensor([3]))
