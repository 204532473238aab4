"""Malformed input for the architecture snippets: every public callable refuses it by name.

The framework (what makes an argument wrong, the sweep and the hypothesis test)
is in ``tests/fuzz_support.py``; this file registers one entry per public
callable of ``snippets/architecture/`` and collects the three tests over them.
"""

from __future__ import annotations

import math  # noqa: F401
import pytest  # noqa: F401
import torch
from torch import nn  # noqa: F401

from fuzz_support import *  # noqa: F401,F403
from fuzz_support import fuzz_tests
from snippets.architecture import transformer_block as block_mod
from snippets.architecture import encoder_decoder as ed_mod
from snippets.attention import multi_head as mha_mod

# architecture
# ----------------------------------------------------------------------------


# A width of 2.5 is refused by nn.Linear itself (a TypeError naming no argument).
SIZE = Bad(0, -1)


def _mha(d_model, h):
    return mha_mod.MultiHeadAttention(d_model, h)


@fuzz("architecture.transformer_block.TorchAttention")
def _(s):
    d_model = s.h * s.d
    mha = nn.MultiheadAttention(d_model, s.h, batch_first=True)
    module = block_mod.TorchAttention(mha)
    return [
        # not an nn.MultiheadAttention: torch's AttributeError (no batch_first) is clear
        Call(block_mod.TorchAttention, {"mha": mha}, {"mha": Bad()}, "init"),
        Call(lambda x, **kw: module(x, **kw),
             {"x": r(s.b, s.n, d_model), "attn_mask": ones(s.n, s.n), "key_mask": ones(s.b, s.n)},
             {"x": T(rank=3, tied=(0, 1, -1), names=("attn_mask", "key_mask")),
              "attn_mask": T(MASK, rank=2, tied=(0, 1)), "key_mask": KEY_MASK}, "forward"),
    ]


@fuzz("architecture.transformer_block.TransformerBlock")
def _(s):
    d_model = s.h * s.d
    init = {"attention": _mha(d_model, s.h), "d_model": d_model, "d_ff": 2 * d_model, "dropout": 0.1}
    calls = _module_calls(
        block_mod.TransformerBlock, init,
        {"attention": Bad(), "d_model": SIZE, "d_ff": SIZE, "dropout": PROB,
         "activation": Bad("tanh", 3, None), "layer_norm_eps": Bad(0.0, -1e-5, "1e-5", None)},
        lambda mod, **kw: mod(kw.pop("x"), **kw),
        {"x": r(s.b, s.n, d_model), "key_mask": ones(s.b, s.n)},
        {"x": T(rank=3, tied=(-1,), names=("key_mask",)), "key_mask": KEY_MASK},
    )
    layer = nn.TransformerEncoderLayer(d_model, s.h, 2 * d_model, batch_first=True)
    calls.append(Call(block_mod.TransformerBlock.from_torch, {"layer": layer},
                      {"layer": NOT_A_MODULE, "attention": Bad()}, "from_torch"))
    return calls


def _block(d_model, h):
    return block_mod.TransformerBlock(_mha(d_model, h), d_model, 2 * d_model)


def _decoder_block(d_model, h):
    return ed_mod.DecoderBlock(_mha(d_model, h), _mha(d_model, h), d_model, 2 * d_model)


@fuzz("architecture.encoder_decoder.Encoder")
def _(s):
    d_model = s.h * s.d
    return _module_calls(
        ed_mod.Encoder, {"layers": [_block(d_model, s.h)], "norm": nn.LayerNorm(d_model)},
        {"layers": Bad([]), "norm": Bad()},
        lambda mod, **kw: mod(kw.pop("src"), **kw),
        {"src": r(s.b, s.m, d_model), "key_mask": ones(s.b, s.m)},
        {"src": T(rank=3, tied=(-1,), names=("key_mask",)), "key_mask": KEY_MASK},
    )


DECODER_MASKS = {
    "tgt": T(rank=3, tied=(0, 1, -1), names=("memory", "key_mask", "attn_mask")),
    "memory": T(rank=3, tied=(0, 1, -1), names=("tgt", "memory_key_mask", "memory_mask")),
    "attn_mask": T(MASK, min_rank=2, tied=(-2, -1), lead_fixed=True),
    "key_mask": KEY_MASK,
    "memory_mask": T(MASK, min_rank=2, tied=(-2, -1), lead_fixed=True),
    "memory_key_mask": KEY_MASK,
}


