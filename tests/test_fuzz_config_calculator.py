"""Malformed input for snippets/modern/config_calculator.py, refused by name."""

from __future__ import annotations

from fuzz_support import POS_INT, Bad, Call, fuzz, fuzz_tests
from snippets.modern import config_calculator as CC

LAYERS = ["sliding_attention", "full_attention", "chunked_attention", "linear_attention"]
LINEAR = {f"linear_{f}": 2 for f in ("num_key_heads", "num_value_heads", "key_head_dim",
                                     "value_head_dim", "conv_kernel_dim")}


def _config(s) -> dict:
    return {"num_hidden_layers": 4, "num_attention_heads": s.h, "num_key_value_heads": 1,
            "head_dim": s.d, "layer_types": LAYERS, "sliding_window": 2,
            "attention_chunk_size": 3, **LINEAR}


def _broken(s) -> Bad:
    """Configs a caller might really pass: not a dict, a field missing or wrong."""
    good = _config(s)
    return Bad(None, [good], "config.json",
               {k: v for k, v in good.items() if k != "num_hidden_layers"},
               {**good, "num_attention_heads": 0},
               {**good, "num_key_value_heads": 1.5},
               {**good, "layer_types": LAYERS[:3]},
               {**good, "layer_types": ["global"] * 4},
               {**good, "sliding_window": None},
               {**good, "attention_chunk_size": -3},
               {**good, "linear_key_head_dim": None},
               {"text_config": {**good, "head_dim": None}},
               {**good, "kv_lora_rank": 4},
               {**good, "num_kv_shared_layers": -1},
               {**good, "compress_ratios": [0, 4, 128, 4]})


@fuzz("modern.config_calculator.cache_from_config")
def _(s):
    return [Call(CC.cache_from_config,
                 {"config": _config(s), "tokens": s.m, "kv_dtype_bytes": 2, "state_dtype_bytes": 4,
                  "batch": s.b},
                 {"config": _broken(s), "tokens": POS_INT, "kv_dtype_bytes": POS_INT,
                  "state_dtype_bytes": POS_INT, "batch": POS_INT})]


@fuzz("modern.config_calculator.flops_from_config")
def _(s):
    return [Call(CC.flops_from_config, {"config": _config(s), "tokens": s.m},
                 {"config": _broken(s), "tokens": POS_INT})]


test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error = (
    fuzz_tests("modern.config_calculator.")
)
