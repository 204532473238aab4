"""Every GPU figure of the efficiency pages, measured side by side in one run.

    python bench/gpu.py                    # on a CUDA machine: writes bench/results/gpu-<date>.json
    python bench/gpu.py --quick            # fewer sizes and iterations (a first look)
    python bench/gpu.py --cpu-smoke --out smoke.json   # a tiny CPU run of the same code paths

What it measures (bfloat16 unless stated; B = 4, H = 16, so B * H = 64):

* attention, forward and forward + backward, d = 64 and 128, N = M = 4096,
  8192, 16384, non-causal and causal: SDPA with its default choice, with each
  backend forced (FLASH, EFFICIENT, MATH where the N x N matrix fits), the
  Triton kernel of snippets/efficiency/flash_triton.py and compiled
  FlexAttention;
* sliding window w = 256 (compiled FlexAttention with a block mask) against
  full causal SDPA, N = 4096 to 16384;
* greedy decoding of 256 tokens after a 512-token prompt with a decoder of
  GPT-2-small size (12 layers, D = 768, H = 12, random weights), float32 and
  bfloat16: recomputing everything, the dynamic KV cache, the static cache
  eager, and the static cache compiled with CUDA graphs; then the same on the
  CPU at a reduced size.

Every speed row carries a correctness check against the MATH backend (attention:
the output and, for forward + backward, the gradients, on one batch element and
two heads; decoding: the tokens of the cached run forced onto MATH). The JSON
records its provenance: GPU, torch, CUDA, cuDNN and Triton versions, date and git
commit. The GPU run goes in steps, every section at N = 4096 first, and rewrites
the file after each step, so a run cut short keeps what it measured and the page
names the steps it did not reach. Without a CUDA device the script says so and
exits with status 2, writing nothing (``--cpu-smoke`` runs the tiny CPU version,
for the tests).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import math
import pathlib
import platform
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python bench/gpu.py` from anywhere
    sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"
SCHEMA = 1
PROVENANCE_KEYS = ("device", "torch", "cuda", "cudnn", "triton", "python", "date", "commit")
ROW_KEYS = ("section", "method", "dtype", "shape", "ms", "check")


# ----------------------------------------------------------------------------
# Provenance and the file
# ----------------------------------------------------------------------------
def git_commit(root: pathlib.Path = ROOT) -> str:
    """HEAD's hash, with ``-dirty`` when the working tree has changes; ``unknown`` outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def provenance(device: torch.device) -> dict[str, str | None]:
    """What measured the numbers: the device, every version that matters, the date, the commit."""
    try:
        triton_version = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        triton_version = None
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda"
        else f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": str(cudnn) if cudnn else None,
        "triton": triton_version,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(),
    }


def validate_results(results: dict) -> None:
    """Raise ValueError naming the first thing a results file lacks."""
    if not isinstance(results, dict):
        raise ValueError(f"results must be a dict, got {type(results).__name__}")
    if results.get("schema") != SCHEMA:
        raise ValueError(f"results['schema'] must be {SCHEMA}, got {results.get('schema')!r}")
    prov = results.get("provenance")
    if not isinstance(prov, dict):
        raise ValueError(f"results['provenance'] must be a dict, got {type(prov).__name__}")
    missing = [k for k in PROVENANCE_KEYS if k not in prov]
    if missing:
        raise ValueError(f"results['provenance'] lacks {missing}; it needs {list(PROVENANCE_KEYS)}")
    rows = results.get("rows")
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"results['rows'] must be a non-empty list, got {rows!r:.80}")
    for i, row in enumerate(rows):
        lacking = [k for k in ROW_KEYS if k not in row]
        if lacking:
            raise ValueError(f"results['rows'][{i}] lacks {lacking}; each row needs {list(ROW_KEYS)}")
        check = row["check"]
        if not isinstance(check, dict) or "against" not in check or "ok" not in check:
            raise ValueError(f"results['rows'][{i}]['check'] must name what it was checked against "
                             f"and whether it passed, got {check!r}")


def write_results(results: dict, path: pathlib.Path) -> pathlib.Path:
    validate_results(results)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return path


def latest_results(folder: pathlib.Path = RESULTS) -> pathlib.Path | None:
    """The newest ``gpu-<date>.json`` (ISO dates sort as text), or None."""
    files = sorted(folder.glob("gpu-*.json")) if folder.is_dir() else []
    return files[-1] if files else None


