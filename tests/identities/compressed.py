"""Identities proven for the compressed-attention (DeepSeek-V4) page.

Also holds the small DeepSeek-V4 attention layer that the page's tests build
from a random configuration, and the pipeline that recomputes its output
with the snippet's kernels.
"""

from __future__ import annotations

import importlib

import torch
import torch.nn.functional as F

from identities import identity
from snippets.linear import compressed_attention as ca

PAGE = "linear/compressed-attention.md"
HEAD, INDEX_HEAD = 16, 8


def build_v4(layer, *, m=2, m_heavy=4, top_k=3, window=4, dtype=torch.float64, seed=0):
    """A one-layer DeepseekV4Attention with every parameter (sinks included) random."""
    cfg_mod = importlib.import_module("transformers.models.deepseek_v4.configuration_deepseek_v4")
    mod = importlib.import_module("transformers.models.deepseek_v4.modeling_deepseek_v4")
    config = cfg_mod.DeepseekV4Config(
        vocab_size=32, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
        head_dim=HEAD, q_lora_rank=12, o_groups=2, o_lora_rank=6, sliding_window=window,
        index_n_heads=2, index_head_dim=INDEX_HEAD, index_topk=top_k, layer_types=[layer],
        compress_rates={"compressed_sparse_attention": m, "heavily_compressed_attention": m_heavy},
        partial_rotary_factor=0.5, n_routed_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=8)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    attn = mod.DeepseekV4Attention(config, 0).to(dtype)
    with torch.no_grad():
        for name, p in attn.named_parameters():
            p.copy_(torch.randn_like(p) * (0.3 if "weight" in name else 1.0))
    return config, attn, mod.DeepseekV4RotaryEmbedding(config).to(dtype), mod


def _entries(mod, part, x, m, overlap):
    """The snippet's pooling, then the model's own RMSNorm and RoPE at position w m."""
    pooled = ca.compress_entries(part.kv_proj(x), part.gate_proj(x), part.position_bias,
                                 compress_rate=m, overlap=overlap)
    normed = part.kv_norm(pooled)
    at = (torch.arange(normed.shape[1]) * m)[None].expand(x.shape[0], -1)
    cos, sin = part.rotary_emb(normed, position_ids=at, layer_type="compress")
    return mod.apply_rotary_pos_emb(normed.unsqueeze(1), cos, sin)  # (B, 1, E, d)


def run_v4(layer, n=19, batch=2, dtype=torch.float64, **sizes):
    """Both sides on one input: transformers' layer, and the snippet's kernels around it.

    Returns a dict: ``want`` and ``got`` (layer outputs), the model's entries
    and block bias, the snippet's entries, selections and the inputs of the
    attention core (q, kv, mask, sinks, scale).
    """
    config, attn, rope, mod = build_v4(layer, dtype=dtype, **sizes)
    w, m = config.sliding_window, config.compress_rates[layer]
    x = torch.randn(batch, n, 32, dtype=dtype)
    pos = torch.arange(n)[None].expand(batch, -1)
    emb = {k: rope(x, pos, layer_type=k) for k in ("main", "compress")}
    i, j = torch.arange(n)[:, None], torch.arange(n)
    band = (j <= i) & (j > i - w)
    mask = torch.zeros(n, n, dtype=dtype).masked_fill(~band, float("-inf"))
    mask = mask[None, None].expand(batch, 1, n, n)
    out = {"config": config, "attn": attn, "mod": mod, "m": m, "window": w}
    with torch.no_grad():
        out["want"] = attn(x, emb, pos, mask)[0]
        cos, sin = emb["compress"]
        q_res = attn.q_a_norm(attn.q_a_proj(x))
        q = attn.q_b_norm(attn.q_b_proj(q_res).view(batch, n, -1, HEAD).transpose(1, 2))
        q = mod.apply_rotary_pos_emb(q, cos, sin)
        kv = attn.kv_norm(attn.kv_proj(x)).view(batch, n, 1, HEAD).transpose(1, 2)
        kv = mod.apply_rotary_pos_emb(kv, cos, sin)
        part, overlap = attn.compressor, layer == "compressed_sparse_attention"
        entries = _entries(mod, part, x, m, overlap)
        out["model_entries"], out["block_bias"] = part(x, q_res, pos, None, 0)
        selected = model_selected = None
        if overlap:
            ix = part.indexer
            keys = _entries(mod, ix, x, m, True).squeeze(1)
            cq, sq = ix.rotary_emb(x, position_ids=pos, layer_type="compress")
            iq = ix.q_b_proj(q_res).view(batch, n, -1, INDEX_HEAD).transpose(1, 2)
            iq = mod.apply_rotary_pos_emb(iq, cq, sq).transpose(1, 2)
            weights = ix.scorer.weights_proj(x) * ix.scorer.weights_scaling
            selected = ca.select_entries(iq, keys, weights * ix.scorer.softmax_scale,
                                         compress_rate=m, top_k=config.index_topk)
            picks = ix(x, q_res, pos, None, 0)  # (B, N, k), -1 where no entry is ready
            e = keys.shape[1]
            model_selected = torch.zeros(batch, n, e + 1, dtype=torch.bool).scatter(
                -1, picks.where(picks >= 0, e), True)[..., :e]
        core = ca.v4_attention(q, kv, entries, compress_rate=m, window=w,
                                       selected=selected, sink=attn.sinks, scale=attn.scaling)
        core = mod.apply_rotary_pos_emb(core, cos, -sin).transpose(1, 2)  # undo V's RoPE
        grouped = attn.o_a_proj(core.reshape(batch, n, config.o_groups, -1)).flatten(2)
        out["got"] = attn.o_b_proj(grouped)
    out.update(q=q, kv=kv, mask=mask, entries=entries, selected=selected,
               model_selected=model_selected)
    return out


