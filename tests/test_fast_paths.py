"""Every fast path (F.scaled_dot_product_attention inside a module) returns
zeros for a query that may attend to no key: on every device present, in
float32, bfloat16 and float16, under each SDPA backend the device has, and
under a backend that leaks such rows the way cuDNN does on recent GPUs.

Also: gradients through a mask that leaves a row empty are finite and equal
PyTorch's, for boolean and float (additive) masks alike.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.testing import assert_close

from snippets.attention.causal import CausalSelfAttention
from snippets.attention.cross_attention import CrossAttention
from snippets.attention.grouped_query import GroupedQueryAttention
from snippets.attention.multi_head import MultiHeadAttention
from snippets.attention.self_attention import SelfAttention
from snippets.foundations.scaled_dot_product import scaled_dot_product_attention

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# The kernels each device can be forced onto (CUDA's refuse some inputs: then
# the combination is skipped on that machine; the CPU's two take every input).
BACKENDS = {
    "cpu": [SDPBackend.MATH, SDPBackend.FLASH_ATTENTION],
    "cuda": [SDPBackend.MATH, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION],
    "mps": [SDPBackend.MATH],
}
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}


def _mha(d_model):
    return MultiHeadAttention(d_model, 2)


def _gqa(d_model):
    return GroupedQueryAttention(d_model, 4, 2)


# name -> (build the module, call it with need_weights; the batch element and
# query rows that have no allowed key)
def _run_mha(module, x, need_weights):
    b, n, _ = x.shape
    attn_mask = torch.ones(b, 1, n, n, dtype=torch.bool, device=x.device)
    attn_mask[0, :, 2] = False  # query 2 of sequence 0 may see nothing
    return module(x, attn_mask=attn_mask, need_weights=need_weights)[0]


def _run_key_mask(module, x, need_weights):
    b, n, _ = x.shape
    key_mask = torch.ones(b, n, dtype=torch.bool, device=x.device)
    key_mask[0] = False  # sequence 0 is all padding: every query of it is empty
    return module(x, key_mask=key_mask, is_causal=True, need_weights=need_weights)[0]


def _run_causal(module, x, need_weights):
    b, n, _ = x.shape
    key_mask = torch.ones(b, n, dtype=torch.bool, device=x.device)
    key_mask[0, :3] = False  # left padding: queries 0..2 of sequence 0 see nothing
    return module(x, key_mask=key_mask, need_weights=need_weights)[0]


def _run_cross(module, x, need_weights):
    b, n, _ = x.shape
    context = torch.flip(x, dims=[1])[:, :5]  # (B, 5, D)
    key_mask = torch.ones(b, 5, dtype=torch.bool, device=x.device)
    key_mask[0] = False  # an empty context: every query of sequence 0 sees nothing
    return module(x, context, key_mask=key_mask, need_weights=need_weights)[0]


CASES = {
    "MultiHeadAttention/attn_mask": (_mha, _run_mha, (0, [2])),
    "MultiHeadAttention/key_mask": (_mha, _run_key_mask, (0, slice(None))),
    "GroupedQueryAttention/attn_mask": (_gqa, _run_mha, (0, [2])),
    "GroupedQueryAttention/key_mask": (_gqa, _run_key_mask, (0, slice(None))),
    "CausalSelfAttention": (lambda d: CausalSelfAttention(d), _run_causal, (0, slice(0, 3))),
    "CrossAttention": (lambda d: CrossAttention(d), _run_cross, (0, slice(None))),
}


def _build(name, device, dtype):
    torch.manual_seed(0)
    make, run, (batch, rows) = CASES[name]
    module = make(16).to(device=device, dtype=dtype).eval()
    # Large inputs: unmasked attention over the padding would be far from zero.
    x = 4 * torch.randn(2, 6, 16, device=device, dtype=dtype)
    return module, run, x, batch, rows


def _empty_row_output(module):
    """What the module returns for a query whose attention output is zero:
    its output projection applied to zeros, i.e. the projection's bias."""
    proj = module.out_proj
    return proj.bias if proj.bias is not None else torch.zeros(proj.out_features, device=proj.weight.device)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(CASES))
def test_fast_path_zeros_empty_rows_on_every_backend(device, name, dtype):
    module, run, x, batch, rows = _build(name, device, dtype)
    with torch.no_grad():
        explicit = run(module, x, True)
        ran = []
        for backend in BACKENDS[device]:
            try:
                with sdpa_kernel([backend]):
                    fast = run(module, x, False)
            except RuntimeError as exc:  # this kernel refuses the input (dtype, mask, GPU)
                if backend == SDPBackend.MATH or "No viable backend" not in str(exc) and "No available kernel" not in str(exc):
                    raise
                continue
            ran.append(backend.name)
            empty = fast[batch, rows]
            expected = _empty_row_output(module).expand_as(empty)
            assert torch.equal(empty, expected), f"{backend.name}: an empty row leaked {(empty - expected).abs().max()}"
            assert_close(fast, explicit, atol=TOL[dtype], rtol=TOL[dtype], msg=f"{backend.name} vs explicit path")
        if device == "cpu":  # both CPU kernels take every input here
            assert ran == ["MATH", "FLASH_ATTENTION"], ran


