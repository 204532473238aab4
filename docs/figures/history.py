"""Figures of the history pages, computed with the snippets they teach."""

from __future__ import annotations

import pathlib
import re

import torch
from matplotlib.patches import Rectangle

from snippets.history.additive_attention import AdditiveAttention
from snippets.history.bert import SpecialTokens, mask_tokens
from snippets.history.luong_attention import LuongAttention

TIMELINE = pathlib.Path(__file__).resolve().parents[1] / "history" / "timeline.md"


def timeline_years(s):
    """The papers of the timeline page, one dot per paper, read from its tables."""
    rows = re.findall(r"^\| (\d{4}) \| ([^|.,*]+)", TIMELINE.read_text(encoding="utf-8"), re.M)
    if len(rows) < 10:
        raise ValueError(f"expected the timeline's table rows in {TIMELINE}, found {len(rows)}")
    fig, ax = s.figure(7.4, 2.5, adjust={"left": 0.03, "right": 0.99, "bottom": 0.14, "top": 0.97})
    per_year: dict[int, int] = {}
    for year_text, first_author in rows:
        year = int(year_text)
        level = per_year.get(year, 0)
        per_year[year] = level + 1
        colour = s.muted if year < 2014 else s.a if year < 2017 else s.b if year < 2021 else s.c
        x = year if year >= 2013 else 2011.5
        ax.plot([x], [level], "o", color=colour, markersize=5)
        ax.text(x + 0.12, level, first_author.strip().split()[0].rstrip(","), fontsize=6, va="center",
                color=s.ink)
    ax.set_yticks([])
    ax.spines["left"].set_visible(False)
    ax.set_xticks([2011.5, *range(2014, 2024)], ["1964", *[str(y) for y in range(2014, 2024)]])
    ax.set_xlim(2011, 2024.2)
    ax.set_ylim(-0.7, max(per_year.values()) + 0.2)
    return fig


def additive_alignment(s):
    """Bahdanau's score: a small network compares the decoder state with every encoder state."""
    torch.manual_seed(8)
    attn = AdditiveAttention(6, 6, 5).eval()
    query, keys = torch.randn(1, 1, 6), torch.randn(1, 7, 6)
    with torch.no_grad():
        context, weights = attn(query, keys)
    fig, axes = s.figure(7.4, 2.5, ncols=2, gridspec_kw={"width_ratios": [1.4, 1]},
                         adjust={"left": 0.02, "bottom": 0.17, "top": 0.88, "wspace": 0.15})
    ax = axes[0]
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 4.2)
    ax.axis("off")
    s.box(ax, 1.3, 3.3, 2.2, 0.8, "s_(i-1)", colour=s.b)
    s.box(ax, 1.3, 1.0, 2.2, 0.8, "h_j", colour=s.a)
    s.box(ax, 4.6, 2.15, 3.4, 1.0, "vᵀ tanh(W s + U h)", colour=s.d)
    s.box(ax, 8.4, 2.15, 2.2, 0.8, "e_ij", colour=s.ink)
    s.arrow(ax, (2.4, 3.2), (2.9, 2.5))
    s.arrow(ax, (2.4, 1.1), (2.9, 1.8))
    s.arrow(ax, (6.3, 2.15), (7.3, 2.15))
    ax.set_title("additive score (one small network per pair)")
    axes[1].bar(range(7), weights[0, 0].float().tolist(), color=s.a)
    axes[1].set_xlabel("source position j")
    axes[1].set_title("α_ij = softmax_j(e_ij)")
    return fig


def score_functions(s):
    """Dot, general and additive scores: what each compares, and how many parameters."""
    fig, ax = s.canvas(7.4, 2.3, xlim=(0, 18), ylim=(0, 5.4))
    for x, name, formula, params, colour in (
        (3.0, "dot (Luong)", "s · h", "no parameters", s.a),
        (9.0, "general (Luong)", "sᵀ W h", "W: D x D", s.b),
        (15.0, "additive (Bahdanau)", "vᵀ tanh(W s + U h)", "W, U: D_a x D, v: D_a", s.d),
    ):
        ax.text(x, 4.7, name, ha="center", fontsize=9.5, weight="bold", color=s.ink)
        s.box(ax, x, 3.2, 5.2, 1.1, formula, colour=colour, size=10)
        s.label(ax, x, 1.9, params, ha="center")
    s.label(ax, 9.0, 0.6, "scaled dot-product divides the dot score by √d (Vaswani et al., 2017)",
            ha="center", colour=s.ink)
    return fig


