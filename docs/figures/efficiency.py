"""Figures of the efficiency pages, computed with the snippets they teach."""

from __future__ import annotations

import torch
from matplotlib.colors import to_rgba
from matplotlib.patches import Patch, Rectangle

from snippets.efficiency.flex_attention import (
    block_tiles,
    causal_mask_mod,
    computed_block_fraction,
    dense_mask,
    document_ids_from_lengths,
    document_mask_mod,
    sliding_window_mask_mod,
)
from snippets.efficiency.kv_cache import kv_cache_bytes
from snippets.efficiency.linear_attention import feature_map
from snippets.efficiency.paged_kv_cache import PagedKVCache, ragged_causal_mask
from snippets.efficiency.sliding_window import sliding_window_mask
from snippets.efficiency.tiled_attention import online_softmax


def online_softmax_tiles(s):
    """Key blocks of one score row: the running maximum and normaliser, block by block."""
    g = torch.Generator().manual_seed(11)
    row = torch.randn(16, generator=g)
    block = 4
    running_max, running_sum = [], []
    m, l = float("-inf"), 0.0
    for start in range(0, 16, block):
        chunk = row[start:start + block]
        new_m = max(m, float(chunk.max()))
        l = l * float(torch.exp(torch.tensor(m - new_m))) + float(torch.exp(chunk - new_m).sum())
        m = new_m
        running_max.append(m)
        running_sum.append(l)
    weights = online_softmax(row, block_size=block)
    assert torch.allclose(weights, torch.softmax(row, dim=-1), atol=1e-6)
    fig, axes = s.figure(7.4, 3.6, nrows=2, adjust={"left": 0.08, "bottom": 0.12, "top": 0.92, "hspace": 0.45},
                         gridspec_kw={"height_ratios": [1.6, 1]})
    ax = axes[0]
    for b in range(4):
        ax.add_patch(Rectangle((b * block - 0.5, -3.5), block, 7, facecolor=s.accents[b], alpha=0.15, linewidth=0))
        ax.hlines(running_max[b], b * block - 0.5, 15.5, colors=s.accents[b], linestyles="--", linewidth=1)
        ax.text(b * block + 1.5, -3.4, f"block {b}\nm = {running_max[b]:.2f}\nl = {running_sum[b]:.2f}",
                ha="center", va="bottom", fontsize=6.5, color=s.ink)
    ax.bar(range(16), row.tolist(), color=s.muted, width=0.7)
    ax.set_xlim(-0.5, 15.5)
    ax.set_ylim(-3.5, 3.5)
    ax.set_title("scores of one query, read 4 keys at a time: running max m and sum l")
    axes[1].bar(range(16), weights.tolist(), color=s.a, width=0.7)
    axes[1].set_xlim(-0.5, 15.5)
    axes[1].set_title("online_softmax(block_size=4) = softmax, from one pass")
    axes[1].set_xlabel("key j")
    return fig


def kv_cache_growth(s):
    """Each decoding step appends one key and value; the cache grows by one column."""
    fig, axes = s.figure(7.4, 2.8, ncols=2, gridspec_kw={"width_ratios": [1.2, 1]},
                         adjust={"left": 0.06, "bottom": 0.18, "top": 0.88, "wspace": 0.35})
    ax = axes[0]
    prompt, steps = 3, 4
    for t in range(steps):
        y = steps - 1 - t
        for j in range(prompt + t + 1):
            new = j == prompt + t
            ax.add_patch(Rectangle((j, y + 0.1), 0.9, 0.8, facecolor=s.b if new else s.a,
                                   alpha=1.0 if new else 0.55, edgecolor="none"))
        ax.text(-0.3, y + 0.5, f"step {t}", ha="right", va="center", fontsize=8, color=s.ink)
    ax.set_xlim(-1.8, prompt + steps + 0.2)
    ax.set_ylim(-0.1, steps + 0.1)
    ax.axis("off")
    ax.set_title("cached keys (blue) + the new token's (orange)")
    lengths = [512 * 2**i for i in range(8)]
    for n_kv, colour in ((32, s.a), (8, s.c), (1, s.b)):
        gib = [kv_cache_bytes(1, m, 32, n_kv, 128) / 2**30 for m in lengths]
        axes[1].plot(lengths, gib, "o-", color=colour, markersize=3, label=f"H_kv = {n_kv}")
    s.log_axes(axes[1])
    axes[1].set_xlabel("tokens in the cache (M)")
    axes[1].set_ylabel("GiB, fp16")
    axes[1].set_title("32 layers, d = 128, B = 1")
    axes[1].legend(fontsize=7)
    return fig


