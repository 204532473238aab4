"""Figures of the modern-decoder pages, computed with the snippets they teach.

Facts about released models (heads, widths, layer patterns) are read from
docs/data/models.yaml through hooks/models_table.py, the calculator that also
renders the models page's tables.
"""

from __future__ import annotations

import math

from matplotlib.colors import to_rgba
from matplotlib.patches import FancyBboxPatch, Patch
import torch
from torch import nn

from hooks.models_table import cache_bytes, layer_types, load_models
from snippets.architecture.transformer_block import TorchAttention, TransformerBlock
from snippets.modern.modern_block import DecoderAttention, DecoderLayer, swiglu_width
from snippets.modern.cache_size import mha_cache_elements, mla_cache_elements
from snippets.modern.gates_and_caps import softcap
from snippets.modern.layer_patterns import layer_mask
from snippets.modern.long_context_rope import rope_frequencies, rope_inv_freq
from snippets.modern.attention_sinks import SinkCache, sink_window_mask


def _models() -> dict[str, dict]:
    return {m["name"]: m for m in load_models()}


# ---------------------------------------------------------------- latent attention
def mla_data_flow(s):
    """What MLA caches: the latent c_t and one rotary key; the heads' keys and values are rebuilt."""
    fig, ax = s.canvas(7.4, 2.7, xlim=(0, 15.3), ylim=(-0.1, 5.4))
    s.box(ax, 0.9, 2.5, 1.4, 0.9, "h_t\n(D)")
    s.box(ax, 3.3, 2.5, 2.2, 1.0, "kv_down\nW_DKV, W_KR", colour=s.muted, size=8)
    s.arrow(ax, (1.6, 2.5), (2.2, 2.5))
    # what the cache keeps, per token and layer
    ax.add_patch(FancyBboxPatch((5.0, 0.55), 3.3, 4.0, boxstyle="round,pad=0.02,rounding_size=0.2",
                                facecolor="none", edgecolor=s.b, linewidth=1.0, linestyle="--"))
    s.label(ax, 6.65, 4.7, "cached: d_c + d_R numbers", colour=s.b, ha="center", va="bottom", size=8)
    s.box(ax, 6.65, 3.55, 2.8, 0.95, "c_t = RMSNorm(·)\nlatent, d_c wide", colour=s.b, filled=True, size=8)
    s.box(ax, 6.65, 1.45, 2.8, 0.95, "k_R,t = RoPE_t(·)\nshared key, d_R wide", colour=s.b, filled=True, size=8)
    s.arrow(ax, (4.4, 2.75), (5.25, 3.4))
    s.arrow(ax, (4.4, 2.25), (5.25, 1.6))
    s.box(ax, 9.95, 3.55, 2.2, 1.0, "kv_up\nW_UK,i , W_UV,i", colour=s.muted, size=8)
    s.arrow(ax, (8.05, 3.55), (8.9, 3.55))
    s.box(ax, 13.1, 4.3, 2.9, 0.75, "key part k_t,i: d_h", colour=s.a, size=8)
    s.box(ax, 13.1, 2.95, 2.9, 0.75, "value v_t,i: d_v", colour=s.c, size=8)
    s.arrow(ax, (11.05, 3.8), (11.65, 4.2))
    s.arrow(ax, (11.05, 3.3), (11.65, 3.0))
    s.box(ax, 13.1, 1.45, 2.9, 0.95, "key of head i\n[ k_t,i ; k_R,t ]", colour=s.a, size=8)
    s.arrow(ax, (8.05, 1.45), (11.65, 1.45))
    s.arrow(ax, (14.55, 4.3), (14.55, 1.6), rad=-0.5, dashed=True)
    s.label(ax, 12.4, 4.8, "rebuilt for every head i, not cached", ha="center", va="bottom", size=7.5)
    s.label(ax, 11.6, -0.05, "decoding folds W_UK,i into the query and W_UV,i\n"
            "into W_O: the heads attend to the cache directly", ha="center", va="bottom", size=7.5)
    return fig


