"""The bug gallery: every guard it names exists, and the guards no other file holds.

Each test here writes the buggy form next to the guide's code and checks that
the buggy form gives a different answer, so the test fails if the guide's code
made the same mistake.
"""

from __future__ import annotations

import ast
import pathlib
import re
import warnings

import pytest
import torch
import torch.nn.functional as F

from snippets.attention import rotary
from snippets.efficiency import packed_sequences as P
from snippets.foundations import scaled_dot_product as sdp

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "attention" / "bug-gallery.md"


def test_every_named_guard_exists():
    text = PAGE.read_text()
    guards = re.findall(r"\*\*Guarded by\*\*\s*`(tests/[\w/]+\.py)::(\w+)`", text.replace("\n", " "))
    assert len(guards) >= 12, f"the gallery names {len(guards)} guards, at least 12 expected"
    missing = []
    for path, name in guards:
        tree = ast.parse((ROOT / path).read_text())
        if not any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body):
            missing.append(f"{path}::{name}")
    assert not missing, f"guards named on the gallery page that do not exist: {missing}"


def test_every_entry_names_its_source():
    sections = re.split(r"\n### ", PAGE.read_text())[1:]
    assert len(sections) >= 12
    for section in sections:
        assert re.search(r"\*\*Reported in\*\* [\w.-]+/[\w.-]+", section), section.splitlines()[0]


def test_upper_triangle_as_sdpa_mask_reads_the_future():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 1, 5, 8, dtype=torch.float64) for _ in range(3))
    wrong = torch.triu(torch.ones(5, 5), diagonal=1).bool()  # MHA's True = blocked
    right = sdp.causal_mask(5, 5)
    assert torch.equal(right, ~wrong | torch.eye(5, dtype=torch.bool))  # tril, diagonal kept
    assert not torch.equal(right, wrong)
    ours, _ = sdp.scaled_dot_product_attention(q, k, v, attn_mask=right)
    buggy = torch.nan_to_num(F.scaled_dot_product_attention(q, k, v, attn_mask=wrong))
    assert (ours - buggy).abs().max() > 0.1


def test_decode_step_keeps_the_window():
    """Prefill with a window of w keys, then one decoding query: it must read the last w keys only."""
    torch.manual_seed(1)
    t, w = 12, 4
    q, k, v = (torch.randn(t, 2, 8, dtype=torch.float64) for _ in range(3))
    one_doc = torch.tensor([0, t], dtype=torch.int32)
    full = P.packed_attention(q, k, v, one_doc, window=w)[-1]  # (H, d): the last row, prefill
    heads = [x.transpose(0, 1) for x in (q, k, v)]  # (H, T, d)
    decode = F.scaled_dot_product_attention(heads[0][:, -1:], heads[1][:, -w:], heads[2][:, -w:])
    torch.testing.assert_close(decode[:, 0], full, rtol=0, atol=1e-12)
    buggy = F.scaled_dot_product_attention(heads[0][:, -1:], heads[1], heads[2], is_causal=False)
    assert (buggy[:, 0] - full).abs().max() > 1e-3


def test_batch_dependent_block_mask_needs_the_batch():
    """B=None builds the block sparsity once, for b = 0: blocks another sequence needs are
    marked empty, and a compiled kernel skips them (eager flex on the CPU applies the
    mask_mod densely, so there only the block mask itself shows the bug)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    torch.manual_seed(2)
    lengths = torch.tensor([3, 7])  # valid keys per sequence

    def valid_keys(b, h, q_idx, kv_idx):
        return kv_idx < lengths[b]

    right = create_block_mask(valid_keys, 2, None, 8, 8, device=lengths.device, BLOCK_SIZE=4)
    buggy = create_block_mask(valid_keys, None, None, 8, 8, device=lengths.device, BLOCK_SIZE=4)
    # Query block 0, key block 1 (keys 4..7): needed by sequence 1 only.
    assert bool(right.to_dense()[1, 0, 0, 1]) and not bool(buggy.to_dense()[0, 0, 0, 1])
    q, k, v = (torch.randn(2, 1, 8, 8) for _ in range(3))
    dense = torch.arange(8)[None, None, None, :] < lengths[:, None, None, None]  # (B, 1, 1, M)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # eager flex on the CPU, on purpose
        out = flex_attention(q, k, v, block_mask=right)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=dense),
                               rtol=1e-5, atol=1e-5)


def test_rope_layouts_differ_and_a_permutation_reconciles():
    torch.manual_seed(3)
    d = 8
    x = torch.randn(1, 1, 5, d, dtype=torch.float64)
    cos, sin = rotary.rotary_tables(torch.arange(5), d)
    inter = rotary.apply_rotary(x, cos, sin, interleaved=True)
    half = rotary.apply_rotary(x, cos, sin, interleaved=False)
    assert (inter - half).abs().max() > 1e-3, "the two layouts rotate different pairs"
    perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])  # (2i, 2i+1) -> (i, i + d/2)
    torch.testing.assert_close(rotary.apply_rotary(x[..., perm], cos, sin)[..., perm.argsort()], inter,
                               rtol=0, atol=1e-12)


def test_rotary_tables_follow_the_positions_given():
    restart = torch.tensor([0, 1, 2, 0, 1])  # two packed documents
    cos, sin = rotary.rotary_tables(restart, 8)
    cos_seq, _ = rotary.rotary_tables(torch.arange(5), 8)
    torch.testing.assert_close(cos[3], cos[0], rtol=0, atol=0)
    assert (cos[3] - cos_seq[3]).abs().max() > 1e-3
