"""The trainers' tweaks against their equations written as loops, and their off switches.

Each reference below is a plain loop over queries and keys, written from the
papers' equations and the authors' code (ResFormer's fixed 0.5 / 0.5 mix,
nanochat's 3 * sigmoid gate, MTA's zero-then-convolve-then-mask, Canon's
causal depthwise convolution with a residual, XSA's projection), not from the
snippet. The off switches are compared with F.scaled_dot_product_attention.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from snippets.modern import trainers_tweaks as TT

F64 = torch.float64


def _qkv(b=2, h=2, n=6, d=4, d_v=None, dtype=F64, seed=0):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    q, k = (torch.randn(b, h, n, d, generator=g, dtype=dtype) for _ in range(2))
    return q, k, torch.randn(b, h, n, d_v or d, generator=g, dtype=dtype)


def _sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _loop_attention(q, k, values):
    """softmax_j<=i(q_i . k_j / sqrt d) summed over values_j, one query at a time."""
    b, h, n, d = q.shape
    out = torch.zeros(b, h, n, values.shape[-1], dtype=q.dtype)
    for bi in range(b):
        for hi in range(h):
            for i in range(n):
                s = [float(q[bi, hi, i] @ k[bi, hi, j]) / math.sqrt(d) for j in range(i + 1)]
                top = max(s)
                w = [math.exp(x - top) for x in s]
                for j in range(i + 1):
                    out[bi, hi, i] += w[j] / sum(w) * values[bi, hi, j]
    return out


# ----------------------------------------------------------------- value residual

def test_value_residual_matches_the_loop_resformer_mix():
    q, k, v = _qkv(seed=1)
    v1 = torch.randn_like(v)  # the first layer's values
    expected = _loop_attention(q, k, 0.5 * v1 + 0.5 * v)  # the authors' fixed mix
    got = TT.value_residual_attention(q, k, v, v1, keep=0.5, gate=0.5)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


def test_value_embedding_with_nanochat_gate_matches_the_loop():
    q, k, v = _qkv(seed=2)
    x = torch.randn(2, 6, 16, dtype=F64)
    w = torch.randn(2, 12, dtype=F64) * 0.3
    ve = torch.randn_like(v)
    gate = TT.value_gate(x, w)  # nanochat: 3 * sigmoid(W x[..., :12]), per kv head
    for b in range(2):
        for h in range(2):
            for t in range(6):
                logit = float(sum(w[h, c] * x[b, t, c] for c in range(12)))
                assert gate[b, h, t, 0].item() == pytest.approx(3 / (1 + math.exp(-logit)), abs=1e-14)
    expected = _loop_attention(q, k, v + gate * ve)
    got = TT.value_residual_attention(q, k, v, ve, keep=1.0, gate=gate)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


def test_value_gate_stays_inside_zero_and_top():
    g = torch.Generator(device=torch.get_default_device()).manual_seed(16)
    x = torch.randn(3, 5, 16, generator=g, dtype=F64)  # logits of a few units: no rounding to top
    gate = TT.value_gate(x, torch.randn(4, 12, generator=g, dtype=F64) * 0.5, top=2.0)
    assert gate.shape == (3, 4, 5, 1)
    assert bool((gate > 0).all()) and bool((gate < 2).all())


def test_value_residual_off_switches_are_attention():
    q, k, v = _qkv(seed=3)
    ref = _sdpa(q, k, v)
    torch.testing.assert_close(TT.value_residual_attention(q, k, v), ref, rtol=0, atol=1e-12)
    off = TT.value_residual_attention(q, k, v, torch.randn_like(v), keep=1.0, gate=0.0)
    torch.testing.assert_close(off, ref, rtol=0, atol=1e-12)


def test_value_residual_is_one_map_over_two_value_sets():
    q, k, v = _qkv(seed=4)
    v1 = torch.randn_like(v)
    mixed = TT.value_residual_attention(q, k, v, v1, keep=0.5, gate=0.5)
    torch.testing.assert_close(mixed, 0.5 * _sdpa(q, k, v) + 0.5 * _sdpa(q, k, v1), rtol=0, atol=1e-12)


# ----------------------------------------------------------------- multi-token

def _loop_conv(a, kernel, zero_future):
    """out[i, j] = sum_{s, t} kernel[s, t] * a[i - c_q + 1 + s, j - c_k // 2 + t], j <= i only."""
    n, (c_q, c_k) = a.shape[0], kernel.shape
    out = torch.zeros_like(a)
    for i in range(n):
        for j in range(i + 1):
            total = 0.0
            for s in range(c_q):
                for t in range(c_k):
                    qi, kj = i - c_q + 1 + s, j - c_k // 2 + t
                    if 0 <= qi < n and 0 <= kj < n and kj <= qi:  # future and padding are 0
                        total += float(kernel[s, t]) * float(a[qi, kj])
            out[i, j] = total
    return out


def _loop_mta(q, k, v, pre, post):
    b, h, n, d = q.shape
    out = torch.zeros(b, h, n, v.shape[-1], dtype=q.dtype)
    for bi in range(b):
        for hi in range(h):
            scores = (q[bi, hi] @ k[bi, hi].T) / math.sqrt(d)
            conv = _loop_conv(scores, pre[hi], True)
            weights = torch.zeros(n, n, dtype=q.dtype)
            for i in range(n):
                row = [float(conv[i, j]) for j in range(i + 1)]
                top = max(row)
                e = [math.exp(x - top) for x in row]
                for j in range(i + 1):
                    weights[i, j] = e[j] / sum(e)
            if post is not None:
                weights = _loop_conv(weights, post[hi], True)
            out[bi, hi] = weights @ v[bi, hi]
    return out


@pytest.mark.parametrize("c_q, c_k, with_post", [(2, 3, True), (3, 5, False), (1, 4, True)])
def test_multi_token_matches_the_loop(c_q, c_k, with_post):
    q, k, v = _qkv(b=1, n=7, seed=5)
    g = torch.Generator(device=torch.get_default_device()).manual_seed(c_q * 10 + c_k)
    pre = torch.randn(2, c_q, c_k, generator=g, dtype=F64) * 0.5
    post = torch.randn(2, c_q, c_k, generator=g, dtype=F64) * 0.5 if with_post else None
    got = TT.multi_token_attention(q, k, v, pre, post)
    torch.testing.assert_close(got, _loop_mta(q, k, v, pre, post), rtol=0, atol=1e-12)


@pytest.mark.parametrize("c_q, c_k", [(1, 1), (6, 11), (2, 4)])
def test_delta_kernels_are_causal_attention(c_q, c_k):
    q, k, v = _qkv(n=9, seed=6)
    delta = TT.delta_kernel(2, c_q, c_k, dtype=F64)
    ref = _sdpa(q, k, v)
    torch.testing.assert_close(TT.multi_token_attention(q, k, v, delta), ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(TT.multi_token_attention(q, k, v, delta, delta), ref, rtol=0, atol=1e-12)


def test_delta_kernel_matches_the_authors_identity_init():
    kernel = TT.delta_kernel(3, 6, 11)
    assert kernel.shape == (3, 6, 11) and kernel.sum() == 3
    assert bool((kernel[:, 5, 5] == 1).all())


def test_multi_token_is_causal():
    q, k, v = _qkv(n=8, seed=7)
    g = torch.Generator(device=torch.get_default_device()).manual_seed(0)
    pre, post = (torch.randn(2, 3, 5, generator=g, dtype=F64) for _ in range(2))
    out = TT.multi_token_attention(q, k, v, pre, post)
    for t in range(1, 8):
        q2, k2, v2 = (x.clone() for x in (q, k, v))
        for x in (q2, k2, v2):
            x[:, :, t:] += torch.randn_like(x[:, :, t:])
        later = TT.multi_token_attention(q2, k2, v2, pre, post)
        torch.testing.assert_close(later[:, :, :t], out[:, :, :t], rtol=0, atol=1e-12)


# ----------------------------------------------------------------- canon

def test_canon_matches_the_loop_and_conv1d():
    x = torch.randn(2, 7, 5, dtype=F64)
    w = torch.randn(5, 4, dtype=F64)
    expected = x.clone()
    for t in range(7):
        for s in range(4):
            if t - 3 + s >= 0:
                expected[:, t] += w[:, s] * x[:, t - 3 + s]
    got = TT.canon(x, w)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    # the authors' naive path: nn.Conv1d(groups=D, padding=c-1), cut to the first N outputs
    conv = torch.nn.Conv1d(5, 5, 4, groups=5, padding=3, bias=False).double()
    with torch.no_grad():
        conv.weight.copy_(w.unsqueeze(1))
        theirs = x + conv(x.transpose(1, 2))[..., :7].transpose(1, 2)
    torch.testing.assert_close(got, theirs, rtol=0, atol=1e-12)


def test_canon_zero_kernel_is_identity_and_it_is_causal():
    x = torch.randn(2, 8, 6, dtype=F64)
    torch.testing.assert_close(TT.canon(x, torch.zeros(6, 4, dtype=F64)), x, rtol=0, atol=0)
    w = torch.randn(6, 4, dtype=F64)
    out = TT.canon(x, w)
    for t in range(1, 8):
        x2 = x.clone()
        x2[:, t:] += 1.0
        torch.testing.assert_close(TT.canon(x2, w)[:, :t], out[:, :t], rtol=0, atol=0)


# ----------------------------------------------------------------- exclusive

def test_exclusive_matches_the_loop_and_is_orthogonal_to_own_value():
    q, k, v = _qkv(seed=8)
    y = _loop_attention(q, k, v)
    expected = torch.zeros_like(y)
    for idx in torch.cartesian_prod(torch.arange(2), torch.arange(2), torch.arange(6)):
        b, h, i = idx.tolist()
        yi, vi = y[b, h, i], v[b, h, i]
        expected[b, h, i] = yi - float(yi @ vi) / float(vi @ vi) * vi
    got = TT.exclusive_attention(q, k, v)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    assert float((got * v).sum(-1).abs().max()) < 1e-12


def test_exclusive_strength_zero_is_attention_and_half_way_is_linear():
    q, k, v = _qkv(seed=9)
    ref = _sdpa(q, k, v)
    torch.testing.assert_close(TT.exclusive_attention(q, k, v, strength=0.0), ref, rtol=0, atol=1e-12)
    full = TT.exclusive_attention(q, k, v)
    torch.testing.assert_close(TT.exclusive_attention(q, k, v, strength=0.5), 0.5 * (ref + full),
                               rtol=0, atol=1e-12)


def test_exclusive_zero_value_is_finite():
    q, k, v = _qkv(seed=10)
    v[:, :, 2] = 0
    assert torch.isfinite(TT.exclusive_attention(q, k, v)).all()


def test_exclusive_is_causal():
    q, k, v = _qkv(n=7, seed=11)
    out = TT.exclusive_attention(q, k, v)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 4:] += 1
    v2[:, :, 4:] -= 2
    torch.testing.assert_close(TT.exclusive_attention(q, k2, v2)[:, :, :4], out[:, :, :4], rtol=0, atol=1e-12)


# ----------------------------------------------------------------- precision, gradients

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_half_precision_is_finite_and_close(dtype):
    q, k, v = _qkv(n=16, d=8, dtype=F64, seed=12)
    q = q * 30  # large logits
    low = [t.to(dtype) for t in (q, k, v)]
    rounded = [t.to(torch.float32).to(F64) for t in low]
    pre = TT.delta_kernel(2, 2, 3, dtype=F64) * 0.7 + 0.05
    x = torch.randn(2, 16, 8, dtype=F64)
    w = torch.randn(8, 4, dtype=F64) * 0.5
    cases = [
        (lambda a, b, c, dt: TT.value_residual_attention(a, b, c, c.flip(2), gate=0.5)),
        (lambda a, b, c, dt: TT.multi_token_attention(a, b, c, pre.to(dt), pre.to(dt))),
        (lambda a, b, c, dt: TT.exclusive_attention(a, b, c)),
    ]
    for case in cases:
        out = case(*low, dtype)
        assert out.dtype == dtype and torch.isfinite(out).all()
        ref = case(*rounded, F64)
        # the error of the low-precision result is of the order of the dtype's own rounding
        tol = {torch.float32: 1e-5, torch.bfloat16: 6e-2, torch.float16: 8e-3}[dtype]
        assert float((out.to(F64) - ref).abs().max()) < tol * max(1.0, float(ref.abs().max()))
    out = TT.canon(x.to(dtype), w.to(dtype))
    assert out.dtype == dtype and torch.isfinite(out).all()


def test_gradcheck():
    q, k, v = (t.requires_grad_() for t in _qkv(b=1, h=2, n=5, d=3, seed=13))
    pre = (torch.randn(2, 2, 3, dtype=F64) * 0.5).requires_grad_()
    post = (torch.randn(2, 2, 3, dtype=F64) * 0.5).requires_grad_()
    extra = torch.randn(1, 2, 5, 3, dtype=F64, requires_grad=True)
    x = torch.randn(1, 5, 4, dtype=F64, requires_grad=True)
    w = torch.randn(4, 3, dtype=F64, requires_grad=True)
    wg = torch.randn(2, 3, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: TT.multi_token_attention(*a), (q, k, v, pre, post))
    assert torch.autograd.gradcheck(lambda a, b, c, e: TT.value_residual_attention(a, b, c, e), (q, k, v, extra))
    assert torch.autograd.gradcheck(lambda a, b, c: TT.exclusive_attention(a, b, c), (q, k, v))
    assert torch.autograd.gradcheck(TT.canon, (x, w))
    assert torch.autograd.gradcheck(lambda a, b: TT.value_gate(a, b), (x, wg))


# ----------------------------------------------------------------- named errors

def test_named_errors():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"k must be a floating \(2, 2, 6, 4\) tensor.*got \(2, 2, 5, 4\)"):
        TT.value_residual_attention(q, k[:, :, :5], v)
    with pytest.raises(ValueError, match=r"extra must be a floating \(2, 2, 6, 4\) tensor"):
        TT.value_residual_attention(q, k, v, v[..., :3])
    with pytest.raises(ValueError, match=r"gate must be a floating \(2, 2, 6, 1\) tensor"):
        TT.value_residual_attention(q, k, v, v, gate=torch.ones(2, 2, 6, 4, dtype=F64))
    with pytest.raises(ValueError, match=r"q must be a floating .*got "):
        TT.exclusive_attention(q.long(), k, v)
    with pytest.raises(ValueError, match=r"pre must be a floating \(2, c_q, c_k\) tensor"):
        TT.multi_token_attention(q, k, v, torch.ones(3, 1, 1, dtype=F64))
    with pytest.raises(ValueError, match=r"post must be a floating \(2, c_q, c_k\) tensor on q.s device and dtype, got .*float32"):
        TT.multi_token_attention(q, k, v, TT.delta_kernel(2, 1, 1, dtype=F64), TT.delta_kernel(2, 1, 1))
    with pytest.raises(ValueError, match=r"strength must be a number in \[0, 1\], got 1.5"):
        TT.exclusive_attention(q, k, v, strength=1.5)
    with pytest.raises(ValueError, match=r"eps must be a number in \(0, inf\), got 0.0"):
        TT.exclusive_attention(q, k, v, eps=0.0)
    with pytest.raises(ValueError, match=r"scale must be a number in \(0, inf\), got -1.0"):
        TT.multi_token_attention(q, k, v, TT.delta_kernel(2, 1, 1, dtype=F64), scale=-1.0)
    with pytest.raises(ValueError, match=r"need ints >= 1, got .*c_k=0"):
        TT.delta_kernel(2, 1, 0)
    x = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=r"kernel must be a floating \(8, c\) tensor"):
        TT.canon(x, torch.zeros(7, 4))
    with pytest.raises(ValueError, match=r"weight must have c <= 8, got 12"):
        TT.value_gate(x, torch.zeros(2, 12))
    with pytest.raises(ValueError, match=r"top must be a number in \(0, inf\), got 0"):
        TT.value_gate(x, torch.zeros(2, 4), top=0)


