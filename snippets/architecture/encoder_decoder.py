"""The Transformer encoder-decoder: an encoder stack, a decoder stack, cross-attention.

Paper: Vaswani, Shazeer, Parmar, Uszkoreit, Jones, Gomez, Kaiser and Polosukhin
(2017), "Attention Is All You Need", arXiv:1706.03762, section 3.1 and figure 1
(post-norm); Xiong, Yang, He, Zheng, Zheng, Xing, Zhang, Lan, Wang and Liu (2020),
"On Layer Normalization in the Transformer Architecture", arXiv:2002.04745
(pre-norm).
Page: docs/architecture/encoder-decoder.md
Tested against: torch.nn.Transformer(batch_first=True) in eval mode with its
weights copied in, both ``norm_first`` settings (tests/test_encoder_decoder.py).

Nothing here imports a sibling file: the encoder receives its blocks, each
decoder block receives its two attention modules. An attention module is called
as ``attention(query, key, value, attn_mask=..., key_mask=..., is_causal=...)``
and returns a tuple whose first element is ``(B, N, D)``; an encoder block is
called as ``block(x, attn_mask=..., key_mask=...)`` and returns ``(B, M, D)``.
The guide's MultiHeadAttention and TransformerBlock fit both.

Mask convention: a boolean mask is True where a query MAY attend; ``*_key_mask``
arguments are ``(B, length)`` and True marks a real (not padded) token, the
opposite of ``nn.Transformer``'s ``*_key_padding_mask``.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Encoder", "DecoderBlock", "Decoder", "EncoderDecoder"]

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


def _n_heads(module: nn.Module) -> int | str:
    """The head count of the first module inside ``module`` with one, else "H"."""
    for part in module.modules():
        if isinstance(getattr(part, "n_heads", None), int):
            return part.n_heads
    return "H"


class Encoder(nn.Module):
    """A stack of encoder blocks, then an optional final LayerNorm.

    ``nn.Transformer`` always ends its encoder with a LayerNorm, whether its
    blocks are pre-norm (where the last residual sum is otherwise never
    normalised) or post-norm (where it is a second, harmless normalisation).

    Args:
        layers: the blocks, applied in order (e.g. the guide's TransformerBlock).
        norm: the final normalisation, or None.

    Shape:
        ``(B, M, D)`` -> ``(B, M, D)``: the "memory" the decoder attends to.
    """

    def __init__(
        self, layers: Sequence[nn.Module], *, norm: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)  # refuses anything but modules
        _check_arch_arg(len(self.layers) > 0, "layers", layers, "a non-empty list")
        self.norm = norm

    def forward(
        self,
        src: torch.Tensor,
        *,
        attn_mask: torch.Tensor | None = None,
        key_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Encode the source.

        Args:
            src: embedded source tokens, ``(B, M, D)``.
            attn_mask: a mask over ``(M, M)`` passed to every block, or None.
            key_mask: ``(B, M)`` boolean, True = real source token.

        Returns:
            The memory, ``(B, M, D)``.
        """
        d_model = getattr(self.layers[0], "d_model", "D")
        weight = next(self.parameters(), src)
        _check_arch_tensor("src", src, ("B", "M", d_model), weight)
        b, m, _ = src.shape
        if attn_mask is not None:  # bool (True = may attend) or added to the scores
            scores, kinds = (b, _n_heads(self), m, m), (torch.bool, src.dtype)
            _check_arch_tensor("attn_mask", attn_mask, scores, src, kinds, True)
        if key_mask is not None:
            _check_arch_tensor("key_mask", key_mask, (b, m), src, (torch.bool,))
        # --8<-- [start:encode]
        x = src
        for layer in self.layers:
            x = layer(x, attn_mask=attn_mask, key_mask=key_mask)  # (B, M, D)
        return x if self.norm is None else self.norm(x)
        # --8<-- [end:encode]


class DecoderBlock(nn.Module):
    """Causal self-attention, cross-attention into the memory, then an MLP.

    Args:
        self_attention: attends from the target to itself (called with the
            causal flag).
        cross_attention: attends from the target (queries) to the memory
            (keys and values).
        d_model: D, the width of the tokens.
        d_ff: the hidden width of the MLP (commonly 4 * D).
        dropout: dropout on the MLP hidden layer and on all three residual branches.
        activation: ``"gelu"`` or ``"relu"`` (the 2017 paper used ReLU).
        norm_first: True for pre-norm, False for the original post-norm.
        layer_norm_eps: the LayerNorm epsilon.
        bias: give the MLP and the LayerNorms a bias.

    Shape:
        target ``(B, N, D)`` and memory ``(B, M, D)`` -> ``(B, N, D)``.
    """

    def __init__(
        self,
        self_attention: nn.Module,
        cross_attention: nn.Module,
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
        _check_arch_arg(self_attention is not cross_attention, "cross_attention",
                        "the same module twice", "a second module (its own weights)")
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

        self.self_attention = self_attention
        self.cross_attention = cross_attention
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)  # D -> d_ff
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)  # d_ff -> D
        self.norm1 = nn.LayerNorm(
            d_model, eps=layer_norm_eps, bias=bias
        )  # around self-attention
        self.norm2 = nn.LayerNorm(
            d_model, eps=layer_norm_eps, bias=bias
        )  # around cross-attention
        self.norm3 = nn.LayerNorm(
            d_model, eps=layer_norm_eps, bias=bias
        )  # around the MLP
        self.dropout = nn.Dropout(dropout)  # inside the MLP, after the activation
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    # --8<-- [start:branches]
    def _self_branch(self, x, attn_mask, key_mask, is_causal):
        out = self.self_attention(
            x, attn_mask=attn_mask, key_mask=key_mask, is_causal=is_causal
        )[0]
        return self.dropout1(out)  # (B, N, D)

    def _cross_branch(self, x, memory, memory_mask, memory_key_mask):
        # Queries come from the target, keys and values from the encoder's memory.
        out = self.cross_attention(
            x, memory, memory, attn_mask=memory_mask, key_mask=memory_key_mask
        )[0]
        return self.dropout2(out)  # (B, N, D) attending over (B, M, D) -> (B, N, D)

    def _mlp_branch(self, x):
        hidden = self.dropout(
            self.activation(self.linear1(x))
        )  # (B, N, D) -> (B, N, d_ff)
        return self.dropout3(self.linear2(hidden))  # (B, N, d_ff) -> (B, N, D)

    # --8<-- [end:branches]

    def forward(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        *,
        attn_mask: torch.Tensor | None = None,
        key_mask: torch.Tensor | None = None,
        is_causal: bool = True,
        memory_mask: torch.Tensor | None = None,
        memory_key_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Apply the block.

        Args:
            tgt: the target so far, ``(B, N, D)``.
            memory: the encoder output, ``(B, M, D)``.
            attn_mask: an extra mask over ``(N, N)`` for the self-attention.
            key_mask: ``(B, N)`` boolean, True = real target token.
            is_causal: mask future target positions (True for a decoder).
            memory_mask: a mask over ``(N, M)`` for the cross-attention.
            memory_key_mask: ``(B, M)`` boolean, True = real source token.

        Returns:
            ``(B, N, D)``.
        """
        weight = self.linear1.weight
        _check_arch_tensor("memory", memory, ("B", "M", self.d_model), weight)
        b, m, _ = memory.shape
        _check_arch_tensor("tgt", tgt, (b, "N", self.d_model), weight)
        n = tgt.shape[1]
        heads = (_n_heads(self.self_attention), _n_heads(self.cross_attention))
        for name, mask, shape in (
            ("attn_mask", attn_mask, (b, heads[0], n, n)),
            ("memory_mask", memory_mask, (b, heads[1], n, m)),
        ):
            if mask is not None:  # bool (True = may attend) or added to the scores
                kinds = (torch.bool, tgt.dtype)
                _check_arch_tensor(name, mask, shape, tgt, kinds, True)
        for name, mask, shape in (("key_mask", key_mask, (b, n)),
                                  ("memory_key_mask", memory_key_mask, (b, m))):
            if mask is not None:
                _check_arch_tensor(name, mask, shape, tgt, (torch.bool,))
        self_masks = dict(attn_mask=attn_mask, key_mask=key_mask, is_causal=is_causal)
        cross_masks = dict(memory_mask=memory_mask, memory_key_mask=memory_key_mask)
        # --8<-- [start:block]
        x = tgt
        if self.norm_first:
            # Pre-norm: normalise each branch's input; the residual stream stays raw.
            x = x + self._self_branch(self.norm1(x), **self_masks)
            x = x + self._cross_branch(self.norm2(x), memory, **cross_masks)
            x = x + self._mlp_branch(self.norm3(x))
        else:
            # Post-norm (2017): normalise after each residual sum.
            x = self.norm1(x + self._self_branch(x, **self_masks))
            x = self.norm2(x + self._cross_branch(x, memory, **cross_masks))
            x = self.norm3(x + self._mlp_branch(x))
        return x  # (B, N, D)
        # --8<-- [end:block]

    @classmethod
    def from_torch(
        cls,
        layer: nn.TransformerDecoderLayer,
        self_attention: nn.Module,
        cross_attention: nn.Module,
    ) -> "DecoderBlock":
        """Copy the norms and the MLP of ``nn.TransformerDecoderLayer``.

        The attentions are not copied here: pass equivalent modules, typically
        ``MultiHeadAttention.from_torch(layer.self_attn)`` and
        ``MultiHeadAttention.from_torch(layer.multihead_attn)``.

        Args:
            layer: the layer to copy (``batch_first=True``, ReLU or exact GELU).
            self_attention: the module standing for ``layer.self_attn``.
            cross_attention: the module standing for ``layer.multihead_attn``.

        Returns:
            A ``DecoderBlock`` on the layer's device and dtype.
        """
        is_layer = isinstance(layer, nn.TransformerDecoderLayer)
        want = "an nn.TransformerDecoderLayer"
        _check_arch_arg(is_layer, "layer", layer, want, TypeError)
        name = _activation_name(layer.activation)
        _check_arch_arg(name is not None, "layer.activation", layer.activation,
                        "ReLU or exact GELU")
        ref = layer.linear1.weight
        new = cls(
            self_attention,
            cross_attention,
            layer.linear1.in_features,
            layer.linear1.out_features,
            dropout=layer.dropout.p,
            activation=name,
            norm_first=layer.norm_first,
            layer_norm_eps=layer.norm1.eps,
            bias=layer.linear1.bias is not None,
        ).to(device=ref.device, dtype=ref.dtype)
        for part in ("linear1", "linear2", "norm1", "norm2", "norm3"):
            getattr(new, part).load_state_dict(getattr(layer, part).state_dict())
        return new.train(layer.training)


class Decoder(nn.Module):
    """A stack of decoder blocks, then an optional final LayerNorm.

    Args:
        layers: the ``DecoderBlock`` modules, applied in order.
        norm: the final normalisation, or None.

    Shape:
        target ``(B, N, D)`` and memory ``(B, M, D)`` -> ``(B, N, D)``.
    """

    def __init__(
        self, layers: Sequence[nn.Module], *, norm: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)  # refuses anything but modules
        _check_arch_arg(len(self.layers) > 0, "layers", layers, "a non-empty list")
        self.norm = norm

    def forward(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        *,
        attn_mask: torch.Tensor | None = None,
        key_mask: torch.Tensor | None = None,
        is_causal: bool = True,
        memory_mask: torch.Tensor | None = None,
        memory_key_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Decode: every block sees the same memory (arguments as in DecoderBlock)."""
        # --8<-- [start:decode]
        x = tgt
        for layer in self.layers:
            x = layer(
                x,
                memory,
                attn_mask=attn_mask,
                key_mask=key_mask,
                is_causal=is_causal,
                memory_mask=memory_mask,
                memory_key_mask=memory_key_mask,
            )  # (B, N, D)
        return x if self.norm is None else self.norm(x)
        # --8<-- [end:decode]


class EncoderDecoder(nn.Module):
    """Encoder and decoder wired together, as ``nn.Transformer`` (batch-first).

    Takes embedded sequences and returns the decoder's hidden states; token
    embeddings, positions and the output projection stay outside, as in
    ``nn.Transformer``.

    Args:
        encoder: an ``Encoder``.
        decoder: a ``Decoder``.

    Shape:
        source ``(B, M, D)`` and target ``(B, N, D)`` -> ``(B, N, D)``.
    """

    def __init__(self, encoder: nn.Module, decoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        *,
        src_key_mask: torch.Tensor | None = None,
        tgt_key_mask: torch.Tensor | None = None,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        tgt_is_causal: bool = True,
    ) -> torch.Tensor:
        """Encode ``src`` once, then decode ``tgt`` against it.

        Args:
            src: embedded source, ``(B, M, D)``.
            tgt: embedded target (shifted right when training), ``(B, N, D)``.
            src_key_mask: ``(B, M)`` boolean, True = real source token. It masks
                the encoder's self-attention AND the decoder's cross-attention:
                a padded source position is never attended to.
            tgt_key_mask: ``(B, N)`` boolean, True = real target token.
            src_mask: an extra ``(M, M)`` mask for the encoder.
            tgt_mask: an extra ``(N, N)`` mask for the decoder's self-attention.
            memory_mask: an extra ``(N, M)`` mask for the cross-attention.
            tgt_is_causal: apply the causal mask in the decoder.

        Returns:
            ``(B, N, D)``.
        """
        _check_arch_tensor("src", src, ("B", "M", "D"), next(self.parameters(), src))
        h_enc, h_dec = _n_heads(self.encoder), _n_heads(self.decoder)
        b, m, d = src.shape
        _check_arch_tensor("tgt", tgt, (b, "N", d), src)
        n = tgt.shape[1]
        for name, mask, shape in (
            ("src_mask", src_mask, (b, h_enc, m, m)),
            ("tgt_mask", tgt_mask, (b, h_dec, n, n)),
            ("memory_mask", memory_mask, (b, h_dec, n, m)),
        ):
            if mask is not None:  # bool (True = may attend) or added to the scores
                kinds = (torch.bool, src.dtype)
                _check_arch_tensor(name, mask, shape, src, kinds, True)
        for name, mask, shape in (("src_key_mask", src_key_mask, (b, m)),
                                  ("tgt_key_mask", tgt_key_mask, (b, n))):
            if mask is not None:
                _check_arch_tensor(name, mask, shape, src, (torch.bool,))
        # --8<-- [start:encode_decode]
        memory = self.encoder(
            src, attn_mask=src_mask, key_mask=src_key_mask
        )  # (B, M, D)
        return self.decoder(
            tgt,
            memory,
            attn_mask=tgt_mask,
            key_mask=tgt_key_mask,
            is_causal=tgt_is_causal,
            memory_mask=memory_mask,
            memory_key_mask=src_key_mask,
        )  # (B, N, D)
        # --8<-- [end:encode_decode]

    @classmethod
    def from_torch(
        cls,
        transformer: nn.Transformer,
        *,
        attention: Callable[[nn.MultiheadAttention], nn.Module],
        encoder_layer: Callable[[nn.TransformerEncoderLayer, nn.Module], nn.Module],
    ) -> "EncoderDecoder":
        """Copy a batch-first ``nn.Transformer``, weights and all.

        Args:
            transformer: the model to copy; it must have ``batch_first=True``.
            attention: turns an ``nn.MultiheadAttention`` into the module to use,
                e.g. ``MultiHeadAttention.from_torch``.
            encoder_layer: turns an ``nn.TransformerEncoderLayer`` and its new
                attention into an encoder block, e.g. ``TransformerBlock.from_torch``.

        Returns:
            An ``EncoderDecoder`` that computes what ``transformer`` computes.
        """
        first = transformer.batch_first
        _check_arch_arg(first, "transformer.batch_first", first, "True")
        enc, dec = transformer.encoder, transformer.decoder
        encoder = Encoder(
            [encoder_layer(layer, attention(layer.self_attn)) for layer in enc.layers],
            norm=None if enc.norm is None else _copy_norm(enc.norm),
        )
        decoder = Decoder(
            [
                DecoderBlock.from_torch(
                    layer, attention(layer.self_attn), attention(layer.multihead_attn)
                )
                for layer in dec.layers
            ],
            norm=None if dec.norm is None else _copy_norm(dec.norm),
        )
        return cls(encoder, decoder).train(transformer.training)


def _copy_norm(norm: nn.LayerNorm) -> nn.LayerNorm:
    """A fresh LayerNorm with the same shape, epsilon and weights."""
    ref = norm.weight
    new = nn.LayerNorm(norm.normalized_shape, eps=norm.eps, bias=norm.bias is not None)
    new = new.to(device=ref.device, dtype=ref.dtype)
    new.load_state_dict(norm.state_dict())
    return new
