"""Proof for snippets/efficiency/tiled_attention.py.

Proves: online_softmax equals torch.softmax for every block size (including
all -inf rows -> zeros); tiled_attention equals F.scaled_dot_product_attention
in float32 and float64, causal (lower right, built independently here) and not,
for key and query block sizes that do not divide N or M, N != M in both
directions; fully masked causal rows return zeros; outputs stay finite for large
logits in float32/bfloat16/float16; gradcheck in float64; causal outputs ignore
future tokens, even at scores of 1e9; online_softmax and tiled_attention are
unchanged when every score is shifted by -2e4 or +2e4; every validation message
is raised.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from huge_scores import assert_matches, expected_output, signed_qk
from snippets.efficiency.tiled_attention import online_softmax, tiled_attention
from tolerance import assert_within_baseline


def lower_right_mask(n: int, m: int) -> torch.Tensor:
    """True = may attend; the N queries are the last N of M positions."""
    return torch.ones(n, m, dtype=torch.bool).tril(diagonal=m - n)


@pytest.mark.parametrize("block_size", [1, 3, 7, 16, 100])
def test_online_softmax_matches_softmax(block_size):
    torch.manual_seed(0)
    x = torch.randn(2, 5, 13) * 4
    torch.testing.assert_close(online_softmax(x, block_size=block_size), torch.softmax(x, dim=-1))


def test_online_softmax_handles_minus_inf():
    x = torch.tensor([[float("-inf"), float("-inf"), 1.0, 2.0], [float("-inf")] * 4])
    out = online_softmax(x, block_size=1)
    torch.testing.assert_close(out[0], torch.softmax(x[0], dim=-1))
    torch.testing.assert_close(out[1], torch.zeros(4))


def test_online_softmax_large_logits_finite():
    x = torch.tensor([[1e4, -1e4, 3e4, 0.0]])
    out = online_softmax(x, block_size=1)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, torch.softmax(x, dim=-1))


@pytest.mark.parametrize("shift", [-2e4, 2e4])
@pytest.mark.parametrize("block_size", [1, 3, 16])
def test_online_softmax_is_shift_invariant_far_from_zero(shift, block_size):
    # softmax(x + c) = softmax(x). The entries are multiples of 1/64, so x + c
    # is exact in float32 and both sides see the same differences. A running
    # maximum that starts at 0, or no maximum at all, turns exp(x + c) into 0
    # (c = -2e4) or inf (c = +2e4); the rescaled running sum never leaves exp's range.
    x = torch.round(torch.randn(2, 5, 13, generator=torch.Generator(device=torch.get_default_device()).manual_seed(0)) * 256) / 64
    out = online_softmax(x + shift, block_size=block_size)
    torch.testing.assert_close(out, torch.softmax(x, dim=-1))


@pytest.mark.parametrize("shift", [-2e4, 2e4])
@pytest.mark.parametrize("block_size_k, block_size_q", [(1, None), (4, 3), (16, None)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_tiled_attention_is_shift_invariant_far_from_zero(shift, block_size_k, block_size_q, is_causal):
    # One extra coordinate adds the same c = +-2e4 to every score of every
    # query: q' = [q, 1], k' = [k, c / scale]. Softmax does not see it, so the
    # output must equal SDPA on the unshifted scores (up to float32 rounding of
    # scores near 2e4, about 1e-3).
    g = torch.Generator(device=torch.get_default_device()).manual_seed(1)
    q, k = torch.randn(2, 3, 7, 8, generator=g), torch.randn(2, 3, 9, 8, generator=g)
    v = torch.randn(2, 3, 9, 5, generator=g)
    scale = 8 ** -0.5
    q_shift = torch.cat([q, torch.ones(2, 3, 7, 1)], dim=-1)
    k_shift = torch.cat([k, torch.full((2, 3, 9, 1), shift / scale)], dim=-1)
    out = tiled_attention(q_shift, k_shift, v, is_causal=is_causal, scale=scale,
                          block_size_k=block_size_k, block_size_q=block_size_q)
    mask = lower_right_mask(7, 9) if is_causal else None
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, expected, rtol=5e-3, atol=5e-3)


@pytest.mark.parametrize("block_size_k, block_size_q", [(1, None), (4, None), (3, 2), (16, 16)])
def test_future_keys_stay_out_at_huge_scores(block_size_k, block_size_q):
    # Scores of +-3.5e9 in float32 (tests/huge_scores.py): every future key
    # outscores the visible ones, and query 0 may see only key 0, which scores
    # -3.5e9. Values are 1e6. Only -inf keeps the future out; a finite fill
    # (-1e4, even -1e9) would hand query 0 to it.
    n = 7
    q, k = signed_qk(n, 8)
    q, k = q.expand(2, 2, n, 8), k.expand(2, 2, n, 8)
    v = 1e6 * torch.randn(2, 2, n, 5, generator=torch.Generator(device=torch.get_default_device()).manual_seed(2))
    out = tiled_attention(q, k, v, is_causal=True, block_size_k=block_size_k, block_size_q=block_size_q)
    assert_matches(out, expected_output(v, lower_right_mask(n, n)))
    assert torch.equal(out[..., 0, :], v[..., 0, :])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n, m", [(9, 9), (5, 11), (11, 5), (1, 13)])
@pytest.mark.parametrize("block_size_k, block_size_q", [(1, None), (4, None), (3, 2), (64, 64)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_matches_sdpa(dtype, n, m, block_size_k, block_size_q, is_causal):
    torch.manual_seed(0)
    q = torch.randn(2, 3, n, 8, dtype=dtype)
    k = torch.randn(2, 3, m, 8, dtype=dtype)
    v = torch.randn(2, 3, m, 6, dtype=dtype)
    out = tiled_attention(q, k, v, is_causal=is_causal,
                          block_size_k=block_size_k, block_size_q=block_size_q)
    if is_causal:
        mask = lower_right_mask(n, m)
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        # A query with no visible key (N > M) must return zeros, whatever SDPA gives.
        empty = ~mask.any(dim=-1)
        expected[..., empty, :] = 0.0
    else:
        expected = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, expected)


def test_fully_masked_rows_are_zero():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 1, 6, 4), torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4)
    out = tiled_attention(q, k, v, is_causal=True, block_size_k=2, block_size_q=2)
    # N=6 queries over M=3 keys: the first three queries see nothing.
    torch.testing.assert_close(out[..., :3, :], torch.zeros(1, 1, 3, 4))
    assert out[..., 3:, :].abs().sum() > 0


def test_custom_scale_matches_sdpa():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 7, 8) for _ in range(3))
    torch.testing.assert_close(
        tiled_attention(q, k, v, block_size_k=3, scale=0.3),
        F.scaled_dot_product_attention(q, k, v, scale=0.3),
    )


def test_causal_ignores_future_tokens():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 10, 8) for _ in range(3))
    out = tiled_attention(q, k, v, is_causal=True, block_size_k=3, block_size_q=4)
    k2, v2 = k.clone(), v.clone()
    k2[..., 6:, :] += 5.0
    v2[..., 6:, :] -= 5.0
    out2 = tiled_attention(q, k2, v2, is_causal=True, block_size_k=3, block_size_q=4)
    torch.testing.assert_close(out[..., :6, :], out2[..., :6, :])
    assert not torch.allclose(out[..., 6:, :], out2[..., 6:, :])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_large_logits_stay_finite(dtype):
    torch.manual_seed(0)
    q = (torch.randn(1, 2, 9, 8) * 200).to(dtype)
    k = (torch.randn(1, 2, 9, 8) * 200).to(dtype)
    v = torch.randn(1, 2, 9, 8).to(dtype)
    out = tiled_attention(q, k, v, is_causal=True, block_size_k=4)
    assert out.dtype == dtype
    assert torch.isfinite(out).all()
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    tol = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 2e-3}[dtype]
    torch.testing.assert_close(out.float(), expected, atol=tol, rtol=tol)
    # PyTorch's SDPA in the same dtype; near one-hot rows may make it exact.
    exact = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    baseline = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ratio = assert_within_baseline(out, baseline, exact, slack=1.0)
    print(f"tiled large logits {dtype}: ratio {ratio:.3g}")


def test_gradcheck_float64():
    torch.manual_seed(0)
    q = torch.randn(1, 2, 5, 3, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 2, 7, 3, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 2, 7, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda q, k, v: tiled_attention(q, k, v, is_causal=True, block_size_k=3, block_size_q=2),
        (q, k, v),
    )


def test_empty_query():
    out = tiled_attention(torch.randn(1, 1, 0, 4), torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 5))
    assert out.shape == (1, 1, 0, 5)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"block_size_k": 0}, r"block_size_k must be a positive int, got 0"),
        ({"block_size_q": -2}, r"block_size_q must be a positive int, got -2"),
        ({"block_size_q": 0}, r"block_size_q must be a positive int, got 0"),
        ({"scale": 0.0}, r"scale must be a positive finite float or None, got 0.0"),
    ],
)
def test_argument_errors(kwargs, match):
    x = torch.randn(1, 1, 3, 4)
    with pytest.raises(ValueError, match=match):
        tiled_attention(x, x, x, **kwargs)


def test_online_softmax_block_error():
    with pytest.raises(ValueError, match=r"block_size must be a positive int, got 0"):
        online_softmax(torch.randn(3), block_size=0)


@pytest.mark.parametrize(
    "q, k, v, exc, match",
    [
        ([1.0], torch.randn(3, 4), torch.randn(3, 4), TypeError,
         r"q must be floating \(\*, L, d\) like q, got list"),
        (torch.ones(3, 4, dtype=torch.long), torch.randn(3, 4), torch.randn(3, 4), TypeError,
         r"q must be floating .* got torch.int64 \(3, 4\)"),
        (torch.randn(4), torch.randn(3, 4), torch.randn(3, 4), TypeError,
         r"q must be floating .* got torch.float32 \(4,\)"),
        (torch.randn(3, 4), torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4), TypeError,
         r"k must be floating \(\*, L, d\) like q, got torch.float64"),
        (torch.randn(3, 4), torch.randn(3, 5), torch.randn(3, 4), ValueError,
         r"q, k and v must be \(\.\.\., N, d\), .* got q \(3, 4\), k \(3, 5\)"),
        (torch.randn(3, 4), torch.randn(3, 4), torch.randn(2, 4), ValueError,
         r"got q \(3, 4\), k \(3, 4\) and v \(2, 4\)"),
    ],
)
def test_tensor_errors(q, k, v, exc, match):
    with pytest.raises(exc, match=match):
        tiled_attention(q, k, v)


def _partial(q, k, v):
    """(m, l, o) of one block of keys, written out from the page's recurrence."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    m = scores.amax(dim=-1, keepdim=True)
    p = torch.exp(scores - m)
    return m, p.sum(dim=-1, keepdim=True), p @ v


