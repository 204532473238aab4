"""Which kernel will run: the decision table against what torch does on this machine.

The CPU rows are compared with torch itself, backend by backend: for each case
the probe forces every backend with ``sdpa_kernel`` (which ones raise, which
run) and reads from the profiler which kernel SDPA picked on its own. CUDA
rows are compared the same way when a GPU is present.
"""

from __future__ import annotations

import inspect
import itertools
import os
import pathlib

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from snippets.efficiency import sdpa_probe as P
from snippets.efficiency.sdpa_probe import choose_backend, kernel_that_ran, mha_route, probe_sdpa



@pytest.fixture(autouse=True)
def _on_the_cpu():
    """The CPU rows are about the CPU: tensors and modules made here stay there even
    when the suite makes CUDA the default device (the CUDA rows name their device).
    Only then: a device context is a TorchFunctionMode, and it turns off the fast
    path of nn.MultiheadAttention (see test_a_device_context_turns_the_fast_path_off)."""
    if torch.get_default_device().type == "cpu":
        yield
        return
    with torch.device("cpu"):
        yield


DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
          "bfloat16": torch.bfloat16}


def _tensors(case, device="cpu"):
    """Real q, k, v and SDPA keyword arguments for a described case."""
    c = {**P.DEFAULTS, **case}
    d_v = c["d"] if c["d_v"] is None else c["d_v"]
    dtype = DTYPES[c["dtype"]]
    g = torch.Generator(device=torch.get_default_device()).manual_seed(0)

    def rand(*shape):
        t = torch.randn(*shape, generator=g).to(device=device, dtype=dtype)
        return t.requires_grad_(c["requires_grad"])

    q = rand(2, c["h"], c["n"], c["d"])
    k, v = rand(2, c["h_kv"], c["m"], c["d"]), rand(2, c["h_kv"], c["m"], d_v)
    mask = None
    allowed = torch.ones(c["n"], c["m"], dtype=torch.bool, device=device).tril()
    if c["mask"] == "bool":
        mask = allowed
    elif c["mask"] == "float":
        mask = torch.zeros(c["n"], c["m"], dtype=dtype, device=device)
        mask = mask.masked_fill(~allowed, float("-inf"))
    kwargs = {"attn_mask": mask, "dropout_p": c["dropout"], "is_causal": c["mask"] == "causal",
              "enable_gqa": c["enable_gqa"]}
    return q, k, v, kwargs


def _cpu_cases():
    """Every dtype x mask kind x head widths x dropout x GQA; lengths and gradients
    alternate, so each occurs with every value of the others but not every pair."""
    dims = ((8, 8), (8, 4))
    heads = ((4, 4, False), (4, 2, True))
    lengths = ((16, 16), (8, 16))
    for i, (dtype, mask, (d, d_v), dropout, (h, h_kv, gqa)) in enumerate(itertools.product(
            DTYPES, ("none", "causal", "bool", "float"), dims, (0.0, 0.25), heads)):
        n, m = lengths[i % 2]
        yield {"dtype": dtype, "mask": mask, "d": d, "d_v": d_v, "dropout": dropout, "h": h,
               "h_kv": h_kv, "enable_gqa": gqa, "requires_grad": i % 3 == 0, "n": n, "m": m}


CPU_CASES = list(_cpu_cases())


def test_cpu_rows_equal_what_torch_does_here():
    """Every CPU case: forced backends accept exactly where the table has no refusal,
    and the backend SDPA picked on its own is the table's choice."""
    wrong = []
    for case in CPU_CASES:
        q, k, v, kwargs = _tensors(case)
        measured = probe_sdpa(q, k, v, **kwargs)
        table = choose_backend({"torch": "2.13", "device": "cpu", **case})
        predicted = {b: not reasons for b, reasons in table["refused"].items()}
        if measured["accepts"] != predicted or measured["ran"] != table["backend"]:
            wrong.append((case, measured, table["backend"]))
    assert len(CPU_CASES) == 128
    assert not wrong, wrong[:3]


