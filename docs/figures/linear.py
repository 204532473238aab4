"""Figures of the linear-attention pages (GLA, the delta rule, SSD, sparse attention,
hybrids), computed with the snippets they teach.

The hybrids figure reads the published configurations in docs/data/hybrids.yaml,
the file tests/test_hybrid_memory.py checks.
"""

from __future__ import annotations

import math
import pathlib

import torch
import yaml
from matplotlib.colors import LinearSegmentedColormap, to_rgba

from snippets.linear.delta_rule import delta_rule_chunked, delta_rule_parallel
from snippets.linear.gated_linear_attention import gla_parallel
from snippets.linear.hybrids import cache_bytes, kimi_linear_config, qwen3_next_config
from snippets.linear.sparse_attention import (
    compressed_attention,
    lightning_indexer,
    selection_mask,
    topk_mask,
    window_keys,
)
from snippets.linear.state_space_duality import ssd_mask

HYBRIDS = pathlib.Path(__file__).resolve().parents[1] / "data" / "hybrids.yaml"


def _signed_cmap(s):
    """Negative orange, zero the faint grid colour, positive blue."""
    return LinearSegmentedColormap.from_list(f"fg-signed-{s.palette}", [s.b, s.faint, s.a])


# ---------------------------------------------------------------- gated linear attention
def gla_decay_masks(s):
    """exp(b_t - b_s) for two key channels, read out of gla_parallel itself."""
    n = 16
    g = torch.Generator().manual_seed(3)
    alpha = torch.empty(n, 2)
    alpha[:, 0] = 0.9 + 0.08 * torch.rand(n, generator=g)  # a slow channel: remembers for long
    alpha[:, 1] = 0.55 + 0.3 * torch.rand(n, generator=g)  # a fast channel ...
    alpha[9, 1] = 0.02  # ... which token 9 wipes
    gates = alpha.log()[None, None]  # (1, 1, N, d_k): g = log(alpha)
    # With q = one channel, k = 1 and v = the identity, out[t, s] = A[t, s] = exp(b_t[i] - b_s[i]).
    k, v = torch.ones(1, 1, n, 2), torch.eye(n)[None, None]
    masks = []
    for channel in range(2):
        q = torch.zeros(1, 1, n, 2)
        q[..., channel] = 1.0
        masks.append(gla_parallel(q, k, v, gates, scale=1.0)[0, 0])  # (N, N)
    fig, axes = s.figure(7.4, 3.5, ncols=2, adjust={"left": 0.07, "right": 0.99, "top": 0.76, "bottom": 0.03,
                                                   "wspace": 0.15})
    titles = (f"slow channel: α_t from {alpha[:, 0].min():.2f} to {alpha[:, 0].max():.2f}",
              f"fast channel: α_t ≤ {alpha[:, 1].max():.2f}; token 9 sets α = {alpha[9, 1]:.2f}")
    for ax, mask, title in zip(axes, masks, titles):
        s.heat(ax, mask, "", xlabel="key s", ylabel="query t", vmin=0, vmax=1)
        ax.tick_params(labelsize=6)
        ax.set_title(title, fontsize=8.5, pad=6)
    fig.text(0.5, 0.995, "decay exp(b_t − b_s) of gla_parallel, 0 (grey) to 1 (blue), zero above the diagonal",
             ha="center", va="top", color=s.muted, fontsize=8)
    return fig


