"""BERT: a bidirectional Transformer encoder pre-trained by filling in masked tokens.

Paper: Devlin, Chang, Lee and Toutanova (2018), "BERT: Pre-training of Deep
Bidirectional Transformers for Language Understanding", arXiv:1810.04805
(section 3.1 and appendix A.1 for the masking rule).
Page: docs/history/bert.md
Tested against: the ``transformers`` library's BertModel, BertForMaskedLM and
BertForSequenceClassification, randomly initialised from a BertConfig and with
their weights copied in (tests/test_bert_transformers.py); the masking rule and
the loss are tested statistically in tests/test_bert.py.

Nothing here imports a sibling file: ``BertModel`` receives a ``make_block``
function that builds one post-norm encoder block, called as
``block(x, key_mask=key_mask)`` (True = real token). The guide's
TransformerBlock around its MultiHeadAttention is the intended block;
``state_dict_from_transformers`` assumes their parameter names.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "SpecialTokens", "BertConfig", "BertEmbeddings", "BertModel", "MlmHead",
    "BertForMaskedLM", "BertClassifier", "mask_tokens", "mlm_loss",
    "state_dict_from_transformers", "counting_corpus", "train_tiny_bert",
    "IGNORE_INDEX",
]

IGNORE_INDEX = -100  # label of a position the loss skips (F.cross_entropy's default)


# --8<-- [start:tensor_checks]
def _check_positive_sizes(low: int, **values: object) -> None:
    """Refuse a size or a count that is not an int >= low."""
    if bad := {k: v for k, v in values.items() if not isinstance(v, int) or v < low}:
        raise ValueError(f"{', '.join(bad)} must be an int >= {low}, got {bad}")


def _check_tensor(name, t, shape, like: torch.Tensor, dtypes=None) -> None:
    """Refuse t unless it has this shape (None = any size), dtype and like's device."""
    got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
    fill = tuple(n if s is None else s for s, n in zip(shape, got))  # None takes got's
    if got != fill or len(got) != len(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {got}")
    amp = dtypes is None and torch.is_autocast_enabled(like.device.type)  # any dtype
    if t.dtype not in (dtypes or (like.dtype,)) and not amp or t.device != like.device:
        raise TypeError(f"{name} must have dtype {dtypes or like.dtype} on "
                        f"{like.device}, got {t.dtype} on {t.device}")


def _check_number(name: str, value, low: float, high=math.inf, *, low_ok=True) -> None:
    """Refuse a number outside [low, high) (or (low, high) when low_ok is False)."""
    ok = isinstance(value, (int, float)) and (low <= value if low_ok else low < value)
    if not ok or not value < high:
        bracket = "[" if low_ok else "("
        raise ValueError(f"{name} must be in {bracket}{low}, {high}), got {value!r}")


def _check_token_ids(name, ids, vocab_size: int, like, shape=(None, None)) -> None:
    """Refuse anything but a (B, N) integer tensor of ids in [0, vocab_size)."""
    _check_tensor(name, ids, shape, like, (torch.int64, torch.int32))
    if (bad := ids[(ids < 0) | (ids >= vocab_size)].unique()).numel():
        raise ValueError(f"{name} must lie in [0, {vocab_size}), got {bad.tolist()}")
# --8<-- [end:tensor_checks]


# --8<-- [start:checks]
def _check_bert_config(c) -> None:
    """Refuse sizes that are not positive ints, D not divisible by H, bad specials."""
    sizes = {f.name: getattr(c, f.name) for f in fields(c) if f.type == "int"}
    _check_positive_sizes(1, **sizes)
    if c.d_model % c.n_heads:
        raise ValueError(f"d_model must divide by n_heads={c.n_heads}, got {c.d_model}")
    _check_number("dropout", c.dropout, 0.0, 1.0)
    _check_number("layer_norm_eps", c.layer_norm_eps, 0.0, low_ok=False)
    _check_special(c.special, c.vocab_size)


def _check_special(special, vocab_size: int | None = None) -> None:
    _check_positive_sizes(0, **dict(zip(("pad", "cls", "sep", "mask"), special.ids)))
    if len(set(special.ids)) != 4:
        raise ValueError(f"pad, cls, sep and mask must differ, got {special}")
    if vocab_size is not None and max(special.ids) >= vocab_size:
        raise ValueError(f"vocab_size must exceed the special ids, got {vocab_size}")


def _check_steps(name: str, steps) -> None:
    ints = isinstance(steps, (tuple, list)) and all(isinstance(s, int) for s in steps)
    if not ints or not steps:
        raise ValueError(f"{name} must be a non-empty tuple of ints, got {steps!r}")


def _check_bert_inputs(config, input_ids, segment_ids, key_mask, like) -> None:
    """Refuse ids outside the vocabulary, N > max_len, bad segments or key_mask."""
    _check_token_ids("input_ids", input_ids, config.vocab_size, like)
    b, n = input_ids.shape
    if n > config.max_len:
        raise ValueError(f"input_ids must have N <= max_len={config.max_len}, got {n}")
    if segment_ids is not None:
        _check_token_ids("segment_ids", segment_ids, config.n_segments, like, (b, n))
    if key_mask is not None:
        _check_tensor("key_mask", key_mask, (b, n), input_ids, (torch.bool,))
# --8<-- [end:checks]


# --8<-- [start:special]
@dataclass(frozen=True)
class SpecialTokens:
    """Ids of BERT's four special tokens (defaults for a small toy vocabulary)."""

    # bert-base-uncased: SpecialTokens(pad=0, cls=101, sep=102, mask=103)
    pad: int = 0  # fills sequences up to the batch length; never attended to
    cls: int = 1  # first token; its final state summarises the sequence
    sep: int = 2  # ends each segment
    mask: int = 3  # stands in for a token the model must predict

    def __post_init__(self) -> None:
        _check_special(self)

    @property
    def ids(self) -> tuple[int, int, int, int]:
        return (self.pad, self.cls, self.sep, self.mask)
# --8<-- [end:special]


# --8<-- [start:config]
@dataclass(frozen=True)
class BertConfig:
    """Sizes of a BERT model. The defaults are BERT-base (110M parameters)."""

    vocab_size: int = 30522
    d_model: int = 768  # D
    n_layers: int = 12
    n_heads: int = 12  # H
    d_ff: int = 3072  # 4 * D
    max_len: int = 512  # learned positions exist only up to here
    n_segments: int = 2  # sentence A and sentence B
    dropout: float = 0.1
    layer_norm_eps: float = 1e-12  # not PyTorch's 1e-5
    special: SpecialTokens = field(default_factory=SpecialTokens)

    def __post_init__(self) -> None:
        _check_bert_config(self)
# --8<-- [end:config]

    # --8<-- [start:config_face]
    @classmethod
    def from_transformers(
        cls, config, *, special: SpecialTokens = SpecialTokens(0, 101, 102, 103)
    ) -> "BertConfig":
        """Read the sizes of a ``transformers.BertConfig`` (duck-typed: no import).

        Args:
            config: the ``transformers`` configuration.
            special: the tokenizer's special ids (the default is the one of
                ``bert-base-uncased`` and ``bert-base-cased``).

        Returns:
            A ``BertConfig`` with the same sizes.
        """
        act = getattr(config, "hidden_act", None)
        if act != "gelu":
            raise ValueError(f"config.hidden_act must be 'gelu' (exact), got {act!r}")
        return cls(
            vocab_size=config.vocab_size, d_model=config.hidden_size,
            n_layers=config.num_hidden_layers, n_heads=config.num_attention_heads,
            d_ff=config.intermediate_size, max_len=config.max_position_embeddings,
            n_segments=config.type_vocab_size, dropout=config.hidden_dropout_prob,
            layer_norm_eps=config.layer_norm_eps, special=special,
        )
    # --8<-- [end:config_face]


# --8<-- [start:embeddings_face]
class BertEmbeddings(nn.Module):
    """Token + learned position + segment embeddings, then LayerNorm and dropout.

    Args:
        config: the model sizes.

    Shape:
        ``input_ids`` ``(B, N)`` (and ``segment_ids`` ``(B, N)``, 0 for
        sentence A and 1 for sentence B; None = all A) -> ``(B, N, D)``.
    """
# --8<-- [end:embeddings_face]

    # --8<-- [start:embeddings]
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        d, self.config = config.d_model, config
        # padding_idx keeps the [PAD] vector at zero and out of the gradient.
        self.token = nn.Embedding(config.vocab_size, d, padding_idx=config.special.pad)
        self.position = nn.Embedding(config.max_len, d)  # learned, not sinusoidal
        self.segment = nn.Embedding(config.n_segments, d)  # sentence A = 0, B = 1
        self.norm = nn.LayerNorm(d, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, input_ids, segment_ids=None) -> torch.Tensor:
        """x_i = Dropout(LN(E_tok[t_i] + E_pos[i] + E_seg[s_i])), (B, N, D)."""
        w = self.token.weight
        _check_bert_inputs(self.config, input_ids, segment_ids, None, w)
        if segment_ids is None:
            segment_ids = torch.zeros_like(input_ids)  # one segment: all sentence A
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)  # (N,)
        x = self.token(input_ids) + self.position(positions) + self.segment(segment_ids)
        return self.dropout(self.norm(x))  # (B, N, D)
    # --8<-- [end:embeddings]