def test_exercise_reversed_blocks():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 11, 4), torch.randn(1, 2, 11, 3)
    forward = tiled_attention(q, k, v, block_size_k=3)
    # reverse the order of 3-key blocks: the loop then meets them last-first
    idx = torch.cat([torch.arange(s, min(s + 3, 11)) for s in range(9, -1, -3)])
    backward = tiled_attention(q, k[..., idx, :], v[..., idx, :], block_size_k=3)
    torch.testing.assert_close(forward, backward)


def test_exercise_merge_two_halves():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 10, 4) * 3, torch.randn(1, 2, 10, 3)
    m_a, l_a, o_a = _partial(q, k[..., :4, :], v[..., :4, :])
    m_b, l_b, o_b = _partial(q, k[..., 4:, :], v[..., 4:, :])
    m = torch.maximum(m_a, m_b)
    l = torch.exp(m_a - m) * l_a + torch.exp(m_b - m) * l_b
    o = torch.exp(m_a - m) * o_a + torch.exp(m_b - m) * o_b
    torch.testing.assert_close(o / l, F.scaled_dot_product_attention(q, k, v))


def test_exercise_tile_memory():
    assert 1 * 8 * 256 * 512 * 4 == 4 * 2**20
    assert 1 * 8 * 4096 * 4096 * 4 == 512 * 2**20




