# %% [markdown]
# # Example: an encoder-decoder Transformer, shape by shape
#
# This page was executed when the site was built. It builds the
# [encoder-decoder](../architecture/encoder-decoder.md) of this guide from an
# `nn.Transformer` with random weights, runs a padded batch through both, and
# draws what one decoder head reads from the source through cross-attention.
# Letters follow the [notation](../notation.md) page.

# %%
import torch
from torch import nn

from _plotting import attention_heatmap
from snippets.architecture.transformer_block import TransformerBlock
from snippets.architecture.encoder_decoder import EncoderDecoder
from snippets.attention.multi_head import MultiHeadAttention

torch.manual_seed(0)
B, M, N, D, H = 2, 7, 5, 32, 4
reference = nn.Transformer(D, H, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=4 * D,
                           batch_first=True).eval()  # post-norm, ReLU: the 2017 recipe
model = EncoderDecoder.from_torch(reference, attention=MultiHeadAttention.from_torch,
                                  encoder_layer=TransformerBlock.from_torch)
print(f"torch {torch.__version__}; B={B} M={M} N={N} D={D} H={H}")
print(f"parameters: ours {sum(p.numel() for p in model.parameters()):,}, "
      f"nn.Transformer {sum(p.numel() for p in reference.parameters()):,}")

# %% [markdown]
# A batch of two source sentences, the second padded after 4 tokens, and two
# targets of 5 tokens. The key masks are True for real tokens.

# %%
src, tgt = torch.randn(B, M, D), torch.randn(B, N, D)
src_key_mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
memory = model.encoder(src, key_mask=src_key_mask)
out = model.decoder(tgt, memory, memory_key_mask=src_key_mask)
print(f"src {tuple(src.shape)} -> memory {tuple(memory.shape)}")
print(f"tgt {tuple(tgt.shape)} + memory -> out {tuple(out.shape)}")

causal_blocked = torch.ones(N, N, dtype=torch.bool).triu(1)  # nn.Transformer: True = blocked
expected = reference(src, tgt, tgt_mask=causal_blocked, src_key_padding_mask=~src_key_mask,
                     memory_key_padding_mask=~src_key_mask)
print(f"max |ours - nn.Transformer| = {(out - expected).abs().max().item():.2e}")

# %% [markdown]
# The cross-attention of the first decoder block, head 1, for the padded
# sentence. The decoder block normalises after each sublayer (post-norm), so
# the cross-attention reads the output of the first residual sum.

# %%
block = model.decoder.layers[0]
with torch.no_grad():
    h1 = block.norm1(tgt + block.self_attention(tgt, is_causal=True)[0])
    _, weights = block.cross_attention(h1, memory, memory, key_mask=src_key_mask, need_weights=True)
print(f"cross-attention weights {tuple(weights.shape)} = (B, H, N, M)")
print(f"rows sum to {weights[1].sum(-1).min().item():.4f} .. {weights[1].sum(-1).max().item():.4f}")
print(f"weight on padded source tokens: {weights[1, :, :, 4:].abs().max().item()}")

# %%
# alt: Heatmap of cross-attention weights, 5 target positions (rows) by 7 source positions (columns); the last three columns, padded source tokens, are exactly zero.
src_names = [f"s{j}" for j in range(4)] + ["pad"] * 3
tgt_names = [f"t{i}" for i in range(N)]
attention_heatmap(weights[1, 0], tgt_names, src_names, title="decoder block 1, head 1: cross-attention",
                  annotate=True)
