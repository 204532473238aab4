"""Linear attention: a positive feature map in place of softmax, and the kernel trick.

Paper: Katharopoulos, Vyas, Pappas and Fleuret (2020), "Transformers are RNNs:
Fast Autoregressive Transformers with Linear Attention", arXiv:2006.16236
(feature map phi(x) = elu(x) + 1, equations (4)-(6) and the recurrent form of
section 3.4).
Page: docs/efficiency/linear-attention.md
Tested against: the quadratic form phi(Q) phi(K)^T (masked, row-normalised)
times V, written out independently in tests/test_linear_attention.py, and the
token-by-token ``linear_attention_step`` against the parallel causal form.

This is NOT softmax attention: the weights phi(q_i) . phi(k_j) / sum_j(...) are
a different, smoother similarity, so a model must be trained with it; swapping
it into a softmax-trained model changes the model.

``phi``, ``kernel_trick``, ``causal_prefix_sums`` and ``recurrent_step`` are
the kernels the page shows; the public functions check their arguments, keep
sums in float32 for half-precision inputs, and call them.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["feature_map", "linear_attention", "linear_attention_step"]


# --8<-- [start:feature_map]
def phi(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = elu(x) + 1: positive everywhere, so every weight is > 0."""
    return F.elu(x) + 1.0  # elementwise, (..., d) -> (..., d)
# --8<-- [end:feature_map]


# --8<-- [start:forward]
def kernel_trick(q, k, v, eps: float) -> torch.Tensor:
    """phi(Q) (phi(K)^T V) / phi(Q) (phi(K)^T 1): O(N d d_v), no N x M matrix."""
    phi_q, phi_k = phi(q), phi(k)  # (B, H, N, d), (B, H, M, d)
    s = phi_k.mT @ v  # (B, H, d, M) @ (B, H, M, d_v) -> (B, H, d, d_v)
    z = phi_k.sum(dim=-2)  # (B, H, M, d) -> (B, H, d)
    num = phi_q @ s  # (B, H, N, d) @ (B, H, d, d_v) -> (B, H, N, d_v)
    den = phi_q @ z.unsqueeze(-1)  # (B, H, N, d) @ (B, H, d, 1) -> (B, H, N, 1)
    return num / (den + eps)
# --8<-- [end:forward]


# --8<-- [start:causal]
def causal_prefix_sums(q, k, v, eps: float) -> torch.Tensor:
    """S_t, z_t for every t at once by cumulative sums; query i reads t = i + M - N."""
    n, m = q.shape[-2], k.shape[-2]
    phi_q, phi_k = phi(q), phi(k)  # (B, H, N, d), (B, H, M, d)
    # (B, H, M, d, 1) * (B, H, M, 1, d_v) -> (B, H, M, d, d_v), summed up to each key
    s = (phi_k.unsqueeze(-1) * v.unsqueeze(-2)).cumsum(dim=-3)[..., m - n :, :, :]
    z = phi_k.cumsum(dim=-2)[..., m - n :, :]  # (B, H, M, d) -> (B, H, N, d)
    # (B, H, N, 1, d) @ (B, H, N, d, d_v) -> (B, H, N, d_v)
    num = (phi_q.unsqueeze(-2) @ s).squeeze(-2)
    den = (phi_q * z).sum(dim=-1, keepdim=True)  # (B, H, N, d) -> (B, H, N, 1)
    return num / (den + eps)
# --8<-- [end:causal]


# --8<-- [start:step]
def recurrent_step(q, k, v, s, z, eps: float):
    """S_t = S_{t-1} + phi(k_t) v_t^T, z_t = z_{t-1} + phi(k_t), then read with q_t."""
    phi_q, phi_k = phi(q), phi(k)  # (B, H, d)
    s = s + phi_k.unsqueeze(-1) * v.unsqueeze(-2)  # (B, H, d, 1) * (B, H, 1, d_v)
    z = z + phi_k  # (B, H, d)
    num = (phi_q.unsqueeze(-2) @ s).squeeze(-2)  # (B, H, 1, d) @ (B, H, d, d_v)
    den = (phi_q * z).sum(dim=-1, keepdim=True)  # (B, H, d) -> (B, H, 1)
    return num / (den + eps), s, z  # out_t (B, H, d_v), S_t, z_t
# --8<-- [end:step]


