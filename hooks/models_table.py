"""MkDocs hook: render docs/data/models.yaml as the tables of the "what each model uses" page.

A page that holds the placeholders

    <!-- models:attention -->   the attention of each model, every cell marked
                                with the source it was read from
    <!-- models:cache -->       the decoding cache at 8k, 32k and 128k tokens,
                                computed by snippets/modern/cache_size.py and
                                snippets/modern/layer_patterns.py
    <!-- models:sources -->     the sources themselves

gets them replaced by Markdown tables. The data file is checked first: a field
without a value or a source, a source that is not listed, or an unknown layer
kind fails the build, and so does a placeholder left unreplaced or misspelt.
tests/test_models_data.py calls the same functions.
"""

from __future__ import annotations

import pathlib
import re
import sys

import yaml
from mkdocs.exceptions import PluginError

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data" / "models.yaml"
PLACEHOLDER = re.compile(r"<!--\s*models:([\w-]+)\s*-->")

# (field, column title) in table order; every model has each of these.
COLUMNS = [
    ("attention", "attention"),
    ("heads", "$H$"),
    ("kv_heads", "$H_{kv}$"),
    ("head_dim", "$d$"),
    ("layers", "layers"),
    ("layer_pattern", "layers: local and global"),
    ("positions", "positions"),
    ("rope_scaling", "RoPE scaling"),
    ("norm", "norm"),
    ("qk_norm", "QK-norm"),
    ("softcap", "soft-cap"),
    ("sinks", "sinks"),
]
MLA_FIELDS = ("kv_lora_rank", "rope_head_dim")
# index_head_dim: the key a sparse-attention indexer caches per entry (DeepSeek
# Sparse Attention); key_is_value: one tensor serves as key and value, so it is
# cached once (DeepSeek-V4); v_head_dim: a latent model's value width per head,
# which the cache does not hold but the calculator's FLOPs read.
OPTIONAL = ("notes",) + MLA_FIELDS + ("index_head_dim", "key_is_value", "v_head_dim")
SOURCE_KINDS = {"config": ("repo", "file"), "paper": ("arxiv", "where"), "code": ("repo", "file", "version")}
MARK = {"config": "c", "paper": "p", "code": "m"}
LENGTHS = (8192, 32768, 131072)
BYTES_PER_ELEMENT = 2  # bfloat16


def _snippets():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from snippets.modern import cache_size, layer_patterns

    return cache_size, layer_patterns


# --- reading and checking ------------------------------------------------------


def check_model(model: dict) -> None:
    """Raise ValueError unless every field has a value and a listed source."""
    name = model.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"a model has no name: {model!r}")
    if not isinstance(model.get("year"), int):
        raise ValueError(f"{name}: year must be an int, got {model.get('year')!r}")
    sources = model.get("sources")
    if not isinstance(sources, dict) or not sources:
        raise ValueError(f"{name}: no sources")
    for key, source in sources.items():
        if key not in SOURCE_KINDS:
            raise ValueError(f"{name}: source {key!r} is not one of {sorted(SOURCE_KINDS)}")
        missing = [f for f in SOURCE_KINDS[key] if not str(source.get(f, "")).strip()]
        if missing:
            raise ValueError(f"{name}: source {key!r} lacks {missing}")
    fields = [f for f, _ in COLUMNS] + (list(MLA_FIELDS) if model.get("attention", {}).get("value") == "MLA" else [])
    for field in fields + [f for f in OPTIONAL if f in model]:
        cell = model.get(field)
        if not isinstance(cell, dict) or set(cell) != {"value", "source"}:
            raise ValueError(f"{name}: {field} must be {{value: ..., source: ...}}, got {cell!r}")
        if cell["value"] is None or cell["value"] == "":
            raise ValueError(f"{name}: {field} has no value")
        if cell["source"] not in sources:
            raise ValueError(f"{name}: {field} cites source {cell['source']!r}, which the model does not list")
    ints = ("heads", "kv_heads", "head_dim", "layers") + (MLA_FIELDS if "kv_lora_rank" in model else ())
    if "v_head_dim" in model and "kv_lora_rank" not in model:
        raise ValueError(f"{name}: v_head_dim is a latent model's field; the row has no kv_lora_rank")
    for field in ints + tuple(f for f in ("index_head_dim", "v_head_dim") if f in model):
        value = model[field]["value"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: {field} must be a positive int, got {value!r}")
    pattern = model["layer_pattern"]["value"]
    if not isinstance(pattern, dict) or not {"local", "every"} <= set(pattern):
        raise ValueError(f"{name}: layer_pattern needs local and every, got {pattern!r}")
    layer_types(model)  # raises on an unknown kind or a missing window/chunk


def load_models(path: pathlib.Path = DATA) -> list[dict]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, list) or not models:
        raise ValueError(f"{path}: expected a list under 'models'")
    for model in models:
        check_model(model)
    names = [m["name"] for m in models]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: duplicate model names")
    return models


# --- what the calculators make of it ------------------------------------------