def window_receptive_field(s):
    """A window of w keys per layer: after L layers a token sees L (w - 1) + 1 positions."""
    n, w = 12, 3
    mask = sliding_window_mask(n, w)  # (N, N), True = may attend
    reach = mask.clone()
    fig, axes = s.figure(7.4, 2.7, ncols=3, adjust={"left": 0.05, "top": 0.72, "bottom": 0.03})
    for layers, ax in zip((1, 2, 3), axes):
        if layers > 1:
            reach = (reach.int() @ mask.int()) > 0  # information flows through one more layer
        s.mask_grid(ax, reach, f"after {layers} layer{'s' if layers > 1 else ''}: "
                    f"{layers * (w - 1) + 1} positions", colour=s.accents[layers - 1], xlabel="", ylabel="")
        ax.tick_params(labelsize=5.5)
    fig.text(0.5, 0.99, f"sliding_window_mask(N = {n}, w = {w}), composed layer after layer",
             ha="center", va="top", color=s.muted, fontsize=8)
    return fig


def linear_cost(s):
    """Linear attention: a positive feature map, and work that grows like N, not N squared."""
    fig, axes = s.figure(7.4, 2.5, ncols=2, adjust={"left": 0.08, "bottom": 0.2, "top": 0.88, "wspace": 0.3})
    x = torch.linspace(-4, 3, 100)
    axes[0].plot(x, feature_map(x), color=s.a, label="φ(x) = elu(x) + 1")
    axes[0].plot(x, x.exp().clamp(max=4.2), color=s.b, linestyle="--", label="exp(x)")
    axes[0].axhline(0, color=s.muted, linewidth=0.8)
    axes[0].set_ylim(-0.5, 4.2)
    axes[0].legend(fontsize=7)
    axes[0].set_title("the feature map stays positive")
    d = 64
    ns = [2**i for i in range(7, 16)]
    axes[1].plot(ns, [2 * n * n * d for n in ns], "o-", color=s.b, markersize=3, label="softmax: (QKᵀ)V, 2N²d")
    axes[1].plot(ns, [2 * n * d * d for n in ns], "o-", color=s.a, markersize=3, label="linear: Q(KᵀV), 2Nd²")
    s.log_axes(axes[1], base=10)
    axes[1].set_xlabel("sequence length N (d = 64)")
    axes[1].set_ylabel("multiply-adds")
    axes[1].legend(fontsize=7)
    axes[1].set_title("order of the products")
    return fig


def backend_memory(s):
    """The explicit path stores the (N, M) weights; a fused kernel keeps only tiles."""
    ns = [2**i for i in range(8, 16)]
    batch, heads, d = 1, 16, 64
    fig, ax = s.figure(5.6, 2.5, adjust={"left": 0.13, "bottom": 0.2, "top": 0.88})
    ax.plot(ns, [batch * heads * n * n * 4 / 2**20 for n in ns], "o-", color=s.b, markersize=3,
            label="weights (B, H, N, N), float32: math backend")
    ax.plot(ns, [batch * heads * n * d * 4 / 2**20 for n in ns], "o-", color=s.a, markersize=3,
            label="output (B, H, N, d): all a fused kernel keeps")
    s.log_axes(ax)
    ax.set_xlabel("sequence length N = M (B = 1, H = 16, d = 64)")
    ax.set_ylabel("MiB")
    ax.legend(fontsize=7)
    return fig


