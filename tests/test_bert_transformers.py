"""Our BERT against the ``transformers`` library's, randomly initialised.

No download: every ``transformers`` model is built from a small BertConfig with
random weights (LayerNorms and biases randomised too), its state dict renamed
by ``state_dict_from_transformers`` and loaded into ours with ``strict=True``.
Compared: the embeddings, one BertLayer against one TransformerBlock, the whole
encoder with padding and two segments, the MLM logits (tied decoder), and the
[CLS] classifier logits.

Without ``transformers`` these tests skip, except in CI (the CI environment
variable set), where they fail: CI installs requirements-extra.txt.
"""

from __future__ import annotations


import pytest
import torch
from torch.testing import assert_close

from snippets.architecture.transformer_block import TransformerBlock
from snippets.attention.multi_head import MultiHeadAttention
from snippets.history.bert import (
    BertClassifier,
    BertConfig,
    BertForMaskedLM,
    BertModel,
    SpecialTokens,
    state_dict_from_transformers,
)

from transformers_support import require_transformers, skip_module_without_transformers, transformers

skip_module_without_transformers()



SPECIAL = SpecialTokens(pad=0, cls=1, sep=2, mask=3)


def make_block(c: BertConfig) -> TransformerBlock:
    attention = MultiHeadAttention(c.d_model, c.n_heads, dropout=c.dropout)
    return TransformerBlock(attention, c.d_model, c.d_ff, dropout=c.dropout, activation="gelu",
                            norm_first=False, layer_norm_eps=c.layer_norm_eps)


def hf_config(hf, **kw):
    return hf.BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=32, max_position_embeddings=12, type_vocab_size=2,
                         pad_token_id=0, **kw)


def randomised(module):
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.normal_(mean=1.0 if "LayerNorm.weight" in name else 0.0, std=0.3)
    return module.eval()


def batch():
    ids = torch.tensor([[1, 5, 6, 2, 7, 8, 2, 0], [1, 9, 10, 11, 2, 0, 0, 0]])
    segments = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 0], [0, 0, 0, 0, 0, 0, 0, 0]])
    return ids, segments, ids != 0


def ours_like(hf_model, wrapper=None, **kw):
    config = BertConfig.from_transformers(hf_model.config, special=SPECIAL)
    model = BertModel(config, make_block)
    if wrapper is not None:
        model = wrapper(model, **kw)
    model.load_state_dict(state_dict_from_transformers(hf_model.state_dict()), strict=True)
    return model.eval()


def test_embeddings_and_one_layer_match():
    hf = require_transformers()
    theirs = randomised(hf.BertModel(hf_config(hf), add_pooling_layer=False))
    ours = ours_like(theirs)
    ids, segments, _ = batch()
    expected = theirs.embeddings(input_ids=ids, token_type_ids=segments)
    assert_close(ours.embeddings(ids, segments), expected)
    layer_out = theirs.encoder.layer[0](expected)
    layer_out = layer_out[0] if isinstance(layer_out, tuple) else layer_out
    assert_close(ours.layers[0](expected), layer_out)


def test_encoder_matches_with_padding_and_segments():
    hf = require_transformers()
    theirs = randomised(hf.BertModel(hf_config(hf), add_pooling_layer=False))
    ours = ours_like(theirs)
    ids, segments, key_mask = batch()
    expected = theirs(input_ids=ids, token_type_ids=segments, attention_mask=key_mask.long()).last_hidden_state
    got = ours(ids, segment_ids=segments, key_mask=key_mask)
    assert_close(got[key_mask], expected[key_mask])


def test_masked_lm_logits_match_and_stay_tied():
    hf = require_transformers()
    theirs = randomised(hf.BertForMaskedLM(hf_config(hf)))
    ours = ours_like(theirs, BertForMaskedLM)
    assert ours.mlm.decoder.weight is ours.bert.embeddings.token.weight
    ids, segments, key_mask = batch()
    expected = theirs(input_ids=ids, token_type_ids=segments, attention_mask=key_mask.long()).logits
    got = ours(ids, segment_ids=segments, key_mask=key_mask)
    assert_close(got[key_mask], expected[key_mask])


def test_cls_classifier_matches():
    hf = require_transformers()
    theirs = randomised(hf.BertForSequenceClassification(hf_config(hf, num_labels=3)))
    ours = ours_like(theirs, BertClassifier, n_classes=3)
    ids, segments, key_mask = batch()
    expected = theirs(input_ids=ids, token_type_ids=segments, attention_mask=key_mask.long()).logits
    assert_close(ours(ids, segment_ids=segments, key_mask=key_mask), expected)


def test_config_is_read_from_transformers():
    hf = require_transformers()
    c = BertConfig.from_transformers(hf.BertConfig())  # BERT-base, no weights built
    assert (c.vocab_size, c.d_model, c.n_layers, c.n_heads, c.d_ff, c.max_len) == (30522, 768, 12, 12, 3072, 512)
    assert c.layer_norm_eps == 1e-12 and c.special.mask == 103