# ----------------------------------------------------------------------------
# Timing and checks
# ----------------------------------------------------------------------------
def time_ms(fn, *, device: torch.device, warmup: int = 3, iters: int = 10) -> float:
    """Median milliseconds per call: CUDA events on a GPU, perf_counter on the CPU."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(iters):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(device)
            samples.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def attention_flops(B: int, H: int, N: int, M: int, d: int, causal: bool, with_backward: bool) -> float:
    """Matmul FLOPs: 4 B H N M d forward (two products), 2.5 times that backward; causal halves them."""
    flops = 4 * B * H * N * M * d * (0.5 if causal else 1.0)
    return flops * (3.5 if with_backward else 1.0)


def lower_right_mask(n: int, m: int, device) -> torch.Tensor:
    return torch.ones(n, m, dtype=torch.bool, device=device).tril(diagonal=m - n)


def math_reference(q, k, v, causal, do=None, mask=None):
    """Output (and gradients) on the MATH backend, in float32."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (t.detach().float().requires_grad_(do is not None) for t in (q, k, v))
    if mask is None and causal:
        mask = lower_right_mask(q.shape[2], k.shape[2], q.device)
    with sdpa_kernel(SDPBackend.MATH):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    if do is None:
        return [out.detach()]
    out.backward(do.float())
    return [out.detach(), q.grad, k.grad, v.grad]


def check_against_math(fn, q, k, v, causal, with_backward, *, mask=None, tol=None) -> dict:
    """Run ``fn`` on the timed shape and MATH on its first batch element and two
    heads (batch elements and heads never mix); compare those slices. Checking the
    timed shape itself means a compiled method compiles once per shape."""
    part = (slice(0, 1), slice(0, 2))
    do = torch.randn_like(q) if with_backward else None
    want = math_reference(*(t[part] for t in (q, k, v)), causal, None if do is None else do[part], mask)
    qg, kg, vg = (t.detach().requires_grad_(with_backward) for t in (q, k, v))
    out = fn(qg, kg, vg)
    got = [out.detach()[part]]
    if with_backward:
        out.backward(do)
        got += [t.grad[part] for t in (qg, kg, vg)]
    err = max(((a.float() - b).abs().max() / b.abs().max().clamp_min(1e-6)).item() for a, b in zip(got, want))
    tol = tol if tol is not None else (2e-2 if q.dtype in (torch.float16, torch.bfloat16) else 1e-4)
    return {"against": "SDPA MATH backend, float32", "max_rel_err": err, "tol": tol, "ok": bool(err <= tol)}


# ----------------------------------------------------------------------------
# Attention methods
# ----------------------------------------------------------------------------
def compiled_flex():
    """FlexAttention compiled once per shape. Past dynamo's recompile limit (8 by
    default) torch would run the unfused eager version instead, which builds the
    N x N scores: that would be timed as "compiled". So the limit is raised for
    the shapes here, and reaching it raises instead of falling back."""
    from torch.nn.attention.flex_attention import flex_attention

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    torch._dynamo.config.accumulated_recompile_limit = max(torch._dynamo.config.accumulated_recompile_limit, 256)
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    return torch.compile(flex_attention, dynamic=False)


