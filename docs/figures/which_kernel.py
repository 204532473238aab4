"""Figures of the which-kernel page, computed with the decision table it teaches."""

from __future__ import annotations

from snippets.efficiency.sdpa_probe import choose_backend

MACHINES = [
    ("CPU", {"device": "cpu"}),
    ("A100\nsm80", {"device": "cuda", "sm": (8, 0), "cudnn": 91900}),
    ("H100\nsm90", {"device": "cuda", "sm": (9, 0), "cudnn": 91900}),
    ("H100, env\nvar set", {"device": "cuda", "sm": (9, 0), "cudnn": 91900,
                            "cudnn_deprioritized": True}),
]
CALLS = [
    ("float32", {"dtype": "float32"}),
    ("float32, bool mask", {"dtype": "float32", "mask": "bool"}),
    ("bf16", {"dtype": "bfloat16"}),
    ("bf16, is_causal", {"dtype": "bfloat16", "mask": "causal"}),
    ("bf16, is_causal, N != M", {"dtype": "bfloat16", "mask": "causal", "n": 1, "m": 256}),
    ("bf16, bool mask", {"dtype": "bfloat16", "mask": "bool"}),
    ("bf16, dropout 0.1", {"dtype": "bfloat16", "dropout": 0.1}),
    ("bf16, d = 96, d_v = 64", {"dtype": "bfloat16", "d": 96, "d_v": 64}),
]
SHORT = {"MATH": "math", "FLASH_ATTENTION": "flash", "EFFICIENT_ATTENTION": "efficient",
         "CUDNN_ATTENTION": "cuDNN"}


def backend_grid(s):
    """The backend SDPA picks for eight calls on four machines (torch 2.13, cuDNN 9.19)."""
    colour = {"MATH": s.muted, "FLASH_ATTENTION": s.a, "EFFICIENT_ATTENTION": s.c,
              "CUDNN_ATTENTION": s.b}
    fig, ax = s.figure(7.4, 3.9, adjust={"left": 0.25, "right": 0.99, "top": 0.86,
                                         "bottom": 0.02})
    for col, (_, machine) in enumerate(MACHINES):
        for row, (_, call) in enumerate(CALLS):
            pick = choose_backend({**machine, **call})["backend"]
            text = "CPU flash" if machine["device"] == "cpu" and pick != "MATH" else SHORT[pick]
            s.box(ax, col, -row, 0.86, 0.7, text, colour=colour[pick],
                  filled=True, size=8.5)
    ax.set_xlim(-0.5, len(MACHINES) - 0.5)
    ax.set_ylim(-len(CALLS) + 0.5, 0.5)
    ax.set_xticks(range(len(MACHINES)), [name for name, _ in MACHINES])
    ax.set_yticks([-i for i in range(len(CALLS))], [name for name, _ in CALLS])
    ax.xaxis.tick_top()
    ax.tick_params(length=0)
    for side in ("left", "bottom", "top", "right"):
        ax.spines[side].set_visible(False)
    return fig
