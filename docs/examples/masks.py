# %% [markdown]
# # Example: masks side by side
#
# This page was executed when the site was built. It draws the masks of
# [masks](../foundations/masks.md) (white = may attend), shows that the two
# causal alignments differ when $N \ne M$, and checks the conversions against
# PyTorch.

# %%
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

from snippets.foundations.masks import (
    bool_to_additive,
    causal_mask,
    combine_masks,
    padding_mask,
    to_mha_mask,
)
import _plotting  # noqa: F401  (white figures that read in both palettes)

torch.manual_seed(0)
print(f"torch {torch.__version__}")

# %%
lengths = torch.tensor([6, 4])
square = causal_mask(6, 6)
lower_right = causal_mask(3, 6)
upper_left = torch.ones(3, 6, dtype=torch.bool).tril()  # what is_causal=True uses
padding = padding_mask(lengths, 6)
combined = combine_masks(square, padding)  # (B, 1, N, M)
print("padding mask (B, M):\n", padding.int())
print("combined mask", tuple(combined.shape))
print("additive form of causal_mask(3, 6):\n", bool_to_additive(lower_right))


def draw(ax, mask, title, rows="query i"):
    ax.imshow(mask.float().numpy(), cmap="gray", vmin=0, vmax=1)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("key j")
    ax.set_ylabel(rows)
    ax.set_xticks(range(mask.shape[1]))
    ax.set_yticks(range(mask.shape[0]))


# %%
# alt: Five black-and-white grids, white meaning may attend: a 6 by 6 lower triangle; a 3 by 6 lower-right causal mask where the last query sees all six keys; the 3 by 6 upper-left mask that is_causal=True uses, where the first query sees only key 0; a 2 by 6 padding mask with the second row's last two keys black; and the second sequence's causal-and-padding mask, a triangle with its last two columns black.
fig, axes = plt.subplots(1, 5, figsize=(15, 3.2))
draw(axes[0], square, "causal, N = M = 6")
draw(axes[1], lower_right, "causal_mask(3, 6)\nlower right (site)")
draw(axes[2], upper_left, "is_causal=True, N=3, M=6\nupper left")
draw(axes[3], padding, "padding_mask([6, 4], 6)", rows="sequence b")
draw(axes[4], combined[1, 0], "causal AND padding\nsequence 2")
fig.tight_layout()

# %% [markdown]
# ## The same masks, three conventions
#
# The site's boolean mask, its additive form, and `nn.MultiheadAttention`
# with the flipped masks all give the same output. Given the *unflipped*
# causal mask, `nn.MultiheadAttention` attends to the future instead, and the
# last query of each sequence, which should see every key, sees none: its row
# comes out NaN.

# %%
mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
x = torch.randn(2, 6, 8)
with torch.no_grad():
    out_mha, _ = mha(x, x, x, attn_mask=to_mha_mask(square),
                     key_padding_mask=to_mha_mask(padding), need_weights=False)
    q, k, v = F.linear(x, mha.in_proj_weight, mha.in_proj_bias).chunk(3, dim=-1)
    q, k, v = (t.reshape(2, 6, 2, 4).transpose(1, 2) for t in (q, k, v))  # (B, H, N, d)
    for name, mask in (("bool", combined), ("additive", bool_to_additive(combined))):
        heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        out = mha.out_proj(heads.transpose(1, 2).reshape(2, 6, 8))
        print(f"SDPA with the {name} mask vs nn.MultiheadAttention: "
              f"max diff {(out - out_mha).abs().max().item():.1e}")
    wrong, _ = mha(x, x, x, attn_mask=square, need_weights=False)
print("unflipped causal mask: outputs equal?", torch.allclose(wrong, out_mha))
print("query rows that became NaN:", torch.isnan(wrong).any(-1).sum().item())
