"""Which kernel will run: SDPA's backend choice as a table, and a probe of what ran.

``F.scaled_dot_product_attention`` tries its backends in a priority order and
runs the first one whose checks all pass. This file writes those checks down
as data (``CUDA_RULES``, ``CPU_RULES``: each rule says what it refuses, why, and
the PyTorch source line it comes from), answers "which backend will run?" for
a described case without a GPU (``choose_backend``), says whether
``nn.MultiheadAttention`` calls SDPA at all (``mha_route``), and measures what
actually ran on this machine (``probe_sdpa``, ``kernel_that_ran``).
Page: docs/efficiency/which-kernel.md
Sources: PyTorch 2.13.0 (git cf30153), ``aten/src/ATen/native/transformers/
sdp_utils_cpp.h`` as installed with the wheel (cited by line), and the stored
snapshots of ``cuda/sdp_utils.cpp`` (commit 001f694) and ``sdp_utils_cpp.cpp``
(commit 02315a4) of pytorch/pytorch, cited by function, with the line quoted.
Supported torch versions: 2.11, 2.13, 2.15 (they differ in when cuDNN comes first).
Tested against: what torch does on the machine that runs the tests, backend by
backend, in tests/test_sdpa_probe.py.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import warnings
from collections import namedtuple
from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

__all__ = ["choose_backend", "mha_route", "probe_sdpa", "kernel_that_ran"]

VERSIONS = ("2.11", "2.13", "2.15")
BACKENDS = ("MATH", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION")
HALF = ("float16", "bfloat16")
H = "aten/src/ATen/native/transformers/sdp_utils_cpp.h (2.13.0)"
CPP = "aten/src/ATen/native/transformers/sdp_utils_cpp.cpp @02315a4"
CU = "aten/src/ATen/native/transformers/cuda/sdp_utils.cpp @001f694"
MHA = "torch/nn/modules/activation.py (2.13.0)"
FUN = "torch/nn/functional.py (2.13.0)"
ATT = "aten/src/ATen/native/transformers/cuda/attention.cu"

# A case describes one SDPA call and the machine; every key has a default.
DEFAULTS = {
    "torch": "2.13", "device": "cpu", "sm": None, "cuda": 13, "cudnn": None,
    "cudnn_deprioritized": False, "deterministic": False,
    "dtype": "float32", "mask": "none", "n": 128, "m": 128, "d": 64, "d_v": None,
    "h": 8, "h_kv": 8, "enable_gqa": False, "dropout": 0.0, "requires_grad": False,
    "need_weights": True, "mha_fast_path": False,
}
CHOICES = {"torch": VERSIONS, "device": ("cpu", "cuda"),
           "dtype": ("float32", "float64", "float16", "bfloat16"),
           "mask": ("none", "causal", "bool", "float")}

# source: (file, line number or function, the line quoted)
Rule = namedtuple("Rule", "why refuses source versions", defaults=(VERSIONS,))


def _sm(c, low, high):
    return c["sm"] is not None and low <= tuple(c["sm"]) <= high


def _cudnn_head_limit(c):
    """cuDNN's largest head width for this GPU and cuDNN (check_cudnn_tensor_shapes)."""
    big = (c["sm"][0] == 9 and c["sm"][1] == 0) or c["sm"][0] == 10
    old_sm107 = tuple(c["sm"]) == (10, 7) and (c["cudnn"] or 0) <= 92500
    if big and not old_sm107 and (c["cudnn"] or 0) > 92200:
        return 256
    if big and (c["cudnn"] or 0) >= 91100 and (c["d"], c["d_v"]) == (192, 128):
        return 192
    return 128


def _flash_grad_ok(c):
    """sm86-89 and sm12x cannot train flash with 192 < d <= 224 (> 224: no dropout)."""
    narrow = _sm(c, (8, 6), (8, 9)) or _sm(c, (12, 0), (12, 1))
    if not (c["requires_grad"] and narrow):
        return True
    return c["d"] <= 192 or (c["dropout"] == 0 and c["d"] > 224)


def _efficient_alignment(c):
    """minimum_gemm_alignment: 8 for 16-bit on tensor cores, 4 for float32 on sm80+."""
    half = c["dtype"] in HALF
    tensor_cores = c["sm"][0] >= 8 or (c["sm"][0] >= 7 and half)
    base = 4 if c["sm"][0] >= 8 else 1
    return max(base, 8 if half else 4) if tensor_cores else base


