# %% [markdown]
# # Example: rotary position embedding
#
# This page was executed when the site was built. It measures how the score
# between a rotated query and key changes with their offset, checks that the
# curve does not depend on where the pair sits, and compares the two pairings
# of dimensions. See the [RoPE page](../attention/rotary.md); letters follow
# the [notation](../notation.md) page.

# %%
import matplotlib.pyplot as plt
import torch

from snippets.attention.rotary import RotaryEmbedding, apply_rotary, rotary_tables

torch.manual_seed(0)
print(f"torch {torch.__version__}")

# %% [markdown]
# ## Score against offset
#
# One query and one key of width $d = 64$, the key at position $r$ and the
# query at $p = r + \Delta$. With $q = k = (1, \dots, 1)$ the score is
# $\sum_i 2\cos(\Delta\,\theta_i)$: 64 at $\Delta = 0$, then a decaying,
# oscillating curve, the "long-term decay" the RoFormer paper points out.
# For a random pair the curve is irregular, but the same wherever the pair
# sits: computed at $r = 0$ and at $r = 1000$ the two curves coincide.

# %%
# alt: Line plot of the score between a rotated query and key against their offset from 0 to 256. The all-ones pair starts at 64 and decays with oscillations; two curves for a random pair, one starting at position 0 and one at position 1000, lie on top of each other.
d, max_offset = 64, 256
offsets = torch.arange(max_offset + 1)


def score_curve(q, k, start):
    # key at `start`, query at `start + offset`, for every offset
    q_rot = apply_rotary(q.expand(1, 1, len(offsets), d), *rotary_tables(start + offsets, d))
    k_rot = apply_rotary(k, *rotary_tables(torch.tensor([start]), d))
    return (q_rot * k_rot).sum(-1).flatten()  # (offsets,)


ones = torch.ones(1, 1, 1, d)
q, k = torch.randn(1, 1, 1, d), torch.randn(1, 1, 1, d)
fig, ax = plt.subplots(figsize=(8, 3.5))
ax.plot(offsets, score_curve(ones, ones, 0), label="q = k = ones", color="#1f77b4")
ax.plot(offsets, score_curve(q, k, 0), label="random pair, key at 0", color="#d62728")
ax.plot(offsets, score_curve(q, k, 1000), "--", label="random pair, key at 1000", color="#ff9f1c")
ax.set_xlabel("offset p - r (query after key)")
ax.set_ylabel("score q . k after rotation")
ax.legend()
fig.tight_layout()
plt.show()
diff = (score_curve(q, k, 0) - score_curve(q, k, 1000)).abs().max().item()
print(f"max |score at start 0 - score at start 1000| = {diff:.1e} (float32 q and k)")

# %% [markdown]
# ## Norms are preserved
#
# A rotation changes direction, never length.

# %%
x = torch.randn(2, 4, 10, d)
cos10, sin10 = rotary_tables(torch.arange(10), d)  # (N, d/2) each
rotated = apply_rotary(x, cos10, sin10)
print("x", tuple(x.shape), "= (B, H, N, d) -> rotated", tuple(rotated.shape))
print(f"max |norm change| = {(rotated.norm(dim=-1) - x.norm(dim=-1)).abs().max().item():.1e}")

# %% [markdown]
# ## Two pairings, one rotation
#
# Interleaved planes $(2i, 2i+1)$ and half-split planes $(i, i + d/2)$ give
# the same scores once q and k are permuted by
# $\pi = (0, 2, \dots, d-2, 1, 3, \dots, d-1)$, and different ones without.

# %%
q, k = torch.randn(1, 1, 10, d), torch.randn(1, 1, 10, d)
perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


def scores(q, k, interleaved):
    qr = apply_rotary(q, cos10, sin10, interleaved=interleaved)
    kr = apply_rotary(k, cos10, sin10, interleaved=interleaved)
    return qr @ kr.transpose(-2, -1)


s_inter = scores(q, k, True)
print(f"max |interleaved - half-split on permuted q, k| = "
      f"{(s_inter - scores(q[..., perm], k[..., perm], False)).abs().max().item():.1e}")
print(f"max |interleaved - half-split on q, k as they are| = "
      f"{(s_inter - scores(q, k, False)).abs().max().item():.1e}")

# %% [markdown]
# ## In a decoder with a cache
#
# The module rotates the queries as the last $N$ of the $M$ key positions, so
# the last token decoded alone gets the same rotation as in the full pass.

# %%
rope = RotaryEmbedding(d)
q, k = torch.randn(1, 4, 8, d), torch.randn(1, 4, 8, d)
q_full, _ = rope(q, k)
q_last, _ = rope(q[..., -1:, :], k)
print(f"max |last row, full pass - decoded alone| = {(q_full[..., -1:, :] - q_last).abs().max().item():.1e}")