def attention_methods(device: torch.device, *, smoke: bool):
    """name -> (make(causal, N, M) -> fn(q, k, v), needs_cuda)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def sdpa(backend):
        def make(causal, N, M):
            mask = None if (not causal or N == M) else lower_right_mask(N, M, device)

            def fn(q, k, v):
                if backend is None:
                    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and N == M)
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and N == M)
            return fn
        return make

    methods = {"SDPA default": sdpa(None), "SDPA MATH": sdpa(SDPBackend.MATH)}
    if smoke:
        return methods
    methods["SDPA FLASH"] = sdpa(SDPBackend.FLASH_ATTENTION)
    methods["SDPA EFFICIENT"] = sdpa(SDPBackend.EFFICIENT_ATTENTION)

    from snippets.efficiency.flash_triton import flash_attention

    methods["Triton (this site)"] = lambda causal, N, M: (lambda q, k, v: flash_attention(q, k, v, causal=causal))

    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    flex = compiled_flex()

    def make_flex(causal, N, M):
        if not causal:
            return lambda q, k, v: flex(q, k, v)
        block = create_block_mask(lambda b, h, i, j: j <= i + (M - N), None, None, N, M, device=device)
        return lambda q, k, v: flex(q, k, v, block_mask=block)

    methods["FlexAttention (compiled)"] = make_flex
    return methods


def refused(row: dict, error: BaseException, **blank) -> None:
    """A row whose method refused the shape (or ran out of memory): no time, the error."""
    row.update(ms=None, **blank, error=f"{type(error).__name__}: {str(error)[:200]}")
    row.setdefault("check", {"against": "SDPA MATH backend, float32", "ok": False})


def bench_attention(device, dtype, *, sizes, widths, B, H, smoke, iters) -> list[dict]:
    rows = []
    methods = attention_methods(device, smoke=smoke)
    for d in widths:
        for N in sizes:
            for causal in (False, True):
                g = torch.Generator(device=device).manual_seed(N + d)
                q, k, v = (torch.randn(B, H, N, d, device=device, dtype=dtype, generator=g) for _ in range(3))
                for with_backward in (False, True):
                    for name, make in methods.items():
                        # MATH materialises B H N^2 scores (and more for the backward)
                        if name == "SDPA MATH" and not smoke and B * H * N * N * 4 * (3 if with_backward else 1) > 24e9:
                            continue
                        fn = make(causal, N, N)
                        row = {"section": "attention", "method": name, "dtype": str(dtype).removeprefix("torch."),
                               "pass": "fwd+bwd" if with_backward else "fwd",
                               "shape": {"B": B, "H": H, "N": N, "M": N, "d": d}, "causal": causal}
                        try:
                            row["check"] = check_against_math(fn, q, k, v, causal, with_backward)
                            if with_backward:
                                qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
                                do = torch.randn_like(q)

                                def call(fn=fn, qg=qg, kg=kg, vg=vg, do=do):
                                    fn(qg, kg, vg).backward(do)
                            else:
                                def call(fn=fn):
                                    with torch.no_grad():
                                        fn(q, k, v)
                            row["ms"] = time_ms(call, device=device, iters=iters)
                            row["tflops"] = attention_flops(B, H, N, N, d, causal, with_backward) / row["ms"] / 1e9
                        except (RuntimeError, torch.OutOfMemoryError) as error:  # a backend that refuses the shape
                            refused(row, error, tflops=None)
                        rows.append(row)
                        if device.type == "cuda":
                            torch.cuda.empty_cache()
    return rows


def bench_window(device, dtype, *, sizes, d, B, H, window, smoke, iters) -> list[dict]:
    """Sliding window (w keys, the query included) by FlexAttention against full causal SDPA."""
    rows = []
    if smoke:
        from snippets.efficiency.sliding_window import sliding_window_attention as windowed
    else:
        from torch.nn.attention.flex_attention import create_block_mask

        flex = compiled_flex()
    for N in sizes:
        g = torch.Generator(device=device).manual_seed(N)
        q, k, v = (torch.randn(B, H, N, d, device=device, dtype=dtype, generator=g) for _ in range(3))
        i = torch.arange(N, device=device)
        dense = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < window)  # (N, N), True = may attend
        if smoke:
            def win(q, k, v):
                return windowed(q, k, v, window)
        else:
            block = create_block_mask(lambda b, h, qi, kj: (kj <= qi) & (qi - kj < window), None, None, N, N,
                                      device=device)

            def win(q, k, v, block=block):
                return flex(q, k, v, block_mask=block)

        def full(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        for name, fn, mask in ((f"window w={window}", win, dense), ("full causal SDPA", full, None)):
            row = {"section": "window", "method": name, "dtype": str(dtype).removeprefix("torch."), "pass": "fwd",
                   "shape": {"B": B, "H": H, "N": N, "M": N, "d": d}, "causal": True, "window": window}
            def call(fn=fn):
                with torch.no_grad():
                    fn(q, k, v)
            try:
                row["check"] = check_against_math(fn, q, k, v, True, False, mask=mask)
                row["ms"] = time_ms(call, device=device, iters=iters)
            except (RuntimeError, torch.OutOfMemoryError) as error:
                refused(row, error)
            rows.append(row)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return rows


# ----------------------------------------------------------------------------
# Decoding
# ----------------------------------------------------------------------------
def bench_decode(device, dtype, *, d_model, n_heads, n_layers, vocab, prompt_len, n_new, compile_static,
                 label="") -> list[dict]:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from snippets.efficiency.kv_cache import TinyDecoder, generate
    from snippets.efficiency.static_cache import generate_static

    torch.manual_seed(0)
    model = TinyDecoder(vocab, d_model, n_heads, n_layers, max_len=prompt_len + n_new).eval().to(device, dtype)
    prompt = torch.randint(0, vocab, (1, prompt_len), device=device)
    with sdpa_kernel(SDPBackend.MATH):
        reference = generate(model, prompt, n_new)  # the tokens every method must reproduce
    methods = {
        "uncached (recompute)": lambda: generate(model, prompt, n_new, use_cache=False),
        "dynamic KV cache": lambda: generate(model, prompt, n_new),
        "static cache, eager": lambda: generate_static(model, prompt, n_new),
    }
    if compile_static:
        options = {"mode": "reduce-overhead", "fullgraph": True} if device.type == "cuda" else {"fullgraph": True}
        methods["static cache, compiled"] = lambda: generate_static(model, prompt, n_new, compile_options=options)
    rows = []
    for name, fn in methods.items():
        tokens = fn()  # warm-up (and compilation) outside the timing
        row = {"section": "decode" + label, "method": name, "dtype": str(dtype).removeprefix("torch."),
               "shape": {"d_model": d_model, "n_heads": n_heads, "n_layers": n_layers, "vocab": vocab,
                         "prompt": prompt_len, "new": n_new},
               "check": decode_check(model, tokens, reference, prompt_len)}
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        row["ms"] = time_ms(fn, device=device, warmup=0, iters=1 if name.startswith("uncached") else 3)
        row["tokens_per_s"] = n_new / row["ms"] * 1e3
        rows.append(row)
    return rows


def decode_check(model, tokens: torch.Tensor, reference: torch.Tensor, prompt_len: int) -> dict:
    """Greedy tokens against the reference run (dynamic cache, MATH backend).

    Identical tokens pass. Where they part, the step is a near tie that rounding
    may break either way, or a bug: the logits of that step (the shared prefix
    run again on MATH) must give the two tokens scores within a few units of
    rounding of the dtype (4 ulp of the largest logit). Tokens after the first
    difference follow different prefixes and are not compared."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    same = (tokens == reference).float().mean().item()
    check = {"against": "dynamic cache on the SDPA MATH backend: identical tokens, or a first difference "
                        "at a tie within rounding", "same_tokens": same, "ok": same == 1.0}
    differ = (tokens[0] != reference[0]).nonzero()
    if len(differ):
        i = int(differ[0])
        with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
            logits = model(reference[:, :i])[0, -1].float()
        gap = (logits[reference[0, i]] - logits[tokens[0, i]]).abs().item()
        tol = 4 * torch.finfo(model.head.weight.dtype).eps * logits.abs().max().item()
        check.update(agree_until=i - prompt_len, gap=gap, tol=tol, ok=gap <= tol)
    check["ok"] = bool(check["ok"])
    return check


