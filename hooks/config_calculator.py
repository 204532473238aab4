"""MkDocs hook: the census models as config.json dicts, for the calculator form.

docs/modern/models.md holds a form (``<form class="fg-calc">``) that runs
``docs/javascripts/config_calculator.js``, the browser's copy of
snippets/modern/config_calculator.py. The placeholder

    <!-- calculator:census -->

becomes a ``<script type="application/json" class="fg-calc-census">`` with one
entry per row of docs/data/models.yaml: the row's attention written in the
fields a ``config.json`` uses, so that choosing a model fills the form with
a config the reader can edit. The layers are spelt the way configs spell them
(``sliding_window_pattern``, ``full_attention_interval``) where that gives the
row's layer kinds, and as ``layer_types`` otherwise. A latent model's
``v_head_dim`` comes from the row's optional field of that name. What the census
does not hold is left ``null`` (a latent row without ``v_head_dim``; a hybrid's
``linear_*`` sizes, except those docs/data/hybrids.yaml copies from the
released file, which Kimi Linear's Kimi Delta Attention layers do not have), so
that the calculator names the field to fill in. DeepSeek-V4's rows, whose
compressed entries the calculator does not read, are left out.
tests/test_calculator_browser.py checks every entry against the table.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import re

import yaml
from mkdocs.exceptions import PluginError

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = "modern/models.md"
PLACEHOLDER = re.compile(r"<!--\s*calculator:census\s*-->")
HYBRIDS = ROOT / "docs" / "data" / "hybrids.yaml"
LINEAR_FROM = {"Qwen3-Next 80B-A3B": "qwen3_next"}  # census name -> hybrids.yaml key
LINEAR_FIELDS = tuple(f"linear_{f}" for f in ("num_key_heads", "num_value_heads", "key_head_dim",
                                              "value_head_dim", "conv_kernel_dim"))


def _table():
    spec = importlib.util.spec_from_file_location("field_guide_models_table", ROOT / "hooks" / "models_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def config_of(model: dict, table, hybrids: dict) -> dict:
    """One census row as the fields of a config.json."""
    value = lambda field: model[field]["value"]  # noqa: E731
    n, pattern = value("layers"), value("layer_pattern")
    out = {"num_hidden_layers": n, "num_attention_heads": value("heads"),
           "num_key_value_heads": value("kv_heads"), "head_dim": value("head_dim")}
    local, every, uneven = pattern.get("local"), pattern.get("every"), pattern.get("full_layers")
    if pattern.get("window"):
        out["sliding_window"] = pattern["window"]
    if pattern.get("chunk"):
        out["attention_chunk_size"] = pattern["chunk"]
    if local == "sliding_attention" and every is not None and not uneven:
        out["sliding_window_pattern"] = every  # one full layer closes each group
    elif local == "linear_attention" and every is not None and not uneven:
        out["full_attention_interval"] = every
    elif local not in (None, "sliding_attention") or uneven:  # chunked, or uneven
        out["layer_types"] = table.layer_types(model)
    if "kv_lora_rank" in model:
        rope = value("rope_head_dim")
        out.update(kv_lora_rank=value("kv_lora_rank"), qk_rope_head_dim=rope,
                   qk_nope_head_dim=value("head_dim") - rope,
                   v_head_dim=model.get("v_head_dim", {}).get("value"))  # null where the row has none
        if "index_head_dim" in model:
            out["index_head_dim"] = value("index_head_dim")
    if "linear_attention" in table.layer_types(model):
        source = hybrids.get(LINEAR_FROM.get(model["name"]), {}).get("config", {})
        out.update({f: source.get(f) for f in LINEAR_FIELDS})
    return out


def census() -> list[dict]:
    """``[{"name": ..., "config": {...}}]`` for every row the calculator can read."""
    table = _table()
    hybrids = yaml.safe_load(HYBRIDS.read_text(encoding="utf-8"))
    return [{"name": m["name"], "config": config_of(m, table, hybrids)}
            for m in table.load_models() if m.get("key_is_value", {}).get("value") is not True]


def script(entries: list[dict]) -> str:
    text = json.dumps(entries, separators=(",", ":")).replace("</", "<\\/")
    return f'<script type="application/json" class="fg-calc-census">{text}</script>'


def on_page_markdown(markdown: str, page, config, files) -> str:
    found = PLACEHOLDER.findall(markdown)
    if page.file.src_uri == PAGE and len(found) != 1:
        raise PluginError(f"{PAGE} must hold <!-- calculator:census --> once, found {len(found)}")
    if not found:
        return markdown
    try:
        entries = census()
    except ValueError as error:
        raise PluginError(f"calculator census: {error}") from error
    return PLACEHOLDER.sub(lambda _: script(entries), markdown)
