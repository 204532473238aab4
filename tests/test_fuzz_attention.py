"""Malformed input for the attention snippets: every public callable refuses it by name.

The framework (what makes an argument wrong, the sweep and the hypothesis test)
is in ``tests/fuzz_support.py``; this file registers one entry per public
callable of ``snippets/attention/`` and collects the three tests over them.
"""

from __future__ import annotations

import math  # noqa: F401
import pytest  # noqa: F401
import torch
from torch import nn  # noqa: F401

from fuzz_support import *  # noqa: F401,F403
from fuzz_support import fuzz_tests
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
                 {"q": T(rank=4, tied=(0, 1, 3), names=("k",)), "k": T(rank=4, tied=(0, 1, 2, 3), names=("v",)),
                  "v": T(rank=4, tied=(0, 1, 2)),
                  "slopes": T(rank=1, tied=(0,), dtype_peer=False, device_peer=False)})]




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
                      {"mha": NOT_A_MODULE, "n_kv_heads": Bad(0, 3, 2.5)}, "from_torch"))
    return calls


@fuzz("attention.grouped_query.repeat_kv")
def _(s):
    return [Call(gqa_mod.repeat_kv, {"x": r(s.b, s.h, s.m, s.d), "n_rep": 2},
                 {"x": T(ANY, rank=4, device_peer=False), "n_rep": POS_INT})]


@fuzz("attention.rotary.rotary_tables")
def _(s):
    return [Call(rotary_mod.rotary_tables, {"positions": ids(s.n, high=9), "rotary_dim": 2 * s.d},
                 {"positions": T(ANY, min_rank=1, device_peer=False),
                  "rotary_dim": Bad(0, 3, 2.5), "base": Bad(1.0, -2.0, float("nan"), None)})]


@fuzz("attention.rotary.apply_rotary")
def _(s):
    x = r(s.b, s.h, s.n, 2 * s.d)
    cos, sin = rotary_mod.rotary_tables(torch.arange(s.n), 2 * s.d)
    bcos, bsin = rotary_mod.rotary_tables(ids(s.b, s.n, high=9), s.d)  # (B, N, r/2), r < d
    table = T(ANY, rank=2, tied=(0, 1), dtype_peer=False, names=("cos", "sin"))
    batched = T(ANY, rank=3, tied=(0, 1, 2), dtype_peer=False, names=("cos", "sin"))
    return [
        Call(rotary_mod.apply_rotary, {"x": x, "cos": cos, "sin": sin},
             {"x": T(rank=4, tied=(-2,), dtype_peer=False, names=("cos", "sin")),
              "cos": table, "sin": table}),
        Call(rotary_mod.apply_rotary, {"x": x, "cos": bcos, "sin": bsin},
             {"x": T(rank=4, tied=(0, -2), dtype_peer=False, names=("cos", "sin")),
              "cos": batched, "sin": batched}, "batched tables"),
    ]


@fuzz("attention.rotary.RotaryEmbedding")
def _(s):
    return _module_calls(
        rotary_mod.RotaryEmbedding, {"d_head": 2 * s.d},
        {"d_head": Bad(0, 3, 2.5, names=("rotary_dim",)), "base": Bad(1.0, None)},
        lambda mod, **kw: mod(kw.pop("q"), kw.pop("k"), **kw),
        {"q": r(s.b, s.h, s.n, 2 * s.d), "k": r(s.b, 1, s.n + s.m, 2 * s.d), "offset": 1},
        {"q": T(rank=4, tied=(-1,), dtype_peer=False, names=("k",)),
         "k": T(rank=4, tied=(-1,), dtype_peer=False, names=("q",)), "offset": NONNEG_INT},
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
                 {"x": T(rank=3, tied=(1, -1), names=("allowed", "mha")),
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
                 {"x": T(rank=3, tied=(-1,), names=("mha",))}, fn.__name__, fn.__name__)
            for fn in (cm.mha_self_attend_wrong, cm.mha_self_attend)]


# ----------------------------------------------------------------------------


test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error = (
    fuzz_tests('attention.')
)
