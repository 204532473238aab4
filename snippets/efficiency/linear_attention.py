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

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["feature_map", "linear_attention", "linear_attention_step"]


# --8<-- [start:feature_map]
def feature_map(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = elu(x) + 1: positive everywhere, so every weight is > 0.

    Shape:
        Elementwise: ``(..., d)`` -> ``(..., d)``.
    """
    _check_floating("x", x)
    return F.elu(x) + 1.0
# --8<-- [end:feature_map]


# --8<-- [start:validate]
def _check_floating(name: str, t: torch.Tensor) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.is_floating_point():
        raise TypeError(f"{name} must have a floating dtype, got {t.dtype}")


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Raise a clear error unless q, k, v can be attended together."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must have a floating dtype, got {t.dtype}")
        if t.dim() < 2:
            raise ValueError(
                f"{name} must have at least 2 dimensions (..., length, width), "
                f"got shape {tuple(t.shape)}"
            )
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(
            f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}"
        )
    if not (q.device == k.device == v.device):
        raise ValueError(
            f"q, k and v must be on one device, got {q.device}, {k.device} "
            f"and {v.device}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same last dimension d, got q {tuple(q.shape)} "
            f"and k {tuple(k.shape)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same length M (dimension -2), got k "
            f"{tuple(k.shape)} and v {tuple(v.shape)}"
        )
    try:  # the leading (batch, head) dimensions pair up as in torch.matmul
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            "q, k and v must have leading (batch, head) dimensions that broadcast, "
            f"got q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)}"
        ) from None


def _check_linear_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, eps: float) -> None:
    """Raise a clear error unless q, k, v can be attended together and eps >= 0."""
    _check_qkv(q, k, v)
    _check_eps(eps)


def _check_eps(eps: float) -> None:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"eps must be a float >= 0, got {eps!r}")


def _check_step_inputs(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    state: tuple[torch.Tensor, torch.Tensor] | None,
    eps: float,
) -> None:
    """Raise a clear error unless q, k (..., d), v (..., d_v) and state make one step."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_floating(name, t)
        if t.dim() < 1:
            raise ValueError(f"{name} must have at least 1 dimension (..., width), got shape ()")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(
            f"q, k and v must be on one device, got {q.device}, {k.device} and {v.device}"
        )
    if q.shape != k.shape or v.shape[:-1] != k.shape[:-1]:
        raise ValueError(
            "q and k must have one shape (B, H, d) and v the same (B, H) with any width, "
            f"got q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
    _check_eps(eps)
    if state is None:
        return
    if not isinstance(state, (tuple, list)) or len(state) != 2 or not all(
        isinstance(t, torch.Tensor) for t in state
    ):
        got = type(state).__name__ if not isinstance(state, (tuple, list)) else [type(t).__name__ for t in state]
        raise TypeError(f"state must be None or a pair of tensors (S, z), got {got}")
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    for name, t in zip(("S", "z"), state):
        if t.dtype != acc or t.device != q.device:
            raise TypeError(
                f"state tensor {name} must have dtype {acc} on {q.device} (as the step "
                f"returns it), got {t.dtype} on {t.device}"
            )
# --8<-- [end:validate]


# --8<-- [start:forward]
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
            so N < M means the queries are the last N positions). Computed with
            cumulative sums over the keys.
        eps: added to the normaliser (it is positive already; eps guards
            against underflow).

    Returns:
        ``(B, H, N, d_v)``.

    Shape:
        Any leading dimensions work; ``(B, H, N, d)`` is the common case.
    """
    _check_linear_inputs(q, k, v, eps)
    n, m = q.shape[-2], k.shape[-2]
    if causal and n > m:
        raise ValueError(
            f"causal linear attention needs N <= M (q no longer than k: the queries are "
            f"the last N of the M positions), got N={n} and M={m}"
        )
    # Sums over many keys in float32 for half-precision inputs: the state grows
    # with the sequence and would overflow float16's 65504.
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    phi_q = feature_map(q.to(acc))  # (B, H, N, d)
    phi_k = feature_map(k.to(acc))  # (B, H, M, d)
    v = v.to(acc)

    if not causal:
        kv = phi_k.transpose(-2, -1) @ v  # (B, H, d, M) @ (B, H, M, d_v) -> (B, H, d, d_v)
        z = phi_k.sum(dim=-2)  # (B, H, M, d) -> (B, H, d)
        num = phi_q @ kv  # (B, H, N, d) @ (B, H, d, d_v) -> (B, H, N, d_v)
        den = phi_q @ z.unsqueeze(-1)  # (B, H, N, d) @ (B, H, d, 1) -> (B, H, N, 1)
        return (num / (den + eps)).to(q.dtype)  # (B, H, N, d_v)

    # Causal: the state after key t is S_t = sum_{j<=t} phi(k_j) v_j^T and
    # z_t = sum_{j<=t} phi(k_j); a prefix sum gives all of them at once.
    kv = phi_k.unsqueeze(-1) * v.unsqueeze(-2)  # (B, H, M, d, 1) * (B, H, M, 1, d_v) -> (B, H, M, d, d_v)
    s = kv.cumsum(dim=-3)[..., m - n :, :, :]  # (B, H, M, d, d_v) -> (B, H, N, d, d_v)
    z = phi_k.cumsum(dim=-2)[..., m - n :, :]  # (B, H, M, d) -> (B, H, N, d)
    num = (phi_q.unsqueeze(-2) @ s).squeeze(-2)  # (B, H, N, 1, d) @ (B, H, N, d, d_v) -> (B, H, N, d_v)
    den = (phi_q * z).sum(dim=-1, keepdim=True)  # (B, H, N, d) -> (B, H, N, 1)
    return (num / (den + eps)).to(q.dtype)  # (B, H, N, d_v)
# --8<-- [end:forward]


# --8<-- [start:step]
def linear_attention_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    state: tuple[torch.Tensor, torch.Tensor] | None = None,
    *,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """One decoding step of causal linear attention: an RNN with a (d, d_v) state.

    S_t = S_{t-1} + phi(k_t) v_t^T,  z_t = z_{t-1} + phi(k_t),
    out_t = phi(q_t)^T S_t / (phi(q_t)^T z_t + eps).

    Args:
        q: the new token's query, ``(B, H, d)``.
        k: its key, ``(B, H, d)``.
        v: its value, ``(B, H, d_v)``.
        state: ``(S, z)`` from the previous step, ``(B, H, d, d_v)`` and
            ``(B, H, d)``; ``None`` before the first token.
        eps: added to the normaliser, as in ``linear_attention``.

    Returns:
        ``(out, (S, z))``: ``out`` is ``(B, H, d_v)``; the new state has the
        same shapes whatever the step, which is the point: memory does not
        grow with the sequence as a KV cache does.
    """
    _check_step_inputs(q, k, v, state, eps)
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    phi_q = feature_map(q.to(acc))  # (B, H, d)
    phi_k = feature_map(k.to(acc))  # (B, H, d)
    if state is None:
        s = phi_k.new_zeros((*phi_k.shape, v.shape[-1]))  # (B, H, d, d_v)
        z = phi_k.new_zeros(phi_k.shape)  # (B, H, d)
    else:
        s, z = state
        if s.shape != (*phi_k.shape, v.shape[-1]) or z.shape != phi_k.shape:
            raise ValueError(
                f"state must be (S, z) with shapes {(*phi_k.shape, v.shape[-1])} and "
                f"{tuple(phi_k.shape)}, got {tuple(s.shape)} and {tuple(z.shape)}"
            )
    s = s + phi_k.unsqueeze(-1) * v.to(acc).unsqueeze(-2)  # (B, H, d, 1) * (B, H, 1, d_v) -> (B, H, d, d_v)
    z = z + phi_k  # (B, H, d)
    num = (phi_q.unsqueeze(-2) @ s).squeeze(-2)  # (B, H, 1, d) @ (B, H, d, d_v) -> (B, H, d_v)
    den = (phi_q * z).sum(dim=-1, keepdim=True)  # (B, H, d) -> (B, H, 1)
    return (num / (den + eps)).to(q.dtype), (s, z)
# --8<-- [end:step]