def test_cpu_table_covers_both_outcomes():
    """The grid is not one-sided: the fused CPU kernel runs in some cases, math in others."""
    picks = {choose_backend(c)["backend"] for c in CPU_CASES}
    assert picks == {"FLASH_ATTENTION", "MATH"}


def test_probe_names_the_backend_that_ran():
    q = torch.randn(1, 2, 8, 4)
    for backend, name in ((SDPBackend.MATH, "MATH"), (SDPBackend.FLASH_ATTENTION, "FLASH_ATTENTION")):
        with sdpa_kernel(backend):
            assert kernel_that_ran(lambda: F.scaled_dot_product_attention(q, q, q)) == name
    # attention written by hand calls no SDPA kernel at all
    assert kernel_that_ran(lambda: torch.softmax(q @ q.transpose(-2, -1), -1) @ q) is None
    assert probe_sdpa(q, q, q, dropout_p=0.5)["ran"] == "MATH"
    assert probe_sdpa(q, q, q)["ran"] == "FLASH_ATTENTION"


def test_global_flags_report_enabled_not_ran():
    """flash_sdp_enabled() stays True while dropout sends the call to math."""
    q = torch.randn(1, 2, 8, 4)
    assert torch.backends.cuda.flash_sdp_enabled()
    assert kernel_that_ran(lambda: F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)) == "MATH"


MHA_ROWS = [  # (training, no_grad, need_weights)
    (False, True, False), (False, True, True), (True, False, True), (True, False, False),
]


@pytest.mark.parametrize("training, no_grad, need_weights", MHA_ROWS)
def test_mha_rows_equal_what_torch_does_here(training, no_grad, need_weights):
    mha = nn.MultiheadAttention(32, 4, batch_first=True).train(training)
    x = torch.randn(2, 16, 32)
    with torch.set_grad_enabled(not no_grad):
        measured = kernel_that_ran(lambda: mha(x, x, x, need_weights=need_weights))
    # a TorchFunctionMode (a device context, set_default_device) also blocks the fast path
    fast = not training and no_grad and not torch.overrides.has_torch_function((x,))
    route = mha_route({"mha_fast_path": fast, "need_weights": need_weights,
                       "d": 8, "h": 4, "h_kv": 4, "n": 16, "m": 16})
    assert measured == route["backend"]
    assert route["route"] == ("native" if fast else "weights" if need_weights else "sdpa")


def test_a_device_context_turns_the_fast_path_off():
    """Under `with torch.device(...)` MHA in eval mode reaches SDPA after all."""
    mha = nn.MultiheadAttention(32, 4, batch_first=True).eval()
    x = torch.randn(2, 16, 32)
    with torch.no_grad(), torch.device("cpu"):
        assert torch.overrides.has_torch_function((x,))
        measured = kernel_that_ran(lambda: mha(x, x, x, need_weights=False))
    assert measured == mha_route({"need_weights": False, "d": 8})["backend"] == "FLASH_ATTENTION"


def test_mha_default_need_weights_never_reaches_sdpa():
    """MHA's default need_weights=True takes the hand-written path in training."""
    mha = nn.MultiheadAttention(32, 4, batch_first=True)
    x = torch.randn(2, 16, 32)
    assert kernel_that_ran(lambda: mha(x, x, x)) is None
    assert mha_route({"d": 8})["route"] == "weights"


def test_mha_cuda_fast_path_uses_sdpa_only_for_flash_or_efficient():
    base = {"device": "cuda", "mha_fast_path": True, "need_weights": False, "dtype": "float16"}
    assert mha_route({**base, "sm": (8, 0)})["backend"] == "FLASH_ATTENTION"
    h100 = {**base, "sm": (9, 0), "cudnn": 91900}  # cuDNN first: the fast path keeps its own
    assert mha_route(h100)["route"] == "native"
    assert mha_route({**base, "sm": (8, 0), "d": 12})["route"] == "native"  # d % 8 != 0
    assert mha_route({**base, "sm": (8, 0), "mask": "bool"})["route"] == "native"


