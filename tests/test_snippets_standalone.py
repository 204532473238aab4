"""Every snippet file is copyable: torch + standard library only, runs alone,
and a helper repeated across files is repeated word for word."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap
from collections import defaultdict

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SNIPPETS = sorted(
    p for p in (ROOT / "snippets").rglob("*.py") if p.name != "__init__.py" and "__pycache__" not in p.parts
)
SECTION = re.compile(r"#\s*--8<--\s*\[(start|end):([A-Za-z][\w-]*)\]")


def test_there_are_snippets():
    assert len(SNIPPETS) >= 2


# The one exception to "torch and the standard library": a Triton kernel file.
EXTRA_IMPORTS: dict[str, set[str]] = {"efficiency/flash_triton.py": {"triton"}}
HAS_TRITON = importlib.util.find_spec("triton") is not None


@pytest.mark.parametrize("path", SNIPPETS, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_only_torch_and_stdlib(path):
    extra = EXTRA_IMPORTS.get(str(path.relative_to(ROOT / "snippets")), set())
    allowed = set(sys.stdlib_module_names) | {"torch", "__future__"} | extra
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.split(".")[0] not in allowed]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                bad.append("." * node.level + (node.module or ""))
            elif node.module.split(".")[0] not in allowed:
                bad.append(node.module)
    assert not bad, (
        f"{path.relative_to(ROOT)} imports {bad}; a snippet may import only torch and the standard library"
        + (f" (and {sorted(extra)})" if extra else "")
    )


def test_only_the_named_exception_imports_triton():
    """triton is allowed in exactly the files EXTRA_IMPORTS names, so the check
    above cannot be loosened for other files by accident."""
    importers = set()
    for path in SNIPPETS:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] == "triton" for n in names):
                importers.add(str(path.relative_to(ROOT / "snippets")))
    assert importers == set(EXTRA_IMPORTS), importers


@pytest.mark.parametrize("path", SNIPPETS, ids=lambda p: str(p.relative_to(ROOT)))
def test_sections_are_balanced_and_named(path):
    open_sections: list[str] = []
    names = []
    for kind, name in SECTION.findall(path.read_text(encoding="utf-8")):
        if kind == "start":
            assert name not in open_sections, f"section {name!r} opened twice"
            open_sections.append(name)
            names.append(name)
        else:
            assert name in open_sections, f"section {name!r} ends without a start"
            open_sections.remove(name)
    assert not open_sections, f"sections never closed: {open_sections}"
    assert len(names) == len(set(names)), f"duplicate section names in {path.name}: {names}"


# A call into each copied file, run in the isolated interpreter: `m` is the
# module, `torch` and `nn` are imported; the code leaves its answer in `result`.
SMOKE: dict[str, tuple[str, str]] = {
    "foundations/scaled_dot_product.py": (
        "x = torch.randn(1, 3, 4); result = tuple(m.scaled_dot_product_attention(x, x, x, is_causal=True)[1].shape)",
        "(1, 3, 3)",
    ),
    "history/additive_attention.py": (
        "a = m.AdditiveAttention(2, 3, 4); result = tuple(a(torch.zeros(1, 1, 2), torch.zeros(1, 2, 3))[1].shape)",
        "(1, 1, 2)",
    ),
    "history/luong_attention.py": (
        "a = m.LuongAttention(2, 'concat', window=1); result = tuple(a(torch.zeros(1, 1, 2), torch.zeros(1, 3, 2))[1].shape)",
        "(1, 1, 3)",
    ),
    "foundations/positional_encoding.py": (
        "result = tuple(m.sinusoidal_positional_encoding(3, 4).shape)",
        "(3, 4)",
    ),
    "history/bert.py": (
        "class Blk(nn.Module):\n"
        "    def __init__(self, c): super().__init__(); self.f = nn.Linear(c.d_model, c.d_model)\n"
        "    def forward(self, x, key_mask=None): return self.f(x)\n"
        "c = m.BertConfig(vocab_size=20, d_model=8, n_layers=1, n_heads=2, d_ff=16, max_len=10)\n"
        "ids, _ = m.counting_corpus(2, 5, 16, (1,))\n"
        "result = tuple(m.BertForMaskedLM(m.BertModel(c, Blk))(ids).shape)",
        "(2, 7, 20)",
    ),
    "history/gpt.py": (
        "class Blk(nn.Module):\n"
        "    def __init__(self, c): super().__init__(); self.f = nn.Linear(c.d_model, c.d_model)\n"
        "    def forward(self, x, is_causal=False): return self.f(x)\n"
        "c = m.GPTConfig(vocab_size=11, d_model=8, n_layers=1, n_heads=2, d_ff=16, max_len=9)\n"
        "result = tuple(m.generate(m.GPT(c, Blk), m.reversal_task(2, 4, 10)[:, :5], 4).shape)",
        "(2, 9)",
    ),
    "architecture/transformer_block.py": (
        "layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval()\n"
        "assert torch.allclose(m.TransformerBlock.from_torch(layer)(x := torch.randn(1, 3, 8)), layer(x), atol=1e-6)\n"
        "class Mix(nn.Module):\n"
        "    def forward(self, x, **masks): return x.mean(1, keepdim=True).expand_as(x), None\n"
        "result = tuple(m.TransformerBlock(Mix(), 8, 16)(torch.randn(2, 3, 8)).shape)",
        "(2, 3, 8)",
    ),
    "architecture/encoder_decoder.py": (
        "class A(nn.Module):\n"
        "    def forward(self, q, k=None, v=None, **masks): return (2 * q, None)\n"
        "dec = m.Decoder([m.DecoderBlock(A(), A(), 8, 16)], norm=nn.LayerNorm(8))\n"
        "result = tuple(dec(torch.randn(2, 3, 8), torch.randn(2, 5, 8)).shape)",
        "(2, 3, 8)",
    ),
    "attention/multi_head.py": (
        "result = tuple(m.MultiHeadAttention(8, 2)(torch.randn(1, 3, 8), need_weights=True)[1].shape)",
        "(1, 2, 3, 3)",
    ),
    "attention/grouped_query.py": (
        "result = tuple(m.GroupedQueryAttention(16, 4, 2)(torch.randn(1, 3, 16))[0].shape)",
        "(1, 3, 16)",
    ),
    "attention/co_attention.py": (
        "result = tuple(m.AlternatingCoAttention(4, 3)(torch.randn(1, 2, 4), torch.randn(1, 3, 4))[0].shape)",
        "(1, 4)",
    ),
    "attention/common_mistakes.py": (
        "q = torch.randn(1, 1, 2, 4); k = torch.randn(1, 1, 5, 4); result = tuple(m.cached_decode(q, k, k).shape)",
        "(1, 1, 2, 4)",
    ),
    "attention/alibi.py": ("result = m.alibi_slopes(8)[-1].item()", "0.00390625"),
    "attention/rotary.py": (
        "cos, sin = m.rotary_tables(torch.arange(3), 8); x = torch.randn(1, 1, 3, 8)\n"
        "result = torch.allclose(m.apply_rotary(x, cos, sin).norm(dim=-1), x.norm(dim=-1), atol=1e-5)",
        "True",
    ),
    "efficiency/tiled_attention.py": (
        "x = torch.randn(1, 2, 5, 4); result = tuple(m.tiled_attention(x, x, x, block_size_k=2).shape)",
        "(1, 2, 5, 4)",
    ),
    "efficiency/kv_cache.py": (
        "d = m.TinyDecoder(20, 16, 2, 1).eval()\n"
        "result = (tuple(m.generate(d, torch.zeros(1, 3, dtype=torch.long), 4).shape), m.kv_cache_bytes(1, 4096, 32, 32, 128) / 2**30)",
        "((1, 7), 2.0)",
    ),
    "efficiency/sliding_window.py": (
        "x = torch.randn(1, 1, 6, 4); result = tuple(m.sliding_window_attention(x, x, x, 2).shape)",
        "(1, 1, 6, 4)",
    ),
    "efficiency/flex_attention.py": (
        "mod = m.sliding_window_mask_mod(2, 4, 4); x = torch.randn(1, 1, 4, 2)\n"
        "result = (m.dense_mask(mod, 4, 4)[0, 0].sum().item(), tuple(m.flex_attend(x, x, x, mask_mod=mod).shape))",
        "(7, (1, 1, 4, 2))",
    ),
    "efficiency/paged_kv_cache.py": (
        "c = m.PagedKVCache(n_pages=4, page_size=2, n_kv_heads=1, d_head=2)\n"
        "s = c.add_sequence(); c.append(s, torch.ones(1, 3, 2), torch.ones(1, 3, 2))\n"
        "result = (c.block_table(s), tuple(c.gather(s)[0].shape))",
        "([0, 1], (1, 3, 2))",
    ),
    "distributed/context_parallel.py": (
        "x = torch.randn(1, 2, 6, 4, dtype=torch.float64)\n"
        "ref = torch.nn.functional.scaled_dot_product_attention(x, x, x, is_causal=True)\n"
        "result = [torch.allclose(f(x, x, x, is_causal=True), ref) for f in "
        "(m.ring_attention, m.ulysses_attention, m.allgather_kv_attention)]",
        "[True, True, True]",
    ),
    # Run by Triton's interpreter: the isolated interpreter gets TRITON_INTERPRET=1.
    "efficiency/flash_triton.py": (
        "x = torch.randn(1, 1, 20, 16, dtype=torch.float16)\n"
        "o = m.flash_attention(x, x, x, causal=True, block_m=16, block_n=16)\n"
        "ref = torch.nn.functional.scaled_dot_product_attention(*(3 * [x.float()]), is_causal=True)\n"
        "result = (tuple(o.shape), bool((o.float() - ref).abs().max() < 1e-2))",
        "((1, 1, 20, 16), True)",
    ),
    "efficiency/static_cache.py": (
        "c = m.StaticKVCache(1, 1, 1, 2, 4); result = c.mask(torch.tensor([1])).tolist()",
        "[[True, True, False, False]]",
    ),
    "modern/modern_block.py": (
        "layer = m.DecoderLayer(m.DecoderAttention(8, 2, 1, qk_norm='head'), 8, m.swiglu_width(8, 4))\n"
        "y = layer(torch.randn(2, 5, 8))\n"
        "result = (tuple(y.shape), m.swiglu_width(4096), sorted(layer.state_dict())[0])",
        "((2, 5, 8), 11008, 'input_layernorm.weight')",
    ),
    "modern/attention_sinks.py": (
        "c = m.SinkCache(4, 4)\n"
        "for t in range(10): c.update(torch.randn(1, 1, 1, 2), torch.randn(1, 1, 1, 2))\n"
        "q = torch.randn(1, 2, 3, 4); out = m.sink_attention(q, q, q, torch.zeros(2))\n"
        "result = (c.positions.tolist(), tuple(out.shape), tuple(m.streaming_attention(q, q, q, n_sink=1, window=1).shape))",
        "([0, 1, 2, 3, 6, 7, 8, 9], (1, 2, 3, 4), (1, 2, 3, 4))",
    ),
    "modern/gates_and_caps.py": (
        "q = torch.randn(1, 2, 3, 4); out = m.softcap_attention(q, q, q, cap=50.0)\n"
        "g = m.OutputGate(8, 2, 4)(torch.randn(1, 3, 8), torch.ones(1, 3, 8))\n"
        "result = (tuple(out.shape), tuple(g.shape), round(m.softcap(torch.tensor(50.0), 50.0).item(), 2))",
        "((1, 2, 3, 4), (1, 3, 8), 38.08)",
    ),
    "efficiency/linear_attention.py": (
        "x = torch.randn(1, 1, 6, 4); result = tuple(m.linear_attention(x, x, x, causal=True).shape)",
        "(1, 1, 6, 4)",
    ),
    "linear/gated_linear_attention.py": (
        "x = torch.randn(1, 1, 6, 4); g = -torch.rand(1, 1, 6, 4)\n"
        "result = torch.allclose(m.gla_chunked(x, x, x, g, chunk_size=4), m.gla_recurrent(x, x, x, g), atol=1e-5)",
        "True",
    ),
    "linear/delta_rule.py": (
        "x = torch.randn(1, 1, 6, 4); b = torch.rand(1, 1, 6)\n"
        "result = torch.allclose(m.delta_rule_chunked(x, x, x, b, chunk_size=4), m.delta_rule_parallel(x, x, x, b), atol=1e-4)",
        "True",
    ),
    "linear/state_space_duality.py": (
        "x = torch.randn(1, 2, 6, 3); dt = torch.rand(1, 2, 6); a = -torch.rand(2); b = torch.randn(1, 2, 6, 4)\n"
        "result = torch.allclose(m.ssd_chunked(x, dt, a, b, b, chunk_size=4), m.ssd_attention(x, dt, a, b, b), atol=1e-5)",
        "True",
    ),
    "linear/sparse_attention.py": (
        "x = torch.randn(1, 2, 8, 4); out = m.nsa_attention(x, x, x, torch.rand(1, 2, 8, 3), block=2, n_select=2, window=3)\n"
        "result = (tuple(out.shape), m.dsa_decode_cost(4096, n_heads=1, d_qk=1, d_v=1, kv_bytes_per_token=1).keys)",
        "((1, 2, 8, 4), 2048)",
    ),
    "linear/hybrids.py": (
        "result = m.layer_pattern(4, 4)",
        "('linear', 'linear', 'linear', 'full')",
    ),
    "modern/long_context_rope.py": (
        "f, a = m.rope_inv_freq(128, rope_type='llama3', base=500000.0, factor=8.0, original_max_position_embeddings=8192)\n"
        "result = (tuple(f.shape), a, m.nope_positions(torch.tensor([[0, 5, 5, 5]]), 0).round().tolist())",
        "((64,), 1.0, [[0.0, 1.0, 2.0, 3.0]])",
    ),
    "modern/latent_attention.py": (
        "a = m.MultiHeadLatentAttention(16, 2, kv_lora_rank=4, q_lora_rank=6, qk_nope_head_dim=4, rope_dim=2, v_head_dim=3).double()\n"
        "x = torch.randn(1, 5, 16, dtype=torch.float64); c = a.make_cache(1, 5)\n"
        "y = torch.cat([a(x[:, :3], cache=c), a(x[:, 3:4], cache=c, absorbed=True), a(x[:, 4:], cache=c, absorbed=True)], 1)\n"
        "result = (tuple(y.shape), torch.allclose(y, a(x), atol=1e-12), c.nbytes)",
        "((1, 5, 16), True, 240)",
    ),
    "modern/layer_patterns.py": (
        "result = (m.summarize_layer_types(m.periodic_layer_types(62, 6)), m.layer_mask('chunked_attention', 2, 6, chunk=4).sum().item())",
        "('5 sliding : 1 full (x10) + 2 sliding', 3)",
    ),
    "modern/cache_size.py": (
        "result = (m.mla_cache_elements(512, 64), m.mha_cache_elements(128, 128), m.model_cache_bytes(2048, ['sliding_attention', 'full_attention'], 8, window=1024))",
        "(576, 32768, 49152)",
    ),
}


def test_smoke_calls_name_real_snippets():
    names = {str(p.relative_to(ROOT / "snippets")) for p in SNIPPETS}
    assert set(SMOKE) <= names, set(SMOKE) - names


def test_each_snippet_runs_copied_alone(tmp_path):
    """Copy each file into its own empty folder and import it there, in a Python
    that sees neither this repository nor PYTHONPATH (``-I``); then make one
    call into it where SMOKE has one."""
    jobs = []
    for i, path in enumerate(SNIPPETS):
        if "triton" in EXTRA_IMPORTS.get(str(path.relative_to(ROOT / "snippets")), set()) and not HAS_TRITON:
            continue  # runs standalone where triton is installed (Linux wheels)
        folder = tmp_path / f"project{i}"
        folder.mkdir()
        target = folder / path.name
        target.write_bytes(path.read_bytes())
        code, _ = SMOKE.get(str(path.relative_to(ROOT / "snippets")), ("result = None", "None"))
        jobs.append([str(target), code])
    script = textwrap.dedent(
        """
        import importlib.util, json, sys, traceback
        import torch
        from torch import nn
        failures, results = {}, {}
        for i, (file, code) in enumerate(json.loads(sys.argv[1])):
            sys.path.insert(0, file.rsplit("/", 1)[0])
            try:
                spec = importlib.util.spec_from_file_location(f"copied_{i}", file)
                module = importlib.util.module_from_spec(spec)
                sys.modules[spec.name] = module  # as an import would (dataclasses need it)
                spec.loader.exec_module(module)
                namespace = {"m": module, "torch": torch, "nn": nn}
                exec(code, namespace)
                results[file] = repr(namespace["result"])
            except Exception:
                failures[file] = traceback.format_exc(limit=3)
            finally:
                sys.path.pop(0)
        assert "snippets" not in sys.modules, "the repository leaked into the isolated run"
        print(json.dumps({"failures": failures, "results": results}))
        """
    )
    result = subprocess.run(
        [sys.executable, "-I", "-c", script, json.dumps(jobs)],
        cwd=tmp_path, capture_output=True, text=True, timeout=240,
        env={**os.environ, "TRITON_INTERPRET": "1"},  # only the Triton file reads it: kernels on CPU tensors
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert not report["failures"], "\n\n".join(f"{k}:\n{v}" for k, v in report["failures"].items())
    for path in SNIPPETS:
        rel = str(path.relative_to(ROOT / "snippets"))
        if rel in SMOKE and (HAS_TRITON or rel not in EXTRA_IMPORTS):
            target = str(tmp_path / f"project{SNIPPETS.index(path)}" / path.name)
            assert report["results"][target] == SMOKE[rel][1], f"{rel}: {report['results'][target]}"


def _top_level_functions(path: pathlib.Path) -> dict[str, str]:
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    return {
        node.name: ast.get_source_segment(source, node)
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.ClassDef))
    }


# Same name, deliberately different code (the reason is the value).
DIFFERENT_ON_PURPOSE: dict[str, str] = {
    "generate": "efficiency/kv_cache.py decodes its TinyDecoder with or without the cache; "
    "history/gpt.py samples from a GPT with a temperature: two models, two loops",
}


def test_repeated_helpers_are_identical():
    """A helper that two snippet files both define (so each runs alone) must be
    the same code in both, or the copies drift apart."""
    by_name: dict[str, dict[str, str]] = defaultdict(dict)
    for path in SNIPPETS:
        for name, code in _top_level_functions(path).items():
            by_name[name][str(path.relative_to(ROOT))] = code
    drifted = {
        name: sorted(copies)
        for name, copies in by_name.items()
        if len(copies) > 1 and len(set(copies.values())) > 1 and name not in DIFFERENT_ON_PURPOSE
    }
    assert not drifted, f"helpers whose copies differ: {drifted}"


def test_helper_sections_are_identical():
    """A section named after the one helper it holds (``causal_mask``, say) may
    be copied into several files; every copy must match the others."""
    texts: dict[str, dict[str, str]] = defaultdict(dict)
    for path in SNIPPETS:
        source = path.read_text(encoding="utf-8")
        helpers = _top_level_functions(path)
        for match in re.finditer(r"#\s*--8<--\s*\[start:([A-Za-z][\w-]*)\]\n(.*?)#\s*--8<--\s*\[end:\1\]", source, re.S):
            name, body = match.group(1), match.group(2)
            if name in helpers and helpers[name] in body:
                texts[name][str(path.relative_to(ROOT))] = body
    drifted = {
        n: sorted(c)
        for n, c in texts.items()
        if len(c) > 1 and len(set(c.values())) > 1 and n not in DIFFERENT_ON_PURPOSE
    }
    assert not drifted, f"same-named helper sections with different code: {drifted}"
