# %% [markdown]
# # Example: context-parallel attention
#
# The [context parallelism page](../distributed/context-parallel.md) splits one
# sequence across $P$ processes. Spawning processes at build time would be slow,
# so this page runs the ring's per-rank steps in one process
# (`simulate_ring_attention` calls the same step function as `ring_attention`
# on each rank's shard) and checks them against
# `F.scaled_dot_product_attention`. The tests run the real thing with 2 and 4
# gloo processes. Letters follow the [notation](../notation.md) page.

# %%
import json
import pathlib

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

import _plotting  # noqa: F401 - the site's figure style
from snippets.distributed.context_parallel import (
    LAYOUTS,
    causal_work_per_rank,
    shard_positions,
    simulate_ring_attention,
)

torch.manual_seed(0)
B, H, N, d = 2, 4, 48, 8
q, k, v = (torch.randn(B, H, N, d, dtype=torch.float64) for _ in range(3))
key_mask = torch.ones(B, N, dtype=torch.bool)
key_mask[1, -10:] = False  # the second sequence is 38 tokens long
allowed = key_mask[:, None, None, :] & torch.ones(N, N, dtype=torch.bool).tril()
reference = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
for layout in LAYOUTS:
    for P in (1, 2, 4, 8):
        out, work = simulate_ring_attention(q, k, v, P, key_mask=key_mask, is_causal=True, layout=layout)
        print(f"{layout:>10}, P = {P}: max |ring - SDPA| = {(out - reference).abs().max().item():.1e}, "
              f"score entries per rank {work}")

# %% [markdown]
# ## Who computes what under a causal mask
#
# Cut the sequence into $2P$ chunks. A tile (query chunk $i$, key chunk $j$) is
# needed only when $j \le i$. Each tile is coloured by the rank that owns its
# query chunk (the rank that computes it); blank tiles are skipped. With the
# contiguous layout rank $P-1$ owns the bottom rows, which are full; with the
# zigzag layout every rank owns one short row and one long row.

# %%
# alt: Two 8 by 8 grids of tiles for P = 4 ranks, query chunks down, key chunks across, lower triangle coloured by the rank that computes each tile. Left, contiguous: rank 0 has 3 tiles at the top, rank 3 has 15 at the bottom. Right, zigzag: each rank has one row near the top and the mirrored row near the bottom, 9 tiles each.
P = 4
fig, axes = plt.subplots(1, 2, figsize=(8.4, 4.2))
colours = plt.get_cmap("tab10")
for ax, layout in zip(axes, LAYOUTS):
    owner = torch.empty(2 * P, dtype=torch.long)
    for rank in range(P):  # with 2 tokens per rank, a token is a chunk of 2P
        owner[shard_positions(2, rank, P, layout)] = rank
    tiles = torch.zeros(2 * P, 2 * P, 4)
    counts = [0] * P
    for i in range(2 * P):
        for j in range(i + 1):
            tiles[i, j] = torch.tensor(colours(owner[i].item()))
            counts[owner[i]] += 1
    tiles[..., 3] = torch.where(tiles[..., 3] > 0, 1.0, 0.0)
    ax.imshow(tiles.numpy())
    ax.set_title(f"{layout}: tiles per rank {counts}")
    ax.set_xlabel("key chunk j")
    ax.set_ylabel("query chunk i")
    ax.set_xticks(range(2 * P))
    ax.set_yticks(range(2 * P))
handles = [plt.Rectangle((0, 0), 1, 1, color=colours(r)) for r in range(P)]
fig.legend(handles, [f"rank {r}" for r in range(P)], loc="lower center", ncol=P)
fig.tight_layout(rect=(0, 0.08, 1, 1))
plt.show()

# %% [markdown]
# The ring does not count tiles of $N/2P$: it computes, per step, the layout's
# chunk pairs that the mask does not hide entirely, and records the score
# entries of each. Those counts, measured by the code at $N = 64P$:

# %%
# alt: Bar chart of score entries computed per rank, relative to the mean, for P = 4 and P = 8. Contiguous bars rise linearly from rank 0 to rank P - 1, the last rank doing 1.6 times the mean at P = 4 and 1.8 times at P = 8; zigzag bars are all exactly at the mean.
fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.2), sharey=True)
for ax, P in zip(axes, (4, 8)):
    for offset, layout in ((-0.2, "contiguous"), (0.2, "zigzag")):
        work = torch.tensor(causal_work_per_rank(64 * P, P, layout), dtype=torch.float64)
        ax.bar(torch.arange(P) + offset, (work / work.mean()).numpy(), width=0.4, label=layout)
        print(f"P = {P}, {layout:>10}: {work.long().tolist()} (slowest / mean = {work.max() / work.mean():.2f})")
    ax.axhline(1.0, color="#1f1f1f", linewidth=0.8)
    ax.set_title(f"P = {P}")
    ax.set_xlabel("rank")
axes[0].set_ylabel("score entries / mean")
axes[0].legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Bytes each device sends per layer
#
# Per layer, in the forward pass, with $N$ tokens, $H$ query heads, $H_{kv}$
# key/value heads of width $d$ and $s$ bytes per element (the page derives the
# counts):
#
# * ring: $P - 1$ key/value blocks, $2 (P-1) \frac{N}{P} H_{kv} d\, s$;
# * all-gather KV: the same $P - 1$ blocks, received in one collective;
# * Ulysses: $q, k, v$ and the output, each leaving $\frac{P-1}{P}$ of the
#   shard: $\frac{P-1}{P} \frac{N}{P} (2H + 2H_{kv}) d\, s$.
#
# The backward pass moves about twice as much again (the ring carries
# $dK, dV$ with $K, V$; all-gather reduce-scatters $dK, dV$; Ulysses swaps four
# gradients). Drawn for a layer of the shape of a large grouped-query model,
# $H = 64$, $H_{kv} = 8$, $d = 128$, bfloat16, $N = 131072$:

# %%
# alt: Log-log plot of forward bytes sent per device per layer against P from 2 to 1024. The ring and all-gather lines are identical and level off near 2 N H_kv d s, about 537 MB; the Ulysses line, drawn up to P = H = 64, falls like 1 / P from about 1.2 GB at P = 2 and crosses below the ring between P = 8 and P = 16.
def forward_bytes(scheme, n, h, h_kv, d, P, s):
    if scheme == "ulysses":
        return (P - 1) / P * (n / P) * (2 * h + 2 * h_kv) * d * s
    return 2 * (P - 1) * (n / P) * h_kv * d * s


