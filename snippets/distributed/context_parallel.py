"""Context-parallel attention: one sequence split across processes.

Three schemes, each exact (equal to attention over the whole sequence up to
rounding), each with its backward pass:

* Ring attention: every rank keeps its queries and passes its key/value block
  to the next rank, P - 1 times, merging each incoming block into a running
  (max, sum, output) with the online softmax. Liu, Zaharia and Abbeel (2023),
  "Ring Attention with Blockwise Transformers for Near-Infinite Context",
  arXiv:2310.01889. The backward pass is written by hand (an
  ``torch.autograd.Function``): the key/value blocks travel the ring again,
  together with their gradient accumulators.
* Ulysses: an all-to-all turns "every rank holds N/P tokens of all H heads"
  into "every rank holds all N tokens of H/P heads", attention runs locally,
  and a second all-to-all turns it back. Jacobs, Tanaka, Zhang, Zhang, Song,
  Rajbhandari and He (2023), "DeepSpeed Ulysses: System Optimizations for
  Enabling Training of Extreme Long Sequence Transformer Models",
  arXiv:2309.14509. Autograd follows the collectives through two small
  ``torch.autograd.Function`` wrappers (``torch.distributed.nn.functional``
  has such wrappers too, but warns that its ``all_gather`` is deprecated in
  torch 2.13).
* All-gather KV: every rank gathers all keys and values and attends its own
  queries to them, as in the context parallelism of Llama 3 (Llama Team, AI @
  Meta (2024), "The Llama 3 Herd of Models", arXiv:2407.21783).

Layouts: ``"contiguous"`` gives rank r tokens [r N/P, (r + 1) N/P);
``"zigzag"`` cuts the sequence into 2P chunks and gives rank r chunks r and
2P - 1 - r, so that under a causal mask every rank has the same amount of work.

Page: docs/distributed/context-parallel.md
Tested against: torch.nn.functional.scaled_dot_product_attention on the whole
sequence, with 2 and 4 gloo processes (tests/test_context_parallel.py).

Mask convention: ``key_mask`` is boolean, True = this key may be
attended (a real token), as for SDPA (``nn.MultiheadAttention``'s
``key_padding_mask`` means the opposite: True = padding).

Grouped-query attention: k and v may have H_kv heads, a divisor of q's H, as
with SDPA's ``enable_gqa=True`` (query head h reads key/value head h // (H /
H_kv)). The ring and the all-gather move only the H_kv heads; Ulysses splits
both head counts across ranks, so its degree P must divide H_kv.
``is_causal`` is self-attention causality over global positions. A query that
may attend to no key returns zeros.

Without an initialised process group every function runs as a world of one
process, so the file can be tried in a notebook. This file needs only torch
(``torch.distributed`` is part of torch) and the standard library.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

__all__ = [
    "LAYOUTS",
    "PeerTimeoutError",
    "allgather_kv_attention",
    "causal_work_per_rank",
    "merge_block",
    "pad_to_multiple",
    "ring_attention",
    "shard_positions",
    "shard_sequence",
    "simulate_ring_attention",
    "ulysses_attention",
    "unshard_sequence",
]

LAYOUTS = ("contiguous", "zigzag")


class PeerTimeoutError(RuntimeError):
    """A rank stopped answering: a block it should have sent never came."""


# --8<-- [start:layout]
def _chunks_of(rank: int, world_size: int, layout: str) -> list[int]:
    """Which of the sequence's equal chunks rank ``rank`` holds, in order."""
    if layout == "contiguous":
        return [rank]  # P chunks, one each
    return [rank, 2 * world_size - 1 - rank]  # 2P chunks: one early, one late
# --8<-- [end:layout]


# --8<-- [start:layout_face]


