"""Malformed input, thrown by hypothesis at every public function and class of snippets/.

Each public callable (the names in a snippet module's ``__all__``) registers an
entry in ``FUZZ``: a function that builds one or more valid calls from a few
drawn sizes, and for each argument a rule that says what makes it wrong
(``T`` for a tensor, ``Bad`` for the values a number or an object must refuse).
Hypothesis picks a call, an argument and one way to break it (a wrong rank, a
leading or head dimension that no longer agrees with the other arguments, an
integer, boolean or mismatched float dtype, a tensor on another device, a
value that is not a tensor at all, a bad mask, an out-of-range number) and the
call must then raise ``ValueError`` or ``TypeError`` whose message names the
broken argument and says what it got. A ``RuntimeError``, ``IndexError`` or
``AttributeError`` from deep inside torch fails the test. Next to the random
draws, a deterministic sweep tries every way to break every argument once.

"Another device" is PyTorch's ``meta`` device, so the device checks run on a
machine with only a CPU. A new snippet must register here:
``test_every_public_callable_is_fuzzed`` fails until it does.
"""

from __future__ import annotations

import importlib
import pathlib
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn
from torch.nn.attention.flex_attention import create_block_mask

from snippets import device as device_mod
from snippets.architecture import block as block_mod
from snippets.architecture import encoder_decoder as ed_mod
from snippets.attention import alibi as alibi_mod
from snippets.attention import causal as causal_mod
from snippets.attention import co_attention as co_mod
from snippets.attention import common_mistakes as cm
from snippets.attention import cross_attention as cross_mod
from snippets.attention import grouped_query as gqa_mod
from snippets.attention import multi_head as mha_mod
from snippets.attention import naive_self_attention as naive_mod
from snippets.attention import rotary as rotary_mod
from snippets.attention import self_attention as self_mod
from snippets.distributed import context_parallel as cp_mod
from snippets.efficiency import flash_triton as ft_mod
from snippets.efficiency import flex_masks as flex_mod
from snippets.efficiency import kv_cache as kv_mod
from snippets.efficiency import linear_attention as linear_mod
from snippets.efficiency import paged_kv_cache as paged_mod
from snippets.efficiency import sliding_window as sliding_mod
from snippets.efficiency import static_cache as static_mod
from snippets.efficiency import tiled as tiled_mod
from snippets.foundations import masks as masks_mod
from snippets.foundations import positional_encoding as pe_mod
from snippets.foundations import scaled_dot_product as sdpa_mod
from snippets.history import additive as add_mod
from snippets.history import bert as bert_mod
from snippets.history import gpt as gpt_mod
from snippets.history import luong as luong_mod
from snippets.linear import delta_rule as delta_mod
from snippets.linear import gated_linear as gla_mod
from snippets.linear import hybrid_memory as hybrid_mod
from snippets.linear import sparse as sparse_mod
from snippets.linear import ssd as ssd_mod
from snippets.modern import (block as modern_block, cache_size as modern_cache, gates as modern_gates,
                             latent_attention as modern_mla, layer_patterns as modern_layers,
                             rope_scaling as modern_rope, sinks as modern_sinks)

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODULES = sorted(
    ".".join(p.relative_to(ROOT).with_suffix("").parts)
    for p in (ROOT / "snippets").rglob("*.py")
    if p.name != "__init__.py" and "__pycache__" not in p.parts
)
OTHER_DEVICE = torch.device("meta")  # a second device that every machine has
BIG = 7  # a size no drawn size reaches, so a dimension of BIG never matches or broadcasts


def public_callables() -> dict[str, Any]:
    """``"area.topic.name" -> object`` for every callable in each module's ``__all__``."""
    found = {}
    for name in MODULES:
        module = importlib.import_module(name)
        names = getattr(module, "__all__", None)
        if names is None:  # no __all__: every public name defined in the module itself
            names = [n for n, o in vars(module).items()
                     if not n.startswith("_") and getattr(o, "__module__", None) == name]
        for attr in names:
            obj = getattr(module, attr)
            if callable(obj):
                found[f"{name.removeprefix('snippets.')}.{attr}"] = obj
    return found


# ----------------------------------------------------------------------------
# What makes an argument wrong
# ----------------------------------------------------------------------------

FLOAT, MASK, BOOL, INT, ANY = "float", "mask", "bool", "int", "any"


@dataclass(frozen=True)
class T:
    """A tensor argument and the rules it must follow.

    kind: FLOAT (a floating tensor), MASK (bool, or the dtype of the floating
        inputs), BOOL, INT (integer ids) or ANY dtype.
    rank: the exact number of dimensions; None for "at least ``min_rank``"
        with leading dimensions that broadcast.
    tied: dimensions whose size another argument (or the module) fixes; the
        valid call gives each a size >= 2, so size + 1 never fits.
    lead_fixed: a new leading dimension of size BIG is wrong (a mask must
        broadcast to the scores, never enlarge them).
    dtype_peer / device_peer: another argument or the module's parameters fix
        the dtype / the device, so float64 / ``meta`` is wrong.
    high: for INT ids, the first id out of range (ids must lie in [0, high)).
    names: names a message may use for a mismatch (default: the argument's).
    """

    kind: str = FLOAT
    rank: int | None = None
    min_rank: int = 0
    tied: tuple[int, ...] = ()
    lead_fixed: bool = False
    dtype_peer: bool = True
    device_peer: bool = True
    high: int | None = None
    names: tuple[str, ...] = ()

    def mutations(self, value: torch.Tensor) -> list[tuple[str, Callable[[], Any]]]:
        out: list[tuple[str, Callable[[], Any]]] = [
            ("a nested list", lambda: value.tolist()),
            ("a string", lambda: "tensor"),
        ]
        wrong_dtypes = {
            FLOAT: [torch.int64, torch.int32, torch.bool] + ([torch.float64] if self.dtype_peer else []),
            MASK: [torch.int64, torch.uint8] + ([torch.float64] if self.dtype_peer else []),
            BOOL: [torch.int64, torch.float32, torch.uint8],
            INT: [torch.float32, torch.bool],
            ANY: [],
        }[self.kind]
        for dtype in wrong_dtypes:
            out.append((f"dtype {dtype}", lambda dtype=dtype: value.to(dtype)))
        if self.rank is not None:
            out.append(("one more dimension", lambda: torch.stack([value, value])))
            if value.dim() > 0:
                out.append(("one dimension fewer", lambda: value.select(0, 0)))
        elif self.min_rank > 0:
            out.append((f"fewer than {self.min_rank} dimensions",
                        lambda: value.flatten()[: value.shape[-1]] if self.min_rank > 1 else value.flatten()[0]))
        if self.lead_fixed:
            out.append((f"an extra leading dimension of {BIG}", lambda: value.expand(BIG, *value.shape)))
        for dim in self.tied:
            out.append((f"dimension {dim} one longer", lambda dim=dim: _grow(value, dim)))
        if self.device_peer:
            out.append(("another device", lambda: value.to(OTHER_DEVICE)))
        if self.high is not None:
            out.append(("an id out of range", lambda: _poke(value, self.high)))
            out.append(("a negative id", lambda: _poke(value, -1)))
        return out


def _grow(t: torch.Tensor, dim: int) -> torch.Tensor:
    """``t`` with one more entry along ``dim`` (a copy of the first)."""
    return torch.cat([t, t.narrow(dim, 0, 1)], dim)


def _poke(t: torch.Tensor, value: int) -> torch.Tensor:
    t = t.clone()
    t.view(-1)[0] = value
    return t


class Bad:
    """A non-tensor argument: the values that must be refused."""

    def __init__(self, *values: Any, names: tuple[str, ...] = ()) -> None:
        self.values, self.names = values, names

    def mutations(self, value: Any) -> list[tuple[str, Callable[[], Any]]]:
        return [(repr(v), lambda v=v: v) for v in self.values]


POS_INT = Bad(0, -1, 2.5, True, "2")  # an int >= 1
NONNEG_INT = Bad(-1, 2.5, True, "2")  # an int >= 0
PROB = Bad(-0.1, 1.0, 1.5, "0.1", None, True)  # a float in [0, 1)
POS_FLOAT = Bad(0.0, -1.0, float("nan"), float("inf"), "1", None, True)  # a float > 0
FLOAT_DTYPE = Bad(torch.int64, torch.bool, "float32", 3)  # a floating torch.dtype
NOT_A_MODULE = Bad(3, "module", None)


@dataclass
class Call:
    """One valid call: ``fn(**kwargs)`` works; ``specs`` says how each argument breaks."""

    fn: Callable[..., Any]
    kwargs: dict[str, Any]
    specs: dict[str, T | Bad]
    label: str = "call"
    target: str | None = None  # for a builder shared by several callables: whose call this is


FUZZ: dict[str, Callable[[SimpleNamespace], list[Call]]] = {}


def fuzz(*keys: str):
    """Register a builder of valid calls for one or more public callables.

    A builder shared by several callables marks each call with its ``target``
    (the callable's name); each callable is then fuzzed through its own calls.
    """

    def register(build):
        for key in keys:
            assert key not in FUZZ, key
            name = key.rsplit(".", 1)[1]
            FUZZ[key] = lambda s, build=build, name=name: [
                c for c in build(s) if c.target in (None, name)
            ]
        return build

    return register