def layer_types(model: dict) -> list[str]:
    """The kind of every layer, from the model's layer_pattern."""
    _, patterns = _snippets()
    n = model["layers"]["value"]
    pattern = model["layer_pattern"]["value"]
    local, every = pattern.get("local"), pattern.get("every")
    if local is None:
        return ["full_attention"] * n
    full_layers, ratios = pattern.get("full_layers"), pattern.get("compress_ratios")
    if full_layers is not None and (every is not None or not isinstance(full_layers, list) or not full_layers
                                    or full_layers != sorted(set(full_layers))
                                    or not all(isinstance(i, int) and 0 <= i < n for i in full_layers)):
        raise ValueError(f"{model['name']}: full_layers must be sorted distinct layer indices below {n} "
                         f"with every: null, got {full_layers!r}")
    if ratios is not None and (local != "sliding_attention" or every is not None or not isinstance(ratios, list)
                               or len(ratios) != n
                               or not all(isinstance(m, int) and m >= 0 for m in ratios)):
        raise ValueError(f"{model['name']}: compress_ratios must be one int >= 0 per layer (0: window only), "
                         f"with local: sliding_attention and every: null, got {ratios!r}")
    if local == "sliding_attention" and not pattern.get("window"):
        raise ValueError(f"{model['name']}: a sliding pattern needs a window")
    if local == "chunked_attention" and not pattern.get("chunk"):
        raise ValueError(f"{model['name']}: a chunked pattern needs a chunk")
    if every is None:
        patterns.periodic_layer_types(0, 1, local=local)  # checks the kind
        full = set(full_layers or ())
        return ["full_attention" if i in full else local for i in range(n)]
    return patterns.periodic_layer_types(n, every, local=local)


def _index_key(model: dict) -> int:
    return model["index_head_dim"]["value"] if "index_head_dim" in model else 0


def elements_per_token(model: dict) -> int:
    """Numbers one attention layer caches per token (per window token for compressed layers)."""
    sizes, _ = _snippets()
    if model["attention"]["value"] == "MLA":
        latent = sizes.mla_cache_elements(model["kv_lora_rank"]["value"], model["rope_head_dim"]["value"])
        return latent + _index_key(model)  # an indexer caches its own key for every token
    if model.get("key_is_value", {}).get("value") is True:
        return model["kv_heads"]["value"] * model["head_dim"]["value"]
    return sizes.mha_cache_elements(model["kv_heads"]["value"], model["head_dim"]["value"])