def shard_positions(
    n_local: int, rank: int, world_size: int, layout: str = "contiguous"
) -> torch.Tensor:
    """Global positions of the ``n_local`` tokens ``rank`` holds, ``(n_local,)``."""
    _check_layout(layout, rank, world_size)
    chunks = _chunks_of(rank, world_size, layout)  # zigzag: two per rank
    _check_count("n_local", n_local, 0, len(chunks), f" for layout {layout!r}")
    size = n_local // len(chunks)
    return torch.cat([torch.arange(c * size, (c + 1) * size) for c in chunks])


def shard_sequence(
    x: torch.Tensor,
    rank: int,
    world_size: int,
    layout: str = "contiguous",
    dim: int = -2,
) -> torch.Tensor:
    """The part of a whole sequence ``x`` that ``rank`` holds under ``layout``."""
    _check_dim(x, dim)
    _check_layout(layout, rank, world_size, x.shape[dim], "the length of x along dim")
    n_chunks = world_size * (1 if layout == "contiguous" else 2)
    pieces = x.chunk(n_chunks, dim=dim)
    return torch.cat([pieces[c] for c in _chunks_of(rank, world_size, layout)], dim=dim)


def unshard_sequence(
    shards: list[torch.Tensor], layout: str = "contiguous", dim: int = -2
) -> torch.Tensor:
    """Inverse of ``shard_sequence``: the shards of ranks 0..P-1 back in order."""
    _check_shard_list(shards, layout, dim)
    world_size = len(shards)
    if layout == "contiguous":
        return torch.cat(shards, dim=dim)
    chunks: list[torch.Tensor | None] = [None] * (2 * world_size)
    for rank, shard in enumerate(shards):
        first, second = shard.chunk(2, dim=dim)
        chunks[rank], chunks[2 * world_size - 1 - rank] = first, second
    return torch.cat(chunks, dim=dim)


def pad_to_multiple(
    x: torch.Tensor, multiple: int, dim: int = -2
) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero-pad ``x`` along ``dim`` to a multiple of ``multiple``.

    Returns the padded tensor and a boolean ``(padded_length,)`` mask that is
    True on real positions, to be used as (part of) ``key_mask``.
    """
    _check_dim(x, dim)
    _check_count("multiple", multiple, 1)
    length = x.shape[dim]
    extra = -length % multiple
    shape = list(x.shape)
    shape[dim] = extra
    padded = torch.cat([x, x.new_zeros(shape)], dim=dim)
    real = torch.arange(length + extra, device=x.device) < length
    return padded, real
# --8<-- [end:layout_face]


# --8<-- [start:checks]
def _check_cp_tensor(name, t, shape, like=None, dtype=True) -> None:
    """A floating tensor of shape (a str: any size); like = (name, tensor) to match."""
    peer, ref = like or (name, t)
    ok = torch.is_tensor(t) and t.is_floating_point() and t.dim() == len(shape)
    if not ok or any(w != s for w, s in zip(shape, t.shape) if isinstance(w, int)) or (
            t.device != ref.device or dtype and t.dtype != ref.dtype):
        got = f"{t.dtype} {tuple(t.shape)} on {t.device}" if torch.is_tensor(t) else t
        raise (ValueError if ok else TypeError)(
            f"{name} must be a floating ({', '.join(map(str, shape))}) tensor on "
            f"{peer}'s device{' and dtype' if dtype else ''}, got {got}")


def _check_count(name: str, value: object, low=0, multiple=1, why="") -> None:
    """An int >= low that ``multiple`` divides."""
    if not (isinstance(value, int) and value >= low) or value % multiple:
        each = f" and a multiple of {multiple}{why}" if multiple > 1 else ""
        raise ValueError(f"{name} must be an int >= {low}{each}, got {value!r}")


def _check_layout(layout, rank=0, world_size=1, length=None, name="n", low=0) -> None:
    """A layout, a rank in world_size and a length the P (2P: zigzag) chunks divide."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    _check_count("world_size", world_size, 1)
    if not (isinstance(rank, int) and 0 <= rank < world_size):
        raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank!r}")
    if length is not None:
        chunks = world_size * (1 if layout == "contiguous" else 2)
        _check_count(name, length, low, chunks, f" for layout {layout!r} on world_size "
                     f"{world_size} (pad_to_multiple pads)")


