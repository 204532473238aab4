"""Figures of the attention pages, computed with the snippets they teach."""

from __future__ import annotations

import math

import torch

from snippets.attention.alibi import alibi_bias, alibi_slopes
from snippets.attention.causal import CausalSelfAttention
from snippets.attention.co_attention import ParallelCoAttention
from snippets.attention.common_mistakes import weights_right_axis, weights_wrong_axis
from snippets.attention.cross_attention import CrossAttention
from snippets.attention.grouped_query import repeat_kv
from snippets.attention.multi_head import MultiHeadAttention
from snippets.attention.naive_self_attention import naive_self_attention
from snippets.attention.rotary import apply_rotary, rotary_tables


def _seeded(seed: int) -> torch.Generator:
    torch.manual_seed(seed)  # the modules draw their initial weights from the global generator
    return torch.Generator().manual_seed(seed)


def naive_weights(s):
    """Without projections each token is most similar to itself: a bright diagonal."""
    g = _seeded(1)
    x = torch.randn(1, 6, 8, generator=g)
    _, weights = naive_self_attention(x)
    fig, ax = s.figure(3.2, 3.0, adjust={"left": 0.16, "top": 0.74, "bottom": 0.03})
    s.heat(ax, weights[0], "softmax(X Xᵀ) for 6 random tokens", annotate=True, vmin=0, vmax=1)
    return fig


def qkv_projections(s):
    """One input, three projections, one weighted sum."""
    fig, ax = s.canvas(7.2, 2.3, xlim=(0, 14.4), ylim=(0, 4.6))
    s.box(ax, 1.2, 2.3, 1.8, 1.0, "X\n(B, N, D)")
    for y, name, colour in ((3.8, "Q = X W_Q", s.a), (2.3, "K = X W_K", s.b), (0.8, "V = X W_V", s.c)):
        s.arrow(ax, (2.15, 2.3), (3.7, y))
        s.box(ax, 4.9, y, 2.3, 0.9, name, colour=colour)
    s.box(ax, 8.6, 3.05, 3.0, 1.0, "softmax(Q Kᵀ / √d_k)\n(B, N, N)", colour=s.d)
    s.arrow(ax, (6.1, 3.8), (7.1, 3.2))
    s.arrow(ax, (6.1, 2.3), (7.1, 2.9))
    s.box(ax, 12.6, 2.0, 2.6, 1.0, "weights @ V\n(B, N, d_v)")
    s.arrow(ax, (10.1, 3.0), (11.3, 2.2))
    s.arrow(ax, (6.1, 0.8), (11.3, 1.8))
    return fig


def causal_weights(s):
    """The causal module's weights: zero above the diagonal."""
    _seeded(2)
    attn = CausalSelfAttention(d_model=8).eval()
    x = torch.randn(1, 6, 8)
    with torch.no_grad():
        _, weights = attn(x)
    fig, ax = s.figure(3.2, 3.0, adjust={"left": 0.16, "top": 0.74, "bottom": 0.03})
    s.heat(ax, weights[0], "CausalSelfAttention weights", annotate=True, vmin=0, vmax=1)
    return fig


def cross_weights(s):
    """N = 4 queries from the decoder, M = 7 keys from the encoder: a wide matrix."""
    _seeded(4)
    attn = CrossAttention(d_model=8, d_context=12).eval()
    x, context = torch.randn(1, 4, 8), torch.randn(1, 7, 12)
    with torch.no_grad():
        _, weights = attn(x, context)
    fig, ax = s.figure(4.6, 2.5, adjust={"left": 0.14, "top": 0.7, "bottom": 0.03})
    s.heat(ax, weights[0], "CrossAttention weights: (N, M) = (4, 7)", annotate=True, vmin=0, vmax=1,
           xlabel="key j: context token (encoder)", ylabel="query i: x token")
    return fig


