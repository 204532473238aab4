# %% [markdown]
# # Example: gates and caps
#
# This page was executed when the site was built. It plots Gemma 2's soft cap
# and its slope, shows how a cap keeps attention from collapsing as scores
# grow, and looks at what an output gate does to each head
# ([gates and caps](../modern/gates-and-caps.md)). Letters follow the
# [notation](../notation.md) page.

# %%
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from snippets.modern.modern_block import DecoderAttention
from snippets.modern.gates_and_caps import OutputGate, softcap, softcap_attention

torch.manual_seed(0)
print(f"torch {torch.__version__}")

# %% [markdown]
# ## What a cap of 50 bounds, and what it does not
#
# Each capped logit lies in (-50, 50), so no score overflows and no two differ
# by 100 or more. Two capped logits can still be far apart: raw scores 100 and
# 30 keep a gap of about 21, and the softmax between them is nearly one-hot.
# The slope of the cap, 1 - tanh^2(s / c), is what the gradient is multiplied
# by: it dies away for large scores.

# %%
raw = torch.tensor([100.0, 30.0], dtype=torch.float64)
capped = softcap(raw, 50.0)
ratio = torch.exp(capped[0] - capped[1]).item()
print(f"capped logits: {capped[0].item():.2f} and {capped[1].item():.2f}")
print(f"weight ratio after the softmax: {ratio:.2e}")
for s in (50.0, 100.0, 200.0):
    slope = 1 - torch.tanh(torch.tensor(s / 50.0)) ** 2
    print(f"slope of the cap at s = {s:5.0f}: {slope.item():.4f}")


# %% [markdown]
# ## The cap and its slope
#
# $c \tanh(s / c)$ follows the identity for small scores and flattens at
# $\pm c$; its slope $1 - \tanh^2(s/c)$ is the gradient a score receives.

# %%
# alt: Left: capped score against raw score from -150 to 150, for caps 50 and 20, with the identity as a dashed diagonal; both curves follow the diagonal near zero and flatten at plus and minus their cap. Right: the slopes, bell-shaped curves equal to 1 at zero and near 0 beyond twice the cap.
s = torch.linspace(-150, 150, 601, requires_grad=True)
fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
axes[0].plot(s.detach(), s.detach(), "--", color="gray", label="identity")
for c in (50.0, 20.0):
    y = softcap(s, c)
    (slope,) = torch.autograd.grad(y.sum(), s)
    axes[0].plot(s.detach(), y.detach(), label=f"c = {c:g}")
    axes[1].plot(s.detach(), slope, label=f"c = {c:g}")
axes[0].set_ylim(-60, 60)
axes[0].set_xlabel("raw score s")
axes[0].set_ylabel("c tanh(s / c)")
axes[1].set_xlabel("raw score s")
axes[1].set_ylabel("slope")
for ax in axes:
    ax.legend()
fig.tight_layout()
plt.show()
print("c = 50:", {v: round(softcap(torch.tensor(float(v)), 50.0).item(), 2) for v in (10, 25, 50, 100)})

# %% [markdown]
# ## A cap keeps attention spread
#
# Scale random queries and keys up, as runaway weights would, and measure the
# mean entropy of the attention rows (causal, $N = 64$). Plain attention
# collapses onto single keys. A cap bounds the ratio of two weights by
# $e^{2c}$: small caps keep the rows spread at every scale. A cap of 50 lets
# the rows collapse at first, but once the scores pass it, every large score
# saturates near $+c$ and the keys that carry them share the weight again.

# %%
# alt: Mean attention entropy against the scale of queries and keys, 1 to 64 on a log scale. Plain attention falls from 2.8 nats to 0. With a cap of 50 it first falls with it to about 0.3, then climbs back to 2.5 as the scores saturate at the cap. Caps of 5 and 2 stay between 2 and 2.9 throughout.
N, d = 64, 32
q, k, v = (torch.randn(1, 4, N, d) for _ in range(3))
causal = torch.ones(N, N, dtype=torch.bool).tril()
scales = [1, 2, 4, 8, 16, 32, 64]


def entropy(weights):
    return -(weights * weights.clamp_min(1e-30).log()).sum(-1).mean().item()


eye = torch.eye(N).expand(1, 4, N, N)  # values = identity, so the output rows are the weights
curves = {"plain": []} | {f"cap {c}": [] for c in (50, 5, 2)}
for a in scales:
    curves["plain"].append(entropy(F.scaled_dot_product_attention(a * q, a * k, eye, attn_mask=causal)))
    for c in (50, 5, 2):
        curves[f"cap {c}"].append(entropy(softcap_attention(a * q, a * k, eye, cap=c, attn_mask=causal)))
fig, ax = plt.subplots(figsize=(6, 3.4))
for name, values in curves.items():
    ax.plot(scales, values, marker="o", label=name)
ax.set_xscale("log", base=2)
ax.set_xlabel("scale of q and k")
ax.set_ylabel("mean row entropy (nats)")
ax.legend()
fig.tight_layout()
plt.show()
for name, values in curves.items():
    print(f"{name:7s} entropy {values[0]:.2f} -> {values[-1]:.2f}")

# %% [markdown]
# ## The output gate, head by head
#
# A gated attention layer (elementwise gate, as in Qwen3-Next) on random
# tokens. With random weights the gates sit around 0.5; the figure shows the
# mean gate of each head for each token, the per-token switch the layer can
# learn. Setting the gate's bias high gives back plain attention exactly.

# %%
# alt: A heatmap of the mean gate value per head (8 columns) for each of 12 tokens (rows): a patchwork of values between about 0.35 and 0.63.
D, H, d = 64, 8, 8
gate = OutputGate(D, H, d, bias=True)
attn = DecoderAttention(D, H, 2, qk_norm="head", output_gate=gate)
x = torch.randn(1, 12, D)
with torch.no_grad():
    g = torch.sigmoid(gate.gate_proj(x)).view(12, H, d).mean(-1)  # (N, H)
fig, ax = plt.subplots(figsize=(5, 4))
im = ax.imshow(g.numpy(), cmap="viridis", vmin=0, vmax=1, aspect="auto")
ax.set_xlabel("head")
ax.set_ylabel("token")
ax.set_title("mean output gate per head and token")
fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
fig.tight_layout()
plt.show()

plain = DecoderAttention(D, H, 2, qk_norm="head")
plain.load_state_dict(attn.state_dict(), strict=False)
with torch.no_grad():
    gate.gate_proj.weight.zero_()
    gate.gate_proj.bias.fill_(40.0)  # sigmoid(40) = 1 in float32
    print("gate of one: max |gated - plain| =", (attn(x) - plain(x)).abs().max().item())
    gate.gate_proj.bias.fill_(-40.0)
    print("closed gate: max |output| =", attn(x).abs().max().item())