def _check_dim(x: object, dim: object) -> None:
    """Raise unless ``x`` is a tensor and ``dim`` one of its dimensions."""
    n = x.dim() if torch.is_tensor(x) else 0  # not a tensor: no dim fits
    if not (isinstance(dim, int) and -n <= dim < n):
        raise ValueError(f"dim must be an int in [-{n}, {n}) for x, a tensor, got dim "
                         f"{dim!r} and x {tuple(x.shape) if n else type(x).__name__}")


def _check_shard_list(shards: object, layout: str, dim: object) -> None:
    """``shards`` must be P tensors of one shape that ``unshard_sequence`` can join."""
    if not (isinstance(shards, (list, tuple)) and shards and all(
            torch.is_tensor(t) and t.shape == shards[0].shape for t in shards)):
        got = shards if not isinstance(shards, (list, tuple)) else [
            tuple(t.shape) if torch.is_tensor(t) else t for t in shards]
        raise ValueError(f"shards must be P >= 1 tensors of one shape, got {got}")
    _check_dim(shards[0], dim)
    _check_layout(layout, 0, 1, shards[0].shape[dim], "the shards' length along dim")


def _check_merge(m, l, o, scores, v) -> None:
    """The running (m, l, o), a block of scores and its values must fit together."""
    lead = scores.shape[:-2] if torch.is_tensor(scores) else ()
    _check_cp_tensor("scores", scores, (*lead, "n", "b"))
    like, n = ("scores", scores), scores.shape[:-1]
    for name, t, shape in (("m", m, (*n, 1)), ("l", l, (*n, 1)), ("o", o, (*n, "d"))):
        _check_cp_tensor(name, t, shape, like)
    _check_cp_tensor("v", v, (*lead, scores.shape[-1], o.shape[-1]), like)


def _world(group) -> tuple[int, int]:
    """(rank, world_size) in ``group``; a world of one without a process group."""
    if not dist.is_available() or not dist.is_initialized():
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def _check_shards(q, k, v, key_mask, layout, scale=None, world_size=1) -> None:
    """Self-attention shards q (B, H, n, d), k (B, H_kv, n, d), v (B, H_kv, n, d_v)."""
    _check_cp_tensor("q", q, ("B", "H", "n", "d"))
    b, h, n, d = q.shape
    _check_cp_tensor("k", k, (b, "H_kv", n, d), ("q", q))
    _check_cp_tensor("v", v, (*k.shape[:3], "d_v"), ("q", q))
    if h % k.shape[1]:
        raise ValueError(f"k's H_kv must divide q's H = {h}, got {k.shape[1]}")
    _check_layout(layout, 0, world_size, n)  # a zigzag shard holds two equal chunks
    want, m = f"{torch.bool} {(b, n)} on {q.device}", key_mask
    got = f"{m.dtype} {tuple(m.shape)} on {m.device}" if torch.is_tensor(m) else m
    if m is not None and got != want:
        raise ValueError(f"key_mask must be None or {want}, True = real key, got {got}")
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be None or a finite float > 0, got {scale!r}")
# --8<-- [end:checks]


# --8<-- [start:merge]
def online_softmax_merge(m, l, o, scores, v):
    """Fold a block of scores into the running (max m, sum l, unnormalised output o)."""
    m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))  # (..., n, 1)
    m_safe = torch.where(torch.isneginf(m_new), 0.0, m_new)  # no -inf - -inf = NaN
    alpha = torch.exp(m - m_safe)  # re-measure what we have against the new max
    p = torch.exp(scores - m_safe)  # (..., n, b)
    l = alpha * l + p.sum(dim=-1, keepdim=True)
    o = alpha * o + p @ v  # (..., n, b) @ (..., b, d) -> (..., n, d)
    return m_new, l, o
# --8<-- [end:merge]


