"""Malformed input for the history snippets: every public callable refuses it by name.

The framework (what makes an argument wrong, the sweep and the hypothesis test)
is in ``tests/fuzz_support.py``; this file registers one entry per public
callable of ``snippets/history/`` and collects the three tests over them.
"""

from __future__ import annotations

import math  # noqa: F401
import pytest  # noqa: F401
import torch
from torch import nn  # noqa: F401

from fuzz_support import *  # noqa: F401,F403
from fuzz_support import fuzz_tests
from snippets.architecture import transformer_block as block_mod
from snippets.attention import multi_head as mha_mod
from snippets.history import additive_attention as add_mod
from snippets.history import bert as bert_mod
from snippets.history import gpt as gpt_mod
from snippets.history import luong_attention as luong_mod

# history
# ----------------------------------------------------------------------------


@fuzz("history.additive_attention.AdditiveAttention")
def _(s):
    init = {"query_dim": s.d, "key_dim": s.d + 1, "attn_dim": s.d + 2}
    module = add_mod.AdditiveAttention(**init)
    keys = r(s.b, s.m, s.d + 1)
    calls = _module_calls(
        add_mod.AdditiveAttention, init, {"query_dim": POS_INT, "key_dim": POS_INT, "attn_dim": POS_INT},
        lambda mod, **kw: mod(kw.pop("query"), kw.pop("keys"), **kw),
        {"query": r(s.b, s.n, s.d), "keys": keys, "key_mask": ones(s.b, s.m),
         "projected_keys": module.project_keys(keys).detach()},
        {"query": T(rank=3, tied=(0, -1), names=("keys",)),
         "keys": T(rank=3, tied=(0, 1, -1), names=("query", "key_mask", "projected_keys")),
         "key_mask": KEY_MASK, "projected_keys": T(rank=3, tied=(0, 1, 2), names=("keys",))},
    )
    return calls


def _src(s, vocab=13):
    src = ids(s.b, s.m, high=vocab - 3) + 3
    return src, ones(s.b, s.m)


@fuzz("history.additive_attention.BahdanauEncoder")
def _(s):
    src, mask = _src(s)
    return _module_calls(
        add_mod.BahdanauEncoder, {"vocab_size": 13, "emb_dim": s.d, "hidden_size": s.d},
        {"vocab_size": POS_INT, "emb_dim": POS_INT, "hidden_size": POS_INT},
        lambda mod, **kw: mod(kw.pop("src"), kw.pop("key_mask")),
        {"src": src, "key_mask": mask},
        {"src": T(INT, rank=2, tied=(0, 1), high=13, names=("key_mask",)), "key_mask": KEY_MASK},
    )


@fuzz("history.additive_attention.BahdanauSeq2Seq")
def _(s):
    init = {"src_vocab": 13, "tgt_vocab": 13, "emb_dim": s.d, "hidden_size": s.d, "attn_dim": s.d}
    module = add_mod.BahdanauSeq2Seq(**init).eval()
    src, mask = _src(s)
    src_specs = {"src": T(INT, rank=2, tied=(0, 1), high=13, names=("src_mask", "tgt_in")),
                 "src_mask": KEY_MASK}
    return [
        Call(add_mod.BahdanauSeq2Seq, init, {"src_vocab": POS_INT, "tgt_vocab": POS_INT, "emb_dim": POS_INT,
                                             "hidden_size": POS_INT, "attn_dim": POS_INT}, "init"),
        Call(lambda **kw: module(kw.pop("src"), kw.pop("tgt_in"), **kw),
             {"src": src, "tgt_in": ids(s.b, s.n, high=13), "src_mask": mask},
             {**src_specs, "tgt_in": T(INT, rank=2, tied=(0,), high=13, names=("src",))}, "forward"),
        Call(lambda **kw: module.greedy_decode(kw.pop("src"), kw.pop("max_len"), **kw),
             {"src": src, "max_len": 2, "src_mask": mask}, {**src_specs, "max_len": NONNEG_INT}, "greedy_decode"),
    ]


@fuzz("history.additive_attention.reversal_batch")
def _(s):
    return [Call(add_mod.reversal_batch, {"batch_size": s.b, "min_len": 1, "max_len": s.n, "rng": random.Random(0)},
                 {"batch_size": POS_INT, "min_len": POS_INT, "max_len": Bad(0, 2.5, "3")})]


def _seq2seq():
    return add_mod.BahdanauSeq2Seq(13, 13, emb_dim=4, hidden_size=4, attn_dim=4)


@fuzz("history.additive_attention.train_toy_translation")
def _(s):
    return [Call(add_mod.train_toy_translation,
                 {"model": _seq2seq(), "steps": 1, "batch_size": 2, "min_len": 1, "max_len": 2},
                 {"steps": NONNEG_INT, "batch_size": POS_INT, "min_len": POS_INT,
                  "max_len": Bad(0, 2.5, "3"), "lr": POS_FLOAT, "seed": Bad(2.5, "0", None)})]


