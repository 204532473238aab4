"""Figures of the modern-decoder pages, computed with the snippets they teach.

Facts about released models (heads, widths, layer patterns) are read from
docs/data/models.yaml through hooks/models_table.py, the calculator that also
renders the models page's tables.
"""

from __future__ import annotations

import math

from matplotlib.colors import to_rgba
from matplotlib.patches import FancyBboxPatch, Patch

from hooks.models_table import cache_bytes, layer_types, load_models
from snippets.modern.cache_size import mha_cache_elements, mla_cache_elements
from snippets.modern.layer_patterns import layer_mask
from snippets.modern.rope_scaling import rope_frequencies, rope_inv_freq


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
    ax.legend(fontsize=7, loc="upper left")
    return fig


# ---------------------------------------------------------------- models
DOTS = (3.5, 5.0, 7.0)  # marker sizes at 8k, 32k and 128k tokens


def model_cache_sizes(s):
    """The cache of one sequence for every model of docs/data/models.yaml, at three lengths."""
    models = load_models()
    lengths = (8192, 32768, 131072)
    gib = 2**30
    fig, ax = s.figure(7.4, 3.9, adjust={"left": 0.22, "right": 0.98, "top": 0.9, "bottom": 0.12})
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