# --8<-- [start:merge_face]
def merge_block(m, l, o, scores, v):
    """Fold one block of scores into the running (max m, sum l, output o).

    Args:
        m, l: the running max and sum, ``(..., n, 1)``.
        o: the running unnormalised output, ``(..., n, d)``.
        scores: ``(..., n, b)``, -inf where a key is masked.
        v: the block's values, ``(..., b, d)``.

    Returns:
        The new ``(m, l, o)``; the final output is ``o / l``.
    """
    _check_merge(m, l, o, scores, v)
    return online_softmax_merge(m, l, o, scores, v)
# --8<-- [end:merge_face]


def _visible(q_pos: torch.Tensor, k_pos: torch.Tensor, is_causal: bool) -> bool:
    """Whether any query in q_pos may see any key in k_pos (else skip the tile)."""
    return not is_causal or bool(k_pos.min() <= q_pos.max())


def _repeat_kv(x, h):
    """(B, H_kv, b, d) -> (B, H, b, d): query head i reads head i // (H / H_kv)."""
    return x.repeat_interleave(h // x.shape[1], dim=1)


def _fold_kv(grad, h_kv):
    """(B, H, b, d) -> (B, H_kv, b, d): a shared head's gradient sums its group's."""
    return grad.unflatten(1, (h_kv, -1)).sum(dim=2)


def _tile_scores(q, k, q_pos, k_pos, key_mask, is_causal, scale):
    k = _repeat_kv(k, q.shape[1])  # (B, H, b, d): only this tile, after the transfer
    scores = (
        q @ k.transpose(-2, -1)
    ) * scale  # (B, H, n, d) @ (B, H, d, b) -> (B, H, n, b)
    allowed = torch.ones(
        q_pos.numel(), k_pos.numel(), dtype=torch.bool, device=q.device
    )
    if is_causal:
        allowed = k_pos[None, :].to(q.device) <= q_pos[:, None].to(q.device)  # (n, b)
    if key_mask is not None:
        allowed = allowed & key_mask[:, None, None, :]  # (B, 1, 1, b)
    return scores.masked_fill(~allowed, float("-inf"))


def _tiles(n_local: int, rank: int, src: int, world_size: int, layout: str):
    """Pairs (query slice, key slice, query positions, key positions) of one step."""
    q_pos = shard_positions(n_local, rank, world_size, layout)
    k_pos = shard_positions(n_local, src, world_size, layout)
    size = n_local // len(_chunks_of(rank, world_size, layout))
    for qs in range(0, n_local, size):
        for ks in range(0, n_local, size):
            yield (
                slice(qs, qs + size),
                slice(ks, ks + size),
                q_pos[qs : qs + size],
                k_pos[ks : ks + size],
            )


# --8<-- [start:ring_step]
def _ring_step_forward(
    state, q, k, v, key_mask, rank, src, world_size, layout, is_causal, scale, work
):
    """Merge rank src's key/value block, tile by tile; skip tiles the mask hides."""
    m, l, o = state
    for qs, ks, q_pos, k_pos in _tiles(q.shape[2], rank, src, world_size, layout):
        if not _visible(q_pos, k_pos, is_causal):
            continue
        km = None if key_mask is None else key_mask[:, ks]
        scores = _tile_scores(q[:, :, qs], k[:, :, ks], q_pos, k_pos, km, is_causal,
                              scale)
        v_tile = _repeat_kv(v[:, :, ks], q.shape[1])  # (B, H, b, d)
        run = (m[:, :, qs], l[:, :, qs], o[:, :, qs])
        merged = online_softmax_merge(*run, scores, v_tile)
        m[:, :, qs], l[:, :, qs], o[:, :, qs] = merged
        work.append(q_pos.numel() * k_pos.numel())
# --8<-- [end:ring_step]


def _new_state(q, v):
    b, h, n, _ = q.shape
    m = q.new_full((b, h, n, 1), float("-inf"))
    return m, q.new_zeros((b, h, n, 1)), q.new_zeros((b, h, n, v.shape[-1]))


def _finish(state):
    """out = o / l and the log-sum-exp per row; rows with no key give 0 and -inf."""
    m, l, o = state
    empty = l == 0
    out = o / torch.where(empty, 1.0, l)
    lse = torch.where(empty, float("-inf"), m + torch.log(torch.where(empty, 1.0, l)))
    return out, lse


# --8<-- [start:ring_pass]
def _peer(group, group_rank: int) -> int:
    return group_rank if group is None else dist.get_global_rank(group, group_rank)


def _peer_failure(rank: int, step: int, error: Exception) -> PeerTimeoutError:
    return PeerTimeoutError(
        f"rank {rank}: ring step {step} received no block from its neighbour within "
        "the "
        f"process group's timeout (did a rank die or hang?): {error}"
    )


def _start_pass(tensors, rank, world_size, group, step, send_offset=1):
    """Send ``tensors`` to the next rank, receive the previous rank's, in background."""
    send_to = _peer(group, (rank + send_offset) % world_size)
    recv_from = _peer(group, (rank - send_offset) % world_size)
    received = [torch.empty_like(t) for t in tensors]
    ops = [dist.P2POp(dist.isend, t.contiguous(), send_to, group) for t in tensors]
    ops += [dist.P2POp(dist.irecv, r, recv_from, group) for r in received]
    try:
        return dist.batch_isend_irecv(ops), received
    except RuntimeError as error:  # gloo: the peer's socket is already closed
        raise _peer_failure(rank, step, error) from error


def _finish_pass(requests, received, rank, step):
    try:
        for request in requests:
            request.wait()  # gloo raises after the group's timeout, not never
    except RuntimeError as error:
        raise _peer_failure(rank, step, error) from error
    return received
# --8<-- [end:ring_pass]


# --8<-- [start:ring_forward]
def _ring_forward(q, k, v, key_mask, is_causal, scale, layout, group, work):
    """P steps: pass the block on, merge the one in hand, wait for the next."""
    rank, world_size = _world(group)
    state = _new_state(q, v)
    block = [k, v] + ([] if key_mask is None else [key_mask.to(torch.uint8)])
    for step in range(world_size):
        if step < world_size - 1:  # send the block on before computing with it: overlap
            pending = _start_pass(block, rank, world_size, group, step)
        src = (rank - step) % world_size  # whose block we hold now
        mask = None if key_mask is None else block[2].bool()
        args = (rank, src, world_size, layout, is_causal, scale, work)
        _ring_step_forward(state, q, block[0], block[1], mask, *args)
        if step < world_size - 1:
            block = _finish_pass(*pending, rank, step)
    return _finish(state)
# --8<-- [end:ring_forward]


# --8<-- [start:tile_backward]
def _tile_backward(scores, q, k, v, grad_out, delta, lse, scale):
    """dq, dk, dv of one tile from the forward's log-sum-exp: P = exp(S - L)."""
    h, h_kv = q.shape[1], k.shape[1]
    p = torch.exp(scores - lse)  # the forward's weights, (B, H, n, b)
    dp = grad_out @ _repeat_kv(v, h).transpose(-2, -1)  # (B, H, n, b)
    ds = p * (dp - delta) * scale  # softmax backward, times the scale
    dq = ds @ _repeat_kv(k, h)  # (B, H, n, b) @ (B, H, b, d)
    # (B, H, b, n) @ (B, H, n, d), summed over each key/value head's group
    dk = _fold_kv(ds.transpose(-2, -1) @ q, h_kv)
    dv = _fold_kv(p.transpose(-2, -1) @ grad_out, h_kv)
    return dq, dk, dv
# --8<-- [end:tile_backward]


# --8<-- [start:ring_backward]
def _ring_backward(
    grad_out, q, k, v, key_mask, out, lse, is_causal, scale, layout, group
):
    """dq stays home; (k, v, mask, dk, dv) travel the ring and come back home."""
    rank, world_size = _world(group)
    delta = (grad_out * out).sum(dim=-1, keepdim=True)  # (B, H, n, 1): rowsum(dO * O)
    lse_safe = torch.where(torch.isneginf(lse), float("inf"), lse)  # empty rows: p = 0
    dq = torch.zeros_like(q)
    block = [k, v, torch.zeros_like(k), torch.zeros_like(v)]
    if key_mask is not None:
        block.append(key_mask.to(torch.uint8))
    for step in range(world_size):
        src = (rank - step) % world_size
        kb, vb, dk, dv = block[:4]
        mask = None if key_mask is None else block[4].bool()
        for qs, ks, q_pos, k_pos in _tiles(q.shape[2], rank, src, world_size, layout):
            if not _visible(q_pos, k_pos, is_causal):
                continue
            km = None if mask is None else mask[:, ks]
            scores = _tile_scores(
                q[:, :, qs], kb[:, :, ks], q_pos, k_pos, km, is_causal, scale
            )
            grads = _tile_backward(
                scores,
                q[:, :, qs],
                kb[:, :, ks],
                vb[:, :, ks],
                grad_out[:, :, qs],
                delta[:, :, qs],
                lse_safe[:, :, qs],
                scale,
            )
            dq[:, :, qs] += grads[0]
            dk[:, :, ks] += grads[1]
            dv[:, :, ks] += grads[2]
        if world_size > 1:  # after the last step only dk, dv move: one hop home
            moving = block if step < world_size - 1 else [dk, dv]
            received = _finish_pass(
                *_start_pass(moving, rank, world_size, group, step), rank, step
            )
            block = received if step < world_size - 1 else [None, None, *received]
    return dq, block[2], block[3]


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, key_mask, is_causal, scale, layout, group, work):
        out, lse = _ring_forward(
            q, k, v, key_mask, is_causal, scale, layout, group, work
        )
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.key_mask, ctx.args = key_mask, (is_causal, scale, layout, group)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _ring_backward(
            grad_out.contiguous(), q, k, v, ctx.key_mask, out, lse, *ctx.args
        )
        return dq, dk, dv, None, None, None, None, None, None
