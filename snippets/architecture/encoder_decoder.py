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

from collections.abc import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Encoder", "DecoderBlock", "Decoder", "EncoderDecoder"]

_ACTIVATIONS = {"gelu": F.gelu, "relu": F.relu}


# --8<-- [start:validate]
def _check_like_module(name: str, t: torch.Tensor, weight: torch.Tensor) -> None:
    """Raise unless t has the module's device (and, outside autocast, dtype)."""
    if t.device != weight.device:
        raise ValueError(
            f"{name} must be on the module's device {weight.device}, got {t.device}"
        )
    autocast = torch.amp.is_autocast_available(
        t.device.type
    ) and torch.is_autocast_enabled(t.device.type)
    if t.dtype != weight.dtype and not autocast:
        raise TypeError(
            f"{name} must have the module's dtype {weight.dtype}, got {t.dtype}"
        )


def _check_dropout(name: str, p: float) -> None:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise ValueError(f"{name} must be a float in [0, 1), got {p!r}")


def _check_positive_float(name: str, value: float) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 < value < float("inf")
    ):
        raise ValueError(f"{name} must be a finite float > 0, got {value!r}")


def _check_width(
    name: str, x: object, d_model: int | None, length: str, weight: torch.Tensor | None
) -> None:
    """Raise unless ``x`` is a floating (B, length, D) tensor like ``weight``."""
    if (
        not isinstance(x, torch.Tensor)
        or x.dim() != 3
        or x.shape[-1] != (d_model or x.shape[-1])
    ):
        got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(
            f"{name} must have shape (B, {length}, D) with D = {d_model or 'any'}, "
            f"got {got}"
        )
    if not x.is_floating_point():
        raise TypeError(f"{name} must have a floating dtype, got {x.dtype}")
    if weight is not None:
        _check_like_module(name, x, weight)


def _n_heads(module: nn.Module) -> int | None:
    """The head count (``n_heads``) of the first module inside ``module`` with one."""
    for part in module.modules():
        if isinstance(getattr(part, "n_heads", None), int):
            return part.n_heads
    return None


def _check_scores_mask(
    name: str,
    mask: object,
    b: int,
    n: int,
    m: int,
    like: torch.Tensor,
    h: int | None = None,
) -> None:
    """Raise unless mask is None or a bool / float mask over (B, H, N, M) scores.

    ``h`` is the head count when the attention module states one; a 3-D mask's
    leading dimension is then checked against it (PyTorch reads it as H).
    """
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor or None, got {type(mask).__name__}"
        )
    if mask.dtype != torch.bool and mask.dtype != like.dtype:
        raise TypeError(
            f"{name} must be torch.bool (True = may attend) or {like.dtype} "
            f"(added to the scores), got {mask.dtype}"
        )
    if mask.device != like.device:
        raise ValueError(
            f"{name} must be on the device of the inputs {like.device}, got "
            f"{mask.device}"
        )
    fits = 2 <= mask.dim() <= 4
    if fits:
        heads = h if h is not None else (mask.shape[-3] if mask.dim() > 2 else 1)
        want = (b, heads, n, m)[4 - mask.dim() :]  # (N, M), (H, N, M) or (B, H, N, M)
        fits = all(got in (1, w) for got, w in zip(mask.shape, want))
    if not fits:
        raise ValueError(
            f"{name} must broadcast to (B, H, N, M) with B = {b}, H = {h or 'any'}, N "
            f"= {n}, "
            f"M = {m}, got shape {tuple(mask.shape)}"
        )


def _check_token_mask(
    name: str, mask: object, b: int, length: int, like: torch.Tensor
) -> None:
    """Raise unless mask is None or a (B, length) bool tensor, True = real token."""
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(
            f"{name} must be a torch.bool tensor (True = real token), got {got}"
        )
    if mask.shape != (b, length):
        raise ValueError(
            f"{name} must have shape (B, length) = ({b}, {length}), got "
            f"{tuple(mask.shape)}"
        )
    if mask.device != like.device:
        raise ValueError(
            f"{name} must be on the device of the inputs {like.device}, got "
            f"{mask.device}"
        )


def _check_layers(name: str, layers: object) -> nn.ModuleList:
    """Raise a clear error unless ``layers`` is a non-empty sequence of modules."""
    if isinstance(layers, nn.Module) and not isinstance(layers, nn.ModuleList):
        raise TypeError(
            f"{name} must be a sequence of nn.Module, got a single "
            f"{type(layers).__name__}"
        )
    if not isinstance(layers, Iterable) or isinstance(layers, (str, bytes)):
        raise TypeError(
            f"{name} must be a non-empty sequence of nn.Module, got "
            f"{type(layers).__name__}"
        )
    layers = list(layers)
    if not layers or not all(isinstance(layer, nn.Module) for layer in layers):
        got = [type(layer).__name__ for layer in layers]
        raise TypeError(f"{name} must be a non-empty sequence of nn.Module, got {got}")
    return nn.ModuleList(layers)


def _check_norm(norm: object) -> None:
    if norm is not None and not isinstance(norm, nn.Module):
        raise TypeError(f"norm must be an nn.Module or None, got {type(norm).__name__}")