def cost_slopes(s):
    """On log-log axes, cost O(N^a) is a line of slope a: what the benchmark fits."""
    ns = [2**i for i in range(8, 15)]
    d, w = 64, 256
    fig, ax = s.figure(5.6, 2.6, adjust={"left": 0.13, "bottom": 0.2, "top": 0.9})
    for label, cost, colour in (
        ("explicit or tiled: N²d (slope 2)", lambda n: n * n * d, s.b),
        (f"sliding window w = {w}: N·min(N, w)·d (slope 1 for N > w)", lambda n: n * min(n, w) * d, s.c),
        ("linear attention: N d² (slope 1)", lambda n: n * d * d, s.a),
    ):
        ax.plot(ns, [cost(n) for n in ns], "o-", color=colour, markersize=3, label=label)
    s.log_axes(ax)
    ax.set_xlabel("N")
    ax.set_ylabel("multiply-adds per head")
    ax.legend(fontsize=7)
    return fig


def _tile_picture(s, ax, mask, tiles, block, title):
    """Cells of a mask on the tiles a block-sparse kernel sees: full tiles green,
    allowed pairs of partial tiles blue, their blocked pairs (computed, then
    masked) pale orange, skipped tiles empty."""
    n, m = mask.shape
    full, allowed, wasted = to_rgba(s.c), to_rgba(s.a), to_rgba(s.b, 0.35)
    rgba = [[(0, 0, 0, 0)] * m for _ in range(n)]
    for i in range(n):
        for j in range(m):
            state = int(tiles[i // block, j // block])
            if state == 2:
                rgba[i][j] = full
            elif state == 1:
                rgba[i][j] = allowed if bool(mask[i, j]) else wasted
    ax.imshow(rgba, extent=(0, m, n, 0), interpolation="none", aspect="equal")
    ax.hlines(range(0, n + 1, block), 0, m, colors=s.muted, linewidth=1.0)
    ax.vlines(range(0, m + 1, block), 0, n, colors=s.muted, linewidth=1.0)
    ax.set_xlim(0, m)
    ax.set_ylim(n, 0)
    ax.set_xticks(range(0, m + 1, block))
    ax.set_yticks(range(0, n + 1, block))
    ax.tick_params(length=0, labelsize=7)
    ax.xaxis.set_ticks_position("top")
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_title(title, fontsize=8, pad=16)


def flex_block_tiles(s):
    """The tiles create_block_mask sorts: skipped, partial (masked inside) and full."""
    n, block = 16, 4
    patterns = (
        ("causal", causal_mask_mod(n, n)),
        ("window w = 4", sliding_window_mask_mod(4, n, n)),
        ("documents 5, 7, 4", document_mask_mod(document_ids_from_lengths([5, 7, 4]))),
    )
    fig, axes = s.figure(7.4, 3.1, ncols=3, adjust={"left": 0.03, "right": 0.99, "top": 0.77, "bottom": 0.14,
                                                   "wspace": 0.2})
    for ax, (name, mask_mod) in zip(axes, patterns):
        mask = dense_mask(mask_mod, n, n)[0, 0]  # (N, N), True = may attend
        tiles = block_tiles(mask, block)  # (N / 4, N / 4): 0 skipped, 1 partial, 2 full
        computed, partial = computed_block_fraction(mask, block)
        t = tiles.numel()
        _tile_picture(s, ax, mask, tiles, block,
                      f"{name}\n{round(computed * t)} of {t} tiles computed, {round(partial * t)} partial")
    handles = [Patch(facecolor=s.c, label="full tile: no mask evaluated"),
               Patch(facecolor=s.a, label="partial tile: allowed pair"),
               Patch(facecolor=to_rgba(s.b, 0.35), label="partial tile: computed, then masked"),
               Patch(facecolor="none", edgecolor=s.muted, label="skipped tile")]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=7, handlelength=1.2, columnspacing=1.2)
    fig.text(0.5, 0.99, f"N = M = {n}, BLOCK_SIZE = {block}: block_tiles(dense_mask(mask_mod), {block})",
             ha="center", va="top", color=s.muted, fontsize=8)
    return fig


def paged_block_table(s):
    """Three sequences grow in turn; each takes a page from the pool only when it needs one."""
    page_size, n_pages = 4, 12
    cache = PagedKVCache(n_pages, page_size, n_kv_heads=1, d_head=1)
    seqs = [cache.add_sequence() for _ in range(3)]
    one = lambda n: (torch.zeros(1, n, 1), torch.zeros(1, n, 1))  # noqa: E731 - (H_kv, n, d)
    for seq, prompt in zip(seqs, (5, 3, 6)):
        cache.append(seq, *one(prompt))
    for step in range(6):  # decode: sequence 1 stops after two steps, the others go on
        for seq in seqs:
            if seq != 1 or step < 2:
                cache.append(seq, *one(1))
    fig, ax = s.canvas(7.4, 2.3, xlim=(-3.0, 13.4), ylim=(-0.1, 4.8))
    owner = {}
    for row, seq in enumerate(seqs):
        table, length = cache.block_table(seq), cache.lengths[seq]
        y = 4.05 - row * 1.1
        s.label(ax, -0.3, y, f"seq {seq}: {length} tokens", colour=s.ink, ha="right", va="center")
        for logical, page in enumerate(table):
            owner[page] = row
            x = logical * 1.25
            used = min(page_size, length - logical * page_size)
            for slot in range(page_size):
                ax.add_patch(Rectangle((x + slot * 0.25, y - 0.3), 0.23, 0.6, linewidth=0,
                                       facecolor=s.accents[row] if slot < used else s.faint))
            s.label(ax, x + 0.5, y + 0.35, f"→ {page}", colour=s.ink, size=7, ha="center", va="bottom")
    s.label(ax, 4.4, 3.5, "each sequence's logical pages, 4 token slots each;\n"
            "→ n: the physical page its block table names", size=7.5, va="center")
    for page in range(n_pages):
        x = page * 1.1
        colour = s.accents[owner[page]] if page in owner else None
        ax.add_patch(Rectangle((x, 0.0), 0.95, 0.7, facecolor=colour or "none",
                               edgecolor=colour or s.muted, linewidth=1))
        ax.text(x + 0.475, 0.35, str(page), ha="center", va="center", fontsize=7.5,
                color=s.paper if colour else s.muted)
    s.label(ax, -0.3, 0.35, "pool", colour=s.ink, ha="right", va="center")
    s.label(ax, 0, 0.85, f"physical pages, taken from the free list in order; {len(cache.free_pages)} still free",
            size=7.5, va="bottom")
    return fig


def ragged_masks(s):
    """One causal triangle per sequence of a padded batch, right and left padding."""
    lengths, n = [5, 3, 7], 7
    fig, axes = s.figure(5.0, 3.5, ncols=3, nrows=2, adjust={"left": 0.08, "right": 0.98, "top": 0.86,
                                                           "bottom": 0.02, "hspace": 0.3, "wspace": 0.15})
    for row, padding in enumerate(("right", "left")):
        masks = ragged_causal_mask(lengths, n, padding=padding)  # (B, 1, n, n), True = may attend
        for b, length in enumerate(lengths):
            ax, mask = axes[row * 3 + b], masks[b, 0]
            real = mask.diagonal()  # a real slot attends at least to itself
            pad = ~(real[:, None] & real[None, :])  # (n, n): a padding query or a padding key
            ax.imshow([[to_rgba(s.faint) if bool(pad[i, j]) else (0, 0, 0, 0) for j in range(n)] for i in range(n)],
                      extent=(0, n, n, 0), interpolation="none")
            s.mask_grid(ax, mask, f"L = {length}", colour=s.accents[row], xlabel="",
                        ylabel=f"{padding} padding" if b == 0 else "")
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"L = {length}", fontsize=8, pad=3)
    fig.text(0.5, 0.995, "ragged_causal_mask([5, 3, 7], n = 7): grey = padding, never attended",
             ha="center", va="top", color=s.muted, fontsize=8)
    return fig