def mla_cache_per_token(s):
    """Numbers cached per token and layer at DeepSeek-V3's width, by kind of attention."""
    v3 = _models()["DeepSeek-V3"]
    heads, d_c, d_r = v3["heads"]["value"], v3["kv_lora_rank"]["value"], v3["rope_head_dim"]["value"]
    d_h = v3["head_dim"]["value"] - d_r  # head_dim is the query/key width d_h + d_R; values are d_h wide
    latent = mla_cache_elements(d_c, d_r)
    rows = [
        (f"multi-head, H_kv = {heads}", mha_cache_elements(heads, d_h), s.b),
        ("grouped-query, H_kv = 8", mha_cache_elements(8, d_h), s.d),
        (f"latent, d_c + d_R = {d_c} + {d_r}", latent, s.a),
        ("multi-query, H_kv = 1", mha_cache_elements(1, d_h), s.c),
    ]
    fig, ax = s.figure(6.8, 2.1, adjust={"left": 0.3, "right": 0.96, "bottom": 0.22, "top": 0.86})
    for y, (label, count, colour) in enumerate(rows):
        ax.barh(y, count, color=colour, height=0.6)
        ax.text(count * 1.15, y, f"{count:,}  ({count / latent:.3g}x MLA)", va="center", fontsize=7.5,
                color=s.ink)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows])
    ax.invert_yaxis()
    s.log_axes(ax, y=False)
    ax.set_xlim(128, 2**18)
    ax.set_xlabel("numbers cached per token and layer (log scale)")
    ax.set_title(f"at DeepSeek-V3's width: H = {heads} heads, keys and values {d_h} wide", loc="right",
                 fontsize=8.5)
    return fig


# ---------------------------------------------------------------- local and global layers
KIND_ORDER = ("full_attention", "sliding_attention", "chunked_attention", "linear_attention")


def _kind_colours(s) -> dict[str, str]:
    return dict(zip(KIND_ORDER, (s.b, s.a, s.c, s.d)))


def layer_mask_kinds(s):
    """Full, sliding and chunked masks, from layer_mask."""
    n, w, c = 12, 4, 4
    colours = _kind_colours(s)
    fig, axes = s.figure(6.4, 2.6, ncols=3, adjust={"left": 0.02, "right": 0.98, "top": 0.82, "bottom": 0.03,
                                                   "wspace": 0.15})
    for ax, kind, title in zip(axes, KIND_ORDER, ("full (global)", f"sliding, window w = {w}",
                                                  f"chunked, chunk C = {c}")):
        mask = layer_mask(kind, n, window=w, chunk=c)  # (N, N), True = may attend
        s.mask_grid(ax, mask, "", colour=colours[kind], xlabel="", ylabel="")
        ax.set_xticks([])
        ax.set_yticks([])
        keys = mask.sum(-1).tolist()
        ax.set_title(title, fontsize=8.5, pad=14)
        ax.text(0.5, 1.02, f"keys per query: {' '.join(map(str, keys[:9]))} …", transform=ax.transAxes,
                ha="center", va="bottom", fontsize=7, color=s.muted)
    return fig


def layer_strips(s):
    """The kind of every layer of four released decoders, one cell per layer."""
    models = _models()
    names = ["Gemma 3 27B", "gpt-oss-120b", "Llama 4 Scout", "Qwen3-Next 80B-A3B"]
    colours = _kind_colours(s)
    kinds = {name: layer_types(models[name]) for name in names}  # the calculator behind the models page
    width = max(len(k) for k in kinds.values())
    rgba = [[to_rgba(colours[k]) for k in kinds[name]] + [(0, 0, 0, 0)] * (width - len(kinds[name]))
            for name in names]
    fig, ax = s.figure(7.4, 1.9, adjust={"left": 0.25, "right": 0.98, "top": 0.95, "bottom": 0.36})
    ax.imshow(rgba, extent=(0, width, len(names), 0), interpolation="none", aspect="auto")
    ax.vlines(range(width + 1), 0, len(names), colors=s.paper, linewidth=0.6)  # gaps between layers
    ax.hlines(range(len(names) + 1), 0, width, colors=s.paper, linewidth=3)
    ax.set_yticks([i + 0.5 for i in range(len(names))],
                  [f"{name} ({len(kinds[name])})" for name in names])
    ax.set_xticks([0, 10, 20, 30, 40, 50, 60])
    ax.set_xlim(0, width)
    ax.set_xlabel("layer")
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    handles = [Patch(facecolor=colours[k], label=k.replace("_", " ")) for k in KIND_ORDER]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=7.5, handlelength=1.2)
    return fig