# --8<-- [end:ring_backward]


# --8<-- [start:ring]
def ring_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    key_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    layout: str = "contiguous",
    scale: float | None = None,
    group: dist.ProcessGroup | None = None,
    work: list[int] | None = None,
) -> torch.Tensor:
    """Exact attention over a sequence sharded across the ranks of ``group``.

    Args:
        q, k, v: this rank's shard, ``(B, H, n, d)`` with ``n = N / P``, cut
            from the whole sequence by ``shard_sequence(x, rank, P, layout)``.
        key_mask: this rank's shard of a bool ``(B, N)`` mask, True =
            real key; ``None`` lets every key be attended.
        is_causal: causal self-attention over global positions.
        layout: ``"contiguous"`` or ``"zigzag"``.
        scale: factor on the scores; ``1 / sqrt(d)`` when ``None``.
        group: the process group; ``None`` is the default group (or a world of
            one process when none is initialised).
        work: if given, the score entries of every tile computed are appended.

    Returns:
        This rank's shard of the output, ``(B, H, n, d)``.
    """
    rank, world_size = _world(group)
    _check_shards(q, k, v, key_mask, layout, scale)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return _RingAttention.apply(
        q, k, v, key_mask, is_causal, scale, layout, group, [] if work is None else work
    )
# --8<-- [end:ring]