CUDA_ONLY = Rule("a CUDA kernel: the CPU order holds only FLASH_ATTENTION and MATH",
                 lambda c: c["device"] == "cpu",
                 (CPP, "priority_order_cpp", "SDPBackend::flash_attention,"))

CPU_RULES = {
    "MATH": [],
    "FLASH_ATTENTION": [
        Rule("dropout_p > 0: the fused CPU kernel has no dropout",
             lambda c: c["dropout"] > 0, (H, 240, "if (params.dropout > 0.0) {")),
        Rule("q, k and v must share one head width (d_v = d)",
             lambda c: c["d_v"] != c["d"],
             (CPP, "check_head_dim_size_cpp",
              "TORCH_GUARD_OR_FALSE(query_size_last.sym_eq(value_size_last));")),
    ],
    "EFFICIENT_ATTENTION": [CUDA_ONLY],
    "CUDNN_ATTENTION": [CUDA_ONLY],
}

CUDA_RULES = {
    "MATH": [],
    "FLASH_ATTENTION": [
        Rule("an attn_mask (bool or float): flash takes masks only as is_causal",
             lambda c: c["mask"] in ("bool", "float"),
             (H, 261, "if (params.attn_mask.has_value()) {")),
        Rule("head widths must be equal and at most 256",
             lambda c: c["d_v"] != c["d"] or c["d"] > 256,
             (CU, "check_head_dim_size_flash",
              "const auto max_size = c10::SymInt(256);")),
        Rule("GPU outside sm80 to sm121", lambda c: not _sm(c, (8, 0), (12, 1)),
             (CU, "check_flash_attention_hardware_support",
              "if (!check_sm_version<sm80, sm121>(dprops)) {")),
        Rule("training with 192 < d <= 224 (or d > 224 with dropout) on sm86-89/sm12x",
             lambda c: not _flash_grad_ok(c),
             (CU, "check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89_or_"
              "120",
              "TORCH_GUARD_OR_FALSE(head_dim.sym_le(192)) ||")),
        Rule("is_causal with N != M (flash would align the triangle lower right)",
             lambda c: c["mask"] == "causal" and c["n"] != c["m"],
             (CU, "check_flash_causal_non_square_seqlens",
              "if (!TORCH_GUARD_OR_FALSE(query_seq_len.sym_eq(key_seq_len))) {")),
        Rule("dtype must be float16 or bfloat16", lambda c: c["dtype"] not in HALF,
             (CU, "check_dtypes_low_precision",
              "std::to_array<at::ScalarType>({at::kHalf, at::kBFloat16});")),
    ],
    "EFFICIENT_ATTENTION": [
        Rule("GPU outside sm50 to sm121", lambda c: not _sm(c, (5, 0), (12, 1)),
             (CU, "check_mem_efficient_hardware_support",
              "if (!check_sm_version<sm50, sm121>(dprops)) {")),
        Rule("d and d_v must be multiples of the GEMM alignment (8 for 16-bit, "
             "4 for float32 on sm80+)",
             lambda c: (c["d"] % _efficient_alignment(c)
                        or c["d_v"] % _efficient_alignment(c)),
             (CU, "check_head_dim_size_mem_efficient",
              "TORCH_GUARD_OR_FALSE((query_size_last % alignment).sym_eq(0)) &&")),
        Rule("dtype must be float16, float32 or (sm80+) bfloat16",
             lambda c: c["dtype"] == "float64" or (c["dtype"] == "bfloat16"
                                                   and c["sm"][0] < 8),
             (CU, "can_use_mem_efficient_attention",
              "std::to_array<at::ScalarType>({at::kHalf, at::kFloat, "
              "at::kBFloat16});")),
    ],
    "CUDNN_ATTENTION": [
        Rule("no cuDNN 9 at run time", lambda c: (c["cudnn"] or 0) < 90000,
             (CU, "can_use_cudnn_attention",
              "cuDNN version too old to use cuDNN Attention (< v9.0.0)")),
        Rule("dropout with cuDNN 9.11 to 9.13",
             lambda c: c["dropout"] > 0 and 91100 < (c["cudnn"] or 0) < 91400,
             (CU, "can_use_cudnn_attention",
              "if (params.dropout > 0.0 && cudnn_version > 91100 && "
              "cudnn_version < 91400) {")),
        Rule("torch.use_deterministic_algorithms(True)", lambda c: c["deterministic"],
             (CU, "check_cudnn_deterministic", "if (ctx.deterministicAlgorithms()) {")),
        Rule("dtype must be float16 or bfloat16", lambda c: c["dtype"] not in HALF,
             (CU, "check_dtypes_low_precision",
              "std::to_array<at::ScalarType>({at::kHalf, at::kBFloat16});")),
        Rule("GPU outside sm80 to sm121", lambda c: not _sm(c, (8, 0), (12, 1)),
             (CU, "check_cudnn_hardware_support",
              "if (!check_sm_version<sm80, sm121>(dprops)) {")),
        Rule("dropout_p must be a multiple of 1/16",
             lambda c: c["dropout"] * 16 != int(c["dropout"] * 16),
             (CU, "check_cudnn_dropout",
              "if (params.dropout * 16.0 != std::floor(params.dropout * 16.0)) {")),
        Rule("head width above the limit (128; 256 on sm90/sm10x with cuDNN > 9.22)",
             lambda c: max(c["d"], c["d_v"]) > _cudnn_head_limit(c),
             (CU, "check_cudnn_tensor_shapes",
              "TORCH_WARN(\"head_dim should be no more than \", head_dim_limit);")),
        Rule("d and d_v must be multiples of 8", lambda c: c["d"] % 8 or c["d_v"] % 8,
             (CU, "check_cudnn_tensor_shapes",
              "if (!(TORCH_GUARD_OR_FALSE((d_qk % 8).sym_eq(0)) &&")),
        Rule("one key (M = 1)", lambda c: c["m"] == 1,
             (CU, "check_cudnn_tensor_shapes",
              "if (!TORCH_GUARD_OR_FALSE(s_k.sym_ne(1))) {")),
        Rule("one query (N = 1) with dropout",
             lambda c: c["dropout"] > 0 and c["n"] == 1,
             (CU, "check_cudnn_tensor_shapes",
              "if (params.dropout != 0.0 && !TORCH_GUARD_OR_FALSE(s_q.sym_ne(1))) {")),
    ],
}


