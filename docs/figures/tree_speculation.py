"""Figures of tree speculative decoding on the serving page, computed with the snippet."""

from __future__ import annotations

import torch

from snippets.efficiency.tree_speculation import (tree_attention_mask, tree_position_ids,
                                                   tree_sampled_outcomes)

PREFIX = ["the", "cat"]
WORDS = ["sat", "is", "on", "down", "here", "the"]
PARENTS = torch.tensor([-1, -1, 0, 0, 1, 2])


def draft_tree_mask(s):
    """A draft tree of six nodes after a two-token prefix, and the mask one pass uses."""
    n0 = len(PREFIX)
    mask = tree_attention_mask(PARENTS, n0)
    pos = tree_position_ids(PARENTS, n0).tolist()
    fig, (tree, grid) = s.figure(7.4, 3.3, ncols=2, adjust={"left": 0.02, "right": 0.98, "top": 0.8,
                                                            "bottom": 0.04, "wspace": 0.12})
    tree.set_xlim(-0.7, 6.5)
    tree.set_ylim(0.2, 4.4)
    tree.axis("off")
    y = {0: 3.2, 1: 1.2, 2: 3.8, 3: 2.6, 4: 1.2, 5: 3.8}  # each node's row in the drawing
    xy = {-2: (0.0, 2.2), -1: (1.45, 2.2)}  # the two prefix tokens
    for i, p in enumerate(PARENTS.tolist()):
        xy[i] = (1.45 * pos[n0 + i], y[i])  # x follows the position id
    for key, word in ((-2, PREFIX[0]), (-1, PREFIX[1])):
        s.box(tree, *xy[key], 1.1, 0.55, word, colour=s.muted, filled=True, size=8)
    s.arrow(tree, (0.55, 2.2), (0.9, 2.2))
    for i, p in enumerate(PARENTS.tolist()):
        start = xy[p]
        s.arrow(tree, (start[0] + 0.55, start[1]), (xy[i][0] - 0.55, xy[i][1]))
        s.box(tree, *xy[i], 1.1, 0.55, f"{i}: {WORDS[i]}", colour=s.accents[0], size=8)
        s.label(tree, xy[i][0], xy[i][1] - 0.42, f"pos {pos[n0 + i]}", size=7, ha="center", va="center")
    tree.set_title("prefix (grey), draft tree", pad=8)
    s.mask_grid(grid, mask.numpy(), "tree attention mask", xlabel="key", ylabel="query")
    labels = PREFIX + [f"{i}:{w}" for i, w in enumerate(WORDS)]
    grid.set_xticks([j + 0.5 for j in range(len(labels))], labels, rotation=90)
    grid.set_yticks([i + 0.5 for i in range(len(labels))], labels)
    return fig


P_TARGET = torch.tensor([0.50, 0.30, 0.15, 0.05], dtype=torch.float64)
Q_DRAFT = torch.tensor([0.10, 0.20, 0.30, 0.40], dtype=torch.float64)


def _first_token(tokens: torch.Tensor) -> torch.Tensor:
    """The exact first-token law of a two-candidate star tree with fixed tokens."""
    p = P_TARGET.expand(3, -1)  # only row 0 matters: the round's first token
    stop, dist = tree_sampled_outcomes(p, Q_DRAFT.expand(2, -1), tokens, torch.tensor([-1, -1]))
    return stop[0] * dist[0] + stop[1] * torch.eye(4, dtype=torch.float64)[tokens[0]] \
        + stop[2] * torch.eye(4, dtype=torch.float64)[tokens[1]]


def sampled_first_token(s):
    """First-token distributions: target, multi-step rule, naive rule, top-2 children."""
    V = 4
    mss = torch.zeros(V, dtype=torch.float64)
    for a in range(V):  # every pair of independent draws from q, with its probability
        for b in range(V):
            mss += Q_DRAFT[a] * Q_DRAFT[b] * _first_token(torch.tensor([a, b]))
    overlap = torch.minimum(P_TARGET, Q_DRAFT)
    naive = overlap + (1 - overlap.sum()) * P_TARGET  # first child, else draw from p
    top2 = _first_token(Q_DRAFT.argsort(descending=True)[:2])
    fig, ax = s.figure(6.4, 2.9, adjust={"left": 0.1, "right": 0.98, "top": 0.86, "bottom": 0.16})
    series = [("target p", P_TARGET, s.muted), ("multi-step rule", mss, s.accents[0]),
              ("first child, else p", naive, s.accents[1]), ("top-2 children", top2, s.accents[2])]
    width = 0.2
    for k, (name, values, colour) in enumerate(series):
        ax.bar([t + (k - 1.5) * width for t in range(V)], values.tolist(), width=width,
               color=colour, label=name)
    ax.set_xticks(range(V), [f"token {t}" for t in range(V)])
    ax.set_ylabel("P(first emitted token)")
    ax.legend(fontsize=7, ncols=2, frameon=False)
    ax.set_title("two candidates drawn from q, verified against p", pad=6)
    return fig