def simulate_ring_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    world_size: int,
    *,
    key_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    layout: str = "contiguous",
) -> tuple[torch.Tensor, list[int]]:
    """Run the ring's per-rank steps in one process, on whole tensors.

    Each simulated rank takes its shard and merges the other shards' blocks in
    ring order, with the same step function as ``ring_attention``. Returns the
    whole output ``(B, H, N, d)`` and the score entries each rank computed.
    """
    _check_shards(q, k, v, key_mask, layout, world_size=world_size)
    shard = lambda x, r: shard_sequence(x, r, world_size, layout, dim=2)  # noqa: E731
    mask_shard = lambda r: (
        None
        if key_mask is None
        else shard_sequence(key_mask, r, world_size, layout, dim=1)
    )  # noqa: E731
    scale = 1.0 / math.sqrt(q.shape[-1])
    outs, work = [], []
    for rank in range(world_size):
        q_local, tiles = shard(q, rank), []
        state = _new_state(q_local, v)
        for step in range(world_size):
            src = (rank - step) % world_size
            _ring_step_forward(
                state,
                q_local,
                shard(k, src),
                shard(v, src),
                mask_shard(src),
                rank,
                src,
                world_size,
                layout,
                is_causal,
                scale,
                tiles,
            )
        outs.append(_finish(state)[0])
        work.append(sum(tiles))
    return unshard_sequence(outs, layout, dim=2), work