def test_errors_for_leading_dims_devices_scale_and_scores():
    q, k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 2, 7, 4), torch.randn(2, 2, 7, 4)
    with pytest.raises(ValueError, match=r"with leading dims that broadcast, got q \(2, 3, 5, 4\)"):
        tiled_attention(q, k, v)
    with pytest.raises(TypeError, match=r"v must be floating .* like q, got .* on meta"):
        tiled_attention(q[:, :2], k, v.to("meta"))
    with pytest.raises(ValueError, match=r"scale must be a positive finite float or None, got '1'"):
        tiled_attention(q[:, :2], k, v, scale="1")
    with pytest.raises(TypeError, match=r"x must be a floating tensor \(\.\.\., M\), got list"):
        online_softmax([1.0, 2.0])
    with pytest.raises(TypeError, match=r"x must be a floating tensor .* got torch.int64"):
        online_softmax(torch.arange(4))
    with pytest.raises(TypeError, match=r"x must be a floating tensor .* got torch.float32 \(\)"):
        online_softmax(torch.tensor(1.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n, m", [(9, 9), (5, 11), (11, 5)])
@pytest.mark.parametrize("block_size_k, block_size_q", [(1, None), (3, 2), (64, 64)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_return_lse_is_logsumexp_of_the_scores(dtype, n, m, block_size_k, block_size_q, is_causal):
    # FlashAttention-2's forward contract: L_i = log sum_j exp(s_ij) over the
    # visible keys, -inf for a query that sees none (N > M under the causal mask).
    g = torch.Generator(device=torch.get_default_device()).manual_seed(3)
    q, k = torch.randn(2, 3, n, 8, generator=g, dtype=dtype), torch.randn(2, 3, m, 8, generator=g, dtype=dtype)
    v = torch.randn(2, 3, m, 5, generator=g, dtype=dtype)
    out, lse = tiled_attention(q, k, v, is_causal=is_causal, block_size_k=block_size_k,
                               block_size_q=block_size_q, scale=0.3, return_lse=True)
    scores = (q @ k.transpose(-2, -1)) * 0.3
    if is_causal:
        scores = scores.masked_fill(~lower_right_mask(n, m), float("-inf"))
    assert lse.shape == (2, 3, n) and lse.dtype == dtype
    torch.testing.assert_close(lse, torch.logsumexp(scores, dim=-1))
    torch.testing.assert_close(out, tiled_attention(q, k, v, is_causal=is_causal, block_size_k=block_size_k,
                                                    block_size_q=block_size_q, scale=0.3))


def test_return_lse_of_half_inputs_is_float32_and_empty_query():
    x = torch.randn(1, 1, 4, 8, dtype=torch.bfloat16)
    out, lse = tiled_attention(x, x, x, return_lse=True, block_size_k=3)
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    torch.testing.assert_close(lse, torch.logsumexp(x.float() @ x.float().mT / 8 ** 0.5, dim=-1))
    out, lse = tiled_attention(torch.randn(1, 1, 0, 4), torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 5),
                               return_lse=True)
    assert out.shape == (1, 1, 0, 5) and lse.shape == (1, 1, 0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("is_causal", [False, True])
def test_half_precision_is_as_accurate_as_sdpa_in_that_dtype(dtype, is_causal):
    # The loop accumulates in float32, so on the same rounded inputs its error
    # against float64 stays within twice that of PyTorch's own math kernel in
    # the low dtype (flash-attention's criterion). Dropping the float32
    # accumulation lets the running sums round to 8 (bf16) or 11 (fp16) bits.
    g = torch.Generator(device=torch.get_default_device()).manual_seed(4)
    q, k, v = (torch.randn(2, 4, 200, 16, generator=g).mul(2).to(dtype) for _ in range(3))
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=is_causal)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        theirs = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    ours = tiled_attention(q, k, v, is_causal=is_causal, block_size_k=16, block_size_q=32)
    ratio = assert_within_baseline(ours, theirs, ref)
    print(f"tiled {dtype} causal={is_causal}: ratio {ratio:.3g}")