def luong_global_local(s):
    """Global attention spreads over every source word; local-p keeps a Gaussian window."""
    torch.manual_seed(9)
    query, keys = torch.randn(1, 1, 8), torch.randn(1, 20, 8)
    global_attn = LuongAttention(8, "general").eval()
    torch.manual_seed(9)
    local_attn = LuongAttention(8, "general", window=3).eval()
    with torch.no_grad():
        _, global_weights = global_attn(query, keys)
        _, local_weights = local_attn(query, keys)
    fig, axes = s.figure(7.4, 2.3, ncols=2, adjust={"left": 0.08, "bottom": 0.2, "top": 0.87}, sharey=True)
    axes[0].bar(range(20), global_weights[0, 0].float().tolist(), color=s.a)
    axes[0].set_title("global: all 20 source states")
    axes[1].bar(range(20), local_weights[0, 0].float().tolist(), color=s.b)
    axes[1].set_title("local-p, R = 3: a window around p_t")
    for ax in axes:
        ax.set_xlabel("source position s")
    axes[0].set_ylabel("weight")
    return fig


def bert_masking(s):
    """BERT's corruption on 40 tokens: 15 % chosen, then 80 % [MASK], 10 % random, 10 % kept."""
    special = SpecialTokens()
    g = torch.Generator().manual_seed(17)
    ids = torch.randint(10, 60, (1, 40), generator=g)
    ids[0, 0], ids[0, -1] = special.cls, special.sep
    corrupted, labels = mask_tokens(ids, 60, special=special, select_prob=0.15, generator=g)
    fig, ax = s.canvas(7.4, 1.9, xlim=(-0.2, 40.2), ylim=(-2.6, 3.2))
    legend = {"kept as is": s.faint, "[MASK]": s.a, "random token": s.b, "chosen, unchanged": s.c,
              "special": s.muted}
    counts: dict[str, int] = {}
    for j in range(40):
        if int(ids[0, j]) in special.ids:
            kind = "special"
        elif int(labels[0, j]) == -100:
            kind = "kept as is"
        elif int(corrupted[0, j]) == special.mask:
            kind = "[MASK]"
        elif int(corrupted[0, j]) != int(ids[0, j]):
            kind = "random token"
        else:
            kind = "chosen, unchanged"
        counts[kind] = counts.get(kind, 0) + 1
        ax.add_patch(Rectangle((j + 0.05, 0), 0.9, 2.0, facecolor=legend[kind], edgecolor="none"))
    for k, (name, colour) in enumerate(legend.items()):
        ax.add_patch(Rectangle((k * 8.2, -2.2), 0.9, 0.9, facecolor=colour, edgecolor="none"))
        ax.text(k * 8.2 + 1.2, -1.75, name, va="center", fontsize=7.5, color=s.ink)
    kinds = [k for k in counts if k in ("[MASK]", "random token", "chosen, unchanged")]
    if [counts[k] for k in kinds] != [4, 1, 1]:  # the page's alternative text says so
        raise ValueError(f"expected 4 [MASK], 1 random, 1 unchanged token, got {counts}; update the alt text")
    ax.text(0, 2.6, "mask_tokens on 40 tokens: the loss sees only the chosen positions", fontsize=8, color=s.ink)
    ax.set_aspect("auto")
    return fig


def gpt_shift(s):
    """Next-token prediction: position t reads tokens 0..t and is scored on token t + 1."""
    tokens = ["a", "b", "c", "d", "e", "f"]
    fig, ax = s.canvas(7.4, 1.9, xlim=(0, 15), ylim=(0, 3.9))
    for t, token in enumerate(tokens):
        x = 2.2 + t * 2.1
        s.box(ax, x, 0.6, 1.4, 0.7, token, colour=s.a)
        if t + 1 < len(tokens):
            s.box(ax, x, 3.2, 1.4, 0.7, tokens[t + 1], colour=s.b)
            s.arrow(ax, (x, 1.0), (x, 2.8))
        for back in range(t):
            s.arrow(ax, (2.2 + back * 2.1 + 0.3, 1.0), (x - 0.2, 2.0), colour=s.faint, rad=-0.1, width=0.8)
    s.label(ax, 0.1, 0.6, "input", colour=s.ink, va="center")
    s.label(ax, 0.1, 3.2, "target", colour=s.ink, va="center")
    return fig
