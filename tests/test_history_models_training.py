"""The tiny BERT and the tiny GPT learn: reduced-size runs beat their baselines.

``train_tiny_bert`` and ``train_tiny_gpt`` are the functions the example pages
call; here they run with fewer steps (a few seconds each on one thread) and
must clearly beat predictions that ignore the context: the most frequent token
(masked-token and next-token accuracy) and the most frequent class ([CLS]).
"""

from __future__ import annotations

import pytest
import torch

from snippets.architecture.transformer_block import TransformerBlock
from snippets.attention.multi_head import MultiHeadAttention
from snippets.history.bert import train_tiny_bert
from snippets.history.gpt import train_tiny_gpt


def make_block(c):
    attention = MultiHeadAttention(c.d_model, c.n_heads, dropout=c.dropout)
    return TransformerBlock(attention, c.d_model, c.d_ff, dropout=c.dropout, activation="gelu",
                            norm_first=getattr(c, "norm_first", False), layer_norm_eps=c.layer_norm_eps)


@pytest.fixture(autouse=True)
def one_thread():
    # Tiny matrices: threads only add synchronisation, and the machine is shared.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_tiny_bert_beats_the_no_context_baseline():
    result = train_tiny_bert(make_block, steps=150, finetune_steps=30, seed=0)
    assert result.mlm_baseline < 0.1  # 16 equally likely tokens
    assert result.mlm_accuracy > result.mlm_baseline + 0.2, result
    assert result.cls_accuracy > result.cls_baseline + 0.2, result
    assert result.losses[-1] < result.losses[0] - 0.5


def test_tiny_gpt_beats_the_most_frequent_digit():
    result = train_tiny_gpt(make_block, steps=150, seed=0)
    assert result.baseline < 0.15  # 10 equally likely digits
    assert result.accuracy > result.baseline + 0.4, result
    assert result.generated_accuracy > result.baseline + 0.3, result
