"""Positions for images, video and long context: M-RoPE, 2-D RoPE and temperature.

Papers and sources:
* Wang, Bai, Tan, Wang, Fan, Bai, Chen, Liu, Wang, Ge et al. (2024), "Qwen2-VL:
  Enhancing Vision-Language Model's Perception of the World at Any Resolution",
  arXiv:2409.12191: Multimodal RoPE (M-RoPE), each token carries a (t, h, w)
  position and the rotary frequencies are cut into a temporal, a height and a
  width section; the vision encoder uses 2-D RoPE.
* Bai, Cai, Chen, Chen, Chen, Cheng et al. (2025), "Qwen3-VL Technical Report",
  arXiv:2511.21631: interleaved M-RoPE, the three axes take turns along the
  frequencies (t, h, w, t, h, w, ...).
* Su, Lu, Pan, Murtadha, Wen and Liu (2021), "RoFormer", arXiv:2104.09864: the
  rotation itself, theta_i = base^(-2i/r).
* Llama 4's attention temperature: Meta's released code (meta-llama/llama-models,
  ``models/llama4/model.py``), which scales the queries of its NoPE layers by
  1 + attn_scale * log(floor((p + 1) / floor_scale) + 1).
* Nakanishi (2025), "Scalable-Softmax Is Superior for Attention",
  arXiv:2501.19399: SSMax, softmax(s log(n) z) over n inputs.

Page: docs/modern/multimodal-positions.md
Tested against: transformers' ``Qwen2VLRotaryEmbedding``,
``Qwen3VLTextRotaryEmbedding``, ``Qwen2VLVisionRotaryEmbedding``, the models'
``get_rope_index`` and ``Llama4TextAttention`` (tests/test_multimodal_rope.py),
and the equations written out as loops in the same file.

The cos and sin tables pair planes (i, i + r/2), the half-split layout of
``apply_rotary`` in snippets/attention/rotary.py (``interleaved=False``) and of
the Hugging Face ports: feed them to that function to rotate q and k.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch

__all__ = ["mrope_position_ids", "mrope_tables", "rope_2d_tables",
           "nope_query_scale", "scalable_softmax"]


# --8<-- [start:positions]
def mrope_positions(layout, restart, device):
    """Text advances t = h = w together; a (t, h, w) grid counts on its own axes."""
    rows, start = [], 0
    for item in layout:
        if isinstance(item, int):  # item text tokens at start, start + 1, ...
            rows.append(torch.arange(start, start + item, device=device).expand(3, -1))
            start += item
            continue
        axes = (torch.arange(size, device=device) for size in item)
        grid = torch.stack(torch.meshgrid(*axes, indexing="ij"))  # (3, t, h, w)
        rows.append(grid.flatten(1) + start)  # (3, t h w): frame by frame, row by row
        # the paper: the largest id + 1; transformers: start + max(h, w)
        start += max(item) if restart == "max" else max(item[1:])
    return torch.cat(rows, dim=1)  # (3, N)
# --8<-- [end:positions]


# --8<-- [start:axes]
def mrope_axes(half, sections, interleaved):
    """The axis (0 = t, 1 = h, 2 = w) whose position turns frequency i."""
    if not interleaved:  # Qwen2-VL: t for the first section, then h, then w
        return torch.arange(3).repeat_interleave(torch.tensor(sections))
    i = torch.arange(half)
    axis = i % 3  # Qwen3-VL: t h w t h w ..., h and w only inside 3 * their sections
    axis[(axis == 1) & (i >= 3 * sections[1])] = 0
    axis[(axis == 2) & (i >= 3 * sections[2])] = 0
    return axis  # (r/2,)


def mrope_angles(position_ids, inv_freq, axes):
    """Frequency i turns by the position on its own axis: p_a(i) theta_i."""
    # (3, ..., N) -> (..., N, 3) -> (..., N, r/2): each frequency reads its axis
    return position_ids.movedim(0, -1)[..., axes.to(position_ids.device)] * inv_freq
# --8<-- [end:axes]


# --8<-- [start:rope_2d]
def rope_2d_angles(rows, cols, inv_freq):
    """The first r/4 planes turn with the row, the last r/4 with the column."""
    # (..., N, 1) * (r/4,) -> (..., N, r/4) for each axis, side by side: (..., N, r/2)
    return torch.cat((rows.unsqueeze(-1) * inv_freq, cols.unsqueeze(-1) * inv_freq), -1)
# --8<-- [end:rope_2d]


# --8<-- [start:temperature]
def query_scale(positions, attn_scale, floor_scale):
    """Llama 4: 1 + a log(1 + floor((p + 1) / F)), exactly 1 while p + 1 < F."""
    return 1 + attn_scale * torch.log1p(torch.floor((positions + 1) / floor_scale))
# --8<-- [end:temperature]


# --8<-- [start:ssmax]
def ssmax(scores, s, visible):
    """softmax(s log(n) z) over the n keys each query sees (Scalable-Softmax)."""
    n = visible.sum(dim=-1, keepdim=True).to(scores.dtype)  # (..., N, 1)
    z = (s * n.clamp(min=1).log() * scores).masked_fill(~visible, -math.inf)
    weights = torch.softmax(z, dim=-1)  # (..., N, M)
    return weights.masked_fill(n == 0, 0.0)  # a query that sees no key reads nothing
# --8<-- [end:ssmax]


# --8<-- [start:face]
def mrope_position_ids(
    layout: list, *, restart: str = "max", device: torch.device | str | None = None
) -> torch.Tensor:
    """The (t, h, w) position of every token of a text, image and video sequence.

    Args:
        layout: the sequence in order: an int n >= 1 for n text tokens, a tuple
            ``(t, h, w)`` of ints >= 1 for an image (t = 1) or a video, given
            as the grid of tokens the language model sees (a vision encoder's
            patch grid divided by its spatial merge size).
        restart: where text resumes after a grid: ``"max"`` at the largest id
            + 1, start + max(t, h, w), as the Qwen2-VL paper says; ``"hw"`` at
            start + max(h, w), as transformers' ``get_rope_index`` does. They
            differ only for a video with more frames than rows and columns.
        device: where to build the ids.

    Returns:
        A long tensor ``(3, N)``: rows t, h and w; N counts every token.

    Shape:
        layout of total length N -> ``(3, N)``.
    """
    _check_mrope_layout(layout, restart)
    return mrope_positions(layout, restart, device)


def mrope_tables(
    position_ids: torch.Tensor,
    rotary_dim: int,
    sections: tuple[int, int, int],
    *,
    base: float = 10000.0,
    interleaved: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of M-RoPE: each frequency turns with the t, h or w position.

    Args:
        position_ids: integer ids ``(3, N)`` or ``(3, B, N)``, rows t, h, w.
        rotary_dim: r, the rotated width (even).
        sections: how many of the r/2 frequencies each axis takes (t, h, w),
            summing to r/2: ``mrope_section`` in the configs (Qwen2-VL:
            16, 24, 24; Qwen3-VL: 24, 20, 20).
        base: the 10000 of theta_i = base^(-2i/r) (``rope_theta``).
        interleaved: False cuts the frequencies into three blocks (Qwen2-VL);
            True deals them out t, h, w, t, h, w, ... (Qwen3-VL).

    Returns:
        ``(cos, sin)``, each ``(N, r/2)`` or ``(B, N, r/2)``, float64 (float32
        on MPS), ready for ``apply_rotary`` with planes (i, i + r/2).

    Shape:
        position_ids ``(3, ..., N)`` -> ``(..., N, r/2)`` twice.
    """
    _check_mrope(position_ids, rotary_dim, sections, base)
    wide = torch.float32 if position_ids.device.type == "mps" else torch.float64
    i = torch.arange(0, rotary_dim, 2, dtype=wide, device=position_ids.device)
    inv_freq = base ** (-i / rotary_dim)  # theta_i, (r/2,)
    axes = mrope_axes(rotary_dim // 2, list(sections), interleaved)
    angles = mrope_angles(position_ids.to(wide), inv_freq, axes)
    return angles.cos(), angles.sin()


def rope_2d_tables(
    rows: torch.Tensor, cols: torch.Tensor, rotary_dim: int, *, base: float = 10000.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of 2-D RoPE for image patches at (row, column).

    Args:
        rows: integer row of each patch, ``(N,)`` or ``(B, N)``.
        cols: integer column of each patch, the shape of ``rows``.
        rotary_dim: r, a multiple of 4: r/4 planes per axis.
        base: the 10000 of the frequencies base^(-4i/r), i < r/4, which both
            axes share.

    Returns:
        ``(cos, sin)``, each ``(..., N, r/2)``, float64 (float32 on MPS):
        planes 0 .. r/4 - 1 turn with the row, the rest with the column.

    Shape:
        rows, cols ``(..., N)`` -> ``(..., N, r/2)`` twice.
    """
    _check_rope_2d(rows, cols, rotary_dim, base)
    wide = torch.float32 if rows.device.type == "mps" else torch.float64
    i = torch.arange(0, rotary_dim // 2, 2, dtype=wide, device=rows.device)
    inv_freq = base ** (-i / (rotary_dim // 2))  # (r/4,)
    angles = rope_2d_angles(rows.to(wide), cols.to(wide), inv_freq)
    return angles.cos(), angles.sin()


def nope_query_scale(
    positions: torch.Tensor, *, attn_scale: float = 0.1, floor_scale: float = 8192
) -> torch.Tensor:
    """Llama 4's query temperature for its NoPE layers, one factor per position.

    Args:
        positions: integer 0-based absolute positions p, the cached tokens
            counted (a token after 100 cached ones is at p = 100 + its index).
        attn_scale: a, how fast the factor grows (Llama 4: 0.1).
        floor_scale: F, the length below which nothing changes (Llama 4: 8192).

    Returns:
        The factors ``1 + a log(1 + floor((p + 1) / F))``, float64 (float32 on
        MPS), shaped like ``positions``: multiply each query by its factor in
        the layers without RoPE, never the keys.

    Shape:
        positions ``(...)`` -> ``(...)``.
    """
    _check_scale(positions, attn_scale, floor_scale)
    wide = torch.float32 if positions.device.type == "mps" else torch.float64
    return query_scale(positions.to(wide), attn_scale, floor_scale)


def scalable_softmax(
    scores: torch.Tensor, s: float, *, attn_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Scalable-Softmax: attention weights that stay sharp as the keys multiply.

    Args:
        scores: attention scores ``(..., N, M)`` (already scaled by 1/sqrt(d)).
        s: the scaling parameter, > 0 (learned per layer and head in the
            paper; pass a fixed value here).
        attn_mask: bool, True = may attend, broadcastable to ``scores``;
            None lets every query see all M keys. n counts each row's keys.

    Returns:
        The weights ``(..., N, M)`` in the dtype of ``scores`` (computed in at
        least float32); a row that sees no key is all zeros.

    Shape:
        scores ``(..., N, M)``, attn_mask broadcastable -> ``(..., N, M)``.
    """
    _check_ssmax(scores, s, attn_mask)
    acc = torch.promote_types(scores.dtype, torch.float32)
    visible = torch.ones((), dtype=torch.bool, device=scores.device) \
        if attn_mask is None else attn_mask
    visible = visible.expand(scores.shape)
    return ssmax(scores.to(acc), s, visible).to(scores.dtype)
# --8<-- [end:face]


# --8<-- [start:checks]
def _got(t: object) -> str:
    """What a message says it got: a tensor's dtype, shape and device, else t."""
    is_tensor = torch.is_tensor(t)
    return f"{t.dtype} {tuple(t.shape)} on {t.device}" if is_tensor else repr(t)


def _check_bool_mask(name: str, mask: object, shape: tuple, device) -> None:
    """None, or a bool mask (True = may attend) on device that broadcasts to shape."""
    if mask is not None and (getattr(mask, "dtype", None) != torch.bool
                             or mask.dim() > len(shape) or mask.device != device or any(
            a not in (1, b) for a, b in zip(mask.shape[::-1], shape[::-1]))):
        raise ValueError(f"{name} must be bool and broadcast to {shape} on {device}, "
                         f"got {_got(mask)}")


def _check_mm_tensor(name, t, ranks, floating, device=None, lead=()):
    """An integer (or floating) tensor (*lead, ...) of a rank in ranks, on device."""
    ok = torch.is_tensor(t) and t.dtype != torch.bool and t.dim() in ranks \
        and t.is_floating_point() == floating and device in (None, t.device) \
        and tuple(t.shape[: len(lead)]) == tuple(lead)
    if not ok:
        kind = ("integer", "floating")[floating]
        raise ValueError(f"{name} must be an {kind} tensor of rank in {ranks}, leading "
                         f"dims {tuple(lead)}, on one device, got {_got(t)}")


def _check_mm_number(name, value, low, closed=False, step=None):
    """A finite number > low (>= low where closed); an int multiple of step if given."""
    ok = isinstance(value, (int, float)) and math.isfinite(value) and (
        value > low or closed and value == low)
    if not ok or step and (not isinstance(value, int) or value % step):
        kind = f"an int multiple of {step}" if step else "a finite number"
        raise ValueError(f"{name} must be {kind} {'>=' if closed else '>'} {low}, "
                         f"got {value!r}")


def _check_mrope_layout(layout, restart):
    """A non-empty list of ints >= 1 and (t, h, w) tuples of ints >= 1."""
    def fine(item):
        sizes = item if isinstance(item, tuple) and len(item) == 3 else (item,)
        return all(isinstance(v, int) and v >= 1 for v in sizes)
    if not (isinstance(layout, (list, tuple)) and layout and all(map(fine, layout))):
        raise ValueError(f"layout must be a non-empty list of text lengths >= 1 and "
                         f"(t, h, w) grids of ints >= 1, got {layout!r}")
    if restart not in ("max", "hw"):
        raise ValueError(f"restart must be 'max' or 'hw', got {restart!r}")


def _check_mrope(position_ids, rotary_dim, sections, base):
    """Ids (3, N) or (3, B, N); r even; three sections >= 0 summing to r/2."""
    _check_mm_tensor("position_ids", position_ids, (2, 3), False, lead=(3,))  # t, h, w
    _check_mm_number("rotary_dim", rotary_dim, 1, step=2)
    ok = isinstance(sections, (list, tuple)) and len(sections) == 3
    if not ok or min(sections) < 0 or sum(sections) != rotary_dim // 2:
        raise ValueError(f"sections must be three ints >= 0 summing to rotary_dim / 2 "
                         f"= {rotary_dim // 2}, got {sections!r}")
    _check_mm_number("base", base, 1.0)


def _check_rope_2d(rows, cols, rotary_dim, base):
    """rows and cols: integer tensors of one shape on one device; r % 4 == 0."""
    _check_mm_tensor("rows", rows, (1, 2), False)
    _check_mm_tensor("cols", cols, (rows.dim(),), False, rows.device, rows.shape)
    _check_mm_number("rotary_dim", rotary_dim, 1, step=4)
    _check_mm_number("base", base, 1.0)


def _check_scale(positions, attn_scale, floor_scale):
    """Positions: an integer tensor of values >= 0; a >= 0; F > 0."""
    _check_mm_tensor("positions", positions, (0, 1, 2), False)
    if positions.numel() and positions.min() < 0:
        raise ValueError(f"positions must be >= 0, got {int(positions.min())}")
    _check_mm_number("attn_scale", attn_scale, 0.0, closed=True)
    _check_mm_number("floor_scale", floor_scale, 0.0)


def _check_ssmax(scores, s, attn_mask):
    """Floating scores (..., N, M); s > 0; a bool mask that broadcasts to them."""
    _check_mm_tensor("scores", scores, (2, 3, 4), True)
    _check_mm_number("s", s, 0.0)
    _check_bool_mask("attn_mask", attn_mask, tuple(scores.shape), scores.device)
# --8<-- [end:checks]
