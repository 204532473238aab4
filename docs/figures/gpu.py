"""Figures drawn from the newest GPU results file in bench/results (written by
bench/gpu.py on a CUDA machine). The figure cache follows those files."""

from __future__ import annotations

import json

from bench.gpu import latest_results

METHODS = ("SDPA default", "FlexAttention (compiled)", "SDPA FLASH", "Triton (this site)",
           "SDPA EFFICIENT", "SDPA MATH")


def attention_throughput(s):
    """TFLOP/s against N for each method, d = 128, non-causal: forward, then
    forward and backward, from the newest committed run."""
    path = latest_results()
    fig, axes = s.figure(7.4, 2.9, ncols=2, adjust={"left": 0.08, "right": 0.98, "bottom": 0.3,
                                                   "top": 0.8, "wspace": 0.22})
    if path is None:
        for ax in axes:
            ax.text(0.5, 0.5, "no GPU results committed", ha="center", va="center", color=s.ink,
                    transform=ax.transAxes)
        return fig
    results = json.loads(path.read_text(encoding="utf-8"))
    rows = [r for r in results["rows"] if r["section"] == "attention" and r["shape"]["d"] == 128
            and not r["causal"] and r.get("tflops")]
    styles = dict(zip(METHODS, [(s.a, "o", "-"), (s.b, "s", "-"), (s.c, "^", "--"), (s.d, "D", "-"),
                                (s.muted, "v", "--"), (s.ink, "x", ":")]))
    for ax, which in zip(axes, ("fwd", "fwd+bwd")):
        for method in METHODS:
            points = sorted((r["shape"]["N"], r["tflops"]) for r in rows
                            if r["method"] == method and r["pass"] == which)
            if points:
                colour, marker, line = styles[method]
                ax.plot(*zip(*points), marker=marker, linestyle=line, color=colour, markersize=4,
                        label=method)
        ax.set_xscale("log", base=2)
        ax.set_xticks([4096, 8192, 16384], ["4096", "8192", "16384"])
        ax.set_ylim(bottom=0)
        ax.set_xlabel("N = M (B = 4, H = 16, d = 128, bfloat16)")
        ax.set_title("forward" if which == "fwd" else "forward + backward")
    axes[0].set_ylabel("TFLOP/s")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=7, frameon=False)
    fig.text(0.99, 0.97, f"{results['provenance']['device']}, non-causal, {path.name}", ha="right",
             va="top", fontsize=6.5, color=s.muted)
    return fig