def r(*shape: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


def ids(*shape: int, high: int) -> torch.Tensor:
    return torch.randint(high, shape)


def ones(*shape: int) -> torch.Tensor:
    return torch.ones(*shape, dtype=torch.bool)


# Tensor rules used over and over.
SEQ = T(rank=3, tied=(0, -1))  # (B, L, D): batch and width fixed by a peer
X_ONLY = T(rank=3, tied=(-1,))  # (B, N, D) into a module: its width is fixed
KEY_MASK = T(BOOL, rank=2, tied=(0, 1))  # (B, M), True = real key


# ----------------------------------------------------------------------------
# device.py
# ----------------------------------------------------------------------------


@fuzz("device.pick_device")
def _(s):
    return [Call(device_mod.pick_device, {"device": "cpu"}, {"device": Bad(3, "nonsense", "tpu:0", 2.5)})]


@fuzz("device.default_dtype")
def _(s):
    return [Call(device_mod.default_dtype, {"device": "cpu"}, {"device": Bad(3, None, "nonsense")})]


# ----------------------------------------------------------------------------
# foundations
# ----------------------------------------------------------------------------

CAUSAL_MASK_SPECS = {"n_queries": NONNEG_INT, "n_keys": NONNEG_INT}


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
                 {"k": Bad(2.5, True, "1", None), "d_model": Bad(0, 3, 2.5, True, "4"),
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


def qkv_specs(*, lead_tied=(0, 1)) -> dict[str, T]:
    """q (B, H, N, d), k (B, H, M, d), v (B, H, M, d_v) for functions with broadcasting leading dims."""
    return {
        "q": T(min_rank=2, tied=lead_tied + (-1,)),
        "k": T(min_rank=2, tied=lead_tied + (-2, -1)),
        "v": T(min_rank=2, tied=lead_tied + (-2,)),
    }


def qkv(s, *, d_v=None) -> dict[str, torch.Tensor]:
    return {"q": r(s.b, s.h, s.n, s.d), "k": r(s.b, s.h, s.m, s.d), "v": r(s.b, s.h, s.m, d_v or s.d + 1)}


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
# attention
# ----------------------------------------------------------------------------


@fuzz("attention.alibi.alibi_slopes")
def _(s):
    return [Call(alibi_mod.alibi_slopes, {"n_heads": s.h}, {"n_heads": POS_INT, "dtype": FLOAT_DTYPE})]


@fuzz("attention.alibi.alibi_bias")
def _(s):
    return [Call(alibi_mod.alibi_bias, {"slopes": alibi_mod.alibi_slopes(s.h), "n_queries": s.n, "n_keys": s.m + s.n},
                 {"slopes": T(rank=1, dtype_peer=False, device_peer=False),
                  "n_queries": NONNEG_INT, "n_keys": Bad(-1, 2.5, True, "3", 0)})]


@fuzz("attention.alibi.alibi_attention")
def _(s):
    m = s.n + s.m  # causal: N <= M
    return [Call(alibi_mod.alibi_attention,
                 {"q": r(s.b, s.h, s.n, s.d), "k": r(s.b, s.h, m, s.d), "v": r(s.b, s.h, m, s.d + 1),
                  "slopes": alibi_mod.alibi_slopes(s.h)},
                 {"q": T(rank=4, tied=(0, 1, 3)), "k": T(rank=4, tied=(0, 1, 2, 3)), "v": T(rank=4, tied=(0, 1, 2)),
                  "slopes": T(rank=1, tied=(0,), dtype_peer=False, device_peer=False)})]


def _module_calls(cls, init_kwargs, init_specs, forward, forward_kwargs, forward_specs):
    """A call of the constructor and a call of ``forward(module, **kwargs)`` on a built module."""
    module = cls(**init_kwargs).eval()
    return [Call(cls, dict(init_kwargs), init_specs, "init"),
            Call(lambda **kw: forward(module, **kw), forward_kwargs, forward_specs, "forward")]


@fuzz("attention.causal.CausalSelfAttention")
def _(s):
    d_model = s.h * s.d
    return _module_calls(
        causal_mod.CausalSelfAttention, {"d_model": d_model, "d_k": s.d, "d_v": s.d + 1, "dropout": 0.1},
        {"d_model": POS_INT, "d_k": POS_INT, "d_v": POS_INT, "dropout": PROB},
        lambda mod, **kw: mod(kw.pop("x"), **kw),
        {"x": r(s.b, s.n, d_model), "key_mask": ones(s.b, s.n)},
        {"x": T(rank=3, tied=(0, 1, -1), names=("key_mask",)), "key_mask": KEY_MASK},
    )


@fuzz("attention.causal.causal_mask")
def _(s):
    return [Call(causal_mod.causal_mask, {"n_queries": s.n, "n_keys": s.m}, CAUSAL_MASK_SPECS)]


@fuzz("attention.self_attention.SelfAttention")
def _(s):
    d_model = s.h * s.d
    return _module_calls(
        self_mod.SelfAttention, {"d_model": d_model, "d_k": s.d, "d_v": s.d + 1},
        {"d_model": POS_INT, "d_k": POS_INT, "d_v": POS_INT},
        lambda mod, **kw: mod(kw.pop("x"), **kw),
        {"x": r(s.b, s.n, d_model), "attn_mask": ones(s.n, s.n)},
        {"x": T(rank=3, tied=(1, -1), names=("attn_mask",)),
         "attn_mask": T(MASK, tied=(-2, -1), lead_fixed=True)},
    )


@fuzz("attention.naive_self_attention.naive_self_attention")
def _(s):
    return [Call(naive_mod.naive_self_attention, {"x": r(s.b, s.n, s.d)},
                 {"x": T(rank=3, dtype_peer=False, device_peer=False)})]


@fuzz("attention.naive_self_attention.NaiveSelfAttention")
def _(s):
    module = naive_mod.NaiveSelfAttention()
    return [Call(lambda x: module(x), {"x": r(s.b, s.n, s.d)}, {"x": T(rank=3, dtype_peer=False, device_peer=False)})]


@fuzz("attention.cross_attention.CrossAttention")
def _(s):
    d_model, d_context = s.h * s.d, s.d + 1
    return _module_calls(
        cross_mod.CrossAttention, {"d_model": d_model, "d_context": d_context, "d_k": s.d, "dropout": 0.1},
        {"d_model": POS_INT, "d_context": POS_INT, "d_k": POS_INT, "d_v": POS_INT, "dropout": PROB},
        lambda mod, **kw: mod(kw.pop("x"), kw.pop("context"), **kw),
        {"x": r(s.b, s.n, d_model), "context": r(s.b, s.m, d_context), "key_mask": ones(s.b, s.m)},
        {"x": T(rank=3, tied=(0, -1), names=("context",)), "context": T(rank=3, tied=(0, 1, -1), names=("key_mask",)),
         "key_mask": KEY_MASK},
    )


def _attention_module(cls, init_kwargs, init_specs, s, *, kdim, vdim):
    d_model = init_kwargs["d_model"]
    base = {"query": r(s.b, s.n, d_model), "key": r(s.b, s.m, kdim), "value": r(s.b, s.m, vdim)}
    forward = lambda mod, **kw: mod(kw.pop("query"), kw.pop("key", None), kw.pop("value", None), **kw)  # noqa: E731
    qkv_spec = {
        "query": T(rank=3, tied=(0, -1), names=("key", "value")),
        "key": T(rank=3, tied=(0, 1, -1), names=("query", "value", "key_mask")),
        "value": T(rank=3, tied=(0, 1, -1), names=("query", "key")),
    }
    calls = _module_calls(cls, init_kwargs, init_specs, forward, base, qkv_spec)
    module = cls(**init_kwargs).eval()
    masked = {**base, "attn_mask": ones(s.n, s.m), "key_mask": ones(s.b, s.m), "is_causal": False,
              "need_weights": True}
    calls.append(Call(lambda **kw: forward(module, **kw), masked,
                      {"attn_mask": T(MASK, min_rank=2, tied=(-2, -1), lead_fixed=True), "key_mask": KEY_MASK},
                      "masks"))
    float_mask = {**base, "attn_mask": r(s.b, 1, s.n, s.m)}
    calls.append(Call(lambda **kw: forward(module, **kw), float_mask,
                      {"attn_mask": T(MASK, min_rank=2, tied=(0, -2, -1), lead_fixed=True)}, "float mask"))
    return calls


@fuzz("attention.multi_head.MultiHeadAttention")
def _(s):
    d_model = s.h * s.d
    init = {"d_model": d_model, "n_heads": s.h, "dropout": 0.1, "kdim": s.d + 1, "vdim": s.d + 2}
    specs = {"d_model": POS_INT, "n_heads": Bad(0, -1, 2.5, True, "2", d_model + 1), "dropout": PROB,
             "kdim": POS_INT, "vdim": POS_INT}
    calls = _attention_module(mha_mod.MultiHeadAttention, init, specs, s, kdim=s.d + 1, vdim=s.d + 2)
    mha = nn.MultiheadAttention(d_model, s.h, batch_first=True)
    calls.append(Call(mha_mod.MultiHeadAttention.from_torch, {"mha": mha}, {"mha": NOT_A_MODULE}, "from_torch"))
    return calls


@fuzz("attention.grouped_query.GroupedQueryAttention")
def _(s):
    d_model = 4 * s.d
    init = {"d_model": d_model, "n_heads": 4, "n_kv_heads": 2, "dropout": 0.1}
    specs = {"d_model": POS_INT, "n_heads": POS_INT, "n_kv_heads": Bad(0, 3, 2.5, True, "2"), "dropout": PROB}
    calls = _attention_module(gqa_mod.GroupedQueryAttention, init, specs, s, kdim=d_model, vdim=d_model)
    mha = nn.MultiheadAttention(d_model, 4, batch_first=True)
    calls.append(Call(gqa_mod.GroupedQueryAttention.from_torch, {"mha": mha, "n_kv_heads": 2},
                      {"mha": NOT_A_MODULE, "n_kv_heads": Bad(0, 3, 2.5, "2")}, "from_torch"))
    return calls


@fuzz("attention.grouped_query.repeat_kv")
def _(s):
    return [Call(gqa_mod.repeat_kv, {"x": r(s.b, s.h, s.m, s.d), "n_rep": 2},
                 {"x": T(ANY, rank=4, device_peer=False), "n_rep": POS_INT})]


@fuzz("attention.rotary.rotary_cache")
def _(s):
    return [Call(rotary_mod.rotary_cache, {"n_positions": s.n, "d_head": 2 * s.d},
                 {"n_positions": NONNEG_INT, "d_head": Bad(0, 3, 2.5, True, "4"),
                  "base": Bad(1.0, -2.0, "1e4", None), "dtype": FLOAT_DTYPE})]


@fuzz("attention.rotary.apply_rotary")
def _(s):
    cos, sin = rotary_mod.rotary_cache(s.n + 3, 2 * s.d)
    x = r(s.b, s.h, s.n, 2 * s.d)
    table = T(rank=2, tied=(1,), dtype_peer=False, names=("cos", "sin"))
    return [
        Call(rotary_mod.apply_rotary, {"x": x, "cos": cos, "sin": sin},
             {"x": T(min_rank=2, tied=(-1,), dtype_peer=False, names=("cos", "sin")), "cos": table, "sin": table}),
        Call(rotary_mod.apply_rotary, {"x": x, "cos": cos, "sin": sin, "positions": ids(s.b, s.n, high=s.n + 3)},
             {"positions": T(INT, min_rank=1, tied=(0, 1), high=s.n + 3)}, "positions"),
    ]


@fuzz("attention.rotary.RotaryEmbedding")
def _(s):
    return _module_calls(
        rotary_mod.RotaryEmbedding, {"d_head": 2 * s.d},
        {"d_head": Bad(0, 3, 2.5, True, "4"), "base": Bad(1.0, "1e4", None)},
        lambda mod, **kw: mod(kw.pop("q"), kw.pop("k"), **kw),
        {"q": r(s.b, s.h, s.n, 2 * s.d), "k": r(s.b, 1, s.n + s.m, 2 * s.d), "offset": 1},
        {"q": T(min_rank=2, tied=(-1,), names=("k",)), "k": T(min_rank=2, tied=(-1,), names=("q",)),
         "offset": NONNEG_INT},
    )


@fuzz("attention.co_attention.ParallelCoAttention")
def _(s):
    init = {"d_model": s.d, "d_hidden": s.d + 1}
    calls = _module_calls(
        co_mod.ParallelCoAttention, init, {"d_model": POS_INT, "d_hidden": POS_INT},
        lambda mod, **kw: mod(kw.pop("question"), kw.pop("image"), **kw),
        {"question": r(s.b, s.n, s.d), "image": r(s.b, s.m, s.d), "question_mask": ones(s.b, s.n),
         "image_mask": ones(s.b, s.m)},
        {"question": T(rank=3, tied=(0, 1, -1), names=("image", "question_mask")),
         "image": T(rank=3, tied=(0, 1, -1), names=("question", "image_mask")),
         "question_mask": KEY_MASK, "image_mask": KEY_MASK},
    )
    module = co_mod.ParallelCoAttention(**init)
    calls.append(Call(lambda question, image: module.affinity(question, image),
                      {"question": r(s.b, s.n, s.d), "image": r(s.b, s.m, s.d)},
                      {"question": T(rank=3, tied=(0, -1), names=("image",)),
                       "image": T(rank=3, tied=(0, -1), names=("question",))}, "affinity"))
    return calls


@fuzz("attention.co_attention.GuidedAttention")
def _(s):
    return _module_calls(
        co_mod.GuidedAttention, {"d_model": s.d, "d_hidden": s.d + 1},
        {"d_model": POS_INT, "d_hidden": POS_INT},
        lambda mod, **kw: mod(kw.pop("x"), kw.pop("g"), **kw),
        {"x": r(s.b, s.n, s.d), "g": r(s.b, s.d), "x_mask": ones(s.b, s.n)},
        {"x": T(rank=3, tied=(0, 1, -1), names=("g", "x_mask")), "g": T(rank=2, tied=(0, 1), names=("x",)),
         "x_mask": KEY_MASK},
    )


@fuzz("attention.co_attention.AlternatingCoAttention")
def _(s):
    return _module_calls(
        co_mod.AlternatingCoAttention, {"d_model": s.d, "d_hidden": s.d + 1},
        {"d_model": POS_INT, "d_hidden": POS_INT},
        lambda mod, **kw: mod(kw.pop("question"), kw.pop("image"), **kw),
        {"question": r(s.b, s.n, s.d), "image": r(s.b, s.m, s.d), "question_mask": ones(s.b, s.n),
         "image_mask": ones(s.b, s.m)},
        {"question": T(rank=3, tied=(0, 1, -1), names=("image", "question_mask")),
         "image": T(rank=3, tied=(0, 1, -1), names=("question", "image_mask")),
         "question_mask": KEY_MASK, "image_mask": KEY_MASK},
    )


QK_SPECS = {"q": T(min_rank=2, tied=(0, 1, -1), names=("k",)), "k": T(min_rank=2, tied=(0, 1, -1), names=("q",))}


@fuzz("attention.common_mistakes.weights_wrong_axis", "attention.common_mistakes.weights_right_axis",
      "attention.common_mistakes.weights_unscaled", "attention.common_mistakes.weights_scaled")
def _(s):
    fns = (cm.weights_wrong_axis, cm.weights_right_axis, cm.weights_unscaled, cm.weights_scaled)
    return [Call(fn, {"q": r(s.b, s.h, s.n, s.d), "k": r(s.b, s.h, s.m, s.d)}, QK_SPECS, fn.__name__, fn.__name__)
            for fn in fns]


@fuzz("attention.common_mistakes.self_attention_wrong_value", "attention.common_mistakes.self_attention")
def _(s):
    w = T(rank=2, tied=(0, 1), names=("x",))
    return [Call(fn, {"x": r(s.b, s.n, s.d), "w_q": r(s.d, s.d), "w_k": r(s.d, s.d), "w_v": r(s.d, s.d)},
                 {"x": T(rank=3, tied=(-1,), names=("w_q", "w_k", "w_v")), "w_q": w, "w_k": w, "w_v": w},
                 fn.__name__, fn.__name__)
            for fn in (cm.self_attention_wrong_value, cm.self_attention)]


@fuzz("attention.common_mistakes.masked_attention_wrong", "attention.common_mistakes.masked_attention")
def _(s):
    allowed = T(BOOL, tied=(-2, -1), lead_fixed=True)
    return [Call(fn, {**qkv(s), "allowed": ones(s.n, s.m)}, {**qkv_specs(), "allowed": allowed},
                 fn.__name__, fn.__name__)
            for fn in (cm.masked_attention_wrong, cm.masked_attention)]


@fuzz("attention.common_mistakes.mha_masked_wrong", "attention.common_mistakes.mha_masked")
def _(s):
    d_model = s.h * s.d
    mha = nn.MultiheadAttention(d_model, s.h, batch_first=True)
    return [Call(fn, {"mha": mha, "x": r(s.b, s.n, d_model), "allowed": ones(s.n, s.n)},
                 {"mha": NOT_A_MODULE, "x": T(rank=3, tied=(1, -1), names=("allowed", "mha")),
                  "allowed": T(BOOL, rank=2, tied=(0, 1))}, fn.__name__, fn.__name__)
            for fn in (cm.mha_masked_wrong, cm.mha_masked)]


@fuzz("attention.common_mistakes.cached_decode_wrong", "attention.common_mistakes.cached_decode",
      "attention.common_mistakes.cached_decode_bias")
def _(s):
    base = {"q": r(s.b, s.h, 1, s.d), "k": r(s.b, s.h, s.m, s.d), "v": r(s.b, s.h, s.m, s.d)}
    return [Call(fn, dict(base), qkv_specs(), fn.__name__, fn.__name__)
            for fn in (cm.cached_decode_wrong, cm.cached_decode, cm.cached_decode_bias)]


@fuzz("attention.common_mistakes.DropoutAttentionWrong", "attention.common_mistakes.DropoutAttention")
def _(s):
    calls = []
    for cls in (cm.DropoutAttentionWrong, cm.DropoutAttention):
        for call in _module_calls(cls, {"dropout": 0.1}, {"dropout": PROB},
                                  lambda mod, **kw: mod(kw.pop("q"), kw.pop("k"), kw.pop("v")), qkv(s), qkv_specs()):
            call.target = cls.__name__
            calls.append(call)
    return calls


@fuzz("attention.common_mistakes.masked_weights_wrong", "attention.common_mistakes.masked_weights",
      "attention.common_mistakes.masked_weights_finfo_min")
def _(s):
    return [Call(fn, {"scores": r(s.b, s.n, s.m), "allowed": ones(s.n, s.m)},
                 {"scores": T(min_rank=1, tied=(-2, -1), dtype_peer=False, device_peer=True, names=("allowed",)),
                  "allowed": T(BOOL, tied=(-2, -1), lead_fixed=True)}, fn.__name__, fn.__name__)
            for fn in (cm.masked_weights_wrong, cm.masked_weights, cm.masked_weights_finfo_min)]


@fuzz("attention.common_mistakes.mha_self_attend_wrong", "attention.common_mistakes.mha_self_attend")
def _(s):
    d_model = s.h * s.d
    mha = nn.MultiheadAttention(d_model, s.h)
    return [Call(fn, {"mha": mha, "x": r(s.b, s.n, d_model)},
                 {"mha": NOT_A_MODULE, "x": T(rank=3, tied=(-1,), names=("mha",))}, fn.__name__, fn.__name__)
            for fn in (cm.mha_self_attend_wrong, cm.mha_self_attend)]


# ----------------------------------------------------------------------------
# architecture
# ----------------------------------------------------------------------------


def _mha(d_model, h):
    return mha_mod.MultiHeadAttention(d_model, h)


@fuzz("architecture.block.TorchAttention")
def _(s):
    d_model = s.h * s.d
    mha = nn.MultiheadAttention(d_model, s.h, batch_first=True)
    module = block_mod.TorchAttention(mha)
    return [
        Call(block_mod.TorchAttention, {"mha": mha}, {"mha": NOT_A_MODULE}, "init"),
        Call(lambda x, **kw: module(x, **kw),
             {"x": r(s.b, s.n, d_model), "attn_mask": ones(s.n, s.n), "key_mask": ones(s.b, s.n)},
             {"x": T(rank=3, tied=(0, 1, -1), names=("attn_mask", "key_mask")),
              "attn_mask": T(MASK, rank=2, tied=(0, 1)), "key_mask": KEY_MASK}, "forward"),
    ]


@fuzz("architecture.block.TransformerBlock")
def _(s):
    d_model = s.h * s.d
    init = {"attention": _mha(d_model, s.h), "d_model": d_model, "d_ff": 2 * d_model, "dropout": 0.1}
    calls = _module_calls(
        block_mod.TransformerBlock, init,
        {"attention": NOT_A_MODULE, "d_model": POS_INT, "d_ff": POS_INT, "dropout": PROB,
         "activation": Bad("tanh", 3, None), "layer_norm_eps": Bad(0.0, -1e-5, "1e-5", None)},
        lambda mod, **kw: mod(kw.pop("x"), **kw),
        {"x": r(s.b, s.n, d_model), "key_mask": ones(s.b, s.n)},
        {"x": T(rank=3, tied=(-1,), names=("key_mask",)), "key_mask": KEY_MASK},
    )
    layer = nn.TransformerEncoderLayer(d_model, s.h, 2 * d_model, batch_first=True)
    calls.append(Call(block_mod.TransformerBlock.from_torch, {"layer": layer},
                      {"layer": NOT_A_MODULE, "attention": Bad(3, "attention")}, "from_torch"))
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
        {"layers": Bad([], [3], 3, nn.Linear(2, 2)), "norm": Bad(3, "norm")},
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
        {"self_attention": NOT_A_MODULE, "cross_attention": NOT_A_MODULE, "d_model": POS_INT, "d_ff": POS_INT,
         "dropout": PROB, "activation": Bad("tanh", 3), "layer_norm_eps": Bad(0.0, "1e-5", None)},
        lambda mod, **kw: mod(kw.pop("tgt"), kw.pop("memory"), **kw),
        _decoder_inputs(s, d_model), DECODER_MASKS,
    )
    layer = nn.TransformerDecoderLayer(d_model, s.h, 2 * d_model, batch_first=True)
    calls.append(Call(ed_mod.DecoderBlock.from_torch,
                      {"layer": layer, "self_attention": _mha(d_model, s.h), "cross_attention": _mha(d_model, s.h)},
                      {"layer": NOT_A_MODULE, "self_attention": NOT_A_MODULE}, "from_torch"))
    return calls


@fuzz("architecture.encoder_decoder.Decoder")
def _(s):
    d_model = s.h * s.d
    return _module_calls(
        ed_mod.Decoder, {"layers": [_decoder_block(d_model, s.h)], "norm": nn.LayerNorm(d_model)},
        {"layers": Bad([], [3], 3), "norm": Bad(3, "norm")},
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
        {"encoder": NOT_A_MODULE, "decoder": NOT_A_MODULE},
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
                      {"transformer": NOT_A_MODULE, "attention": Bad(3, None), "encoder_layer": Bad(3, None)},
                      "from_torch"))
    return calls


