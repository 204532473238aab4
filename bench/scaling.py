"""Time and memory of attention against sequence length, and KV-cache decoding speed.

Run the full benchmark from the repository root (about 2 to 3 minutes on two
CPU cores)::

    python bench/scaling.py

The executed page ``docs/examples/performance.py`` imports the same functions
with a smaller range of N. Page: docs/efficiency/performance.md.

What is measured (float32, B = 1, H = 8, d = 64 unless told otherwise):

* ``explicit``: softmax(q k^T / sqrt(d)) v written out, causal, holding the
  (B, H, N, N) scores;
* ``tiled``: ``snippets.efficiency.tiled_attention.tiled_attention`` (online softmax over
  blocks of keys and queries), causal;
* ``sliding window``: ``snippets.efficiency.sliding_window.sliding_window_attention``
  with a causal window w = 256;
* ``linear``: ``snippets.efficiency.linear_attention.linear_attention``,
  non-causal (its causal form keeps a (B, H, N, d, d) prefix sum, which is a
  different memory story);
* ``sdpa``: ``F.scaled_dot_product_attention(..., is_causal=True)``, PyTorch's
  fused kernel.

Method:

* Time: ``time.perf_counter`` around one call under ``torch.no_grad()``, after
  one warm-up call per method and size. For each N the methods are run in
  turn, ``repeats`` rounds, in a rotating order, so that a slow moment of a
  shared machine hits every method alike; the median is reported. Numbers
  are only compared within one run.
* Peak extra memory: PyTorch has no CPU memory counter, so memory is read
  from the operating system in a fresh child process that has imported only
  torch and the snippets. For each (method, N) point the child builds q, k, v,
  warms the method up on a tiny input, resets the kernel's peak-RSS mark
  (writing ``5`` to ``/proc/self/clear_refs``) and reads its resident set
  size; after one call, the peak (``VmHWM``) minus that baseline is the extra
  memory the call needed: scores, temporaries and the output. The child runs
  with ``MALLOC_MMAP_THRESHOLD_=65536`` so that freed blocks go back to the
  kernel and cannot hide the next point's allocations. Where the peak mark
  cannot be reset (macOS), every point gets its own process and ``ru_maxrss``
  above the post-setup RSS is used.
* Threads: one by default (``--threads``). On a machine shared with other
  jobs, several processes' OpenMP threads oversubscribe the cores, and a loop
  of many small parallel operations (the tiled loop) suffers far more than one
  fused kernel; one thread per process keeps the comparison fair and the
  numbers stable. The thread count is printed and drawn on the figure.
* Decoding: greedy generation of ``n_new`` tokens after a 64-token prompt by a
  small decoder (``snippets.efficiency.kv_cache.TinyDecoder``, D = 256, H = 8,
  two layers), with a KV cache (one token per step) and without (the whole
  sequence again at every step), alternated.
* Slopes: a least-squares line through (log N, log value) over the larger
  sizes; about 2 means quadratic, about 1 linear.
"""

from __future__ import annotations