# --8<-- [start:order]
def prefers_cudnn(c):
    """check_prefer_cudnn_attention: cuDNN > 9.15.0 on sm9x/sm10x, env var unset."""
    if c["device"] != "cuda" or c["cudnn_deprioritized"] or (c["cudnn"] or 0) <= 91500:
        return False
    major, minor = c["sm"]
    if c["torch"] == "2.11" or c["cuda"] < 13:  # 2.11, or a CUDA 12 wheel: sm90/100/103
        return major in (9, 10) and minor in (0, 3)
    return major in (9, 10)


def priority_order(c):
    """The order SDPA tries its backends in, for this device and machine."""
    if c["device"] == "cpu":
        return ("FLASH_ATTENTION", "MATH")  # priority_order_cpp
    if prefers_cudnn(c):
        return ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH")
    return ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH", "CUDNN_ATTENTION")
# --8<-- [end:order]


# --8<-- [start:choose]
def refusals(rules, c):
    """For each backend, the rules that refuse this case (empty: it would run)."""
    return {backend: [r for r in table if c["torch"] in r.versions and r.refuses(c)]
            for backend, table in rules.items()}


def first_viable(order, refused):
    """SDPA's rule: run the first backend in the order that nothing refuses."""
    return next((backend for backend in order if not refused[backend]), None)
# --8<-- [end:choose]


# --8<-- [start:probe]
def forced(q, k, v, kwargs):
    """Force each backend in turn: True where it runs, False where it raises."""
    accepts = {}
    for backend in BACKENDS:
        try:
            with sdpa_kernel(getattr(SDPBackend, backend)), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a refusing kernel warns its reasons
                F.scaled_dot_product_attention(q, k, v, **kwargs)
            accepts[backend] = True
        except RuntimeError:  # "No available kernel" / "No viable backend"
            accepts[backend] = False
    return accepts