# ----------------------------------------------------------------------------
# efficiency
# ----------------------------------------------------------------------------


@fuzz("efficiency.kv_cache.kv_cache_bytes")
def _(s):
    return [Call(kv_mod.kv_cache_bytes, {"batch": s.b, "seq_len": s.m, "n_layers": 2, "n_kv_heads": s.h, "d_head": s.d},
                 {"batch": NONNEG_INT, "seq_len": NONNEG_INT, "n_layers": NONNEG_INT, "n_kv_heads": NONNEG_INT,
                  "d_head": NONNEG_INT, "dtype": Bad("float16", 2, None)})]


@fuzz("efficiency.kv_cache.KVCache")
def _(s):
    init = {"n_layers": 2, "batch": s.b, "n_kv_heads": s.h, "d_head": s.d, "max_len": s.n + s.m}
    k_spec = T(rank=4, tied=(0, 1, 3), names=("v",))
    return [
        Call(kv_mod.KVCache, init, {"n_layers": POS_INT, "batch": POS_INT, "n_kv_heads": POS_INT,
                                    "d_head": POS_INT, "max_len": POS_INT, "dtype": FLOAT_DTYPE}, "init"),
        Call(lambda **kw: kv_mod.KVCache(**init).update(**kw),
             {"layer": 1, "k": r(s.b, s.h, s.n, s.d), "v": r(s.b, s.h, s.n, s.d)},
             {"layer": Bad(2, -1, 1.0, True, "0"), "k": k_spec, "v": T(rank=4, tied=(0, 1, 2, 3), names=("k",))},
             "update"),
    ]


@fuzz("efficiency.kv_cache.CachedSelfAttention")
def _(s):
    d_model = 4 * s.d
    module = kv_mod.CachedSelfAttention(d_model, 4, 2)
    return [
        Call(kv_mod.CachedSelfAttention, {"d_model": d_model, "n_heads": 4, "n_kv_heads": 2},
             {"d_model": POS_INT, "n_heads": Bad(0, 3, 2.5, True), "n_kv_heads": Bad(0, 3, 2.5, "2")}, "init"),
        Call(lambda x: module(x), {"x": r(s.b, s.n, d_model)}, {"x": X_ONLY}, "forward"),
        Call(lambda x, cache, layer: module(x, cache, layer),
             {"x": r(s.b, s.n, d_model), "cache": kv_mod.KVCache(2, s.b, 2, s.d, s.n + 1), "layer": 1},
             {"x": T(rank=3, tied=(0, -1), names=("cache",)), "cache": Bad(3, "cache", [1]),
              "layer": Bad(2, -1, 1.5, True)}, "cached"),
    ]


def _tiny_decoder(s):
    return kv_mod.TinyDecoder(11, 4 * s.d, 2, 1, max_len=s.n + s.m).eval()


@fuzz("efficiency.kv_cache.TinyDecoder")
def _(s):
    module = _tiny_decoder(s)
    return [
        Call(kv_mod.TinyDecoder, {"vocab_size": 11, "d_model": 2 * s.d, "n_heads": 2, "n_layers": 1},
             {"vocab_size": POS_INT, "d_model": POS_INT, "n_heads": Bad(0, 3, 2.5), "n_layers": POS_INT,
              "n_kv_heads": Bad(0, 3, 2.5), "max_len": POS_INT}, "init"),
        Call(lambda tokens: module(tokens), {"tokens": ids(s.b, s.n, high=11)},
             {"tokens": T(INT, rank=2, high=11)}, "forward"),
    ]


@fuzz("efficiency.kv_cache.generate")
def _(s):
    return [Call(kv_mod.generate, {"model": _tiny_decoder(s), "prompt": ids(s.b, s.n, high=11), "n_new": 2},
                 {"model": NOT_A_MODULE, "prompt": T(INT, rank=2, high=11), "n_new": NONNEG_INT})]


@fuzz("efficiency.linear_attention.feature_map")
def _(s):
    return [Call(linear_mod.feature_map, {"x": r(s.b, s.n, s.d)}, {"x": T(dtype_peer=False, device_peer=False)})]


@fuzz("efficiency.linear_attention.linear_attention")
def _(s):
    return [Call(linear_mod.linear_attention, {**qkv(s), "causal": causal}, {**qkv_specs(), "eps": Bad(-1.0, "x", None)},
                 f"causal={causal}") for causal in (False, True)]


@fuzz("efficiency.linear_attention.linear_attention_step")
def _(s):
    base = {"q": r(s.b, s.h, s.d), "k": r(s.b, s.h, s.d), "v": r(s.b, s.h, s.d + 1)}
    state = (r(s.b, s.h, s.d, s.d + 1), r(s.b, s.h, s.d))
    step_specs = {"q": T(min_rank=1, tied=(0, 1, 2), names=("k", "v")),
                  "k": T(min_rank=1, tied=(0, 1, 2), names=("q", "v")),
                  "v": T(min_rank=1, tied=(0, 1), names=("q", "k")), "eps": Bad(-1.0, "x", None)}
    return [
        Call(linear_mod.linear_attention_step, dict(base), step_specs, "first step"),
        Call(linear_mod.linear_attention_step, {**base, "state": state},
             {"state": Bad(3, "state", (1, 2), (state[0],), (state[0].double(), state[1]),
                           (state[0], state[1].to(OTHER_DEVICE)), (state[0], state[1][:, :1]))}, "with state"),
    ]


@fuzz("efficiency.sliding_window.sliding_window_mask")
def _(s):
    return [Call(sliding_mod.sliding_window_mask, {"n": s.n, "window": 2},
                 {"n": NONNEG_INT, "window": POS_INT})]


@fuzz("efficiency.sliding_window.sliding_window_attention")
def _(s):
    base = {"q": r(s.b, s.h, s.n, s.d), "k": r(s.b, s.h, s.n, s.d), "v": r(s.b, s.h, s.n, s.d + 1), "window": 2}
    specs = {"q": T(min_rank=2, tied=(0, 1, -2, -1)), "k": T(min_rank=2, tied=(0, 1, -2, -1)),
             "v": T(min_rank=2, tied=(0, 1, -2)), "window": POS_INT, "chunk_size": POS_INT}
    return [Call(sliding_mod.sliding_window_attention, base, specs)]


@fuzz("efficiency.tiled.online_softmax")
def _(s):
    return [Call(tiled_mod.online_softmax, {"x": r(s.b, s.n, s.m), "block_size": 2},
                 {"x": T(min_rank=1, dtype_peer=False, device_peer=False), "block_size": POS_INT})]


@fuzz("efficiency.tiled.tiled_attention")
def _(s):
    specs = {**qkv_specs(), "block_size_k": POS_INT, "block_size_q": POS_INT,
             "scale": Bad(0.0, -1.0, float("nan"), "1", True)}
    return [Call(tiled_mod.tiled_attention, {**qkv(s), "block_size_k": 2, "block_size_q": 2, "is_causal": True},
                 specs)]


# ----------------------------------------------------------------------------
# history
# ----------------------------------------------------------------------------


@fuzz("history.additive.AdditiveAttention")
def _(s):
    init = {"query_dim": s.d, "key_dim": s.d + 1, "attn_dim": s.d + 2}
    module = add_mod.AdditiveAttention(**init)
    keys = r(s.b, s.m, s.d + 1)
    calls = _module_calls(
        add_mod.AdditiveAttention, init, {"query_dim": POS_INT, "key_dim": POS_INT, "attn_dim": POS_INT},
        lambda mod, **kw: mod(kw.pop("query"), kw.pop("keys"), **kw),
        {"query": r(s.b, s.n, s.d), "keys": keys, "key_mask": ones(s.b, s.m),
         "projected_keys": module.project_keys(keys).detach()},
        {"query": T(rank=3, tied=(0, -1), names=("keys",)),
         "keys": T(rank=3, tied=(0, 1, -1), names=("query", "key_mask", "projected_keys")),
         "key_mask": KEY_MASK, "projected_keys": T(rank=3, tied=(0, 1, 2), names=("keys",))},
    )
    return calls


def _src(s, vocab=13):
    src = ids(s.b, s.m, high=vocab - 3) + 3
    return src, ones(s.b, s.m)


@fuzz("history.additive.BahdanauEncoder")
def _(s):
    src, mask = _src(s)
    return _module_calls(
        add_mod.BahdanauEncoder, {"vocab_size": 13, "emb_dim": s.d, "hidden_size": s.d},
        {"vocab_size": POS_INT, "emb_dim": POS_INT, "hidden_size": POS_INT, "padding_idx": Bad(13, 2.5, "0")},
        lambda mod, **kw: mod(kw.pop("src"), kw.pop("key_mask")),
        {"src": src, "key_mask": mask},
        {"src": T(INT, rank=2, tied=(0, 1), high=13, names=("key_mask",)), "key_mask": KEY_MASK},
    )


@fuzz("history.additive.BahdanauSeq2Seq")
def _(s):
    init = {"src_vocab": 13, "tgt_vocab": 13, "emb_dim": s.d, "hidden_size": s.d, "attn_dim": s.d}
    module = add_mod.BahdanauSeq2Seq(**init).eval()
    src, mask = _src(s)
    src_specs = {"src": T(INT, rank=2, tied=(0, 1), high=13, names=("src_mask", "tgt_in")),
                 "src_mask": KEY_MASK}
    return [
        Call(add_mod.BahdanauSeq2Seq, init, {"src_vocab": POS_INT, "tgt_vocab": POS_INT, "emb_dim": POS_INT,
                                             "hidden_size": POS_INT, "attn_dim": POS_INT}, "init"),
        Call(lambda **kw: module(kw.pop("src"), kw.pop("tgt_in"), **kw),
             {"src": src, "tgt_in": ids(s.b, s.n, high=13), "src_mask": mask},
             {**src_specs, "tgt_in": T(INT, rank=2, tied=(0,), high=13, names=("src",))}, "forward"),
        Call(lambda **kw: module.greedy_decode(kw.pop("src"), kw.pop("max_len"), **kw),
             {"src": src, "max_len": 2, "src_mask": mask}, {**src_specs, "max_len": NONNEG_INT}, "greedy_decode"),
    ]


@fuzz("history.additive.reversal_batch")
def _(s):
    return [Call(add_mod.reversal_batch, {"batch_size": s.b, "min_len": 1, "max_len": s.n, "rng": random.Random(0)},
                 {"batch_size": POS_INT, "min_len": POS_INT, "max_len": Bad(0, 2.5, "3"), "rng": Bad(0, None, "rng")})]


def _seq2seq():
    return add_mod.BahdanauSeq2Seq(13, 13, emb_dim=4, hidden_size=4, attn_dim=4)


@fuzz("history.additive.train_toy_translation")
def _(s):
    return [Call(add_mod.train_toy_translation,
                 {"model": _seq2seq(), "steps": 1, "batch_size": 2, "min_len": 1, "max_len": 2},
                 {"model": NOT_A_MODULE, "steps": NONNEG_INT, "batch_size": POS_INT, "min_len": POS_INT,
                  "max_len": Bad(0, 2.5, "3"), "lr": POS_FLOAT, "seed": Bad(2.5, "0", None)})]


@fuzz("history.additive.accuracy_by_length")
def _(s):
    return [Call(add_mod.accuracy_by_length, {"model": _seq2seq(), "lengths": [1, 2], "n_per_length": 2},
                 {"model": NOT_A_MODULE, "lengths": Bad(3, [0], [2.5], "12", [True]), "n_per_length": POS_INT,
                  "seed": Bad(2.5, "0", None)})]


@fuzz("history.luong.LuongAttention")
def _(s):
    calls = []
    for score, window in (("general", None), ("dot", 1), ("concat", 2)):
        calls += _module_calls(
            luong_mod.LuongAttention, {"d_model": s.d, "score": score, "window": window},
            {"d_model": POS_INT, "score": Bad("cosine", 3, None), "window": Bad(0, 2.5, True, "1")},
            lambda mod, **kw: mod(kw.pop("query"), kw.pop("keys"), **kw),
            {"query": r(s.b, s.n, s.d), "keys": r(s.b, s.m, s.d), "key_mask": ones(s.b, s.m)},
            {"query": T(rank=3, tied=(0, -1), names=("keys",)),
             "keys": T(rank=3, tied=(0, 1, -1), names=("query", "key_mask")), "key_mask": KEY_MASK},
        )
    return calls