def co_attention_weights(s):
    """Parallel co-attention: one distribution over words, one over image regions."""
    _seeded(5)
    model = ParallelCoAttention(d_model=8, d_hidden=6).eval()
    question, image = torch.randn(1, 5, 8), torch.randn(1, 9, 8)
    with torch.no_grad():
        _, _, a_q, a_v = model(question, image)
    fig, axes = s.figure(7.0, 2.3, ncols=2, gridspec_kw={"width_ratios": [5, 9]},
                         adjust={"left": 0.08, "bottom": 0.22, "top": 0.85})
    for ax, weights, colour, title, xlabel in (
        (axes[0], a_q[0], s.a, "a_q: over the 5 question words", "word"),
        (axes[1], a_v[0], s.b, "a_v: over the 9 image regions", "region"),
    ):
        ax.bar(range(len(weights)), weights.float().tolist(), color=colour)
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_xticks(range(len(weights)))
    axes[0].set_ylabel("weight (sums to 1)")
    return fig


def head_split(s):
    """D = H * d: each head gets its own slice of the projections and its own weights."""
    _seeded(6)
    mha = MultiHeadAttention(d_model=16, n_heads=4).eval()
    x = torch.randn(1, 5, 16)
    with torch.no_grad():
        _, weights = mha(x, need_weights=True, is_causal=True)  # (B, H, N, N)
    fig, axes = s.figure(8.0, 2.4, ncols=4, adjust={"left": 0.04, "top": 0.72, "bottom": 0.03, "wspace": 0.3})
    for h, ax in enumerate(axes):
        s.heat(ax, weights[0, h], f"head {h}", vmin=0, vmax=1,
               cmap=s.cmap, xlabel="key", ylabel="query" if h == 0 else "")
    return fig