def causal_work_per_rank(n: int, world_size: int, layout: str) -> list[int]:
    """Score entries each rank computes under a causal mask (hidden tiles skipped)."""
    _check_layout(layout, 0, world_size, n, "n", 1)
    x = torch.zeros(1, 1, n, 1)
    return simulate_ring_attention(x, x, x, world_size, is_causal=True, layout=layout)[
        1
    ]


# --8<-- [start:local_attention]
def _local_attention(q, k, v, q_pos, k_pos, key_mask, is_causal, scale):
    """SDPA with a bool mask built from global positions; empty rows give zeros."""
    allowed = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device)
    if is_causal:
        allowed = k_pos[None, :].to(q.device) <= q_pos[:, None].to(q.device)  # (n, N)
    if key_mask is not None:
        allowed = allowed & key_mask[:, None, None, :]  # (B, 1, n, N)
    k, v = _repeat_kv(k, q.shape[1]), _repeat_kv(v, q.shape[1])  # GQA: as enable_gqa
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)
    return out.masked_fill(
        ~allowed.any(dim=-1, keepdim=True), 0.0
    )  # SDPA may not zero them
# --8<-- [end:local_attention]


def _gather_mask(key_mask, world_size, group):
    """All ranks' bool key masks, in rank order (no gradient)."""
    if key_mask is None or world_size == 1:
        return key_mask
    pieces = [torch.empty_like(key_mask, dtype=torch.uint8) for _ in range(world_size)]
    dist.all_gather(pieces, key_mask.to(torch.uint8).contiguous(), group=group)
    return [p.bool() for p in pieces]


# --8<-- [start:collectives]
class _AllToAll(torch.autograd.Function):
    """x is (P, ...): piece j goes to rank j, piece j of the result came from rank j.

    The exchange is its own adjoint: the gradient goes back by the same swap.
    """

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        x = (
            x.contiguous()
        )  # empty_like keeps a permuted tensor's strides: fix them first
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return _AllToAll.apply(grad.contiguous(), ctx.group), None