@fuzz("history.additive_attention.accuracy_by_length")
def _(s):
    return [Call(add_mod.accuracy_by_length, {"model": _seq2seq(), "lengths": [1, 2], "n_per_length": 2},
                 {"lengths": Bad([0], [2.5]), "n_per_length": POS_INT})]


@fuzz("history.luong_attention.LuongAttention")
def _(s):
    calls = []
    for score, window in (("general", None), ("dot", 1), ("concat", 2)):
        calls += _module_calls(
            luong_mod.LuongAttention, {"d_model": s.d, "score": score, "window": window},
            {"d_model": POS_INT, "score": Bad("cosine", 3, None), "window": Bad(0, 2.5, True, "1")},
            lambda mod, **kw: mod(kw.pop("query"), kw.pop("keys"), **kw),
            {"query": r(s.b, s.n, s.d), "keys": r(s.b, s.m, s.d), "key_mask": ones(s.b, s.m)},
            {"query": T(rank=3, tied=(0, -1), names=("keys",)),
             "keys": T(rank=3, tied=(0, 1, -1), names=("query", "key_mask")), "key_mask": KEY_MASK},
        )
    return calls


def _bert_config(s, **kw):
    return bert_mod.BertConfig(vocab_size=20, d_model=4 * s.d, n_layers=1, n_heads=2, d_ff=8, max_len=s.n + 2, **kw)


def _bert_block(c):
    return block_mod.TransformerBlock(mha_mod.MultiHeadAttention(c.d_model, c.n_heads), c.d_model, c.d_ff,
                                      norm_first=False)


@fuzz("history.bert.SpecialTokens")
def _(s):
    return [Call(bert_mod.SpecialTokens, {"pad": 0, "cls": 5, "sep": 6, "mask": 7},
                 {"pad": NONNEG_INT, "cls": NONNEG_INT, "sep": NONNEG_INT, "mask": Bad(-1, 2.5, "3", 0)})]


@fuzz("history.bert.BertConfig")
def _(s):
    return [Call(bert_mod.BertConfig, {"vocab_size": 20, "d_model": 8, "n_layers": 1, "n_heads": 2, "d_ff": 8,
                                       "max_len": 10},
                 {"vocab_size": Bad(0, 2, 2.5, "20"), "d_model": POS_INT, "n_heads": Bad(0, 3, 2.5),
                  "n_layers": POS_INT, "d_ff": POS_INT, "max_len": POS_INT, "n_segments": POS_INT, "dropout": PROB,
                  "layer_norm_eps": Bad(0.0, -1.0, "1e-12", None),
                  "special": Bad()})]  # a SpecialTokens checks its own ids; nothing else is passed


BERT_INPUT = {"input_ids": T(INT, rank=2, high=20, tied=(0, 1), names=("segment_ids", "key_mask")),
              "segment_ids": T(INT, rank=2, high=2, tied=(0, 1), names=("input_ids",)),
              "key_mask": T(BOOL, rank=2, tied=(0, 1), names=("input_ids",))}


def _bert_inputs(s):
    return {"input_ids": ids(s.b, s.n, high=20), "segment_ids": ids(s.b, s.n, high=2), "key_mask": ones(s.b, s.n)}


@fuzz("history.bert.BertEmbeddings")
def _(s):
    kw = _bert_inputs(s)
    del kw["key_mask"]
    specs = {k: v for k, v in BERT_INPUT.items() if k != "key_mask"}
    return _module_calls(bert_mod.BertEmbeddings, {"config": _bert_config(s)}, {},
                         lambda mod, **kw: mod(kw.pop("input_ids"), **kw), kw, specs)


@fuzz("history.bert.BertModel")
def _(s):
    return _module_calls(bert_mod.BertModel, {"config": _bert_config(s), "make_block": _bert_block}, {},
                         lambda mod, **kw: mod(kw.pop("input_ids"), **kw), _bert_inputs(s), BERT_INPUT)


@fuzz("history.bert.MlmHead")
def _(s):
    c = _bert_config(s)
    emb = nn.Embedding(c.vocab_size, c.d_model)
    return _module_calls(bert_mod.MlmHead, {"config": c, "token_embedding": emb},
                         {"token_embedding": Bad(nn.Embedding(3, c.d_model))},
                         lambda mod, hidden: mod(hidden), {"hidden": r(s.b, s.n, c.d_model)}, {"hidden": X_ONLY})


@fuzz("history.bert.BertForMaskedLM")
def _(s):
    return _module_calls(bert_mod.BertForMaskedLM, {"bert": bert_mod.BertModel(_bert_config(s), _bert_block)},
                         {}, lambda mod, **kw: mod(kw.pop("input_ids"), **kw),
                         _bert_inputs(s), BERT_INPUT)