# ---------------------------------------------------------------- delta rule
def delta_rule_weights(s):
    """What each output takes from each value: linear attention adds, the delta rule replaces."""
    n, d_k, chunk = 12, 6, 4
    g = torch.Generator().manual_seed(5)
    k = torch.nn.functional.normalize(torch.randn(1, 1, n, d_k, generator=g, dtype=torch.float64), dim=-1)
    k[..., 7, :] = k[..., 2, :]  # token 7 writes again under token 2's key ...
    beta = 0.3 + 0.5 * torch.rand(1, 1, n, generator=g, dtype=torch.float64)
    beta[..., 7] = 1.0  # ... and replaces all of it
    decay = torch.full((1, 1, n), math.log(0.97), dtype=torch.float64)
    q, v = k, torch.eye(n, dtype=torch.float64)[None, None]  # each token reads its own key; v = identity
    additive = gla_parallel(q, k, v, decay.unsqueeze(-1).expand(1, 1, n, d_k), scale=1.0)[0, 0]  # (QKᵀ ⊙ Γ)
    delta = delta_rule_chunked(q, k, v, beta, decay, chunk_size=chunk, scale=1.0)[0, 0]  # the WY form
    if not torch.allclose(delta, delta_rule_parallel(q, k, v, beta, decay, scale=1.0)[0, 0], atol=1e-10):
        raise AssertionError("the chunked and parallel delta rules disagree")
    fig, axes = s.figure(7.4, 3.8, ncols=2, adjust={"left": 0.07, "right": 0.99, "top": 0.76, "bottom": 0.09,
                                                   "wspace": 0.15})
    cmap = _signed_cmap(s)
    panels = ((axes[0], additive, "linear attention (adds), same decay"),
              (axes[1], delta, f"Gated DeltaNet, WY form in chunks of {chunk}"))
    for ax, weights, title in panels:
        s.heat(ax, weights, "", xlabel="value s", ylabel="output t", vmin=-1, vmax=1, cmap=cmap)
        ax.tick_params(labelsize=6)
        ax.set_title(title, fontsize=8.5, pad=6)
        ax.plot([0, n, n, 0, 0], [7, 7, 8, 8, 7], color=s.ink, linewidth=1.0)  # row 7
        on_v2 = float(weights[7, 2])
        on_v2 = 0.0 if abs(on_v2) < 5e-3 else on_v2  # no "-0.00"
        ax.text(n / 2, n + 0.4, f"row 7 = {on_v2:.2f} v_2 + {float(weights[7, 7]):.2f} v_7"
                + (" + …" if bool((weights[7, :7].abs() > 5e-3).sum() > 1) else ""),
                ha="center", va="top", fontsize=7.5, color=s.ink)
    for c in range(chunk, n, chunk):
        axes[1].axhline(c, color=s.ink, linewidth=1.0)
        axes[1].axvline(c, color=s.ink, linewidth=1.0)
    fig.text(0.5, 0.995, "weight of value s in output t, with q_t = k_t and v = the identity: blue positive, "
             "orange negative.\nToken 7 writes again under token 2's key, with β = 1",
             ha="center", va="top", color=s.muted, fontsize=7.5)
    return fig