def _flash_forward_schedule(n: int, m: int, block_m: int, block_n: int) -> list[list[int]]:
    """The key tiles each program of the causal forward in snippets/efficiency/flash_triton.py
    loads, program by program: the kernel's loop ``for start_n in range(0, hi, BLOCK_N)`` with
    ``hi = min(M, max(0, (start_m + 1) * BLOCK_M + M - N))``, written out in Python (a figure
    must not import triton)."""
    schedule = []
    for start_m in range(-(-n // block_m)):  # one program per tile of queries
        hi = min(m, max(0, (start_m + 1) * block_m + m - n))
        schedule.append([start_n // block_n for start_n in range(0, hi, block_n)])
    return schedule


def flash_tile_schedule(s):
    """Which (query tile, key tile) pairs the causal FlashAttention-2 forward computes, for N < M and N > M."""
    block = 16
    fig, axes = s.figure(7.4, 3.4, ncols=2, adjust={"left": 0.08, "right": 0.99, "top": 0.76, "bottom": 0.13,
                                                   "wspace": 0.2})
    allowed_c, masked_c, pad_c = to_rgba(s.a), to_rgba(s.b, 0.4), to_rgba(s.faint)
    for ax, (n, m) in zip(axes, ((40, 72), (72, 40))):
        schedule = _flash_forward_schedule(n, m, block, block)
        rows, cols = -(-n // block), -(-m // block)
        rgba = [[(0, 0, 0, 0)] * (cols * block) for _ in range(rows * block)]
        for p, tiles in enumerate(schedule):
            for t in tiles:
                for i in range(p * block, (p + 1) * block):
                    for j in range(t * block, (t + 1) * block):
                        if i >= n or j >= m:
                            rgba[i][j] = pad_c  # outside the tensors: loaded as zeros, never stored
                        else:
                            rgba[i][j] = allowed_c if j <= i + m - n else masked_c  # lower-right causal
        ax.imshow(rgba, extent=(0, cols * block, rows * block, 0), interpolation="none", aspect="equal")
        ax.hlines(range(0, rows * block + 1, block), 0, cols * block, colors=s.muted, linewidth=0.9)
        ax.vlines(range(0, cols * block + 1, block), 0, rows * block, colors=s.muted, linewidth=0.9)
        ax.plot([0, m, m, 0, 0], [0, 0, n, n, 0], color=s.ink, linewidth=1.2)  # the N x M scores
        ax.set_xlim(-0.5, cols * block + 0.5)
        ax.set_ylim(rows * block + 0.5, -0.5)
        ax.set_xticks(range(0, cols * block + 1, block))
        ax.set_yticks(range(0, rows * block + 1, block))
        ax.tick_params(length=0, labelsize=7)
        ax.xaxis.set_ticks_position("top")
        ax.xaxis.set_label_position("top")
        for side in ax.spines.values():
            side.set_visible(False)
        ax.set_xlabel("key position", fontsize=7.5)
        ax.set_ylabel("query position (program = row of tiles)", fontsize=7.5)
        loaded = sum(len(t) for t in schedule)
        ax.set_title(f"N = {n}, M = {m}: {loaded} of {rows * cols} tiles loaded", fontsize=8.5, pad=24)
        for p, tiles in enumerate(schedule):
            ax.text(cols * block + 1.5, p * block + block / 2, f"{len(tiles)}", fontsize=7, va="center",
                    color=s.muted, clip_on=False)
    handles = [Patch(facecolor=allowed_c, label="computed: key allowed (j ≤ i + M − N)"),
               Patch(facecolor=masked_c, label="computed, then masked"),
               Patch(facecolor=pad_c, label="past the end of Q or K (ragged tile)"),
               Patch(facecolor="none", edgecolor=s.muted, label="never loaded")]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=6.8, handlelength=1.2, columnspacing=1.0)
    fig.text(0.5, 0.995, f"causal forward, BLOCK_M = BLOCK_N = {block}; right of each row: key tiles its program loads",
             ha="center", va="top", color=s.muted, fontsize=8)
    return fig
