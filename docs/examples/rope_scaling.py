# %% [markdown]
# # Example: what each RoPE scaling does to the frequencies
#
# This page was executed when the site was built. It takes one head of
# Llama 3.1's shape ($d = 128$, base 500,000, pre-training length
# $L = 8192$) and stretches its context eight times with each scaling of the
# [long-context RoPE page](../modern/long-context-rope.md): position
# interpolation, NTK-aware, YaRN and Llama 3's rule; then dynamic NTK at
# growing lengths; then a layer with no positions at all that counts anyway.
# Letters follow the [notation](../notation.md) page.

# %%
import math

import _plotting  # noqa: F401  (white figures that read in both palettes)
import matplotlib.pyplot as plt
import torch

from snippets.modern.long_context_rope import nope_positions, rope_frequencies, rope_inv_freq

print(f"torch {torch.__version__}")
d, base, L, s = 128, 500000.0, 8192, 8.0
theta = rope_frequencies(d, base)
i = torch.arange(d // 2)
common = dict(base=base, factor=s, original_max_position_embeddings=L)
scaled = {
    "position interpolation (linear)": rope_inv_freq(d, rope_type="linear", **common),
    "NTK-aware (dynamic at 8L, factor 1)": rope_inv_freq(d, rope_type="dynamic", base=base, factor=1.0,
                                                         original_max_position_embeddings=L, seq_len=8 * L),
    "YaRN (beta 32 / 1)": rope_inv_freq(d, rope_type="yarn", **common),
    "Llama 3.1 (1 / 4, as released)": rope_inv_freq(d, rope_type="llama3", **common),
}
colors = ["#1f77b4", "#2ca02c", "#d62728", "#9467bd"]
for name, (inv_freq, factor) in scaled.items():
    kept = int((inv_freq == theta).sum())
    divided = int(torch.isclose(inv_freq, theta / s, rtol=1e-6, atol=0).sum())
    print(f"{name:38s} planes kept {kept:2d}, divided by s {divided:2d}, attention factor {factor:.4f}")

# %% [markdown]
# ## How much each plane is slowed
#
# The ratio $\theta_i / \theta_i'$ per plane $i$, fast planes on the left.
# Position interpolation slows every plane by $s = 8$; NTK-aware spreads the
# slowdown as $s^{2i/(d-2)}$, from 1 to 8; YaRN and Llama 3 keep the fast
# planes exactly, divide the slow ones by 8, and ramp in between (YaRN's ramp
# is wider: from 32 turns in the window down to 1, against Llama 3's 4 to 1).

# %%
# alt: Two line plots against the plane index 0 to 63. Left: the slowdown theta over theta prime on a log scale; position interpolation is a flat line at 8, NTK-aware rises smoothly from 1 to 8, YaRN and Llama 3.1 stay at 1 for the fast planes and jump to 8 for the slow ones, Llama 3.1's step being steeper and further right. Right: the wavelength in tokens on a log scale, original and scaled, with dashed horizontal lines at the pre-training length 8192 and the extended length 65536; the scaled curves of YaRN and Llama 3.1 leave the original curve only where it nears or passes 8192 tokens.
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
for (name, (inv_freq, _)), color in zip(scaled.items(), colors):
    ax1.plot(i, theta / inv_freq, label=name, color=color)
    ax2.plot(i, 2 * math.pi / inv_freq, color=color)
ax2.plot(i, 2 * math.pi / theta, color="black", linestyle=":", label="original")
for length, label in ((L, "L = 8192"), (8 * L, "8L = 65536")):
    ax2.axhline(length, color="#7f7f7f", linestyle="--", linewidth=1)
    ax2.text(1, length * 1.3, label, color="#4d4d4d", fontsize=8)
ax1.set_yscale("log")
ax1.set_yticks([1, 2, 4, 8], ["1", "2", "4", "8"])
ax1.minorticks_off()
ax1.set_xlabel("plane i")
ax1.set_ylabel("slowdown theta_i / theta_i'")
ax1.legend(fontsize=8)
ax2.set_yscale("log")
ax2.set_xlabel("plane i")
ax2.set_ylabel("wavelength 2 pi / theta (tokens)")
ax2.legend(fontsize=8, loc="upper left")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Dynamic NTK follows the length
#
# With dynamic scaling the frequencies are a function of the current length
# $l'$: nothing changes up to $L$, then the base grows with $l'$. Every
# cached key rotated at an earlier length used other frequencies, which is why
# the YaRN paper says to cache keys before RoPE when scaling dynamically.

# %%
# alt: Line plot of the slowdown theta over theta prime against the plane index for dynamic NTK with factor 2 at four lengths. The curve for 8192 tokens is flat at 1 (no change inside the pre-training window); the curves for 16384, 32768 and 65536 tokens rise from 1 at the fast planes to about 3, 7 and 15 at the slowest plane.
fig, ax = plt.subplots(figsize=(6.5, 3.5))
for length, color in zip((L, 2 * L, 4 * L, 8 * L), ("#7f7f7f", "#1f77b4", "#ff7f0e", "#d62728")):
    inv_freq, _ = rope_inv_freq(d, rope_type="dynamic", base=base, factor=2.0, original_max_position_embeddings=L,
                                seq_len=length)
    ratio = theta / inv_freq
    ax.plot(i, ratio, label=f"l' = {length}", color=color)
    print(f"l' = {length:6d}: slowest plane slowed {ratio[-1].item():.2f}x")
ax.set_xlabel("plane i")
ax.set_ylabel("slowdown theta_i / theta_i'")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## No positions, and still a count
#
# A layer whose queries ignore the content gives every visible key the same
# weight. With the causal mask, position $i$ sees $i + 1$ keys, and the share
# of them that is the first token is $1 / (i + 1)$: the position, read back
# without any position encoding. Without the mask every token sees all $N$.

# %%
# alt: Line plot over positions 0 to 31 of the position read back by a single attention layer with no position encoding: with the causal mask it rises along the diagonal 0, 1, 2, ... 31; without the mask it is flat at 31 for every token.
tokens = torch.cat([torch.zeros(1, 1, dtype=torch.long), torch.randint(1, 50, (1, 31), generator=torch.Generator().manual_seed(0))], dim=1)
causal, bidirectional = nope_positions(tokens, bos_id=0), nope_positions(tokens, bos_id=0, causal=False)
print("tokens", tuple(tokens.shape), "= (B, N)")
print("causal:       ", causal[0, :8].round().tolist(), "...")
print("bidirectional:", bidirectional[0, :8].round().tolist(), "...")
fig, ax = plt.subplots(figsize=(6.5, 3.2))
ax.plot(causal[0], marker=".", color="#1f77b4", label="causal")
ax.plot(bidirectional[0], marker=".", color="#d62728", label="bidirectional")
ax.set_xlabel("token position")
ax.set_ylabel("position read back")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()


# %% [markdown]
# ## Angles in low precision
#
# The fastest plane turns one radian per token, so at position 131,071 its
# angle is 131,071 radians. Here is how far apart bfloat16 spaces its numbers
# just below 131,072, and how many turns of that plane the gap is.

# %%
angle = torch.tensor(131071.0)
below = torch.tensor(131072.0, dtype=torch.bfloat16)
gap = (below.float() - torch.nextafter(below, torch.tensor(0.0, dtype=torch.bfloat16)).float()).item()
print(f"bfloat16 rounds {angle.item():.0f} to {angle.to(torch.bfloat16).item():.0f}")
print(f"bfloat16 spacing just below 131,072: {gap:.0f}, about {gap / (2 * math.pi):.0f} turns")
print(f"float16 holds at most {torch.finfo(torch.float16).max:,.0f}")