# --8<-- [start:model_face]
class BertModel(nn.Module):
    """Embeddings, then ``n_layers`` post-norm blocks attending in both directions.

    Args:
        config: the model sizes.
        make_block: ``make_block(config)`` returns one encoder block, post-norm
            with GELU as in BERT, called as ``block(x, key_mask=key_mask)``.

    Forward args:
        input_ids: ``(B, N)`` token ids.
        segment_ids: ``(B, N)``, 0 for sentence A and 1 for sentence B.
        key_mask: ``(B, N)`` boolean, True = real token. None means every
            token that is not [PAD].

    Returns:
        Hidden states ``(B, N, D)``.

    Shape:
        ``input_ids`` ``(B, N)`` -> hidden states ``(B, N, D)``.
    """
# --8<-- [end:model_face]

    # --8<-- [start:model]
    def __init__(self, config: BertConfig, make_block: Callable) -> None:
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.layers = nn.ModuleList(make_block(config) for _ in range(config.n_layers))
        self.apply(_init_bert_weights)

    def forward(self, input_ids, *, segment_ids=None, key_mask=None) -> torch.Tensor:
        """H = L post-norm blocks over the embeddings, padding the only mask."""
        w = self.embeddings.token.weight
        _check_bert_inputs(self.config, input_ids, segment_ids, key_mask, w)
        if key_mask is None:
            key_mask = input_ids != self.config.special.pad  # (B, N)
        x = self.embeddings(input_ids, segment_ids)  # (B, N) -> (B, N, D)
        for layer in self.layers:
            # No causal mask: every token sees the whole sentence, left and right.
            x = layer(x, key_mask=key_mask)  # (B, N, D)
        return x
    # --8<-- [end:model]


