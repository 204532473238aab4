"""Converters between the conventions attention libraries disagree on.

The kernels are the same softmax attention everywhere; the arguments are not.
A window of W may mean W keys or W + 1, causal may hang from the upper left or
the lower right when N != M, a log-sum-exp may be in base e or base 2, query
head h may read key/value head h // (H / H_kv) or h % H_kv, and RoPE may pair
channel 2i with 2i + 1 or channel i with i + d / 2. Each converter here is a
short kernel and a checked face.

Papers: Dao (2023), "FlashAttention-2: Faster Attention with Better
Parallelism and Work Partitioning", arXiv:2307.08691 (window, causal and
log-sum-exp conventions of the fused kernels); Su, Lu, Pan, Murtadha, Wen, Liu
(2021), "RoFormer", arXiv:2104.09864 (rotary pairs); Gemma Team (2024),
"Gemma 2", arXiv:2408.00118 (the logit soft cap); OpenAI (2025), "gpt-oss-120b
& gpt-oss-20b Model Card", arXiv:2508.10925 (a learned sink per head).
Page: docs/efficiency/conventions.md
Tested against: a dense softmax written in the test, torch's
F.scaled_dot_product_attention and flex_attention on the CPU, and transformers'
masking utilities, rotate_half, Gemma 2's and gpt-oss's eager attention, in
tests/test_conventions.py.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch

__all__ = ["band_mask", "flash_window", "window_from_flash", "lse_to_base2",
           "lse_to_natural", "gqa_head_permutation", "rope_half_split_order",
           "soft_capped_scores", "attention_with_sinks", "zero_empty_rows"]


# --8<-- [start:band]
def band(n, m, left, right, offset, device=None):
    """Key j is kept for query i when i + offset - left <= j <= i + offset + right."""
    i = torch.arange(n, device=device)[:, None] + offset  # (N, 1): query i's diagonal
    j = torch.arange(m, device=device)  # (M,)
    return (j >= i - left) & (j <= i + right)  # (N, M), True = may attend
# --8<-- [end:band]


# --8<-- [start:window]
def flash_left(window):
    """A window of W keys, the query's own included, is FlashAttention's left W - 1."""
    return window - 1
# --8<-- [end:window]


# --8<-- [start:lse]
def lse_base_change(lse, to_base2):
    """log2 sum_j e^s_j = ln sum_j e^s_j / ln 2, and back."""
    return lse / math.log(2) if to_base2 else lse * math.log(2)
# --8<-- [end:lse]


# --8<-- [start:gqa]
def repeat_to_interleave(n_heads, n_kv_heads, device=None):
    """Query order p -> h such that h % H_kv == p // (H / H_kv)."""
    group = n_heads // n_kv_heads
    p = torch.arange(n_heads, device=device)  # (H,)
    return (p % group) * n_kv_heads + p // group  # (H,) a permutation
# --8<-- [end:gqa]


# --8<-- [start:rope]
def half_split_order(d, device=None):
    """Channel order taking interleaved pairs (2i, 2i + 1) to (i, i + d / 2)."""
    even = torch.arange(0, d, 2, device=device)  # (d / 2,) first of each pair
    return torch.cat([even, even + 1])  # (d,)
# --8<-- [end:rope]


# --8<-- [start:cap]
def capped(q, k, scale, cap):
    """cap * tanh(scale q k^T / cap): the cap after the scale, before the mask."""
    scores = q @ k.transpose(-2, -1) * scale  # (B, H, N, d) @ (B, H, d, M)
    return cap * torch.tanh(scores / cap)  # (B, H, N, M), inside (-cap, cap)
# --8<-- [end:cap]


# --8<-- [start:sink]
def sinked_attention(q, k, v, sinks, mask, scale):
    """softmax([s_i1 ... s_iM, sink_h]) without the sink's column, then @ v."""
    scores = q @ k.transpose(-2, -1) * scale + mask  # (B, H, N, M)
    sink = sinks[:, None, None].expand(*scores.shape[:-1], 1)  # (B, H, N, 1)
    weights = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)
    return weights[..., :-1] @ v  # rows sum to < 1: (B, H, N, M) @ (B, H, M, d_v)
# --8<-- [end:sink]


# --8<-- [start:empty]
def zero_rows(out, mask):
    """Rows whose mask keeps no key become zeros, whatever the kernel returned."""
    return out * mask.any(dim=-1, keepdim=True)  # (B, H, N, d_v) * (B, H, N, 1)
# --8<-- [end:empty]