# ----------------------------------------------------------------- exercises

def test_exercise_delta_kernel_shifted_one_key_left():
    """Exercise 1: a pre-softmax kernel whose 1 sits one key to the left of centre
    scores query i against key j - 1: row i then ignores key i and puts its
    weight on keys 0 .. i - 1 shifted by one (key 0 gets score 0, a constant)."""
    q, k, v = _qkv(b=1, h=1, n=5, seed=14)
    shifted = torch.zeros(1, 1, 3, dtype=F64)
    shifted[0, 0, 0] = 1.0  # one column left of the centre (index 1)
    got = TT.multi_token_attention(q, k, v, shifted)
    s = (q[0, 0] @ k[0, 0].T) / 2.0  # d = 4
    expected = torch.zeros(5, 4, dtype=F64)
    for i in range(5):
        row = torch.tensor([0.0] + [float(s[i, j - 1]) for j in range(1, i + 1)], dtype=F64)
        expected[i] = torch.softmax(row, 0) @ v[0, 0, : i + 1]
    torch.testing.assert_close(got[0, 0], expected, rtol=0, atol=1e-12)


def test_exercise_exclusive_first_token_is_zero():
    """Exercise 2: the first token attends only to itself, y_0 = v_0, so XSA gives 0."""
    q, k, v = _qkv(seed=15)
    out = TT.exclusive_attention(q, k, v)
    assert float(out[:, :, 0].abs().max()) < 1e-15


def test_exercise_canon_kernel_of_one_at_the_current_tap_doubles():
    """Exercise 3: w[:, -1] = 1 and the rest 0 gives x + x = 2x: not an identity."""
    x = torch.randn(2, 5, 3, dtype=F64)
    w = torch.zeros(3, 4, dtype=F64)
    w[:, -1] = 1
    torch.testing.assert_close(TT.canon(x, w), 2 * x, rtol=0, atol=0)
