"""Benchmark: the guide's MultiHeadAttention against nn.MultiheadAttention (CPU).

Run from the repository root: ``python bench/mha.py`` (about a minute on 2 cores).

1. Speed. Forward time of ``MultiHeadAttention`` (no weights requested, so the
   heads run on ``F.scaled_dot_product_attention``) over
   ``nn.MultiheadAttention(batch_first=True)`` called with
   ``need_weights=False``, at B=8, N=512, D=512, H=8, float32. Both modules hold
   the same weights (``from_torch``), run in eval mode under
   ``torch.inference_mode()`` (so PyTorch takes its own fused fast path), and
   are timed in alternation: repeat r times ours, then theirs, then ours... and
   the medians are compared, so a burst of load from other processes lands on
   both. The target is a ratio <= 1.10.

2. Memory. Peak memory of one forward at B=1, N=4096, D=512, H=8 for the fast
   path against the explicit path (``need_weights=True``), which must hold
   (B, H, N, M) float32 scores and weights: 512 MiB per such tensor.
   The CPU has no torch memory counter, so each path is measured in a fresh
   subprocess from the kernel's own count of resident memory: after the module
   and the inputs are allocated and a small warm-up forward has loaded the
   kernels, writing ``5`` to ``/proc/self/clear_refs`` resets the process's
   peak resident set size (``VmHWM``) to its current size; the forward runs;
   the new ``VmHWM`` minus the reset value is the extra memory the forward
   touched at its peak. Resident memory counts whole pages and whatever the
   allocator keeps, so the figures are honest to a few MiB, not to the byte.
   Where ``clear_refs`` is not writable (not Linux) the script falls back to
   ``resource.getrusage().ru_maxrss``, whose starting peak may already be
   higher than the resident size at the start (so it can under-count), and
   says so.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from snippets.attention.multi_head import MultiHeadAttention  # noqa: E402

B, N, D, H = 8, 512, 512, 8
REPEATS, WARMUP = 15, 3
MEM_N = 4096


def time_forward() -> None:
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(D, H, batch_first=True).eval()
    ours = MultiHeadAttention.from_torch(theirs).eval()
    x = torch.randn(B, N, D)

    def run_ours():
        return ours(x)[0]

    def run_theirs():
        return theirs(x, x, x, need_weights=False)[0]

    times = {"ours": [], "theirs": []}
    with torch.inference_mode():
        torch.testing.assert_close(run_ours(), run_theirs(), atol=1e-4, rtol=1e-4)
        for _ in range(WARMUP):
            run_ours(), run_theirs()
        for r in range(REPEATS):
            # Alternate which goes first, so neither always follows the other.
            order = (("ours", run_ours), ("theirs", run_theirs))
            for name, fn in order if r % 2 == 0 else order[::-1]:
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    ours_ms = 1e3 * statistics.median(times["ours"])
    theirs_ms = 1e3 * statistics.median(times["theirs"])
    print(f"forward, B={B} N={N} D={D} H={H} float32, {torch.get_num_threads()} threads, "
          f"median of {REPEATS} interleaved repeats")
    print(f"  {'MultiHeadAttention (SDPA path)':43s} {ours_ms:8.2f} ms")
    print(f"  {'nn.MultiheadAttention(need_weights=False)':43s} {theirs_ms:8.2f} ms")
    print(f"  ratio ours / torch: {ours_ms / theirs_ms:.3f} (target <= 1.10)")


def _peak_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("VmHWM missing from /proc/self/status")


def measure_memory(path: str) -> None:
    """Run in a fresh process: print the peak extra resident MiB of one forward."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H).eval()
    x = torch.randn(1, MEM_N, D)
    need_weights = path == "explicit"
    with torch.inference_mode():
        mha(x[:, :64], need_weights=need_weights)  # load kernels and thread pools
        try:
            Path("/proc/self/clear_refs").write_text("5")
            read, method = _peak_kib, "VmHWM after clear_refs"
        except OSError:
            import resource

            def read() -> int:
                return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

            method = "ru_maxrss (may under-count)"
        before = read()
        out, weights = mha(x, need_weights=need_weights)
        after = read()
    print(f"{(after - before) / 1024:.1f} {method}")


def memory() -> None:
    print(f"peak extra resident memory of one forward, B=1 N=M={MEM_N} D={D} H={H} float32, "
          "each in a fresh process")
    matrix_mib = 1 * H * MEM_N * MEM_N * 4 / 2**20
    results = {}
    for path in ("fast", "explicit"):
        done = subprocess.run(
            [sys.executable, __file__, "--memory", path],
            capture_output=True, text=True, check=True, cwd=ROOT,
        )
        mib, method = done.stdout.split(maxsplit=1)
        results[path] = float(mib)
        label = "fast path (no weights, SDPA)" if path == "fast" else "explicit path (need_weights=True)"
        print(f"  {label:36s} {float(mib):8.1f} MiB   [{method.strip()}]")
    print(f"  one (B, H, N, M) float32 matrix is {matrix_mib:.0f} MiB; "
          f"explicit / fast = {results['explicit'] / max(results['fast'], 0.1):.1f}x")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--memory":
        measure_memory(sys.argv[2])
    else:
        start = time.perf_counter()
        time_forward()
        memory()
        print(f"total {time.perf_counter() - start:.0f} s (CPU shared with other work: "
              "run again if the numbers look noisy)")
