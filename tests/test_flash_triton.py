"""Proof for snippets/efficiency/flash_triton.py.

Proves: the Triton FlashAttention-2 kernels give the outputs and the gradients
(dq, dk, dv) of F.scaled_dot_product_attention, causal (a lower-right mask built
here independently) and not, at lengths that no tile size divides (N != M both
ways, so some causal rows are empty), head widths 64 and 128, float16 and
bfloat16, within twice the error SDPA itself makes in that dtype against
float64 (plus one ulp for the rounding of P, tests/tolerance.py); float32 to
float32 rounding (IEEE products, not TF32); 3-D (B*H, N, d) input equals the
4-D call; the saved log-sum-exp equals torch.logsumexp of the masked scores
(-inf for empty rows, whose outputs and gradients are zeros); empty lengths
give an empty output or zeros; a custom scale and the default tiles work;
causal outputs ignore future keys; large logits stay finite; every validation
message is raised.

On the CPU the kernels run through Triton's interpreter: tests/conftest.py sets
TRITON_INTERPRET=1 before triton is imported where no CUDA device exists, and
small tiles (16) keep the interpreter quick. On a CUDA device the compiled
kernels are tested.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib

import pytest
import torch
import torch.nn.functional as F

from tolerance import assert_within_baseline

pytest.importorskip("triton")  # Linux wheels only

ROOT = pathlib.Path(__file__).resolve().parents[1]
FILE = ROOT / "snippets" / "efficiency" / "flash_triton.py"
_loaded: dict[bool, object] = {}


def load_flash(interpret: bool):
    """A fresh import of the file; Triton reads TRITON_INTERPRET when each kernel
    is decorated, so the variable is set around the import (a copy imported with
    it off holds compiled kernels, which refuse CPU tensors)."""
    if interpret not in _loaded:
        old = os.environ.get("TRITON_INTERPRET")
        os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
        try:
            name = f"flash_triton_interpret_{interpret}"
            spec = importlib.util.spec_from_file_location(name, FILE)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        finally:
            if old is None:
                del os.environ["TRITON_INTERPRET"]
            else:
                os.environ["TRITON_INTERPRET"] = old
        _loaded[interpret] = module
    return _loaded[interpret]


@pytest.fixture
def flash(device):
    flag = os.environ.get("TRITON_INTERPRET", "0").lower()
    interpreting = flag in ("1", "true", "on", "yes")
    if device == "cpu" and not interpreting:
        pytest.skip("CPU tensors need Triton's interpreter: TRITON_INTERPRET=1 before "
                    "triton is imported")
    if device == "cuda" and interpreting:
        pytest.skip("TRITON_INTERPRET is set: the compiled kernels cannot run here")
    if device not in ("cpu", "cuda"):
        pytest.skip(f"Triton has no backend for {device}")
    return load_flash(interpret=interpreting)


def lower_right_mask(n: int, m: int) -> torch.Tensor:
    """True = may attend; the N queries are the last N of M positions."""
    return torch.ones(n, m, dtype=torch.bool).tril(diagonal=m - n)


def inputs(B, H, N, M, d, dtype, seed=0):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    return [torch.randn(B, H, n, d, generator=g).to(dtype).requires_grad_()
            for n in (N, M, M)]


def attend_and_grads(fn, q, k, v, do):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = fn(q, k, v)
    out.backward(do.to(out.dtype))
    return [out.detach(), q.grad, k.grad, v.grad]


@pytest.mark.parametrize("d,N,M", [(64, 37, 53), (128, 53, 37)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_matches_sdpa_outputs_and_gradients(flash, dtype, causal, d, N, M):
    q, k, v = inputs(1, 2, N, M, d, dtype)
    do = torch.randn(1, 2, N, d, generator=torch.Generator(q.device).manual_seed(1))
    mask = lower_right_mask(N, M) if causal else None

    def sdpa(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def kernel(q, k, v):
        return flash.flash_attention(q, k, v, causal=causal, block_m=16, block_n=16)

    # the float64 oracle on the same rounded inputs
    exact = attend_and_grads(sdpa, *(t.double() for t in (q, k, v)), do.double())
    same_dtype = attend_and_grads(sdpa, q, k, v, do)  # SDPA's own rounding in dtype
    ours = attend_and_grads(kernel, q, k, v, do)
    for name, a, b, c in zip(("out", "dq", "dk", "dv"), ours, exact, same_dtype):
        assert a.dtype == dtype and a.shape == b.shape, name
        # SDPA rounds once at the end; the kernel also rounds P to dtype before
        # P @ V: one ulp of slack for that step.
        try:
            ratio = assert_within_baseline(a, c, b, slack=1.0)
        except AssertionError as error:
            raise AssertionError(f"{name} ({dtype}, causal={causal}): {error}") from None
        print(f"flash {dtype} causal={causal} d={d} {name}: ratio {ratio:.3g}")


def test_saved_lse_and_empty_rows(flash):
    N, M, d, scale = 40, 21, 64, 0.3  # N > M: causal rows i < N - M see no key
    q, k, v = inputs(1, 1, N, M, d, torch.float16, seed=2)
    out, lse = flash.flash_attention_lse(q, k, v, causal=True, scale=scale, block_m=16,
                                         block_n=16)
    mask = lower_right_mask(N, M)
    scores = (q.float() @ k.float().transpose(-2, -1) * scale).masked_fill(
        ~mask, float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(scores, dim=-1), atol=2e-3,
                               rtol=1e-3)
    empty = N - M
    assert torch.isneginf(lse[..., :empty]).all()
    assert torch.isfinite(lse[..., empty:]).all()
    assert (out[..., :empty, :] == 0).all()
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                         attn_mask=mask, scale=scale)
    torch.testing.assert_close(out.float(), ref, atol=2e-3, rtol=2e-3)
    # SDPA in float16 on the same inputs, its empty rows set to the zeros the
    # kernel returns (SDPA's own value there is not the point of this check).
    low = [t.detach() for t in (q, k, v)]
    exact = F.scaled_dot_product_attention(*(t.double() for t in low), attn_mask=mask, scale=scale)
    baseline = F.scaled_dot_product_attention(*low, attn_mask=mask, scale=scale)
    exact[..., :N - M, :], baseline[..., :N - M, :] = 0.0, 0.0
    ratio = assert_within_baseline(out.detach(), baseline, exact)
    print(f"flash float16 with empty rows: ratio {ratio:.3g}")
    out.float().square().sum().backward()
    assert torch.isfinite(q.grad).all() and (q.grad[..., :empty, :] == 0).all()
    assert torch.isfinite(k.grad).all() and torch.isfinite(v.grad).all()


def test_default_tiles_and_large_logits(flash):
    N, d = 29, 64
    q, k, v = inputs(1, 1, N, N, d, torch.float16, seed=3)
    # scores in the hundreds: exp would overflow unshifted
    q = (q.detach() * 30).to(torch.float16)
    # the GPU tiles: 128 x 64
    out = flash.flash_attention(q, k.detach(), v.detach(), causal=True)
    assert torch.isfinite(out).all()
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                         is_causal=True)
    torch.testing.assert_close(out.float(), ref, atol=5e-3, rtol=5e-3)
    low = (q, k.detach(), v.detach())
    exact = F.scaled_dot_product_attention(*(t.double() for t in low), is_causal=True)
    baseline = F.scaled_dot_product_attention(*low, is_causal=True)
    ratio = assert_within_baseline(out, baseline, exact)
    print(f"flash float16 default tiles, scores in the hundreds: ratio {ratio:.3g}")


def test_causal_output_ignores_future_keys(flash):
    N = M = 24
    q, k, v = (t.detach() for t in inputs(1, 1, N, M, 32, torch.float16, seed=4))
    out = flash.flash_attention(q, k, v, causal=True, block_m=16, block_n=16)
    k2, v2 = k.clone(), v.clone()
    k2[..., 12:, :] += 5.0
    v2[..., 12:, :] -= 5.0
    out2 = flash.flash_attention(q, k2, v2, causal=True, block_m=16, block_n=16)
    assert torch.equal(out[..., :12, :], out2[..., :12, :])
    assert not torch.equal(out[..., 12:, :], out2[..., 12:, :])


def test_cpu_without_interpreter_is_refused(device):
    compiled = load_flash(interpret=False)
    x = torch.randn(1, 1, 4, 16, dtype=torch.float16, device="cpu")
    with pytest.raises(ValueError, match=r"got cpu \(the CPU needs TRITON_INTERPRET=1"):
        compiled.flash_attention(x, x, x)


def test_validation_messages(flash):
    x = torch.randn(1, 2, 5, 16, dtype=torch.float16)
    fa = flash.flash_attention
    with pytest.raises(ValueError, match=r"q must be \(B, H, N, d\) .*, got \[1\]"):
        fa([1], x, x)
    with pytest.raises(ValueError, match=r"q must be \(B, H, N, d\) .*, "
                                         r"got torch.float16 \(5, 16\)"):
        fa(x[0, 0], x, x)
    with pytest.raises(ValueError, match=r"k must be \(B, H, M, d\) torch.float16 on q's device, "
                                         r".*got torch.float16 \(2, 5, 16\)"):
        fa(x, x[0], x)
    with pytest.raises(ValueError, match=r"k must be \(B\*H, M, d\) .*, "
                                         r"got torch.float16 \(1, 2, 5, 16\)"):
        fa(x[0], x, x)  # a 3-D q makes every input (B*H, length, d)
    with pytest.raises(ValueError, match=r"q must be \(B, H, N, d\) torch.float16 or "
                                         r"torch.bfloat16 or torch.float32 on q's device, "
                                         r"sizes \{\}, got torch.float64"):
        fa(x.double(), x, x)
    with pytest.raises(ValueError, match=r"v must be \(B, H, M, d\) torch.float16 on q's device, "
                                         r".*got torch.float32"):
        fa(x, x, x.float())
    with pytest.raises(ValueError, match=r"k must be \(B, H, M, d\) torch.float16 on q's device, "
                                         r".*got torch.bfloat16"):
        fa(x, x.bfloat16(), x)
    k3 = torch.zeros(1, 3, 5, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"k must be \(B, H, M, d\) .*'H': 2.*, "
                                         r"got torch.float16 \(1, 3, 5, 16\)"):
        fa(x, k3, k3)
    with pytest.raises(ValueError, match=r"v must be \(B, H, M, d\) .*'M': 5.*, "
                                         r"got torch.float16 \(1, 2, 6, 16\)"):
        fa(x, x, torch.zeros(1, 2, 6, 16, dtype=torch.float16))
    y = torch.zeros(1, 2, 5, 48, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"q's head width d must be 16, 32, 64 or 128, "
                                         r"got 48"):
        fa(y, y, y)
    with pytest.raises(ValueError, match=r"scale must be None or finite and > 0, "
                                         r"got -1.0"):
        fa(x, x, x, scale=-1.0)
    with pytest.raises(ValueError, match=r"scale must be .* got nan"):
        fa(x, x, x, scale=float("nan"))
    with pytest.raises(ValueError, match=r"block_m must be a power of two >= 16 or "
                                         r"None, got 24"):
        fa(x, x, x, block_m=24)
    with pytest.raises(ValueError, match=r"block_n must be a power of two >= 16 or "
                                         r"None, got 8"):
        fa(x, x, x, block_n=8)
    meta = torch.empty(1, 2, 5, 16, dtype=torch.float16, device="meta")
    with pytest.raises(ValueError, match=r"v must be .* on q's device, .* got .* on meta"):
        fa(x, x, meta)
    with pytest.raises(ValueError, match=r"q must be on a CUDA device, got meta"):
        fa(meta, meta, meta)
    with pytest.raises(ValueError, match=r"scale must be .* got inf"):
        flash.flash_attention_lse(x, x, x, scale=float("inf"))


def test_the_autograd_function_checks_its_own_inputs(flash):
    """FlashAttention.apply is public too: it refuses what flash_attention refuses,
    and a scale of None means 1 / sqrt(d) there as well."""
    x = torch.randn(1, 2, 5, 16, dtype=torch.float16)
    apply = flash.FlashAttention.apply
    with pytest.raises(ValueError, match=r"q must be \(B, H, N, d\) .*, got \[1\]"):
        apply([1], x, x, False, None, 16, 16)
    q3 = torch.zeros(1, 3, 5, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"k must be \(B, H, M, d\) .*'H': 3.*, "
                                         r"got torch.float16 \(1, 2, 5, 16\)"):
        apply(q3, x, x, False, None, 16, 16)
    with pytest.raises(ValueError, match=r"k must be \(B, H, M, d\) torch.float16 on q's device, "
                                         r".*got torch.float32"):
        apply(x, x.float(), x, False, None, 16, 16)
    out, lse = apply(x, x, x, False, None, 16, 16)
    assert torch.equal(out, flash.flash_attention(x, x, x, block_m=16, block_n=16))
    assert lse.shape == (1, 2, 5)
    assert torch.equal(out, flash.flash_attention(x, x, x, scale=0.25, block_m=16,
                                                  block_n=16))


def test_empty_lengths(flash):
    # No queries: an empty output. No keys: every row is empty, so zeros, L = -inf,
    # and zero gradients, as for the causal rows that see no key.
    x = torch.randn(1, 2, 5, 16, dtype=torch.float16)
    none = x[:, :, :0]
    out = flash.flash_attention(none, x, x, block_m=16, block_n=16)
    assert out.shape == (1, 2, 0, 16)
    q = x.clone().requires_grad_()
    out, lse = flash.flash_attention_lse(q, none, none, block_m=16, block_n=16)
    assert (out == 0).all() and torch.isneginf(lse).all()
    out.float().sum().backward()
    assert (q.grad == 0).all()


def test_float32_runs_in_ieee_precision(flash):
    # float32 inputs: the products run as IEEE float32 (input_precision="ieee"),
    # so outputs and gradients match float64 SDPA to float32 rounding, far
    # tighter than TF32's 10-bit mantissa (about 1e-3 relative) would allow.
    N, M, d = 37, 21, 32
    q, k, v = inputs(1, 2, N, M, d, torch.float32, seed=6)
    do = torch.randn(1, 2, N, d, generator=torch.Generator(q.device).manual_seed(7))
    mask = lower_right_mask(N, M)
    def kernel(q, k, v):
        return flash.flash_attention(q, k, v, causal=True, block_m=16, block_n=16)

    def sdpa(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    ours = attend_and_grads(kernel, q, k, v, do)
    exact = attend_and_grads(sdpa, *(t.double() for t in (q, k, v)), do.double())
    empty = N - M  # rows with no visible key: zeros in the kernel, NaN-free zeros here
    exact[0][..., :empty, :] = 0.0
    # SDPA in float32 on the same inputs is the baseline, its empty rows zeroed;
    # the atol stays, so a baseline less exact than IEEE cannot loosen the test.
    theirs = attend_and_grads(sdpa, q, k, v, do)
    theirs[0][..., :empty, :] = 0.0
    for name, a, b, c in zip(("out", "dq", "dk", "dv"), ours, exact, theirs):
        assert a.dtype == torch.float32, name
        torch.testing.assert_close(a.double(), b, atol=2e-5, rtol=2e-5, msg=name)
        ratio = assert_within_baseline(a, c, b)
        print(f"flash float32 {name}: ratio {ratio:.3g}")


def test_three_dimensional_input_is_batch_times_heads(flash):
    # (B*H, N, d) is the layout many callers hold; it must equal the 4-D call.
    q, k, v = (t.detach() for t in inputs(2, 3, 20, 27, 16, torch.float16, seed=8))
    four = flash.flash_attention(q, k, v, causal=True, block_m=16, block_n=16)
    flat = [t.reshape(6, -1, 16).requires_grad_() for t in (q, k, v)]
    three, lse = flash.flash_attention_lse(*flat, causal=True, block_m=16, block_n=16)
    assert three.shape == (6, 20, 16) and lse.shape == (6, 20)
    assert torch.equal(three.reshape(2, 3, 20, 16), four)
    three.float().sum().backward()
    assert flat[0].grad.shape == (6, 20, 16) and flat[1].grad.shape == (6, 27, 16)


@pytest.mark.parametrize("shift", [-2e4, 2e4])
def test_scores_shifted_far_from_zero(flash, shift):
    # softmax(s + c) = softmax(s): one extra coordinate adds c to every score.
    # A running maximum that started at a finite value (0, or -1e4) instead of
    # -inf would meet only scores near -2e4 and return zeros (exp2 underflows),
    # or overflow at +2e4; the kernel must equal SDPA on the unshifted scores.
    g = torch.Generator(device=torch.get_default_device()).manual_seed(9)
    q, k, v = (torch.randn(1, 2, 19, 15, generator=g) for _ in range(3))
    scale = 16 ** -0.5
    qs = torch.cat([q, torch.ones(1, 2, 19, 1)], dim=-1)
    ks = torch.cat([k, torch.full((1, 2, 19, 1), shift / scale)], dim=-1)
    vs = torch.cat([v, torch.zeros(1, 2, 19, 1)], dim=-1)
    out = flash.flash_attention(qs, ks, vs, causal=True, scale=scale, block_m=16,
                                block_n=16)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    torch.testing.assert_close(out[..., :15], ref, atol=5e-3, rtol=5e-3)
