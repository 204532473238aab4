"""Figures of tree speculative decoding on the serving page, computed with the snippet."""

from __future__ import annotations

import torch

from snippets.efficiency.tree_speculation import tree_attention_mask, tree_position_ids

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
