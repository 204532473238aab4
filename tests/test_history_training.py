"""The RNN translation model of docs/examples/bahdanau_translation.py, at a reduced size.

Claim of Bahdanau, Cho and Bengio (2014), arXiv:1409.0473: with the same encoder,
decoder and training budget, the model that attends (RNNsearch) beats the one
that squeezes the sentence into one fixed vector (RNNencdec), and the gap opens
on longer sentences. Both models here see exactly the same batches.
"""

from __future__ import annotations

import pytest
import torch

from snippets.history.additive_attention import BahdanauSeq2Seq, accuracy_by_length, train_toy_translation

CONFIG = dict(steps=60, batch_size=32, min_len=2, max_len=6, lr=1e-2, seed=0)


def _trained(use_attention: bool):
    torch.manual_seed(0)
    model = BahdanauSeq2Seq(13, 13, emb_dim=16, hidden_size=32, attn_dim=32, use_attention=use_attention)
    return model, train_toy_translation(model, **CONFIG)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny matrices: a second thread costs more than it saves on a shared CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def trained(one_thread):
    return {True: _trained(True), False: _trained(False)}


def test_attention_beats_fixed_context_on_the_longest_inputs(trained):
    (with_attention, losses_att), (without, losses_base) = trained[True], trained[False]
    acc_att = accuracy_by_length(with_attention, [5, 6], n_per_length=100)
    acc_base = accuracy_by_length(without, [5, 6], n_per_length=100)
    assert sum(losses_att[-10:]) < 0.75 * sum(losses_base[-10:])
    for length in (5, 6):
        assert acc_att[length] > acc_base[length] + 0.3, (acc_att, acc_base)


def test_alignment_of_a_reversal_is_anti_diagonal(trained):
    """After training, output token t looks mostly at source position L - 1 - t."""
    model, _ = trained[True]
    src = torch.tensor([[3, 4, 5, 6, 7]], device=next(model.parameters()).device)  # trained there
    _, weights = model.greedy_decode(src, 5)  # (1, 5, 5)
    assert (weights[0].argmax(dim=-1).cpu() == torch.arange(4, -1, -1, device="cpu")).float().mean() >= 0.8
