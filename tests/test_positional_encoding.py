"""Tests for snippets/foundations/positional_encoding.py (Vaswani et al. 2017, arXiv:1706.03762, section 3.5).

Oracles: the paper's formula written out element by element; the sum-of-angles
rotation that carries PE[pos] to PE[pos + k]; and the permutation equivariance
of attention when no position is added.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F
from torch.testing import assert_close

from snippets.foundations.positional_encoding import (
    LearnedPositionalEncoding,
    SinusoidalPositionalEncoding,
    offset_rotation,
    sinusoidal_positional_encoding,
)

SNIPPET = Path(__file__).resolve().parents[1] / "snippets" / "foundations" / "positional_encoding.py"


def test_values_match_the_paper_formula():
    n, d = 7, 10
    pe = sinusoidal_positional_encoding(n, d, dtype=torch.float64)
    want = torch.empty(n, d, dtype=torch.float64)
    for pos in range(n):
        for i in range(d // 2):
            want[pos, 2 * i] = math.sin(pos / 10000 ** (2 * i / d))
            want[pos, 2 * i + 1] = math.cos(pos / 10000 ** (2 * i / d))
    assert_close(pe, want)
    assert_close(sinusoidal_positional_encoding(3, d, start=4, dtype=torch.float64), want[4:7])


@pytest.mark.parametrize("k", [1, 3, 17, -5])
def test_offset_is_a_fixed_rotation(k):
    d = 16
    pe = sinusoidal_positional_encoding(80, d, dtype=torch.float64)  # (N, D)
    rot = offset_rotation(k, d)  # (D, D)
    positions = range(max(0, -k), 60)
    for pos in positions:
        assert_close(rot @ pe[pos], pe[pos + k])
    # block-diagonal: only the 2 x 2 blocks on the diagonal are non-zero
    block = torch.block_diag(*[torch.ones(2, 2)] * (d // 2)).bool()
    assert bool((rot[~block] == 0).all())
    assert_close(rot @ rot.T, torch.eye(d, dtype=torch.float64))  # a rotation
    assert_close(offset_rotation(2 * k, d), rot @ rot)  # two steps of k make one of 2k


def test_float64_table_stays_accurate_at_large_positions():
    pe32 = sinusoidal_positional_encoding(1, 8, start=100_000)
    want = torch.tensor([math.sin(100_000), math.cos(100_000)], dtype=torch.float32)
    assert_close(pe32[0, :2], want, atol=1e-6, rtol=0)


def _self_attention(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (B, N, D)
    return F.scaled_dot_product_attention(q, k, v)


def test_attention_without_positions_is_order_blind():
    torch.manual_seed(0)
    b, n, d = 2, 6, 8
    x = torch.randn(b, n, d)
    w_q, w_k, w_v = (torch.randn(d, d) / math.sqrt(d) for _ in range(3))
    perm = torch.randperm(n)
    out = _self_attention(x, w_q, w_k, w_v)
    # permuting the tokens permutes the outputs the same way: no notion of order
    assert_close(_self_attention(x[:, perm], w_q, w_k, w_v), out[:, perm])
    # with positions added, the same permutation changes what each token computes
    add_pe = SinusoidalPositionalEncoding(d)
    out_pe = _self_attention(add_pe(x), w_q, w_k, w_v)
    out_perm_pe = _self_attention(add_pe(x[:, perm]), w_q, w_k, w_v)
    assert not torch.allclose(out_perm_pe, out_pe[:, perm], atol=1e-3)
    learned = LearnedPositionalEncoding(n, d)
    torch.nn.init.normal_(learned.embedding.weight)
    assert not torch.allclose(
        _self_attention(learned(x[:, perm]), w_q, w_k, w_v),
        _self_attention(learned(x), w_q, w_k, w_v)[:, perm], atol=1e-3,
    )


def test_modules_add_the_table_and_drop_out_only_in_training():
    torch.manual_seed(1)
    x = torch.randn(2, 5, 6)
    sin = SinusoidalPositionalEncoding(6, dropout=0.5).eval()
    assert_close(sin(x), x + sinusoidal_positional_encoding(5, 6))
    assert_close(sin(x[:, 2:], start=2), (x + sinusoidal_positional_encoding(5, 6))[:, 2:])
    assert sin(torch.randn(1, 500, 6)).shape == (1, 500, 6)  # no fixed maximum length
    learned = LearnedPositionalEncoding(8, 6, dropout=0.5).eval()
    assert_close(learned(x), x + learned.embedding.weight[:5])
    assert_close(learned(x[:, :2], start=6), x[:, :2] + learned.embedding.weight[6:8])
    sin.train()
    assert (sin(x) == 0).any()  # dropout active in training
    assert not torch.equal(sin(x), sin(x))


def test_validation_messages():
    with pytest.raises(ValueError, match=r"n_positions must be int in \[1, inf\), got 0"):
        sinusoidal_positional_encoding(0, 4)
    with pytest.raises(ValueError, match=r"d_model must be even, base a number > 1 and dtype floating, got 5, "):
        sinusoidal_positional_encoding(3, 5)
    with pytest.raises(ValueError, match=r"d_model must be int in \[2, inf\), got 2.0"):
        sinusoidal_positional_encoding(3, 2.0)
    with pytest.raises(ValueError, match=r"start must be int in \[0, inf\), got -1"):
        sinusoidal_positional_encoding(3, 4, start=-1)
    with pytest.raises(ValueError, match=r"dropout must be float in \[0.0, 1.0\), got 1.0"):
        SinusoidalPositionalEncoding(4, dropout=1.0)
    with pytest.raises(ValueError, match=r"dropout must be float in \[0.0, 1.0\), got -0.1"):
        LearnedPositionalEncoding(4, 4, dropout=-0.1)
    with pytest.raises(ValueError, match=r"max_len must be int in \[1, inf\), got 0"):
        LearnedPositionalEncoding(0, 4)
    with pytest.raises(ValueError, match=r"x must be a floating \(B, N, 4\) tensor on any device, got \(\(2, 3, 5\)"):
        SinusoidalPositionalEncoding(4)(torch.zeros(2, 3, 5))
    learned = LearnedPositionalEncoding(4, 4)
    with pytest.raises(ValueError, match=r"x must be a floating \(B, N, 4\) tensor on cpu, got \(\(3, 4\)"):
        learned(torch.zeros(3, 4))
    with pytest.raises(ValueError, match=r"positions start..start\+N-1 must fit the table, got start=-2, N=2, max_len=4"):
        learned(torch.zeros(1, 2, 4), start=-2)
    with pytest.raises(ValueError, match=r"positions start..start\+N-1 must fit the table, got start=2, N=4, max_len=4"):
        learned(torch.zeros(1, 4, 4), start=2)




def test_dot_product_depends_on_offset_only():
    """Exercise 1 of the page: PE[pos] . PE[pos + k] = sum_i cos(k w_i), whatever pos."""
    d = 12
    pe = sinusoidal_positional_encoding(40, d, dtype=torch.float64)
    freq = 10000 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    for k in (1, 4, 9):
        dots = (pe[:-k] * pe[k:]).sum(-1)  # one value per pos
        assert_close(dots, torch.full_like(dots, float(torch.cos(k * freq).sum())))


def test_causal_attention_is_not_order_blind():
    """Exercise 3 of the page: the causal mask is tied to positions, so a shuffle changes outputs."""
    torch.manual_seed(2)
    x = torch.randn(1, 5, 4)
    perm = torch.tensor([4, 3, 2, 1, 0])
    out = F.scaled_dot_product_attention(x, x, x, is_causal=True)
    shuffled = F.scaled_dot_product_attention(x[:, perm], x[:, perm], x[:, perm], is_causal=True)
    assert not torch.allclose(shuffled, out[:, perm], atol=1e-3)
    assert_close(shuffled[:, 0], x[:, 4])  # the first token can only attend to itself


def test_errors_for_base_dtype_dropout_and_inputs():
    with pytest.raises(ValueError, match=r"base a number > 1 .*, got 4, '1e4'"):
        sinusoidal_positional_encoding(3, 4, base="1e4")
    with pytest.raises(ValueError, match=r"base a number > 1 .*, got 4, 0.5"):
        offset_rotation(1, 4, base=0.5)
    with pytest.raises(ValueError, match=r"dtype floating, got 4, 10000.0 and torch.int64"):
        sinusoidal_positional_encoding(3, 4, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"dtype floating, got 4, 10000.0 and 'float32'"):
        offset_rotation(1, 4, dtype="float32")
    with pytest.raises(ValueError, match=r"dropout must be float in \[0.0, 1.0\), got '0.1'"):
        SinusoidalPositionalEncoding(4, dropout="0.1")
    with pytest.raises(ValueError, match=r"base a number > 1 .*, got 4, None"):
        SinusoidalPositionalEncoding(4, base=None)
    with pytest.raises(ValueError, match=r"dropout must be float in \[0.0, 1.0\), got None"):
        LearnedPositionalEncoding(4, 4, dropout=None)
    with pytest.raises(ValueError, match=r"x must be a floating .* got \(\(1, 2, 4\), torch.int64"):
        SinusoidalPositionalEncoding(4)(torch.ones(1, 2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"x must be a floating \(B, N, 4\) tensor on cpu, got .*meta"):
        LearnedPositionalEncoding(4, 4)(torch.ones(1, 2, 4, device="meta"))


def test_learned_table_past_its_end_is_a_named_value_error():
    """More positions than the table holds: a ValueError naming them, not torch's IndexError."""
    m = LearnedPositionalEncoding(4, 6)
    for n, start in ((5, 0), (1, 4), (2, 3)):
        with pytest.raises(ValueError, match=rf"positions start..start\+N-1 must fit the table, "
                                             rf"got start={start}, N={n}, max_len=4"):
            m(torch.zeros(1, n, 6), start=start)
    assert m(torch.zeros(1, 4, 6)).shape == (1, 4, 6)  # exactly the table fits
