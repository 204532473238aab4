# %% [markdown]
# # Example: the modern decoder block
#
# This page was executed when the site was built. It builds the
# [modern block](../modern/modern-block.md) from its parts, counts where the
# parameters of a 2017 block and of a Llama 3 8B layer go, and shows what
# QK-norm does to the attention logits when the query and key weights grow.
# Letters follow the [notation](../notation.md) page.

# %%
import matplotlib.pyplot as plt
import torch
from torch import nn

from snippets.modern.modern_block import DecoderAttention, DecoderLayer, RMSNorm, sdpa_attend, swiglu_width
from _plotting import attention_heatmap

torch.manual_seed(0)
print(f"torch {torch.__version__}")

# %% [markdown]
# ## A layer, and its parameter names
#
# The names follow the Llama checkpoints, so a Hugging Face
# `LlamaDecoderLayer` state dict loads into it unchanged.

# %%
layer = DecoderLayer(DecoderAttention(64, 8, 2, qk_norm="head"), 64, swiglu_width(64, 32))
for name, p in layer.named_parameters():
    print(f"{name:34s} {tuple(p.shape)}")
x = torch.randn(2, 10, 64)
print("out", tuple(layer(x).shape), "| biases:", [n for n, _ in layer.named_parameters() if "bias" in n])

# %% [markdown]
# ## Where the parameters go
#
# A 2017-style block of width $D = 4096$ (multi-head attention with biases, a
# $4D$ ReLU MLP with biases, two LayerNorms) next to one Llama 3 8B layer
# (32 query heads, 8 key/value heads, SwiGLU of width 14336, two RMSNorms).
# Counted from the shapes, without allocating the weights.

# %%
# alt: Two stacked horizontal bars, in millions of parameters. The 2017 block: attention about 67, MLP about 134, norms and biases a sliver. The Llama 3 8B layer: attention about 42, MLP about 176, norms a sliver.
D, H, H_kv, d = 4096, 32, 8, 128
d_ff = swiglu_width(D, 1024, 1.3)
old = {"attention": 4 * D * D + 4 * D, "MLP": 2 * D * 4 * D + 4 * D + D, "norms": 4 * D}
new = {"attention": 2 * D * H * d + 2 * D * H_kv * d, "MLP": 3 * D * d_ff, "norms": 2 * D}
fig, ax = plt.subplots(figsize=(8, 2.6))
left = [0.0, 0.0]
colors = {"attention": "#3b6fb6", "MLP": "#e08a2c", "norms": "#555555"}
for part in ("attention", "MLP", "norms"):
    widths = [old[part] / 1e6, new[part] / 1e6]
    ax.barh(["2017 block", "Llama 3 8B layer"], widths, left=left, color=colors[part], label=part)
    left = [l + w for l, w in zip(left, widths)]
ax.set_xlabel("parameters (millions)")
ax.legend(loc="lower right")
ax.set_title(f"D = {D}: where one layer's parameters go")
fig.tight_layout()
plt.show()
for name, parts in (("2017 block", old), ("Llama 3 8B layer", new)):
    print(f"{name:17s} " + "  ".join(f"{k} {v:>12,d}" for k, v in parts.items()) + f"  total {sum(parts.values()):,d}")

# %% [markdown]
# ## QK-norm keeps the logits bounded
#
# Multiply the query and key weights by a growing factor, as training can do,
# and record the scores the kernel sees. A kernel is any function of
# `(q, k, v, attn_mask, scale)`, so a small wrapper around the default one can
# log them. Without QK-norm the largest score grows with the square of the
# factor and the softmax collapses onto one key (its entropy falls toward 0);
# with per-head QK-norm both stay where they were.

# %%
class Recorder(nn.Module):
    def __init__(self):
        super().__init__()
        self.scores = None

    def forward(self, q, k, v, attn_mask=None, scale=None):
        self.scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, N, N)
        if attn_mask is not None:
            self.scores = self.scores.masked_fill(~attn_mask, float("-inf"))
        return sdpa_attend(q, k, v, attn_mask=attn_mask, scale=scale)


def entropy(scores):
    w = scores.softmax(-1)
    return -(w * w.clamp_min(1e-30).log()).sum(-1).mean().item()


factors = [1, 2, 4, 8, 16, 32]
x = RMSNorm(64)(torch.randn(1, 32, 64))
curves = {}
with torch.no_grad():
    for qk_norm in (None, "head"):
        torch.manual_seed(1)
        attn = DecoderAttention(64, 8, 2, qk_norm=qk_norm, attend=Recorder())
        peaks, entropies = [], []
        for f in factors:
            scaled = DecoderAttention(64, 8, 2, qk_norm=qk_norm, attend=attn.attend)
            scaled.load_state_dict(attn.state_dict())
            scaled.q_proj.weight.mul_(f)
            scaled.k_proj.weight.mul_(f)
            scaled(x)
            s = attn.attend.scores
            peaks.append(s[torch.isfinite(s)].abs().max().item())
            entropies.append(entropy(s))
        curves[qk_norm] = (peaks, entropies)

# %%
# alt: Two line plots against the factor applied to W_q and W_k, 1 to 32 on a log scale. Left, the largest absolute score on a log scale: without QK-norm it climbs from about 2 to about 1800; with QK-norm it stays at 2.7. Right, the mean attention entropy: without QK-norm it falls from 2.5 nats to near 0; with QK-norm it stays at 2.2.
fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
for qk_norm, label in ((None, "no QK-norm"), ("head", "QK-norm per head")):
    peaks, entropies = curves[qk_norm]
    axes[0].plot(factors, peaks, marker="o", label=label)
    axes[1].plot(factors, entropies, marker="o", label=label)
axes[0].set_yscale("log")
axes[0].set_ylabel("largest |score|")
axes[1].set_ylabel("mean attention entropy (nats)")
for ax in axes:
    ax.set_xscale("log", base=2)
    ax.set_xlabel("factor on W_q and W_k")
    ax.legend()
fig.tight_layout()
plt.show()
for qk_norm in (None, "head"):
    peaks, entropies = curves[qk_norm]
    print(f"qk_norm={qk_norm!s:5}  largest |score| {peaks[0]:8.2f} -> {peaks[-1]:8.2f}   "
          f"entropy {entropies[0]:.2f} -> {entropies[-1]:.2f}")

# %% [markdown]
# The weights of one head at the largest factor, without and with QK-norm:
# one-hot rows against spread ones.

# %%
# alt: Two 32 by 32 causal attention-weight heatmaps. Left, without QK-norm at factor 32: almost every row is a single bright cell. Right, with QK-norm: weight spread over many earlier keys.
fig, axes = plt.subplots(1, 2, figsize=(9, 4))
with torch.no_grad():
    for ax, qk_norm in zip(axes, (None, "head")):
        torch.manual_seed(1)
        attn = DecoderAttention(64, 8, 2, qk_norm=qk_norm, attend=Recorder())
        attn.q_proj.weight.mul_(factors[-1])
        attn.k_proj.weight.mul_(factors[-1])
        attn(x)
        attention_heatmap(attn.attend.scores[0, 0].softmax(-1), ax=ax,
                          title=f"{'no QK-norm' if qk_norm is None else 'QK-norm'}, factor {factors[-1]}")
fig.tight_layout()
plt.show()