# ----------------------------------------------------------------------------
# Targets: ratios within this run
# ----------------------------------------------------------------------------
def _find(rows, **match):
    for row in rows:
        if all(row.get(k) == v or row.get("shape", {}).get(k) == v for k, v in match.items()):
            return row
    return None


def targets(rows: list[dict]) -> list[dict]:
    """The figures the efficiency pages promise, as ratios of rows of this run."""
    out = []

    def ratio(name, num, den, threshold):
        if num and den and num.get("ms") and den.get("ms"):
            value = den["ms"] / num["ms"]  # > 1: the first is faster
            out.append({"target": name, "ratio": value, "threshold": threshold, "met": value >= threshold})

    for N in (4096, 8192, 16384):
        common = dict(section="attention", dtype="bfloat16", N=N, d=128, causal=False)
        tri = _find(rows, method="Triton (this site)", **common, **{"pass": "fwd"})
        ratio(f"Triton fwd / SDPA default, d=128, N={N}", tri,
              _find(rows, method="SDPA default", **common, **{"pass": "fwd"}), 0.85)
        ratio(f"Triton fwd / SDPA FLASH, d=128, N={N}", tri,
              _find(rows, method="SDPA FLASH", **common, **{"pass": "fwd"}), 1.2)
        ratio(f"Triton fwd+bwd / SDPA default, d=128, N={N}",
              _find(rows, method="Triton (this site)", **common, **{"pass": "fwd+bwd"}),
              _find(rows, method="SDPA default", **common, **{"pass": "fwd+bwd"}), 0.6)
    for row in rows:
        if row["section"] == "window" and row["method"].startswith("window") and row["shape"]["N"] == 16384:
            ratio("window w=256 / full causal SDPA, N=16384", row,
                  _find(rows, section="window", method="full causal SDPA", N=16384), 5.0)
    for dtype in ("float32", "bfloat16"):
        uncached = _find(rows, section="decode", method="uncached (recompute)", dtype=dtype)
        cached = _find(rows, section="decode", method="dynamic KV cache", dtype=dtype)
        static = _find(rows, section="decode", method="static cache, compiled", dtype=dtype)
        best = min((r for r in (cached, static, _find(rows, section="decode", method="static cache, eager",
                                                      dtype=dtype)) if r and r.get("ms")),
                   key=lambda r: r["ms"], default=None)
        ratio(f"best cached / uncached decoding, {dtype}", best, uncached, 5.0)
        ratio(f"static compiled / dynamic cache decoding, {dtype}", static, cached, 3.0)
    f32 = _find(rows, section="decode", method="static cache, compiled", dtype="float32")
    bf16 = _find(rows, section="decode", method="static cache, compiled", dtype="bfloat16")
    ratio("bfloat16 / float32 static compiled decoding", bf16, f32, 1.0)
    return out