# ---------------------------------------------------------------- SSD
def ssd_semiseparable(s):
    """The 1-semiseparable mask of ssd_mask: chunks on the diagonal, rank-one blocks below."""
    n, chunk = 16, 4
    g = torch.Generator().manual_seed(2)
    dt = (0.2 + 0.6 * torch.rand(1, 1, n, generator=g, dtype=torch.float64))
    A = torch.tensor([-0.5], dtype=torch.float64)
    mask = ssd_mask(dt, A)[0, 0]  # (N, N): L[t, s] = a_{s+1} ... a_t
    fig, ax = s.figure(5.2, 3.7, adjust={"left": 0.1, "right": 0.62, "top": 0.86, "bottom": 0.04})
    s.heat(ax, mask, "", xlabel="key s", ylabel="query t", vmin=0, vmax=1)
    ax.tick_params(labelsize=6)
    for c in range(chunk, n, chunk):
        ax.axhline(c, color=s.ink, linewidth=1.1)
        ax.axvline(c, color=s.ink, linewidth=1.1)
    for i in range(n // chunk):
        for j in range(i):
            block = mask[i * chunk:(i + 1) * chunk, j * chunk:(j + 1) * chunk]
            rank = int(torch.linalg.matrix_rank(block))
            ax.text(j * chunk + chunk / 2, i * chunk + chunk / 2, f"rank {rank}", ha="center", va="center",
                    fontsize=7, color=s.ink, weight="bold")
    ax.set_title(f"ssd_mask, N = {n}, chunks of C = {chunk}", fontsize=8.5, pad=6)
    s.label(ax, n + 1.2, 1.0, "diagonal blocks: C × C masked\nattention inside a chunk (step 1)", size=7.5,
            va="center", colour=s.ink, clip_on=False)
    s.label(ax, n + 1.2, 8.0, "below them: every block is an\nouter product, measured here by\n"
            "torch.linalg.matrix_rank, so it\nfactors through the state the\nchunk hands on (steps 2 to 4)",
            size=7.5, va="center", colour=s.ink, clip_on=False)
    s.label(ax, n + 1.2, 14.5, "grey 0 to blue 1: the product\nof decays a_(s+1) ⋯ a_t", size=7.5, va="center",
            clip_on=False)
    return fig


# ---------------------------------------------------------------- sparse attention
def sparse_keys_one_query(s):
    """Which keys NSA's three branches and DSA's top-k keep for the last query."""
    m, block, n_select, window, topk = 60, 8, 3, 8, 8
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 2, m, 16, generator=g) for _ in range(3))  # (B, H, M, d): self-attention
    _, block_weights = compressed_attention(q, k, v, block)  # (B, H, N, M // block)
    selected = selection_mask(block_weights, m, m, block, n_select)[0, -1]  # (M,) for the last query
    windowed = window_keys(m, m, window)[-1]
    index = lightning_indexer(torch.randn(1, m, 4, 8, generator=g), torch.randn(1, m, 8, generator=g),
                              torch.rand(1, m, 4, generator=g))  # (B, N, M)
    chosen = topk_mask(index, topk)[0, -1]
    importance = block_weights[0, :, -1].sum(0)  # (M // block,): summed over the heads that share a choice
    fig, ax = s.figure(7.4, 2.5, adjust={"left": 0.31, "right": 0.98, "top": 0.8, "bottom": 0.19})
    rows = []
    top = float(importance.max())
    cmp_row = [to_rgba(s.c, 0.15 + 0.85 * float(importance[j // block]) / top) if j // block < len(importance)
               else (0, 0, 0, 0) for j in range(m)]
    rows.append(cmp_row)
    rows.append([to_rgba(s.a) if bool(x) else (0, 0, 0, 0) for x in selected])
    rows.append([to_rgba(s.d) if bool(x) else (0, 0, 0, 0) for x in windowed])
    rows.append([to_rgba(s.b) if bool(x) else (0, 0, 0, 0) for x in chosen])
    ax.imshow(rows, extent=(0, m, len(rows), 0), interpolation="none", aspect="auto")
    ax.vlines(range(m + 1), 0, len(rows), colors=s.faint, linewidth=0.4)
    ax.vlines(range(0, m + 1, block), 0, len(rows), colors=s.muted, linewidth=1.0)
    ax.hlines(range(len(rows) + 1), 0, m, colors=s.paper, linewidth=3)
    labels = [
        f"NSA compressed: {len(importance)} block means,\nshade = weight (own block not complete)",
        f"NSA selected: {n_select} blocks, the query's\nown and the top weights ({int(selected.sum())} keys)",
        f"NSA window: last {window} keys",
        f"DSA: top {topk} by the lightning indexer",
    ]
    ax.set_yticks([i + 0.5 for i in range(len(rows))], labels, fontsize=7)
    ax.set_xticks(range(0, m + 1, block))
    ax.tick_params(length=0, labelsize=7)
    ax.set_xlim(0, m)
    ax.set_xlabel("key position j")
    for side in ax.spines.values():
        side.set_visible(False)
    ax.plot([m - 0.5], [-0.12], "v", color=s.ink, markersize=5, clip_on=False)
    ax.text(m - 1.2, -0.12, f"query at j = {m - 1}", ha="right", va="center", fontsize=7, color=s.ink)
    ax.set_title(f"the last of M = {m} tokens, blocks of {block}", fontsize=8.5, loc="left", pad=14)
    return fig


# ---------------------------------------------------------------- hybrids
def hybrid_memory(s):
    """Bytes one sequence holds against the context: the hybrids and the same models all attention."""
    data = yaml.safe_load(HYBRIDS.read_text(encoding="utf-8"))
    models = [(qwen3_next_config(data["qwen3_next"]["config"]), s.a),
              (kimi_linear_config(data["kimi_linear"]["config"]), s.b)]
    lengths = [2**p for p in range(10, 21)]
    gib = 2**30
    fig, ax = s.figure(6.4, 3.0, adjust={"left": 0.11, "right": 0.84, "bottom": 0.16, "top": 0.95})
    for config, colour in models:
        hybrid = [cache_bytes(config, n)["total"] / gib for n in lengths]
        full = [cache_bytes(config.all_full(), n)["total"] / gib for n in lengths]
        state = cache_bytes(config, 0)["state"] / gib
        ax.plot(lengths, hybrid, "o-", color=colour, markersize=3,
                label=f"{config.name}: {config.n_linear} linear + {config.n_full} full")
        ax.plot(lengths, full, "--", color=colour, linewidth=1.2,
                label=f"{config.name}, all {len(config.layer_types)} full")
        ax.axhline(state, color=colour, linewidth=0.6, linestyle=":")
        saving = 1 - hybrid[-1] / full[-1]
        ax.text(lengths[-1] * 1.15, hybrid[-1], f"{hybrid[-1]:.1f} GiB\n{saving:.0%} less", fontsize=7,
                color=colour, va="center")
    s.log_axes(ax, x=True, y=True, base=2)
    ax.set_yticks([1 / 16, 1 / 4, 1, 4, 16, 64], ["1/16", "1/4", "1", "4", "16", "64"])
    ax.set_xlabel("context length, tokens")
    ax.set_ylabel("GiB per sequence")
    ax.grid(color=s.faint, linewidth=0.5)
    ax.set_axisbelow(True)
    ax.legend(fontsize=6.8, loc="upper left")
    ax.text(lengths[-1], 0.032, "dotted: the fixed states (float32)", fontsize=7, color=s.muted, ha="right",
            va="top")
    return fig
