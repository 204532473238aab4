"""Time every recurrent / parallel / chunked triple of the linear pages, and MLA decoding.

    python bench/linear_forms.py            # N = 4096, B = 1, H = 4, d = 64, one thread
    python bench/linear_forms.py --smoke    # tiny sizes: the script still runs (tests)

Every ratio is taken within one run, on one thread (``torch.set_num_threads(1)``),
so a busy machine slows both sides alike. The target the pages state: every
chunked form at most 0.35 of its recurrence's time at N = 4096.

Forms timed (float32 inputs):

* linear attention (``snippets/efficiency/linear_attention.py``): the step loop,
  the cumulative-sum form, and the chunked form (GLA's chunks with no decay,
  once for the numerator and once, with v = 1, for the normaliser);
* GLA, DeltaNet, Gated DeltaNet and SSD: ``*_recurrent``, ``*_parallel`` /
  ``ssd_attention`` and ``*_chunked`` from ``snippets/linear/``;
* MLA decoding at DeepSeek-V3's widths (D = 7168, H = 128, d_c = 512, d_R = 64,
  d_h = d_v = 128, q rank 1536), one new token over a cache of M tokens, naive
  (per-head keys and values rebuilt from the latents) against absorbed (the
  query moved into the latent space). ``absorbed_weights`` is folded once
  before timing, as a server would keep it.
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import sys
import time

import torch
import torch.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from snippets.efficiency.linear_attention import (  # noqa: E402
    feature_map,
    linear_attention,
    linear_attention_step,
)
from snippets.linear.delta_rule import (  # noqa: E402
    delta_rule_chunked,
    delta_rule_parallel,
    delta_rule_recurrent,
)
from snippets.linear.gated_linear_attention import (  # noqa: E402
    gla_chunked,
    gla_parallel,
    gla_recurrent,
)
from snippets.linear.state_space_duality import (  # noqa: E402
    ssd_attention,
    ssd_chunked,
    ssd_recurrent,
)

TARGET = 0.35


def best_of(fn, repeats: int) -> float:
    """The fastest of ``repeats`` calls, in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def linear_recurrent(q, k, v):
    state, outs = None, []
    for t in range(q.shape[2]):
        out, state = linear_attention_step(q[:, :, t], k[:, :, t], v[:, :, t], state)
        outs.append(out)
    return torch.stack(outs, dim=2)


def linear_chunked(q, k, v, chunk: int = 64):
    """Causal linear attention in chunks: tril(phi(Q) phi(K)^T) inside a chunk, the
    running state between chunks (a cumulative sum over chunks: no decay, no loop).
    The normaliser rides along as one more value column of ones."""
    b, h, n, _ = q.shape
    pad = -n % chunk
    q, k = (F.pad(feature_map(t), (0, 0, 0, pad)) for t in (q, k))  # padded keys: phi(0) != 0
    v1 = F.pad(torch.cat([v, torch.ones_like(v[..., :1])], dim=-1), (0, 0, 0, pad))  # zero rows
    q, k, v1 = (t.unflatten(2, (-1, chunk)) for t in (q, k, v1))  # (B, H, n_c, C, .)
    writes = k.transpose(-2, -1) @ v1  # (B, H, n_c, d, d_v + 1)
    entering = writes.cumsum(dim=2) - writes  # the state before each chunk
    out = q @ entering + (q @ k.transpose(-2, -1)).tril() @ v1  # (B, H, n_c, C, d_v + 1)
    out = out.flatten(2, 3)[:, :, :n]
    return out[..., :-1] / (out[..., -1:] + 1e-6)