# ---------------------------------------------------------------------------
# Citations: every rule names a file, a place in it and the line it relies on
# ---------------------------------------------------------------------------

ALL_RULES = [(device, backend, rule) for device, table in (("cpu", P.CPU_RULES), ("cuda", P.CUDA_RULES))
             for backend, rules in table.items() for rule in rules]
TORCH_DIR = pathlib.Path(torch.__file__).parent
INSTALLED = {  # the files a citation with a line number points into, as installed
    P.H: TORCH_DIR / "include/ATen/native/transformers/sdp_utils_cpp.h",
    P.MHA: TORCH_DIR / "nn/modules/activation.py",
    P.FUN: TORCH_DIR / "nn/functional.py",
}


def test_every_row_cites_a_source_line():
    assert len(ALL_RULES) >= 20
    for device, backend, rule in ALL_RULES:
        file, where, quote = rule.source
        assert file.startswith(("aten/", "torch/")), (backend, rule.why)
        assert where and len(quote) > 8, (backend, rule.why)
        assert set(rule.versions) <= set(P.VERSIONS)


def _mha_sources():
    base = {"d": 8}
    return [mha_route({**base, "mha_fast_path": True})["source"],
            mha_route({**base, "need_weights": True})["source"],
            mha_route({**base, "need_weights": False})["source"]]


def test_numbered_citations_quote_the_installed_line():
    """A citation with a line number quotes that line of the installed torch 2.13
    (under another torch the numbers move: the quoted line must still be there)."""
    exact = torch.__version__.startswith("2.13")
    checked = 0
    for file, where, quote in [r.source for _, _, r in ALL_RULES] + _mha_sources():
        if isinstance(where, int):
            lines = INSTALLED[file].read_text().splitlines()
            found = quote in lines[where - 1] if exact else any(quote in x for x in lines)
            assert found, (file, where, quote)
            checked += 1
    assert checked >= 5


def test_every_refusal_reason_is_reported_with_its_source():
    out = choose_backend({"device": "cuda", "sm": (8, 0), "dtype": "float32", "mask": "bool",
                          "cudnn": 91900})
    flash = out["refused"]["FLASH_ATTENTION"]
    assert {why.split(":")[0] for why, _ in flash} >= {
        "an attn_mask (bool or float)", "dtype must be float16 or bfloat16"}
    assert all(len(source) == 3 for _, source in flash)
    assert out["backend"] == "EFFICIENT_ATTENTION"


# ---------------------------------------------------------------------------
# CUDA rows: the order, per version, and the table's teaching cases
# ---------------------------------------------------------------------------

ORDER_ROWS = [  # torch, sm, CUDA major, cuDNN, env var set -> cuDNN first?
    ("2.11", (9, 0), 13, 91900, False, True),
    ("2.11", (10, 0), 13, 91900, False, True),
    ("2.11", (10, 3), 13, 91900, False, True),
    ("2.11", (10, 1), 13, 91900, False, False),  # 2.11: only sm90, sm100, sm103
    ("2.13", (10, 1), 13, 91900, False, True),  # 2.13, 2.15: any sm9x or sm10x
    ("2.15", (9, 1), 13, 91900, False, True),
    ("2.13", (10, 1), 12, 91900, False, False),  # a CUDA 12 wheel keeps 2.11's list
    ("2.13", (9, 0), 13, 91500, False, False),  # cuDNN must be newer than 9.15.0
    ("2.13", (9, 0), 13, 91501, False, True),
    ("2.15", (9, 0), 13, 91900, True, False),  # TORCH_CUDNN_SDPA_DEPRIORITIZED
    ("2.15", (8, 0), 13, 91900, False, False),  # A100
    ("2.15", (12, 0), 13, 91900, False, False),  # consumer Blackwell
]


