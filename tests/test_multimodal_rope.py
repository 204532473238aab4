"""M-RoPE, 2-D RoPE, Llama 4's query temperature and Scalable-Softmax, checked
against transformers' Qwen2-VL, Qwen3-VL and Llama 4 code and against the
equations written out as loops."""

from __future__ import annotations

import math
import types

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from snippets.attention.rotary import apply_rotary, rotary_tables
from snippets.modern.multimodal_rope import (
    mrope_position_ids,
    mrope_tables,
    nope_query_scale,
    rope_2d_tables,
    scalable_softmax,
)
from transformers_support import require_transformers

F64 = dict(atol=1e-12, rtol=1e-12)


# ------------------------------------------------------------------ oracles
def positions_by_loop(layout, restart="max"):
    """Token by token: text ids step on all rows; a grid walks frame, row, column."""
    t_row, h_row, w_row, start = [], [], [], 0
    for item in layout:
        if isinstance(item, int):
            for j in range(item):
                t_row.append(start + j), h_row.append(start + j), w_row.append(start + j)
            start += item
        else:
            t, h, w = item
            for a in range(t):
                for b in range(h):
                    for c in range(w):
                        t_row.append(start + a), h_row.append(start + b), w_row.append(start + c)
            biggest = max(t_row[-t * h * w:] + h_row[-t * h * w:] + w_row[-t * h * w:])
            start = biggest + 1 if restart == "max" else start + max(h, w)
    return torch.tensor([t_row, h_row, w_row])


def axis_of(i, sections, interleaved):
    """Which of t, h, w turns frequency i, stated from the two models' rules."""
    if not interleaved:
        return 0 if i < sections[0] else 1 if i < sections[0] + sections[1] else 2
    if i % 3 == 1 and i < 3 * sections[1]:
        return 1
    if i % 3 == 2 and i < 3 * sections[2]:
        return 2
    return 0