def _bert_config(s, **kw):
    return bert_mod.BertConfig(vocab_size=20, d_model=4 * s.d, n_layers=1, n_heads=2, d_ff=8, max_len=s.n + 2, **kw)


def _bert_block(c):
    return block_mod.TransformerBlock(mha_mod.MultiHeadAttention(c.d_model, c.n_heads), c.d_model, c.d_ff,
                                      norm_first=False)


@fuzz("history.bert.SpecialTokens")
def _(s):
    return [Call(bert_mod.SpecialTokens, {"pad": 0, "cls": 5, "sep": 6, "mask": 7},
                 {"pad": NONNEG_INT, "cls": NONNEG_INT, "sep": NONNEG_INT, "mask": Bad(-1, 2.5, "3", 0)})]


@fuzz("history.bert.BertConfig")
def _(s):
    return [Call(bert_mod.BertConfig, {"vocab_size": 20, "d_model": 8, "n_layers": 1, "n_heads": 2, "d_ff": 8,
                                       "max_len": 10},
                 {"vocab_size": Bad(0, 2, 2.5, "20"), "d_model": POS_INT, "n_heads": Bad(0, 3, 2.5),
                  "n_layers": POS_INT, "d_ff": POS_INT, "max_len": POS_INT, "n_segments": POS_INT, "dropout": PROB,
                  "layer_norm_eps": Bad(0.0, -1.0, "1e-12", None), "special": Bad((0, 1, 2, 3), None, "special")})]


BERT_INPUT = {"input_ids": T(INT, rank=2, high=20, tied=(0, 1), names=("segment_ids", "key_mask")),
              "segment_ids": T(INT, rank=2, high=2, tied=(0, 1), names=("input_ids",)),
              "key_mask": T(BOOL, rank=2, tied=(0, 1), names=("input_ids",))}


def _bert_inputs(s):
    return {"input_ids": ids(s.b, s.n, high=20), "segment_ids": ids(s.b, s.n, high=2), "key_mask": ones(s.b, s.n)}


@fuzz("history.bert.BertEmbeddings")
def _(s):
    kw = _bert_inputs(s)
    del kw["key_mask"]
    specs = {k: v for k, v in BERT_INPUT.items() if k != "key_mask"}
    return _module_calls(bert_mod.BertEmbeddings, {"config": _bert_config(s)}, {"config": Bad(3, None, "config")},
                         lambda mod, **kw: mod(kw.pop("input_ids"), **kw), kw, specs)


@fuzz("history.bert.BertModel")
def _(s):
    return _module_calls(bert_mod.BertModel, {"config": _bert_config(s), "make_block": _bert_block},
                         {"config": Bad(3, None), "make_block": Bad(3, None)},
                         lambda mod, **kw: mod(kw.pop("input_ids"), **kw), _bert_inputs(s), BERT_INPUT)


@fuzz("history.bert.MlmHead")
def _(s):
    c = _bert_config(s)
    emb = nn.Embedding(c.vocab_size, c.d_model)
    return _module_calls(bert_mod.MlmHead, {"config": c, "token_embedding": emb},
                         {"config": Bad(3, None), "token_embedding": Bad(3, None, nn.Embedding(3, c.d_model))},
                         lambda mod, hidden: mod(hidden), {"hidden": r(s.b, s.n, c.d_model)}, {"hidden": X_ONLY})


@fuzz("history.bert.BertForMaskedLM")
def _(s):
    return _module_calls(bert_mod.BertForMaskedLM, {"bert": bert_mod.BertModel(_bert_config(s), _bert_block)},
                         {"bert": NOT_A_MODULE}, lambda mod, **kw: mod(kw.pop("input_ids"), **kw),
                         _bert_inputs(s), BERT_INPUT)


@fuzz("history.bert.BertClassifier")
def _(s):
    return _module_calls(bert_mod.BertClassifier,
                         {"bert": bert_mod.BertModel(_bert_config(s), _bert_block), "n_classes": 3},
                         {"bert": NOT_A_MODULE, "n_classes": Bad(1, 2.5, "3")},
                         lambda mod, **kw: mod(kw.pop("input_ids"), **kw), _bert_inputs(s), BERT_INPUT)


@fuzz("history.bert.mask_tokens")
def _(s):
    return [Call(bert_mod.mask_tokens, {"input_ids": ids(s.b, s.n, high=20), "vocab_size": 20, "select_prob": 0.5,
                                        "generator": torch.Generator().manual_seed(0)},
                 {"input_ids": T(INT, rank=2, high=20, device_peer=False), "vocab_size": Bad(0, 4, 2.5, "20", None),
                  "special": Bad(None, (0, 1, 2, 3)), "select_prob": Bad(0.0, 1.5, "0.1", None),
                  "generator": Bad(0, "seed")})]


@fuzz("history.bert.mlm_loss")
def _(s):
    labels = ids(s.b, s.n, high=20)
    labels[0, 0] = bert_mod.IGNORE_INDEX
    return [Call(bert_mod.mlm_loss, {"logits": r(s.b, s.n, 20), "labels": labels},
                 {"logits": T(rank=3, tied=(0, 1), dtype_peer=False, names=("labels",)),
                  "labels": T(INT, rank=2, tied=(0, 1), high=20, names=("logits",))})]


@fuzz("history.bert.state_dict_from_transformers")
def _(s):
    state = {"bert.embeddings.word_embeddings.weight": r(20, 4)}
    return [Call(bert_mod.state_dict_from_transformers, {"hf_state": state},
                 {"hf_state": Bad(3, None, [("a", 1)], {"bert.unknown.weight": r(2)}, {3: r(2)})})]


@fuzz("history.bert.counting_corpus")
def _(s):
    return [Call(bert_mod.counting_corpus, {"n_sequences": s.b, "length": s.n, "n_tokens": 8, "steps": (1, 2)},
                 {"n_sequences": POS_INT, "length": POS_INT, "n_tokens": POS_INT, "steps": Bad((), 3, ("1",), (2.5,)),
                  "special": Bad(None, (0, 1, 2, 3)), "generator": Bad(0, "seed")})]


@fuzz("history.bert.train_tiny_bert")
def _(s):
    config = bert_mod.BertConfig(vocab_size=8, d_model=8, n_layers=1, n_heads=2, d_ff=8, max_len=4, dropout=0.0)
    return [Call(bert_mod.train_tiny_bert,
                 {"make_block": _bert_block, "config": config, "length": 2, "n_tokens": 4, "steps": 1,
                  "finetune_steps": 1, "batch_size": 2},
                 {"make_block": Bad(3, None), "config": Bad(3, "config"), "length": Bad(0, 2.5, 3), "n_tokens": Bad(0, 9),
                  "count_steps": Bad((), 3, (2.5,)), "steps": NONNEG_INT, "finetune_steps": NONNEG_INT,
                  "batch_size": POS_INT, "lr": POS_FLOAT, "seed": Bad(2.5, "0", None)})]


def _gpt_config(s):
    return gpt_mod.GPTConfig(vocab_size=11, d_model=4 * s.d, n_layers=1, n_heads=2, d_ff=8, max_len=s.n + 2)


def _gpt_block(c):
    return block_mod.TransformerBlock(mha_mod.MultiHeadAttention(c.d_model, c.n_heads), c.d_model, c.d_ff)


@fuzz("history.gpt.GPTConfig")
def _(s):
    return [Call(gpt_mod.GPTConfig, {"vocab_size": 11, "d_model": 8, "n_layers": 1, "n_heads": 2, "d_ff": 8,
                                     "max_len": 10},
                 {"vocab_size": POS_INT, "d_model": POS_INT, "n_heads": Bad(0, 3, 2.5), "n_layers": POS_INT,
                  "d_ff": POS_INT, "max_len": POS_INT, "dropout": PROB,
                  "layer_norm_eps": Bad(0.0, -1.0, "1e-5", None)})]


@fuzz("history.gpt.GPT")
def _(s):
    return _module_calls(gpt_mod.GPT, {"config": _gpt_config(s), "make_block": _gpt_block},
                         {"config": Bad(3, None), "make_block": Bad(3, None)},
                         lambda mod, input_ids: mod(input_ids), {"input_ids": ids(s.b, s.n, high=11)},
                         {"input_ids": T(INT, rank=2, high=11)})


@fuzz("history.gpt.next_token_loss")
def _(s):
    return [Call(gpt_mod.next_token_loss, {"logits": r(s.b, s.n, 11), "input_ids": ids(s.b, s.n, high=11)},
                 {"logits": T(rank=3, tied=(0, 1), dtype_peer=False, names=("input_ids",)),
                  "input_ids": T(INT, rank=2, tied=(0, 1), high=11, names=("logits",))})]


# ----------------------------------------------------------------------------
# modern/: the decoders of 2023 to 2026
# ----------------------------------------------------------------------------


MODERN_INT = Bad(0, -1, 2.5, True, "2", None)  # an int >= 1 that must be given
SCALE = Bad(0.0, -1.0, float("nan"), float("inf"), "1", True)  # None or a positive finite number
HEADS = {"q": T(rank=4, tied=(0, 1, 3), names=("k", "v")), "k": T(rank=4, tied=(0, 1, 2, 3), names=("q", "v")),
         "v": T(rank=4, tied=(0, 1, 2), names=("q", "k"))}
HEADS_MASK = T(BOOL, min_rank=2, tied=(-2, -1), lead_fixed=True)  # (N, M) or (B, H or 1, N, M)


def _heads(s, *, n=None, m=None, d_v=None):
    n, m = n or s.n, m or s.m
    return {"q": r(s.b, s.h, n, s.d), "k": r(s.b, s.h, m, s.d), "v": r(s.b, s.h, m, d_v or s.d + 1)}


def _kernel_calls(fn, s, extra, extra_specs):
    """A head-level attention kernel: plain, with a (N, M) mask and with a (B, 1, N, M) mask."""
    return [
        Call(fn, {**_heads(s), **extra, "scale": 0.5}, {**HEADS, **extra_specs, "scale": SCALE}, "plain"),
        Call(fn, {**_heads(s), **extra, "attn_mask": ones(s.n, s.m)}, {"attn_mask": HEADS_MASK}, "(N, M) mask"),
        Call(fn, {**_heads(s), **extra, "attn_mask": ones(s.b, 1, s.n, s.m)},
             {"attn_mask": T(BOOL, rank=4, tied=(0, 2, 3))}, "(B, 1, N, M) mask"),
    ]


# block.py


@fuzz("modern.block.RMSNorm")
def _(s):
    return _module_calls(
        modern_block.RMSNorm, {"d": s.d, "eps": 1e-5}, {"d": POS_INT, "eps": Bad(0.0, -1.0, float("nan"), "1e-6", None)},
        lambda mod, x: mod(x), {"x": r(s.b, s.n, s.d)}, {"x": T(min_rank=1, tied=(-1,), dtype_peer=False)},
    )


@fuzz("modern.block.SwiGLU")
def _(s):
    return _module_calls(modern_block.SwiGLU, {"d_model": s.d, "d_ff": 3}, {"d_model": POS_INT, "d_ff": POS_INT},
                         lambda mod, x: mod(x), {"x": r(s.b, s.n, s.d)}, {"x": T(min_rank=1, tied=(-1,))})


@fuzz("modern.block.swiglu_width")
def _(s):
    return [Call(modern_block.swiglu_width, {"d_model": 4 * s.d, "multiple_of": 8, "ffn_dim_multiplier": 1.3},
                 {"d_model": POS_INT, "multiple_of": POS_INT,
                  "ffn_dim_multiplier": Bad(0.0, -1.0, float("nan"), float("inf"), "1.3", True)})]


def _rope_entries(module, area):
    @fuzz(f"modern.{area}.rope_tables")
    def _(s):
        return [
            Call(module.rope_tables, {"positions": torch.arange(s.n), "rotary_dim": 2 * s.d, "base": 500.0},
                 {"positions": T(INT, min_rank=1, device_peer=False), "rotary_dim": Bad(0, 3, 2.5, True, "4"),
                  "base": Bad(1.0, 0.5, float("nan"), float("inf"), "1e4", None, True)}, "(N,)"),
            Call(module.rope_tables, {"positions": ids(s.b, s.n, high=9), "rotary_dim": 2 * s.d},
                 {"positions": Bad(torch.zeros(2, 2, 2, dtype=torch.long), torch.tensor(3))}, "(B, N)"),
        ]

    @fuzz(f"modern.{area}.apply_rope")
    def _(s):
        cos, sin = module.rope_tables(torch.arange(s.n), 2 * s.d)
        bcos, bsin = module.rope_tables(ids(s.b, s.n, high=9), 2 * s.d)
        table = T(min_rank=2, tied=(-2, -1), dtype_peer=False, lead_fixed=True, names=("cos", "sin"))
        x = r(s.b, s.h, s.n, 2 * s.d)
        return [
            Call(module.apply_rope, {"x": x, "cos": cos, "sin": sin},
                 {"x": T(rank=4, tied=(2,), dtype_peer=False, names=("cos",)), "cos": table, "sin": table}, "(N, r/2)"),
            Call(module.apply_rope, {"x": x, "cos": bcos, "sin": bsin},
                 {"x": T(rank=4, tied=(0, 2), dtype_peer=False, names=("cos",))}, "(B, N, r/2)"),
        ]


_rope_entries(modern_block, "block")


@fuzz("modern.block.sdpa_attend")
def _(s):
    return _kernel_calls(modern_block.sdpa_attend, s, {}, {})


def _decoder_attention_init(s):
    return {"d_model": 4 * s.d, "n_heads": 4, "n_kv_heads": 2, "qk_norm": "head", "norm_eps": 1e-5,
            "rotary_dim": s.d}


DECODER_INIT_SPECS = {
    "d_model": POS_INT, "n_heads": POS_INT, "n_kv_heads": Bad(0, 3, 2.5, True, "2"), "d_head": Bad(0, 2.5, True, "2"),
    "qk_norm": Bad("layer", 3), "norm_eps": Bad(0.0, -1.0, "1e-6", None), "rope_base": Bad(1.0, "1e4", True),
    "rotary_dim": Bad(0, 3, 64, 2.5, "2"), "scale": Bad(0.0, -1.0, float("nan"), "1", True),
    "attend": Bad(3, "sdpa"), "output_gate": Bad(3, "gate"),
}


