"""Packed sequences: the document mask equals one SDPA call per document.

Oracles: ``F.scaled_dot_product_attention`` run on each document alone (the
reference loop), FlexAttention's document mask (eager, on the CPU), and the
visibility rule of FlashAttention's ``window_size=(left, right)`` written out
here independently. Properties: causal-only packing leaks across documents,
and so does resetting the positions without the mask.
"""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch
import torch.nn.functional as F

from snippets.efficiency import packed_sequences as P
from tolerance import assert_within_baseline

LENGTHS = [3, 5, 1, 4]


def _qkv(t=13, h=2, d=8, dtype=torch.float64):
    return tuple(torch.randn(t, h, d, dtype=dtype) for _ in range(3))


def _rope(x, positions, base=10000.0):
    """Half-split RoPE written out for this test: x (T, H, d), positions (T,)."""
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    ang = positions.double()[:, None, None] * theta  # (T, 1, d/2)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def test_boundaries_ids_and_positions(device):
    cu = P.cu_seqlens_from_lengths(LENGTHS).to(device)
    assert cu.tolist() == [0, 3, 8, 9, 13] and cu.dtype == torch.int32
    assert P.document_ids(cu).tolist() == [0] * 3 + [1] * 5 + [2] + [3] * 4
    assert P.position_ids(cu).tolist() == [0, 1, 2, 0, 1, 2, 3, 4, 0, 0, 1, 2, 3]


@pytest.mark.parametrize("window", [None, 1, 2, 4])
def test_mask_equals_the_reference_loop(device, window):
    torch.manual_seed(0)
    q, k, v = _qkv()
    cu = P.cu_seqlens_from_lengths(LENGTHS).to(device)
    ours = P.packed_attention(q, k, v, cu, window=window)
    outs = []
    for start, end in zip(cu[:-1].tolist(), cu[1:].tolist()):
        n = end - start
        i, j = torch.arange(n)[:, None], torch.arange(n)
        band = (j <= i) & ((i - j < window) if window else torch.ones(n, n, dtype=torch.bool))
        qd, kd, vd = (t[start:end].transpose(0, 1) for t in (q, k, v))
        outs.append(F.scaled_dot_product_attention(qd, kd, vd, attn_mask=band).transpose(0, 1))
    torch.testing.assert_close(ours, torch.cat(outs), rtol=0, atol=1e-12)
    if window is None:
        torch.testing.assert_close(ours, P.per_document_attention(q, k, v, cu), rtol=0, atol=1e-12)


def test_non_causal_packing_equals_bidirectional_documents(device):
    torch.manual_seed(1)
    q, k, v = _qkv()
    cu = P.cu_seqlens_from_lengths(LENGTHS).to(device)
    torch.testing.assert_close(P.packed_attention(q, k, v, cu, causal=False),
                               P.per_document_attention(q, k, v, cu, causal=False),
                               rtol=0, atol=1e-12)


