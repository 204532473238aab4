"""Identities proven for the page on positions for images, video and long context."""

from __future__ import annotations

import math

import torch

from identities import identity
from snippets.attention.rotary import apply_rotary, rotary_tables
from snippets.modern import multimodal_rope as mm

PAGE = "modern/multimodal-positions.md"


@identity("mrope-equal-rows-is-rope",
          "M-RoPE tables with t = h = w equal 1-D RoPE's rotary_tables, blocked (Qwen2-VL) "
          "and interleaved (Qwen3-VL) alike", page=PAGE, tol=1e-12)
def mrope_equal_rows_is_rope():
    p = torch.randint(0, 4096, (2, 17))
    blocked = mm.mrope_tables(p.expand(3, -1, -1), 32, (4, 6, 6))
    interleaved = mm.mrope_tables(p.expand(3, -1, -1), 32, (6, 5, 5), interleaved=True)
    cos, sin = rotary_tables(p, 32)
    return torch.cat(blocked + interleaved), torch.cat((cos, sin, cos, sin))


@identity("mrope-image-scores-depend-on-offsets",
          "scores between the tokens of a (2, 3, 4) grid under M-RoPE are unchanged when the "
          "grid's t, h and w positions are shifted by 5, 11 and 2", page=PAGE, tol=1e-12)
def mrope_image_scores_depend_on_offsets():
    pos = mm.mrope_position_ids([(2, 3, 4)])
    q, k = (torch.randn(1, 2, 24, 16, dtype=torch.float64) for _ in range(2))
    scores = []
    for p in (pos, pos + torch.tensor([[5], [11], [2]])):
        c, s = mm.mrope_tables(p, 16, (2, 3, 3), interleaved=True)
        scores.append(apply_rotary(q, c, s) @ apply_rotary(k, c, s).transpose(-2, -1))
    return scores[0], scores[1]


@identity("rope-2d-factors-into-row-and-column",
          "2-D RoPE at (row, column) equals the rotation at (row, 0) followed by the rotation "
          "at (0, column)", page=PAGE, tol=1e-12)
def rope_2d_factors_into_row_and_column():
    rows, cols = torch.randint(0, 64, (2, 9)), torch.randint(0, 64, (2, 9))
    x = torch.randn(2, 3, 9, 16, dtype=torch.float64)
    both = apply_rotary(x, *mm.rope_2d_tables(rows, cols, 16))
    row_only = mm.rope_2d_tables(rows, torch.zeros_like(cols), 16)
    col_only = mm.rope_2d_tables(torch.zeros_like(rows), cols, 16)
    return both, apply_rotary(apply_rotary(x, *row_only), *col_only)


@identity("llama4-scale-is-one-below-floor",
          "Llama 4's NoPE query factor is exactly 1 at every position p < floor_scale - 1 "
          "(floor_scale = 8192)", page=PAGE, tol=0.0)
def llama4_scale_is_one_below_floor():
    p = torch.arange(8191)
    return mm.nope_query_scale(p), torch.ones(8191, dtype=torch.float64)


@identity("ssmax-one-over-log-n-is-softmax",
          "Scalable-Softmax with s = 1 / log n over n = 9 keys equals torch.softmax",
          page=PAGE, tol=1e-12)
def ssmax_one_over_log_n_is_softmax():
    z = torch.randn(2, 3, 5, 9, dtype=torch.float64)
    return mm.scalable_softmax(z, 1 / math.log(9)), torch.softmax(z, dim=-1)


@identity("mrope-positions-equal-get-rope-index",
          "mrope_position_ids(restart='hw') equals transformers' Qwen2VLModel.get_rope_index "
          "for text, an image (merge 2) and a video", page=PAGE, tol=0.0, needs=("transformers",))
def mrope_positions_equal_get_rope_index():
    import types

    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel
    fake = types.SimpleNamespace(config=types.SimpleNamespace(
        vision_config=types.SimpleNamespace(spatial_merge_size=2)))
    fake.get_vision_position_ids = lambda *a, **k: Qwen2VLModel.get_vision_position_ids(fake, *a, **k)
    kinds = torch.tensor([[0] * 3 + [1] * 6 + [0] * 2 + [2] * 24 + [0] * 4])
    ids, _ = Qwen2VLModel.get_rope_index(fake, torch.zeros_like(kinds), kinds,
                                         image_grid_thw=torch.tensor([[1, 4, 6]]),
                                         video_grid_thw=torch.tensor([[4, 4, 6]]))
    return mm.mrope_position_ids([3, (1, 2, 3), 2, (4, 2, 3), 4], restart="hw"), ids[:, 0]


@identity("mrope-tables-equal-transformers-qwen3-vl",
          "interleaved M-RoPE tables equal Qwen3VLTextRotaryEmbedding's cos and sin "
          "(transformers computes them in float32)", page=PAGE, tol=2e-5, needs=("transformers",))
def mrope_tables_equal_qwen3_vl():
    from transformers.models.qwen3_vl import configuration_qwen3_vl as cfg, modeling_qwen3_vl as mod
    config = cfg.Qwen3VLTextConfig(hidden_size=32, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                                   rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                    "mrope_section": [2, 3, 3]})
    pos = torch.randint(0, 60, (3, 2, 11))
    cos, sin = mod.Qwen3VLTextRotaryEmbedding(config)(torch.zeros(1), pos)
    c, s = mm.mrope_tables(pos, 16, (2, 3, 3), interleaved=True)
    return torch.cat((c, c, s, s), -1).float(), torch.cat((cos, sin), -1)