@fuzz("modern.block.DecoderAttention")
def _(s):
    init = _decoder_attention_init(s)
    module = modern_block.DecoderAttention(**init)
    x = r(s.b, s.n, init["d_model"])
    forward = lambda **kw: module(kw.pop("x"), **kw)  # noqa: E731
    return [
        Call(modern_block.DecoderAttention, init, DECODER_INIT_SPECS, "init"),
        Call(forward, {"x": x, "attn_mask": ones(s.n, s.n), "positions": torch.arange(s.n) + 2},
             {"x": T(rank=3, tied=(1, -1), names=("attn_mask", "positions")), "attn_mask": T(BOOL, rank=2, tied=(0, 1)),
              "positions": T(INT, min_rank=1, tied=(0,), device_peer=False)}, "forward"),
        Call(forward, {"x": x, "attn_mask": ones(s.b, 1, s.n, s.n), "positions": ids(s.b, s.n, high=9)},
             {"attn_mask": T(BOOL, rank=4, tied=(0, 2, 3)), "positions": T(INT, tied=(0, 1), device_peer=False)},
             "batched"),
    ]


@fuzz("modern.block.DecoderLayer")
def _(s):
    d_model = 4 * s.d
    init = {"attention": modern_block.DecoderAttention(d_model, 4, 2), "d_model": d_model, "d_ff": 3}
    return _module_calls(
        modern_block.DecoderLayer, init,
        {"attention": NOT_A_MODULE, "d_model": POS_INT, "d_ff": POS_INT, "norm_eps": Bad(0.0, "1e-6", None)},
        lambda mod, **kw: mod(kw.pop("x"), **kw), {"x": r(s.b, s.n, d_model), "attn_mask": ones(s.n, s.n)},
        {"x": T(rank=3, tied=(1, -1), names=("attn_mask",)), "attn_mask": T(BOOL, rank=2, tied=(0, 1))},
    )


# cache_size.py


@fuzz("modern.cache_size.mha_cache_elements")
def _(s):
    return [Call(modern_cache.mha_cache_elements, {"n_kv_heads": s.h, "d_k": s.d, "d_v": s.d + 1},
                 {"n_kv_heads": POS_INT, "d_k": POS_INT, "d_v": POS_INT})]


@fuzz("modern.cache_size.mla_cache_elements")
def _(s):
    return [Call(modern_cache.mla_cache_elements, {"kv_lora_rank": 4 * s.d, "rope_dim": s.d},
                 {"kv_lora_rank": POS_INT, "rope_dim": NONNEG_INT})]


@fuzz("modern.cache_size.cached_tokens")
def _(s):
    kind = Bad("global", "sliding", 3, None)
    return [
        Call(modern_cache.cached_tokens, {"kind": "sliding_attention", "seq_len": s.m, "window": 2},
             {"kind": kind, "seq_len": NONNEG_INT, "window": MODERN_INT}, "sliding"),
        Call(modern_cache.cached_tokens, {"kind": "chunked_attention", "seq_len": s.m, "chunk": 2},
             {"chunk": MODERN_INT}, "chunked"),
    ]


@fuzz("modern.cache_size.model_cache_bytes")
def _(s):
    kinds = ["sliding_attention", "chunked_attention", "full_attention", "linear_attention"]
    return [Call(modern_cache.model_cache_bytes,
                 {"seq_len": s.m, "layer_types": kinds, "elements_per_token": 8, "window": 2, "chunk": 3,
                  "batch": s.b, "bytes_per_element": 2},
                 {"seq_len": NONNEG_INT, "layer_types": Bad("full_attention", 3, None, ["global"], [3]),
                  "elements_per_token": POS_INT, "window": MODERN_INT, "chunk": MODERN_INT, "batch": NONNEG_INT,
                  "bytes_per_element": POS_INT})]


# gates.py

CAP = Bad(0.0, -1.0, float("nan"), float("inf"), "50", None, True)


@fuzz("modern.gates.softcap")
def _(s):
    return [Call(modern_gates.softcap, {"scores": r(s.b, s.n, s.m), "cap": 5.0},
                 {"scores": T(dtype_peer=False, device_peer=False), "cap": CAP})]


@fuzz("modern.gates.softcap_attention")
def _(s):
    return _kernel_calls(modern_gates.softcap_attention, s, {"cap": 5.0}, {"cap": CAP})


@fuzz("modern.gates.SoftCap")
def _(s):
    module = modern_gates.SoftCap(5.0)
    forward = lambda **kw: module(kw.pop("q"), kw.pop("k"), kw.pop("v"), **kw)  # noqa: E731
    return [Call(modern_gates.SoftCap, {"cap": 5.0}, {"cap": CAP}, "init"),
            *[Call(forward, c.kwargs, c.specs, c.label) for c in _kernel_calls(module, s, {}, {})]]


@fuzz("modern.gates.OutputGate")
def _(s):
    d_model = s.d + 1
    calls = []
    for per in ("element", "head"):
        calls += _module_calls(
            modern_gates.OutputGate, {"d_model": d_model, "n_heads": s.h, "d_head": s.d, "per": per},
            {"d_model": POS_INT, "n_heads": POS_INT, "d_head": POS_INT, "per": Bad("channel", 3, None)},
            lambda mod, **kw: mod(kw.pop("x"), kw.pop("out")),
            {"x": r(s.b, s.n, d_model), "out": r(s.b, s.n, s.h * s.d)},
            {"x": T(rank=3, tied=(0, 1, 2), names=("out",)), "out": T(rank=3, tied=(0, 1, 2), names=("x",))},
        )
    return calls


@fuzz("modern.gates.split_fused_q_gate")
def _(s):
    return [Call(modern_gates.split_fused_q_gate, {"weight": r(2 * s.h * s.d, s.d + 1), "n_heads": s.h, "d_head": s.d},
                 {"weight": T(ANY, rank=2, tied=(0,), device_peer=False), "n_heads": POS_INT, "d_head": POS_INT})]


# latent_attention.py


@fuzz("modern.latent_attention.latent_rope_angles")
def _(s):
    return [Call(modern_mla.latent_rope_angles, {"positions": torch.arange(s.n) + 3, "dim": 2 * s.d, "base": 500.0},
                 {"positions": T(INT, rank=1, device_peer=False), "dim": Bad(0, 3, 2.5, True, "4"),
                  "base": Bad(1.0, float("nan"), float("inf"), "1e4", None, True)})]


@fuzz("modern.latent_attention.rotate_rope_part")
def _(s):
    cos, sin = modern_mla.latent_rope_angles(torch.arange(s.n), 2 * s.d)
    table = T(rank=2, tied=(0, 1), dtype_peer=False, names=("cos", "sin"))
    return [Call(modern_mla.rotate_rope_part,
                 {"x": r(s.b, s.h, s.n, 2 * s.d), "cos": cos, "sin": sin, "interleaved": interleaved},
                 {"x": T(min_rank=2, tied=(-2, -1), dtype_peer=False, names=("cos",)), "cos": table, "sin": table},
                 f"interleaved={interleaved}") for interleaved in (True, False)]


LATENT_C = T(rank=3, tied=(0, 2), names=("k_rope",))
LATENT_K_ROPE = T(rank=3, tied=(0, 1, 2), names=("c",))


@fuzz("modern.latent_attention.LatentCache")
def _(s):
    init = {"batch": s.b, "kv_lora_rank": 3, "rope_dim": 2, "max_len": s.n + 2}
    return [
        Call(modern_mla.LatentCache, init, {"batch": POS_INT, "kv_lora_rank": POS_INT, "rope_dim": POS_INT,
                                            "max_len": POS_INT, "dtype": FLOAT_DTYPE}, "init"),
        Call(lambda **kw: modern_mla.LatentCache(**init).update(**kw), {"c": r(s.b, s.n, 3), "k_rope": r(s.b, s.n, 2)},
             {"c": LATENT_C, "k_rope": LATENT_K_ROPE}, "update"),
    ]


def _mla_init(s):
    return {"d_model": 4 * s.d, "n_heads": 2, "kv_lora_rank": 3, "q_lora_rank": 5, "qk_nope_head_dim": 2,
            "rope_dim": 2, "v_head_dim": 3, "norm_eps": 1e-5, "softmax_scale": 0.5}


@fuzz("modern.latent_attention.MultiHeadLatentAttention")
def _(s):
    init = _mla_init(s)
    module = modern_mla.MultiHeadLatentAttention(**init)
    x = r(s.b, s.n, init["d_model"])
    forward = lambda **kw: module(kw.pop("x"), **kw)  # noqa: E731
    cache = lambda: modern_mla.LatentCache(s.b, 3, 2, s.n + 3)  # noqa: E731
    calls = [Call(modern_mla.MultiHeadLatentAttention, init,
                  {"d_model": POS_INT, "n_heads": POS_INT, "kv_lora_rank": POS_INT, "q_lora_rank": Bad(0, 2.5, True, "2"),
                   "qk_nope_head_dim": POS_INT, "rope_dim": Bad(0, 3, 2.5, True, "2"), "v_head_dim": POS_INT,
                   "rope_base": Bad(1.0, float("nan"), float("inf"), "1e4", None, True),
                   "softmax_scale": Bad(0.0, -1.0, float("nan"), "1", True), "norm_eps": Bad(0.0, -1.0, "1e-6", None)},
                  "init")]
    for absorbed in (False, True):
        calls.append(Call(forward, {"x": x, "absorbed": absorbed, "attn_mask": ones(s.b, 1, s.n, s.n)},
                          {"x": T(rank=3, tied=(0, 1, 2), names=("attn_mask",)),
                           "attn_mask": T(BOOL, tied=(0, 2, 3), lead_fixed=True)}, f"absorbed={absorbed}"))
        calls.append(Call(lambda **kw: forward(cache=cache(), **kw), {"x": x, "absorbed": absorbed},
                          {"x": T(rank=3, tied=(0, 2), names=("cache",))}, f"cached, absorbed={absorbed}"))
    calls.append(Call(forward, {"x": x, "cache": cache()},
                      {"cache": Bad(3, "cache", modern_mla.LatentCache(s.b + 1, 3, 2, 9),
                                    modern_mla.LatentCache(s.b, 4, 2, 9), modern_mla.LatentCache(s.b, 3, 4, 9),
                                    modern_mla.LatentCache(s.b, 3, 2, 9, dtype=torch.float64),
                                    modern_mla.LatentCache(s.b, 3, 2, 9, device=OTHER_DEVICE))}, "cache"))
    return calls


# layer_patterns.py

KIND = Bad("global", "sliding", 3, None)


@fuzz("modern.layer_patterns.periodic_layer_types")
def _(s):
    return [Call(modern_layers.periodic_layer_types,
                 {"n_layers": s.n + 3, "period": s.h, "local": "chunked_attention", "glob": "full_attention"},
                 {"n_layers": NONNEG_INT, "period": POS_INT, "local": KIND, "glob": KIND})]


@fuzz("modern.layer_patterns.rope_layers")
def _(s):
    return [Call(modern_layers.rope_layers, {"n_layers": s.n + 3, "nope_interval": s.h},
                 {"n_layers": NONNEG_INT, "nope_interval": POS_INT})]


@fuzz("modern.layer_patterns.layer_mask")
def _(s):
    n_keys = Bad(s.n - 1, -1, 2.5, True, "5")
    return [
        Call(modern_layers.layer_mask, {"kind": "sliding_attention", "n_queries": s.n, "n_keys": s.m + s.n, "window": 2},
             {"kind": Bad("global", "linear_attention", 3, None), "n_queries": NONNEG_INT, "n_keys": n_keys,
              "window": MODERN_INT}, "sliding"),
        Call(modern_layers.layer_mask, {"kind": "chunked_attention", "n_queries": s.n, "chunk": 2},
             {"chunk": MODERN_INT}, "chunked"),
    ]


@fuzz("modern.layer_patterns.summarize_layer_types")
def _(s):
    kinds = modern_layers.periodic_layer_types(2 * s.h + 1, s.h)
    return [Call(modern_layers.summarize_layer_types, {"layer_types": kinds},
                 {"layer_types": Bad([], "full_attention", 3, None, ["global"], ["full_attention", 3])})]


# rope_scaling.py

ROPE_BASE = Bad(1.0, 0.5, float("nan"), float("inf"), "1e4", None, True)
ROPE_FACTOR = Bad(0.5, float("nan"), float("inf"), "2", None, True)
INV_FREQ = T(rank=1, dtype_peer=False, device_peer=False)


@fuzz("modern.rope_scaling.rope_frequencies")
def _(s):
    return [Call(modern_rope.rope_frequencies, {"d_rot": 2 * s.d, "base": 500.0},
                 {"d_rot": Bad(0, 3, 2.5, True, "4"), "base": ROPE_BASE})]


@fuzz("modern.rope_scaling.rotary_dims")
def _(s):
    return [Call(modern_rope.rotary_dims, {"d_head": 8, "partial_rotary_factor": 0.5},
                 {"d_head": Bad(1, 2.5, True, "8"), "partial_rotary_factor": Bad(0.0, 1.5, 0.375, "0.5", None, True)})]


@fuzz("modern.rope_scaling.linear_scaling")
def _(s):
    return [Call(modern_rope.linear_scaling, {"inv_freq": modern_rope.rope_frequencies(2 * s.d), "factor": 4.0},
                 {"inv_freq": INV_FREQ, "factor": ROPE_FACTOR})]


@fuzz("modern.rope_scaling.ntk_aware_base")
def _(s):
    return [Call(modern_rope.ntk_aware_base, {"base": 500.0, "factor": 4.0, "d_rot": 2 * s.d + 2},
                 {"base": ROPE_BASE, "factor": ROPE_FACTOR, "d_rot": Bad(2, 5, 2.5, True, "8")})]


@fuzz("modern.rope_scaling.dynamic_ntk_base")
def _(s):
    return [Call(modern_rope.dynamic_ntk_base,
                 {"base": 500.0, "factor": 2.0, "seq_len": 40, "original_length": 16, "d_rot": 2 * s.d + 2},
                 {"base": ROPE_BASE, "factor": ROPE_FACTOR, "seq_len": NONNEG_INT, "original_length": POS_INT,
                  "d_rot": Bad(2, 5, 2.5, True, "8")})]


YARN_SPECS = {"original_length": POS_INT, "beta_fast": Bad(0.5, float("nan"), "32", None, True),
              "beta_slow": Bad(0.0, -1.0, float("inf"), "1", None, True)}


@fuzz("modern.rope_scaling.yarn_ramp")
def _(s):
    return [Call(modern_rope.yarn_ramp, {"d_rot": 16, "base": 500.0, "original_length": 64, "beta_fast": 16.0},
                 {"d_rot": Bad(0, 3, 2.5, True, "4"), "base": ROPE_BASE, **YARN_SPECS})]


@fuzz("modern.rope_scaling.yarn_scaling")
def _(s):
    return [Call(modern_rope.yarn_scaling, {"d_rot": 16, "base": 500.0, "factor": 4.0, "original_length": 64},
                 {"d_rot": Bad(0, 3, 2.5, True, "4"), "base": ROPE_BASE, "factor": ROPE_FACTOR, **YARN_SPECS})]


@fuzz("modern.rope_scaling.yarn_attention_factor")
def _(s):
    mscale = Bad(-1.0, float("nan"), float("inf"), "1", True)
    return [Call(modern_rope.yarn_attention_factor, {"factor": 4.0, "mscale": 0.7, "mscale_all_dim": 1.0},
                 {"factor": ROPE_FACTOR, "mscale": mscale, "mscale_all_dim": mscale})]