def test_flex_document_mask_agrees(device):
    if device != "cpu":
        pytest.skip("eager flex_attention is the CPU path; GPUs run the compiled kernel")
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    torch.manual_seed(2)
    q, k, v = _qkv(dtype=torch.float32)
    cu = P.cu_seqlens_from_lengths(LENGTHS)
    doc = P.document_ids(cu)

    def document_causal(b, h, qi, kj):
        return (doc[qi] == doc[kj]) & (kj <= qi)

    t = q.shape[0]
    block = create_block_mask(document_causal, None, None, t, t, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # eager flex: not the fused kernel, on purpose
        flex = flex_attention(*(x.transpose(0, 1)[None] for x in (q, k, v)), block_mask=block)
    torch.testing.assert_close(flex[0].transpose(0, 1), P.per_document_attention(q, k, v, cu),
                               rtol=1e-5, atol=1e-5)


def test_causal_only_packing_leaks(device):
    """Without the document mask, every document after the first reads its predecessors."""
    torch.manual_seed(3)
    q, k, v = _qkv()
    cu = P.cu_seqlens_from_lengths(LENGTHS).to(device)
    t = q.shape[0]
    causal_only = P.packed_kernel(q, k, v, torch.ones(t, t, dtype=torch.bool).tril(), None)
    right = P.per_document_attention(q, k, v, cu)
    gap = (causal_only - right).abs().amax(dim=(1, 2))  # (T,) per token
    doc = P.document_ids(cu)
    assert gap[doc == 0].max() < 1e-12, "the first document has nothing before it to leak"
    # A document's first token attends to itself alone, unless earlier documents leak in.
    assert gap[cu[1:-1].long()].min() > 1e-2, f"no leak seen: {gap}"


def test_reset_positions_without_the_mask_still_leak(device):
    torch.manual_seed(4)
    q, k, v = _qkv()
    cu = P.cu_seqlens_from_lengths(LENGTHS).to(device)
    pos = P.position_ids(cu)
    qr, kr = _rope(q, pos), _rope(k, pos)
    right = P.per_document_attention(qr, kr, v, cu)
    t = q.shape[0]
    leaky = P.packed_kernel(qr, kr, v, torch.ones(t, t, dtype=torch.bool).tril(), None)
    assert (leaky - right).abs().max() > 1e-2
    # With the mask as well, reset positions give exactly the per-document answer.
    torch.testing.assert_close(P.packed_attention(qr, kr, v, cu), right, rtol=0, atol=1e-12)


@pytest.mark.parametrize("window", [1, 2, 3, 7])
def test_varlen_window_means_one_key_more(device, window):
    """FlashAttention's rule, written out: query i sees keys i - left .. i + right."""
    left, right = P.varlen_window_size(window)
    assert (left, right) == (window - 1, 0)
    cu = P.cu_seqlens_from_lengths(LENGTHS).to(device)
    doc = P.document_ids(cu)
    i, j = torch.arange(len(doc))[:, None], torch.arange(len(doc))
    flash = (doc[:, None] == doc[None]) & (j >= i - left) & (j <= i + right)
    assert torch.equal(P.document_mask(doc, window=window), flash)
    # The same W passed straight to FlashAttention would show W + 1 keys.
    wider = (doc[:, None] == doc[None]) & (j >= i - window) & (j <= i)
    assert int(wider.sum(-1).max()) == min(window + 1, max(LENGTHS))
    assert int(P.document_mask(doc, window=window).sum(-1).max()) == min(window, max(LENGTHS))


def test_installed_varlen_reads_causal_from_the_window():
    """torch's varlen API has no causal flag: causal is window_size == (-1, 0)."""
    varlen = pytest.importorskip("torch.nn.attention.varlen")
    source = inspect.getsource(varlen.varlen_attn)
    assert "is_causal = window_size == (-1, 0)" in source
    assert "is_causal" not in str(inspect.signature(varlen.varlen_attn))


def test_varlen_refuses_the_cpu_and_the_fallback_is_exact():
    """varlen_attn has no CPU kernel, and on CUDA no float32 one (H200, torch 2.11):
    varlen_attention falls back to the document mask for both."""
    varlen = pytest.importorskip("torch.nn.attention.varlen")
    torch.manual_seed(5)
    q, k, v = _qkv(dtype=torch.float32)
    cu = P.cu_seqlens_from_lengths(LENGTHS)
    refusal = ((NotImplementedError, "_flash_attention_forward") if q.device.type == "cpu"
               else (RuntimeError, "only support fp16 and bf16"))
    with pytest.raises(refusal[0], match=refusal[1]):
        varlen.varlen_attn(q, k, v, cu.to(q.device, torch.int32), cu.to(q.device, torch.int32),
                           max(LENGTHS), max(LENGTHS))
    torch.testing.assert_close(P.varlen_attention(q, k, v, cu), P.per_document_attention(q, k, v, cu),
                               rtol=1e-6, atol=1e-6)


def test_gradcheck(device):
    torch.manual_seed(6)
    q, k, v = (t.requires_grad_() for t in _qkv(t=6, h=1, d=4))
    cu = P.cu_seqlens_from_lengths([2, 4]).to(device)
    assert torch.autograd.gradcheck(lambda a, b, c: P.packed_attention(a, b, c, cu, window=3), (q, k, v))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_as_accurate_as_sdpa(device, dtype):
    """Within twice the per-document SDPA's own error against float64, on the same inputs."""
    torch.manual_seed(7)
    q, k, v = (t * 3 for t in _qkv(t=64, h=2, d=16))
    cu = P.cu_seqlens_from_lengths([20, 30, 14]).to(device)
    q, k, v = (t.to(dtype).double() for t in (q, k, v))  # rounded inputs, exact reference
    exact = P.per_document_attention(q, k, v, cu)
    low = [t.to(dtype) for t in (q, k, v)]
    ours = P.packed_attention(*low, cu).double()
    theirs = P.per_document_attention(*low, cu).double()
    assert torch.isfinite(ours).all()
    assert_within_baseline(ours.to(dtype), theirs, exact, slack=1.0)


def test_named_errors(device):
    q, k, v = _qkv()
    cu = P.cu_seqlens_from_lengths(LENGTHS).to(device)
    with pytest.raises(ValueError, match=r"lengths must be .* got \[3, 0\]"):
        P.cu_seqlens_from_lengths([3, 0])
    with pytest.raises(ValueError, match=r"cu_seqlens must start at 0 and increase, got \[0, 5, 3\]"):
        P.document_ids(torch.tensor([0, 5, 3]))
    with pytest.raises(ValueError, match=r"cu_seqlens must end at T = 13"):
        P.packed_attention(q, k, v, cu[:-1])
    with pytest.raises(ValueError, match=r"window must be None or an int >= 1 \(keys\), got 0"):
        P.packed_attention(q, k, v, cu, window=0)
    with pytest.raises(ValueError, match=r"v must be floating \(T, H, d\) like q, got"):
        P.packed_attention(q, k, v[0], cu)
    with pytest.raises(ValueError, match=r"k must be floating \(T, H, d\) like q, got torch.float64 \(13, 1, 8\)"):
        P.packed_attention(q, k[:, :1], v, cu)


def test_exercise_pair_counts():
    doc = P.document_ids(P.cu_seqlens_from_lengths(LENGTHS))
    assert int(P.document_mask(doc).sum()) == 32
    assert int(torch.ones(13, 13, dtype=torch.bool).tril().sum()) == 91
    assert P.varlen_window_size(128) == (127, 0)