def _leaky_sdpa(original):
    """An SDPA that treats an all-False boolean mask row as 'attend to every
    key', as cuDNN does in fp16/bf16 on Hopper and Blackwell GPUs."""

    def leaky(q, k, v, attn_mask=None, **kwargs):
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            attn_mask = attn_mask | ~attn_mask.any(dim=-1, keepdim=True)
        return original(q, k, v, attn_mask=attn_mask, **kwargs)

    return leaky


@pytest.mark.parametrize("name", list(CASES))
def test_fast_path_survives_a_backend_that_leaks_empty_rows(device, name, monkeypatch):
    module, run, x, batch, rows = _build(name, device, torch.float32)
    with torch.no_grad():
        explicit = run(module, x, True)
        monkeypatch.setattr(F, "scaled_dot_product_attention", _leaky_sdpa(F.scaled_dot_product_attention))
        fast = run(module, x, False)
    empty = fast[batch, rows]
    assert torch.equal(empty, _empty_row_output(module).expand_as(empty))
    assert_close(fast, explicit)


def test_the_leaky_backend_really_leaks(device):
    """The emulation above is only a check if it does leak."""
    q = torch.randn(1, 1, 3, 4, device=device)
    mask = torch.tensor([[True, True, False], [False, False, False], [True, False, False]], device=device)
    leaked = _leaky_sdpa(F.scaled_dot_product_attention)(q, q, q, attn_mask=mask)
    assert leaked[0, 0, 1].abs().max() > 0.1
    assert F.scaled_dot_product_attention(q, q, q, attn_mask=mask)[0, 0, 1].abs().max() == 0