# ----------------------------------------------------------------------------
# Rendering (the performance page shows the newest committed file)
# ----------------------------------------------------------------------------
def render_markdown(results: dict, source: str = "") -> str:
    """Markdown tables of one results file, with its provenance first."""
    validate_results(results)
    p = results["provenance"]
    lines = [
        f"Measured on **{p['device']}** by `bench/gpu.py`{f' ({source})' if source else ''}: torch {p['torch']}, "
        f"CUDA {p['cuda']}, cuDNN {p['cudnn']}, Triton {p['triton']}, {p['date']}, commit `{p['commit'][:12]}`.",
        "",
    ]
    sections: dict[str, list[dict]] = {}
    for row in results["rows"]:
        sections.setdefault(row["section"], []).append(row)
    for section, rows in sections.items():
        lines += [f"**{section}**", ""]
        if section == "attention":
            lines += ["| method | pass | causal | d | N | ms | TFLOP/s | check |", "|---|---|---|---|---|---|---|---|"]
            for r in rows:
                s = r["shape"]
                lines.append(f"| {r['method']} | {r['pass']} | {r['causal']} | {s['d']} | {s['N']} | "
                             f"{_num(r['ms'])} | {_num(r.get('tflops'), 0)} | {_check(r)} |")
        elif section.startswith("decode"):
            lines += ["| method | dtype | ms for all tokens | tokens/s | check |", "|---|---|---|---|---|"]
            for r in rows:
                lines.append(f"| {r['method']} | {r['dtype']} | {_num(r['ms'], 0)} | "
                             f"{_num(r.get('tokens_per_s'), 0)} | {_check(r)} |")
        else:
            lines += ["| method | N | ms | check |", "|---|---|---|---|"]
            for r in rows:
                lines.append(f"| {r['method']} | {r['shape']['N']} | {_num(r['ms'])} | {_check(r)} |")
        lines.append("")
    steps = results.get("steps")
    if steps and steps.get("done") != steps.get("planned"):
        missing = [n for n in steps["planned"] if n not in steps["done"]]
        lines += [f"This run stopped before it measured: {', '.join(missing)}.", ""]
    if results.get("targets"):
        lines += ["**targets** (ratios within this run; above 1, the first is faster)", "",
                  "| target | ratio | needed | met |", "|---|---|---|---|"]
        for t in results["targets"]:
            lines.append(f"| {t['target']} | {t['ratio']:.2f} | {t['threshold']} | {'yes' if t['met'] else 'no'} |")
    return "\n".join(lines) + "\n"


