"""MkDocs hook: the data behind the attention explorer, and its script tags.

* The explorer page (``docs/explorer.md``) shows the attention of the tiny GPT
  of ``docs/examples/tiny_gpt.py``: the same sizes (two pre-norm layers,
  D = 64, H = 4) trained on the same digit-reversal task, for fewer steps. The
  build trains it on the CPU with one thread (deterministic, about two seconds
  of CPU), runs a few fixed sequences through it and exports every layer's
  per-head queries and keys. The page's script computes the weights from them.
* The export is cached in an ``explorer`` folder of the example cache
  (``$FIELD_GUIDE_EXAMPLE_CACHE`` or ``.cache/examples``), keyed by this file,
  every snippet it imports (transitively), and the Python and torch versions.
* The data is a script (``assets/explorer/tiny-gpt.js``), not a JSON file:
  a page read from ``file://`` may load scripts but not fetch files.
* A page that holds an explorer (``class="fg-explorer"``) or a softmax
  playground (``class="fg-softmax-playground"``) gets ``<script>`` tags for
  ``javascripts/explorer.js`` (and the data) and a link to
  ``stylesheets/explorer.css`` at the end of its content; no other page loads
  them. ``defer`` keeps them from holding up the first paint and runs the
  data first; Material's instant navigation re-runs scripts found in the
  content (in no fixed order: the explorer waits for its data), so the
  widgets start after an instant page change too.
"""

from __future__ import annotations

import base64
import importlib.metadata
import json
import logging
import os
import pathlib
import sys
import time

from mkdocs.structure.files import File, Files
from mkdocs.utils import get_relative_url

# MkDocs loads hooks by path: shared helpers live in a package next to this file.
_HOOKS = str(pathlib.Path(__file__).resolve().parent)
if _HOOKS not in sys.path:
    sys.path.append(_HOOKS)

from field_guide_hooks import closure, torch_threads  # noqa: E402

log = logging.getLogger("mkdocs.hooks.explorer")

HOOK_VERSION = "1"  # bump to invalidate the cached export
DATA_URI = "assets/explorer/tiny-gpt.js"
SCRIPT_URI = "javascripts/explorer.js"
STYLE_URI = "stylesheets/explorer.css"
EXPLORER_CLASS = 'class="fg-explorer'
PLAYGROUND_CLASS = 'class="fg-softmax-playground'

# The explorer's fixed inputs: six digits, "=", the digits reversed.
PROMPTS = ([3, 1, 4, 1, 5, 9], [2, 7, 1, 8, 2, 8], [0, 0, 0, 1, 1, 1], [6, 5, 4, 3, 2, 1])
LENGTH, N_DIGITS = 6, 10
STEPS, SEED = 100, 0

_state: dict = {}


# ----------------------------------------------------------------------------
# The model and its export (also imported by tests/test_explorer.py)
# ----------------------------------------------------------------------------
def _make_block(c):
    from snippets.architecture.transformer_block import TransformerBlock
    from snippets.attention.multi_head import MultiHeadAttention

    attention = MultiHeadAttention(c.d_model, c.n_heads, dropout=c.dropout)
    return TransformerBlock(attention, c.d_model, c.d_ff, dropout=c.dropout, activation="gelu",
                            norm_first=c.norm_first, layer_norm_eps=c.layer_norm_eps)


def sequences():
    """The fixed inputs, ``(S, 2L + 1)`` token ids ("=" is id 10)."""
    import torch

    return torch.tensor([p + [N_DIGITS] + p[::-1] for p in PROMPTS])


def train():
    """The tiny GPT of the executed example, trained for STEPS steps on one CPU
    thread; returns ``snippets.history.gpt.TinyGPTResult``."""
    import torch

    from snippets.history.gpt import GPTConfig, train_tiny_gpt

    config = GPTConfig(vocab_size=N_DIGITS + 1, d_model=64, n_layers=2, n_heads=4, d_ff=128,
                       max_len=2 * LENGTH + 1, dropout=0.0, norm_first=True)
    with torch_threads.one_thread(), torch.device("cpu"):  # one thread: the same numbers on every run
        return train_tiny_gpt(_make_block, config=config, length=LENGTH, n_digits=N_DIGITS,
                              steps=STEPS, seed=SEED)


def layer_inputs(model, ids):
    """What each layer's attention reads (after its pre-norm), for causal
    inputs as in training: a list of ``(B, N, D)`` tensors, one per layer."""
    import torch

    with torch.no_grad():
        x = model.token(ids) + model.position(torch.arange(ids.shape[1]))  # (B, N, D)
        inputs = []
        for block in model.layers:
            inputs.append(block.norm1(x))
            x = block(x, is_causal=True)
    return inputs


