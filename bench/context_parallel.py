"""Context-parallel attention on the CPU: gloo at 1, 2 and 4 processes.

Run from the repository root (one to three minutes on two CPU cores)::

    python bench/context_parallel.py            # prints a table, writes the JSON
    python bench/context_parallel.py --no-write # prints only

It writes ``docs/distributed/context_parallel_cpu.json``, which the executed
example ``docs/examples/context_parallel.py`` draws, with its provenance
(CPU, core count, load average, torch version, date, commit). Page:
docs/distributed/context-parallel.md.

What is measured (float32, causal, B = 1, H = 4, d = 32, one thread per
process): one forward and backward pass of ``ring_attention`` (zigzag),
``ulysses_attention`` and ``allgather_kv_attention`` from
``snippets.distributed.context_parallel``, each process holding N / P tokens.

* Time: every process times its own call between two barriers; the step takes
  as long as the slowest process, so the maximum over processes is kept, and
  the median of ``--repeats`` rounds after one warm-up round is reported.
* Peak memory per process: the kernel's peak-RSS mark is reset (``5`` into
  ``/proc/self/clear_refs``) before the call and ``VmHWM`` minus the RSS at
  that moment is read after it: the extra memory the call needed (scores,
  blocks in flight, saved tensors, gradients). The maximum over processes is
  reported. Where the mark cannot be reset, ``-1`` is stored.

On this machine the P processes share the same cores, so more processes do
not make a step faster here; what the numbers show is the per-process memory
falling with P and the cost of the collectives. On GPUs each process has its
own device and the compute per process falls like 1 / P.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "docs" / "distributed" / "context_parallel_cpu.json"
B, H, D_HEAD = 1, 4, 32
SCHEMES = ("ring", "ulysses", "allgather")


def _status(field: str) -> int:
    """A ``Vm...`` line of /proc/self/status in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _worker(rank: int, world_size: int, folder: str, sizes: list[int], repeats: int) -> None:
    import torch
    import torch.distributed as dist

    from snippets.distributed.context_parallel import (
        allgather_kv_attention,
        ring_attention,
        shard_sequence,
        ulysses_attention,
    )

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=120))
    functions = {
        "ring": lambda q, k, v: ring_attention(q, k, v, is_causal=True, layout="zigzag"),
        "ulysses": lambda q, k, v: ulysses_attention(q, k, v, is_causal=True),
        "allgather": lambda q, k, v: allgather_kv_attention(q, k, v, is_causal=True, layout="zigzag"),
    }
    layouts = {"ring": "zigzag", "ulysses": "contiguous", "allgather": "zigzag"}
    rows = []
    for n in sizes:
        g = torch.Generator(device=torch.get_default_device()).manual_seed(n)
        whole = [torch.randn(B, H, n, D_HEAD, generator=g) for _ in range(4)]
        for scheme in SCHEMES:
            q, k, v, grad = (shard_sequence(t, rank, world_size, layouts[scheme]) for t in whole)
            times, peaks = [], []
            for i in range(repeats + 1):
                leaves = [t.clone().requires_grad_() for t in (q, k, v)]
                dist.barrier()
                can_reset = _reset_peak()
                base = _status("VmRSS")
                start = time.perf_counter()
                functions[scheme](*leaves).backward(grad)
                elapsed = time.perf_counter() - start
                peak = _status("VmHWM") - base if can_reset else -1
                if i:  # the first round warms up
                    times.append(elapsed)
                    peaks.append(peak)
                del leaves
            stats = torch.tensor([statistics.median(times), float(max(peaks))], dtype=torch.float64)
            dist.all_reduce(stats, op=dist.ReduceOp.MAX)  # the slowest and the largest process
            rows.append({"scheme": scheme, "P": world_size, "N": n,
                         "seconds": stats[0].item(), "peak_bytes": int(stats[1].item())})
    if rank == 0:
        Path(folder, "rows.json").write_text(json.dumps(rows))
    dist.destroy_process_group()


def measure(world_size: int, sizes: list[int], repeats: int) -> list[dict]:
    """Start ``world_size`` gloo processes and return their measurements."""
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "65536"}
        procs = [
            subprocess.Popen([sys.executable, __file__, "--worker", str(r), str(world_size), folder,
                              json.dumps(sizes), str(repeats)], env=env)
            for r in range(world_size)
        ]
        for p in procs:
            if p.wait(timeout=900) != 0:
                raise RuntimeError(f"a benchmark process of the world of {world_size} failed")
        return json.loads(Path(folder, "rows.json").read_text())


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=10).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 2048])
    parser.add_argument("--worlds", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    import torch

    rows = [row for p in args.worlds for row in measure(p, args.sizes, args.repeats)]
    result = {
        "provenance": {
            "script": "bench/context_parallel.py",
            "cpu": _cpu_name(),
            "cores": os.cpu_count(),
            "load_average_at_start": os.getloadavg(),
            "torch": torch.__version__,
            "backend": "gloo",
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": _commit(),
            "shape": {"B": B, "H": H, "d": D_HEAD, "dtype": "float32", "is_causal": True},
            "threads_per_process": 1,
            "repeats": args.repeats,
        },
        "rows": rows,
    }
    print(f"{'scheme':<10}{'P':>3}{'N':>7}{'ms/step':>10}{'peak MiB/process':>18}")
    for row in rows:
        print(f"{row['scheme']:<10}{row['P']:>3}{row['N']:>7}{row['seconds'] * 1e3:>10.1f}"
              f"{row['peak_bytes'] / 2**20:>18.1f}")
    print(json.dumps(result["provenance"]))
    if not args.no_write:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _worker(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], json.loads(sys.argv[5]), int(sys.argv[6]))
    else:
        main()