# ----------------------------------------------------------------------------
# Gradients through an empty row
# ----------------------------------------------------------------------------
def _masks(n, m, device, dtype):
    allowed = torch.rand(n, m, device=device) > 0.4
    allowed[:, 0] = True
    allowed[1] = False  # query 1 may see nothing
    additive = torch.zeros(n, m, device=device, dtype=dtype).masked_fill(~allowed, float("-inf"))
    additive = additive + torch.where(allowed, torch.randn(n, m, device=device, dtype=dtype), 0.0)
    return {"bool": allowed, "float": additive}


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_function_gradients_match_pytorch_through_an_empty_row(device, kind):
    torch.manual_seed(1)
    dtype = torch.float32 if device == "mps" else torch.float64
    q, k, v = (torch.randn(2, 2, 5, 4, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    mask = _masks(5, 7, device, dtype)[kind]
    k2, v2 = (torch.randn(2, 2, 7, 4, device=device, dtype=dtype, requires_grad=True) for _ in range(2))
    ours, _ = scaled_dot_product_attention(q, k2, v2, attn_mask=mask)
    theirs = F.scaled_dot_product_attention(q, k2, v2, attn_mask=mask)
    assert_close(ours, theirs)
    assert torch.equal(ours[:, :, 1], torch.zeros_like(ours[:, :, 1]))
    upstream = torch.randn_like(ours)
    g_ours = torch.autograd.grad(ours, (q, k2, v2), upstream)
    g_theirs = torch.autograd.grad(theirs, (q, k2, v2), upstream)
    for name, a, b in zip("qkv", g_ours, g_theirs):
        assert torch.isfinite(a).all(), f"d out / d {name} has NaN or inf"
        assert_close(a, b, msg=f"gradient for {name}")
    assert torch.equal(g_ours[0][:, :, 1], torch.zeros_like(g_ours[0][:, :, 1])), "an empty row's query gets no gradient"


def test_function_gradcheck_with_an_empty_float_row():
    torch.manual_seed(2)
    q, k, v = (torch.randn(1, 3, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = torch.zeros(3, 3, dtype=torch.float64)
    mask[0] = float("-inf")
    mask[2, 1] = float("-inf")
    assert torch.autograd.gradcheck(lambda q, k, v: scaled_dot_product_attention(q, k, v, attn_mask=mask)[0], (q, k, v))


def _module_cases():
    yield "MultiHeadAttention", lambda: MultiHeadAttention(8, 2), True
    yield "GroupedQueryAttention", lambda: GroupedQueryAttention(8, 4, 2), True
    yield "SelfAttention", lambda: SelfAttention(8), False


@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("name, make, has_fast_path", list(_module_cases()), ids=lambda c: c if isinstance(c, str) else "")
def test_module_gradients_are_finite_through_an_empty_row(device, name, make, has_fast_path, kind):
    torch.manual_seed(3)
    dtype = torch.float32 if device == "mps" else torch.float64
    module = make().to(device=device, dtype=dtype)
    x = torch.randn(2, 5, 8, device=device, dtype=dtype, requires_grad=True)
    mask = _masks(5, 5, device, dtype)[kind]

    def run(need_weights):
        if name == "SelfAttention":
            return module(x, attn_mask=mask)[0]
        return module(x, attn_mask=mask, need_weights=need_weights)[0]

    out = run(True)
    grads = torch.autograd.grad(out.sum(), [x, *module.parameters()])
    for g in grads:
        assert torch.isfinite(g).all(), f"{name}: NaN or inf in a gradient with a {kind} mask"
    if has_fast_path:  # the explicit path against PyTorch's kernel, gradients included
        fast = run(False)
        fast_grads = torch.autograd.grad(fast.sum(), [x, *module.parameters()])
        assert_close(out, fast)
        for a, b in zip(grads, fast_grads):
            assert_close(a, b)
    else:  # SelfAttention has no fast path: its explicit path against PyTorch's function
        q, k, v = module.q_proj(x), module.k_proj(x), module.v_proj(x)
        reference = module.out_proj(F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
        assert_close(out, reference)
        ref_grads = torch.autograd.grad(reference.sum(), [x, *module.parameters()])
        for a, b in zip(grads, ref_grads):
            assert_close(a, b)


# ----------------------------------------------------------------------------
# A float mask combined with a key mask or the causal flag: the rows these
# leave empty return zeros on both paths, with finite gradients.
# ----------------------------------------------------------------------------
@pytest.mark.parametrize("is_causal", [False, True], ids=["key_mask", "key_mask+causal"])
@pytest.mark.parametrize("make", [lambda: MultiHeadAttention(8, 2), lambda: GroupedQueryAttention(8, 4, 2)], ids=["mha", "gqa"])
def test_float_mask_with_key_mask_and_causal_leaves_empty_rows_zero(device, make, is_causal):
    torch.manual_seed(4)
    dtype = torch.float32 if device == "mps" else torch.float64
    module = make().to(device=device, dtype=dtype)
    b, n = 2, 5
    x = torch.randn(b, n, 8, device=device, dtype=dtype, requires_grad=True)
    bias = torch.randn(n, n, device=device, dtype=dtype)  # a float mask with no -inf of its own
    key_mask = torch.ones(b, n, dtype=torch.bool, device=device)
    key_mask[0, :2] = False  # keys 0 and 1 of sequence 0 are padding
    # Independent reference: one float mask, -inf wherever a key may not be seen.
    allowed = key_mask[:, None, None, :].expand(b, 1, n, n)
    if is_causal:
        allowed = allowed & torch.ones(n, n, dtype=torch.bool, device=device).tril()
    empty = ~allowed.any(-1)  # (B, 1, N): with the causal flag, queries 0, 1 of sequence 0
    assert empty.any() == is_causal
    reference_mask = bias.masked_fill(~allowed, float("-inf"))

    if hasattr(module, "in_proj"):  # MultiHeadAttention's fused self-attention projection
        q, k, v = module.in_proj(x).chunk(3, dim=-1)
    else:
        q, k, v = module.q_proj(x), module.k_proj(x), module.v_proj(x)
    heads = lambda t, h: t.view(b, n, h, -1).transpose(1, 2)  # noqa: E731
    n_kv = getattr(module, "n_kv_heads", module.n_heads)
    reference = F.scaled_dot_product_attention(
        heads(q, module.n_heads), heads(k, n_kv), heads(v, n_kv), attn_mask=reference_mask, enable_gqa=True
    )
    reference = module.out_proj(reference.masked_fill(empty[..., None], 0.0).transpose(1, 2).reshape(b, n, 8))
    ref_grads = torch.autograd.grad(reference.sum(), [x, *module.parameters()])
    for need_weights in (True, False):
        out = module(x, attn_mask=bias, key_mask=key_mask, is_causal=is_causal, need_weights=need_weights)[0]
        assert_close(out, reference)
        grads = torch.autograd.grad(out.sum(), [x, *module.parameters()])
        for g, r in zip(grads, ref_grads):
            assert torch.isfinite(g).all()
            assert_close(g, r)


def test_other_snippets_that_call_sdpa_with_a_boolean_mask_zero_empty_rows(device, monkeypatch):
    """The modern decoder's kernel and context parallelism's local attention,
    under the backend that leaks: rows with no allowed key stay zero."""
    from snippets.distributed.context_parallel import _local_attention
    from snippets.modern.modern_block import sdpa_attend

    torch.manual_seed(5)
    q, k, v = (4 * torch.randn(2, 2, 5, 8, device=device) for _ in range(3))
    allowed = torch.rand(2, 1, 5, 5, device=device) > 0.3
    allowed[0, :, 3] = False
    monkeypatch.setattr(F, "scaled_dot_product_attention", _leaky_sdpa(F.scaled_dot_product_attention))
    out = sdpa_attend(q, k, v, attn_mask=allowed)
    assert torch.equal(out[0, :, 3], torch.zeros_like(out[0, :, 3]))
    key_mask = torch.ones(2, 5, dtype=torch.bool, device=device)
    key_mask[1, :2] = False  # with the causal triangle, queries 0 and 1 of sequence 1 see nothing
    positions = torch.arange(5, device=device)
    out = _local_attention(q, k, v, positions, positions, key_mask, True, None)
    assert torch.equal(out[1, :, :2], torch.zeros_like(out[1, :, :2]))