def _check_decoder_call(
    tgt: torch.Tensor,
    memory: torch.Tensor,
    masks: dict[str, torch.Tensor | None],
    heads: tuple[int | None, int | None],
) -> None:
    """Raise unless tgt (B, N, D), memory (B, M, D) and the decoder's masks fit."""
    (b, n, _), m = tgt.shape, memory.shape[1]
    if memory.shape[0] != b:
        raise ValueError(
            f"tgt and memory must share the batch size B, got tgt {tuple(tgt.shape)} "
            f"and memory {tuple(memory.shape)}"
        )
    _check_scores_mask("attn_mask", masks["attn_mask"], b, n, n, tgt, heads[0])
    _check_token_mask("key_mask", masks["key_mask"], b, n, tgt)
    _check_scores_mask("memory_mask", masks["memory_mask"], b, n, m, tgt, heads[1])
    _check_token_mask("memory_key_mask", masks["memory_key_mask"], b, m, tgt)


def _check_encoder_decoder_call(
    src: torch.Tensor,
    tgt: torch.Tensor,
    masks: dict[str, torch.Tensor | None],
    heads: tuple[int | None, int | None],
) -> None:
    """Raise unless src (B, M, D), tgt (B, N, D) and every mask fit together."""
    for name, x in (("src", src), ("tgt", tgt)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if src.dim() != 3 or tgt.dim() != 3 or src.shape[0] != tgt.shape[0]:
        raise ValueError(
            f"src and tgt must be (B, M, D) and (B, N, D) with one batch size B, "
            f"got src {tuple(src.shape)} and tgt {tuple(tgt.shape)}"
        )
    if src.dtype != tgt.dtype or src.device != tgt.device:
        raise TypeError(
            f"src and tgt must share one dtype and device, got {src.dtype} on "
            f"{src.device} "
            f"and {tgt.dtype} on {tgt.device}"
        )
    (b, m, _), n = src.shape, tgt.shape[1]
    _check_token_mask("src_key_mask", masks["src_key_mask"], b, m, src)
    _check_token_mask("tgt_key_mask", masks["tgt_key_mask"], b, n, src)
    _check_scores_mask("src_mask", masks["src_mask"], b, m, m, src, heads[0])
    _check_scores_mask("tgt_mask", masks["tgt_mask"], b, n, n, src, heads[1])
    _check_scores_mask("memory_mask", masks["memory_mask"], b, n, m, src, heads[1])


# --8<-- [end:validate]


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
        self.layers = _check_layers("layers", layers)
        _check_norm(norm)
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
        _check_width(
            "src",
            src,
            getattr(self.layers[0], "d_model", None),
            "M",
            next(self.parameters(), None),
        )
        b, m, _ = src.shape
        _check_scores_mask("attn_mask", attn_mask, b, m, m, src, _n_heads(self))
        _check_token_mask("key_mask", key_mask, b, m, src)
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
        for name, module in (
            ("self_attention", self_attention),
            ("cross_attention", cross_attention),
        ):
            if not isinstance(module, nn.Module):
                raise TypeError(
                    f"{name} must be an nn.Module, got {type(module).__name__}"
                )
        if self_attention is cross_attention:
            raise ValueError(
                "self_attention and cross_attention must be two modules, got the same "
                "module twice (they need their own weights)"
            )
        for name, value in (("d_model", d_model), ("d_ff", d_ff)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        _check_dropout("dropout", dropout)
        if not isinstance(activation, str) or activation not in _ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}"
            )
        _check_positive_float("layer_norm_eps", layer_norm_eps)
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
        _check_width("tgt", tgt, self.d_model, "N", self.linear1.weight)
        _check_width("memory", memory, self.d_model, "M", self.linear1.weight)
        self_masks = dict(attn_mask=attn_mask, key_mask=key_mask, is_causal=is_causal)
        cross_masks = dict(memory_mask=memory_mask, memory_key_mask=memory_key_mask)
        heads = (_n_heads(self.self_attention), _n_heads(self.cross_attention))
        _check_decoder_call(tgt, memory, {**self_masks, **cross_masks}, heads)
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
        if not isinstance(layer, nn.TransformerDecoderLayer):
            raise TypeError(
                "layer must be an nn.TransformerDecoderLayer, got "
                f"{type(layer).__name__}"
            )
        act = layer.activation
        if act is F.relu or isinstance(act, nn.ReLU):
            name = "relu"
        elif act is F.gelu or (isinstance(act, nn.GELU) and act.approximate == "none"):
            name = "gelu"
        else:
            raise ValueError(
                f"layer.activation must be ReLU or exact GELU, got {act!r}"
            )
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
        self.layers = _check_layers("layers", layers)
        _check_norm(norm)
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
        for name, module in (("encoder", encoder), ("decoder", decoder)):
            if not isinstance(module, nn.Module):
                raise TypeError(
                    f"{name} must be an nn.Module, got {type(module).__name__}"
                )
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
        masks = dict(
            src_key_mask=src_key_mask,
            tgt_key_mask=tgt_key_mask,
            src_mask=src_mask,
            tgt_mask=tgt_mask,
            memory_mask=memory_mask,
        )
        _check_encoder_decoder_call(
            src, tgt, masks, (_n_heads(self.encoder), _n_heads(self.decoder))
        )
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
        if not isinstance(transformer, nn.Transformer):
            raise TypeError(
                "transformer must be an nn.Transformer, got "
                f"{type(transformer).__name__}"
            )
        for name, fn in (("attention", attention), ("encoder_layer", encoder_layer)):
            if not callable(fn):
                raise TypeError(f"{name} must be callable, got {type(fn).__name__}")
        if not transformer.batch_first:
            raise ValueError(
                "transformer must be built with batch_first=True (this module is "
                "batch-first), got batch_first=False"
            )
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
