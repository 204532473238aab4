"""The Transformer block: attention and a feed-forward MLP, each in a residual.

Papers: Vaswani, Shazeer, Parmar, Uszkoreit, Jones, Gomez, Kaiser and Polosukhin
(2017), "Attention Is All You Need", arXiv:1706.03762, section 3.1 (post-norm,
ReLU); Xiong, Yang, He, Zheng, Zheng, Xing, Zhang, Lan, Wang and Liu (2020),
"On Layer Normalization in the Transformer Architecture", arXiv:2002.04745
(pre-norm).
Page: docs/architecture/transformer-block.md
Tested against: torch.nn.TransformerEncoderLayer(batch_first=True) with its
weights copied in (tests/test_block.py).

The block receives its attention module instead of importing one, so this file
runs alone. The module is called as ``attention(x, attn_mask=..., key_mask=...,
is_causal=...)`` and must return a tuple whose first element is ``(B, N, D)``;
masks follow its convention (for the guide's MultiHeadAttention: a boolean mask
is True = may attend, ``key_mask`` is True = real token).

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["TransformerBlock", "TorchAttention"]

_ACTIVATIONS = {"gelu": F.gelu, "relu": F.relu}
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


# --8<-- [start:validate]
def _check_arch_arg(ok, name: str, value: object, want: str, error=ValueError) -> None:
    """Raise ``error`` naming the argument, what it must be and what it got."""
    if not ok:  # a module's repr runs to many lines: its first 60 characters
        raise error(f"{name} must be {want}, got {value!r:.60}")


def _check_arch_tensor(name, t, shape, like, dtypes=None, broadcast=False) -> None:
    """Raise unless t is a tensor of ``shape``, a dtype in ``dtypes``, on like's device.

    A letter in ``shape`` takes any size. ``dtypes=None`` asks for like's dtype
    (any floating dtype under autocast). With ``broadcast``, t may drop leading
    dimensions (two stay) and hold 1 anywhere: a mask over (B, H, N, M) scores.
    """
    kind = like.device.type  # under autocast, any floating dtype unless dtypes given
    amp = torch.amp.is_autocast_available(kind) and torch.is_autocast_enabled(kind)
    dtypes = dtypes or (_FLOATS if amp else (like.dtype,))
    got = (t.dtype, t.device) if isinstance(t, torch.Tensor) else type(t).__name__
    if got not in [(dtype, like.device) for dtype in dtypes]:
        raise TypeError(f"{name} must be a {dtypes} tensor on {like.device}, got {got}")
    fits = (2 if broadcast else len(shape)) <= t.dim() <= len(shape) and all(
        isinstance(w, str) or s == w or (broadcast and s == 1)
        for s, w in zip(reversed(t.shape), reversed(shape)))
    if not fits:
        how = "broadcast to" if broadcast else "have shape"
        want = "(" + ", ".join(map(str, shape)) + ")"
        raise ValueError(f"{name} must {how} {want}, got {tuple(t.shape)}")
# --8<-- [end:validate]


def _activation_name(act: object) -> str | None:
    """"relu" or "gelu" for what a PyTorch Transformer layer computes, else None."""
    if act is F.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is F.gelu or (isinstance(act, nn.GELU) and act.approximate == "none"):
        return "gelu"
    return None  # tanh-approximate GELU, SiLU, ...: not what the block computes


# --8<-- [start:torch_attention]
class TorchAttention(nn.Module):
    """``nn.MultiheadAttention`` behind the call the block makes.

    The guide's masks say True = may attend; ``nn.MultiheadAttention`` says
    True = blocked. This adapter flips them, so a block built by
    ``TransformerBlock.from_torch(layer)`` runs PyTorch's own attention.

    Args:
        mha: a ``batch_first=True`` ``nn.MultiheadAttention``.

    Shape:
        ``x`` is ``(B, N, D)``; ``attn_mask`` is ``(N, N)`` (bool, True = may
        attend, or float, added); ``key_mask`` is ``(B, N)``, True = real token.
    """

    def __init__(self, mha: nn.MultiheadAttention) -> None:
        super().__init__()
        _check_arch_arg(mha.batch_first, "mha.batch_first", mha.batch_first, "True")
        self.mha = mha

    def forward(
        self,
        x: Tensor,
        *,
        attn_mask: Tensor | None = None,
        key_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> tuple[Tensor, None]:
        """nn.MultiheadAttention on x, the guide's masks flipped to True = blocked."""
        d_model, weight = self.mha.embed_dim, self.mha.out_proj.weight
        _check_arch_tensor("x", x, ("B", "N", d_model), weight)
        b, n, _ = x.shape
        if attn_mask is not None:  # bool (True = may attend) or added to the scores
            _check_arch_tensor("attn_mask", attn_mask, (n, n), x, (torch.bool, x.dtype))
        if key_mask is not None:  # True = real token
            _check_arch_tensor("key_mask", key_mask, (b, n), x, (torch.bool,))
        blocked = None
        if attn_mask is not None:  # flip the polarity of a boolean mask
            blocked = ~attn_mask if attn_mask.dtype == torch.bool else attn_mask
        if is_causal:  # (N, N), True = blocked
            future = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
            if blocked is None or blocked.dtype == torch.bool:
                blocked = future if blocked is None else blocked | future
            else:
                blocked = blocked.masked_fill(future, float("-inf"))
        padding = None if key_mask is None else ~key_mask  # (B, N), True = padded
        out, _ = self.mha(
            x, x, x, attn_mask=blocked, key_padding_mask=padding, need_weights=False
        )
        return out, None

# --8<-- [end:torch_attention]