import math
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python bench/scaling.py` puts bench/, not the root, on the path
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from snippets.efficiency.kv_cache import TinyDecoder, generate  # noqa: E402
from snippets.efficiency.linear_attention import linear_attention  # noqa: E402
from snippets.efficiency.sliding_window import sliding_window_attention  # noqa: E402
from snippets.efficiency.tiled_attention import tiled_attention  # noqa: E402

__all__ = [
    "METHODS", "MAX_N", "make_qkv", "time_methods", "measure_memory",
    "decode_tokens_per_second", "fit_slope", "environment", "plot_scaling", "check_targets",
]

B, H, D_HEAD = 1, 8, 64
WINDOW = 256
BLOCK_Q, BLOCK_K = 256, 512


def explicit_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal softmax(q k^T / sqrt(d)) v with the whole (B, H, N, N) score matrix."""
    n = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, N, d) @ (B, H, d, N) -> (B, H, N, N)
    causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()  # (N, N)
    scores = scores.masked_fill(~causal, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v  # (B, H, N, N) @ (B, H, N, d) -> (B, H, N, d)


METHODS: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "explicit": explicit_attention,
    "tiled": lambda q, k, v: tiled_attention(q, k, v, is_causal=True, block_size_k=BLOCK_K, block_size_q=BLOCK_Q),
    "sliding window": lambda q, k, v: sliding_window_attention(q, k, v, WINDOW, causal=True),
    "linear": lambda q, k, v: linear_attention(q, k, v),
    "sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
}
# Above these sizes a method is skipped: the explicit scores alone would take
# 8 x N^2 x 4 bytes (8 GiB at N = 16384), and the Python tiling loop gets slow.
MAX_N = {"explicit": 4096, "tiled": 4096}


def make_qkv(n: int, *, dtype: torch.dtype = torch.float32, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Random (B, H, N, d) queries, keys and values."""
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    return tuple(torch.randn(B, H, n, D_HEAD, generator=g, dtype=dtype) for _ in range(3))


def _methods_for(n: int, methods: Sequence[str]) -> list[str]:
    return [m for m in methods if n <= MAX_N.get(m, n)]


@torch.no_grad()
def time_methods(ns: Sequence[int], methods: Sequence[str] = tuple(METHODS), *,
                 repeats: int = 3, big_n: int = 8192) -> dict[str, dict[int, float]]:
    """Median seconds per call, methods interleaved within each size.

    Args:
        ns: sequence lengths, ascending.
        methods: keys of ``METHODS``.
        repeats: rounds per size; sizes of ``big_n`` and above get one round
            (a single call there lasts seconds, and noise is small next to it).

    Returns:
        ``{method: {N: seconds}}``.
    """
    times: dict[str, dict[int, list[float]]] = {m: {} for m in methods}
    warm = set()
    for n in ns:
        q, k, v = make_qkv(n)
        names = _methods_for(n, methods)
        for name in names:
            if name not in warm:  # first calls pay for allocation and thread start-up
                METHODS[name](q, k, v)
                warm.add(name)
        for r in range(repeats if n < big_n else 1):
            order = names[r % len(names):] + names[: r % len(names)]  # rotate who goes first
            for name in order:
                t0 = time.perf_counter()
                METHODS[name](q, k, v)
                times[name].setdefault(n, []).append(time.perf_counter() - t0)
    return {m: {n: statistics.median(ts) for n, ts in per.items()} for m, per in times.items()}


def _rss_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _can_reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # "5" resets the peak-RSS mark (VmHWM) to the current RSS
        return _rss_kib("VmHWM") is not None
    except OSError:
        return False


@torch.no_grad()
def _memory_worker(points: list[tuple[str, int]]) -> list[tuple[str, int, int]]:
    """Runs in the child process: peak extra bytes of each (method, N) point.

    With a resettable peak mark (Linux) every point is measured here in turn;
    without one, only the first point is measured (``ru_maxrss`` never goes
    down, so each point needs a fresh process).
    """
    results = []
    for name, n in points:
        q, k, v = make_qkv(n)
        METHODS[name](*make_qkv(64))  # load kernels and start threads outside the measurement
        if _can_reset_peak():
            base = _rss_kib("VmRSS")
            out = METHODS[name](q, k, v)
            peak = _rss_kib("VmHWM")
            unit = 1024
        else:
            base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            out = METHODS[name](q, k, v)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            unit = 1 if sys.platform == "darwin" else 1024  # ru_maxrss is bytes on macOS
            results.append((name, n, max(peak - base, 0) * unit))
            break
        del out, q, k, v
        results.append((name, n, max(peak - base, 0) * unit))
    return results


def measure_memory(ns: Sequence[int], methods: Sequence[str] = tuple(METHODS)) -> dict[str, dict[int, int]]:
    """Peak extra bytes of one call, ``{method: {N: bytes}}``, measured in a child process.

    The child runs with ``MALLOC_MMAP_THRESHOLD_=65536``: every block of 64 KiB
    or more then comes from (and goes back to) the kernel, so memory freed by
    one point cannot hide the next point's allocations.
    """
    points = [(m, n) for n in ns for m in _methods_for(n, methods)]
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    mem: dict[str, dict[int, int]] = {m: {} for m in methods}
    while points:
        proc = subprocess.run(
            [sys.executable, "-m", "bench.scaling", "--memory-worker", json.dumps(points),
             "--threads", str(torch.get_num_threads())],
            cwd=ROOT, env=env, capture_output=True, text=True,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"memory measurement failed:\n{proc.stderr[-2000:]}")
        done = json.loads(proc.stdout.strip().splitlines()[-1])
        for name, n, nbytes in done:
            mem[name][n] = nbytes
        points = points[len(done):]
    return mem


@torch.no_grad()
def decode_tokens_per_second(n_new: int = 256, *, prompt_len: int = 64, d_model: int = 256,
                             n_heads: int = 8, n_layers: int = 2, repeats: int = 1,
                             vocab_size: int = 512) -> dict[str, float]:
    """Generated tokens per second, with and without a KV cache (alternated).

    Returns:
        ``{"with cache": tokens/s, "without cache": tokens/s}`` (best of ``repeats``).
    """
    torch.manual_seed(0)
    model = TinyDecoder(vocab_size, d_model, n_heads, n_layers, max_len=prompt_len + n_new).eval()
    prompt = torch.randint(0, vocab_size, (1, prompt_len))
    generate(model, prompt, 4, use_cache=True)  # warm-up
    generate(model, prompt, 4, use_cache=False)
    best = {"with cache": 0.0, "without cache": 0.0}
    for _ in range(repeats):
        for label, use_cache in (("with cache", True), ("without cache", False)):
            t0 = time.perf_counter()
            generate(model, prompt, n_new, use_cache=use_cache)
            best[label] = max(best[label], n_new / (time.perf_counter() - t0))
    return best


def fit_slope(values: dict[int, float], *, min_n: int = 0) -> float:
    """Slope of log(value) against log(N), least squares, over N >= min_n."""
    pts = [(math.log(n), math.log(y)) for n, y in sorted(values.items()) if n >= min_n and y > 0]
    if len(pts) < 2:
        return float("nan")
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def environment() -> str:
    """One line naming what the numbers were measured on."""
    cpu = platform.processor() or platform.machine()
    return (f"CPU ({cpu}), float32, B={B}, H={H}, d={D_HEAD}, torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads, {os.cpu_count()} cores visible")


def plot_scaling(times: dict[str, dict[int, float]], mem: dict[str, dict[int, int]] | None = None,
                 *, min_n: int = 0, slopes: bool = True):
    """Log-log plots of time (and memory) against N; with ``slopes``, the
    slope fitted over N >= ``min_n`` in the legend."""
    import matplotlib.pyplot as plt

    colours = {name: f"C{i}" for i, name in enumerate(METHODS)}  # one colour per method in both panels
    panels = 2 if mem else 1
    fig, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 4.2), squeeze=False)
    for name, per in times.items():
        if per:
            ns = sorted(per)
            axes[0, 0].loglog(ns, [per[n] * 1e3 for n in ns], "o-", color=colours.get(name),
                              label=f"{name} (slope {fit_slope(per, min_n=min_n):.2f})" if slopes else name)
    axes[0, 0].set(xlabel="sequence length N", ylabel="time per call (ms)", title="Time")
    if mem:
        for name, per in mem.items():
            pts = {n: b for n, b in per.items() if b > 0}
            if pts:
                ns = sorted(pts)
                axes[0, 1].loglog(ns, [pts[n] / 2**20 for n in ns], "o-", color=colours.get(name),
                                  label=f"{name} (slope {fit_slope(pts, min_n=min_n):.2f})" if slopes else name)
        axes[0, 1].set(xlabel="sequence length N", ylabel="peak extra memory (MiB)", title="Memory")
    for ax in axes[0]:
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(environment(), fontsize=8)
    fig.tight_layout()
    return fig


def check_targets(times, mem, decode) -> list[tuple[str, float, str, bool]]:
    """The performance targets: (what, measured ratio, target, met?)."""
    rows = []

    def add(what, num, den, target, ok):
        if num is not None and den:
            ratio = num / den
            rows.append((what, ratio, target, ok(ratio)))

    add("tiled / sdpa time at N=4096", times.get("tiled", {}).get(4096),
        times.get("sdpa", {}).get(4096), "<= 3", lambda r: r <= 3)
    add("tiled / explicit peak memory at N=4096", mem.get("tiled", {}).get(4096),
        mem.get("explicit", {}).get(4096), "<= 1/8", lambda r: r <= 1 / 8)
    add("sliding window / sdpa time at N=16384", times.get("sliding window", {}).get(16384),
        times.get("sdpa", {}).get(16384), "< 1", lambda r: r < 1)
    sw = {n: b for n, b in mem.get("sliding window", {}).items() if b > 0}
    if len([n for n in sw if n >= 4096]) >= 2:
        # Over the largest sizes: below them a fixed chunk buffer hides the O(N) growth.
        slope = fit_slope(sw, min_n=4096)
        rows.append(("sliding window memory slope, N >= 4096", slope, "<= 1.3 (linear)", slope <= 1.3))
    if decode:
        add("decode tokens/s with / without KV cache", decode["with cache"],
            decode["without cache"], ">= 5", lambda r: r >= 5)
    return rows


def _table(title: str, data: dict[str, dict[int, float]], fmt: Callable[[float], str]) -> None:
    ns = sorted({n for per in data.values() for n in per})
    print(f"\n{title}")
    print(f"{'N':>16}" + "".join(f"{n:>10}" for n in ns))
    for name, per in data.items():
        print(f"{name:>16}" + "".join(f"{fmt(per[n]) if n in per else '-':>10}" for n in ns))


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads; 0 keeps torch's own choice (default: 1, see below)")
    parser.add_argument("--memory-worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--plot", type=Path, default=None, help="save the figure to this file")
    args = parser.parse_args(argv)
    if args.memory_worker is not None:  # the child process of measure_memory
        if args.threads:
            torch.set_num_threads(args.threads)
        print(json.dumps(_memory_worker([tuple(p) for p in json.loads(args.memory_worker)])))
        return
    if args.threads:
        torch.set_num_threads(args.threads)
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # the memory children inherit it
    start = time.perf_counter()
    print(environment())
    times = time_methods([512, 1024, 2048, 4096, 8192, 16384], repeats=3)
    _table("time per call (ms; median of 3 below N=8192, one call above)", times, lambda s: f"{s * 1e3:.1f}")
    mem = measure_memory([512, 1024, 2048, 4096, 8192], [m for m in METHODS if m != "sliding window"])
    mem["sliding window"] = measure_memory([1024, 2048, 4096, 8192, 16384], ["sliding window"])["sliding window"]
    mem = {name: mem[name] for name in METHODS}  # table and figure in one order
    _table("peak extra memory (MiB)", mem, lambda b: f"{b / 2**20:.1f}")
    print("\nlog-log slopes over N >= 1024 (time, memory):")
    for name in METHODS:
        print(f"  {name:>16}: {fit_slope(times[name], min_n=1024):.2f}, "
              f"{fit_slope({n: b for n, b in mem[name].items() if b > 0}, min_n=1024):.2f}")
    decode = decode_tokens_per_second(256, prompt_len=64, repeats=1)
    print(f"\ndecoding 256 tokens after a 64-token prompt: {decode['with cache']:.0f} tokens/s with a KV cache, "
          f"{decode['without cache']:.0f} tokens/s without")
    print("\ntargets:")
    for what, ratio, target, ok in check_targets(times, mem, decode):
        print(f"  {what:<42} {ratio:8.3f}  target {target:<18} {'MET' if ok else 'NOT MET'}")
    if args.plot:
        plot_scaling(times, mem, min_n=1024).savefig(args.plot)
        print(f"figure written to {args.plot}")
    print(f"\nfinished in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
