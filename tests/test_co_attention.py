"""Co-attention (snippets/attention/co_attention.py) against Lu et al. (2016).

The oracle is the paper's section 3.3 written out again here, one example at a
time, in the paper's column layout: Q is (d, T), V is (d, N), and padded
words or regions are simply cut off before the equations run.
"""

from __future__ import annotations

import pathlib

import pytest
import torch

from snippets.attention.co_attention import (
    AlternatingCoAttention,
    GuidedAttention,
    ParallelCoAttention,
)

SNIPPET = pathlib.Path(__file__).resolve().parents[1] / "snippets/attention/co_attention.py"
B, T, N, D, K = 3, 4, 5, 6, 7


# ---------------------------------------------------------------- the oracle
def paper_parallel(m: ParallelCoAttention, Q: torch.Tensor, V: torch.Tensor):
    """Parallel co-attention for one example: Q (d, T), V (d, N), columns are items."""
    C = torch.tanh(Q.T @ m.w_b @ V)  # (T, N)
    Hv = torch.tanh(m.w_v @ V + (m.w_q @ Q) @ C)  # (k, N)
    Hq = torch.tanh(m.w_q @ Q + (m.w_v @ V) @ C.T)  # (k, T)
    a_v = torch.softmax((m.w_hv @ Hv)[0], dim=0)  # w_hv^T H^v, (N,)
    a_q = torch.softmax((m.w_hq @ Hq)[0], dim=0)  # (T,)
    v_hat = sum(a_v[n] * V[:, n] for n in range(V.shape[1]))
    q_hat = sum(a_q[t] * Q[:, t] for t in range(Q.shape[1]))
    return q_hat, v_hat, a_q, a_v, C


def paper_A(att: GuidedAttention, X: torch.Tensor, g: torch.Tensor | None):
    """The attention operation x_hat = A(X; g) for one example: X (d, L), g (d,) or None = 0."""
    L = X.shape[1]
    Wg_g = torch.zeros(att.d_hidden, dtype=X.dtype) if g is None else att.w_g @ g
    H = torch.tanh(att.w_x @ X + Wg_g[:, None] @ torch.ones(1, L, dtype=X.dtype))
    a = torch.softmax((att.w_hx @ H)[0], dim=0)
    return sum(a[i] * X[:, i] for i in range(L)), a


def paper_alternating(m: AlternatingCoAttention, Q: torch.Tensor, V: torch.Tensor):
    s_hat, _ = paper_A(m.summarise, Q, None)
    v_hat, a_v = paper_A(m.attend_image, V, s_hat)
    q_hat, a_q = paper_A(m.attend_question, Q, v_hat)
    return q_hat, v_hat, a_q, a_v