# --8<-- [start:init_weights]
def _init_bert_weights(module: nn.Module) -> None:
    """BERT's initialisation: normal(0, 0.02) weights, zero biases, unit norms."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, nn.Embedding) and module.padding_idx is not None:
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)
# --8<-- [end:init_weights]


# --8<-- [start:mlm_face]
class MlmHead(nn.Module):
    """Dense + GELU + LayerNorm, then scores against every token embedding.

    The decoder's weight IS the token embedding matrix (tied), so a token's
    input vector and its output vector are one parameter; only a bias per
    token is new.

    Args:
        config: the model sizes.
        token_embedding: the model's ``nn.Embedding`` of shape ``(V, D)``.

    Shape:
        ``(B, N, D)`` -> logits ``(B, N, V)``.
    """

    def _check_tied(self, config, emb) -> None:
        want = (config.vocab_size, config.d_model)
        _check_tensor("token_embedding.weight", emb.weight, want, emb.weight)
# --8<-- [end:mlm_face]

    # --8<-- [start:mlm_head]
    def __init__(self, config: BertConfig, token_embedding: nn.Embedding) -> None:
        super().__init__()
        self._check_tied(config, token_embedding)
        d = config.d_model
        self.transform = nn.Linear(d, d)  # W_t, b_t
        self.norm = nn.LayerNorm(d, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(d, config.vocab_size)  # b_V is its bias
        self.decoder.weight = token_embedding.weight  # tied: the same Parameter
        nn.init.normal_(self.transform.weight, std=0.02)
        nn.init.zeros_(self.transform.bias)
        nn.init.zeros_(self.decoder.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """logits_i = LN(GELU(h_i W_t + b_t)) E_tok^T + b_V, (B, N, V)."""
        w = self.transform.weight
        _check_tensor("hidden", hidden, (None, None, w.shape[1]), w)
        h = self.norm(F.gelu(self.transform(hidden)))  # (B, N, D) -> (B, N, D)
        return self.decoder(h)  # (B, N, D) @ (D, V) -> (B, N, V)
    # --8<-- [end:mlm_head]


# --8<-- [start:mlm_model]
class BertForMaskedLM(nn.Module):
    """A BERT encoder with its masked-language-model head: ids (B, N) -> (B, N, V)."""

    def __init__(self, bert: BertModel) -> None:
        super().__init__()
        self.bert = bert
        self.mlm = MlmHead(bert.config, bert.embeddings.token)

    def forward(self, input_ids, *, segment_ids=None, key_mask=None) -> torch.Tensor:
        hidden = self.bert(input_ids, segment_ids=segment_ids, key_mask=key_mask)
        return self.mlm(hidden)  # (B, N, D) -> (B, N, V)
# --8<-- [end:mlm_model]


# --8<-- [start:loss]
def masked_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """L_MLM: the mean of -log softmax(logits_i)[t_i] over the selected positions."""
    # (B N, V) against (B N,); IGNORE_INDEX marks the positions that do not count
    logits, labels = logits.flatten(0, 1), labels.flatten()
    return F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX)
# --8<-- [end:loss]


# --8<-- [start:loss_face]
def mlm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over the selected positions only (labels != IGNORE_INDEX).

    Args:
        logits: ``(B, N, V)``.
        labels: ``(B, N)``: the original token where a position was selected,
            ``IGNORE_INDEX`` elsewhere.

    Returns:
        The mean loss over the selected positions, a scalar.
    """
    floats = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
    _check_tensor("logits", logits, (None, None, None), logits, floats)
    shape, dtypes = tuple(logits.shape[:2]), (torch.int64, torch.int32)
    _check_tensor("labels", labels, shape, logits, dtypes)
    known = (labels == IGNORE_INDEX) | ((labels >= 0) & (labels < logits.shape[-1]))
    if not bool(known.all()):
        bad = labels[~known].unique().tolist()
        raise ValueError(f"labels must be ids in [0, V) or {IGNORE_INDEX}, got {bad}")
    return masked_cross_entropy(logits, labels)
