"""MoBA: the gate as the authors' reference writes it, its dense limit, its own-block rule."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from snippets.linear.block_sparse_attention import (
    group_block_choice,
    group_sparse_attention,
    moba_attention,
    moba_block_choice,
)
from transformers_support import require_transformers

F64 = dict(atol=1e-12, rtol=1e-12)


def _qkv(b=2, h=3, n=23, d=8, dtype=torch.float64, seed=0):
    gen = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    return tuple(torch.randn(b, h, n, d, generator=gen, dtype=dtype) for _ in range(3))


def reference(q, k, v, block, top_k):
    """Block by block, one (batch, head) at a time: gate, +inf own, -inf later, top-k, causal."""
    b, h, n, d = q.shape
    n_blocks = math.ceil(n / block)
    out = torch.empty_like(v)
    for bi in range(b):
        for hi in range(h):
            means = torch.stack([k[bi, hi, j * block:(j + 1) * block].mean(dim=0) for j in range(n_blocks)])
            gate = q[bi, hi] @ means.T  # (N, n_blocks)
            for j in range(n_blocks):
                gate[: (j + 1) * block, j] = -math.inf  # queries up to the end of block j
                gate[j * block:(j + 1) * block, j] = math.inf  # ...except its own queries
            top = gate.topk(min(top_k, n_blocks), dim=-1).indices
            allowed = torch.zeros(n, n, dtype=torch.bool)
            for i in range(n):
                for j in top[i].tolist():
                    allowed[i, j * block:(j + 1) * block] = True
            allowed &= torch.ones(n, n, dtype=torch.bool).tril()
            scores = (q[bi, hi] @ k[bi, hi].T / math.sqrt(d)).masked_fill(~allowed, -math.inf)
            out[bi, hi] = scores.softmax(dim=-1) @ v[bi, hi]
    return out


@pytest.mark.parametrize("n,block,top_k", [(23, 4, 2), (23, 4, 3), (16, 4, 2), (9, 3, 1), (30, 7, 4)])
def test_matches_the_reference_gate(n, block, top_k):
    q, k, v = _qkv(n=n)
    assert_close(moba_attention(q, k, v, block_size=block, top_k=top_k), reference(q, k, v, block, top_k), **F64)


@pytest.mark.parametrize("top_k", [6, 7, 50])
def test_top_k_covering_every_block_is_causal_attention(top_k):
    q, k, v = _qkv(n=23)  # ceil(23 / 4) = 6 blocks
    assert_close(moba_attention(q, k, v, block_size=4, top_k=top_k),
                 F.scaled_dot_product_attention(q, k, v, is_causal=True), **F64)


def test_the_own_block_is_kept_however_badly_it_scores():
    q, k, v = _qkv(n=24)
    k = k.clone()
    k[:, :, 8:12] = -50 * q[:, :, 8:12].mean(dim=2, keepdim=True)  # block 2's mean opposes its queries
    kept = moba_block_choice(q, k, block_size=4, top_k=2)
    own = torch.arange(24) // 4
    assert kept[..., torch.arange(24), own].all()
    counts = kept.sum(dim=-1)  # its own block plus min(top_k - 1, past blocks)
    assert torch.equal(counts, (own + 1).clamp(max=2).expand_as(counts))
    assert not (kept & (torch.arange(6) > own[:, None])).any()  # never a later block


def test_top_k_one_is_causal_attention_inside_each_block():
    q, k, v = _qkv(n=20)
    i, j = torch.arange(20)[:, None], torch.arange(20)
    local = (i // 5 == j // 5) & (j <= i)
    assert_close(moba_attention(q, k, v, block_size=5, top_k=1),
                 F.scaled_dot_product_attention(q, k, v, attn_mask=local), **F64)


def test_the_gate_picks_the_block_whose_mean_key_matches():
    q, k, v = _qkv(b=1, h=1, n=16, d=4)
    k = k * 0.01
    k[..., 4:8, :] = 5.0 * q[..., 15:16, :]  # block 1 points where the last query points
    kept = moba_block_choice(q, k, block_size=4, top_k=2)
    assert kept[0, 0, 15].tolist() == [False, True, False, True]


def test_causal_future_tokens_change_nothing():
    q, k, v = _qkv(n=20)
    out = moba_attention(q, k, v, block_size=4, top_k=2)
    q2, k2, v2 = (t.clone() for t in (q, k, v))
    for t in (q2, k2, v2):
        t[:, :, 13:] = torch.randn_like(t[:, :, 13:])
    out2 = moba_attention(q2, k2, v2, block_size=4, top_k=2)
    assert_close(out2[:, :, :13], out[:, :, :13], **F64)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_stays_near_float32(dtype):
    q, k, v = (t * 4 for t in _qkv(n=64, d=16, dtype=torch.float32))  # scores of tens
    rounded = [t.to(dtype) for t in (q, k, v)]
    ref = moba_attention(*(t.float() for t in rounded), block_size=8, top_k=3)
    out = moba_attention(*rounded, block_size=8, top_k=3)
    assert out.dtype == dtype and torch.isfinite(out).all()
    assert (out.float() - ref).abs().max() <= 4 * torch.finfo(dtype).eps * ref.abs().max()


def test_gradients_pass_gradcheck():
    inputs = tuple(t.requires_grad_() for t in _qkv(b=1, h=1, n=7, d=3))
    assert torch.autograd.gradcheck(lambda *a: moba_attention(*a, block_size=3, top_k=2), inputs)


def test_bad_input_is_named():
    q, k, v = _qkv(n=8)
    with pytest.raises(TypeError, match=r"q must be a floating \(B, H, N, d\) tensor"):
        moba_attention(q[..., 0], k, v, block_size=4, top_k=2)
    with pytest.raises(ValueError, match=r"k must be a floating \(2, 3, 8, 8\) tensor on q's"):
        moba_attention(q, k[:, :, :5], v, block_size=4, top_k=2)
    with pytest.raises(ValueError, match=r"v must be a floating \(2, 3, 8, d_v\) tensor"):
        moba_attention(q, k, v[:, :2], block_size=4, top_k=2)
    with pytest.raises(ValueError, match="v must be .* on q's device and dtype, got torch.float32"):
        moba_attention(q, k, v.float(), block_size=4, top_k=2)
    with pytest.raises(ValueError, match="block_size must be an int >= 1, got 0"):
        moba_block_choice(q, k, block_size=0, top_k=2)
    with pytest.raises(ValueError, match="top_k must be an int >= 1, got 0"):
        moba_attention(q, k, v, block_size=4, top_k=0)
    with pytest.raises(ValueError, match="scale must be None or a finite number > 0"):
        moba_attention(q, k, v, block_size=4, top_k=2, scale=-1.0)


def test_exercise_keys_read():
    for seed in range(5):
        q, k, v = _qkv(b=1, h=1, n=16, seed=seed)
        kept = moba_block_choice(q, k, block_size=4, top_k=2)[0, 0, 14]
        keys = kept.repeat_interleave(4) & (torch.arange(16) <= 14)
        assert int(keys.sum()) == 7



# --------------------------------------------------- MiniMax's grouped blocks
def _group_inputs(b=1, h=4, g=2, n=29, d=8, d_i=6, dtype=torch.float64, seed=1):
    gen = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    q = torch.randn(b, h, n, d, generator=gen, dtype=dtype)
    k, v = (torch.randn(b, g, n, d, generator=gen, dtype=dtype) for _ in range(2))
    index_q = torch.randn(b, g, n, d_i, generator=gen, dtype=dtype)
    index_k = torch.randn(b, 1, n, d_i, generator=gen, dtype=dtype)
    return q, k, v, index_q, index_k


def _minimax_indexer(n, block, top_k, local):
    require_transformers()
    from transformers.models.minimax_m3_vl.configuration_minimax_m3_vl import MiniMaxM3VLTextConfig
    from transformers.models.minimax_m3_vl.modeling_minimax_m3_vl import MiniMaxM3VLIndexer

    config = MiniMaxM3VLTextConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                                   index_n_heads=2, index_head_dim=8, index_block_size=block,
                                   index_topk_blocks=top_k, index_local_blocks=local)
    torch.manual_seed(n)
    return MiniMaxM3VLIndexer(config, layer_idx=0).double()


@pytest.mark.parametrize("n,block,top_k,local", [(18, 4, 3, 1), (37, 4, 4, 2), (16, 4, 2, 0), (23, 5, 10, 1)])
def test_group_choice_and_attention_equal_transformers_minimax(n, block, top_k, local):
    """MiniMaxM3VLIndexer's block indices and build_block_mask, with RoPE at angle 0."""
    indexer = _minimax_indexer(n, block, top_k, local)
    x, positions = torch.randn(1, n, 32, dtype=torch.float64), torch.arange(n)[None]
    no_rotation = (torch.ones(1, n, 8, dtype=torch.float64), torch.zeros(1, n, 8, dtype=torch.float64))
    with torch.no_grad():
        indices = indexer(x, no_rotation, None, positions)
        index_q = indexer.q_norm(indexer.q_proj(x).view(1, n, 2, 8)).transpose(1, 2)
        index_k = indexer.k_norm(indexer.k_proj(x).view(1, n, 1, 8)).transpose(1, 2)
        mask = indexer.build_block_mask(indices, None, n, torch.float64, x.device, positions)
    kept = group_block_choice(index_q, index_k, block_size=block, top_k=top_k, local_blocks=local)
    n_blocks = kept.shape[-1]
    theirs = torch.zeros(1, 2, n, n_blocks + 1, dtype=torch.bool)
    theirs = theirs.scatter(-1, indices.masked_fill(indices < 0, n_blocks), True)[..., :n_blocks]
    assert torch.equal(kept, theirs)
    q, k, v = torch.randn(1, 4, n, 8, dtype=torch.float64), *torch.randn(2, 1, 2, n, 8, dtype=torch.float64)
    want = F.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1),
                                          attn_mask=mask)
    out = group_sparse_attention(q, k, v, index_q, index_k, block_size=block, top_k=top_k,
                                 local_blocks=local)
    assert_close(out, want, **F64)