def compressed_entries(model: dict, seq_len: int) -> int:
    """Numbers the compressed layers cache on top of their windows after seq_len tokens.

    A layer with ratio m keeps floor(seq_len / m) complete entries, each as wide as a
    window entry; the layers with ratio `indexed_ratio` also keep an index key per entry.
    """
    pattern = model["layer_pattern"]["value"]
    indexed = pattern.get("indexed_ratio")
    return sum((seq_len // m) * (elements_per_token(model) + (_index_key(model) if m == indexed else 0))
               for m in pattern.get("compress_ratios") or () if m)


def cache_bytes(model: dict, seq_len: int, *, all_global: bool = False) -> int:
    """The decoding cache of one sequence in bfloat16 (local layers capped).

    all_global makes every softmax layer full and drops compressed entries.
    """
    sizes, _ = _snippets()
    types = layer_types(model)
    if all_global:
        types = ["full_attention" if t != "linear_attention" else t for t in types]
    pattern = model["layer_pattern"]["value"]
    windows = sizes.model_cache_bytes(seq_len, types, elements_per_token(model), window=pattern.get("window"),
                                      chunk=pattern.get("chunk"), bytes_per_element=BYTES_PER_ELEMENT)
    return windows + (0 if all_global else BYTES_PER_ELEMENT * compressed_entries(model, seq_len))


# --- rendering ----------------------------------------------------------------


def _text(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value).replace("|", "\\|")


def _pattern_text(model: dict) -> str:
    _, patterns = _snippets()
    pattern = model["layer_pattern"]["value"]
    text = patterns.summarize_layer_types(layer_types(model))
    if pattern.get("compress_ratios"):
        ratios = pattern["compress_ratios"]
        parts = [f"{ratios.count(0)} window only"] if 0 in ratios else []
        parts += [f"{ratios.count(m)} with 1 compressed entry per {m} tokens"
                  + (" and an indexer" if m == pattern.get("indexed_ratio") else "")
                  for m in sorted(set(ratios) - {0})]
        text = f"all {len(ratios)} sliding: " + ", ".join(parts)
    if pattern.get("full_layers"):  # uneven: name the global layers, counted from 1 as configs do
        full = pattern["full_layers"]
        local = pattern["local"].removesuffix("_attention")
        text = (f"{len(full)} full of {model['layers']['value']}, the others {local}: "
                f"full at {', '.join(str(i + 1) for i in full)}")
    if pattern.get("window"):
        text += f"; window {pattern['window']:,}"
    if pattern.get("chunk"):
        text += f"; chunk {pattern['chunk']:,}"
    return text


def cell(model: dict, field: str) -> str:
    entry = model[field]
    text = _pattern_text(model) if field == "layer_pattern" else _text(entry["value"])
    return f"{text}<sup>{MARK[entry['source']]}</sup>"


# Two tables of at most eight columns each, so neither is wider than the page's column.
COLUMN_GROUPS = (COLUMNS[:6], COLUMNS[6:])


def _table(models: list[dict], columns, lead: tuple[str, ...]) -> list[str]:
    head = "| model | " + " | ".join(lead + tuple(title for _, title in columns)) + " |"
    rule = "|" + "---|" * (len(columns) + 1 + len(lead))
    first = {"year": lambda m: str(m["year"])}
    return [head, rule] + [
        f"| {m['name']} | " + " | ".join([first[c](m) for c in lead] + [cell(m, f) for f, _ in columns]) + " |"
        for m in models
    ]


def render_attention(models: list[dict]) -> str:
    shape = _table(models, COLUMN_GROUPS[0], ("year",))
    rest = _table(models, COLUMN_GROUPS[1], ())
    notes = [f"* **{m['name']}**: {_text(m['notes']['value'])}<sup>{MARK[m['notes']['source']]}</sup>"
             for m in models if "notes" in m]
    legend = ("Each value is marked with where it was read: <sup>c</sup> the released `config.json`, "
              "<sup>p</sup> the paper, <sup>m</sup> the model's code in `transformers`; "
              "the [sources](#sources) list them.")
    return "\n".join([*shape, "", *rest, "", legend, "", *notes])


def _size(n: int) -> str:
    if n >= 2**30:
        return f"{n / 2**30:.2f} GiB"
    return f"{n / 2**20:.0f} MiB"


def render_cache(models: list[dict]) -> str:
    head = ("| model | cached per token and layer | softmax layers, capped / full | "
            + " | ".join(f"{n // 1024}k tokens" for n in LENGTHS) + " | 128k, every layer global |")
    rule = "|" + "---|" * (len(LENGTHS) + 4)
    rows = []
    for m in models:
        types = layer_types(m)
        capped = sum(t in ("sliding_attention", "chunked_attention") for t in types)
        full = types.count("full_attention")
        per_token = elements_per_token(m)
        kind = m["attention"]["value"]
        index = f" + index key {m['index_head_dim']['value']}" if "index_head_dim" in m else ""
        if kind == "MLA":
            what = f"{per_token:,} (latent {m['kv_lora_rank']['value']} + rotary key {m['rope_head_dim']['value']}{index})"
        elif m.get("key_is_value", {}).get("value") is True:
            what = (f"{per_token:,} per window token and per compressed entry (key = value, "
                    f"${m['kv_heads']['value']} \\times {m['head_dim']['value']}$){index} in the indexed layers")
        else:
            what = f"{per_token:,} ($2 \\times {m['kv_heads']['value']} \\times {m['head_dim']['value']}$)"
        sizes = " | ".join(_size(cache_bytes(m, n)) for n in LENGTHS)
        rows.append(f"| {m['name']} | {what} | {capped} / {full} | {sizes} | {_size(cache_bytes(m, LENGTHS[-1], all_global=True))} |")
    return "\n".join([head, rule, *rows])


def render_sources(models: list[dict]) -> str:
    head = "| model | config (<sup>c</sup>) | paper (<sup>p</sup>) | code (<sup>m</sup>) |"
    rule = "|---|---|---|---|"
    rows = []
    for m in models:
        s = m["sources"]
        config = f"`{s['config']['repo']}`, {s['config']['file']}" if "config" in s else "—"
        paper = f"arXiv:{s['paper']['arxiv']}, {s['paper']['where']}" if "paper" in s else "—"
        code = f"`{pathlib.PurePosixPath(s['code']['file']).name}` (transformers {s['code']['version']})" if "code" in s else "—"
        rows.append(f"| {m['name']} | {config} | {paper} | {code} |")
    return "\n".join([head, rule, *rows])


RENDERERS = {"attention": render_attention, "cache": render_cache, "sources": render_sources}
PAGE = "modern/models.md"


def replace_placeholders(markdown: str, models: list[dict]) -> str:
    def render(match: re.Match) -> str:
        name = match.group(1)
        if name not in RENDERERS:
            raise PluginError(f"unknown placeholder <!-- models:{name} -->; known: {sorted(RENDERERS)}")
        return RENDERERS[name](models)

    return PLACEHOLDER.sub(render, markdown)


def on_page_markdown(markdown: str, page, config, files) -> str:
    found = set(PLACEHOLDER.findall(markdown))
    if page.file.src_uri == PAGE and found != set(RENDERERS):
        raise PluginError(f"{PAGE} must hold the placeholders {sorted(RENDERERS)}, found {sorted(found)}")
    if not found:
        return markdown
    try:
        models = load_models()
    except ValueError as error:
        raise PluginError(f"docs/data/models.yaml: {error}") from error
    return replace_placeholders(markdown, models)
