"""Benchmark: what zeroing fully masked rows costs the fast path.

Run from the repository root: ``python bench/empty_rows.py`` (under a minute on
two CPU cores; on a CUDA machine it times the GPU too).

The fast paths call ``F.scaled_dot_product_attention`` and then
``_zero_empty_rows(out, mask)``: one ``any`` over the mask's key axis and one
``masked_fill`` of the output. This script times, on each device present and
in each dtype, the SDPA call alone against the SDPA call plus the zeroing, at
B=4, H=8, N=M=1024, d=64 with a boolean padding mask broadcast over heads
(``(B, 1, 1, M)``, the usual key mask) and with a full ``(B, 1, N, M)`` mask.
Both are timed in alternation (ours, then plain, then ours...) and the medians
compared, so load from other processes lands on both. It prints the ratio
(zeroed / plain) measured in this run; nothing is hard-coded.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from snippets.attention.multi_head import _zero_empty_rows  # noqa: E402

B, H, N, d = 4, 8, 1024, 64
REPEATS, WARMUP = 15, 3


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _time(fn, device: str) -> float:
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - start


def measure(device: str, dtype: torch.dtype, mask_kind: str) -> tuple[float, float]:
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, N, d, device=device, dtype=dtype) for _ in range(3))
    lengths = torch.randint(N // 2, N + 1, (B,), device=device)
    key_mask = torch.arange(N, device=device) < lengths[:, None]  # (B, M)
    mask = key_mask[:, None, None, :] if mask_kind == "key (B,1,1,M)" else (
        key_mask[:, None, None, :] & torch.ones(N, N, dtype=torch.bool, device=device).tril()
    )

    def plain():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def zeroed():
        return _zero_empty_rows(F.scaled_dot_product_attention(q, k, v, attn_mask=mask), mask)

    with torch.inference_mode():
        for _ in range(WARMUP):
            plain(), zeroed()
        times_plain, times_zeroed = [], []
        for _ in range(REPEATS):
            times_zeroed.append(_time(zeroed, device))
            times_plain.append(_time(plain, device))
    return statistics.median(times_plain), statistics.median(times_zeroed)


def main() -> None:
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    print(f"torch {torch.__version__}; B={B} H={H} N=M={N} d={d}; medians of {REPEATS}")
    print(f"{'device':<8}{'dtype':<16}{'mask':<16}{'SDPA ms':>10}{'+ zeroing ms':>14}{'ratio':>8}")
    for device in devices:
        dtypes = [torch.float32, torch.bfloat16] + ([torch.float16] if device == "cuda" else [])
        for dtype in dtypes:
            for mask_kind in ("key (B,1,1,M)", "full (B,1,N,M)"):
                plain, zeroed = measure(device, dtype, mask_kind)
                print(
                    f"{device:<8}{str(dtype).removeprefix('torch.'):<16}{mask_kind:<16}"
                    f"{plain * 1e3:>10.2f}{zeroed * 1e3:>14.2f}{zeroed / plain:>8.3f}"
                )


if __name__ == "__main__":
    main()