def gqa_groups(s):
    """Which key/value head each query head reads, computed with repeat_kv."""
    n_heads, n_kv = 8, 2
    kv_index = torch.arange(n_kv, dtype=torch.float32).view(1, n_kv, 1, 1)  # (B, H_kv, N, d)
    reads = repeat_kv(kv_index, n_heads // n_kv).view(n_heads).long()  # (B, H, N, d) -> (H,)
    fig, ax = s.canvas(7.2, 2.4, xlim=(0, 16.8), ylim=(0, 5.6))
    s.label(ax, 0.1, 4.4, "query heads\n(H = 8)", colour=s.ink, size=8, va="center")
    s.label(ax, 0.1, 1.1, "key/value heads\n(H_kv = 2)", colour=s.ink, size=8, va="center")
    xs_kv = [6.4, 12.4]
    for j, x in enumerate(xs_kv):
        s.box(ax, x, 1.1, 3.2, 0.9, f"K, V head {j}", colour=s.accents[j], filled=True)
    for h in range(n_heads):
        x = 3.7 + h * 1.5
        colour = s.accents[int(reads[h])]
        s.box(ax, x, 4.4, 1.2, 0.9, f"Q{h}", colour=colour)
        s.arrow(ax, (x, 3.9), (xs_kv[int(reads[h])], 1.6), colour=colour, width=1.0)
    return fig


def rotation(s):
    """RoPE turns each pair of dimensions by an angle proportional to the position."""
    cos, sin = rotary_tables(torch.arange(8), 2)  # one plane, theta = 1 radian per position
    q = torch.tensor([1.0, 0.0]).view(1, 1, 1, 2).expand(1, 1, 8, 2)
    rotated = apply_rotary(q, cos, sin)[0, 0]  # (8, 2): the same vector at positions 0..7
    fig, axes = s.figure(7.4, 3.0, ncols=2, adjust={"left": 0.06, "bottom": 0.14, "top": 0.88, "wspace": 0.3})
    ax = axes[0]
    circle = torch.linspace(0, 2 * math.pi, 100)
    ax.plot(circle.cos(), circle.sin(), color=s.faint, linewidth=1)
    for t in range(6):
        x, y = rotated[t].tolist()
        ax.annotate("", (x, y), (0, 0), arrowprops={"arrowstyle": "-|>", "color": s.accents[t % 4], "lw": 1.5})
        ax.text(1.2 * x, 1.2 * y, f"t={t}", ha="center", va="center", fontsize=8, color=s.ink)
    ax.set_xlim(-1.45, 1.45)
    ax.set_ylim(-1.45, 1.45)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title("one query, turned by t radians")
    # Right: q.k after rotation depends on the offset only.
    g = torch.Generator().manual_seed(0)
    qv, kv = torch.randn(16, generator=g), torch.randn(16, generator=g)
    for start, colour in ((0, s.a), (20, s.b)):
        positions = torch.arange(start, start + 24)
        cos, sin = rotary_tables(positions, 16)  # (24, 8) each
        qr = apply_rotary(qv.view(1, 1, 1, 16), cos[-1:], sin[-1:])[0, 0, 0]
        kr = apply_rotary(kv.view(1, 1, 1, 16).expand(1, 1, 24, 16), cos, sin)[0, 0]
        offsets = (positions[-1] - positions).tolist()
        axes[1].plot(offsets, (kr @ qr).tolist(), "o-" if start == 0 else "x--", color=colour, markersize=3,
                     label=f"query at position {int(positions[-1])}")
    axes[1].set_xlabel("offset i - j between query and key")
    axes[1].set_ylabel("score q·k")
    axes[1].set_title("the score depends on the offset only")
    axes[1].legend(fontsize=7)
    return fig


def alibi_biases(s):
    """ALiBi's bias -m (i - j) for three of eight heads: steep heads look close by."""
    slopes = alibi_slopes(8)
    bias = alibi_bias(slopes, 6, 6)  # (H, N, M), -inf above the diagonal
    fig, axes = s.figure(7.6, 2.6, ncols=3, adjust={"left": 0.05, "top": 0.72, "bottom": 0.03})
    for ax, h in zip(axes, (0, 3, 7)):
        shown = bias[h].clone()
        s.heat(ax, torch.where(torch.isinf(shown), torch.full_like(shown, float("nan")), shown),
               f"head {h}, slope m = {float(slopes[h]):.3g}", annotate=True, fmt="{:.2f}",
               vmin=float(bias[0][torch.isfinite(bias[0])].min()), vmax=0)
    fig.text(0.5, 0.02, "blank cells: future keys (-inf)", ha="center", color=s.muted, fontsize=8)
    return fig


def softmax_axis(s):
    """Softmax over the wrong axis: columns sum to 1 instead of rows."""
    g = torch.Generator().manual_seed(7)
    q, k = torch.randn(4, 8, generator=g), torch.randn(5, 8, generator=g)
    wrong, right = weights_wrong_axis(q, k), weights_right_axis(q, k)
    fig, axes = s.figure(7.2, 2.7, ncols=2, adjust={"left": 0.06, "top": 0.7, "bottom": 0.1, "wspace": 0.45})
    s.heat(axes[0], wrong, "wrong: softmax(dim=-2)", annotate=True, vmin=0, vmax=1)
    s.heat(axes[1], right, "right: softmax(dim=-1)", annotate=True, vmin=0, vmax=1)
    for ax, sums, where in ((axes[0], wrong.sum(0), "column"), (axes[1], right.sum(1), "row")):
        if where == "column":
            ax.text(0.5, -0.06, "columns sum to 1, rows to " + ", ".join(f"{v:.1f}" for v in right.new_tensor(wrong.sum(1).tolist()).tolist()),
                    ha="center", va="top", fontsize=7.5, color=s.b, transform=ax.transAxes)
        else:
            for i, v in enumerate(sums.tolist()):
                ax.text(5.15, i + 0.5, f"Σ={v:.0f}", va="center", fontsize=7.5, color=s.c)
    return fig