def ran(fn):
    """Run fn under the profiler and name the SDPA kernel among the ops it called."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    names = {event.name for event in prof.events()}
    return next((b for op, b in KERNEL_OPS.items() if op in names), None)
# --8<-- [end:probe]


KERNEL_OPS = {  # the aten op each backend's branch of SDPA calls (attention.cpp)
    "aten::_scaled_dot_product_flash_attention_for_cpu": "FLASH_ATTENTION",
    "aten::_scaled_dot_product_flash_attention": "FLASH_ATTENTION",
    "aten::_scaled_dot_product_efficient_attention": "EFFICIENT_ATTENTION",
    "aten::_scaled_dot_product_cudnn_attention": "CUDNN_ATTENTION",
    "aten::_scaled_dot_product_attention_math": "MATH",
    "aten::_scaled_dot_product_attention_math_for_mps": "MATH",
}


# --8<-- [start:face]
def choose_backend(case: Mapping) -> dict:
    """The SDPA backend PyTorch picks for a described call, and why others refuse.

    Args:
        case: a dict describing the call and the machine; missing keys take
            the values in ``DEFAULTS``. ``torch`` ("2.11", "2.13", "2.15"),
            ``device`` ("cpu", "cuda"), ``sm`` ((major, minor), CUDA only),
            ``cuda`` (the wheel's CUDA major), ``cudnn`` (run-time version as
            ``torch.backends.cudnn.version()`` reports it, or None),
            ``cudnn_deprioritized`` (``TORCH_CUDNN_SDPA_DEPRIORITIZED`` set),
            ``deterministic``, ``dtype``, ``mask`` ("none", "causal" for
            ``is_causal=True``, "bool", "float"), ``n``, ``m``, ``d``, ``d_v``
            (None: d), ``h``, ``h_kv``, ``enable_gqa``, ``dropout``,
            ``requires_grad``.

    Returns:
        ``{"backend": name or None, "order": names in the order tried,
        "refused": {name: [(why, source), ...]}}``; a backend with an empty
        list would run if forced. ``source`` is (file, line or function, the
        line quoted).

    Shape:
        No tensors: the case is a description.
    """
    c = _check_case(case)
    rules = CPU_RULES if c["device"] == "cpu" else CUDA_RULES
    refused = refusals(rules, c)
    order = priority_order(c)
    reasons = {b: [(r.why, r.source) for r in refused[b]] for b in BACKENDS}
    return {"backend": first_viable(order, refused), "order": order, "refused": reasons}


def mha_route(case: Mapping) -> dict:
    """Whether ``nn.MultiheadAttention`` calls SDPA for a case, and which backend.

    Args:
        case: as for ``choose_backend``, plus ``need_weights`` (MHA's
            argument, default True as in MHA) and ``mha_fast_path`` (True when
            every fast-path condition of ``MultiheadAttention.forward`` holds:
            eval mode, no autograd, batch_first, one tensor for query, key and
            value, an even number of heads, no float mask, no TorchFunctionMode
            such as ``torch.device(...)`` or ``torch.set_default_device``, ...).

    Returns:
        ``{"route": "native" | "weights" | "sdpa", "backend": name or None,
        "why": text, "source": (file, line or function, the line quoted)}``.

    Shape:
        No tensors: the case is a description.
    """
    c = _check_case(case)
    if c["mha_fast_path"]:
        if c["device"] == "cuda" and not c["need_weights"] and c["mask"] == "none":
            pick = choose_backend({**c, "dropout": 0.0})["backend"]
            if c["d"] % 8 == 0 and pick in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION"):
                quote = "(backend == sdp::SDPBackend::flash_attention ||"
                return {"route": "sdpa", "backend": pick,
                        "source": (ATT, "native_multi_head_attention_cuda", quote),
                        "why": "the CUDA fast path hands a flash or efficient pick "
                               "to SDPA"}
        return {"route": "native", "backend": None,
                "source": (MHA, 1433, "return torch._native_multi_head_attention("),
                "why": "the fast path runs its own kernel, not SDPA"}
    if c["need_weights"]:
        return {"route": "weights", "backend": None,
                "source": (FUN, 7023, "if need_weights:"),
                "why": "need_weights=True multiplies and softmaxes by hand (bmm)"}
    return {"route": "sdpa", "backend": choose_backend(c)["backend"],
            "source": (FUN, 7077, "attn_output = scaled_dot_product_attention("),
            "why": "need_weights=False off the fast path calls SDPA"}


def probe_sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
    attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
    is_causal: bool = False, enable_gqa: bool = False,
) -> dict:
    """Measure which SDPA backends accept a call here, and which one runs.

    Args:
        q: queries.
        k: keys.
        v: values.
        attn_mask: as in SDPA (bool, True = may attend, or float), or None.
        dropout_p: as in SDPA, in [0, 1).
        is_causal: as in SDPA.
        enable_gqa: as in SDPA (H_kv divides H).

    Returns:
        ``{"ran": the backend SDPA chose (read from the profiler), "accepts":
        {name: True if it runs when forced with sdpa_kernel}}``.

    Shape:
        q ``(B, H, N, d)``, k ``(B, H_kv, M, d)``, v ``(B, H_kv, M, d_v)``.
    """
    _check_probe(q, k, v, attn_mask, dropout_p)
    kwargs = {"attn_mask": attn_mask, "dropout_p": dropout_p, "is_causal": is_causal,
              "enable_gqa": enable_gqa}
    accepts = forced(q, k, v, kwargs)
    return {"ran": ran(lambda: F.scaled_dot_product_attention(q, k, v, **kwargs)),
            "accepts": accepts}


def kernel_that_ran(fn: Callable[[], object]) -> str | None:
    """Run ``fn()`` once and name the SDPA backend it ran, None if no SDPA kernel.

    Args:
        fn: a function of no arguments (an SDPA call, a module's forward, ...).

    Returns:
        "MATH", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", or
        None when ``fn`` called none of their kernels (``nn.MultiheadAttention``
        with ``need_weights=True`` or on its CPU fast path).

    Shape:
        No tensors.
    """
    return ran(fn)
# --8<-- [end:face]


# --8<-- [start:validate]
def _check_case(case):
    bad = [f"{key!r} (not a key)" for key in sorted(set(case) - set(DEFAULTS))]
    c = {**DEFAULTS, **case}
    c["d_v"] = c["d"] if c["d_v"] is None else c["d_v"]
    bad += [f"{key}={c[key]!r} (one of {ok})" for key, ok in CHOICES.items()
            if c[key] not in ok]
    bad += [f"{key}={c[key]!r} (an int >= 1)"
            for key in ("n", "m", "d", "d_v", "h", "h_kv")
            if not isinstance(c[key], int) or c[key] < 1]
    if not bad and c["h"] != c["h_kv"] and (c["h"] % c["h_kv"] or not c["enable_gqa"]):
        bad.append(f"h={c['h']}, h_kv={c['h_kv']} (h_kv divides h, with enable_gqa)")
    if not (isinstance(c["dropout"], (int, float)) and 0 <= c["dropout"] < 1):
        bad.append(f"dropout={c['dropout']!r} (in [0, 1))")
    if c["device"] == "cuda" and not (isinstance(c["sm"], tuple) and len(c["sm"]) == 2):
        bad.append(f"sm={c['sm']!r} (a (major, minor) tuple on cuda)")
    if bad:
        raise ValueError(f"case has bad values, got {'; '.join(bad)}")
    return c


def _check_probe(q, k, v, attn_mask, dropout_p):
    sizes = {}  # one size per letter: G = H_kv, e = d_v
    for name, t, dims in (("q", q, "BHNd"), ("k", k, "BGMd"), ("v", v, "BGMe")):
        got = (t.dtype, t.device, tuple(t.shape)) if torch.is_tensor(t) else type(t)
        ok = torch.is_tensor(t) and t.dim() == 4 and t.is_floating_point()
        if not ok or got[:2] != (q.dtype, q.device) or any(
                sizes.setdefault(c, n) != n for c, n in zip(dims, t.shape)):
            raise (ValueError if ok else TypeError)(
                f"{name} must be floating ({dims}) like q, sizes {sizes}, got {got}")
    if attn_mask is not None and (
        not isinstance(attn_mask, torch.Tensor) or attn_mask.dim() not in (2, 4)
        or attn_mask.shape[-2:] != (q.shape[2], k.shape[2])
        or attn_mask.dtype not in (torch.bool, q.dtype) or attn_mask.device != q.device
    ):
        raise ValueError("attn_mask must be (N, M) or (B, H, N, M), bool or q's "
                         f"dtype, on q's device, got {attn_mask!r:.60}")
    if not (isinstance(dropout_p, (int, float)) and 0 <= dropout_p < 1):
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p!r}")
# --8<-- [end:validate]
