"""Proof for snippets/modern/latent_attention.py and the per-token part of
snippets/modern/cache_size.py.

Proves: the module equals DeepSeek-V2's equations (Section 2.1 of
arXiv:2405.04434) written out here head by head and token by token, with RoPE
as explicit 2x2 rotation matrices; the absorbed form equals the naive form to
1e-12 in float64; prefill plus token-by-token decoding from the latent cache
equals the full causal pass; the cache holds the normalised latent and the
rotated shared key, nothing per head; future tokens change nothing; a query
with no allowed key returns zeros with finite gradients; finite in float16 and
bfloat16; gradcheck in float64; the cache-size formulas of the DeepSeek-V2
paper (Table 1) and the 56.9x of DeepSeek-V3; every error message. The
comparison with transformers' DeepseekV3Attention is in
tests/test_mla_transformers.py.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from snippets.efficiency.kv_cache import KVCache
from snippets.modern.cache_size import mha_cache_elements, mla_cache_elements
from snippets.modern.latent_attention import (
    LatentCache,
    MultiHeadLatentAttention,
    apply_rotary,
    rotary_tables,
)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
SIZES = dict(kv_lora_rank=8, qk_nope_head_dim=6, rope_dim=4, v_head_dim=5)


def make(q_lora_rank=12, *, interleaved=True, bias=False, dtype=torch.float64, seed=0, **kw):
    torch.manual_seed(seed)
    m = MultiHeadLatentAttention(32, 4, q_lora_rank=q_lora_rank, rope_interleaved=interleaved,
                                 bias=bias, **{**SIZES, **kw}).to(dtype)
    with torch.no_grad():  # random norm weights and biases too, so none of them is a no-op
        for name, p in m.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.normal_(1.0 if "norm" in name else 0.0, 0.3)
    return m.eval()


# --- an independent statement of the paper's equations ------------------------


def rotation(t: int, dim: int, base: float, interleaved: bool) -> torch.Tensor:
    """The (dim, dim) RoPE matrix R_t: plane i turns by t * base^(-2i/dim)."""
    r = torch.zeros(dim, dim, dtype=torch.float64)
    for i in range(dim // 2):
        a = t * base ** (-2 * i / dim)
        p, q = (2 * i, 2 * i + 1) if interleaved else (i, i + dim // 2)
        r[p, p], r[p, q], r[q, p], r[q, q] = math.cos(a), -math.sin(a), math.sin(a), math.cos(a)
    return r


def rms(x, weight, eps):
    return x / torch.sqrt((x * x).mean() + eps) * weight


def paper_equations(m: MultiHeadLatentAttention, h: torch.Tensor) -> torch.Tensor:
    """DeepSeek-V2 equations (9)-(19) for one sequence h (N, D), one token and head at a time.

    The released models (and transformers) add an RMSNorm after each
    down-projection; it is applied here too."""
    H, dh, dr, dv, dc = m.n_heads, m.d_nope, m.d_rope, m.d_v, m.kv_lora_rank
    w_dkv, w_kr = m.kv_down.weight[:dc], m.kv_down.weight[dc:]
    b_dkv = m.kv_down.bias[:dc] if m.kv_down.bias is not None else torch.zeros(dc, dtype=h.dtype)
    b_kr = m.kv_down.bias[dc:] if m.kv_down.bias is not None else torch.zeros(dr, dtype=h.dtype)
    w_up = m.kv_up.weight.view(H, dh + dv, dc)
    w_uk, w_uv = w_up[:, :dh], w_up[:, dh:]  # W^UK_i (d_h, d_c), W^UV_i (d_v, d_c)
    n = h.shape[0]
    c_kv, k_r, q_c, q_r = [], [], [], []
    for t in range(n):
        c_kv.append(rms(w_dkv @ h[t] + b_dkv, m.kv_norm.weight, m.kv_norm.eps))  # (9) c^KV_t
        k_r.append(rotation(t, dr, m.rope_base, m.rope_interleaved) @ (w_kr @ h[t] + b_kr))  # (14) k^R_t
        if m.q_lora_rank is None:
            q_all = m.q_proj.weight @ h[t]
        else:
            b_dq = m.q_down.bias if m.q_down.bias is not None else 0.0
            c_q = rms(m.q_down.weight @ h[t] + b_dq, m.q_norm.weight, m.q_norm.eps)  # (12) c^Q_t
            q_all = m.q_up.weight @ c_q  # (13) and (16) before rotation
        q_all = q_all.view(H, dh + dr)
        q_c.append(q_all[:, :dh])
        q_r.append(torch.stack([rotation(t, dr, m.rope_base, m.rope_interleaved) @ q_all[i, dh:] for i in range(H)]))
    w_o = m.out_proj.weight.view(m.d_model, H, dv)
    out = torch.zeros(n, m.d_model, dtype=h.dtype)
    for t in range(n):
        for i in range(H):
            q = torch.cat([q_c[t][i], q_r[t][i]])  # (17) q_{t,i}
            keys = [torch.cat([w_uk[i] @ c_kv[j], k_r[j]]) for j in range(t + 1)]  # (10), (18) k_{j,i}
            scores = torch.stack([q @ k for k in keys]) / math.sqrt(dh + dr)
            weights = torch.softmax(scores, dim=0)
            o = sum(weights[j] * (w_uv[i] @ c_kv[j]) for j in range(t + 1))  # (11), (19) o_{t,i}
            out[t] += w_o[:, i] @ o  # u_t = W^O [o_{t,1}; ...; o_{t,H}]
        if m.out_proj.bias is not None:
            out[t] += m.out_proj.bias
    return out


@pytest.mark.parametrize("q_lora_rank", [12, None])
@pytest.mark.parametrize("interleaved", [True, False])
def test_equals_the_paper_equations(q_lora_rank, interleaved):
    m = make(q_lora_rank, interleaved=interleaved, bias=q_lora_rank is not None)
    x = torch.randn(2, 5, 32, dtype=torch.float64)
    with torch.no_grad():
        got = m(x)
        for b in range(2):
            assert_close(got[b], paper_equations(m, x[b]), rtol=1e-10, atol=1e-12)


# --- absorbed == naive, and decoding from the latent cache ---------------------


@pytest.mark.parametrize("q_lora_rank", [12, None])
@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("bias", [False, True])
def test_absorbed_equals_naive_float64(q_lora_rank, interleaved, bias):
    m = make(q_lora_rank, interleaved=interleaved, bias=bias)
    x = torch.randn(3, 9, 32, dtype=torch.float64)
    with torch.no_grad():
        assert_close(m(x, absorbed=True), m(x), rtol=0, atol=1e-12)


@pytest.mark.parametrize("absorbed", [False, True])
@pytest.mark.parametrize("prefill", [0, 1, 4])
def test_decoding_from_latent_cache_equals_full_pass(absorbed, prefill):
    m = make()
    x = torch.randn(2, 8, 32, dtype=torch.float64)
    with torch.no_grad():
        full = m(x)
        cache = LatentCache(2, SIZES["kv_lora_rank"], SIZES["rope_dim"], 8, dtype=torch.float64)
        steps = [m(x[:, :prefill], cache=cache, absorbed=absorbed)] if prefill else []
        steps += [m(x[:, t:t + 1], cache=cache, absorbed=absorbed) for t in range(prefill, 8)]
    assert cache.seq_len == 8
    assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-12)


def test_a_chunk_after_a_cached_prefix():
    m = make()
    x = torch.randn(1, 7, 32, dtype=torch.float64)
    with torch.no_grad():
        cache = LatentCache(1, 8, 4, 7, dtype=torch.float64)
        m(x[:, :4], cache=cache)
        assert_close(m(x[:, 4:], cache=cache, absorbed=True), m(x)[:, 4:], rtol=0, atol=1e-12)


def test_cache_holds_the_normalised_latent_and_the_rotated_shared_key():
    """What is cached is c = RMSNorm(W^DKV h) and RoPE(W^KR h): d_c + d_R numbers,
    not the H keys and values an up-projection would make."""
    m = make()
    x = torch.randn(2, 6, 32, dtype=torch.float64)
    cache = LatentCache(2, 8, 4, 6, dtype=torch.float64)
    with torch.no_grad():
        m(x, cache=cache)
        c, k_r = m.kv_down(x).split([8, 4], dim=-1)
        assert_close(cache.c, m.kv_norm(c), rtol=0, atol=1e-14)
        cos, sin = rotary_tables(torch.arange(6), 4)
        rotated = apply_rotary(k_r[:, None], cos, sin, interleaved=True)[:, 0]
        assert_close(cache.k_rope, rotated, rtol=0, atol=1e-14)
    assert cache.c.shape == (2, 6, 8) and cache.k_rope.shape == (2, 6, 4)
    assert cache.nbytes == 2 * 6 * mla_cache_elements(8, 4) * 8  # float64: 8 bytes


def test_future_tokens_change_nothing():
    m = make()
    x = torch.randn(1, 8, 32, dtype=torch.float64)
    y = x.clone()
    y[:, 5:] = torch.randn(1, 3, 32, dtype=torch.float64)
    with torch.no_grad():
        for absorbed in (False, True):
            assert_close(m(x, absorbed=absorbed)[:, :5], m(y, absorbed=absorbed)[:, :5], rtol=0, atol=1e-12)
            assert not torch.allclose(m(x, absorbed=absorbed)[:, 5:], m(y, absorbed=absorbed)[:, 5:])


def test_rope_makes_scores_depend_on_offsets_only():
    """The same tokens at positions 30..35 (after 30 blocked ones) give the same
    output as at 0..5: the rotary parts meet only through R_t^T R_j = R_{j-t}."""
    m = make()
    x = torch.randn(1, 6, 32, dtype=torch.float64)
    prefix = torch.randn(1, 30, 32, dtype=torch.float64)
    allowed = torch.arange(36) >= 30  # (M,): the prefix is blocked
    with torch.no_grad():
        plain = m(x)
        for absorbed in (False, True):
            cache = LatentCache(1, 8, 4, 36, dtype=torch.float64)
            m(prefix, cache=cache)
            shifted = m(x, cache=cache, absorbed=absorbed, attn_mask=allowed)
            assert_close(shifted, plain, rtol=0, atol=1e-10)


@pytest.mark.parametrize("absorbed", [False, True])
def test_query_with_no_allowed_key_returns_zeros(absorbed):
    m = make(bias=False, dtype=torch.float32)
    x = torch.randn(2, 5, 32, requires_grad=True)
    mask = torch.ones(5, 5, dtype=torch.bool)
    mask[2] = False  # query 2 may attend to nothing
    out = m(x, absorbed=absorbed, attn_mask=mask)
    assert torch.equal(out[:, 2], torch.zeros_like(out[:, 2]))
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)


@pytest.mark.parametrize("where", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("absorbed", [False, True])
def test_half_precision_is_finite_and_close(where, dtype, absorbed):
    m = make(dtype=torch.float32).to(where)
    x = 30 * torch.randn(2, 16, 32, device=where)  # large activations: big scores
    want = m(x, absorbed=absorbed)
    got = m.to(dtype)(x.to(dtype), absorbed=absorbed)
    assert got.dtype == dtype and torch.isfinite(got).all()
    # RMSNorm keeps the latents O(1); compare relative to the output's scale.
    assert (got.float() - want).abs().max() <= 0.05 * want.abs().max()


def test_gradcheck_float64():
    torch.manual_seed(0)
    m = MultiHeadLatentAttention(8, 2, kv_lora_rank=4, q_lora_rank=None, qk_nope_head_dim=2, rope_dim=2,
                                 v_head_dim=2, bias=True).double()
    x = torch.randn(1, 3, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: m(t), (x,), fast_mode=True)
    assert torch.autograd.gradcheck(lambda t: m(t, absorbed=True), (x,), fast_mode=True)


def test_scale_defaults_to_the_query_key_width():
    m = make()
    assert m.scale == 1 / math.sqrt(6 + 4)
    assert make(softmax_scale=0.25).scale == 0.25


# --- the cache per token (DeepSeek-V2, Table 1) --------------------------------


def test_deepseek_v3_cache_is_56_9_times_smaller_than_mha_of_the_same_width():
    mla = mla_cache_elements(kv_lora_rank=512, rope_dim=64)
    mha = mha_cache_elements(n_kv_heads=128, d_k=128, d_v=128)
    assert (mla, mha) == (576, 32768)
    assert round(mha / mla, 1) == 56.9


def test_table_1_formulas():
    """Per token and layer: MHA 2 n_h d_h, GQA 2 n_g d_h, MQA 2 d_h; MLA (d_c + d_R)
    = 9/2 d_h with d_c = 4 d_h and d_R = d_h / 2, as the paper sets them."""
    n_h, d_h, n_g = 128, 128, 8
    assert mha_cache_elements(n_h, d_h) == 2 * n_h * d_h
    assert mha_cache_elements(n_g, d_h) == 2 * n_g * d_h
    assert mha_cache_elements(1, d_h) == 2 * d_h
    assert mla_cache_elements(4 * d_h, d_h // 2) * 2 == 9 * d_h
    # "equal to GQA with only 2.25 groups": 9/2 d_h = 2 * 2.25 * d_h
    assert mla_cache_elements(4 * d_h, d_h // 2) / (2 * d_h) == 2.25


def test_buffers_match_the_formulas():
    lat = LatentCache(3, 512, 64, 10, dtype=torch.bfloat16, device="meta")
    assert lat.nbytes == 3 * 10 * mla_cache_elements(512, 64) * 2
    kv = KVCache(1, 3, 8, 128, 10, dtype=torch.bfloat16, device="meta")  # one layer, GQA with 8 heads
    assert kv.nbytes == 3 * 10 * mha_cache_elements(8, 128) * 2


# --- exercises on docs/modern/latent-attention.md -----------------------------


def test_exercise_rope_on_the_latent_breaks_absorption():
    """Exercise 1: rotate the up-projected keys k^C with RoPE (no decoupled key).
    The score q^T R_t^T R_j W^UK c_j has R_{j-t} between q and W^UK, so one
    absorbed query per token cannot reproduce it for every key j."""
    torch.manual_seed(0)
    d_h, d_c, n = 4, 6, 5
    w_uk = torch.randn(d_h, d_c, dtype=torch.float64)
    q = torch.randn(n, d_h, dtype=torch.float64)
    c = torch.randn(n, d_c, dtype=torch.float64)
    rot = [rotation(t, d_h, 10000.0, True) for t in range(n)]
    rotated = torch.stack([torch.stack([(rot[t] @ q[t]) @ (rot[j] @ (w_uk @ c[j])) for j in range(n)]) for t in range(n)])
    # The best one can do with a fixed absorbed query per token: absorb R_t q into W^UK
    absorbed = torch.stack([torch.stack([(w_uk.T @ (rot[t] @ q[t])) @ c[j] for j in range(n)]) for t in range(n)])
    assert (rotated - absorbed).abs().max() > 1e-3  # differs: position is stuck between q and W^UK
    assert_close(torch.diagonal(rotated), torch.diagonal(torch.stack(  # equal only where j = t (R_0 = I)
        [torch.stack([(w_uk.T @ q[t]) @ c[j] for j in range(n)]) for t in range(n)])))


def test_exercise_kimi_k2_cache_per_token():
    """Exercise 2: Kimi K2 keeps DeepSeek-V3's latent sizes with 64 heads: the
    cache per token does not depend on H (576), while MHA of the same heads
    would need 64 * (128 + 128) = 16384, 28.4x more."""
    assert mla_cache_elements(512, 64) == 576
    assert round(mha_cache_elements(64, 128, 128) / 576, 1) == 28.4


def test_exercise_absorbed_flops_per_decoded_token():
    """Exercise 3: the absorbed query costs H d_h d_c multiply-adds per token to
    form, then every cached token costs H (d_c + d_R) for the scores and H d_c
    for the values, against H (d_h + d_R) + H d_v plus the up-projection
    d_c H (d_h + d_v) per cached token in the naive form."""
    H, d_h, d_r, d_v, d_c, m = 128, 128, 64, 128, 512, 4096
    naive = m * d_c * H * (d_h + d_v) + m * H * (d_h + d_r) + m * H * d_v
    absorbed = H * d_h * d_c + m * H * (d_c + d_r) + m * H * d_c
    assert absorbed < naive / 100


# --- named errors ----------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(d_model=0), r"d_model must be a finite number > 0.0, got 0"),
        (dict(n_heads=-2), r"n_heads must be a finite number > 0.0, got -2"),
        (dict(q_lora_rank=0), r"q_lora_rank must be a finite number > 0.0, got 0"),
        (dict(rope_dim=3), r"rotary_dim even >= 2 and base > 1, got .*rotary_dim=3"),
        (dict(v_head_dim=-1), r"v_head_dim must be a finite number > 0.0, got -1"),
        (dict(qk_nope_head_dim=None), r"qk_nope_head_dim must be a finite number > 0.0, got None"),
        (dict(rope_base=1), r"base > 1, got .*base=1"),
        (dict(rope_base=float("inf")), r"base > 1, got .*base=inf"),
        (dict(norm_eps=0.0), r"norm_eps must be a finite number > 0.0, got 0.0"),
        (dict(softmax_scale=-0.5), r"softmax_scale must be a finite number > 0.0, got -0.5"),
    ],
)
def test_constructor_errors(kwargs, match):
    args = dict(d_model=32, n_heads=4, q_lora_rank=12, **SIZES)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        MultiHeadLatentAttention(args.pop("d_model"), args.pop("n_heads"), **args)


def test_forward_errors():
    m = make(dtype=torch.float32)
    with pytest.raises(TypeError, match=r"x must be a float tensor, got \["):
        m([1.0])
    with pytest.raises(TypeError, match=r"x must be a float tensor, got torch.int64"):
        m(torch.zeros(1, 2, 32, dtype=torch.long))
    with pytest.raises(ValueError, match=r"x must be torch\.\w+ \(None, None, 32\).*got torch\.\w+ \(1, 2, 31\)"):
        m(torch.zeros(1, 2, 31))
    with pytest.raises(ValueError, match=r"attn_mask must be bool and broadcast to .* got torch.float32"):
        m(torch.zeros(1, 2, 32), attn_mask=torch.zeros(2, 2))
    with pytest.raises(ValueError, match=r"attn_mask must be bool and broadcast to \(1, 4, 2, 2\) on cpu, got torch.bool \(3, 2\) on cpu"):
        m(torch.zeros(1, 2, 32), attn_mask=torch.ones(3, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"attn_mask must be bool and broadcast to \(1, 4, 2, 2\) on cpu, got torch.bool \(3, 1, 4, 2, 2\)"):
        m(torch.zeros(1, 2, 32), attn_mask=torch.ones(3, 1, 4, 2, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"attn_mask must be bool and broadcast to \(1, 4, 2, 2\) on cpu, got torch.bool \(2, 2\) on meta"):
        m(torch.zeros(1, 2, 32), attn_mask=torch.ones(2, 2, dtype=torch.bool, device="meta"))
    with pytest.raises(ValueError, match=r"x must be torch.float32 .* on cpu, got torch.float64 .* on cpu"):
        m(torch.zeros(1, 2, 32, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"x must be .* on cpu, got .* on meta"):
        m(torch.zeros(1, 2, 32, device="meta"))
    # a cache that does not fit the layer is refused by LatentCache.update, by the latent c
    with pytest.raises(ValueError, match=r"c must be torch.float32 \(2, None, 8\) on cpu, got torch.float32 \(1, 2, 8\)"):
        m(torch.zeros(1, 2, 32), cache=LatentCache(2, 8, 4, 3))
    with pytest.raises(ValueError, match=r"c must be torch.float64 .* on cpu, got torch.float32 \(1, 2, 8\)"):
        m(torch.zeros(1, 2, 32), cache=LatentCache(1, 8, 4, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"k_rope must be torch\.\w+ \(1, 2, 2\) .*got torch\.\w+ \(1, 2, 4\)"):
        m(torch.zeros(1, 2, 32), cache=LatentCache(1, 8, 2, 3))
    cache = m.make_cache(1, 3)
    m(torch.zeros(1, 2, 32), cache=cache)
    with pytest.raises(ValueError, match=r"the cache holds max_len=3 tokens; it has 2 and got 2 more"):
        m(torch.zeros(1, 2, 32), cache=cache)


def test_make_cache_fits_the_module():
    """The module sizes its own cache: B and max_len are all a caller gives."""
    m = make(dtype=torch.float64)
    cache = m.make_cache(2, 5)
    assert cache.c.shape == (2, 5, SIZES["kv_lora_rank"]) and cache.k_rope.shape == (2, 5, SIZES["rope_dim"])
    assert cache.c.dtype == torch.float64
    x = torch.randn(2, 5, 32, dtype=torch.float64)
    assert_close(m(x, cache=cache), m(x), rtol=0, atol=1e-12)


def test_helper_errors():
    with pytest.raises(ValueError, match=r"max_len must be a finite number > 0.0, got 0"):
        LatentCache(1, 8, 4, 0)
    # no check on the dtype itself: an integer cache refuses every (float) latent
    with pytest.raises(ValueError, match=r"c must be torch.int64 \(1, None, 8\) on cpu, got"):
        LatentCache(1, 8, 4, 3, dtype=torch.int64).update(torch.zeros(1, 1, 8), torch.zeros(1, 1, 4))
    cache = LatentCache(2, 3, 2, 4)
    with pytest.raises(TypeError, match=r"c must be a float tensor, got \["):
        cache.update([1.0], torch.zeros(2, 1, 2))
    with pytest.raises(ValueError, match=r"k_rope must be torch.float32 .* on cpu, got torch.float64 .* on cpu"):
        cache.update(torch.zeros(2, 1, 3), torch.zeros(2, 1, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"c must be .* on cpu, got .* on meta"):
        cache.update(torch.zeros(2, 1, 3, device="meta"), torch.zeros(2, 1, 2))
    with pytest.raises(ValueError, match=r"k_rope must be torch\.\w+ \(2, 1, 2\).*got torch\.\w+ \(2, 1, 3\)"):
        cache.update(torch.zeros(2, 1, 3), torch.zeros(2, 1, 3))
    with pytest.raises(ValueError, match=r"k_rope must be torch\.\w+ \(2, 2, 2\).*got torch\.\w+ \(2, 1, 2\)"):
        cache.update(torch.zeros(2, 2, 3), torch.zeros(2, 1, 2))
    assert cache.seq_len == 0  # the refused updates wrote nothing
    with pytest.raises(ValueError, match=r"kv_lora_rank must be an int >= 1, got 0"):
        mla_cache_elements(0, 64)
    with pytest.raises(ValueError, match=r"d_v must be an int >= 1, got 0"):
        mha_cache_elements(8, 128, 0)


def test_the_page_table_of_cache_sizes():
    """docs/modern/latent-attention.md: DeepSeek-V3's width, 61 layers, bfloat16,
    128k tokens: 488 GiB (MHA), 30.5 (GQA 8), 3.8 (MQA), 8.6 (MLA)."""
    from snippets.modern.cache_size import model_cache_bytes

    layers, n, gib = ["full_attention"] * 61, 131072, 2**30
    sizes = {name: model_cache_bytes(n, layers, per_token) / gib for name, per_token in {
        "mha": mha_cache_elements(128, 128), "gqa": mha_cache_elements(8, 128),
        "mqa": mha_cache_elements(1, 128), "mla": mla_cache_elements(512, 64)}.items()}
    assert [round(sizes["mha"]), round(sizes["gqa"], 1), round(sizes["mqa"], 1), round(sizes["mla"], 1)] == [488, 30.5, 3.8, 8.6]
    assert [round(sizes[k] / sizes["mla"], 2) for k in ("gqa", "mqa")] == [3.56, 0.44]


# --- planted-bug classes: extreme scores, half precision ---------------------------------


def test_masked_softmax_is_shift_invariant_far_below_zero():
    """The softmax both forms use: scores shifted by -1e10 give the same weights,
    and masked keys exactly zero (a finite fill like -1e9 would take them all)."""
    from snippets.modern.latent_attention import _masked_softmax

    scores = torch.randn(2, 3, 5, 7, dtype=torch.float64)
    allowed = torch.ones(5, 7, dtype=torch.bool).tril(2)
    allowed[0] = False  # a row with no allowed key: zeros
    want = torch.where(allowed, torch.exp(scores - scores.amax(-1, keepdim=True)), 0.0)
    want = want / want.sum(-1, keepdim=True).clamp_min(1e-300)
    got = _masked_softmax(scores - 1e10, allowed)
    assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert torch.equal(got[..., ~allowed], torch.zeros_like(got[..., ~allowed]))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("absorbed", [False, True])
def test_half_precision_within_rounding_of_float64(dtype, absorbed):
    """The same rounded weights and inputs in float64 are the reference; the half
    result stays within a few times the error of rounding that reference, at
    activations large enough that the raw scores overflow float16."""
    m = make(dtype=torch.float32)
    m.q_norm.weight.data.mul_(40.0)  # large query latents: scores far beyond 65,504
    half = m.to(dtype)
    x = (3 * torch.randn(2, 9, 32)).to(dtype)
    exact = make(dtype=torch.float64)
    exact.load_state_dict({k: v.double() for k, v in half.state_dict().items()})
    want = exact(x.double(), absorbed=absorbed)
    got = half(x, absorbed=absorbed).double()
    rounding = (want.to(dtype).double() - want).abs().max()
    assert torch.isfinite(got).all()
    assert (got - want).abs().max() <= 8 * rounding + torch.finfo(dtype).eps * want.abs().max()
