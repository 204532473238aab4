# %% [markdown]
# # Example: pre-norm against post-norm at initialisation
#
# This page was executed when the site was built. It stacks the guide's
# [Transformer block](../architecture/transformer-block.md) $L$ times, once
# post-norm and once pre-norm, with the same seeded weights, runs one batch
# through a small classifier on top, and measures the gradient that reaches the
# weights before any training step: the quantity Xiong et al. (2020,
# arXiv:2002.04745) analyse to explain why post-norm needs a learning-rate
# warm-up. Letters follow the [notation](../notation.md) page.

# %%
import matplotlib.pyplot as plt
import torch
from torch import nn

from snippets.architecture.transformer_block import TransformerBlock
from snippets.attention.multi_head import MultiHeadAttention

B, N, D, H, CLASSES = 4, 16, 128, 4, 100
DEPTHS = [1, 2, 4, 8, 16]
print(f"torch {torch.__version__}; B={B} N={N} D={D} H={H} d_ff={4 * D}, depths {DEPTHS}")


def gradient_norms(norm_first: bool, n_layers: int) -> list[float]:
    """Gradient norm of each block's second MLP matrix, one batch, at initialisation."""
    torch.manual_seed(0)  # the same weights for both variants
    blocks = nn.ModuleList(
        TransformerBlock(MultiHeadAttention(D, H), D, 4 * D, dropout=0.0,
                         activation="gelu" if norm_first else "relu", norm_first=norm_first)
        for _ in range(n_layers)
    )
    for p in blocks.parameters():  # Xavier initialisation, as in the analysis
        if p.dim() == 2:
            nn.init.xavier_uniform_(p)
    # A pre-norm stack ends with one more LayerNorm: inside the blocks its
    # residual stream is never normalised.
    final_norm = nn.LayerNorm(D) if norm_first else nn.Identity()
    classifier = nn.Linear(D, CLASSES)
    torch.manual_seed(1)
    h, labels = torch.randn(B, N, D), torch.randint(CLASSES, (B * N,))
    for block in blocks:
        h = block(h)  # (B, N, D)
    logits = classifier(final_norm(h)).reshape(B * N, CLASSES)
    nn.functional.cross_entropy(logits, labels).backward()
    return [block.linear2.weight.grad.norm().item() for block in blocks]


post = {n: gradient_norms(False, n) for n in DEPTHS}
pre = {n: gradient_norms(True, n) for n in DEPTHS}
print(" L   post-norm last block   pre-norm last block   pre x sqrt(L)")
for n in DEPTHS:
    print(f"{n:2d}   {post[n][-1]:20.3f}   {pre[n][-1]:19.3f}   {pre[n][-1] * n ** 0.5:13.3f}")

# %% [markdown]
# ## The last block's gradient against depth
#
# Post-norm: the gradient at the top of the stack stays the same size however
# deep the stack is. Pre-norm: it shrinks as the stack deepens, roughly like
# $1/\sqrt{L}$ (the last column above settles once $L$ reaches a few blocks).
# A learning rate that is safe for a pre-norm stack can therefore be too large
# for the top of a post-norm one, which is what the warm-up works around.

# %%
# alt: Log-log line chart of the gradient norm of the last block's MLP weights against the number of blocks L from 1 to 16; the post-norm line stays roughly flat while the pre-norm line falls, meeting a dashed reference line proportional to one over the square root of L for the deeper stacks.
fig, ax = plt.subplots(figsize=(6.0, 3.6))
ax.plot(DEPTHS, [post[n][-1] for n in DEPTHS], "o-", color="#d1495b", label="post-norm (2017)")
ax.plot(DEPTHS, [pre[n][-1] for n in DEPTHS], "s-", color="#00798c", label="pre-norm")
ref = pre[DEPTHS[-1]][-1] * (DEPTHS[-1] / torch.tensor(DEPTHS, dtype=torch.float)) ** 0.5
ax.plot(DEPTHS, ref, "--", color="#555555", label=r"$\propto 1/\sqrt{L}$")
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xlabel("number of blocks L")
ax.set_ylabel("gradient norm, last block")
ax.set_title("Gradient at the top of the stack, at initialisation")
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Block by block, for the deepest stack
#
# The same measurement for every block of the $L = 16$ stack, block 0 nearest
# the input. In the post-norm stack every block, the top one included, gets a
# gradient of about the same size; in the pre-norm stack the blocks near the
# output get the smallest ones.

# %%
# alt: Line chart of the gradient norm of each of the 16 blocks' MLP weights at initialisation, block index on the x axis; the post-norm line stays roughly level across the blocks while the pre-norm line starts at about the same height at block 0 and falls steadily towards the output side.
L = DEPTHS[-1]
print("post-norm:", " ".join(f"{g:.2f}" for g in post[L]))
print("pre-norm: ", " ".join(f"{g:.2f}" for g in pre[L]))
fig, ax = plt.subplots(figsize=(6.0, 3.6))
ax.plot(range(L), post[L], "o-", color="#d1495b", label="post-norm (2017)")
ax.plot(range(L), pre[L], "s-", color="#00798c", label="pre-norm")
ax.set_xlabel("block (0 = nearest the input)")
ax.set_ylabel("gradient norm")
ax.set_title(f"Per-block gradients, L = {L}")
ax.legend()
fig.tight_layout()
plt.show()