# --8<-- [start:face]
def band_mask(
    n: int, m: int, *, left: int | None = None, right: int | None = 0,
    align: str = "lower_right", device: torch.device | str | None = None,
) -> torch.Tensor:
    """A boolean band mask, True = may attend, in FlashAttention's inclusive terms.

    ``left=None, right=0`` is causal; ``left=W - 1, right=0`` is a causal window
    of W keys (this site's and Hugging Face's window W); ``left=right=None``
    keeps every key.

    Args:
        n: query length N, >= 1.
        m: key length M, >= 1.
        left: keys kept before the diagonal, >= 0, or None for all.
        right: keys kept after the diagonal, >= 0, or None for all.
        align: ``"lower_right"`` (the last query sits on the last key: a KV
            cache, FlashAttention, FlashInfer) or ``"upper_left"`` (query 0 on
            key 0: SDPA's ``is_causal``).
        device: where to build the mask.

    Returns:
        A bool tensor ``(N, M)``.

    Shape:
        -> ``(N, M)``.
    """
    _check_conv_sizes(n=(n, 1), m=(m, 1), left=(left, 0), right=(right, 0))
    if align not in ("lower_right", "upper_left"):
        raise ValueError(f"align must be 'lower_right' or 'upper_left', got {align!r}")
    offset = m - n if align == "lower_right" else 0
    return band(n, m, math.inf if left is None else left,
                math.inf if right is None else right, offset, device)


def flash_window(window: int) -> tuple[int, int]:
    """FlashAttention's ``window_size`` for a causal window of ``window`` keys.

    Args:
        window: keys each query reads, its own included, >= 1.

    Returns:
        ``(window - 1, 0)``, the ``(left, right)`` pair FlashAttention 2 and 3
        and ``torch.nn.attention.varlen`` take.
    """
    _check_conv_sizes(window=(window, 1))
    return flash_left(window), 0


def window_from_flash(window_size: tuple[int, int]) -> int:
    """The number of keys a causal FlashAttention ``window_size=(left, 0)`` reads.

    Args:
        window_size: ``(left, 0)`` with ``left >= 0``.

    Returns:
        ``left + 1``, this site's (and Hugging Face's) window.
    """
    if not (isinstance(window_size, tuple) and window_size[1:] == (0,)):
        raise ValueError(f"window_size must be a causal (left, 0), got {window_size!r}")
    _check_conv_sizes(window_size=(window_size[0], 0))
    return window_size[0] + 1


def lse_to_base2(lse: torch.Tensor) -> torch.Tensor:
    """A natural log-sum-exp (FlashAttention, flex_attention) in base 2 (FlashInfer).

    Args:
        lse: ``ln sum_j exp(s_j)``, any shape.

    Returns:
        ``log2 sum_j exp(s_j)``, the same shape.
    """
    return lse_base_change(lse, True)


def lse_to_natural(lse2: torch.Tensor) -> torch.Tensor:
    """A base-2 log-sum-exp (FlashInfer's) in base e.

    Args:
        lse2: ``log2 sum_j exp(s_j)``, any shape.

    Returns:
        ``ln sum_j exp(s_j)``, the same shape.
    """
    return lse_base_change(lse2, False)


def gqa_head_permutation(n_heads: int, n_kv_heads: int) -> torch.Tensor:
    """Query-head order that runs a ``repeat`` model on a ``repeat_interleave`` kernel.

    A model trained with ``k.repeat(1, H // H_kv, 1, 1)`` lets query head h read
    key/value head ``h % H_kv``; every fused kernel reads ``h // (H / H_kv)``.
    Feed the kernel ``q[:, perm]`` and read its output back with
    ``out[:, perm.argsort()]`` (or permute the rows of W_q and the columns of
    W_o once).

    Args:
        n_heads: query heads H, >= 1.
        n_kv_heads: key/value heads H_kv, >= 1, dividing H.

    Returns:
        A long tensor ``(H,)``, a permutation of ``range(H)``.
    """
    _check_conv_sizes(n_kv_heads=(n_kv_heads, 1), n_heads=(n_heads, 1, n_kv_heads))
    return repeat_to_interleave(n_heads, n_kv_heads)


def rope_half_split_order(d: int) -> torch.Tensor:
    """Channel order from interleaved RoPE (GPT-J, FlashAttention) to half-split.

    ``x[..., order]`` turns a vector laid out for interleaved pairs
    ``(2i, 2i + 1)`` into one laid out for half-split pairs ``(i, i + d / 2)``
    (GPT-NeoX, Hugging Face's ``rotate_half``); ``order.argsort()`` goes back.
    Rotating and then reordering equals reordering and then rotating, and
    reordering q and k alike leaves every score unchanged.

    Args:
        d: the rotated width, even and >= 2.

    Returns:
        A long tensor ``(d,)``.
    """
    _check_conv_sizes(d=(d, 2, 2))
    return half_split_order(d)