# --8<-- [start:init]
class TransformerBlock(nn.Module):
    """One encoder-style block: self-attention, then a position-wise MLP.

    Args:
        attention: the self-attention module (e.g. the guide's MultiHeadAttention).
        d_model: D, the width of the tokens.
        d_ff: the hidden width of the MLP (commonly 4 * D).
        dropout: dropout on the MLP hidden layer and on both residual branches.
        activation: ``"gelu"`` or ``"relu"``.
        norm_first: True for pre-norm, False for the original post-norm.
        layer_norm_eps: the LayerNorm epsilon.
        bias: give the MLP and the LayerNorms a bias.

    Calling the block: ``block(x, *, attn_mask=None, key_mask=None,
    is_causal=False)``; the three masks go to the attention module unchanged.

    Shape:
        ``(B, N, D)`` -> ``(B, N, D)``.
    """

    def __init__(
        self,
        attention: nn.Module,
        d_model: int,
        d_ff: int,
        *,
        dropout: float = 0.1,
        activation: str = "gelu",
        norm_first: bool = True,
        layer_norm_eps: float = 1e-5,
        bias: bool = True,
    ) -> None:
        super().__init__()
        for name, size in (("d_model", d_model), ("d_ff", d_ff)):
            _check_arch_arg(size > 0, name, size, "an int > 0")
        _check_arch_arg(isinstance(dropout, (int, float)) and 0 <= dropout < 1,
                        "dropout", dropout, "a float in [0, 1)")
        _check_arch_arg(activation in _ACTIVATIONS, "activation", activation,
                        f"one of {sorted(_ACTIVATIONS)}")
        eps = layer_norm_eps
        _check_arch_arg(isinstance(eps, (int, float)) and eps > 0, "layer_norm_eps",
                        eps, "a float > 0")
        self.d_model = d_model
        self.norm_first = norm_first
        self.activation_name = activation
        self.activation = _ACTIVATIONS[activation]
        self.attention = attention
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)  # D -> d_ff
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)  # d_ff -> D
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout = nn.Dropout(dropout)  # inside the MLP, after the activation
        self.dropout1 = nn.Dropout(dropout)  # on the attention branch
        self.dropout2 = nn.Dropout(dropout)  # on the MLP branch
    # --8<-- [end:init]

    # --8<-- [start:branches]
    def _attention_branch(self, x: Tensor, **masks) -> Tensor:
        """Dropout(Attn(x)), the masks passed through."""
        return self.dropout1(self.attention(x, **masks)[0])  # (B, N, D)

    def _mlp_branch(self, x: Tensor) -> Tensor:
        """Dropout(W_2 Dropout(act(W_1 x + b_1)) + b_2)."""
        hidden = self.dropout(self.activation(self.linear1(x)))  # (B, N, d_ff)
        return self.dropout2(self.linear2(hidden))  # (B, N, d_ff) -> (B, N, D)
    # --8<-- [end:branches]

    # --8<-- [start:forward]
    def forward(
        self, x: Tensor, *, attn_mask: Tensor | None = None,
        key_mask: Tensor | None = None, is_causal: bool = False,
    ) -> Tensor:
        """Pre-norm: x + Attn(LN(x)), then + MLP(LN(x)); post-norm: LN(x + ...)."""
        _check_arch_tensor("x", x, ("B", "N", self.d_model), self.linear1.weight)
        masks = dict(attn_mask=attn_mask, key_mask=key_mask, is_causal=is_causal)
        if self.norm_first:
            # Pre-norm: the residual stream x is never normalised, so the
            # identity path carries gradients straight through every block.
            x = x + self._attention_branch(self.norm1(x), **masks)
            x = x + self._mlp_branch(self.norm2(x))
        else:  # post-norm (2017): normalise after each residual sum
            x = self.norm1(x + self._attention_branch(x, **masks))
            x = self.norm2(x + self._mlp_branch(x))
        return x  # (B, N, D)
    # --8<-- [end:forward]

    # --8<-- [start:from_torch]
    @classmethod
    def from_torch(
        cls, layer: nn.TransformerEncoderLayer, attention: nn.Module | None = None
    ) -> TransformerBlock:
        """Copy the norms and the MLP of ``nn.TransformerEncoderLayer``.

        Pass the attention to use, typically the guide's
        ``MultiHeadAttention.from_torch(layer.self_attn)``; without one, the
        block runs a copy of the layer's own ``self_attn`` through
        ``TorchAttention``. The layer must be ``batch_first=True`` for the two
        to take the same inputs.

        Args:
            layer: the layer to copy (activation ReLU or GELU).
            attention: the attention module the block will call, or ``None``.

        Returns:
            A ``TransformerBlock`` on the layer's device and dtype.
        """
        is_layer = isinstance(layer, nn.TransformerEncoderLayer)
        want = "an nn.TransformerEncoderLayer"
        _check_arch_arg(is_layer, "layer", layer, want, TypeError)
        name = _activation_name(layer.activation)
        _check_arch_arg(name is not None, "layer.activation", layer.activation,
                        "ReLU or exact GELU")
        if attention is None:
            attention = TorchAttention(copy.deepcopy(layer.self_attn))
        ref = layer.linear1.weight
        new = cls(
            attention,
            layer.linear1.in_features,
            layer.linear1.out_features,
            dropout=layer.dropout.p,
            activation=name,
            norm_first=layer.norm_first,
            layer_norm_eps=layer.norm1.eps,
            bias=layer.linear1.bias is not None,
        ).to(device=ref.device, dtype=ref.dtype)
        for part in ("linear1", "linear2", "norm1", "norm2"):
            getattr(new, part).load_state_dict(getattr(layer, part).state_dict())
        return new.train(layer.training)
    # --8<-- [end:from_torch]
