"""Malformed input for the foundations snippets: every public callable refuses it by name.

The framework (what makes an argument wrong, the sweep and the hypothesis test)
is in ``tests/fuzz_support.py``; this file registers one entry per public
callable of ``snippets/foundations/`` and collects the three tests over them.
"""

from __future__ import annotations

import math  # noqa: F401
import pytest  # noqa: F401
import torch
from torch import nn  # noqa: F401

from fuzz_support import *  # noqa: F401,F403
from fuzz_support import fuzz_tests
from snippets.foundations import devices as device_mod
from snippets.foundations import masks as masks_mod
from snippets.foundations import positional_encoding as pe_mod
from snippets.foundations import scaled_dot_product as sdpa_mod

# devices.py
# ----------------------------------------------------------------------------


@fuzz("foundations.devices.pick_device")
def _(s):
    return [Call(device_mod.pick_device, {"device": "cpu"}, {"device": Bad(3, "nonsense", "tpu:0", 2.5)})]


@fuzz("foundations.devices.default_dtype")
def _(s):
    return [Call(device_mod.default_dtype, {"device": "cpu"}, {"device": Bad(3, None, "nonsense")})]


# ----------------------------------------------------------------------------
# foundations
# ----------------------------------------------------------------------------



@fuzz("foundations.masks.causal_mask")
def _(s):
    return [Call(masks_mod.causal_mask, {"n_queries": s.n, "n_keys": s.m}, CAUSAL_MASK_SPECS)]


@fuzz("foundations.masks.padding_mask")
def _(s):
    lengths = torch.tensor([1] + [s.n] * (s.b - 1))
    return [Call(masks_mod.padding_mask, {"lengths": lengths, "max_len": s.n + 1},
                 {"lengths": T(INT, rank=1, device_peer=False), "max_len": Bad(s.n - 1, 2.5, True, "3")})]


@fuzz("foundations.masks.key_mask_to_attn_mask")
def _(s):
    return [Call(masks_mod.key_mask_to_attn_mask, {"key_mask": ones(s.b, s.m)},
                 {"key_mask": T(BOOL, rank=2, device_peer=False)})]


@fuzz("foundations.masks.combine_masks")
def _(s):
    return [Call(masks_mod.combine_masks, {"attn_mask": ones(s.b, s.h, s.n, s.m), "key_mask": ones(s.b, s.m)},
                 {"attn_mask": T(BOOL, min_rank=2, tied=(0, -1), lead_fixed=True),
                  "key_mask": T(BOOL, rank=2, tied=(0, 1))})]


@fuzz("foundations.masks.bool_to_additive")
def _(s):
    return [Call(masks_mod.bool_to_additive, {"mask": ones(s.n, s.m), "dtype": torch.float32},
                 {"mask": T(BOOL, device_peer=False), "dtype": FLOAT_DTYPE})]


@fuzz("foundations.masks.additive_to_bool")
def _(s):
    return [Call(masks_mod.additive_to_bool, {"mask": r(s.n, s.m)},
                 {"mask": T(dtype_peer=False, device_peer=False)})]


@fuzz("foundations.masks.to_mha_mask", "foundations.masks.from_mha_mask")
def _(s):
    calls = []
    for fn in (masks_mod.to_mha_mask, masks_mod.from_mha_mask):
        calls.append(Call(fn, {"mask": ones(s.n, s.m)}, {"mask": T(MASK, dtype_peer=False, device_peer=False)},
                          fn.__name__, fn.__name__))
    return calls


@fuzz("foundations.positional_encoding.sinusoidal_positional_encoding")
def _(s):
    return [Call(pe_mod.sinusoidal_positional_encoding, {"n_positions": s.n, "d_model": 2 * s.d, "start": 1},
                 {"n_positions": POS_INT, "d_model": Bad(0, 3, 2.5, True, "4"), "start": NONNEG_INT,
                  "base": Bad(0.5, -2.0, "1e4", None), "dtype": FLOAT_DTYPE})]


@fuzz("foundations.positional_encoding.offset_rotation")
def _(s):
    return [Call(pe_mod.offset_rotation, {"k": -3, "d_model": 2 * s.d},
                 {"d_model": Bad(0, 3, 2.5, True, "4"),
                  "base": Bad(0.5, "1e4", None), "dtype": FLOAT_DTYPE})]


@fuzz("foundations.positional_encoding.SinusoidalPositionalEncoding")
def _(s):
    d_model = 2 * s.d
    module = pe_mod.SinusoidalPositionalEncoding(d_model)
    return [
        Call(pe_mod.SinusoidalPositionalEncoding, {"d_model": d_model, "dropout": 0.1},
             {"d_model": Bad(0, 3, 2.5, "4"), "dropout": PROB, "base": Bad(0.5, "1e4", None)}, "init"),
        Call(lambda x, start=0: module(x, start=start), {"x": r(s.b, s.n, d_model), "start": 2},
             {"x": T(rank=3, tied=(-1,), dtype_peer=False, device_peer=False), "start": NONNEG_INT}, "forward"),
    ]


@fuzz("foundations.positional_encoding.LearnedPositionalEncoding")
def _(s):
    module = pe_mod.LearnedPositionalEncoding(s.n + 2, s.d)
    return [
        Call(pe_mod.LearnedPositionalEncoding, {"max_len": s.n, "d_model": s.d, "dropout": 0.1},
             {"max_len": POS_INT, "d_model": POS_INT, "dropout": PROB}, "init"),
        Call(lambda x, start=0: module(x, start=start), {"x": r(s.b, s.n, s.d), "start": 1},
             {"x": T(rank=3, tied=(-1,), dtype_peer=False), "start": Bad(-1, 2.5, True, 3)}, "forward"),
    ]






@fuzz("foundations.scaled_dot_product.scaled_dot_product_attention")
def _(s):
    specs = {**qkv_specs(), "dropout_p": Bad(-0.1, 1.0, "0.1", None, True),
             "scale": Bad(0.0, -1.0, float("nan"), float("inf"), "1", True)}
    mask_spec = T(MASK, tied=(-2, -1), lead_fixed=True)
    return [
        Call(sdpa_mod.scaled_dot_product_attention, {**qkv(s), "scale": 0.5}, specs, "no mask"),
        Call(sdpa_mod.scaled_dot_product_attention, {**qkv(s), "attn_mask": ones(s.h, s.n, s.m)},
             {"attn_mask": mask_spec}, "bool mask"),
        Call(sdpa_mod.scaled_dot_product_attention, {**qkv(s), "attn_mask": r(s.b, 1, s.n, s.m)},
             {"attn_mask": T(MASK, tied=(0, -2, -1), lead_fixed=True)}, "float mask"),
    ]


@fuzz("foundations.scaled_dot_product.causal_mask")
def _(s):
    return [Call(sdpa_mod.causal_mask, {"n_queries": s.n, "n_keys": s.m}, CAUSAL_MASK_SPECS)]


# ----------------------------------------------------------------------------


test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error = (
    fuzz_tests("foundations.")
)