def _num(x, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _check(row) -> str:
    c = row["check"]
    if "error" in row:
        return "refused"
    detail = f"{c['max_rel_err']:.1e}" if "max_rel_err" in c else (
        f"{c['same_tokens']:.0%} same tokens" if "same_tokens" in c else "")
    if "agree_until" in c:
        detail += f"; the first {c['agree_until']} agree, then a tie within {c['gap']:.2g} of {c['tol']:.2g}"
    return ("ok" if c["ok"] else "FAILED") + (f" ({detail})" if detail else "")


NO_GPU_YET = (
    "No GPU measurement has been recorded yet: `bench/results/` holds no `gpu-*.json`. "
    "The site builds on a CPU and shows only what `bench/gpu.py` measured on a GPU and "
    "committed; run it on a CUDA machine and commit the file it writes."
)


def render_latest(folder: pathlib.Path = RESULTS) -> str:
    path = latest_results(folder)
    if path is None:
        return NO_GPU_YET + "\n"
    return render_markdown(json.loads(path.read_text(encoding="utf-8")), source=f"`bench/results/{path.name}`")


# ----------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny CPU run of every code path (for tests)")
    parser.add_argument("--quick", action="store_true", help="N = 4096 only, fewer iterations")
    parser.add_argument("--out", type=pathlib.Path, help="where to write the JSON")
    args = parser.parse_args(argv)

    if args.cpu_smoke:
        device = torch.device("cpu")
        rows = bench_attention(device, torch.float32, sizes=[64], widths=[16], B=1, H=2, smoke=True, iters=2)
        rows += bench_window(device, torch.float32, sizes=[64], d=16, B=1, H=2, window=8, smoke=True, iters=2)
        rows += bench_decode(device, torch.float32, d_model=32, n_heads=2, n_layers=2, vocab=50, prompt_len=8,
                             n_new=4, compile_static=False)
        # no targets: they are GPU figures, and a tiny CPU run says nothing about them
        results = {"schema": SCHEMA, "kind": "cpu-smoke", "provenance": provenance(device), "rows": rows,
                   "targets": []}
        if args.out:
            write_results(results, args.out)
        print(render_markdown(results))
        return 0 if all(r["check"]["ok"] for r in rows) else 1

    if not torch.cuda.is_available():
        print("bench/gpu.py: no CUDA device is available, so no GPU figure can be measured; "
              "nothing was written. (--cpu-smoke runs a tiny CPU version of the same code.)", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    sizes = [4096] if args.quick else [4096, 8192, 16384]
    iters = 5 if args.quick else 20
    out = args.out or RESULTS / f"gpu-{datetime.date.today().isoformat()}.json"
    steps = plan_gpu_steps(device, sizes, iters)
    rows: list[dict] = []
    done: list[str] = []
    start = time.perf_counter()
    for name, step in steps:
        print(f"bench/gpu.py: {name} ({time.perf_counter() - start:.0f} s so far)", flush=True)
        rows += step()
        done.append(name)
        # written after every step, so a run cut short keeps (and says) what it measured
        results = {"schema": SCHEMA, "kind": "gpu", "provenance": provenance(device), "rows": rows,
                   "targets": targets(rows), "steps": {"planned": [n for n, _ in steps], "done": list(done)}}
        write_results(results, out)
    print(render_markdown(results))
    print(f"wrote {out} after {time.perf_counter() - start:.0f} s")
    return 0 if all(r["check"]["ok"] for r in rows if r.get("ms") is not None) else 1


def plan_gpu_steps(device: torch.device, sizes: list[int], iters: int) -> list[tuple[str, object]]:
    """The GPU run in steps, cheapest first: every section at the smallest N (decoding
    included), then attention and the window at each larger N."""
    def attention(N):
        return lambda: bench_attention(device, torch.bfloat16, sizes=[N], widths=[64, 128], B=4, H=16,
                                       smoke=False, iters=iters)

    def window(N):
        return lambda: bench_window(device, torch.bfloat16, sizes=[N], d=64, B=4, H=16, window=256,
                                    smoke=False, iters=iters)

    def decode(dtype):
        return lambda: bench_decode(device, dtype, d_model=768, n_heads=12, n_layers=12, vocab=50257,
                                    prompt_len=512, n_new=256, compile_static=True)

    cpu_decode = ("decode, CPU at a reduced size",
                  lambda: bench_decode(torch.device("cpu"), torch.float32, d_model=256, n_heads=8, n_layers=4,
                                       vocab=4096, prompt_len=128, n_new=64, compile_static=False,
                                       label=" (CPU, reduced size)"))
    steps = [(f"attention N={sizes[0]}", attention(sizes[0])), (f"window N={sizes[0]}", window(sizes[0])),
             ("decode float32", decode(torch.float32)), ("decode bfloat16", decode(torch.bfloat16)), cpu_decode]
    for N in sizes[1:]:
        steps += [(f"attention N={N}", attention(N)), (f"window N={N}", window(N))]
    return steps


if __name__ == "__main__":
    sys.exit(main())