def tables_by_loop(pos, r, sections, interleaved, base=10000.0):
    """angle[n, i] = p_axis(i)[n] * base^(-2i/r), one entry at a time."""
    n = pos.shape[-1]
    angles = torch.empty(n, r // 2, dtype=torch.float64)
    for tok in range(n):
        for i in range(r // 2):
            angles[tok, i] = int(pos[axis_of(i, sections, interleaved), tok]) * base ** (-2 * i / r)
    return angles.cos(), angles.sin()


def meta_scale(p, attn_scale, floor_scale):
    """Meta's llama4 model.py: log(floor((p + 1) / F) + 1) * a + 1."""
    return math.log(math.floor((p + 1.0) / floor_scale) + 1.0) * attn_scale + 1.0


def ssmax_by_loop(z, s):
    """Nakanishi's form: n^(s z_i) / sum_j n^(s z_j) over a row of n scores."""
    n = len(z)
    powers = [n ** (s * float(v)) for v in z]
    return torch.tensor([p / sum(powers) for p in powers], dtype=torch.float64)


# ------------------------------------------------------------- positions
LAYOUTS = [[3, (1, 2, 3), 2], [1, (1, 4, 4), 5, (1, 2, 3), 1], [2, (3, 2, 2), 4],
           [4, (2, 3, 5), 1, (1, 1, 1), 2], [(1, 3, 2), 3]]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("restart", ["max", "hw"])
def test_positions_match_the_loop(layout, restart):
    assert torch.equal(mrope_position_ids(layout, restart=restart),
                       positions_by_loop(layout, restart))


def _get_rope_index(model, layout, merge=2):
    """transformers' get_rope_index on a layout, grids scaled up to patch grids."""
    fake = types.SimpleNamespace(config=types.SimpleNamespace(
        vision_config=types.SimpleNamespace(spatial_merge_size=merge)))
    fake.get_vision_position_ids = lambda *a, **k: model.get_vision_position_ids(fake, *a, **k)
    kinds, images, videos = [], [], []
    for item in layout:
        if isinstance(item, int):
            kinds += [0] * item
        else:
            kind = 1 if item[0] == 1 else 2
            kinds += [kind] * math.prod(item)
            (images if kind == 1 else videos).append([item[0], item[1] * merge, item[2] * merge])
    kinds = torch.tensor([kinds])
    grids = {"image_grid_thw": torch.tensor(images) if images else None,
             "video_grid_thw": torch.tensor(videos) if videos else None}
    ids, _ = model.get_rope_index(fake, torch.zeros_like(kinds), kinds, **grids)
    return ids[:, 0]


def _has_video(layout) -> bool:
    return any(not isinstance(it, int) and it[0] > 1 for it in layout)


# Qwen3-VL's processor cuts a video into frames of t = 1 with a timestamp
# between them, so its get_rope_index is compared on text and images only.
@pytest.mark.parametrize("family, layout", [(f, lay) for f in ("qwen2_vl", "qwen3_vl") for lay in LAYOUTS
                                            if f == "qwen2_vl" or not _has_video(lay)])
def test_positions_match_get_rope_index(family, layout):
    require_transformers()
    import importlib
    mod = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    model = mod.Qwen2VLModel if family == "qwen2_vl" else mod.Qwen3VLModel
    want = _get_rope_index(model, layout)
    assert torch.equal(mrope_position_ids(layout, restart="hw"), want)
    # the paper's rule agrees unless a video has more frames than rows and columns
    long_video = any(not isinstance(it, int) and it[0] > max(it[1:]) for it in layout[:-1])
    assert torch.equal(mrope_position_ids(layout), want) != long_video


def test_the_two_rules_differ_only_after_a_long_video():
    paper, hf = (mrope_position_ids([2, (5, 2, 3), 1], restart=r) for r in ("max", "hw"))
    assert torch.equal(paper[:, :-1], hf[:, :-1])
    assert paper[:, -1].tolist() == [7] * 3 and hf[:, -1].tolist() == [5] * 3


# ---------------------------------------------------------------- tables
@pytest.mark.parametrize("interleaved,sections", [(False, (2, 3, 3)), (True, (2, 3, 3)),
                                                  (False, (4, 2, 2)), (True, (4, 2, 2)),
                                                  (True, (1, 4, 3))])
def test_tables_match_the_loop(interleaved, sections):
    pos = torch.randint(0, 40, (3, 9))
    for ours, want in zip(mrope_tables(pos, 16, sections, interleaved=interleaved),
                          tables_by_loop(pos, 16, sections, interleaved)):
        assert_close(ours, want, **F64)


def _hf_rotary(family, sections):
    require_transformers()
    import importlib
    cfg = importlib.import_module(f"transformers.models.{family}.configuration_{family}")
    mod = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    params = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": list(sections)}
    if family == "qwen2_vl":
        config = cfg.Qwen2VLTextConfig(hidden_size=32, num_attention_heads=2, num_key_value_heads=1,
                                       rope_parameters=params)
        return mod.Qwen2VLRotaryEmbedding(config)
    config = cfg.Qwen3VLTextConfig(hidden_size=32, num_attention_heads=2, num_key_value_heads=1,
                                   head_dim=16, rope_parameters=params)
    return mod.Qwen3VLTextRotaryEmbedding(config)


@pytest.mark.parametrize("family,interleaved", [("qwen2_vl", False), ("qwen3_vl", True)])
@pytest.mark.parametrize("sections", [(2, 3, 3), (4, 2, 2), (2, 2, 4)])
def test_each_frequency_reads_the_axis_transformers_gives_it(family, interleaved, sections):
    """Exact: move one axis by 1, the others stay at 0; only that axis's frequencies turn."""
    rot = _hf_rotary(family, sections)
    for axis in range(3):
        pos = torch.zeros(3, 1, 1, dtype=torch.long)
        pos[axis] = 1
        cos, _ = rot(torch.zeros(1), pos)  # (1, 1, 16): the table twice, half-split
        turned = cos[0, 0, :8] != 1
        ours = mrope_tables(pos[:, 0], 16, sections, interleaved=interleaved)[0][0] != 1
        assert torch.equal(turned, ours), (axis, turned, ours)


@pytest.mark.parametrize("family,interleaved", [("qwen2_vl", False), ("qwen3_vl", True)])
def test_tables_match_transformers(family, interleaved):
    """transformers builds the angles in float32: agree to its rounding."""
    rot = _hf_rotary(family, (2, 3, 3))
    pos = torch.randint(0, 60, (3, 2, 11))
    cos, sin = rot(torch.zeros(1), pos)  # (B, N, 16), float32
    ours = mrope_tables(pos, 16, (2, 3, 3), interleaved=interleaved)
    for got, want in zip(ours, (cos, sin)):
        assert_close(torch.cat((got, got), -1).float(), want, atol=2e-5, rtol=0)


def test_mrope_rotation_matches_transformers_apply():
    require_transformers()
    from transformers.models.qwen2_vl.modeling_qwen2_vl import apply_rotary_pos_emb
    rot = _hf_rotary("qwen2_vl", (2, 3, 3))
    pos = torch.randint(0, 30, (3, 2, 6))
    q, k = torch.randn(2, 2, 6, 16), torch.randn(2, 1, 6, 16)
    cos, sin = rot(q, pos)
    want_q, want_k = apply_rotary_pos_emb(q, k, cos, sin)
    c, s = mrope_tables(pos, 16, (2, 3, 3))
    assert_close(apply_rotary(q, c, s), want_q, atol=2e-5, rtol=0)
    assert_close(apply_rotary(k, c, s), want_k, atol=2e-5, rtol=0)


def test_equal_rows_are_plain_rope():
    p = torch.randint(0, 500, (2, 13))
    for interleaved in (False, True):
        got = mrope_tables(p.expand(3, -1, -1), 24, (4, 4, 4), interleaved=interleaved)
        for a, b in zip(got, rotary_tables(p, 24)):
            assert_close(a, b, **F64)


def test_image_scores_depend_only_on_offsets():
    pos = mrope_position_ids([(2, 3, 4)])
    shifted = pos + torch.tensor([[5], [11], [2]])
    q, k = torch.randn(1, 2, 24, 16, dtype=torch.float64), torch.randn(1, 2, 24, 16, dtype=torch.float64)
    scores = []
    for p in (pos, shifted):
        c, s = mrope_tables(p, 16, (2, 3, 3), interleaved=True)
        scores.append(apply_rotary(q, c, s) @ apply_rotary(k, c, s).transpose(-2, -1))
    assert_close(scores[0], scores[1], **F64)


# ----------------------------------------------------------------- 2-D RoPE
def test_2d_tables_match_transformers_vision_rotary():
    require_transformers()
    from transformers.models.qwen2_vl import configuration_qwen2_vl as cfg, modeling_qwen2_vl as mod
    rot = mod.Qwen2VLVisionRotaryEmbedding(cfg.Qwen2VLVisionConfig(embed_dim=32, num_heads=2))
    rows, cols = torch.randint(0, 20, (12,)), torch.randint(0, 20, (12,))
    cos, sin = rot(torch.zeros(1), torch.stack((rows, cols), -1))  # (N, 16)
    c, s = rope_2d_tables(rows, cols, 16)
    assert_close(torch.cat((c, c), -1).float(), cos, atol=2e-5, rtol=0)
    assert_close(torch.cat((s, s), -1).float(), sin, atol=2e-5, rtol=0)


def test_2d_by_loop_and_factorised():
    rows, cols = torch.randint(0, 9, (2, 7)), torch.randint(0, 9, (2, 7))
    c, s = rope_2d_tables(rows, cols, 16, base=100.0)
    for b in range(2):
        for t in range(7):
            for i in range(8):
                pos, j = (rows, i) if i < 4 else (cols, i - 4)
                angle = int(pos[b, t]) * 100.0 ** (-4 * j / 16)
                assert abs(float(c[b, t, i]) - math.cos(angle)) < 1e-12
                assert abs(float(s[b, t, i]) - math.sin(angle)) < 1e-12
    x = torch.randn(2, 3, 7, 16, dtype=torch.float64)
    row_only = rope_2d_tables(rows, torch.zeros_like(cols), 16, base=100.0)
    col_only = rope_2d_tables(torch.zeros_like(rows), cols, 16, base=100.0)
    assert_close(apply_rotary(x, c, s), apply_rotary(apply_rotary(x, *row_only), *col_only), **F64)


def test_2d_scores_depend_only_on_the_patch_offsets():
    rows, cols = torch.arange(4).repeat_interleave(5), torch.arange(5).repeat(4)
    q, k = torch.randn(1, 1, 20, 8, dtype=torch.float64), torch.randn(1, 1, 20, 8, dtype=torch.float64)
    scores = []
    for dr, dc in ((0, 0), (7, 3)):
        c, s = rope_2d_tables(rows + dr, cols + dc, 8)
        scores.append(apply_rotary(q, c, s) @ apply_rotary(k, c, s).transpose(-2, -1))
    assert_close(scores[0], scores[1], **F64)


# ----------------------------------------------------------- Llama 4 scale
def test_scale_matches_meta_formula():
    p = torch.tensor([0, 1, 6, 7, 8, 100, 8190, 8191, 8192, 123_456, 10_000_000])
    want = torch.tensor([meta_scale(int(v), 0.1, 8192) for v in p], dtype=torch.float64)
    assert_close(nope_query_scale(p), want, **F64)
    small = torch.tensor([meta_scale(int(v), 0.25, 3) for v in p], dtype=torch.float64)
    assert_close(nope_query_scale(p, attn_scale=0.25, floor_scale=3), small, **F64)


def test_scale_is_one_below_the_floor():
    assert torch.equal(nope_query_scale(torch.arange(8191)), torch.ones(8191, dtype=torch.float64))
    assert nope_query_scale(torch.tensor(8191)) > 1


def _llama4_nope_attention(floor_scale=4, attn_scale=0.3):
    require_transformers()
    from transformers.models.llama4 import configuration_llama4 as cfg, modeling_llama4 as mod
    config = cfg.Llama4TextConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                  num_hidden_layers=1, no_rope_layers=[0], attn_temperature_tuning=True,
                                  floor_scale=floor_scale, attn_scale=attn_scale)
    config._attn_implementation = "eager"
    att = mod.Llama4TextAttention(config, 0).double().eval()
    assert not att.use_rope and not hasattr(att, "qk_norm")  # no_rope_layers[0] == 0: NoPE
    return att, config


def _ours(att, x, offset, cached=None):
    """q scaled by its position's factor, then causal GQA attention; keys untouched."""
    b, n, _ = x.shape
    q = att.q_proj(x).view(b, n, 4, 8).transpose(1, 2)
    k, v = (p(x).view(b, n, 2, 8).transpose(1, 2) for p in (att.k_proj, att.v_proj))
    if cached is not None:
        k, v = torch.cat((cached[0], k), 2), torch.cat((cached[1], v), 2)
    scale = nope_query_scale(torch.arange(offset, offset + n), attn_scale=att.attn_scale,
                             floor_scale=att.floor_scale)
    q = q * scale[:, None]  # (B, H, N, d) * (N, 1)
    m = k.shape[2]
    mask = torch.ones(n, m, dtype=torch.bool).tril(diagonal=m - n)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    return att.o_proj(out.transpose(1, 2).reshape(b, n, 32)), (k, v)


def _causal(n, m):
    allowed = torch.ones(n, m, dtype=torch.bool).tril(diagonal=m - n)
    return torch.zeros(n, m, dtype=torch.float64).masked_fill(~allowed, -math.inf)[None, None]


def test_nope_layer_matches_llama4_text_attention():
    att, config = _llama4_nope_attention()
    x = torch.randn(2, 19, 32, dtype=torch.float64)
    with torch.no_grad():
        want, _ = att(x, None, _causal(19, 19))
        got, _ = _ours(att, x, 0)
    # Llama4TextAttention rounds its factors to float32
    assert_close(got, want, atol=1e-6, rtol=1e-6)
    with torch.no_grad():  # and the factor matters: without it the outputs differ
        plain = F.scaled_dot_product_attention(
            att.q_proj(x).view(2, 19, 4, 8).transpose(1, 2),
            *(p(x).view(2, 19, 2, 8).transpose(1, 2) for p in (att.k_proj, att.v_proj)),
            is_causal=True, enable_gqa=True)
        plain = att.o_proj(plain.transpose(1, 2).reshape(2, 19, 32))
    assert (plain - want).abs().max() > 1e-3


def test_nope_layer_counts_the_cache_in_the_position():
    require_transformers()
    from transformers import DynamicCache
    att, config = _llama4_nope_attention()
    x = torch.randn(1, 21, 32, dtype=torch.float64)
    cache = DynamicCache(config=config)
    with torch.no_grad():
        att(x[:, :13], None, _causal(13, 13), cache=cache)
        want, _ = att(x[:, 13:], None, _causal(8, 21), cache=cache)
        _, kv = _ours(att, x[:, :13], 0)
        got, _ = _ours(att, x[:, 13:], 13, cached=kv)
    assert_close(got, want, atol=1e-6, rtol=1e-6)


# ---------------------------------------------------------- Scalable-Softmax
def test_ssmax_matches_the_paper_form():
    z = torch.randn(3, 2, 5, 7, dtype=torch.float64)
    got = scalable_softmax(z, 0.43)
    for idx in torch.cartesian_prod(torch.arange(3), torch.arange(2), torch.arange(5)):
        a, b, c = idx.tolist()
        assert_close(got[a, b, c], ssmax_by_loop(z[a, b, c], 0.43), **F64)


def test_ssmax_causal_counts_each_rows_keys():
    z = torch.randn(2, 6, 6, dtype=torch.float64)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    got = scalable_softmax(z, 0.7, attn_mask=causal)
    for b in range(2):
        for i in range(6):
            assert_close(got[b, i, : i + 1], ssmax_by_loop(z[b, i, : i + 1], 0.7), **F64)
            assert not got[b, i, i + 1:].any()


def test_ssmax_with_one_over_log_n_is_softmax():
    z = torch.randn(2, 3, 4, 9, dtype=torch.float64)
    assert_close(scalable_softmax(z, 1 / math.log(9)), z.softmax(-1), **F64)


def test_ssmax_keeps_the_peak_as_keys_multiply():
    """The paper's figure 1: one +3 among -2s; softmax's peak fades, SSMax's holds."""
    peaks = []
    for n in (10, 100, 10_000):
        z = torch.full((1, n), -2.0, dtype=torch.float64)
        z[0, -1] = 3.0
        peaks.append((z.softmax(-1)[0, -1].item(), scalable_softmax(z, 0.43)[0, -1].item()))
    assert peaks[-1][0] < 0.02 and min(p[1] for p in peaks) > 0.6


def test_ssmax_empty_row_is_zero_and_half_precision_is_finite():
    z = torch.randn(2, 4, 5)
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[1] = False
    out = scalable_softmax(z, 0.5, attn_mask=mask)
    assert not out[:, 1].any() and torch.allclose(out[:, 0].sum(-1), torch.ones(2))
    for dtype in (torch.float16, torch.bfloat16):
        big = (1e4 * torch.randn(2, 4, 5)).to(dtype)
        half = scalable_softmax(big, 0.5)
        assert half.dtype == dtype and torch.isfinite(half).all()
        ref = scalable_softmax(big.double(), 0.5)
        assert (half.double() - ref).abs().max() <= 2 * (ref.to(dtype).double() - ref).abs().max() + 1e-3


def test_ssmax_gradcheck():
    z = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(3, 4, dtype=torch.bool).tril(diagonal=1)
    assert torch.autograd.gradcheck(lambda t: scalable_softmax(t, 0.6, attn_mask=mask), (z,))


def test_tables_and_scale_are_finite_for_long_contexts():
    p = torch.tensor([[0, 1, 2**20], [0, 5, 2**20], [0, 9, 2**20]])
    for t in mrope_tables(p, 128, (16, 24, 24)) + rope_2d_tables(p[0], p[1], 64):
        assert torch.isfinite(t).all()
    assert torch.isfinite(nope_query_scale(torch.tensor([2**40])))


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize("call,match", [
    (lambda: mrope_position_ids([]), "layout must be"),
    (lambda: mrope_position_ids([3, (1, 0, 2)]), "layout must be"),
    (lambda: mrope_position_ids([3, (1, 2)]), "layout must be"),
    (lambda: mrope_position_ids([2], restart="next"), "restart must be"),
    (lambda: mrope_tables(torch.zeros(2, 5, dtype=torch.long), 16, (2, 3, 3)), r"position_ids must be .*leading dims \(3,\)"),
    (lambda: mrope_tables(torch.zeros(3, 5), 16, (2, 3, 3)), "position_ids must be"),
    (lambda: mrope_tables(torch.zeros(3, 5, dtype=torch.long), 15, (2, 3, 3)), "rotary_dim must be"),
    (lambda: mrope_tables(torch.zeros(3, 5, dtype=torch.long), 16, (2, 3, 4)), "sections must be"),
    (lambda: mrope_tables(torch.zeros(3, 5, dtype=torch.long), 16, (2, 3, 3), base=1.0), "base must be"),
    (lambda: rope_2d_tables(torch.zeros(5, dtype=torch.long), torch.zeros(4, dtype=torch.long), 8),
     r"cols must be .*leading dims \(5,\)"),
    (lambda: rope_2d_tables(torch.zeros(5), torch.zeros(5, dtype=torch.long), 8), "rows must be"),
    (lambda: rope_2d_tables(torch.zeros(5, dtype=torch.long), torch.zeros(5), 8), "cols must be"),
    (lambda: rope_2d_tables(torch.zeros(5, dtype=torch.long), torch.zeros(5, dtype=torch.long), 6),
     "rotary_dim must be"),
    (lambda: rope_2d_tables(torch.zeros(5, dtype=torch.long), torch.zeros(5, dtype=torch.long), 8,
                            base=0.5), "base must be"),
    (lambda: nope_query_scale(torch.tensor([-1, 2])), "positions must be >= 0"),
    (lambda: nope_query_scale(torch.tensor([1.0])), "positions must be"),
    (lambda: nope_query_scale(torch.tensor([1]), attn_scale=-0.1), "attn_scale must be"),
    (lambda: nope_query_scale(torch.tensor([1]), floor_scale=0), "floor_scale must be"),
    (lambda: scalable_softmax(torch.zeros(3, dtype=torch.float32), 0.5), "scores must be"),
    (lambda: scalable_softmax(torch.zeros(2, 3), 0.0), "s must be"),
    (lambda: scalable_softmax(torch.zeros(2, 3), 0.5, attn_mask=torch.ones(2, 3)), "attn_mask must be"),
    (lambda: scalable_softmax(torch.zeros(2, 3), 0.5, attn_mask=torch.ones(4, 3, dtype=torch.bool)),
     "attn_mask must be"),
])
def test_named_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ---------------------------------------------------------------- exercises
def test_exercise_text_after_a_long_video():
    """Text after an (8, 4, 4) video that starts at 10: 18 by the paper, 14 in transformers."""
    for restart, want in (("max", 18), ("hw", 14)):
        ids = mrope_position_ids([10, (8, 4, 4), 1], restart=restart)
        assert ids[:, -1].tolist() == [want] * 3


def test_exercise_llama4_factor_at_a_million():
    got = nope_query_scale(torch.tensor([1_000_000]))
    assert abs(float(got) - (1 + 0.1 * math.log(123))) < 1e-12 and round(float(got), 4) == 1.4812


def test_exercise_qwen3_height_frequencies():
    pos = torch.zeros(3, 1, dtype=torch.long)
    pos[1] = 1  # move h only
    cos, _ = mrope_tables(pos, 128, (24, 20, 20), interleaved=True)
    assert (cos[0] != 1).nonzero().flatten().tolist() == list(range(1, 60, 3))