def eager_core(run, entries, selected):
    """transformers' eager attention (sinks, block bias) on given entries and picks."""
    attn, mod, q, kv = run["attn"], run["mod"], run["q"], run["kv"]
    bias = torch.zeros(*selected.shape, dtype=q.dtype).masked_fill(~selected, float("-inf"))
    mask = torch.cat([run["mask"], bias.unsqueeze(1)], dim=-1)
    keys = torch.cat([kv, entries], dim=2)
    with torch.no_grad():
        return mod.eager_attention_forward(attn, q, keys, keys, mask, attn.scaling)[0]


def _causal_mqa():
    q = torch.randn(2, 4, 21, 8, dtype=torch.float64)
    c = torch.randn(2, 21, 8, dtype=torch.float64)  # one shared head, key = value
    z, bias = torch.randn(2, 21, 8, dtype=torch.float64), torch.randn(1, 8, dtype=torch.float64)
    entries = ca.compress_entries(c, z, bias, compress_rate=1).unsqueeze(1)
    ours = ca.v4_attention(q, torch.randn(2, 1, 21, 8, dtype=torch.float64), entries,
                                   compress_rate=1, window=0)
    kv = c.unsqueeze(1)
    return ours, F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)


@identity("v4-m1-all-entries-is-causal-mqa",
          "V4's compressed attention with m = 1, every entry read, the window off, one "
          "compressor series and no sink equals causal SDPA with one key/value head, "
          "key = value", page=PAGE, tol=1e-12)
def v4_m1_all_entries_is_causal_mqa():
    return _causal_mqa()


@identity("v4-no-entries-is-sliding-window",
          "with no complete window yet (m > N) and no sink, V4's attention is sliding-window "
          "SDPA over the last w tokens of the shared key = value head", page=PAGE, tol=1e-12)
def v4_no_entries_is_sliding_window():
    q, kv = torch.randn(1, 3, 17, 8, dtype=torch.float64), torch.randn(1, 1, 17, 8, dtype=torch.float64)
    i, j = torch.arange(17)[:, None], torch.arange(17)
    band = (j <= i) & (j > i - 5)
    ours = ca.v4_attention(q, kv, kv[:, :, :0], compress_rate=32, window=5)
    return ours, F.scaled_dot_product_attention(q, kv, kv, attn_mask=band, enable_gqa=True)


@identity("v4-joint-softmax-equals-transformers-eager",
          "window keys, picked entries and sink in one softmax equal transformers' eager "
          "DeepSeek-V4 attention with sinks and the compressor's block bias (CSA, float64)",
          page=PAGE, tol=1e-12, needs=("transformers",))
def v4_joint_softmax_equals_transformers_eager():
    run = run_v4("compressed_sparse_attention")
    picked = run["model_selected"]
    ours = ca.v4_attention(run["q"], run["kv"], run["model_entries"],
                                   compress_rate=run["m"], window=run["window"],
                                   selected=picked, sink=run["attn"].sinks,
                                   scale=run["attn"].scaling)
    return ours.transpose(1, 2), eager_core(run, run["model_entries"], picked)


@identity("v4-indexer-picks-equal-transformers",
          "CSA's top-k over compressed indexer keys picks the same entries as transformers' "
          "DeepseekV4Indexer (1 where picked)", page=PAGE, tol=0.0, needs=("transformers",))
def v4_indexer_picks_equal_transformers():
    run = run_v4("compressed_sparse_attention", n=23)
    return run["selected"].double(), run["model_selected"].double()


@identity("v4-csa-layer-equals-transformers",
          "a CSA layer rebuilt from the snippet's compressor, indexer and joint softmax equals "
          "transformers' DeepseekV4Attention (float64 inputs; the model pools, normalises "
          "and rotates in float32)", page=PAGE, tol=1e-6, needs=("transformers",))
def v4_csa_layer_equals_transformers():
    run = run_v4("compressed_sparse_attention")
    return run["got"], run["want"]


@identity("v4-hca-layer-equals-transformers",
          "an HCA layer rebuilt from the snippet's compressor and joint softmax equals "
          "transformers' DeepseekV4Attention (float64 inputs; the model pools, normalises "
          "and rotates in float32)", page=PAGE, tol=1e-6, needs=("transformers",))
def v4_hca_layer_equals_transformers():
    run = run_v4("heavily_compressed_attention")
    return run["got"], run["want"]