@fuzz("history.bert.BertClassifier")
def _(s):
    return _module_calls(bert_mod.BertClassifier,
                         {"bert": bert_mod.BertModel(_bert_config(s), _bert_block), "n_classes": 3},
                         {"n_classes": Bad(1, 2.5, "3")},
                         lambda mod, **kw: mod(kw.pop("input_ids"), **kw), _bert_inputs(s), BERT_INPUT)


@fuzz("history.bert.mask_tokens")
def _(s):
    return [Call(bert_mod.mask_tokens, {"input_ids": ids(s.b, s.n, high=20), "vocab_size": 20, "select_prob": 0.5,
                                        "generator": torch.Generator(device=torch.get_default_device()).manual_seed(0)},
                 {"input_ids": T(INT, rank=2, high=20, device_peer=False), "vocab_size": Bad(0, 4, 2.5, "20", None),
                  "special": Bad(), "select_prob": Bad(0.0, 1.5, "0.1", None),
                  "generator": Bad(0)})]  # torch.rand's own TypeError names generator=int


@fuzz("history.bert.mlm_loss")
def _(s):
    labels = ids(s.b, s.n, high=20)
    labels[0, 0] = bert_mod.IGNORE_INDEX
    return [Call(bert_mod.mlm_loss, {"logits": r(s.b, s.n, 20), "labels": labels},
                 {"logits": T(rank=3, tied=(0, 1), dtype_peer=False, names=("labels",)),
                  "labels": T(INT, rank=2, tied=(0, 1), high=20, names=("logits",))})]


@fuzz("history.bert.state_dict_from_transformers")
def _(s):
    state = {"bert.embeddings.word_embeddings.weight": r(20, 4)}
    return [Call(bert_mod.state_dict_from_transformers, {"hf_state": state},
                 {"hf_state": Bad({"bert.unknown.weight": r(2)})})]


@fuzz("history.bert.counting_corpus")
def _(s):
    return [Call(bert_mod.counting_corpus, {"n_sequences": s.b, "length": s.n, "n_tokens": 8, "steps": (1, 2)},
                 {"n_sequences": POS_INT, "length": POS_INT, "n_tokens": POS_INT, "steps": Bad((), 3, ("1",), (2.5,)),
                  "special": Bad(), "generator": Bad()})]  # no caller passes other objects


@fuzz("history.bert.train_tiny_bert")
def _(s):
    config = bert_mod.BertConfig(vocab_size=8, d_model=8, n_layers=1, n_heads=2, d_ff=8, max_len=4, dropout=0.0)
    return [Call(bert_mod.train_tiny_bert,
                 {"make_block": _bert_block, "config": config, "length": 2, "n_tokens": 4, "steps": 1,
                  "finetune_steps": 1, "batch_size": 2},
                 # the first batch's checks name what they read: input_ids, steps
                 {"length": Bad(0, 2.5, 3, names=("input_ids",)),
                  "n_tokens": Bad(0, 9, names=("input_ids",)),
                  "count_steps": Bad((), 3, (2.5,), names=("steps",)), "steps": NONNEG_INT, "finetune_steps": NONNEG_INT,
                  "batch_size": POS_INT, "lr": POS_FLOAT, "seed": Bad(2.5, "0", None)})]


def _gpt_config(s):
    return gpt_mod.GPTConfig(vocab_size=11, d_model=4 * s.d, n_layers=1, n_heads=2, d_ff=8, max_len=s.n + 2)


def _gpt_block(c):
    return block_mod.TransformerBlock(mha_mod.MultiHeadAttention(c.d_model, c.n_heads), c.d_model, c.d_ff)


@fuzz("history.gpt.GPTConfig")
def _(s):
    return [Call(gpt_mod.GPTConfig, {"vocab_size": 11, "d_model": 8, "n_layers": 1, "n_heads": 2, "d_ff": 8,
                                     "max_len": 10},
                 {"vocab_size": POS_INT, "d_model": POS_INT, "n_heads": Bad(0, 3, 2.5), "n_layers": POS_INT,
                  "d_ff": POS_INT, "max_len": POS_INT, "dropout": PROB,
                  "layer_norm_eps": Bad(0.0, -1.0, "1e-5", None)})]


@fuzz("history.gpt.GPT")
def _(s):
    return _module_calls(gpt_mod.GPT, {"config": _gpt_config(s), "make_block": _gpt_block}, {},
                         lambda mod, input_ids: mod(input_ids), {"input_ids": ids(s.b, s.n, high=11)},
                         {"input_ids": T(INT, rank=2, high=11)})


@fuzz("history.gpt.next_token_loss")
def _(s):
    return [Call(gpt_mod.next_token_loss, {"logits": r(s.b, s.n, 11), "input_ids": ids(s.b, s.n, high=11)},
                 {"logits": T(rank=3, tied=(0, 1), dtype_peer=False, names=("input_ids",)),
                  "input_ids": T(INT, rank=2, tied=(0, 1), high=11, names=("logits",))})]


# ----------------------------------------------------------------------------


test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error = (
    fuzz_tests('history.')
)
