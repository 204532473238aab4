"""Tests for snippets/architecture/transformer_block.py.

Oracle: nn.TransformerEncoderLayer(batch_first=True) in eval mode, pre-norm and
post-norm, GELU and ReLU, with the norms and the MLP copied by
``TransformerBlock.from_torch`` and the attention by
``MultiHeadAttention.from_torch``; the pre- and post-norm equations are also
written out here from the submodules.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

from huge_scores import WrittenOut, keys_against_queries
from snippets.architecture.transformer_block import TorchAttention, TransformerBlock
from snippets.attention.multi_head import MultiHeadAttention

SNIPPET = Path(__file__).resolve().parents[1] / "snippets" / "architecture" / "transformer_block.py"
B, N, D, H, D_FF = 2, 6, 16, 4, 32


def torch_layer(norm_first, activation, *, dropout=0.1, seed=0):
    """A seeded encoder layer with non-trivial norm and bias parameters."""
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(
        D, H, D_FF, dropout=dropout, activation=activation, batch_first=True,
        norm_first=norm_first,
    )
    with torch.no_grad():
        for norm in (layer.norm1, layer.norm2):
            norm.weight.normal_(1.0, 0.2)
            norm.bias.normal_(0.0, 0.2)
        layer.self_attn.in_proj_bias.normal_()
    return layer.eval()


def pair(norm_first, activation, **kwargs):
    layer = torch_layer(norm_first, activation, **kwargs)
    block = TransformerBlock.from_torch(layer, MultiHeadAttention.from_torch(layer.self_attn))
    return layer, block


CONFIGS = [(True, "gelu"), (True, "relu"), (False, "relu"), (False, "gelu")]


@pytest.mark.parametrize("norm_first, activation", CONFIGS)
def test_matches_encoder_layer_without_mask(norm_first, activation):
    layer, block = pair(norm_first, activation)
    assert not block.training and block.norm_first == norm_first
    x = torch.randn(B, N, D)
    out = block(x)
    assert out.shape == (B, N, D)
    assert_close(out, layer(x))


@pytest.mark.parametrize("norm_first, activation", CONFIGS)
def test_matches_encoder_layer_with_masks(norm_first, activation):
    layer, block = pair(norm_first, activation)
    x = torch.randn(B, N, D)
    may_attend = torch.rand(N, N) > 0.5
    may_attend[:, 0] = True
    # nn.TransformerEncoderLayer takes True = blocked.
    assert_close(block(x, attn_mask=may_attend), layer(x, src_mask=~may_attend))

    key_mask = torch.ones(B, N, dtype=torch.bool)
    key_mask[1, 4:] = False
    expected = layer(x, src_key_padding_mask=~key_mask)
    out = block(x, key_mask=key_mask)
    assert_close(out[key_mask], expected[key_mask])  # real tokens only

    causal = nn.Transformer.generate_square_subsequent_mask(N)  # float, -inf above
    assert_close(block(x, is_causal=True), layer(x, src_mask=causal, is_causal=True))


@pytest.mark.parametrize("norm_first", [True, False])
def test_equations_written_out(norm_first):
    """Pre-norm: x + f(LN(x)); post-norm: LN(x + f(x)), for both sublayers."""
    _, block = pair(norm_first, "gelu")
    x = torch.randn(B, N, D)

    def attn(t):
        return block.attention(t)[0]

    def mlp(t):
        return block.linear2(F.gelu(block.linear1(t)))

    if norm_first:
        h = x + attn(block.norm1(x))
        expected = h + mlp(block.norm2(h))
    else:
        h = block.norm1(x + attn(x))
        expected = block.norm2(h + mlp(h))
    assert_close(block(x), expected)


def test_dropout_only_in_training():
    _, block = pair(True, "gelu", dropout=0.3)
    x = torch.randn(B, N, D)
    assert_close(block(x), block(x))
    block.train()
    assert not torch.allclose(block(x), block(x))
    assert [m.p for m in (block.dropout, block.dropout1, block.dropout2)] == [0.3] * 3


class ZeroAttention(nn.Module):
    """Stands in for attention so that the block's own randomness can be replayed."""

    def forward(self, x, **masks):
        return torch.zeros_like(x), None