# --8<-- [end:loss_face]


# --8<-- [start:masking]
def corrupt(input_ids, regular, mask_id: int, select_prob: float, generator=None):
    """Select regular tokens with select_prob; 80% -> [MASK], 10% random, 10% kept."""
    on, device = (generator or input_ids).device, input_ids.device  # draw where g is
    shape, candidates = input_ids.shape, regular.nonzero().squeeze(1)  # regular ids

    def uniform() -> torch.Tensor:  # (B, N) draws in [0, 1)
        return torch.rand(shape, generator=generator, device=on).to(device)

    selected = regular[input_ids] & (uniform() < select_prob)  # never a special token
    action = uniform()  # one draw decides between [MASK], random and unchanged
    to_mask = selected & (action < 0.8)
    to_random = selected & (action >= 0.8) & (action < 0.9)  # the last 10% stay
    pick = torch.randint(len(candidates), shape, generator=generator, device=on)
    corrupted = input_ids.masked_fill(to_mask, mask_id)
    corrupted = torch.where(to_random, candidates[pick.to(device)], corrupted)
    labels = input_ids.masked_fill(~selected, IGNORE_INDEX)  # only selected count
    return corrupted, labels
# --8<-- [end:masking]


# --8<-- [start:masking_face]
def mask_tokens(
    input_ids: torch.Tensor,
    vocab_size: int,
    *,
    special: SpecialTokens = SpecialTokens(),
    select_prob: float = 0.15,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's corruption: select 15% of the tokens, then apply the 80/10/10 rule.

    Each non-special token is selected with probability ``select_prob``. A
    selected token becomes [MASK] with probability 0.8, a uniformly random
    non-special token with probability 0.1, and stays as it is with probability
    0.1. Special tokens ([CLS], [SEP], [PAD], [MASK]) are never selected.

    Args:
        input_ids: ``(B, N)`` token ids.
        vocab_size: V, the number of token ids.
        special: the special token ids.
        select_prob: the probability that a token is selected for prediction.
        generator: a seeded ``torch.Generator`` for reproducible corruption.

    Returns:
        ``(corrupted, labels)``, both ``(B, N)``: the model's input, and the
        original token at each selected position (``IGNORE_INDEX`` elsewhere).
    """
    _check_positive_sizes(5, vocab_size=vocab_size)  # four special ids and one regular
    _check_special(special, vocab_size)
    _check_token_ids("input_ids", input_ids, vocab_size, input_ids)
    if not isinstance(select_prob, (int, float)) or not 0.0 < select_prob <= 1.0:
        raise ValueError(f"select_prob must be in (0, 1], got {select_prob!r}")
    regular = torch.ones(vocab_size, dtype=torch.bool, device=input_ids.device)
    regular[list(special.ids)] = False
    return corrupt(input_ids, regular, special.mask, select_prob, generator)
# --8<-- [end:masking_face]


# --8<-- [start:classifier_face]
class BertClassifier(nn.Module):
    """A sentence classifier on the final state of [CLS].

    As in BERT: a "pooler" (dense + tanh on the [CLS] position), dropout, then
    a linear layer to the classes.

    Args:
        bert: a ``BertModel`` (pre-trained or not).
        n_classes: the number of classes.

    Shape:
        ``input_ids`` ``(B, N)`` -> logits ``(B, n_classes)``.
    """
# --8<-- [end:classifier_face]

    # --8<-- [start:classifier]
    def __init__(self, bert: BertModel, n_classes: int) -> None:
        super().__init__()
        _check_positive_sizes(2, n_classes=n_classes)
        d_model = bert.config.d_model
        self.bert = bert
        self.pooler = nn.Linear(d_model, d_model)  # W_p, b_p
        self.dropout = nn.Dropout(bert.config.dropout)
        self.classifier = nn.Linear(d_model, n_classes)  # W_c, b_c
        for linear in (self.pooler, self.classifier):
            nn.init.normal_(linear.weight, std=0.02)
            nn.init.zeros_(linear.bias)

    def pool(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.pooler(hidden[:, 0]))  # [CLS] is position 0: (B, D)

    def forward(self, input_ids, *, segment_ids=None, key_mask=None) -> torch.Tensor:
        hidden = self.bert(input_ids, segment_ids=segment_ids, key_mask=key_mask)
        return self.classifier(self.dropout(self.pool(hidden)))  # (B, n_classes)
    # --8<-- [end:classifier]


# --8<-- [start:renames]
_RENAMES = [  # (pattern in a transformers checkpoint, name in this file's modules)
    (r"embeddings\.word_embeddings\.", "embeddings.token."),
    (r"embeddings\.position_embeddings\.", "embeddings.position."),
    (r"embeddings\.token_type_embeddings\.", "embeddings.segment."),
    (r"embeddings\.LayerNorm\.", "embeddings.norm."),
    (r"encoder\.layer\.(\d+)\.attention\.output\.dense\.",
     r"layers.\1.attention.out_proj."),
    (r"encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.", r"layers.\1.norm1."),
    (r"encoder\.layer\.(\d+)\.intermediate\.dense\.", r"layers.\1.linear1."),
    (r"encoder\.layer\.(\d+)\.output\.dense\.", r"layers.\1.linear2."),
    (r"encoder\.layer\.(\d+)\.output\.LayerNorm\.", r"layers.\1.norm2."),
    (r"pooler\.dense\.", "pooler."),
    (r"cls\.predictions\.transform\.dense\.", "mlm.transform."),
    (r"cls\.predictions\.transform\.LayerNorm\.", "mlm.norm."),
    (r"cls\.predictions\.decoder\.", "mlm.decoder."),
    (r"cls\.predictions\.bias", "mlm.decoder.bias"),
    (r"classifier\.", "classifier."),
]
# --8<-- [end:renames]


# --8<-- [start:loading]
_QKV = re.compile(
    r"(.*)encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)\.(weight|bias)"
)


def state_dict_from_transformers(hf_state: Mapping[str, torch.Tensor]) -> dict:
    """Rename a ``transformers`` BERT state dict to this file's module names.

    Works for the state dicts of ``BertModel`` (without its pooler),
    ``BertForMaskedLM`` and ``BertForSequenceClassification``, for models whose
    blocks are the guide's TransformerBlock around its MultiHeadAttention: the
    separate query, key and value matrices are stacked into one ``in_proj``.

    Args:
        hf_state: ``hf_model.state_dict()``.

    Returns:
        A dict to pass to ``load_state_dict`` of ``BertModel``,
        ``BertForMaskedLM`` or ``BertClassifier``.
    """
    out: dict[str, torch.Tensor] = {}
    qkv: dict[tuple[str, str, str], dict[str, torch.Tensor]] = {}
    for key, value in hf_state.items():
        if key.endswith("position_ids"):  # a buffer of 0..max_len-1, not a weight
            continue
        match = _QKV.fullmatch(key)
        if match:
            prefix, layer, part, kind = match.groups()
            qkv.setdefault((prefix, layer, kind), {})[part] = value
            continue
        for pattern, repl in _RENAMES:
            new, hits = re.subn(pattern, repl, key, count=1)
            if hits:
                # "bert.pooler" belongs to the classifier, beside bert, not in it.
                out[new.replace("bert.pooler.", "pooler.")] = value
                break
        else:
            raise ValueError(f"hf_state must hold transformers' BERT keys, got {key!r}")
    for (prefix, layer, kind), parts in qkv.items():
        # rows [0, D) make q, [D, 2D) make k, [2D, 3D) make v, as in the fused in_proj
        out[f"{prefix}layers.{layer}.attention.in_proj.{kind}"] = torch.cat(
            [parts["query"], parts["key"], parts["value"]], dim=0
        )  # 3 x (D, D) -> (3D, D)
    return out
# --8<-- [end:loading]


# ----------------------------------------------------------------------------
# A tiny BERT that learns on the page
# ----------------------------------------------------------------------------


# --8<-- [start:corpus]
def counting_corpus(
    n_sequences: int,
    length: int,
    n_tokens: int,
    steps: tuple[int, ...],
    *,
    special: SpecialTokens = SpecialTokens(),
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences ``[CLS] t, t+s, t+2s, ... [SEP]``: counting by s, modulo n_tokens.

    A hidden token follows from its neighbours (left + s, or right - s), and s
    from any two visible neighbours: the sequence gives it away, while on its
    own every token is equally likely. The step of each sequence is its class.

    Args:
        n_sequences: B.
        length: the number of tokens between [CLS] and [SEP].
        n_tokens: the sequences count through this many regular tokens, whose
            ids follow the special ones.
        steps: the steps s to choose from.
        special: the special token ids (assumed to be the smallest ids).
        generator: a seeded ``torch.Generator``.

    Returns:
        ``(input_ids, labels)``: ``(B, length + 2)`` ids and ``(B,)`` indices
        into ``steps``.
    """
    _check_positive_sizes(1, n_sequences=n_sequences, length=length, n_tokens=n_tokens)
    _check_steps("steps", steps)  # special was checked when it was made
    first = max(special.ids) + 1
    device = generator.device if generator is not None else None  # draw there
    b = n_sequences
    labels = torch.randint(len(steps), (b,), generator=generator, device=device)  # (B,)
    step = torch.tensor(steps, device=labels.device)[labels]  # (B,)
    # (B, 1): where each sequence starts counting
    start = torch.randint(n_tokens, (b, 1), generator=generator, device=device)
    count = start + step[:, None] * torch.arange(length, device=labels.device)
    body = first + count % n_tokens  # (B, length)
    cls = torch.full((n_sequences, 1), special.cls, device=labels.device)
    sep = torch.full((n_sequences, 1), special.sep, device=labels.device)
    return torch.cat([cls, body, sep], dim=1), labels  # (B, length + 2)
# --8<-- [end:corpus]


@dataclass
class TinyBertResult:
    """What ``train_tiny_bert`` returns."""

    model: BertForMaskedLM
    classifier: BertClassifier
    mlm_accuracy: float  # on held-out selected positions
    mlm_baseline: float  # always predicting the most frequent token
    cls_accuracy: float  # held-out accuracy of the fine-tuned [CLS] head
    cls_baseline: float  # always predicting the most frequent class
    losses: list[float]  # MLM training loss per step


# --8<-- [start:train]
def train_tiny_bert(
    make_block: Callable[[BertConfig], nn.Module],
    *,
    config: BertConfig | None = None,
    length: int = 12,
    n_tokens: int = 16,
    count_steps: tuple[int, ...] = (1, 2, 3),
    steps: int = 300,
    finetune_steps: int = 60,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
) -> TinyBertResult:
    """Pre-train a tiny BERT by masked-token prediction, then fine-tune [CLS].

    Args:
        make_block: builds one encoder block from a ``BertConfig``.
        config: the model sizes; a 2-layer, D = 64 model by default.
        length, n_tokens, count_steps: the corpus (see ``counting_corpus``).
        steps: pre-training steps.
        finetune_steps: steps of training the classifier to name the counting step.
        batch_size: sequences per step.
        lr: the AdamW learning rate.
        seed: seeds the model, the corpus and the masking.

    Returns:
        A ``TinyBertResult`` with the trained models and held-out metrics.
    """
    _check_positive_sizes(1, length=length, n_tokens=n_tokens, batch_size=batch_size)
    _check_positive_sizes(0, steps=steps, finetune_steps=finetune_steps, seed=seed)
    _check_number("lr", lr, 0.0, low_ok=False)
    # count_steps, and a config too small for the corpus, fail the first batch's
    # own checks (counting_corpus, mask_tokens, the model) before any step.
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    n_special = len(SpecialTokens().ids)
    if config is None:
        config = BertConfig(n_special + n_tokens, d_model=64, n_layers=2, n_heads=4,
                            d_ff=128, max_len=length + 2, dropout=0.0)
    model = BertForMaskedLM(BertModel(config, make_block))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    vocab = config.vocab_size
    device = next(model.parameters()).device  # drawn on the CPU by g, trained here

    def corpus(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        special = config.special
        ids, steps = counting_corpus(n, length, n_tokens, count_steps,
                                     special=special, generator=g)
        return ids.to(device), steps.to(device)

    losses = []
    model.train()
    for _ in range(steps):
        ids, _ = corpus(batch_size)
        corrupted, labels = mask_tokens(ids, vocab, special=config.special, generator=g)
        loss = mlm_loss(model(corrupted), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())

    model.eval()
    ids, _ = corpus(1024)
    corrupted, labels = mask_tokens(ids, vocab, special=config.special, generator=g)
    selected = labels != IGNORE_INDEX  # (B, N)
    with torch.no_grad():
        predicted = model(corrupted).argmax(-1)  # (B, N, V) -> (B, N)
    mlm_accuracy = (predicted[selected] == labels[selected]).float().mean().item()
    train_ids, _ = corpus(1024)  # the no-context baseline: the most frequent token
    counts = torch.bincount(train_ids[:, 1:-1].flatten(), minlength=vocab)
    most_frequent = counts.argmax()
    mlm_baseline = (labels[selected] == most_frequent).float().mean().item()

    # Fine-tune: the same encoder, a new [CLS] head, a sentence-level label.
    # A copy, so that ``model`` stays the pre-trained masked-language model.
    classifier = BertClassifier(copy.deepcopy(model.bert), n_classes=len(count_steps))
    optimizer = torch.optim.AdamW(classifier.parameters(), lr=lr / 3, weight_decay=0.01)
    classifier.train()
    for _ in range(finetune_steps):
        ids, step = corpus(batch_size)
        loss = F.cross_entropy(classifier(ids), step)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    classifier.eval()
    ids, step = corpus(1024)
    with torch.no_grad():
        cls_accuracy = (classifier(ids).argmax(-1) == step).float().mean().item()
    cls_baseline = torch.bincount(step).max().item() / len(step)
    return TinyBertResult(model, classifier, mlm_accuracy, mlm_baseline, cls_accuracy,
                          cls_baseline, losses)
# --8<-- [end:train]
