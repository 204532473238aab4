"""Tests for snippets/history/bert.py (everything that needs no ``transformers``).

Oracles written out here: the embedding sum with LayerNorm, the post-norm stack
applied block by block, the tied MLM head as LayerNorm(GELU(W h)) E^T + b, the
[CLS] classifier, and cross-entropy over the selected positions. Properties:
attention looks both ways, padded tokens never change real outputs, the
80/10/10 corruption rule holds statistically (seeded), the loss ignores every
position that was not selected. Every validation message is hit. The
comparison with ``transformers`` lives in tests/test_bert_transformers.py.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from huge_scores import WrittenOut, keys_against_queries
from snippets.architecture.transformer_block import TransformerBlock
from snippets.attention.multi_head import MultiHeadAttention
from snippets.history.bert import (
    IGNORE_INDEX,
    BertClassifier,
    BertConfig,
    BertForMaskedLM,
    BertModel,
    SpecialTokens,
    counting_corpus,
    mask_tokens,
    mlm_loss,
    state_dict_from_transformers,
)

SNIPPET = Path(__file__).resolve().parents[1] / "snippets" / "history" / "bert.py"
SPECIAL = SpecialTokens()
CONFIG = BertConfig(vocab_size=30, d_model=16, n_layers=2, n_heads=4, d_ff=32, max_len=12)


def make_block(c: BertConfig) -> TransformerBlock:
    attention = MultiHeadAttention(c.d_model, c.n_heads, dropout=c.dropout)
    return TransformerBlock(attention, c.d_model, c.d_ff, dropout=c.dropout, activation="gelu",
                            norm_first=False, layer_norm_eps=c.layer_norm_eps)


def model(seed: int = 0) -> BertForMaskedLM:
    torch.manual_seed(seed)
    m = BertForMaskedLM(BertModel(CONFIG, make_block))
    with torch.no_grad():  # the defaults start norms at 1/0 and biases at 0: randomise
        for name, p in m.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.normal_(mean=1.0 if name.endswith("weight") else 0.0, std=0.2)
    return m.eval()


def batch():
    """Two sentences: [CLS] a b [SEP] c d [SEP] and a shorter one padded."""
    ids = torch.tensor([[1, 5, 6, 2, 7, 8, 2, 0], [1, 9, 10, 11, 2, 0, 0, 0]])
    segments = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 0], [0, 0, 0, 0, 0, 0, 0, 0]])
    return ids, segments, ids != SPECIAL.pad


# ----------------------------------------------------------------------------
# The model, written out
# ----------------------------------------------------------------------------


def test_embeddings_are_the_sum_then_layernorm():
    m = model()
    emb = m.bert.embeddings
    ids, segments, _ = batch()
    by_hand = emb.token.weight[ids] + emb.position.weight[: ids.shape[1]] + emb.segment.weight[segments]
    by_hand = F.layer_norm(by_hand, (16,), emb.norm.weight, emb.norm.bias, eps=1e-12)
    assert_close(emb(ids, segments), by_hand)
    zero = torch.zeros_like(segments)
    assert_close(emb(ids), emb(ids, zero))
    assert not torch.allclose(emb(ids), emb(ids, segments))
    assert torch.count_nonzero(emb.token.weight[SPECIAL.pad]) == 0  # [PAD] starts at zero


def test_model_applies_embeddings_then_every_block_with_the_key_mask():
    m = model()
    ids, segments, key_mask = batch()
    x = m.bert.embeddings(ids, segments)
    for layer in m.bert.layers:
        x = layer(x, key_mask=key_mask)
    assert_close(m.bert(ids, segment_ids=segments, key_mask=key_mask), x)
    assert_close(m.bert(ids, segment_ids=segments), x)  # key_mask defaults to ids != [PAD]


def test_attention_is_bidirectional():
    m = model()
    ids, _, _ = batch()
    changed = ids.clone()
    changed[0, 5] = 20  # a later token of sentence 0
    before, after = m.bert(ids), m.bert(changed)
    assert not torch.allclose(before[0, 1], after[0, 1])  # an earlier token sees it
    assert_close(before[1], after[1])


def test_padded_tokens_never_change_real_outputs():
    m = model()
    ids, segments, key_mask = batch()
    changed = ids.clone()
    changed[1, 5:] = torch.tensor([13, 14, 15])  # garbage where sentence 1 is padded
    before = m.bert(ids, segment_ids=segments, key_mask=key_mask)
    after = m.bert(changed, segment_ids=segments, key_mask=key_mask)
    assert_close(after[key_mask], before[key_mask])


@pytest.mark.parametrize("written_out", [False, True])
def test_padded_tokens_stay_out_at_huge_scores(written_out):
    # In every layer W_k = -W_q with W_q scaled by 1e7: a token scores about
    # -1e10 or less against itself (float32). Sentence 0 is [CLS] alone, so its
    # one allowed score is that; every padded token outscores it by far. With
    # -inf masking the real outputs do not move when the padding changes; a
    # fill of -1e4 (or -1e9) would hand [CLS] to the padding.
    m = model()
    for layer in m.bert.layers:
        if written_out:
            layer.attention = WrittenOut(layer.attention)
        mha = layer.attention.mha if written_out else layer.attention
        keys_against_queries(mha.in_proj.weight, mha.in_proj.bias, 1e7)
    ids, segments, key_mask = batch()
    key_mask[0, 1:] = False  # sentence 0: [CLS] and nothing else
    changed = ids.clone()
    changed[~key_mask] = torch.randint(5, 30, (int((~key_mask).sum()),), generator=torch.Generator(device=torch.get_default_device()).manual_seed(0))
    before = m.bert(ids, segment_ids=segments, key_mask=key_mask)
    after = m.bert(changed, segment_ids=segments, key_mask=key_mask)
    assert torch.isfinite(before).all()
    assert_close(after[key_mask], before[key_mask], rtol=1e-5, atol=1e-5)


def test_mlm_head_is_tied_and_written_out():
    m = model()
    head = m.mlm
    assert head.decoder.weight is m.bert.embeddings.token.weight
    ids, segments, key_mask = batch()
    hidden = m.bert(ids, segment_ids=segments, key_mask=key_mask)
    h = F.gelu(hidden @ head.transform.weight.T + head.transform.bias)
    h = F.layer_norm(h, (16,), head.norm.weight, head.norm.bias, eps=1e-12)
    expected = h @ m.bert.embeddings.token.weight.T + head.decoder.bias
    assert_close(m(ids, segment_ids=segments, key_mask=key_mask), expected)
    m(ids).sum().backward()
    assert m.bert.embeddings.token.weight.grad is not None
    n_params = sum(p.numel() for p in m.parameters())
    assert n_params < sum(p.numel() for p in m.state_dict().values())  # the tie is counted once


def test_classifier_reads_the_cls_position():
    torch.manual_seed(0)
    clf = BertClassifier(model().bert, n_classes=3).eval()
    ids, segments, key_mask = batch()
    hidden = clf.bert(ids, segment_ids=segments, key_mask=key_mask)
    pooled = torch.tanh(hidden[:, 0] @ clf.pooler.weight.T + clf.pooler.bias)
    expected = pooled @ clf.classifier.weight.T + clf.classifier.bias
    assert_close(clf(ids, segment_ids=segments, key_mask=key_mask), expected)


def test_dropout_only_in_training():
    torch.manual_seed(0)
    m = BertForMaskedLM(BertModel(BertConfig(vocab_size=30, d_model=16, n_layers=1, n_heads=2, d_ff=32,
                                             max_len=12, dropout=0.3), make_block))
    ids, _, _ = batch()
    m.eval()
    assert_close(m(ids), m(ids))
    m.train()
    assert not torch.allclose(m(ids), m(ids))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_finite_with_large_embeddings(dtype):
    m = model().to(dtype)
    with torch.no_grad():
        m.bert.embeddings.token.weight.mul_(1e3)
    ids, segments, key_mask = batch()
    logits = m(ids, segment_ids=segments, key_mask=key_mask)
    assert logits.dtype == dtype and torch.isfinite(logits).all()


def test_gradcheck_float64_through_a_block():
    m = model().double()
    ids, _, key_mask = batch()
    x = m.bert.embeddings(ids).detach().requires_grad_(True)
    block = m.bert.layers[0]
    short = x[:, :5].detach().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: block(t, key_mask=key_mask[:, :5]), (short,), fast_mode=True)


# ----------------------------------------------------------------------------
# Masked-language-model corruption and loss
# ----------------------------------------------------------------------------


def corrupt_large(seed=0, vocab=1004):
    g = torch.Generator(device=torch.get_default_device()).manual_seed(seed)
    ids = torch.randint(4, vocab, (64, 512), generator=g)
    ids[:, 0] = SPECIAL.cls
    ids[:, -1] = SPECIAL.sep
    ids[:8, -50:-1] = SPECIAL.pad
    corrupted, labels = mask_tokens(ids, vocab, generator=g)
    return ids, corrupted, labels


def test_mask_tokens_80_10_10_rule_statistically():
    ids, corrupted, labels = corrupt_large()
    regular = ids >= 4
    selected = labels != IGNORE_INDEX
    n = selected.sum().item()
    assert abs(n / regular.sum().item() - 0.15) < 0.01  # ~32,000 regular tokens: 5 sigma ~ 0.01
    masked = (corrupted == SPECIAL.mask) & selected
    swapped = (corrupted != ids) & (corrupted != SPECIAL.mask) & selected
    kept = (corrupted == ids) & selected
    assert abs(masked.sum().item() / n - 0.8) < 0.03
    assert abs(swapped.sum().item() / n - 0.1) < 0.02
    assert abs(kept.sum().item() / n - 0.1) < 0.02  # (+ 0.1/1000 swaps that drew the same token)


def test_mask_tokens_touches_only_selected_regular_tokens():
    ids, corrupted, labels = corrupt_large(seed=1)
    selected = labels != IGNORE_INDEX
    assert torch.equal(labels[selected], ids[selected])
    assert torch.equal(corrupted[~selected], ids[~selected])
    assert not selected[ids < 4].any()  # [CLS], [SEP], [PAD] are never selected
    assert (corrupted[selected] >= 3).all()  # swaps never draw [PAD], [CLS] or [SEP]


def test_mask_tokens_is_reproducible_with_a_generator():
    a = corrupt_large(seed=3)
    b = corrupt_large(seed=3)
    c = corrupt_large(seed=4)
    assert torch.equal(a[1], b[1]) and torch.equal(a[2], b[2])
    assert not torch.equal(a[1], c[1])


def test_mlm_loss_counts_only_selected_positions():
    g = torch.Generator(device=torch.get_default_device()).manual_seed(0)
    logits = torch.randn(2, 6, 30, generator=g)
    labels = torch.full((2, 6), IGNORE_INDEX)
    labels[0, 2], labels[1, 4], labels[1, 1] = 7, 9, 11
    rows = [(0, 2, 7), (1, 4, 9), (1, 1, 11)]
    by_hand = -sum(torch.log_softmax(logits[b, i], -1)[t] for b, i, t in rows) / len(rows)
    assert_close(mlm_loss(logits, labels), by_hand)
    other = logits.clone()
    other[labels == IGNORE_INDEX] = 100 * torch.randn(9, 30, generator=g)
    assert_close(mlm_loss(other, labels), by_hand)
    other[0, 2] += torch.randn(30, generator=g)
    assert not torch.allclose(mlm_loss(other, labels), by_hand)


def test_counting_corpus_counts():
    ids, labels = counting_corpus(50, 9, 16, (1, 2, 3), generator=torch.Generator(device=torch.get_default_device()).manual_seed(0))
    assert ids.shape == (50, 11) and (ids[:, 0] == SPECIAL.cls).all() and (ids[:, -1] == SPECIAL.sep).all()
    steps = torch.tensor([1, 2, 3])[labels]
    body = ids[:, 1:-1] - 4
    assert torch.equal((body[:, 1:] - body[:, :-1]) % 16, steps[:, None].expand(-1, 8))


# ----------------------------------------------------------------------------
# Exercises on docs/history/bert.md
# ----------------------------------------------------------------------------


def test_exercise_overall_fractions():
    ids, corrupted, labels = corrupt_large(seed=5)
    regular = ids >= 4
    n = regular.sum().item()
    selected = labels != IGNORE_INDEX
    assert abs((corrupted == SPECIAL.mask).sum().item() / n - 0.12) < 0.01
    assert abs(((corrupted != ids) & (corrupted != SPECIAL.mask)).sum().item() / n - 0.015) < 0.004
    assert abs((selected & (corrupted == ids)).sum().item() / n - 0.015) < 0.004


def test_exercise_bert_base_parameters():
    with torch.device("meta"):
        base = BertModel(BertConfig(), make_block)
    assert sum(p.numel() for p in base.parameters()) == 108_891_648


# ----------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: BertConfig(vocab_size=0), ValueError, r"vocab_size must be an int >= 1, got \{'vocab_size': 0\}"),
        (lambda: BertConfig(d_model=10, n_heads=4), ValueError, "d_model must divide by n_heads=4, got 10"),
        (lambda: BertConfig(vocab_size=3), ValueError, r"vocab_size must exceed the special ids, got 3"),
        (lambda: BertClassifier(model().bert, 1), ValueError, r"n_classes must be an int >= 2, got \{'n_classes': 1\}"),
        (lambda: BertConfig.from_transformers(SimpleNamespace(hidden_act="gelu_new")), ValueError,
         "config.hidden_act must be 'gelu' \\(exact\\), got 'gelu_new'"),
        (lambda: state_dict_from_transformers({"cls.seq_relationship.weight": torch.zeros(2)}), ValueError,
         "hf_state must hold transformers' BERT keys, got 'cls.seq_relationship.weight'"),
    ],
)
def test_constructor_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_forward_and_masking_errors():
    m = model()
    ids, segments, _ = batch()
    emb = m.bert.embeddings
    with pytest.raises(TypeError, match=r"input_ids must have dtype \(torch.int64, torch.int32\) on cpu, got torch.float32"):
        emb(ids.float())
    with pytest.raises(ValueError, match=r"input_ids must have shape \(None, None\), got list"):
        emb([1, 2])
    with pytest.raises(ValueError, match=r"input_ids must have shape \(None, None\), got \(8,\)"):
        emb(ids[0])
    with pytest.raises(ValueError, match="input_ids must have N <= max_len=12, got 13"):
        emb(torch.ones(1, 13, dtype=torch.long))
    with pytest.raises(ValueError, match=r"segment_ids must lie in \[0, 2\), got \[2\]"):
        emb(ids, segments + 1)
    with pytest.raises(ValueError, match=r"segment_ids must have shape \(2, 8\), got \(2, 7\)"):
        emb(ids, segments[:, :7])
    with pytest.raises(ValueError, match=r"select_prob must be in \(0, 1\], got 0"):
        mask_tokens(ids, 30, select_prob=0)
    with pytest.raises(ValueError, match=r"vocab_size must be an int >= 5, got \{'vocab_size': 4\}"):
        mask_tokens(ids.clamp(max=3), 4)
    with pytest.raises(ValueError, match=r"input_ids must lie in \[0, 10\)"):
        mask_tokens(ids, 10)
    with pytest.raises(ValueError, match=r"labels must have shape \(2, 8\), got \(2, 7\)"):
        mlm_loss(torch.zeros(2, 8, 30), torch.zeros(2, 7, dtype=torch.long))


def test_from_transformers_reads_the_sizes_without_the_library():
    hf = SimpleNamespace(hidden_act="gelu", vocab_size=40, hidden_size=8, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=16, max_position_embeddings=10,
                         type_vocab_size=2, hidden_dropout_prob=0.0, layer_norm_eps=1e-12)
    c = BertConfig.from_transformers(hf, special=SpecialTokens())
    assert (c.vocab_size, c.d_model, c.n_layers, c.n_heads, c.d_ff, c.max_len) == (40, 8, 1, 2, 16, 10)


# ----------------------------------------------------------------------------
# The file stands alone
# ----------------------------------------------------------------------------




def test_config_embedding_head_and_loss_errors():
    from snippets.history.bert import BertEmbeddings, MlmHead

    m = model()
    ids, segments, keys = batch()
    cases = [
        (lambda: SpecialTokens(pad=-1), ValueError, r"pad must be an int >= 0, got \{'pad': -1\}"),
        (lambda: SpecialTokens(mask=0), ValueError, r"pad, cls, sep and mask must differ, got SpecialTokens"),
        (lambda: BertConfig(dropout=1.5), ValueError, r"dropout must be in \[0.0, 1.0\), got 1.5"),
        (lambda: BertConfig(layer_norm_eps=0.0), ValueError, r"layer_norm_eps must be in \(0.0, inf\), got 0.0"),
        (lambda: BertConfig(special=(0, 1, 2, 3)), AttributeError, r"'tuple' object has no attribute 'ids'"),
        (lambda: MlmHead(CONFIG, torch.nn.Embedding(3, 16)), ValueError,
         r"token_embedding.weight must have shape \(30, 16\), got \(3, 16\)"),
        (lambda: m.mlm(torch.randn(2, 8)), ValueError, r"hidden must have shape \(None, None, 16\), got \(2, 8\)"),
        (lambda: m.mlm(torch.randn(2, 8, 16, device="meta")), TypeError,
         r"hidden must have dtype .* on cpu, got .* on meta"),
        (lambda: m.mlm(torch.randn(2, 8, 16, dtype=torch.float64)), TypeError,
         r"hidden must have dtype torch.float32 on cpu, got torch.float64"),
        (lambda: m(ids + 30), ValueError, r"input_ids must lie in \[0, 30\), got \[30, 31, .*, 41\]"),
        (lambda: m(ids.to("meta")), TypeError, r"input_ids must have dtype .* on cpu, got .* on meta"),
        (lambda: m(ids, segment_ids=segments.float()), TypeError,
         r"segment_ids must have dtype \(torch.int64, torch.int32\) on cpu, got torch.float32"),
        (lambda: m(ids, segment_ids=segments.to("meta")), TypeError, r"segment_ids must have dtype .* on cpu, got .* on meta"),
        (lambda: m(ids, key_mask=keys.long()), TypeError, r"key_mask must have dtype \(torch.bool,\) on cpu, got torch.int64"),
        (lambda: m(ids, key_mask=keys[:, :5]), ValueError,
         r"key_mask must have shape \(2, 8\), got \(2, 5\)"),
        (lambda: mlm_loss(torch.zeros(2, 8, 30, dtype=torch.long), ids), TypeError,
         r"logits must have dtype \(torch.float16, .*\) on cpu, got torch.int64"),
        (lambda: mlm_loss(torch.zeros(2, 8, 30), ids.float()), TypeError, r"labels must have dtype \(torch.int64, torch.int32\) on cpu, got torch.float32"),
        (lambda: mlm_loss(torch.zeros(2, 8, 30), ids.to("meta")), TypeError, r"labels must have dtype .* on cpu, got .* on meta"),
        (lambda: mlm_loss(torch.zeros(2, 8, 30), ids + 25), ValueError,
         r"labels must be ids in \[0, V\) or -100, got \[30, 31"),
    ]
    for make, error, match in cases:
        with pytest.raises(error, match=match):
            make()


def test_corpus_masking_loading_and_training_errors():
    from snippets.history.bert import train_tiny_bert

    ids, _, _ = batch()
    cases = [
        (lambda: mask_tokens(ids, 3), ValueError, r"vocab_size must be an int >= 5, got \{'vocab_size': 3\}"),
        (lambda: mask_tokens(ids, 30, special=(0, 1, 2, 3)), AttributeError, r"'tuple' object has no attribute 'ids'"),
        (lambda: mask_tokens(ids, 30, generator=0), TypeError, r"rand\(\) .* got .*generator=int"),
        (lambda: counting_corpus(0, 4, 8, (1,)), ValueError, r"n_sequences must be an int >= 1, got \{'n_sequences': 0\}"),
        (lambda: counting_corpus(2, 4, 8, ()), ValueError, r"steps must be a non-empty tuple of ints, got \(\)"),
        # train_tiny_bert leaves these to the first batch's checks (corpus, model)
        (lambda: train_tiny_bert(make_block, count_steps=[2.5]), ValueError, r"steps must be a non-empty tuple of ints, got \[2.5\]"),
        (lambda: train_tiny_bert(make_block, config=CONFIG, length=11), ValueError,
         r"input_ids must have N <= max_len=12, got 13"),
        (lambda: train_tiny_bert(make_block, config=CONFIG, n_tokens=30), ValueError,
         r"input_ids must lie in \[0, 30\), got \[30, 31, 32, 33\]"),
    ]
    for make, error, match in cases:
        with pytest.raises(error, match=match):
            make()