@pytest.mark.parametrize("norm_first", [True, False])
def test_dropout_placement_in_training(norm_first):
    """Replays, with the same seed, dropout after the attention branch, after the
    activation, and after the MLP, in that order."""
    torch.manual_seed(0)
    block = TransformerBlock(ZeroAttention(), D, D_FF, dropout=0.5, norm_first=norm_first).train()
    x = torch.randn(B, N, D)
    torch.manual_seed(1)
    out = block(x)
    torch.manual_seed(1)
    p = 0.5

    def mlp(t):
        hidden = F.dropout(F.gelu(block.linear1(t)), p)
        return F.dropout(block.linear2(hidden), p)

    if norm_first:
        h = x + F.dropout(torch.zeros_like(x), p)
        expected = h + mlp(block.norm2(h))
    else:
        h = block.norm1(x + F.dropout(torch.zeros_like(x), p))
        expected = block.norm2(h + mlp(h))
    assert_close(out, expected)


@pytest.mark.parametrize("norm_first", [True, False])
def test_causal_block_ignores_future_tokens(norm_first):
    _, block = pair(norm_first, "gelu")
    x = torch.randn(B, N, D)
    changed = x.clone()
    changed[:, 4:] = torch.randn(B, N - 4, D)
    assert_close(block(changed, is_causal=True)[:, :4], block(x, is_causal=True)[:, :4])


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("attention", ["guide", "written_out", "torch"])
@pytest.mark.parametrize("norm_first", [True, False])
def test_masks_hold_at_huge_scores(norm_first, attention, bias):
    # W_k = -W_q with W_q scaled by 1e7: a token scores about -1e10 or less
    # against itself (float32). Under the causal flag token 0 may see only
    # itself, and so may the last token of the left-padded sequence 1; every
    # hidden key outscores that one allowed score by far. With bias, a finite
    # float mask rides along, so the boolean parts must be folded in as -inf.
    # With -inf the outputs they must not see do not move; -1e4 (or -1e9) would leak.
    layer = torch_layer(norm_first, "gelu")
    if attention == "torch":
        block = TransformerBlock.from_torch(layer)  # runs nn.MultiheadAttention
        keys_against_queries(block.attention.mha.in_proj_weight, block.attention.mha.in_proj_bias, 1e7)
        key_mask = None  # nn.MultiheadAttention wants one mask type: no key mask next to a float one
    else:
        mha = MultiHeadAttention.from_torch(layer.self_attn)
        keys_against_queries(mha.in_proj.weight, mha.in_proj.bias, 1e7)
        block = TransformerBlock.from_torch(layer, WrittenOut(mha) if attention == "written_out" else mha)
        key_mask = torch.tensor([[True] * N, [False] * (N - 1) + [True]])
    x = torch.randn(B, N, D)
    kwargs = dict(attn_mask=torch.randn(N, N) if bias else None, key_mask=key_mask, is_causal=True)
    out = block(x, **kwargs)
    hidden = x.clone()
    hidden[0, 3:] = -10 * x[0, 0]  # the future of tokens 0..2
    if key_mask is None:
        hidden[1, 3:] = -10 * x[1, 0]
        watched = [(1, slice(0, 3))]
    else:
        hidden[1, : N - 1] = -10 * x[1, N - 1]  # the left padding of sequence 1
        watched = [(1, slice(N - 1, N))]
    moved = block(hidden, **kwargs)
    assert torch.isfinite(out).all() and torch.isfinite(moved).all()
    for b, rows in [(0, slice(0, 3))] + watched:
        assert_close(moved[b, rows], out[b, rows], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("norm_first", [True, False])
def test_gradcheck_float64(norm_first):
    torch.manual_seed(0)
    block = TransformerBlock(
        MultiHeadAttention(4, 2), 4, 8, dropout=0.0, norm_first=norm_first
    ).double()
    x = torch.randn(1, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: block(t, is_causal=True), (x,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_finite_with_large_inputs(dtype):
    _, block = pair(True, "gelu")
    block = block.to(dtype)
    x = (torch.randn(B, N, D) * 100).to(dtype)
    out = block(x, is_causal=True)
    assert out.dtype == dtype and torch.isfinite(out).all()


def test_from_torch_keeps_dtype_and_bias_flag():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(D, H, D_FF, batch_first=True, bias=False).double().eval()
    block = TransformerBlock.from_torch(layer, MultiHeadAttention.from_torch(layer.self_attn))
    assert block.linear1.bias is None and block.norm1.bias is None
    assert block.linear1.weight.dtype == torch.float64
    assert block.activation_name == "relu"  # the layer's default
    x = torch.randn(B, N, D, dtype=torch.float64)
    assert_close(block(x), layer(x))


@pytest.mark.parametrize(
    "args, kwargs, error, match",
    [
        ((nn.Identity(), 0, 8), {}, ValueError, r"d_model must be an int > 0, got 0"),
        ((nn.Identity(), 4, -1), {}, ValueError, r"d_ff must be an int > 0, got -1"),
        ((nn.Identity(), 4, 2.5), {}, TypeError, r"must be tuple of ints"),  # nn.Linear's own
        ((nn.Identity(), 4, 8), dict(dropout=-0.1), ValueError, r"dropout must be a float in \[0, 1\), got -0.1"),
        ((nn.Identity(), 4, 8), dict(activation="swish"), ValueError, r"activation must be one of \['gelu', 'relu'\], got 'swish'"),
    ],
)
def test_constructor_errors(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        TransformerBlock(*args, **kwargs)


def test_forward_and_from_torch_errors():
    block = TransformerBlock(MultiHeadAttention(4, 2), 4, 8)
    with pytest.raises(ValueError, match=r"x must have shape \(B, N, 4\), got \(3, 4\)"):
        block(torch.randn(3, 4))
    with pytest.raises(ValueError, match=r"x must have shape \(B, N, 4\), got \(1, 3, 5\)"):
        block(torch.randn(1, 3, 5))
    with pytest.raises(TypeError, match=r"layer must be an nn.TransformerEncoderLayer, got Linear"):
        TransformerBlock.from_torch(nn.Linear(4, 4), nn.Identity())
    layer = nn.TransformerEncoderLayer(4, 2, 8, activation=nn.GELU(approximate="tanh"))
    with pytest.raises(ValueError, match=r"layer.activation must be ReLU or exact GELU, got GELU"):
        TransformerBlock.from_torch(layer, nn.Identity())




# ----------------------------------------------------------------------------
# The page's exercises
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("d_model", [8, 512])
def test_exercise_parameter_count(d_model):
    block = TransformerBlock(MultiHeadAttention(d_model, 4), d_model, 4 * d_model)
    assert sum(p.numel() for p in block.parameters()) == 12 * d_model**2 + 13 * d_model
    if d_model == 512:
        assert 12 * d_model**2 + 13 * d_model == 3_152_384


@pytest.mark.parametrize("norm_first", [True, False])
def test_exercise_zero_branches(norm_first):
    torch.manual_seed(0)
    block = TransformerBlock(MultiHeadAttention(D, H), D, D_FF, norm_first=norm_first).eval()
    with torch.no_grad():
        for linear in (block.attention.out_proj, block.linear2):
            linear.weight.zero_()
            linear.bias.zero_()
        for norm in (block.norm1, block.norm2):  # non-trivial affine maps
            norm.weight.normal_()
            norm.bias.normal_()
    x = torch.randn(B, N, D)
    expected = x if norm_first else block.norm2(block.norm1(x))
    assert_close(block(x), expected)


@pytest.mark.parametrize("norm_first", [True, False])
def test_from_torch_alone_runs_the_layers_own_attention(norm_first):
    """TransformerBlock.from_torch(layer), no attention given: the block wraps a
    copy of layer.self_attn and still equals the layer, masks included."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.1, activation="gelu",
                                       batch_first=True, norm_first=norm_first).eval()
    block = TransformerBlock.from_torch(layer).eval()
    assert isinstance(block.attention, TorchAttention)
    assert block.attention.mha is not layer.self_attn  # a copy, not shared
    x = torch.randn(2, 5, 16)
    key_mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    causal = torch.ones(5, 5, dtype=torch.bool).triu(1)  # torch's polarity: True = blocked
    expected = layer(x, src_mask=causal, src_key_padding_mask=~key_mask, is_causal=True)
    got = block(x, key_mask=key_mask, is_causal=True)
    assert_close(got[0], expected[0])
    assert_close(got[1, :3], expected[1, :3])
    allowed = torch.rand(5, 5, generator=torch.Generator(device=torch.get_default_device()).manual_seed(1)) > 0.3
    allowed |= torch.eye(5, dtype=torch.bool)
    assert_close(block(x, attn_mask=allowed), layer(x, src_mask=~allowed))


def test_torch_attention_errors():
    with pytest.raises(AttributeError, match=r"'Linear' object has no attribute 'batch_first'"):
        TorchAttention(nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"mha.batch_first must be True, got False"):
        TorchAttention(nn.MultiheadAttention(8, 2))
    attention = TorchAttention(nn.MultiheadAttention(8, 2, batch_first=True))
    with pytest.raises(ValueError, match=r"attn_mask must have shape \(3, 3\), got \(3, 4\)"):
        attention(torch.randn(1, 3, 8), attn_mask=torch.ones(3, 4, dtype=torch.bool))


def test_torch_attention_checks_x_and_both_masks():
    attention = TorchAttention(nn.MultiheadAttention(8, 2, batch_first=True))
    x = torch.randn(2, 3, 8)
    cases = [
        (([1.0],), {}, TypeError, r"x must be a .* tensor on cpu, got list"),
        ((x.long(),), {}, TypeError, r"x must be a \(torch.float32,\) tensor on cpu, got \(torch.int64, device\(type='cpu'\)\)"),
        ((x.double(),), {}, TypeError, r"x must be a \(torch.float32,\) tensor on cpu, got \(torch.float64, device\(type='cpu'\)\)"),
        ((x.to("meta"),), {}, TypeError, r"x must be a .* tensor on cpu, got .*meta'\)\)"),
        ((x,), {"attn_mask": [[True]]}, TypeError, r"attn_mask must be a .* tensor on cpu, got list"),
        ((x,), {"attn_mask": torch.ones(3, 3, dtype=torch.long)}, TypeError,
         r"attn_mask must be a \(torch.bool, torch.float32\) tensor on cpu, got \(torch.int64, device\(type='cpu'\)\)"),
        ((x,), {"attn_mask": torch.ones(3, 3, dtype=torch.bool, device="meta")}, TypeError,
         r"attn_mask must be a .* tensor on cpu, got .*meta'\)\)"),
        ((x,), {"key_mask": torch.ones(2, 3)}, TypeError,
         r"key_mask must be a \(torch.bool,\) tensor on cpu, got \(torch.float32, device\(type='cpu'\)\)"),
        ((x,), {"key_mask": torch.ones(3, dtype=torch.bool)}, ValueError,
         r"key_mask must have shape \(2, 3\), got \(3,\)"),
        ((x,), {"key_mask": torch.ones(2, 3, dtype=torch.bool, device="meta")}, TypeError,
         r"key_mask must be a .* tensor on cpu, got .*meta'\)\)"),
    ]
    for args, kwargs, error, match in cases:
        with pytest.raises(error, match=match):
            attention(*args, **kwargs)


def test_block_checks_dtype_device_and_constructor_numbers():
    block = TransformerBlock(MultiHeadAttention(4, 2), 4, 8)
    with pytest.raises(TypeError, match=r"x must be a \(torch.float32,\) tensor on cpu, got \(torch.int64, device\(type='cpu'\)\)"):
        block(torch.ones(1, 3, 4, dtype=torch.long))
    with pytest.raises(TypeError, match=r"x must be a \(torch.float32,\) tensor on cpu, got \(torch.float64, device\(type='cpu'\)\)"):
        block(torch.randn(1, 3, 4, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"x must be a .* tensor on cpu, got .*meta'\)\)"):
        block(torch.randn(1, 3, 4, device="meta"))
    with pytest.raises(ValueError, match=r"layer_norm_eps must be a float > 0, got 0.0"):
        TransformerBlock(nn.Identity(), 4, 8, layer_norm_eps=0.0)
    with pytest.raises(ValueError, match=r"dropout must be a float in \[0, 1\), got None"):
        TransformerBlock(nn.Identity(), 4, 8, dropout=None)
    with pytest.raises(ValueError, match=r"activation must be one of \['gelu', 'relu'\], got None"):
        TransformerBlock(nn.Identity(), 4, 8, activation=None)