# ------------------------------------------------------------------ helpers
def make(cls, seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    m = cls(D, K).to(dtype)
    question = torch.randn(B, T, D, dtype=dtype)
    image = torch.randn(B, N, D, dtype=dtype)
    return m, question, image


def masks():
    q_len = [4, 2, 3]
    v_len = [5, 3, 1]
    q_mask = torch.arange(T) < torch.tensor(q_len)[:, None]  # (B, T)
    v_mask = torch.arange(N) < torch.tensor(v_len)[:, None]  # (B, N)
    return q_len, v_len, q_mask, v_mask


def close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


# ------------------------------------------------------- against the paper
def test_parallel_matches_paper_equations():
    m, question, image = make(ParallelCoAttention)
    q_hat, v_hat, a_q, a_v = m(question, image)
    c = m.affinity(question, image)
    for b in range(B):
        ref = paper_parallel(m, question[b].T, image[b].T)
        for got, want in zip((q_hat[b], v_hat[b], a_q[b], a_v[b], c[b]), ref):
            close(got, want)


def test_parallel_with_padding_matches_paper_on_the_real_items():
    m, question, image = make(ParallelCoAttention, seed=1)
    q_len, v_len, q_mask, v_mask = masks()
    q_hat, v_hat, a_q, a_v = m(question, image, question_mask=q_mask, image_mask=v_mask)
    c = m.affinity(question, image, question_mask=q_mask, image_mask=v_mask)
    for b in range(B):
        t, n = q_len[b], v_len[b]
        rq, rv, raq, rav, rc = paper_parallel(m, question[b, :t].T, image[b, :n].T)
        close(q_hat[b], rq)
        close(v_hat[b], rv)
        close(a_q[b, :t], raq)
        close(a_v[b, :n], rav)
        close(c[b, :t, :n], rc)
    # padding gets exactly zero weight and zero affinity
    assert (a_q[~q_mask] == 0).all() and (a_v[~v_mask] == 0).all()
    assert (c[~q_mask] == 0).all() and (c.transpose(1, 2)[~v_mask] == 0).all()


def test_guided_attention_matches_the_paper():
    torch.manual_seed(2)
    att = GuidedAttention(D, K).double()
    x, g = torch.randn(B, N, D, dtype=torch.float64), torch.randn(B, D, dtype=torch.float64)
    x_hat, a = att(x, g)
    for b in range(B):
        rx, ra = paper_A(att, x[b].T, g[b])
        close(x_hat[b], rx)
        close(a[b], ra)


def test_alternating_matches_paper_equations():
    m, question, image = make(AlternatingCoAttention, seed=3)
    q_hat, v_hat, a_q, a_v = m(question, image)
    for b in range(B):
        for got, want in zip((q_hat[b], v_hat[b], a_q[b], a_v[b]),
                             paper_alternating(m, question[b].T, image[b].T)):
            close(got, want)


def test_alternating_with_padding_matches_paper_on_the_real_items():
    m, question, image = make(AlternatingCoAttention, seed=4)
    q_len, v_len, q_mask, v_mask = masks()
    q_hat, v_hat, a_q, a_v = m(question, image, question_mask=q_mask, image_mask=v_mask)
    for b in range(B):
        t, n = q_len[b], v_len[b]
        rq, rv, raq, rav = paper_alternating(m, question[b, :t].T, image[b, :n].T)
        close(q_hat[b], rq)
        close(v_hat[b], rv)
        close(a_q[b, :t], raq)
        close(a_v[b, :n], rav)
    assert (a_q[~q_mask] == 0).all() and (a_v[~v_mask] == 0).all()


# -------------------------------------------------------------- properties
@pytest.mark.parametrize("cls", [ParallelCoAttention, AlternatingCoAttention])
def test_weights_sum_to_one_over_real_items(cls):
    m, question, image = make(cls, seed=5)
    _, _, q_mask, v_mask = masks()
    for qm, vm in ((None, None), (q_mask, v_mask)):
        _, _, a_q, a_v = m(question, image, question_mask=qm, image_mask=vm)
        close(a_q.sum(-1), torch.ones(B, dtype=torch.float64))
        close(a_v.sum(-1), torch.ones(B, dtype=torch.float64))
        assert (a_q >= 0).all() and (a_v >= 0).all()


@pytest.mark.parametrize("cls", [ParallelCoAttention, AlternatingCoAttention])
def test_padded_items_never_change_the_outputs(cls):
    m, question, image = make(cls, seed=6)
    _, _, q_mask, v_mask = masks()
    before = m(question, image, question_mask=q_mask, image_mask=v_mask)
    question2 = torch.where(q_mask[..., None], question, 1e3 * torch.randn_like(question))
    image2 = torch.where(v_mask[..., None], image, -1e3 * torch.randn_like(image))
    after = m(question2, image2, question_mask=q_mask, image_mask=v_mask)
    for x, y in zip(before, after):
        close(x, y)
    # ...while without the masks the same change does move them
    assert not torch.allclose(m(question, image)[1], m(question2, image2)[1])


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("cls", [ParallelCoAttention, AlternatingCoAttention])
def test_padded_items_stay_out_at_huge_logits(cls, sign):
    # The scoring vectors w_h are scaled by +-1e10, so every logit is about
    # +-1e9 or more (float32): with both signs, the one real region of example
    # 2 and the one real word of example 1 score far below zero in one of the
    # two runs. Padded items are then made huge (1e4). With -inf masking their
    # weights stay exactly 0 and nothing moves; a finite fill (-1e4, even -1e9)
    # would hand those examples to the padding.
    m, question, image = make(cls, seed=6, dtype=torch.float32)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.split(".")[-1] in ("w_hq", "w_hv", "w_hx"):
                p.mul_(sign * 1e10)
    q_mask = torch.arange(T) < torch.tensor([4, 1, 3])[:, None]  # (B, T)
    v_mask = torch.arange(N) < torch.tensor([5, 3, 1])[:, None]  # (B, N)
    before = m(question, image, question_mask=q_mask, image_mask=v_mask)
    question2 = torch.where(q_mask[..., None], question, 1e4 * torch.randn_like(question))
    image2 = torch.where(v_mask[..., None], image, -1e4 * torch.randn_like(image))
    after = m(question2, image2, question_mask=q_mask, image_mask=v_mask)
    for x, y in zip(before, after):
        assert torch.isfinite(x).all()
        torch.testing.assert_close(y, x, rtol=1e-5, atol=1e-5)
    a_q, a_v = before[2], before[3]
    assert (a_q[~q_mask] == 0).all() and (a_v[~v_mask] == 0).all()
    assert a_q[1, 0] == 1 and a_v[2, 0] == 1


def test_parallel_directions_are_coupled_through_the_affinity():
    # Changing only the image must move the question weights (and vice versa):
    # that is what makes it co-attention rather than two separate attentions.
    m, question, image = make(ParallelCoAttention, seed=7)
    a_q = m(question, image)[2]
    a_q2 = m(question, image + torch.randn_like(image))[2]
    assert (a_q - a_q2).abs().max() > 1e-3


def test_example_with_no_real_word_returns_zeros():
    m, question, image = make(ParallelCoAttention, seed=8)
    q_mask = torch.ones(B, T, dtype=torch.bool)
    q_mask[1] = False
    q_hat, v_hat, a_q, a_v = m(question, image, question_mask=q_mask)
    assert (a_q[1] == 0).all() and (q_hat[1] == 0).all()
    assert torch.isfinite(v_hat).all()
    close(a_v[1].sum(), torch.tensor(1.0, dtype=torch.float64))


@pytest.mark.parametrize("cls", [ParallelCoAttention, AlternatingCoAttention])
def test_gradcheck_float64(cls):
    torch.manual_seed(9)
    m = cls(3, 2).double()
    question = torch.randn(2, 3, 3, dtype=torch.float64, requires_grad=True)
    image = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    q_mask = torch.tensor([[True, True, False], [True, True, True]])
    v_mask = torch.tensor([[True, True, True, True], [True, False, True, False]])

    def f(q, v):
        return m(q, v, question_mask=q_mask, image_mask=v_mask)

    assert torch.autograd.gradcheck(f, (question, image), fast_mode=True)


@pytest.mark.parametrize("cls", [ParallelCoAttention, AlternatingCoAttention])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_finite_and_close_in_low_precision(cls, dtype):
    m, question, image = make(cls, seed=10)
    _, _, q_mask, v_mask = masks()
    ref = m(question, image, question_mask=q_mask, image_mask=v_mask)
    low = m.to(dtype)
    got = low(question.to(dtype), image.to(dtype), question_mask=q_mask, image_mask=v_mask)
    tol = {torch.float32: 1e-5, torch.bfloat16: 5e-2, torch.float16: 1e-2}[dtype]
    for g, r in zip(got, ref):
        assert g.dtype == dtype
        torch.testing.assert_close(g.double(), r, rtol=tol, atol=tol)
    # huge inputs and weights: the products overflow float16 (inf - inf = NaN)
    # unless they are computed in float32
    with torch.no_grad():
        for p in low.parameters():
            p.mul_(50.0)
    big_q = (question.clamp(-2, 2) * 3e4).to(dtype)
    big_v = (image.clamp(-2, 2) * 3e4).to(dtype)
    for g in low(big_q, big_v, question_mask=q_mask, image_mask=v_mask):
        assert torch.isfinite(g).all()


@pytest.mark.parametrize("cls", [ParallelCoAttention, AlternatingCoAttention])
def test_float16_beyond_its_range_matches_float64(cls):
    # Inputs of 3e4 and weights times 50: the products inside the affinity and
    # the hidden layers pass float16's 65504 (inf - inf = NaN), so they must be
    # formed in float32. Reference: the same float16 numbers run in float64.
    m, question, image = make(cls, seed=10)
    _, _, q_mask, v_mask = masks()
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(50.0)
    low = m.half()
    big_q = (question.clamp(-2, 2) * 3e4).half()
    big_v = (image.clamp(-2, 2) * 3e4).half()
    got = low(big_q, big_v, question_mask=q_mask, image_mask=v_mask)
    exact = low.double()  # the float16 weights, now held in float64 (the conversion is exact)
    want = exact(big_q.double(), big_v.double(), question_mask=q_mask, image_mask=v_mask)
    for g, w in zip(got, want):
        assert g.dtype == torch.float16 and torch.isfinite(g).all()
        torch.testing.assert_close(g.double(), w, rtol=1e-2, atol=1e-2 * max(1.0, w.abs().max().item()))


# ------------------------------------------------------------------ errors
def test_constructor_errors():
    with pytest.raises(ValueError, match=r"d_model must be a positive int, got 0"):
        ParallelCoAttention(0, 4)
    with pytest.raises(ValueError, match=r"d_hidden must be a positive int, got 2\.5"):
        AlternatingCoAttention(4, 2.5)


def test_forward_errors():
    m, question, image = make(ParallelCoAttention)
    with pytest.raises(ValueError, match=r"question must be floating \(B, L, 6\) on cpu, B and dtype as the question's, got <class 'list'>"):
        m([1.0], image)
    with pytest.raises(ValueError, match=r"image must be floating \(B, L, 6\) on cpu, B and dtype as the question's, got \(\(3, 5, 6\), torch.int64"):
        m(question, torch.ones(B, N, D, dtype=torch.long))
    with pytest.raises(ValueError, match=r"question must be floating \(B, L, 6\) on cpu, B and dtype as the question's, got \(\(3, 4, 5\),"):
        m(question[..., :5], image)
    with pytest.raises(ValueError, match=r"image must be floating \(B, L, 6\) on cpu, B and dtype as the question's, got \(\(2, 5, 6\),"):
        m(question, image[:2])
    with pytest.raises(ValueError, match=r"image must be floating \(B, L, 6\) on cpu, B and dtype as the question's, got \(\(3, 5, 6\), torch.float32"):
        m(question, image.float())
    with pytest.raises(ValueError, match=r"question_mask must be None or bool \(True = real\) of shape \(B, L\) = \(3, 4\) on cpu, got \(torch.Size\(\[3, 4\]\), torch.int64"):
        m(question, image, question_mask=torch.ones(B, T, dtype=torch.long))
    with pytest.raises(ValueError, match=r"image_mask must be None or bool \(True = real\) of shape \(B, L\) = \(3, 5\) on cpu, got \(torch.Size\(\[3, 4\]\), torch.bool"):
        m.affinity(question, image, image_mask=torch.ones(B, 4, dtype=torch.bool))


def test_guided_attention_errors():
    guided = GuidedAttention(D, K).double()
    plain = GuidedAttention(D, K, guided=False).double()
    x = torch.randn(B, N, D, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"g must be \(\(3, 6\), torch.float64, device\(type='cpu'\)\) \(x's \(B, D\) when guided\), got None"):
        guided(x)
    with pytest.raises(ValueError, match=r"g must be None \(x's \(B, D\) when guided\), got \(\(3, 6\), torch.float64"):
        plain(x, torch.zeros(B, D, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"g must be \(\(3, 6\), .* got \(\(3, 5\), torch.float64"):
        guided(x, torch.zeros(B, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"x_mask must be None or bool \(True = real\) of shape \(B, L\) = \(3, 5\)"):
        plain(x, x_mask=torch.ones(B, 1, dtype=torch.bool))


# -------------------------------------------------------------- standalone


# --------------------------------------------------------------- exercises
def test_exercise_zero_affinity_decouples_the_two_attentions():
    # With W_b = 0, C = 0 and parallel co-attention is two separate attentions:
    # the region weights no longer depend on the question at all.
    m, question, image = make(ParallelCoAttention, seed=11)
    with torch.no_grad():
        m.w_b.zero_()
    a_v = m(question, image)[3]
    a_v2 = m(torch.randn_like(question), image)[3]
    close(a_v, a_v2)
    close(a_v, torch.softmax((torch.tanh(image @ m.w_v.T) @ m.w_hv.T).squeeze(-1), dim=-1))


def test_exercise_parameter_counts():
    d, k = 6, 7
    assert sum(p.numel() for p in ParallelCoAttention(d, k).parameters()) == d * d + 2 * k * d + 2 * k
    assert sum(p.numel() for p in AlternatingCoAttention(d, k).parameters()) == 5 * k * d + 3 * k


def test_errors_for_devices_guidance_and_alternating_masks():
    torch.manual_seed(0)
    q, v = torch.randn(B, T, D), torch.randn(B, N, D)
    parallel, guided, alternating = ParallelCoAttention(D, K), GuidedAttention(D, K), AlternatingCoAttention(D, K)
    with pytest.raises(ValueError, match=r"question must be floating \(B, L, 6\) on cpu, B and dtype as the question's, got .*meta"):
        parallel(q.to("meta"), v)
    with pytest.raises(ValueError, match=r"image must be floating \(B, L, 6\) on cpu, B and dtype as the question's, got .*meta"):
        parallel.affinity(q, v.to("meta"))
    with pytest.raises(ValueError, match=r"image_mask must be None or bool \(True = real\) of shape \(B, L\) = \(3, 5\) on cpu, got .*meta"):
        parallel(q, v, image_mask=torch.ones(B, N, dtype=torch.bool, device="meta"))
    with pytest.raises(ValueError, match=r"g must be \(\(3, 6\), torch.float32, .* when guided\), got \(\(3, 6\), torch.int64"):
        guided(v, torch.ones(B, D, dtype=torch.long))
    with pytest.raises(ValueError, match=r"question_mask must be None or bool \(True = real\) of shape \(B, L\) = \(3, 4\) on cpu, got \[True\]"):
        alternating(q, v, question_mask=[True])
    with pytest.raises(ValueError, match=r"image_mask must be None or bool \(True = real\) of shape \(B, L\) = \(3, 5\) on cpu, got \(torch.Size\(\[3, 4\]\), torch.bool"):
        alternating(q, v, image_mask=torch.ones(B, T, dtype=torch.bool))