def soft_capped_scores(
    q: torch.Tensor, k: torch.Tensor, *, cap: float, scale: float | None = None
) -> torch.Tensor:
    """Scores ``cap * tanh(scale q k^T / cap)``: Gemma 2's order, cap after scale.

    Args:
        q: queries ``(B, H, N, d)``.
        k: keys ``(B, H, M, d)``.
        cap: the soft cap, > 0 (Gemma 2: 50).
        scale: default ``1 / sqrt(d)``.

    Returns:
        The capped scores ``(B, H, N, M)``, before any mask.

    Shape:
        q ``(B, H, N, d)``, k ``(B, H, M, d)`` -> ``(B, H, N, M)``.
    """
    _check_conv_shapes(q=(q, "BHNd"), k=(k, "BHMd"))
    _check_conv_positive(cap=cap, scale=scale)
    return capped(q, k, q.shape[-1] ** -0.5 if scale is None else scale, cap)


def attention_with_sinks(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sinks: torch.Tensor, *,
    attn_mask: torch.Tensor | None = None, scale: float | None = None,
) -> torch.Tensor:
    """Attention with a learned sink logit per head in the denominator (gpt-oss).

    The sink is not scaled and carries no value: each row's weights sum to
    ``1 - sigma`` where ``sigma`` is the sink's share.

    Args:
        q: queries ``(B, H, N, d)``.
        k: keys ``(B, H, M, d)``.
        v: values ``(B, H, M, d_v)``.
        sinks: one logit per head ``(H,)``.
        attn_mask: bool, True = may attend, broadcasting to ``(B, H, N, M)``.
        scale: default ``1 / sqrt(d)``.

    Returns:
        The output ``(B, H, N, d_v)``.

    Shape:
        q ``(B, H, N, d)``, k ``(B, H, M, d)``, v ``(B, H, M, d_v)``, sinks
        ``(H,)`` -> ``(B, H, N, d_v)``.
    """
    _check_conv_shapes(q=(q, "BHNd"), k=(k, "BHMd"), v=(v, "BHMe"),
                       sinks=(sinks, "H"), attn_mask=(attn_mask, "mask"))
    _check_conv_positive(scale=scale)
    mask = torch.zeros((), dtype=q.dtype, device=q.device)
    if attn_mask is not None:
        mask = torch.zeros(attn_mask.shape, dtype=q.dtype, device=q.device)
        mask = mask.masked_fill(~attn_mask, -math.inf)
    return sinked_attention(q, k, v, sinks, mask, q.shape[-1] ** -0.5 if scale is None
                          else scale)


def zero_empty_rows(out: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
    """Zero the output rows whose mask keeps no key (cuDNN, eager float masks differ).

    Args:
        out: attention output ``(B, H, N, d_v)``.
        attn_mask: bool, True = may attend, broadcasting to ``(B, H, N, M)``.

    Returns:
        ``out`` with every fully masked row set to zero.
    """
    _check_conv_shapes(out=(out, "BHNe"), attn_mask=(attn_mask, "mask"))
    return zero_rows(out, attn_mask)
# --8<-- [end:face]


# --8<-- [start:checks]
def _check_conv_sizes(**sizes):
    """name=(value, floor[, step]): an int >= floor, a multiple of step if given (or
    None, no limit, where the floor is 0)."""
    for name, (value, low, *step) in sizes.items():
        ok = isinstance(value, int) and value >= low and value % (step or [1])[0] == 0
        if not (ok or value is None and low == 0):
            of = f", a multiple of {step[0]}" if step else ""
            raise ValueError(f"{name} must be an int >= {low}{of}, got {value!r}")


def _check_conv_positive(**values):
    """Each value None (scale only) or a finite number > 0."""
    for name, value in values.items():
        ok = value is None and name == "scale"  # scale's default
        if not (ok or isinstance(value, (int, float)) and 0 < value < math.inf):
            raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def _check_conv_shapes(**named):
    """name=(tensor, letters): floating, of the first one's dtype and device, a dim per
    letter, one size per letter across tensors ("mask": bool, any shape, or None)."""
    sizes, like = {}, next(iter(named.values()))[0]
    for name, (t, dims) in named.items():
        mask = dims == "mask"  # broadcasts against the scores: no letters
        ok = torch.is_tensor(t) and (mask or t.is_floating_point())
        fits = mask and t is None or ok and t.device == like.device and t.dtype == (
            torch.bool if mask else like.dtype)
        if not fits or not mask and (t.dim() != len(dims) or any(
                sizes.setdefault(c, n) != n for c, n in zip(dims, t.shape))):
            got = (t.dtype, tuple(t.shape), t.device) if torch.is_tensor(t) else t
            want = "torch.bool" if mask else f"floating ({', '.join(dims)})"
            raise (ValueError if ok else TypeError)(
                f"{name} must be {want} like {next(iter(named))} (dtype, device, sizes "
                f"{sizes}), got {got}")
# --8<-- [end:checks]
