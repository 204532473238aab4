# %% [markdown]
# # Example: common mistakes, wrong next to right
#
# This page was executed when the site was built. It runs each wrong/right pair
# from [common mistakes](../attention/common-mistakes.md) once on small seeded
# tensors and prints the numbers that give the mistake away, the wrong value
# next to the right one.

# %%
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

import snippets.attention.common_mistakes as cm
from _plotting import attention_heatmap

torch.manual_seed(0)
B, N, M, d = 2, 4, 6, 8
q, k, v = torch.randn(B, N, d), torch.randn(B, M, d), torch.randn(B, M, d)
print("q", tuple(q.shape), "k", tuple(k.shape), "v", tuple(v.shape))


def row(label: str, wrong, right) -> None:
    print(f"{label:<42s} wrong: {wrong:<28s} right: {right}")


def vec(t: torch.Tensor) -> str:
    return "[" + ", ".join(f"{x:.2f}" for x in t.flatten().tolist()) + "]"

# %% [markdown]
# ## 1. Softmax over the wrong axis
#
# The sums of the four rows (one per query) of the first example.

# %%
row("row sums", vec(cm.weights_wrong_axis(q, k)[0].sum(-1)), vec(cm.weights_right_axis(q, k)[0].sum(-1)))

# %%
# alt: Two heatmaps of 4 queries by 6 keys. Left, the weights normalised over the wrong axis: every column sums to 1, so the row totals are uneven (one query holds most of key 4). Right, the correct weights: every row sums to 1.
fig, axes = plt.subplots(1, 2, figsize=(9, 2.8))
attention_heatmap(cm.weights_wrong_axis(q, k)[0], ax=axes[0], title="wrong: softmax over queries")
attention_heatmap(cm.weights_right_axis(q, k)[0], ax=axes[1], title="right: softmax over keys")
fig.tight_layout()

# %% [markdown]
# ## 2. A forgotten $1/\sqrt{d}$
#
# The mean of each row's largest weight, 16 queries against 16 keys, as the
# width $d$ grows.

# %%
for width in (4, 64, 1024):
    qw, kw = torch.randn(16, width), torch.randn(16, width)
    row(f"d = {width:4d}: mean max weight",
        f"{cm.weights_unscaled(qw, kw).amax(-1).mean():.3f}",
        f"{cm.weights_scaled(qw, kw).amax(-1).mean():.3f}")

# %% [markdown]
# ## 3. The value projection written with the query's weights

# %%
D = d
x = torch.randn(B, N, D)
w_q, w_k, w_v = (torch.randn(D, D) / D**0.5 for _ in range(3))
w_v.requires_grad_(True)
wrong = cm.self_attention_wrong_value(x, w_q, w_k, w_v)
right = cm.self_attention(x, w_q, w_k, w_v)
print("wrong output depends on w_v:", wrong.requires_grad, "| right:", right.requires_grad)
row("output[0, 0, :3]", vec(wrong[0, 0, :3].detach()), vec(right[0, 0, :3].detach()))

# %% [markdown]
# ## 4. The mask applied after the softmax
#
# A causal mask on 4 positions; with the identity as values the output is the
# weights themselves.

# %%
allowed = torch.ones(N, N, dtype=torch.bool).tril()
eye = torch.eye(N)
row("row sums", vec(cm.masked_attention_wrong(q, q, eye, allowed)[0].sum(-1)),
    vec(cm.masked_attention(q, q, eye, allowed)[0].sum(-1)))
q_future = q.clone()
q_future[:, -1] += 3.0  # change only the last token: query 0 must not notice
leak_wrong = (cm.masked_attention_wrong(q, q, q, allowed) - cm.masked_attention_wrong(q, q_future, q, allowed))[:, 0].abs().max()
leak_right = (cm.masked_attention(q, q, q, allowed) - cm.masked_attention(q, q_future, q, allowed))[:, 0].abs().max()
row("query 0 moves when the future changes by", f"{leak_wrong:.3f}", f"{leak_right:.3f}")

# %% [markdown]
# ## 5. An SDPA mask passed to `nn.MultiheadAttention`

# %%
mha = nn.MultiheadAttention(D, 2, batch_first=True).eval()
with torch.no_grad():
    wrong = cm.mha_masked_wrong(mha, x, allowed)
    right = cm.mha_masked(mha, x, allowed)
row("NaN in the last query's output", str(bool(wrong[:, -1].isnan().any())), str(bool(right[:, -1].isnan().any())))

# %% [markdown]
# ## 6. `is_causal=True` with a KV cache
#
# One new query against 6 cached keys; the oracle is causal attention over all
# 6 positions, last row.

# %%
qh, kh, vh = (torch.randn(1, 2, M, d) for _ in range(3))  # (B, H, M, d)
oracle = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True)[..., -1:, :]
new = qh[..., -1:, :]
err_wrong = (cm.cached_decode_wrong(new, kh, vh) - oracle).abs().max()
err_right = (cm.cached_decode(new, kh, vh) - oracle).abs().max()
row("max |out - oracle|", f"{err_wrong:.3f}", f"{err_right:.1e}")
print("wrong output equals the first cached value:",
      torch.allclose(cm.cached_decode_wrong(new, kh, vh), vh[..., :1, :]))

# %% [markdown]
# ## 7. Dropout left on in evaluation

# %%
wrong_mod, right_mod = cm.DropoutAttentionWrong(0.5).eval(), cm.DropoutAttention(0.5).eval()
a, b = wrong_mod(qh, kh, vh), wrong_mod(qh, kh, vh)
c, e = right_mod(qh, kh, vh), right_mod(qh, kh, vh)
row("two eval calls differ by", f"{(a - b).abs().max():.3f}", f"{(c - e).abs().max():.3f}")

# %% [markdown]
# ## 8. `-1e9` masks in half precision
#
# Row 1 may attend to nothing (a padded query).

# %%
scores = torch.randn(3, 4)
mask = torch.tensor([[True, True, False, False], [False] * 4, [True, True, True, False]])
for dtype in (torch.float16, torch.float32):
    s = scores.to(dtype)
    row(f"{dtype}: row 1", vec(cm.masked_weights_wrong(s, mask)[1].float()),
        vec(cm.masked_weights(s, mask)[1].float()))
try:
    scores.half().masked_fill(~mask, -1e9)
except RuntimeError as err:
    print("masked_fill(-1e9) in float16:", err)

# %% [markdown]
# ## 9. Batch-first tensors into a sequence-first module

# %%
mha_seq = nn.MultiheadAttention(D, 2)  # batch_first=False, the default
x_changed = x.clone()
x_changed[1] += 1.0  # change only example 1
with torch.no_grad():
    moved_wrong = (cm.mha_self_attend_wrong(mha_seq, x) - cm.mha_self_attend_wrong(mha_seq, x_changed))[0].abs().max()
    moved_right = (cm.mha_self_attend(mha_seq, x) - cm.mha_self_attend(mha_seq, x_changed))[0].abs().max()
row("example 0 moves when example 1 changes by", f"{moved_wrong:.3f}", f"{moved_right:.3f}")