# --8<-- [start:face]
def _accumulator(dtype: torch.dtype) -> torch.dtype:
    """float32 for half precision: the state is a long sum that overflows float16."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def feature_map(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = elu(x) + 1, the feature map of Katharopoulos et al.

    Shape:
        Elementwise: ``(..., d)`` -> ``(..., d)``.
    """
    if not (isinstance(x, torch.Tensor) and x.is_floating_point()):
        raise TypeError(f"x must be a floating tensor, got {getattr(x, 'dtype', x)!r}")
    return phi(x)


def linear_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    eps: float = 1e-6,
) -> torch.Tensor:
    """phi(Q) (phi(K)^T V), normalised by phi(Q) (phi(K)^T 1): O(N d d_v), not O(N M d).

    Args:
        q: queries, ``(B, H, N, d)``.
        k: keys, ``(B, H, M, d)``.
        v: values, ``(B, H, M, d_v)``.
        causal: query ``i`` sees keys ``j <= i + (M - N)`` (lower-right aligned,
            so N < M means the queries are the last N positions; N <= M).
            Computed with cumulative sums over the keys.
        eps: added to the normaliser (it is positive already; eps guards
            against underflow).

    Returns:
        ``(B, H, N, d_v)`` in q's dtype; the sums run in float32 for
        half-precision inputs.

    Shape:
        Any leading dimensions, the same for q, k and v.
    """
    _check_phi(q, k, v, eps, causal)
    acc = _accumulator(q.dtype)
    form = causal_prefix_sums if causal else kernel_trick
    return form(q.to(acc), k.to(acc), v.to(acc), eps).to(q.dtype)  # (B, H, N, d_v)


def linear_attention_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    state: tuple[torch.Tensor, torch.Tensor] | None = None,
    *,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """One decoding step of causal linear attention: an RNN with a (d, d_v) state.

    Args:
        q: the new token's query, ``(B, H, d)``.
        k: its key, ``(B, H, d)``.
        v: its value, ``(B, H, d_v)``.
        state: ``(S, z)`` from the previous step, ``(B, H, d, d_v)`` and
            ``(B, H, d)``; ``None`` before the first token.
        eps: added to the normaliser, as in ``linear_attention``.

    Returns:
        ``(out, (S, z))``: ``out`` is ``(B, H, d_v)`` in q's dtype; the new
        state (float32 for half-precision inputs) has the same shapes whatever
        the step, which is the point: memory does not grow with the sequence as
        a KV cache does.
    """
    _check_phi(q, k, v, eps, rank=1, state=state)
    acc = _accumulator(q.dtype)
    if state is None:  # S = 0 (B, H, d, d_v), z = 0 (B, H, d)
        s, z = (*k.shape, v.shape[-1]), k.shape
        state = k.new_zeros(s, dtype=acc), k.new_zeros(z, dtype=acc)
    out, s, z = recurrent_step(q.to(acc), k.to(acc), v.to(acc), *state, eps)
    return out.to(q.dtype), (s, z)
# --8<-- [end:face]


# --8<-- [start:checks]
def _check_phi(q, k, v, eps, causal=False, rank=2, state=None) -> None:
    """q (..., N, d), k (..., M, d), v (..., M, d_v) of q's floating dtype and device,
    one leading shape, N <= M if causal; for one step (rank 1) no N or M axis."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        ok = isinstance(t, torch.Tensor) and t.is_floating_point() and t.ndim >= rank
        got = (t.dtype, t.device, tuple(t.shape)) if isinstance(t, torch.Tensor) else t
        if not ok or got[:2] != (q.dtype, q.device):
            raise TypeError(f"{name} must be floating, {rank}+ dims like q, got {got}")
    if q.shape[-1] != k.shape[-1] or q.shape[:-rank] != k.shape[:-rank] \
            or v.shape[:-1] != k.shape[:-1] or causal and q.shape[-2] > k.shape[-2]:
        got = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        raise ValueError(f"q must be (..., N, d), k (..., M, d), v (..., M, d_v) (one "
                         f"step: no N, M), N <= M if causal; got {got}")
    if not (isinstance(eps, (int, float)) and eps >= 0):
        raise ValueError(f"eps must be a float >= 0, got {eps!r}")
    acc = _accumulator(q.dtype)
    want = [((*k.shape, v.shape[-1]), acc, q.device), (tuple(k.shape), acc, q.device)]
    got = [(tuple(t.shape), t.dtype, t.device) if isinstance(t, torch.Tensor) else t
           for t in state] if isinstance(state, (tuple, list)) else state
    if state is not None and got != want:
        raise ValueError(f"state must be (S, z) with {want}, got {got}")
# --8<-- [end:checks]