# ---------------------------------------------------------------- long-context RoPE
def rope_scaled_wavelengths(s):
    """One head of Llama 3.1's shape stretched 8 times: what each scaling does to each plane."""
    d, base, length, factor = 128, 500000.0, 8192, 8.0
    theta = rope_frequencies(d, base)  # (d/2,)
    common = dict(base=base, factor=factor, original_max_position_embeddings=length)
    scaled = [
        ("position interpolation", rope_inv_freq(d, rope_type="linear", **common)[0], s.b),
        ("NTK-aware (dynamic at 8L)", rope_inv_freq(d, rope_type="dynamic", base=base, factor=1.0,
                                                    original_max_position_embeddings=length,
                                                    seq_len=int(factor) * length)[0], s.d),
        ("YaRN, β = 32 / 1", rope_inv_freq(d, rope_type="yarn", **common)[0], s.c),
        ("Llama 3.1, bands L/4 and L", rope_inv_freq(d, rope_type="llama3", **common)[0], s.a),
    ]
    planes = list(range(d // 2))
    fig, axes = s.figure(7.4, 2.9, ncols=2, adjust={"left": 0.11, "right": 0.99, "bottom": 0.17, "top": 0.9,
                                                   "wspace": 0.3})
    ax = axes[0]
    ax.plot(planes, [2 * math.pi / float(t) for t in theta], color=s.muted, linestyle=":", label="original")
    for name, inv_freq, colour in scaled:
        ax.plot(planes, (2 * math.pi / inv_freq).tolist(), color=colour, linewidth=1.4, label=name)
    for value, text in ((length, "L = 8192"), (factor * length, "8L = 65536")):
        ax.axhline(value, color=s.muted, linewidth=0.8, linestyle="--")
        ax.text(1, value * 1.5, text, fontsize=7, color=s.muted)
    s.log_axes(ax, x=False, base=10)
    ax.set_yticks([10, 1e3, 1e5, 1e7], ["10", "1,000", "100k", "10M"])
    ax.set_xlabel("plane i (fast → slow)")
    ax.set_ylabel("wavelength 2π / θ_i, tokens")
    ax.set_title("wavelengths", loc="left")
    ax = axes[1]
    for name, inv_freq, colour in scaled:
        ax.plot(planes, (theta / inv_freq).tolist(), color=colour, linewidth=1.4, label=name)
    s.log_axes(ax, x=False)
    ax.set_yticks([1, 2, 4, 8])
    ax.set_xlabel("plane i (fast → slow)")
    ax.set_ylabel("slowdown θ_i / θ_i'")
    ax.set_title("how much each plane is slowed", loc="left")
    ax.legend(fontsize=7, loc="lower right")
    return fig


# ---------------------------------------------------------------- models
DOTS = (3.5, 5.0, 7.0)  # marker sizes at 8k, 32k and 128k tokens


def model_cache_sizes(s):
    """The cache of one sequence for every model of docs/data/models.yaml, at three lengths."""
    models = load_models()
    lengths = (8192, 32768, 131072)
    gib = 2**30
    # a quarter inch per model, so the names stay apart as the census grows
    height = 1.2 + 0.22 * len(models)
    fig, ax = s.figure(7.4, height, adjust={"left": 0.22, "right": 0.98, "top": 1 - 0.35 / height,
                                            "bottom": 0.45 / height})
    for y, model in enumerate(models):
        sizes = [cache_bytes(model, n) / gib for n in lengths]
        ax.plot(sizes, [y] * 3, color=s.faint, linewidth=3, zorder=1)
        # the longest first and largest, so equal sizes (a model whose cache stopped growing) stay visible
        for size, colour, dot in reversed(list(zip(sizes, (s.c, s.a, s.b), DOTS))):
            ax.plot([size], [y], "o", color=colour, markersize=dot, zorder=3)
        dense = cache_bytes(model, lengths[-1], all_global=True) / gib
        if dense > sizes[-1] * 1.01:
            ax.plot([sizes[-1], dense], [y, y], color=s.b, linewidth=0.8, linestyle=":", zorder=2)
            ax.plot([dense], [y], "o", markerfacecolor="none", markeredgecolor=s.b, markersize=DOTS[-1], zorder=3)
    ax.set_yticks(range(len(models)), [m["name"] for m in models])
    ax.invert_yaxis()
    s.log_axes(ax, y=False)
    ax.set_xlabel("cache of one sequence, GiB (bfloat16, log scale)")
    ax.tick_params(axis="y", length=0)
    ax.grid(axis="x", color=s.faint, linewidth=0.6)
    ax.set_axisbelow(True)
    handles = [ax.plot([], [], "o", color=c, markersize=dot, label=f"{n // 1024}k tokens")[0]
               for n, c, dot in zip(lengths, (s.c, s.a, s.b), DOTS)]
    handles.append(ax.plot([], [], "o", markerfacecolor="none", markeredgecolor=s.b, markersize=DOTS[-1],
                           label="128k, local layers made global")[0])
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.4, 1.0), ncol=4, fontsize=7,
              handletextpad=0.2, columnspacing=1.0)
    return fig