def test_group_choice_keeps_the_local_blocks_and_counts_them():
    q, k, v, index_q, index_k = _group_inputs(n=40)
    kept = group_block_choice(index_q, index_k, block_size=4, top_k=3, local_blocks=2)
    own = torch.arange(40) // 4
    assert kept[..., torch.arange(40), own].all()
    assert kept[..., torch.arange(4, 40), own[4:] - 1].all()
    assert torch.equal(kept.sum(-1), (own + 1).clamp(max=3).expand(1, 2, 40))
    assert not (kept & (torch.arange(10) > own[:, None])).any()


def test_heads_of_one_group_share_blocks_and_groups_choose_apart():
    q, k, v, index_q, index_k = _group_inputs(n=40)
    kept = group_block_choice(index_q, index_k, block_size=4, top_k=3, local_blocks=1)
    assert not torch.equal(kept[:, 0], kept[:, 1])  # two groups, two choices
    out = group_sparse_attention(q, k, v, index_q, index_k, block_size=4, top_k=3)
    i, j = torch.arange(40)[:, None], torch.arange(40)
    for head in range(4):  # heads 0, 1 read group 0's blocks; heads 2, 3 group 1's
        keys = kept[:, head // 2].repeat_interleave(4, dim=-1) & (j <= i)
        want = F.scaled_dot_product_attention(q[:, head], k[:, head // 2], v[:, head // 2], attn_mask=keys)
        assert_close(out[:, head], want, **F64)
    changed = index_q.clone()
    changed[:, 1] = torch.randn_like(changed[:, 1])  # group 1's index query only
    again = group_block_choice(changed, index_k, block_size=4, top_k=3, local_blocks=1)
    assert torch.equal(again[:, 0], kept[:, 0])


def test_group_top_k_covering_every_block_is_causal_gqa_attention():
    q, k, v, index_q, index_k = _group_inputs(n=29)
    out = group_sparse_attention(q, k, v, index_q, index_k, block_size=4, top_k=8)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), **F64)


def test_group_bad_input_is_named():
    q, k, v, index_q, index_k = _group_inputs(n=8)
    with pytest.raises(ValueError, match=r"index_k must be a floating \(1, 1, 8, 6\) tensor"):
        group_block_choice(index_q, index_k.expand(1, 2, 8, 6), block_size=4, top_k=2)
    with pytest.raises(ValueError, match=r"q must have H a multiple of G = 2, got 3"):
        group_sparse_attention(q[:, :3], k, v, index_q, index_k, block_size=4, top_k=2)
    with pytest.raises(ValueError, match=r"k must be a floating \(1, 2, 8, 8\) tensor"):
        group_sparse_attention(q, k[:, :1], v, index_q, index_k, block_size=4, top_k=2)
    with pytest.raises(ValueError, match="v must be .* on index_q's device and dtype"):
        group_sparse_attention(q, k, v.float(), index_q, index_k, block_size=4, top_k=2)
    with pytest.raises(ValueError, match="local_blocks must be an int >= 0, got -1"):
        group_block_choice(index_q, index_k, block_size=4, top_k=2, local_blocks=-1)
