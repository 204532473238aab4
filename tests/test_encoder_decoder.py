"""Tests for snippets/architecture/encoder_decoder.py.

Oracle: nn.Transformer(batch_first=True) in eval mode with its weights copied in,
post-norm and pre-norm, ReLU and GELU, with source and target padding, the
causal target mask and an extra cross-attention mask. Properties: the decoder
never looks ahead, padded source tokens never change real outputs, the
cross-attention really reads the memory, dropout only in training, finite
outputs for large inputs, gradcheck in float64. Every validation message is hit.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from huge_scores import WrittenOut, keys_against_queries
from snippets.architecture.transformer_block import TransformerBlock
from snippets.architecture.encoder_decoder import Decoder, DecoderBlock, Encoder, EncoderDecoder
from snippets.attention.multi_head import MultiHeadAttention

SNIPPET = Path(__file__).resolve().parents[1] / "snippets" / "architecture" / "encoder_decoder.py"
B, M, N, D, H, D_FF = 3, 7, 5, 16, 4, 32


def torch_transformer(*, norm_first: bool, activation: str = "relu", seed: int = 0, dtype=torch.float32):
    """A seeded nn.Transformer with random (not default) norm and bias values."""
    torch.manual_seed(seed)
    model = nn.Transformer(
        D, H, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=D_FF,
        dropout=0.1, activation=activation, batch_first=True, norm_first=norm_first,
    )
    with torch.no_grad():  # torch starts norms at 1/0 and MHA biases at 0: randomise to prove copying
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.normal_(mean=1.0 if name.endswith("weight") else 0.0, std=0.2)
    return model.to(dtype).eval()


def ours_from(model: nn.Transformer) -> EncoderDecoder:
    return EncoderDecoder.from_torch(
        model, attention=MultiHeadAttention.from_torch, encoder_layer=TransformerBlock.from_torch
    )


def inputs(seed: int = 1, dtype=torch.float32):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    src = torch.randn(B, M, D, generator=g, dtype=dtype)
    tgt = torch.randn(B, N, D, generator=g, dtype=dtype)
    src_key_mask = torch.ones(B, M, dtype=torch.bool)  # True = real token
    src_key_mask[1, 5:] = False
    src_key_mask[2, 3:] = False
    tgt_key_mask = torch.ones(B, N, dtype=torch.bool)
    tgt_key_mask[2, 3:] = False
    return src, tgt, src_key_mask, tgt_key_mask


def run_torch(model, src, tgt, src_key_mask, tgt_key_mask, memory_mask=None):
    # nn.Transformer's boolean masks are True = blocked: invert ours.
    future = torch.ones(N, N, dtype=torch.bool).triu(1)
    return model(
        src, tgt, tgt_mask=future, tgt_is_causal=True,
        memory_mask=None if memory_mask is None else ~memory_mask,
        src_key_padding_mask=~src_key_mask, tgt_key_padding_mask=~tgt_key_mask,
        memory_key_padding_mask=~src_key_mask,
    )


# ----------------------------------------------------------------------------
# Oracle: nn.Transformer
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_matches_nn_transformer(norm_first, activation):
    model = torch_transformer(norm_first=norm_first, activation=activation)
    ours = ours_from(model)
    src, tgt, skm, tkm = inputs()
    assert_close(ours(src, tgt, src_key_mask=skm, tgt_key_mask=tkm), run_torch(model, src, tgt, skm, tkm))


@pytest.mark.parametrize("norm_first", [False, True])
def test_matches_nn_transformer_fast_path_and_memory_mask(norm_first):
    # Under no_grad torch's encoder may take its fused fast path: compare anyway.
    model = torch_transformer(norm_first=norm_first, seed=3)
    ours = ours_from(model)
    src, tgt, skm, tkm = inputs(seed=4)
    memory_mask = torch.rand(N, M, generator=torch.Generator(device=torch.get_default_device()).manual_seed(5)) > 0.3
    memory_mask[:, 0] = True  # every target position keeps one real source token
    with torch.no_grad():
        expected = run_torch(model, src, tgt, skm, tkm, memory_mask)
        got = ours(src, tgt, src_key_mask=skm, tgt_key_mask=tkm, memory_mask=memory_mask)
    assert_close(got, expected)


def test_from_torch_structure_and_final_norms():
    model = torch_transformer(norm_first=False)
    ours = ours_from(model)
    assert len(ours.encoder.layers) == 2 and len(ours.decoder.layers) == 2
    assert isinstance(ours.encoder.norm, nn.LayerNorm) and isinstance(ours.decoder.norm, nn.LayerNorm)
    assert_close(ours.decoder.norm.weight, model.decoder.norm.weight)
    block = ours.decoder.layers[1]
    assert block.self_attention is not block.cross_attention
    assert_close(block.cross_attention.in_proj.weight, model.decoder.layers[1].multihead_attn.in_proj_weight)
    assert not ours.training


def test_encoder_and_decoder_match_torch_separately():
    model = torch_transformer(norm_first=True, seed=7)
    ours = ours_from(model)
    src, tgt, skm, tkm = inputs(seed=8)
    memory = ours.encoder(src, key_mask=skm)
    expected_memory = model.encoder(src, src_key_padding_mask=~skm)
    assert_close(memory, expected_memory)
    future = torch.ones(N, N, dtype=torch.bool).triu(1)
    expected = model.decoder(tgt, expected_memory, tgt_mask=future, memory_key_padding_mask=~skm)
    assert_close(ours.decoder(tgt, memory, memory_key_mask=skm), expected)


def test_the_2017_recipe_by_hand():
    # Post-norm with ReLU, written from the paper's equations with the model's own parts.
    torch.manual_seed(0)
    attn = MultiHeadAttention(D, H)
    cross = MultiHeadAttention(D, H)
    block = DecoderBlock(attn, cross, D, D_FF, dropout=0.0, activation="relu", norm_first=False).eval()
    x = torch.randn(2, N, D)
    memory = torch.randn(2, M, D)
    causal = torch.ones(N, N, dtype=torch.bool).tril()
    h = block.norm1(x + attn(x, attn_mask=causal)[0])
    h = block.norm2(h + cross(h, memory, memory)[0])
    h = block.norm3(h + block.linear2(torch.relu(block.linear1(h))))
    assert_close(block(x, memory), h)


# ----------------------------------------------------------------------------
# Properties
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_never_looks_at_future_target_tokens(norm_first):
    ours = ours_from(torch_transformer(norm_first=norm_first))
    src, tgt, skm, _ = inputs()
    changed = tgt.clone()
    changed[:, 3:] = torch.randn(B, N - 3, D)
    before = ours(src, tgt, src_key_mask=skm)
    after = ours(src, changed, src_key_mask=skm)
    assert_close(after[:, :3], before[:, :3])
    assert not torch.allclose(after[:, 3:], before[:, 3:])


@pytest.mark.parametrize("norm_first", [False, True])
def test_padded_source_tokens_never_change_real_outputs(norm_first):
    ours = ours_from(torch_transformer(norm_first=norm_first))
    src, tgt, skm, tkm = inputs()
    garbage = torch.where(skm[..., None], src, 1e3 * torch.randn_like(src))
    before = ours(src, tgt, src_key_mask=skm, tgt_key_mask=tkm)
    after = ours(garbage, tgt, src_key_mask=skm, tgt_key_mask=tkm)
    assert_close(after, before)


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("written_out", [False, True])
def test_masks_hold_at_huge_scores(written_out, sign):
    # Every attention gets W_q scaled by 1e7 and W_k = -W_q: in the self-
    # attentions a token scores about -1e10 or less against itself (float32).
    # Source 2 is one real token, so its encoder row has only that score, and
    # target token 0 sees only itself. The cross-attention keys are flipped by
    # `sign`, so in one of the two runs target rows of sequence 2 score their
    # one real source token far below zero too. Padded source tokens and future
    # target tokens then change; with -inf masking the rows that must not see
    # them do not move, while a fill of -1e4 (or -1e9) would leak them in.
    def attention(mha):
        ours = MultiHeadAttention.from_torch(mha)
        return WrittenOut(ours) if written_out else ours

    model = EncoderDecoder.from_torch(torch_transformer(norm_first=True), attention=attention,
                                      encoder_layer=TransformerBlock.from_torch)
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            keys_against_queries(module.in_proj.weight, module.in_proj.bias, 1e7)
    with torch.no_grad():
        for block in model.decoder.layers:
            cross = block.cross_attention.mha if written_out else block.cross_attention
            cross.in_proj.weight[D : 2 * D] *= sign
            cross.in_proj.bias[D : 2 * D] *= sign
    src, tgt, skm, _ = inputs()
    skm[2, 1:] = False  # source 2: one real token
    src2, tgt2 = src.clone(), tgt.clone()
    src2[~skm] = -10 * src[:, :1].expand(B, M, D)[~skm]
    tgt2[:, 3:] = -10 * tgt[:, :1]
    before = model(src, tgt, src_key_mask=skm)
    after = model(src2, tgt2, src_key_mask=skm)
    assert torch.isfinite(before).all() and torch.isfinite(after).all()
    assert_close(after[:, :3], before[:, :3], rtol=1e-5, atol=1e-5)


def test_cross_attention_reads_the_source():
    ours = ours_from(torch_transformer(norm_first=True))
    src, tgt, skm, _ = inputs()
    other = src.clone()
    other[0, 0] += 1.0  # a real source token of sequence 0
    before = ours(src, tgt, src_key_mask=skm)
    after = ours(other, tgt, src_key_mask=skm)
    assert not torch.allclose(after[0], before[0])
    assert_close(after[1:], before[1:])


def test_dropout_only_in_training():
    ours = ours_from(torch_transformer(norm_first=True))
    src, tgt, skm, _ = inputs()
    assert_close(ours(src, tgt), ours(src, tgt))
    ours.train()
    torch.manual_seed(0)
    a = ours(src, tgt)
    b = ours(src, tgt)
    assert not torch.allclose(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("norm_first", [False, True])
def test_finite_with_large_inputs(dtype, norm_first):
    ours = ours_from(torch_transformer(norm_first=norm_first)).to(dtype)
    src, tgt, skm, tkm = inputs(dtype=dtype)
    out = ours(300 * src, 300 * tgt, src_key_mask=skm, tgt_key_mask=tkm)
    assert out.dtype == dtype and torch.isfinite(out).all()


def test_gradcheck_float64():
    torch.manual_seed(0)
    model = nn.Transformer(8, 2, 1, 1, 16, dropout=0.0, batch_first=True).eval()
    ours = ours_from(model).double()
    src = torch.randn(1, 3, 8, dtype=torch.float64, requires_grad=True)
    tgt = torch.randn(1, 2, 8, dtype=torch.float64, requires_grad=True)
    skm = torch.tensor([[True, True, False]])
    assert torch.autograd.gradcheck(lambda s, t: ours(s, t, src_key_mask=skm), (src, tgt), fast_mode=True)


# ----------------------------------------------------------------------------
# Exercises on docs/architecture/encoder-decoder.md
# ----------------------------------------------------------------------------


def test_exercise_encode_once():
    ours = ours_from(torch_transformer(norm_first=True))
    src, tgt, skm, _ = inputs()
    memory = ours.encoder(src, key_mask=skm)
    for n in range(1, N + 1):  # the target grows one token at a time
        assert_close(ours.decoder(tgt[:, :n], memory, memory_key_mask=skm),
                     ours(src, tgt[:, :n], src_key_mask=skm))


def test_exercise_parameter_count():
    d = 512
    block = DecoderBlock(MultiHeadAttention(d, 8), MultiHeadAttention(d, 8), d, 4 * d)
    encoder_block = TransformerBlock(MultiHeadAttention(d, 8), d, 4 * d)
    assert sum(p.numel() for p in block.parameters()) == 16 * d**2 + 19 * d == 4_204_032
    assert sum(p.numel() for p in encoder_block.parameters()) == 12 * d**2 + 13 * d


# ----------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------


def _attn():
    return MultiHeadAttention(D, H)


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: Encoder(nn.Linear(2, 2)), TypeError, "should be called with an iterable"),
        (lambda: Encoder([]), ValueError, r"layers must be a non-empty list, got \[\]"),
        (lambda: Decoder([1]), TypeError, "int is not a Module subclass"),  # torch's own refusal
        (lambda: (lambda a: DecoderBlock(a, a, D, D_FF))(_attn()), ValueError, "cross_attention must be a second module .*, got 'the same module twice'"),
        (lambda: DecoderBlock(_attn(), _attn(), 0, D_FF), ValueError, "d_model must be an int > 0, got 0"),
        (lambda: DecoderBlock(_attn(), _attn(), D, -2), ValueError, "d_ff must be an int > 0, got -2"),
        (lambda: DecoderBlock(_attn(), _attn(), D, 2.0), TypeError, "must be tuple of ints"),  # nn.Linear's
        (lambda: DecoderBlock(_attn(), _attn(), D, D_FF, dropout=1.0), ValueError, r"dropout must be a float in \[0, 1\), got 1.0"),
        (lambda: DecoderBlock(_attn(), _attn(), D, D_FF, activation="tanh"), ValueError, r"activation must be one of \['gelu', 'relu'\], got 'tanh'"),
    ],
)
def test_constructor_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_forward_errors():
    ours = ours_from(torch_transformer(norm_first=True))
    block = ours.decoder.layers[0]
    with pytest.raises(ValueError, match=r"tgt must have shape \(2, N, 16\), got \(2, 3, 8\)"):
        block(torch.randn(2, 3, 8), torch.randn(2, 4, D))
    with pytest.raises(ValueError, match=r"memory must have shape \(B, M, 16\), got \(4, 16\)"):
        block(torch.randn(2, 3, D), torch.randn(4, D))
    with pytest.raises(TypeError, match=r"memory must be a .* tensor on cpu, got list"):
        block(torch.randn(2, 3, D), [1.0])
    with pytest.raises(ValueError, match=r"tgt must have shape \(2, N, 16\), got \(3, 4, 16\)"):
        ours(torch.randn(2, 4, D), torch.randn(3, 4, D))


def test_from_torch_errors():
    with pytest.raises(AttributeError, match="'Linear' object has no attribute 'batch_first'"):
        EncoderDecoder.from_torch(nn.Linear(2, 2), attention=MultiHeadAttention.from_torch,
                                  encoder_layer=TransformerBlock.from_torch)
    seq_first = nn.Transformer(D, H, 1, 1, D_FF, batch_first=False)
    with pytest.raises(ValueError, match="transformer.batch_first must be True, got False"):
        ours_from(seq_first)
    with pytest.raises(TypeError, match="layer must be an nn.TransformerDecoderLayer, got Linear"):
        DecoderBlock.from_torch(nn.Linear(2, 2), _attn(), _attn())
    layer = nn.TransformerDecoderLayer(D, H, D_FF, activation=nn.SiLU(), batch_first=True)
    with pytest.raises(ValueError, match=r"layer.activation must be ReLU or exact GELU, got SiLU"):
        DecoderBlock.from_torch(layer, _attn(), _attn())


# ----------------------------------------------------------------------------
# The file stands alone
# ----------------------------------------------------------------------------




def test_stacks_check_their_parts():
    with pytest.raises(ValueError, match=r"layers must be a non-empty list, got \(\)"):
        Decoder(())
    with pytest.raises(ValueError, match=r"layer_norm_eps must be a float > 0, got -1e-05"):
        DecoderBlock(_attn(), _attn(), D, D_FF, layer_norm_eps=-1e-5)
    with pytest.raises(ValueError, match=r"dropout must be a float in \[0, 1\), got '0.1'"):
        DecoderBlock(_attn(), _attn(), D, D_FF, dropout="0.1")
    transformer = nn.Transformer(D, H, 1, 1, D_FF, batch_first=True)
    with pytest.raises(TypeError, match=r"'int' object is not callable"):  # Python's own
        EncoderDecoder.from_torch(transformer, attention=3, encoder_layer=TransformerBlock.from_torch)


def test_each_module_names_its_own_inputs_and_masks():
    """A mask is named as the caller passed it (memory_mask, src_key_mask), not as the
    attention module deep inside receives it (attn_mask, key_mask)."""
    torch.manual_seed(0)
    block = DecoderBlock(_attn(), _attn(), D, D_FF).eval()
    encoder = Encoder([TransformerBlock(_attn(), D, D_FF)]).eval()
    model = EncoderDecoder(encoder, Decoder([block])).eval()
    src, tgt = torch.randn(B, M, D), torch.randn(B, N, D)
    cases = [
        (block, (tgt.double(), src), {}, TypeError, r"tgt must be a \(torch.float32,\) tensor on cpu, got \(torch.float64, device\(type='cpu'\)\)"),
        (block, (tgt, src.to("meta")), {}, TypeError, r"memory must be a .* tensor on cpu, got .*meta'\)\)"),
        (block, (tgt.long(), src), {}, TypeError, r"tgt must be a \(torch.float32,\) tensor on cpu, got \(torch.int64, device\(type='cpu'\)\)"),
        (block, (tgt, src[:2]), {}, ValueError, r"tgt must have shape \(2, N, 16\), got \(3, 5, 16\)"),
        (block, (tgt, src), {"memory_mask": torch.ones(N, M + 1, dtype=torch.bool)}, ValueError,
         r"memory_mask must broadcast to \(3, 4, 5, 7\), got \(5, 8\)"),
        (block, (tgt, src), {"memory_mask": torch.ones(7, N, M, dtype=torch.bool)}, ValueError,
         r"memory_mask must broadcast to \(3, 4, 5, 7\), got \(7, 5, 7\)"),
        (block, (tgt, src), {"attn_mask": [[True]]}, TypeError, r"attn_mask must be a .* tensor on cpu, got list"),
        (block, (tgt, src), {"memory_mask": torch.ones(N, M, dtype=torch.long)}, TypeError,
         r"memory_mask must be a \(torch.bool, torch.float32\) tensor on cpu, got \(torch.int64, device\(type='cpu'\)\)"),
        (block, (tgt, src), {"memory_mask": torch.ones(N, M, dtype=torch.bool, device="meta")}, TypeError,
         r"memory_mask must be a .* tensor on cpu, got .*meta'\)\)"),
        (block, (tgt, src), {"memory_key_mask": torch.ones(B, M)}, TypeError,
         r"memory_key_mask must be a \(torch.bool,\) tensor on cpu, got \(torch.float32, device\(type='cpu'\)\)"),
        (block, (tgt, src), {"memory_key_mask": torch.ones(B, N, dtype=torch.bool)}, ValueError,
         r"memory_key_mask must have shape \(3, 7\), got \(3, 5\)"),
        (block, (tgt, src), {"key_mask": torch.ones(B, N, dtype=torch.bool, device="meta")}, TypeError,
         r"key_mask must be a .* tensor on cpu, got .*meta'\)\)"),
        (encoder, (src[..., :8],), {}, ValueError, r"src must have shape \(B, M, 16\), got \(3, 7, 8\)"),
        (encoder, (src,), {"attn_mask": torch.ones(M, N, dtype=torch.bool)}, ValueError,
         r"attn_mask must broadcast to \(3, 4, 7, 7\), got \(7, 5\)"),
        (model, ([1.0], tgt), {}, TypeError, r"src must be a .* tensor on cpu, got list"),
        (model, (src, tgt.double()), {}, TypeError, r"tgt must be a \(torch.float32,\) tensor on cpu, got \(torch.float64, device\(type='cpu'\)\)"),
        (model, (src, tgt), {"src_key_mask": torch.ones(B, N, dtype=torch.bool)}, ValueError,
         r"src_key_mask must have shape \(3, 7\), got \(3, 5\)"),
        (model, (src, tgt), {"tgt_mask": torch.ones(M, M, dtype=torch.bool)}, ValueError,
         r"tgt_mask must broadcast to \(3, 4, 5, 5\), got \(7, 7\)"),
    ]
    for module, args, kwargs, error, match in cases:
        with pytest.raises(error, match=match):
            module(*args, **kwargs)