@fuzz("modern.rope_scaling.llama3_scaling")
def _(s):
    return [Call(modern_rope.llama3_scaling,
                 {"inv_freq": modern_rope.rope_frequencies(16, 500.0), "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_length": 64},
                 {"inv_freq": INV_FREQ, "factor": ROPE_FACTOR, "low_freq_factor": Bad(0.0, -1.0, "1", None, True),
                  "high_freq_factor": Bad(0.5, float("inf"), "4", None), "original_length": POS_INT})]


@fuzz("modern.rope_scaling.rope_inv_freq")
def _(s):
    fn = modern_rope.rope_inv_freq
    base = {"d_head": 8, "base": 500.0}
    return [
        Call(fn, {**base, "partial_rotary_factor": 0.5},
             {"d_head": Bad(1, 2.5, True, "8"), "base": ROPE_BASE, "rope_type": Bad("ntk", 3, None),
              "partial_rotary_factor": Bad(0.0, 1.5, 0.375, "0.5", None)}, "default"),
        Call(fn, {**base, "rope_type": "linear", "factor": 4.0}, {"factor": ROPE_FACTOR}, "linear"),
        Call(fn, {**base, "rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 16, "seq_len": 40},
             {"factor": ROPE_FACTOR, "original_max_position_embeddings": MODERN_INT, "seq_len": NONNEG_INT}, "dynamic"),
        Call(fn, {**base, "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "beta_fast": 16.0,
                  "mscale": 0.7, "mscale_all_dim": 1.0},
             {"factor": ROPE_FACTOR, "original_max_position_embeddings": MODERN_INT,
              "beta_fast": YARN_SPECS["beta_fast"], "beta_slow": YARN_SPECS["beta_slow"],
              "attention_factor": Bad(0.0, -1.0, float("nan"), "1", True), "mscale": Bad(-1.0, "1", True)}, "yarn"),
        Call(fn, {**base, "rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 64},
             {"factor": ROPE_FACTOR, "original_max_position_embeddings": MODERN_INT,
              "low_freq_factor": Bad(0.0, "1", None), "high_freq_factor": Bad(0.5, "4", None)}, "llama3"),
    ]


@fuzz("modern.rope_scaling.rotary_angles")
def _(s):
    inv_freq = modern_rope.rope_frequencies(2 * s.d)
    return [
        Call(modern_rope.rotary_angles, {"inv_freq": inv_freq, "positions": torch.arange(s.n), "attention_factor": 1.2},
             {"inv_freq": INV_FREQ, "positions": T(ANY, min_rank=1, device_peer=False),
              "attention_factor": Bad(0.0, -1.0, float("nan"), float("inf"), "1", None, True)}, "(N,)"),
        Call(modern_rope.rotary_angles, {"inv_freq": inv_freq, "positions": ids(s.b, s.n, high=9)},
             {"positions": Bad(torch.zeros(2, 2, 2), torch.ones(2, dtype=torch.bool), [0, 1])}, "(B, N)"),
    ]


@fuzz("modern.rope_scaling.apply_partial_rotary")
def _(s):
    inv_freq = modern_rope.rope_frequencies(2 * s.d)
    cos, sin = modern_rope.rotary_angles(inv_freq, torch.arange(s.n))
    bcos, bsin = modern_rope.rotary_angles(inv_freq, ids(s.b, s.n, high=9))
    table = T(min_rank=2, tied=(-2, -1), dtype_peer=False, lead_fixed=True, names=("cos", "sin"))
    x = r(s.b, s.h, s.n, 2 * s.d)
    return [
        Call(modern_rope.apply_partial_rotary, {"x": x, "cos": cos, "sin": sin},
             {"x": T(rank=4, tied=(2,), dtype_peer=False, names=("cos",)), "cos": table, "sin": table}, "(N, r/2)"),
        Call(modern_rope.apply_partial_rotary, {"x": x, "cos": bcos, "sin": bsin},
             {"x": T(rank=4, tied=(0, 2), dtype_peer=False, names=("cos",))}, "(B, N, r/2)"),
    ]


@fuzz("modern.rope_scaling.ScaledRotaryEmbedding")
def _(s):
    d = 2 * s.d
    calls = []
    for rope in ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
                 {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 4}):
        module = modern_rope.ScaledRotaryEmbedding(d, **rope)
        calls += [
            Call(modern_rope.ScaledRotaryEmbedding, {"d_head": d, **rope},
                 {"d_head": Bad(1, 2.5, True, "8"), "rope_type": Bad("ntk", 3, None), "factor": ROPE_FACTOR,
                  "original_max_position_embeddings": MODERN_INT}, f"init {rope['rope_type']}"),
            Call(lambda module=module, **kw: module(kw.pop("q"), kw.pop("k"), **kw),
                 {"q": r(s.b, s.h, 1, d), "k": r(s.b, 1, s.m, d), "offset": 3},
                 {"q": T(rank=4, tied=(-1,), dtype_peer=False, names=("k",)),
                  "k": T(rank=4, tied=(-1,), dtype_peer=False, names=("q",)), "offset": NONNEG_INT},
                 f"forward {rope['rope_type']}"),
        ]
    return calls


@fuzz("modern.rope_scaling.nope_positions")
def _(s):
    tokens = ids(s.b, s.n, high=5) + 1
    tokens[:, 0] = 0
    return [Call(modern_rope.nope_positions, {"tokens": tokens, "bos_id": 0, "causal": False},
                 {"tokens": T(INT, rank=2, device_peer=False), "bos_id": Bad("0", 2.5, None, True, 1)})]


# sinks.py


@fuzz("modern.sinks.sink_attention")
def _(s):
    return _kernel_calls(modern_sinks.sink_attention, s, {"sinks": r(s.h)},
                         {"sinks": T(rank=1, tied=(0,), dtype_peer=False)})


@fuzz("modern.sinks.LearnedSinks")
def _(s):
    module = modern_sinks.LearnedSinks(s.h, init=0.5)
    forward = lambda **kw: module(kw.pop("q"), kw.pop("k"), kw.pop("v"), **kw)  # noqa: E731
    return [Call(modern_sinks.LearnedSinks, {"n_heads": s.h, "init": 0.5},
                 {"n_heads": POS_INT, "init": Bad(float("nan"), float("inf"), "0", None, True)}, "init"),
            *[Call(forward, c.kwargs, c.specs, c.label) for c in _kernel_calls(module, s, {}, {})]]


@fuzz("modern.sinks.sink_window_mask")
def _(s):
    return [Call(modern_sinks.sink_window_mask, {"n_queries": s.n, "n_keys": s.n + s.m, "n_sink": 1, "window": 2},
                 {"n_queries": NONNEG_INT, "n_keys": Bad(s.n - 1, -1, 2.5, True, "5"), "n_sink": NONNEG_INT,
                  "window": POS_INT})]


@fuzz("modern.sinks.SinkCache")
def _(s):
    def update(**kw):
        cache = modern_sinks.SinkCache(1, 2)
        cache.update(r(s.b, s.h, 2, s.d), r(s.b, s.h, 2, s.d + 1))
        return cache.update(**kw)

    return [
        Call(modern_sinks.SinkCache, {"n_sink": 1, "window": 2}, {"n_sink": NONNEG_INT, "window": POS_INT}, "init"),
        Call(update, {"k": r(s.b, s.h, s.n, s.d), "v": r(s.b, s.h, s.n, s.d + 1)},
             {"k": T(rank=4, tied=(0, 1, 2, 3), names=("v",)), "v": T(rank=4, tied=(0, 1, 2, 3), names=("k",))},
             "update"),
    ]


@fuzz("modern.sinks.streaming_attention")
def _(s):
    qkv_ = _heads(s, m=s.n, d_v=s.d)
    return [Call(modern_sinks.streaming_attention,
                 {**qkv_, "n_sink": 1, "window": 2, "positions": "original", "base": 500.0},
                 {**HEADS, "q": T(rank=4, tied=(0, 1, 2, 3), names=("k", "v")),
                  "n_sink": NONNEG_INT, "window": POS_INT, "positions": Bad("text", 3, None),
                  "base": Bad(1.0, float("nan"), "1e4", None, True)})]


_rope_entries(modern_sinks, "sinks")


# (end of modern/)


@fuzz("history.gpt.generate")
def _(s):
    model = gpt_mod.GPT(_gpt_config(s), _gpt_block)
    return [Call(gpt_mod.generate, {"model": model, "prompt": ids(s.b, s.n, high=11), "max_new_tokens": 2,
                                    "temperature": 0.5, "generator": torch.Generator().manual_seed(0)},
                 {"model": NOT_A_MODULE, "prompt": T(INT, rank=2, high=11), "max_new_tokens": NONNEG_INT,
                  "temperature": Bad(-1.0, "0.5", None, float("nan")), "generator": Bad(0, "seed")})]


@fuzz("history.gpt.reversal_task")
def _(s):
    return [Call(gpt_mod.reversal_task, {"n_sequences": s.b, "length": s.n, "n_digits": 5},
                 {"n_sequences": POS_INT, "length": POS_INT, "n_digits": POS_INT, "generator": Bad(0, "seed")})]


@fuzz("history.gpt.train_tiny_gpt")
def _(s):
    config = gpt_mod.GPTConfig(vocab_size=4, d_model=8, n_layers=1, n_heads=2, d_ff=8, max_len=5, dropout=0.0)
    return [Call(gpt_mod.train_tiny_gpt,
                 {"make_block": _gpt_block, "config": config, "length": 2, "n_digits": 3, "steps": 1, "batch_size": 2},
                 {"make_block": Bad(3, None), "config": Bad(3, "config"), "length": Bad(0, 2.5, 3),
                  "n_digits": Bad(0, 2.5, 4), "steps": NONNEG_INT, "batch_size": POS_INT, "lr": POS_FLOAT,
                  "seed": Bad(2.5, "0", None)})]


# ----------------------------------------------------------------------------
# efficiency/ (flash_triton, flex_masks, paged_kv_cache, static_cache), linear/, distributed/
# ----------------------------------------------------------------------------


# Not fuzzed: an exception class and a frozen record of four ints, neither of
# which takes an argument a caller could get wrong in an interesting way.
NOT_FUZZED = {
    "distributed.context_parallel.PeerTimeoutError": "an exception class: its one argument is the message",
    "linear.sparse.AttentionCost": "a frozen dataclass of four counts, built only by the *_decode_cost functions",
}

FLAG = Bad(1, "yes", None)  # a bool
SCALE = Bad(0.0, -1.0, float("nan"), float("inf"), "1", True)  # a positive finite float (or None)


def half(*shape: int) -> torch.Tensor:
    return r(*shape, dtype=torch.float16)


@fuzz("efficiency.flash_triton.flash_attention", "efficiency.flash_triton.flash_attention_lse",
      "efficiency.flash_triton.FlashAttention")
def _(s):
    # Triton's interpreter is slow: one tile of 16 queries by 16 keys, d = 16.
    qkv_ = {"q": half(2, s.h, s.n, 16), "k": half(2, s.h, s.m, 16), "v": half(2, s.h, s.m, 16)}
    specs = {"q": T(rank=4, tied=(0, 1, 3), names=("k", "v")), "k": T(rank=4, tied=(0, 1, 2, 3), names=("q", "v")),
             "v": T(rank=4, tied=(0, 1, 2, 3), names=("q", "k")), "causal": FLAG, "scale": SCALE,
             "block_m": Bad(8, 24, 2.5, True, "16"), "block_n": Bad(0, 24, 2.5, "16")}
    kw = {**qkv_, "causal": True, "scale": 0.5, "block_m": 16, "block_n": 16}
    apply = lambda q, k, v, causal, scale, block_m, block_n: ft_mod.FlashAttention.apply(  # noqa: E731
        q, k, v, causal, scale, block_m, block_n)
    return [Call(ft_mod.flash_attention, dict(kw), specs, "flash_attention", "flash_attention"),
            Call(ft_mod.flash_attention_lse, dict(kw), specs, "flash_attention_lse", "flash_attention_lse"),
            Call(apply, dict(kw), specs, "apply", "FlashAttention")]


@fuzz("efficiency.flex_masks.causal_mask_mod")
def _(s):
    return [Call(flex_mod.causal_mask_mod, {"n_queries": s.n, "n_keys": s.m}, CAUSAL_MASK_SPECS)]


@fuzz("efficiency.flex_masks.sliding_window_mask_mod")
def _(s):
    return [Call(flex_mod.sliding_window_mask_mod, {"window": 2, "n_queries": s.n, "n_keys": s.m, "causal": False},
                 {"window": POS_INT, **CAUSAL_MASK_SPECS, "causal": FLAG})]


@fuzz("efficiency.flex_masks.prefix_lm_mask_mod")
def _(s):
    return [Call(flex_mod.prefix_lm_mask_mod, {"prefix_len": 1}, {"prefix_len": NONNEG_INT})]


@fuzz("efficiency.flex_masks.document_ids_from_lengths")
def _(s):
    return [Call(flex_mod.document_ids_from_lengths, {"lengths": [1, s.n]},
                 {"lengths": Bad([], [0], [2.5], [True], "12", 3, None)})]


@fuzz("efficiency.flex_masks.document_mask_mod")
def _(s):
    return [Call(flex_mod.document_mask_mod, {"document_ids": ids(s.b, s.n, high=2), "causal": True},
                 {"document_ids": T(INT, min_rank=1, device_peer=False), "causal": FLAG})]


@fuzz("efficiency.flex_masks.alibi_score_mod")
def _(s):
    return [Call(flex_mod.alibi_score_mod, {"slopes": r(s.h).abs(), "n_queries": s.n, "n_keys": s.m, "causal": True},
                 {"slopes": T(rank=1, dtype_peer=False, device_peer=False), **CAUSAL_MASK_SPECS, "causal": FLAG})]


@fuzz("efficiency.flex_masks.soft_cap_score_mod")
def _(s):
    return [Call(flex_mod.soft_cap_score_mod, {"cap": 5.0}, {"cap": POS_FLOAT})]


@fuzz("efficiency.flex_masks.dense_mask")
def _(s):
    return [Call(flex_mod.dense_mask, {"mask_mod": flex_mod.causal_mask_mod(s.n, s.m), "n_queries": s.n,
                                       "n_keys": s.m, "batch": s.b, "heads": s.h},
                 {"mask_mod": Bad(3, None, "causal"), **CAUSAL_MASK_SPECS, "batch": POS_INT, "heads": POS_INT})]


@fuzz("efficiency.flex_masks.block_tiles", "efficiency.flex_masks.computed_block_fraction")
def _(s):
    return [Call(fn, {"mask": ones(s.b, s.n, s.m), "block_size": 2},
                 {"mask": T(BOOL, min_rank=2, device_peer=False), "block_size": POS_INT}, fn.__name__, fn.__name__)
            for fn in (flex_mod.block_tiles, flex_mod.computed_block_fraction)]


@fuzz("efficiency.flex_masks.block_mask_fraction")
def _(s):
    block_mask = create_block_mask(flex_mod.causal_mask_mod(4, 4), 1, 1, 4, 4, device="cpu", BLOCK_SIZE=2)
    return [Call(flex_mod.block_mask_fraction, {"block_mask": block_mask},
                 {"block_mask": Bad(3, None, ones(4, 4))})]


@fuzz("efficiency.flex_masks.flex_attend")
def _(s):
    base = {"q": r(s.b, s.h, s.n, s.d), "k": r(s.b, s.h, s.m, s.d), "v": r(s.b, s.h, s.m, s.d + 1)}
    specs = {"q": T(rank=4, tied=(0, 1, 3), names=("k", "v")), "k": T(rank=4, tied=(0, 1, 2, 3), names=("q", "v")),
             "v": T(rank=4, tied=(0, 1, 2), names=("q", "k")), "mask_mod": Bad(3, "causal"),
             "score_mod": Bad(3, "alibi"), "block_size": POS_INT}
    return [Call(flex_mod.flex_attend, {**base, "mask_mod": flex_mod.causal_mask_mod(s.n, s.m), "block_size": 2},
                 specs)]


@fuzz("efficiency.flex_masks.flash_attn_window_size")
def _(s):
    return [Call(flex_mod.flash_attn_window_size, {"window": 3, "causal": False}, {"window": POS_INT, "causal": FLAG})]


def _paged(s, n_pages=8):
    cache = paged_mod.PagedKVCache(n_pages, 2, s.h, s.d)
    seqs = [cache.add_sequence() for _ in range(s.b)]
    for i, seq in enumerate(seqs):
        cache.append(seq, r(s.h, i + 1, s.d), r(s.h, i + 1, s.d))
    return cache, seqs


@fuzz("efficiency.paged_kv_cache.PagedKVCache")
def _(s):
    init = {"n_pages": 4, "page_size": 2, "n_kv_heads": s.h, "d_head": s.d}
    kv = T(rank=3, tied=(0, 1, 2), dtype_peer=False, names=("k", "v"))
    seq_spec = {"seq": Bad(7, -1, "0", None, 2.5)}
    calls = [Call(paged_mod.PagedKVCache, init,
                  {"n_pages": POS_INT, "page_size": POS_INT, "n_kv_heads": POS_INT, "d_head": POS_INT,
                   "dtype": FLOAT_DTYPE}, "init")]

    def method(name):
        def call(**kw):
            cache, seqs = _paged(s)
            return getattr(cache, name)(**kw)
        return call

    calls.append(Call(method("append"), {"seq": 1, "k": r(s.h, s.n, s.d), "v": r(s.h, s.n, s.d)},
                      {**seq_spec, "k": kv, "v": kv}, "append"))
    for name in ("block_table", "gather", "free"):
        calls.append(Call(method(name), {"seq": 1}, seq_spec, name))
    return calls


@fuzz("efficiency.paged_kv_cache.paged_decode")
def _(s):
    cache, seqs = _paged(s)
    return [Call(paged_mod.paged_decode, {"q": r(s.b, 2 * s.h, 1, s.d), "cache": cache, "seqs": seqs},
                 {"q": T(rank=4, tied=(0, 1, 3), names=("seqs", "cache")), "cache": Bad(3, "cache", None),
                  "seqs": Bad(3, None, [7] * s.b, ["0"] * s.b, (0,) * (s.b + 1))})]


@fuzz("efficiency.paged_kv_cache.ragged_causal_mask")
def _(s):
    return [Call(paged_mod.ragged_causal_mask, {"lengths": [1, s.n], "n": s.n + 1, "padding": "left"},
                 {"lengths": Bad([], [-1], [2.5], [True], "12", 3, None, [s.n + 2]), "n": Bad(-1, 2.5, True, "3", 1),
                  "padding": Bad("center", None, 3)})]


@fuzz("efficiency.paged_kv_cache.split_kv_attention")
def _(s):
    return [Call(paged_mod.split_kv_attention, {**qkv(s, d_v=s.d), "n_splits": 2},
                 {"q": T(rank=4, tied=(0, 1, 3), names=("k", "v")), "k": T(rank=4, tied=(0, 1, 2, 3), names=("q", "v")),
                  "v": T(rank=4, tied=(0, 1, 2), names=("q", "k")), "n_splits": Bad(0, -1, 2.5, True, "2", s.m + 1)})]


@fuzz("efficiency.paged_kv_cache.speculative_generate")
def _(s):
    torch.manual_seed(0)
    target, draft = nn.Embedding(11, 11), nn.Embedding(11, 11)
    return [Call(paged_mod.speculative_generate,
                 {"target": target, "draft": draft, "prompt": ids(1, s.n, high=11), "n_new": 3, "n_draft": 2},
                 {"target": Bad(3, None, "target"), "draft": Bad(3, None), "prompt": T(INT, rank=2, tied=(0,), device_peer=False),
                  "n_new": NONNEG_INT, "n_draft": POS_INT})]


def _tiny_static(s):
    return kv_mod.TinyDecoder(11, 4 * s.d, 4, 2, n_kv_heads=2, max_len=s.n + 3).eval()


@fuzz("efficiency.static_cache.StaticKVCache")
def _(s):
    init = {"n_layers": 2, "batch": s.b, "n_kv_heads": s.h, "d_head": s.d, "max_len": s.n + 2}
    kv = T(rank=4, tied=(0, 1, 2, 3), names=("k", "v", "positions"))
    model = _tiny_static(s)

    def cache():
        return static_mod.StaticKVCache(**init)

    return [
        Call(static_mod.StaticKVCache, init, {"n_layers": POS_INT, "batch": POS_INT, "n_kv_heads": POS_INT,
                                              "d_head": POS_INT, "max_len": POS_INT, "dtype": FLOAT_DTYPE}, "init"),
        Call(lambda **kw: static_mod.StaticKVCache.for_model(**kw), {"model": model, "batch": s.b, "max_len": s.n},
             {"model": NOT_A_MODULE, "batch": POS_INT, "max_len": POS_INT}, "for_model"),
        Call(lambda **kw: cache().write(**kw),
             {"layer": 1, "positions": torch.arange(s.n), "k": r(s.b, s.h, s.n, s.d), "v": r(s.b, s.h, s.n, s.d)},
             {"layer": Bad(2, -1, 1.0, True, "0"), "positions": T(INT, rank=1, tied=(0,), names=("k", "v")),
              "k": kv, "v": kv}, "write"),
        Call(lambda positions: cache().mask(positions), {"positions": torch.arange(s.n)},
             {"positions": T(INT, rank=1, device_peer=False)}, "mask"),
    ]


@fuzz("efficiency.static_cache.static_forward")
def _(s):
    model = _tiny_static(s)
    cache = static_mod.StaticKVCache.for_model(model, s.b, s.n + 3)
    return [Call(static_mod.static_forward, {"model": model, "cache": cache, "tokens": ids(s.b, s.n, high=11),
                                             "positions": torch.arange(s.n)},
                 {"model": NOT_A_MODULE, "cache": Bad(3, "cache", None),
                  "tokens": T(INT, rank=2, tied=(0, 1), names=("positions", "cache")),
                  "positions": T(INT, rank=1, tied=(0,), names=("tokens",))})]


@fuzz("efficiency.static_cache.generate_static")
def _(s):
    return [Call(static_mod.generate_static, {"model": _tiny_static(s), "prompt": ids(s.b, s.n, high=11), "n_new": 2},
                 {"model": NOT_A_MODULE, "prompt": T(INT, rank=2, high=11), "n_new": Bad(-1, 2.5, True, "2", 9),
                  "compile_options": Bad(3, "max-autotune")})]


# linear/

SCALE_OR_NONE = {"scale": SCALE}


@fuzz("linear.gated_linear.gla_recurrent", "linear.gated_linear.gla_parallel", "linear.gated_linear.gla_chunked")
def _(s):
    base = {"q": r(s.b, s.h, s.n, s.d), "k": r(s.b, s.h, s.n, s.d), "v": r(s.b, s.h, s.n, s.d + 1),
            "g": -r(s.b, s.h, s.n, s.d).abs()}
    specs = {"q": T(min_rank=2, tied=(0, 1, -2, -1)), "k": T(min_rank=2, tied=(0, 1, -2, -1)),
             "v": T(min_rank=2, tied=(0, 1, -2)), "g": T(min_rank=2, tied=(0, 1, -2, -1)), **SCALE_OR_NONE}
    calls = [Call(fn, {**base, "scale": 0.5}, specs, fn.__name__, fn.__name__)
             for fn in (gla_mod.gla_recurrent, gla_mod.gla_parallel)]
    calls.append(Call(gla_mod.gla_chunked, {**base, "chunk_size": 2}, {**specs, "chunk_size": POS_INT},
                      "gla_chunked", "gla_chunked"))
    return calls


@fuzz("linear.gated_linear.gla_step")
def _(s):
    base = {"q": r(s.b, s.h, s.d), "k": r(s.b, s.h, s.d), "v": r(s.b, s.h, s.d + 1), "g": -r(s.b, s.h, s.d).abs()}
    state = r(s.b, s.h, s.d, s.d + 1)
    specs = {"q": T(min_rank=1, tied=(0, 1, -1)), "k": T(min_rank=1, tied=(0, 1, -1)),
             "v": T(min_rank=1, tied=(0, 1), names=("state",)), "g": T(min_rank=1, tied=(0, 1, -1)), **SCALE_OR_NONE}
    return [Call(gla_mod.gla_step, dict(base), specs, "first step"),
            Call(gla_mod.gla_step, {**base, "state": state},
                 {"state": T(rank=4, tied=(0, 1, 2, 3), dtype_peer=False)}, "with state")]


@fuzz("linear.delta_rule.delta_rule_recurrent", "linear.delta_rule.delta_rule_parallel",
      "linear.delta_rule.delta_rule_chunked")
def _(s):
    base = {"q": r(s.b, s.h, s.n, s.d), "k": r(s.b, s.h, s.n, s.d), "v": r(s.b, s.h, s.n, s.d + 1),
            "beta": r(s.b, s.h, s.n).sigmoid(), "g": -r(s.b, s.h, s.n).abs()}
    specs = {"q": T(min_rank=2, tied=(0, 1, -2, -1)), "k": T(min_rank=2, tied=(0, 1, -2, -1)),
             "v": T(min_rank=2, tied=(0, 1, -2)), "beta": T(min_rank=1, tied=(0, 1, -1)),
             "g": T(min_rank=1, tied=(0, 1, -1)), **SCALE_OR_NONE}
    calls = [Call(fn, {**base, "scale": 0.5}, specs, fn.__name__, fn.__name__)
             for fn in (delta_mod.delta_rule_recurrent, delta_mod.delta_rule_parallel)]
    calls.append(Call(delta_mod.delta_rule_chunked, {**base, "chunk_size": 2}, {**specs, "chunk_size": POS_INT},
                      "delta_rule_chunked", "delta_rule_chunked"))
    return calls


@fuzz("linear.delta_rule.delta_rule_step")
def _(s):
    base = {"q": r(s.b, s.h, s.d), "k": r(s.b, s.h, s.d), "v": r(s.b, s.h, s.d + 1), "beta": r(s.b, s.h).sigmoid(),
            "g": -r(s.b, s.h).abs()}
    specs = {"q": T(min_rank=1, tied=(0, 1, -1)), "k": T(min_rank=1, tied=(0, 1, -1)),
             "v": T(min_rank=1, tied=(0, 1), names=("state",)), "beta": T(min_rank=1, tied=(0, 1)),
             "g": T(min_rank=1, tied=(0, 1)), **SCALE_OR_NONE}
    return [Call(delta_mod.delta_rule_step, dict(base), specs, "first step"),
            Call(delta_mod.delta_rule_step, {**base, "state": r(s.b, s.h, s.d, s.d + 1)},
                 {"state": T(rank=4, tied=(0, 1, 2, 3), dtype_peer=False)}, "with state")]


def _ssd_inputs(s):
    return {"x": r(s.b, s.h, s.n, s.d), "dt": r(s.b, s.h, s.n).abs(), "A": -r(s.h).abs(),
            "b": r(s.b, s.h, s.n, s.d + 1), "c": r(s.b, s.h, s.n, s.d + 1)}


SSD_SPECS = {"x": T(rank=4, tied=(0, 1, 2), names=("dt", "A", "b")), "dt": T(rank=3, tied=(0, 1, 2)),
             "A": T(rank=1, tied=(0,)), "b": T(rank=4, tied=(0, 1, 2, 3), names=("c",)),
             "c": T(rank=4, tied=(0, 1, 2, 3), names=("b",))}


@fuzz("linear.ssd.ssd_recurrent", "linear.ssd.ssd_attention", "linear.ssd.ssd_chunked")
def _(s):
    calls = [Call(fn, _ssd_inputs(s), SSD_SPECS, fn.__name__, fn.__name__)
             for fn in (ssd_mod.ssd_recurrent, ssd_mod.ssd_attention)]
    calls.append(Call(ssd_mod.ssd_chunked, {**_ssd_inputs(s), "chunk_size": 2},
                      {**SSD_SPECS, "chunk_size": POS_INT}, "ssd_chunked", "ssd_chunked"))
    return calls


@fuzz("linear.ssd.ssd_mask")
def _(s):
    return [Call(ssd_mod.ssd_mask, {"dt": r(s.b, s.h, s.n).abs(), "A": -r(s.h).abs()},
                 {"dt": T(rank=3, tied=(1,), names=("A",)), "A": T(rank=1, tied=(0,), names=("dt",))})]


SPARSE_QKV = {"q": T(rank=4, tied=(0, 1, 3), names=("k", "v")), "k": T(rank=4, tied=(0, 1, 2, 3), names=("q", "v")),
              "v": T(rank=4, tied=(0, 1, 2), names=("q", "k"))}


@fuzz("linear.sparse.causal_keys")
def _(s):
    return [Call(sparse_mod.causal_keys, {"n": s.n, "m": s.m}, {"n": NONNEG_INT, "m": NONNEG_INT})]


@fuzz("linear.sparse.window_keys")
def _(s):
    return [Call(sparse_mod.window_keys, {"n": s.n, "m": s.m, "window": 2},
                 {"n": NONNEG_INT, "m": NONNEG_INT, "window": POS_INT})]


@fuzz("linear.sparse.attend_masked")
def _(s):
    return [Call(sparse_mod.attend_masked, {**qkv(s), "mask": ones(s.b, 1, s.n, s.m)},
                 {**SPARSE_QKV, "mask": T(BOOL, min_rank=2, tied=(0, -2, -1), lead_fixed=True)})]


@fuzz("linear.sparse.lightning_indexer")
def _(s):
    return [Call(sparse_mod.lightning_indexer, {"q_idx": r(s.b, s.n, s.h, s.d), "k_idx": r(s.b, s.m, s.d),
                                                "w": r(s.b, s.n, s.h)},
                 {"q_idx": T(rank=4, tied=(0, 1, 2, 3)), "k_idx": T(rank=3, tied=(0, 2), names=("q_idx",)),
                  "w": T(rank=3, tied=(0, 1, 2), names=("q_idx",))})]


@fuzz("linear.sparse.topk_mask")
def _(s):
    return [Call(sparse_mod.topk_mask, {"index_scores": r(s.b, s.n, s.m), "topk": 2, "causal": False},
                 {"index_scores": T(min_rank=2, dtype_peer=False, device_peer=False), "topk": POS_INT,
                  "causal": FLAG})]


@fuzz("linear.sparse.topk_sparse_attention")
def _(s):
    return [Call(sparse_mod.topk_sparse_attention, {**qkv(s), "index_scores": r(s.b, s.n, s.m), "topk": 2},
                 {**SPARSE_QKV, "index_scores": T(rank=3, tied=(0, 1, 2), dtype_peer=False), "topk": POS_INT,
                  "causal": FLAG})]


@fuzz("linear.sparse.compressed_attention")
def _(s):
    return [Call(sparse_mod.compressed_attention, {**qkv(s), "block": 2}, {**SPARSE_QKV, "block": POS_INT})]


@fuzz("linear.sparse.selection_mask")
def _(s):
    m = s.m + 2
    return [Call(sparse_mod.selection_mask, {"block_weights": r(s.b, s.h, s.n, m // 2).softmax(-1), "n": s.n, "m": m,
                                             "block": 2, "n_select": 2},
                 {"block_weights": T(rank=4, tied=(2, 3), dtype_peer=False, device_peer=False,
                                     names=("n", "m", "block")),
                  "n": Bad(-1, 2.5, True, "2", s.n + 1), "m": Bad(-1, 2.5, "4", m + 2), "block": POS_INT,
                  "n_select": POS_INT})]


@fuzz("linear.sparse.nsa_attention")
def _(s):
    return [Call(sparse_mod.nsa_attention, {**qkv(s), "gates": r(s.b, s.h, s.n, 3).sigmoid(), "block": 2,
                                            "n_select": 1, "window": 2},
                 {**SPARSE_QKV, "gates": T(rank=4, tied=(0, 1, 2, 3), dtype_peer=False), "block": POS_INT, "n_select": POS_INT,
                  "window": POS_INT})]


COST_SPECS = {"context": POS_INT, "n_heads": POS_INT, "d_qk": POS_INT, "d_v": POS_INT, "kv_bytes_per_token": POS_INT}
COST_ARGS = {"context": 4096, "n_heads": 8, "d_qk": 64, "d_v": 64, "kv_bytes_per_token": 256}


@fuzz("linear.sparse.dense_decode_cost")
def _(s):
    return [Call(sparse_mod.dense_decode_cost, dict(COST_ARGS), COST_SPECS)]


@fuzz("linear.sparse.dsa_decode_cost")
def _(s):
    return [Call(sparse_mod.dsa_decode_cost, dict(COST_ARGS),
                 {**COST_SPECS, "topk": POS_INT, "index_heads": POS_INT, "index_dim": POS_INT,
                  "index_bytes_per_token": POS_INT})]


@fuzz("linear.sparse.nsa_decode_cost")
def _(s):
    return [Call(sparse_mod.nsa_decode_cost, dict(COST_ARGS),
                 {**COST_SPECS, "block": POS_INT, "n_select": POS_INT, "window": POS_INT})]


@fuzz("linear.hybrid_memory.layer_pattern")
def _(s):
    return [Call(hybrid_mod.layer_pattern, {"n_layers": 8, "full_attention_interval": 4},
                 {"n_layers": POS_INT, "full_attention_interval": POS_INT})]


@fuzz("linear.hybrid_memory.pattern_from_full_layers")
def _(s):
    return [Call(hybrid_mod.pattern_from_full_layers, {"n_layers": 8, "full_layers": [4, 8]},
                 {"n_layers": POS_INT, "full_layers": Bad(3, None, "48", [0], [9], [2.5], [True])})]


def _hybrid_config():
    return hybrid_mod.HybridConfig("toy", hybrid_mod.layer_pattern(4, 2), kv_per_token=8, state_per_layer=16)


@fuzz("linear.hybrid_memory.HybridConfig")
def _(s):
    return [Call(hybrid_mod.HybridConfig, {"name": "toy", "layer_types": ("linear", "full"), "kv_per_token": 8,
                                           "state_per_layer": 16, "conv_per_layer": 2},
                 {"name": Bad(3, None), "layer_types": Bad((), ("full", "moe"), "full", None, 3),
                  "kv_per_token": NONNEG_INT, "state_per_layer": NONNEG_INT, "conv_per_layer": NONNEG_INT})]


@fuzz("linear.hybrid_memory.cache_bytes")
def _(s):
    return [Call(hybrid_mod.cache_bytes, {"config": _hybrid_config(), "context": 1024, "batch": 2},
                 {"config": Bad(3, None, "config"), "context": NONNEG_INT, "batch": POS_INT,
                  "kv_bytes": Bad(-2, "2", None, float("nan"), float("inf"), True),
                  "state_bytes": Bad(-0.5, "4", None, True)})]


QWEN3_NEXT = {"num_hidden_layers": 8, "full_attention_interval": 4, "num_key_value_heads": 2, "head_dim": 4,
              "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 4,
              "linear_value_head_dim": 4, "linear_conv_kernel_dim": 4}
KIMI_LINEAR = {"num_hidden_layers": 8, "kv_lora_rank": 16, "qk_rope_head_dim": 4,
               "linear_attn_config": {"num_heads": 2, "head_dim": 4, "full_attn_layers": [4, 8],
                                      "short_conv_kernel_size": 4}}


@fuzz("linear.hybrid_memory.qwen3_next_config")
def _(s):
    missing = {k: v for k, v in QWEN3_NEXT.items() if k != "head_dim"}
    return [Call(hybrid_mod.qwen3_next_config, {"hf": dict(QWEN3_NEXT)},
                 {"hf": Bad(3, None, "config.json", missing, {**QWEN3_NEXT, "head_dim": "4"})})]


@fuzz("linear.hybrid_memory.kimi_linear_config")
def _(s):
    missing = {k: v for k, v in KIMI_LINEAR.items() if k != "kv_lora_rank"}
    return [Call(hybrid_mod.kimi_linear_config, {"hf": dict(KIMI_LINEAR)},
                 {"hf": Bad(3, None, missing, {**KIMI_LINEAR, "linear_attn_config": 3},
                            {**KIMI_LINEAR, "kv_lora_rank": -1})})]


# distributed/

LAYOUT = Bad("ring", None, 3)
WORLD = {"rank": Bad(-1, 2.5, True, "0", 2), "world_size": Bad(0, -1, 2.5, True, "2")}


@fuzz("distributed.context_parallel.shard_positions")
def _(s):
    return [Call(cp_mod.shard_positions, {"n_local": 4, "rank": 1, "world_size": 2, "layout": "zigzag"},
                 {"n_local": Bad(-1, 2.5, True, "4", 3), **WORLD, "layout": LAYOUT})]


@fuzz("distributed.context_parallel.shard_sequence")
def _(s):
    return [Call(cp_mod.shard_sequence, {"x": r(s.b, s.h, 4, s.d), "rank": 1, "world_size": 2, "layout": "zigzag",
                                         "dim": 2},
                 {"x": T(ANY, min_rank=1, device_peer=False), **WORLD, "layout": LAYOUT,
                  "dim": Bad(4, -5, 2.5, True, "2", 0)})]


@fuzz("distributed.context_parallel.unshard_sequence")
def _(s):
    shards = [r(s.b, s.h, 2, s.d), r(s.b, s.h, 2, s.d)]
    return [Call(cp_mod.unshard_sequence, {"shards": shards, "layout": "zigzag", "dim": 2},
                 {"shards": Bad([], 3, None, [shards[0], "x"], [shards[0], r(s.b, s.h, 3, s.d)]),
                  "layout": LAYOUT, "dim": Bad(4, -5, 2.5, True, "2")})]


@fuzz("distributed.context_parallel.pad_to_multiple")
def _(s):
    return [Call(cp_mod.pad_to_multiple, {"x": r(s.b, s.h, s.n, s.d), "multiple": 4, "dim": -2},
                 {"x": T(ANY, min_rank=1, device_peer=False), "multiple": POS_INT,
                  "dim": Bad(4, -5, 2.5, True, "2")})]


@fuzz("distributed.context_parallel.merge_block")
def _(s):
    lead = (s.b, s.h, s.n)
    kw = {"m": r(*lead, 1), "l": r(*lead, 1).abs(), "o": r(*lead, s.d), "scores": r(*lead, s.m),
          "v": r(s.b, s.h, s.m, s.d)}
    return [Call(cp_mod.merge_block, kw,
                 {"m": T(min_rank=2, tied=(0, 1, 2, 3), names=("l", "o", "scores")),
                  "l": T(min_rank=2, tied=(0, 1, 2, 3), names=("m", "o", "scores")),
                  "o": T(min_rank=2, tied=(0, 1, 2, 3), names=("m", "v")),
                  "scores": T(min_rank=2, tied=(0, 1, 2, 3), names=("m", "v")),
                  "v": T(min_rank=2, tied=(0, 1, 2, 3), names=("scores", "o"))})]


CP_QKV = {"q": T(rank=4, tied=(0, 1, 2, 3), names=("k", "v")), "k": T(rank=4, tied=(0, 1, 2, 3), names=("q", "v")),
          "v": T(rank=4, tied=(0, 1, 2), names=("q", "k")), "key_padding_mask": KEY_MASK, "is_causal": FLAG}


def _cp_inputs(s, n=4):
    return {"q": r(s.b, s.h, n, s.d), "k": r(s.b, s.h, n, s.d), "v": r(s.b, s.h, n, s.d + 1),
            "key_padding_mask": ones(s.b, n), "is_causal": True}


@fuzz("distributed.context_parallel.ring_attention", "distributed.context_parallel.allgather_kv_attention")
def _(s):
    return [Call(fn, {**_cp_inputs(s), "layout": "zigzag", "scale": 0.5},
                 {**CP_QKV, "layout": LAYOUT, "scale": SCALE}, fn.__name__, fn.__name__)
            for fn in (cp_mod.ring_attention, cp_mod.allgather_kv_attention)]


@fuzz("distributed.context_parallel.ulysses_attention")
def _(s):
    return [Call(cp_mod.ulysses_attention, {**_cp_inputs(s), "scale": 0.5}, {**CP_QKV, "scale": SCALE})]


@fuzz("distributed.context_parallel.simulate_ring_attention")
def _(s):
    return [Call(cp_mod.simulate_ring_attention, {**_cp_inputs(s), "world_size": 2, "layout": "zigzag"},
                 {**CP_QKV, "world_size": Bad(0, -1, 2.5, True, "2", 3), "layout": LAYOUT})]


@fuzz("distributed.context_parallel.causal_work_per_rank")
def _(s):
    return [Call(cp_mod.causal_work_per_rank, {"n": 8, "world_size": 2, "layout": "zigzag"},
                 {"n": Bad(-1, 2.5, True, "8", 6), "world_size": Bad(0, -1, 2.5, True, "2", 3), "layout": LAYOUT})]


# (end of efficiency/, linear/, distributed/)


# ----------------------------------------------------------------------------
# The tests
# ----------------------------------------------------------------------------

SIZES = st.builds(
    SimpleNamespace,
    b=st.integers(2, 3), h=st.integers(2, 3), n=st.integers(2, 4), m=st.integers(2, 5), d=st.sampled_from([2, 4]),
)


def test_every_public_callable_is_fuzzed():
    public = set(public_callables())
    assert public, "found no public callables in snippets/"
    missing = sorted(public - set(FUZZ) - set(NOT_FUZZED))
    assert not missing, f"public callables with no entry in FUZZ (add one to {__file__}): {missing}"
    stale = sorted((set(FUZZ) | set(NOT_FUZZED)) - public)
    assert not stale, f"FUZZ entries that name no public callable: {stale}"


@pytest.mark.parametrize("key", sorted(FUZZ))
def test_valid_calls_run(key):
    """Every entry's unbroken call works, so an error in the fuzz test is the broken argument's."""
    torch.default_generator.manual_seed(0)  # CPU only: cheaper than torch.manual_seed per example
    for call in FUZZ[key](SimpleNamespace(b=2, h=2, n=3, m=4, d=2)):
        call.fn(**call.kwargs)


def _names_in(message: str, names: tuple[str, ...]) -> bool:
    return any(re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)", message) for n in names)


def _complaint(call: Call, arg: str, how: str, make: Callable[[], Any], names: tuple[str, ...]) -> str | None:
    """Call with ``arg`` broken by ``make``; None if a good error came, else what went wrong."""
    context = f"[{call.label}] with {arg} = {how}"
    try:
        call.fn(**{**call.kwargs, arg: make()})
    except (ValueError, TypeError) as error:
        message = str(error)
        if not _names_in(message, (arg,) + names):
            return f"{context}: the message does not name {arg!r}: {message}"
        if "got" not in message:
            return f"{context}: the message does not say what it got: {message}"
        return None
    except Exception as error:  # noqa: BLE001 - the point of the test
        return f"{context}: raised {type(error).__name__} instead of ValueError/TypeError: {error}"
    return f"{context}: no error was raised"


@pytest.mark.parametrize("key", sorted(FUZZ))
def test_every_way_to_break_each_argument_once(key):
    """Deterministic sweep: every mutation of every argument, once, at fixed sizes."""
    torch.default_generator.manual_seed(0)
    complaints = []
    for call in FUZZ[key](SimpleNamespace(b=2, h=3, n=3, m=4, d=2)):
        for arg, spec in call.specs.items():
            for how, make in spec.mutations(call.kwargs.get(arg)):
                complaint = _complaint(call, arg, how, make, spec.names)
                if complaint:
                    complaints.append(complaint)
    assert not complaints, f"{key}:\n" + "\n".join(complaints)


@pytest.mark.parametrize("key", sorted(FUZZ))
@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_malformed_input_gets_a_named_error(key, data):
    torch.default_generator.manual_seed(0)  # CPU only: cheaper than torch.manual_seed per example
    sizes = data.draw(SIZES, label="sizes")
    calls = FUZZ[key](sizes)
    call = data.draw(st.sampled_from([c for c in calls if c.specs]), label="call")
    arg = data.draw(st.sampled_from(sorted(call.specs)), label="argument")
    spec = call.specs[arg]
    base = call.kwargs.get(arg)
    how, make = data.draw(st.sampled_from(spec.mutations(base)), label="mutation")
    complaint = _complaint(call, arg, how, make, spec.names)
    assert complaint is None, f"{key} {complaint}"