def triples(n: int, b: int, h: int, d: int) -> dict[str, dict[str, object]]:
    gen = torch.Generator(device=torch.get_default_device()).manual_seed(0)
    q, k, v = (torch.randn(b, h, n, d, generator=gen) for _ in range(3))
    g = -torch.rand(b, h, n, d, generator=gen) * 0.1
    k_unit = F.normalize(k, dim=-1)
    beta = torch.rand(b, h, n, generator=gen)
    g_head = -torch.rand(b, h, n, generator=gen) * 0.1
    dt = torch.rand(b, h, n, generator=gen) * 0.5
    a_log = -torch.rand(h, generator=gen) - 0.1
    return {
        "linear attention": {
            "recurrent": lambda: linear_recurrent(q, k, v),
            "parallel": lambda: linear_attention(q, k, v, causal=True),
            "chunked": lambda: linear_chunked(q, k, v),
        },
        "GLA": {
            "recurrent": lambda: gla_recurrent(q, k, v, g),
            "parallel": lambda: gla_parallel(q, k, v, g),
            "chunked": lambda: gla_chunked(q, k, v, g),
        },
        "DeltaNet": {
            "recurrent": lambda: delta_rule_recurrent(q, k_unit, v, beta),
            "parallel": lambda: delta_rule_parallel(q, k_unit, v, beta),
            "chunked": lambda: delta_rule_chunked(q, k_unit, v, beta),
        },
        "Gated DeltaNet": {
            "recurrent": lambda: delta_rule_recurrent(q, k_unit, v, beta, g_head),
            "parallel": lambda: delta_rule_parallel(q, k_unit, v, beta, g_head),
            "chunked": lambda: delta_rule_chunked(q, k_unit, v, beta, g_head),
        },
        "SSD": {
            "recurrent": lambda: ssd_recurrent(v, dt, a_log, q, k),
            "parallel": lambda: ssd_attention(v, dt, a_log, q, k),
            "chunked": lambda: ssd_chunked(v, dt, a_log, q, k),
        },
    }


def mla_decoding(widths: dict, cache_lengths: list[int], repeats: int) -> list[tuple]:
    """(M, naive seconds, absorbed seconds) for one token over a cache of M tokens."""
    from snippets.modern.latent_attention import LatentCache, MultiHeadLatentAttention

    d_model, n_heads = widths.pop("d_model"), widths.pop("n_heads")
    mla = MultiHeadLatentAttention(d_model, n_heads, **widths).eval()
    folded = mla.absorbed_weights()
    mla.absorbed_weights = functools.partial(lambda w: w, folded)  # folded once
    rows = []
    gen = torch.Generator(device=torch.get_default_device()).manual_seed(1)
    with torch.no_grad():
        for m in cache_lengths:
            cache = LatentCache(1, widths["kv_lora_rank"], widths["rope_dim"], m + 1)
            cache.c[:, :m] = torch.randn(1, m, widths["kv_lora_rank"], generator=gen)
            cache.k_rope[:, :m] = torch.randn(1, m, widths["rope_dim"], generator=gen)
            x = torch.randn(1, 1, d_model, generator=gen)
            times = {}
            for absorbed in (False, True):
                def step(absorbed=absorbed):
                    cache.seq_len = m  # the same cache every call
                    mla(x, cache=cache, absorbed=absorbed)
                times[absorbed] = best_of(step, repeats)
            rows.append((m, times[False], times[True]))
    return rows


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.smoke:
        n, b, h, d, repeats, parallel_max = 64, 1, 2, 8, 1, 64
        widths = dict(d_model=32, n_heads=2, kv_lora_rank=8, q_lora_rank=12, qk_nope_head_dim=8,
                      rope_dim=4, v_head_dim=8)
        lengths = [16, 64]
    else:
        n, b, h, d, repeats, parallel_max = 4096, 1, 4, 64, 2, 4096
        widths = dict(d_model=7168, n_heads=128, kv_lora_rank=512, q_lora_rank=1536,
                      qk_nope_head_dim=128, rope_dim=64, v_head_dim=128)
        lengths = [256, 1024, 4096]
    print(f"N = {n}, B = {b}, H = {h}, d = {d}, one thread, torch {torch.__version__}")
    results = {}
    for name, forms in triples(n, b, h, d).items():
        t = {form: best_of(fn, 1 if form == "parallel" else repeats) for form, fn in forms.items()
             if form != "parallel" or n <= parallel_max}
        results[name] = t
        print(f"{name:15s} recurrent {t['recurrent']:8.3f} s  parallel {t['parallel']:8.3f} s  "
              f"chunked {t['chunked']:8.3f} s  chunked / recurrent {t['chunked'] / t['recurrent']:.3f}"
              f"{'' if t['chunked'] <= TARGET * t['recurrent'] else '  (over the target)'}")
    rows = mla_decoding(dict(widths), lengths, repeats)
    results["MLA"] = rows
    for m, naive, absorbed in rows:
        print(f"MLA decode, cache {m:6d}: naive {naive * 1e3:8.2f} ms  absorbed {absorbed * 1e3:8.2f} ms"
              f"  absorbed / naive {absorbed / naive:.3f}")
    return results


if __name__ == "__main__":
    main()
