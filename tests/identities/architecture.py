"""Identities proven for the architecture pages: the Transformer block and the
encoder-decoder."""

from __future__ import annotations

import torch
from torch import nn

from identities import identity
from snippets.architecture.encoder_decoder import EncoderDecoder
from snippets.architecture.transformer_block import TransformerBlock
from snippets.attention.multi_head import MultiHeadAttention

D, H, D_FF = 16, 4, 32


def _randomised(module: nn.Module) -> nn.Module:
    """float64, eval, and norms and biases away from torch's 1 and 0, so copying shows."""
    module = module.double().eval()
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.normal_(mean=1.0 if name.endswith("weight") else 0.0, std=0.2)
    return module


def _key_mask(b: int, n: int, keep: int) -> torch.Tensor:
    mask = torch.ones(b, n, dtype=torch.bool)  # True = real token
    mask[-1, keep:] = False
    return mask


@identity("block-equals-torch-encoder-layer",
          "TransformerBlock with MultiHeadAttention.from_torch equals "
          "nn.TransformerEncoderLayer, pre-norm and post-norm, with padded keys",
          page="architecture/transformer-block.md", tol=1e-12)
def block_equals_torch_encoder_layer():
    x, key_mask = torch.randn(2, 6, D, dtype=torch.float64), _key_mask(2, 6, 4)
    ours, theirs = [], []
    for norm_first, activation in ((True, "gelu"), (False, "relu")):
        layer = _randomised(nn.TransformerEncoderLayer(
            D, H, D_FF, activation=activation, norm_first=norm_first, batch_first=True))
        block = TransformerBlock.from_torch(layer, MultiHeadAttention.from_torch(layer.self_attn))
        ours.append(block(x, key_mask=key_mask))
        theirs.append(layer(x, src_key_padding_mask=~key_mask))
    return torch.stack(ours), torch.stack(theirs)


@identity("block-with-torch-attention-equals-encoder-layer",
          "TransformerBlock.from_torch(layer) running PyTorch's own attention through "
          "TorchAttention equals the layer, the guide's causal mask flipped to True = blocked",
          page="architecture/transformer-block.md", tol=1e-12)
def block_with_torch_attention_equals_encoder_layer():
    layer = _randomised(nn.TransformerEncoderLayer(D, H, D_FF, norm_first=True,
                                                   batch_first=True))
    x = torch.randn(2, 6, D, dtype=torch.float64)
    future = torch.ones(6, 6, dtype=torch.bool).triu(1)  # True = blocked
    return TransformerBlock.from_torch(layer)(x, is_causal=True), layer(x, src_mask=future)


@identity("encoder-decoder-equals-torch-transformer",
          "EncoderDecoder built by from_torch equals nn.Transformer (two layers each side, "
          "causal target, padded source and target)",
          page="architecture/encoder-decoder.md", tol=1e-12)
def encoder_decoder_equals_torch_transformer():
    model = _randomised(nn.Transformer(D, H, num_encoder_layers=2, num_decoder_layers=2,
                                       dim_feedforward=D_FF, batch_first=True))
    ours = EncoderDecoder.from_torch(model, attention=MultiHeadAttention.from_torch,
                                     encoder_layer=TransformerBlock.from_torch)
    src, tgt = torch.randn(2, 7, D, dtype=torch.float64), torch.randn(2, 5, D, dtype=torch.float64)
    src_mask, tgt_mask = _key_mask(2, 7, 4), _key_mask(2, 5, 3)
    future = torch.ones(5, 5, dtype=torch.bool).triu(1)
    theirs = model(src, tgt, tgt_mask=future, tgt_is_causal=True,
                   src_key_padding_mask=~src_mask, tgt_key_padding_mask=~tgt_mask,
                   memory_key_padding_mask=~src_mask)
    return ours(src, tgt, src_key_mask=src_mask, tgt_key_mask=tgt_mask), theirs