def _decoder_inputs(s, d_model):
    return {"tgt": r(s.b, s.n, d_model), "memory": r(s.b, s.m, d_model), "attn_mask": ones(s.n, s.n),
            "key_mask": ones(s.b, s.n), "memory_mask": ones(s.n, s.m), "memory_key_mask": ones(s.b, s.m)}


@fuzz("architecture.encoder_decoder.DecoderBlock")
def _(s):
    d_model = s.h * s.d
    init = {"self_attention": _mha(d_model, s.h), "cross_attention": _mha(d_model, s.h),
            "d_model": d_model, "d_ff": 2 * d_model}
    calls = _module_calls(
        ed_mod.DecoderBlock, init,
        {"self_attention": Bad(), "cross_attention": Bad(), "d_model": SIZE, "d_ff": SIZE,
         "dropout": PROB, "activation": Bad("tanh", 3), "layer_norm_eps": Bad(0.0, "1e-5", None)},
        lambda mod, **kw: mod(kw.pop("tgt"), kw.pop("memory"), **kw),
        _decoder_inputs(s, d_model), DECODER_MASKS,
    )
    layer = nn.TransformerDecoderLayer(d_model, s.h, 2 * d_model, batch_first=True)
    calls.append(Call(ed_mod.DecoderBlock.from_torch,
                      {"layer": layer, "self_attention": _mha(d_model, s.h), "cross_attention": _mha(d_model, s.h)},
                      {"layer": NOT_A_MODULE, "self_attention": Bad()}, "from_torch"))
    return calls


@fuzz("architecture.encoder_decoder.Decoder")
def _(s):
    d_model = s.h * s.d
    return _module_calls(
        ed_mod.Decoder, {"layers": [_decoder_block(d_model, s.h)], "norm": nn.LayerNorm(d_model)},
        {"layers": Bad([]), "norm": Bad()},
        lambda mod, **kw: mod(kw.pop("tgt"), kw.pop("memory"), **kw),
        _decoder_inputs(s, d_model), DECODER_MASKS,
    )


@fuzz("architecture.encoder_decoder.EncoderDecoder")
def _(s):
    d_model = s.h * s.d
    encoder = ed_mod.Encoder([_block(d_model, s.h)])
    decoder = ed_mod.Decoder([_decoder_block(d_model, s.h)])
    calls = _module_calls(
        ed_mod.EncoderDecoder, {"encoder": encoder, "decoder": decoder},
        {"encoder": Bad(), "decoder": Bad()},
        lambda mod, **kw: mod(kw.pop("src"), kw.pop("tgt"), **kw),
        {"src": r(s.b, s.m, d_model), "tgt": r(s.b, s.n, d_model), "src_key_mask": ones(s.b, s.m),
         "tgt_key_mask": ones(s.b, s.n), "src_mask": ones(s.m, s.m), "tgt_mask": ones(s.n, s.n),
         "memory_mask": ones(s.n, s.m)},
        {"src": T(rank=3, tied=(0, 1, -1), names=("tgt", "src_key_mask", "src_mask", "memory_mask")),
         "tgt": T(rank=3, tied=(0, 1, -1), names=("src", "tgt_key_mask", "tgt_mask", "memory_mask")),
         "src_key_mask": KEY_MASK, "tgt_key_mask": KEY_MASK,
         "src_mask": T(MASK, min_rank=2, tied=(-2, -1), lead_fixed=True),
         "tgt_mask": T(MASK, min_rank=2, tied=(-2, -1), lead_fixed=True),
         "memory_mask": T(MASK, min_rank=2, tied=(-2, -1), lead_fixed=True)},
    )
    transformer = nn.Transformer(d_model, s.h, 1, 1, 2 * d_model, batch_first=True)
    calls.append(Call(ed_mod.EncoderDecoder.from_torch,
                      {"transformer": transformer, "attention": mha_mod.MultiHeadAttention.from_torch,
                       "encoder_layer": block_mod.TransformerBlock.from_torch},
                      {"transformer": Bad(), "attention": Bad(), "encoder_layer": Bad()},
                      "from_torch"))
    return calls


# ----------------------------------------------------------------------------


test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error = (
    fuzz_tests('architecture.')
)