# ---------------------------------------------------------------- the modern block
def _block_column(s, ax, x, title, steps, params):
    """Boxes from bottom to top joined by arrows; each box may name the attribute
    of the module that holds it (left) and its parameter count (right)."""
    ax.text(x, 10.0, title, ha="center", va="center", fontsize=9, weight="bold", color=s.ink)
    for (y, text, colour, filled, attr), (y_next, *_rest) in zip(steps, steps[1:] + [(None,)]):
        s.box(ax, x, y, 3.3, 0.78, text, colour=colour, filled=filled, size=8)
        if attr:
            s.label(ax, x - 1.8, y + (0.17 if params.get(attr, 0) > 10**6 else 0), attr, size=6.5, ha="right",
                    va="center", family="monospace")
        if params.get(attr, 0) > 10**6:
            s.label(ax, x - 1.8, y - 0.2, f"{params[attr] / 1e6:.1f}M parameters", size=6.5, ha="right",
                    va="center", colour=s.ink)
        if y_next is not None:
            s.arrow(ax, (x, y + 0.39), (x, y_next - 0.39))


def _block_residual(s, ax, x, y_from, y_to, side=2.05):
    xs = x + side
    s.arrow(ax, (x, y_from), (xs, y_from), colour=s.b, style="-", width=1.5)
    s.arrow(ax, (xs, y_from), (xs, y_to), colour=s.b, style="-", width=1.5)
    s.arrow(ax, (xs, y_to), (x + 0.42, y_to), colour=s.b, width=1.5)


def _parameters(module) -> dict[str, int]:
    counts = {name: sum(p.numel() for p in child.parameters()) for name, child in module.named_children()}
    if "linear1" in counts:  # the 2017 MLP is two Linear children
        counts["linear1, linear2"] = counts["linear1"] + counts["linear2"]
    return counts


def modern_block_diagram(s):
    """The 2017 post-norm block next to a Llama 3 8B layer, with the modules of the two snippets."""
    d, heads, kv_heads = 4096, 32, 8
    d_ff = swiglu_width(d, 1024, 1.3)
    # On the meta device: parameter counts without allocating them. RoPE has no
    # parameters, and its table check would be the first meta operation (a slow one).
    with torch.device("meta"):
        modern = DecoderLayer(DecoderAttention(d, heads, kv_heads, rope_base=None), d, d_ff, norm_eps=1e-5)
        post = TransformerBlock(TorchAttention(nn.MultiheadAttention(d, heads, batch_first=True)), d, 4 * d,
                                activation="relu", norm_first=False)
    p_modern, p_post = _parameters(modern), _parameters(post)
    fig, ax = s.canvas(7.4, 4.7, xlim=(0, 17.6), ylim=(-1.0, 10.4))
    left = [
        (0.6, "x + sinusoids", s.muted, False, ""),
        (2.0, f"attention, {heads} heads", s.a, False, "attention"),
        (3.25, "+", s.b, False, ""),
        (4.45, "LayerNorm", s.d, True, "norm1"),
        (5.8, f"ReLU MLP, d_ff = {4 * d}", s.c, False, "linear1, linear2"),
        (7.05, "+", s.b, False, ""),
        (8.3, "LayerNorm", s.d, True, "norm2"),
    ]
    right = [
        (0.6, "x", s.muted, False, ""),
        (1.65, "RMSNorm", s.d, True, "input_layernorm"),
        (2.85, f"GQA {heads}/{kv_heads} heads, RoPE", s.a, False, "self_attn"),
        (4.05, "+", s.b, False, ""),
        (5.2, "RMSNorm", s.d, True, "post_attention_layernorm"),
        (6.4, f"SwiGLU, d_ff = {d_ff}", s.c, False, "mlp"),
        (7.6, "+", s.b, False, ""),
        (8.75, "out", s.muted, False, ""),
    ]
    total_post = sum(p_post[k] for k in ("attention", "linear1", "linear2", "norm1", "norm2"))
    total_modern = sum(p_modern.values())
    _block_column(s, ax, 4.1, "2017: post-norm, LayerNorm, ReLU", left, p_post)
    _block_column(s, ax, 13.3, "modern: pre-norm, RMSNorm, SwiGLU", right, p_modern)
    _block_residual(s, ax, 4.1, 1.15, 3.25)
    _block_residual(s, ax, 4.1, 4.95, 7.05)
    _block_residual(s, ax, 13.3, 1.0, 4.05)
    _block_residual(s, ax, 13.3, 4.55, 7.6)
    s.label(ax, 4.1, -0.45, f"every path passes a LayerNorm; biases everywhere\n{total_post / 1e6:.1f}M parameters "
            f"at D = {d}", ha="center", va="center", size=7.5)
    s.label(ax, 13.3, -0.45, f"x reaches the top untouched; no biases; one more RMSNorm\nafter the last layer; "
            f"{total_modern / 1e6:.1f}M parameters (Llama 3 8B)", ha="center", va="center", size=7.5)
    return fig