def queries_and_keys(model, ids):
    """Per layer, the heads' queries and keys: ``(q, k)``, each ``(B, H, N, d)``."""
    import torch

    from snippets.attention.multi_head import split_heads

    out = []
    with torch.no_grad():
        for block, x in zip(model.layers, layer_inputs(model, ids)):
            attention = block.attention
            q, k, _ = attention._project(x, x, x)  # (B, N, D) each
            h = attention.n_heads
            out.append((split_heads(q, h), split_heads(k, h)))  # (B, H, N, d) each
    return out


def _b64(t) -> str:
    """Little-endian float32 bytes, base64: exact, and a third of the JSON text."""
    import numpy as np

    return base64.b64encode(t.detach().cpu().contiguous().numpy().astype("<f4", copy=False).tobytes()).decode()


def export(result) -> dict:
    """Everything the page needs: tokens and, per sequence and layer, q and k."""
    model = result.model.eval()
    ids = sequences()
    qk = queries_and_keys(model, ids)
    config = model.config
    names = [str(d) for d in range(N_DIGITS)] + ["="]
    return {
        "model": "tiny GPT",
        "task": "digit reversal",
        "layers": config.n_layers,
        "heads": config.n_heads,
        "d_head": config.d_model // config.n_heads,
        "d_model": config.d_model,
        "steps": STEPS,
        "accuracy": round(result.accuracy, 4),
        "sentences": [
            {
                "tokens": [names[int(t)] for t in row],
                "ids": [int(t) for t in row],
                # layers[l] = {"q": ..., "k": ...}, each (H, N, d) float32, row-major
                "layers": [{"q": _b64(q[s]), "k": _b64(k[s])} for q, k in qk],
            }
            for s, row in enumerate(ids)
        ],
    }


def data_script(data: dict) -> str:
    body = json.dumps(data, separators=(",", ":"))
    return (
        "// Generated by hooks/explorer.py: the tiny GPT's per-head queries and keys.\n"
        "(window.fgExplorerData = window.fgExplorerData || {})[\"tiny-gpt\"] = " + body + ";\n"
        "document.dispatchEvent(new CustomEvent(\"fg-explorer-data\"));\n"
    )


def read_data_script(text: str) -> dict:
    """The JSON object inside a data script written by ``data_script``."""
    start = text.index("] = ") + 4
    end = text.rindex(";\ndocument.dispatchEvent")
    return json.loads(text[start:end])


# ----------------------------------------------------------------------------
# Cache
# ----------------------------------------------------------------------------
def _cache_key(root: pathlib.Path) -> str:
    header = f"explorer-hook={HOOK_VERSION}\npython={sys.version}\ntorch={importlib.metadata.version('torch')}\n"
    return closure.cache_key(pathlib.Path(__file__).resolve(), [root], header)


def _cache_dir(root: pathlib.Path) -> pathlib.Path:
    return closure.cache_root(root) / "explorer"


def build_data(root: pathlib.Path) -> pathlib.Path:
    """The data script, from the cache or trained now."""
    target = _cache_dir(root) / f"tiny-gpt-{_cache_key(root)[:20]}.js"
    if target.is_file():
        log.info("explorer: tiny GPT data cached")
        return target
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    started = time.process_time()
    result = train()
    text = data_script(export(result))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(target)  # atomic: a concurrent build never reads half a file
    log.info(
        "explorer: trained the tiny GPT (%d steps, accuracy %.1f%%) in %.1f s of CPU; %d kB of data",
        STEPS, 100 * result.accuracy, time.process_time() - started, len(text) // 1000,
    )
    return target


# ----------------------------------------------------------------------------
# MkDocs events
# ----------------------------------------------------------------------------
def on_files(files: Files, config) -> Files:
    root = pathlib.Path(config.config_file_path).resolve().parent
    source = build_data(root)
    files.append(File.generated(config, DATA_URI, abs_src_path=str(source)))
    return files


def on_page_content(html: str, page, config, files: Files) -> str:
    explorer, playground = EXPLORER_CLASS in html, PLAYGROUND_CLASS in html
    if not (explorer or playground):
        return html
    tags = [f'<link rel="stylesheet" href="{get_relative_url(STYLE_URI, page.file.url)}">']
    if explorer:
        tags.append(f'<script src="{get_relative_url(DATA_URI, page.file.url)}" defer></script>')
    tags.append(f'<script src="{get_relative_url(SCRIPT_URI, page.file.url)}" defer></script>')
    return html + "\n" + "\n".join(tags) + "\n"