Ps = [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
fig, ax = plt.subplots(figsize=(5.6, 3.4))
for scheme, style in (("ring", "-o"), ("allgather", "--"), ("ulysses", "-s")):
    ps = [P for P in Ps if scheme != "ulysses" or P <= 64]  # Ulysses needs P to divide H
    ax.loglog(ps, [forward_bytes(scheme, 131072, 64, 8, 128, P, 2) for P in ps], style, label=scheme, base=2)
ax.set_xlabel("P (devices)")
ax.set_ylabel("bytes sent per device per layer")
ax.set_title("forward pass, N = 131072, H = 64, H_kv = 8, d = 128, bf16")
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# Ulysses needs $P$ to divide $H$ (here it cannot go past $P = 64$ without
# splitting heads), and its bytes shrink with $P$; the ring's stay near $2 N H_{kv} d s$
# however many devices share them, but they travel one hop at a time and can
# hide behind compute.
#
# ## When the ring's transfers hide behind compute
#
# One ring step multiplies a query block of $n = N/P$ rows by a key block of
# $n$ rows: $4 n^2 d H$ floating-point operations in the forward pass
# ($QK^\top$ and $PV$). Meanwhile the next block, $2 n H_{kv} d s$ bytes, crosses
# the link. Compute hides the transfer when
#
# $$
# \frac{4 n^2 d H \cdot c}{F} \;\ge\; \frac{2 n H_{kv} d s}{W}
# \quad\Longleftrightarrow\quad
# n \;\ge\; \frac{H_{kv}\, s\, F}{2 H\, W\, c},
# $$
#
# where $F$ is the GPU's attainable FLOP rate, $W$ the link bandwidth in one
# direction and $c$ the fraction of a step's tile that a causal mask leaves to
# compute (1 without a mask, about $\frac12$ with zigzag). The threshold is a
# block size, so the sequence length needed is $N \ge P\, n_{\min}$. The
# numbers below are assumptions written here, not measurements: $F$ =
# 400 TFLOP/s (about 40% of a dense bf16 peak near 1 PFLOP/s), $W$ = 450 GB/s
# per direction inside an NVLink node and 50 GB/s (400 Gb/s) between nodes.

# %%
# alt: Log-log plot of the shortest sequence N at which the ring's transfers hide behind compute, against P from 8 to 1024, for two assumed links. Both lines rise linearly with P; the 50 GB/s line sits nine times above the 450 GB/s line; the causal versions sit twice as high.
F_RATE, S, H_Q, H_KV = 400e12, 2, 64, 8
Ps = [8, 16, 32, 64, 128, 256, 512, 1024]
fig, ax = plt.subplots(figsize=(5.6, 3.4))
for W, name in ((450e9, "450 GB/s (NVLink, in a node)"), (50e9, "50 GB/s (400 Gb/s, across nodes)")):
    for c, style in ((1.0, "-"), (0.5, "--")):
        n_min = H_KV * S * F_RATE / (2 * H_Q * W * c)
        ax.loglog(Ps, [P * n_min for P in Ps], style, base=2,
                  label=f"{name}{', causal' if c < 1 else ''}")
        if c == 1.0:
            print(f"{name}: block n >= {n_min:,.0f} tokens; N >= {8 * n_min:,.0f} at P = 8, "
                  f"{1024 * n_min:,.0f} at P = 1024")
ax.set_xlabel("P (devices in the ring)")
ax.set_ylabel("shortest N that hides transfers")
ax.set_title(f"F = {F_RATE / 1e12:.0f} TFLOP/s, H = {H_Q}, H_kv = {H_KV}, bf16 (assumed)")
ax.legend(fontsize=7)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Measured on a CPU: gloo at 1, 2 and 4 processes
#
# These numbers are not measured at build time: `bench/context_parallel.py`
# measured them once and wrote `docs/distributed/context_parallel_cpu.json`,
# whose provenance is printed below. The processes share the machine's cores,
# so time does not fall with $P$ here; peak memory per process does.

# %%
# alt: Two log-log panels against N from 256 to 2048 for the ring, Ulysses and all-gather KV at P = 1, 2 and 4 gloo processes on a CPU. Left: time of one forward and backward step. Right: peak extra memory per process, which falls as P grows.
data = json.loads(pathlib.Path("docs/distributed/context_parallel_cpu.json").read_text())
print(json.dumps(data["provenance"], indent=1))
fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.6))
markers = {"ring": "o", "ulysses": "s", "allgather": "^"}
lines = {1: ":", 2: "--", 4: "-"}
for scheme in markers:
    for P in sorted({r["P"] for r in data["rows"]}):
        rows = sorted((r for r in data["rows"] if r["scheme"] == scheme and r["P"] == P), key=lambda r: r["N"])
        ns = [r["N"] for r in rows]
        axes[0].loglog(ns, [r["seconds"] * 1e3 for r in rows], lines.get(P, "-") + markers[scheme],
                       base=2, label=f"{scheme}, P = {P}")
        axes[1].loglog(ns, [max(r["peak_bytes"], 1) / 2**20 for r in rows], lines.get(P, "-") + markers[scheme], base=2)
axes[0].set_ylabel("ms per forward + backward")
axes[1].set_ylabel("peak extra MiB per process")
for ax in axes:
    ax.set_xlabel("N")
axes[0].legend(fontsize=6, ncol=3)
fig.tight_layout()
plt.show()