# ---------------------------------------------------------------- attention sinks
def sink_window_cache(s):
    """The sink-plus-window mask, and what SinkCache holds over a longer decode."""
    n, n_sink, window, steps = 14, 2, 4, 48
    mask = sink_window_mask(n, n, n_sink, window)  # (N, N), True = may attend
    sinks = torch.zeros(n, n, dtype=torch.bool)
    sinks[:, :n_sink] = True
    cache = SinkCache(n_sink, window)
    step, held = [], []
    for t in range(steps):  # decode one token at a time; keys and values are placeholders
        cache.update(torch.zeros(1, 1, 1, 1), torch.zeros(1, 1, 1, 1))
        step += [t] * len(cache)
        held += cache.positions.tolist()
    fig, axes = s.figure(7.4, 3.2, ncols=2, adjust={"left": 0.06, "right": 0.98, "top": 0.74, "bottom": 0.14,
                                                   "wspace": 0.22}, gridspec_kw={"width_ratios": [1, 1.25]})
    s.mask_grid(axes[0], mask, "", colour=s.a)
    s.mask_grid(axes[0], mask & sinks, "", colour=s.b)  # the sink columns drawn over in orange
    axes[0].tick_params(labelsize=6)
    axes[0].set_title(f"sink_window_mask: N = {n},\n{n_sink} sinks, window w = {window}", fontsize=8.5, pad=20)
    ax = axes[1]
    ax.fill_between([0, steps - 1], [0, 0], [0, steps - 1], color=s.faint, linewidth=0, label="a full cache")
    colours = [s.b if p < n_sink else s.a for p in held]
    ax.scatter(step, held, c=colours, s=5, linewidths=0)
    ax.set_xlim(-0.5, steps - 0.5)
    ax.set_ylim(-0.5, steps - 0.5)
    ax.set_xlabel("decoding step t")
    ax.set_ylabel("position of a token held")
    ax.text(1, steps * 0.97, f"it holds at most\n{n_sink} sinks (orange) + "
            f"{window} recent tokens;\na full cache holds all t + 1 (grey)", fontsize=7, color=s.ink, va="top")
    ax.set_title(f"SinkCache over {steps} decoding steps: {len(cache)} tokens held at the end", fontsize=8.5,
                 pad=8)
    return fig


# ---------------------------------------------------------------- soft caps
def softcap_curves(s):
    """c tanh(s / c) against s for three caps, from softcap."""
    scores = torch.linspace(-120, 120, 241)
    fig, ax = s.figure(5.6, 2.9, adjust={"left": 0.13, "right": 0.97, "bottom": 0.16, "top": 0.93})
    ax.plot(scores, scores, color=s.muted, linestyle=":", linewidth=1.2, label="no cap: s")
    for cap, colour, note in ((50.0, s.a, "Gemma 2 attention"), (30.0, s.c, "Gemma 2 final logits"),
                              (10.0, s.b, "")):
        capped = softcap(scores, cap)
        ax.plot(scores, capped, color=colour, label=f"c = {cap:g}" + (f" ({note})" if note else ""))
        ax.axhline(cap, color=colour, linewidth=0.6, linestyle="--")
        ax.plot([cap], [float(softcap(torch.tensor(cap), cap))], "o", color=colour, markersize=3.5)
    ax.set_xlim(-120, 120)
    ax.set_ylim(-70, 70)
    ax.axhline(0, color=s.faint, linewidth=0.8, zorder=0)
    ax.axvline(0, color=s.faint, linewidth=0.8, zorder=0)
    ax.set_xlabel("score s")
    ax.set_ylabel("softcap(s, c) = c tanh(s / c)")
    ax.text(52, 14, "dots: s = c gives 0.76 c", fontsize=7, color=s.muted)
    ax.legend(fontsize=7, loc="lower right")
    return fig