class _AllGather(torch.autograd.Function):
    """(...) on each rank -> (P, ...) everywhere; backward sums each rank's
    gradient for a shard back onto its owner (a reduce-scatter, written as an
    all-to-all and a sum because gloo has no reduce-scatter)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        pieces = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(pieces, x.contiguous(), group=group)
        return torch.stack(pieces)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        received = torch.empty_like(grad)
        dist.all_to_all_single(received, grad, group=ctx.group)
        return received.sum(dim=0), None
# --8<-- [end:collectives]


# --8<-- [start:heads_exchange]
def _seq_to_heads(x: torch.Tensor, world_size: int, group) -> torch.Tensor:
    """(..., B, H, n, d) sequence shard -> (..., B, H/P, N, d) head shard."""
    *lead, b, h, n, d = x.shape
    x = x.reshape(*lead, b, world_size, h // world_size, n, d).movedim(
        -4, 0
    )  # (P, ..., B, H/P, n, d)
    x = _AllToAll.apply(x, group)  # piece j now holds rank j's tokens of our heads
    return x.movedim(0, -3).reshape(*lead, b, h // world_size, world_size * n, d)


def _heads_to_seq(x: torch.Tensor, world_size: int, group) -> torch.Tensor:
    """(B, H/P, N, d) head shard -> (B, H, n, d) sequence shard."""
    b, h_local, n_total, d = x.shape
    x = x.reshape(b, h_local, world_size, n_total // world_size, d).movedim(
        2, 0
    )  # (P, B, H/P, n, d)
    x = _AllToAll.apply(x, group)  # piece j now holds our tokens of rank j's heads
    return x.movedim(0, 1).reshape(b, world_size * h_local, n_total // world_size, d)
# --8<-- [end:heads_exchange]


# --8<-- [start:ulysses]
def ulysses_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    key_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    group: dist.ProcessGroup | None = None,
) -> torch.Tensor:
    """All-to-all from sequence shards to head shards, attention, and back.

    Takes and returns contiguous sequence shards ``(B, H, n, d)`` (k and v
    ``(B, H_kv, n, d)``); in between each rank holds ``H/P`` query heads and
    ``H_kv/P`` key/value heads of all N tokens, so P must divide ``H_kv``.
    """
    rank, world_size = _world(group)
    _check_shards(q, k, v, key_mask, "contiguous", scale)
    h, h_kv = q.shape[1], k.shape[1]
    if h_kv % world_size or world_size > 1 and v.shape[-1] != q.shape[-1]:
        raise ValueError(f"n_kv_heads must be a multiple of world_size = {world_size} "
                         f"and d_v = d = {q.shape[-1]}, got {h_kv} and {v.shape[-1]}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if world_size == 1:
        return _local_attention(
            q,
            k,
            v,
            torch.arange(q.shape[2]),
            torch.arange(q.shape[2]),
            key_mask,
            is_causal,
            scale,
        )
    # One collective for q, k and v: separate ones could run their backward
    # passes in a different order on different ranks and swap gradients.
    # Rank j's heads of q, k and v side by side: (B, P, H/P + 2 H_kv/P, n, d)
    parts = torch.cat([t.unflatten(1, (world_size, -1)) for t in (q, k, v)], dim=2)
    x = _seq_to_heads(
        parts.flatten(1, 2), world_size, group
    )  # (B, (H + 2 H_kv)/P, N, d)
    q, k, v = x.split([h // world_size, h_kv // world_size, h_kv // world_size], dim=1)
    mask = _gather_mask(key_mask, world_size, group)
    mask = None if mask is None else torch.cat(mask, dim=1)  # (B, N)
    positions = torch.arange(q.shape[2])
    out = _local_attention(
        q, k, v, positions, positions, mask, is_causal, scale
    )  # (B, H/P, N, d)
    return _heads_to_seq(out, world_size, group)  # (B, H, n, d)
# --8<-- [end:ulysses]


# --8<-- [start:allgather]
def allgather_kv_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    key_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    layout: str = "contiguous",
    scale: float | None = None,
    group: dist.ProcessGroup | None = None,
) -> torch.Tensor:
    """Gather every rank's keys and values, attend this rank's queries to all.

    The gather's backward sums every rank's gradient for a key/value shard
    back onto the rank that owns it.
    """
    rank, world_size = _world(group)
    _check_shards(q, k, v, key_mask, layout, scale)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    mask = key_mask
    if world_size > 1:
        kv = _AllGather.apply(
            torch.stack([k, v]), group
        )  # (P, 2, B, H, n, d), one collective
        k, v = unshard_sequence(list(kv.unbind(0)), layout, dim=-2)  # 2 x (B, H, N, d)
        masks = _gather_mask(key_mask, world_size, group)
        mask = (
            None if masks is None else unshard_sequence(masks, layout, dim=1)
        )  # (B, N)
    q_pos = shard_positions(q.shape[2], rank, world_size, layout)
    return _local_attention(
        q, k, v, q_pos, torch.arange(k.shape[2]), mask, is_causal, scale
    )
# --8<-- [end:allgather]