@pytest.mark.parametrize("version, sm, cuda, cudnn, env, first", ORDER_ROWS)
def test_cudnn_comes_first_only_where_the_source_says(version, sm, cuda, cudnn, env, first):
    case = {"torch": version, "device": "cuda", "sm": sm, "cuda": cuda, "cudnn": cudnn,
            "cudnn_deprioritized": env}
    order = choose_backend(case)["order"]
    assert order[0] == ("CUDNN_ATTENTION" if first else "FLASH_ATTENTION")
    assert set(order) == set(P.BACKENDS)


H100 = {"device": "cuda", "sm": (9, 0), "cudnn": 91900}
A100 = {"device": "cuda", "sm": (8, 0), "cudnn": 91900}
TEACHING_ROWS = [
    ({**H100, "dtype": "bfloat16", "mask": "bool"}, "CUDNN_ATTENTION"),
    ({**H100, "dtype": "bfloat16", "mask": "causal"}, "CUDNN_ATTENTION"),
    ({**H100, "dtype": "bfloat16", "cudnn_deprioritized": True}, "FLASH_ATTENTION"),
    ({**H100, "dtype": "bfloat16", "deterministic": True}, "FLASH_ATTENTION"),
    ({**H100, "dtype": "float32"}, "EFFICIENT_ATTENTION"),
    ({**H100, "dtype": "float64"}, "MATH"),
    ({**H100, "dtype": "bfloat16", "dropout": 0.1}, "FLASH_ATTENTION"),  # not k / 16
    ({**H100, "dtype": "bfloat16", "d": 256}, "FLASH_ATTENTION"),  # cuDNN 9.19: d <= 128
    ({**H100, "cudnn": 92300, "dtype": "bfloat16", "d": 256}, "CUDNN_ATTENTION"),
    ({**A100, "dtype": "bfloat16"}, "FLASH_ATTENTION"),
    ({**A100, "dtype": "bfloat16", "mask": "bool"}, "EFFICIENT_ATTENTION"),
    ({**A100, "dtype": "bfloat16", "mask": "float"}, "EFFICIENT_ATTENTION"),
    ({**A100, "dtype": "bfloat16", "mask": "causal", "n": 1, "m": 64}, "EFFICIENT_ATTENTION"),
    ({**A100, "dtype": "float16", "d": 6, "mask": "bool"}, "MATH"),
    ({**A100, "dtype": "bfloat16", "h": 8, "h_kv": 2, "enable_gqa": True}, "FLASH_ATTENTION"),
    ({"device": "cuda", "sm": (7, 5), "dtype": "bfloat16"}, "MATH"),  # T4: no bf16 kernels
    ({"device": "cuda", "sm": (7, 5), "dtype": "float16"}, "EFFICIENT_ATTENTION"),
]


@pytest.mark.parametrize("case, backend", TEACHING_ROWS)
def test_teaching_rows(case, backend):
    assert choose_backend(case)["backend"] == backend


def test_exercise_solutions():
    """The page's exercises, answered by the table."""
    ex1 = choose_backend({**A100, "dtype": "float32", "mask": "bool"})
    assert ex1["backend"] == "EFFICIENT_ATTENTION"
    assert not choose_backend({**A100, "dtype": "bfloat16", "mask": "causal"})["refused"][
        "FLASH_ATTENTION"]
    ex2 = choose_backend({**H100, "dtype": "bfloat16", "mask": "bool", "cudnn": 91500})
    assert ex2["backend"] == "EFFICIENT_ATTENTION"
    ex3 = choose_backend({"dtype": "float32", "dropout": 0.1})
    assert ex3["backend"] == "MATH"


# ---------------------------------------------------------------------------
# On a GPU: the probe's measurement equals the table's prediction
# ---------------------------------------------------------------------------

def _this_gpu():
    version = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    name = "2.11" if version < (2, 13) else "2.13" if version < (2, 15) else "2.15"
    return {"torch": name, "device": "cuda", "sm": torch.cuda.get_device_capability(),
            "cuda": int(torch.version.cuda.split(".")[0]),
            "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
            "cudnn_deprioritized": os.environ.get("TORCH_CUDNN_SDPA_DEPRIORITIZED", "") not in ("", "0"),
            "deterministic": torch.are_deterministic_algorithms_enabled()}


GPU_CASES = [
    {"dtype": dtype, "mask": mask, "d": d, "d_v": d, "dropout": dropout, "n": n, "m": 64}
    for dtype in ("float32", "float16", "bfloat16") for mask in ("none", "causal", "bool", "float")
    for d in (64, 12) for dropout in (0.0, 0.125) for n in (64, 1)
]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_rows_equal_what_torch_does_here():
    machine = _this_gpu()
    wrong = []
    for case in GPU_CASES:
        q, k, v, kwargs = _tensors(case, device="cuda")
        measured = probe_sdpa(q, k, v, **kwargs)
        table = choose_backend({**machine, **case})
        predicted = {b: not reasons for b, reasons in table["refused"].items()}
        if measured["accepts"] != predicted or measured["ran"] != table["backend"]:
            wrong.append((case, measured, table["backend"], table["order"]))
    assert not wrong, f"{machine}: {wrong[:3]}"


# ---------------------------------------------------------------------------
# Named errors
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("case, match", [
    ({"colour": "red"}, r"case has bad values, got 'colour' \(not a key\)"),
    ({"dtype": "int8"}, r"dtype='int8' \(one of"),
    ({"n": 0}, r"n=0 \(an int >= 1\)"),
    ({"h": 8, "h_kv": 3, "enable_gqa": True}, r"h=8, h_kv=3"),
    ({"h": 8, "h_kv": 2}, r"h=8, h_kv=2 \(h_kv divides h, with enable_gqa\)"),
    ({"dropout": 1.0}, r"dropout=1.0 \(in \[0, 1\)\)"),
    ({"device": "cuda"}, r"sm=None \(a \(major, minor\) tuple on cuda\)"),
])
def test_bad_cases_are_named(case, match):
    for fn in (choose_backend, mha_route):
        with pytest.raises((ValueError, TypeError), match=match):
            fn(case)


def test_probe_errors_are_named():
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(TypeError, match=r"q must be floating \(BHNd\) like q, sizes \{\}, got \(torch.float32"):
        probe_sdpa(q[0], q, q)
    with pytest.raises(ValueError, match=r"k must be floating \(BGMd\) like q, .* got \(torch.float64"):
        probe_sdpa(q, q.double(), q)
    with pytest.raises(ValueError, match=r"v must be floating \(BGMe\) like q, .*'M': 4.* \(1, 2, 3, 8\)\)"):
        probe_sdpa(q, q, q[:, :, :3])
    with pytest.raises(ValueError, match=r"attn_mask must be \(N, M\) or \(B, H, N, M\).*got"):
        probe_sdpa(q, q, q, attn_mask=torch.ones(4, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\), got 1.0"):
        probe_sdpa(q, q, q, dropout_p=1.0)


def test_the_snippet_quotes_no_more_than_its_own_sections():
    """The probe's kernels stay short enough to show open on the page."""
    for fn in (P.prefers_cudnn, P.priority_order, P.refusals, P.first_viable, P.forced, P.ran):
        assert len(inspect.getsource(fn).splitlines()) <= 15, fn.__name__


@pytest.mark.parametrize("sm", [(8, 0), (9, 0), (10, 0), (10, 7)])
@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_no_cudnn_reads_as_none_on_every_gpu(sm, dropout):
    # The default case has cudnn=None ("no cuDNN"): every rule must read it as
    # "older than any version", never compare None with a number.
    case = {"device": "cuda", "sm": sm, "dropout": dropout}
    chosen = choose_backend(case)
    assert chosen["backend"] != "CUDNN_ATTENTION"
    assert any("no cuDNN 9" in why for why, _ in chosen["refused"]["CUDNN_ATTENTION"]), chosen
    assert chosen == choose_backend({**case, "cudnn": 0})
