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
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "SpecialTokens", "BertConfig", "BertEmbeddings", "BertModel", "MlmHead",
    "BertForMaskedLM", "BertClassifier", "mask_tokens", "mlm_loss",
    "state_dict_from_transformers", "counting_corpus", "train_tiny_bert", "IGNORE_INDEX",
]

IGNORE_INDEX = -100  # label of a position the loss skips (F.cross_entropy's default)


# --8<-- [start:validate]
def _check_ints(minimum: int, **values: object) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def _check_dropout(name: str, p: float) -> None:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise ValueError(f"{name} must be a float in [0, 1), got {p!r}")


def _check_positive_float(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise ValueError(f"{name} must be a finite float > 0, got {value!r}")


def _check_generator(generator: object) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")


def _check_like_module(name: str, t: torch.Tensor, weight: torch.Tensor) -> None:
    """Raise unless t has the device (and, outside autocast, the dtype) of the module's weight."""
    if t.device != weight.device:
        raise ValueError(f"{name} must be on the module's device {weight.device}, got {t.device}")
    autocast = torch.amp.is_autocast_available(t.device.type) and torch.is_autocast_enabled(t.device.type)
    if t.dtype != weight.dtype and not autocast:
        raise TypeError(f"{name} must have the module's dtype {weight.dtype}, got {t.dtype}")


def _check_ids(
    name: str, ids: object, vocab_size: int | None = None, device: torch.device | None = None
) -> tuple[int, int]:
    """Raise unless ``ids`` is a (B, N) integer tensor of ids in [0, vocab_size); return (B, N)."""
    if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.int64, torch.int32):
        got = ids.dtype if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise TypeError(f"{name} must be an int64 or int32 tensor of token ids, got {got}")
    if ids.dim() != 2:
        raise ValueError(f"{name} must have shape (B, N), got {tuple(ids.shape)}")
    if device is not None and ids.device != device:
        raise ValueError(f"{name} must be on the model's device {device}, got {ids.device}")
    if vocab_size is not None and bool(((ids < 0) | (ids >= vocab_size)).any()):  # one sync
        raise ValueError(
            f"{name} must lie in [0, vocab_size={vocab_size}), "
            f"got ids from {int(ids.min())} to {int(ids.max())}"
        )
    return ids.shape[0], ids.shape[1]
# --8<-- [end:validate]


# --8<-- [start:config]
@dataclass(frozen=True)
class SpecialTokens:
    """Ids of BERT's four special tokens (defaults for a small toy vocabulary).

    ``bert-base-uncased`` uses ``SpecialTokens(pad=0, cls=101, sep=102, mask=103)``.
    """

    pad: int = 0  # fills sequences up to the batch length; never attended to
    cls: int = 1  # first token; its final state summarises the sequence
    sep: int = 2  # ends each segment
    mask: int = 3  # stands in for a token the model must predict

    def __post_init__(self) -> None:
        _check_ints(0, pad=self.pad, cls=self.cls, sep=self.sep, mask=self.mask)
        if len(set(self.ids)) != 4:
            raise ValueError(f"pad, cls, sep and mask must be four different ids, got {self}")

    @property
    def ids(self) -> tuple[int, int, int, int]:
        return (self.pad, self.cls, self.sep, self.mask)


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
    layer_norm_eps: float = 1e-12
    special: SpecialTokens = field(default_factory=SpecialTokens)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_len", "n_segments"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.d_model % self.n_heads != 0:
            raise ValueError(
                f"d_model must be divisible by n_heads, got d_model={self.d_model} "
                f"and n_heads={self.n_heads}"
            )
        _check_dropout("dropout", self.dropout)
        _check_positive_float("layer_norm_eps", self.layer_norm_eps)
        if not isinstance(self.special, SpecialTokens):
            raise TypeError(f"special must be a SpecialTokens, got {type(self.special).__name__}")
        if not all(0 <= i < self.vocab_size for i in self.special.ids):
            raise ValueError(
                f"special token ids must lie in [0, vocab_size={self.vocab_size}), "
                f"got {self.special}"
            )

    @classmethod
    def from_transformers(
        cls, config, *, special: SpecialTokens = SpecialTokens(pad=0, cls=101, sep=102, mask=103)
    ) -> "BertConfig":
        """Read the sizes of a ``transformers.BertConfig`` (duck-typed: no import).

        Args:
            config: the ``transformers`` configuration.
            special: the tokenizer's special ids (the default is the one of
                ``bert-base-uncased`` and ``bert-base-cased``).
        """
        if getattr(config, "hidden_act", None) != "gelu":
            raise ValueError(
                f"config.hidden_act must be 'gelu' (exact GELU, as in these blocks), "
                f"got {getattr(config, 'hidden_act', None)!r}"
            )
        return cls(
            vocab_size=config.vocab_size, d_model=config.hidden_size,
            n_layers=config.num_hidden_layers, n_heads=config.num_attention_heads,
            d_ff=config.intermediate_size, max_len=config.max_position_embeddings,
            n_segments=config.type_vocab_size, dropout=config.hidden_dropout_prob,
            layer_norm_eps=config.layer_norm_eps, special=special,
        )
# --8<-- [end:config]


# --8<-- [start:embeddings]
class BertEmbeddings(nn.Module):
    """Token + learned position + segment embeddings, then LayerNorm and dropout.

    Args:
        config: the model sizes.

    Shape:
        ``input_ids`` ``(B, N)`` (and ``segment_ids`` ``(B, N)``) -> ``(B, N, D)``.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        if not isinstance(config, BertConfig):
            raise TypeError(f"config must be a BertConfig, got {type(config).__name__}")
        self.max_len = config.max_len
        self.n_segments = config.n_segments
        # padding_idx keeps the [PAD] vector at zero and out of the gradient.
        self.token = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.special.pad)
        self.position = nn.Embedding(config.max_len, config.d_model)  # learned, not sinusoidal
        self.segment = nn.Embedding(config.n_segments, config.d_model)  # sentence A = 0, B = 1
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, input_ids: torch.Tensor, segment_ids: torch.Tensor | None = None) -> torch.Tensor:
        B, N = _check_ids("input_ids", input_ids, self.token.num_embeddings, self.token.weight.device)
        if N > self.max_len:
            raise ValueError(f"input_ids must have length N <= max_len = {self.max_len}, got N = {N}")
        _check_segments(segment_ids, (B, N), self.n_segments, input_ids.device)
        if segment_ids is None:
            segment_ids = torch.zeros_like(input_ids)  # one segment: all sentence A
        positions = torch.arange(N, device=input_ids.device)  # (N,)
        x = self.token(input_ids) + self.position(positions) + self.segment(segment_ids)  # (B, N, D)
        return self.dropout(self.norm(x))  # (B, N, D)
# --8<-- [end:embeddings]


def _check_bert_key_mask(key_mask: object, b: int, n: int, device: torch.device) -> None:
    if key_mask is None:
        return
    if not isinstance(key_mask, torch.Tensor) or key_mask.dtype != torch.bool:
        got = key_mask.dtype if isinstance(key_mask, torch.Tensor) else type(key_mask).__name__
        raise TypeError(f"key_mask must be a torch.bool tensor (True = real token), got {got}")
    if tuple(key_mask.shape) != (b, n) or key_mask.device != device:
        raise ValueError(
            f"key_mask must have input_ids' shape ({b}, {n}) and device {device}, "
            f"got {tuple(key_mask.shape)} on {key_mask.device}"
        )


def _check_segments(
    segment_ids: object, shape: tuple[int, int], n_segments: int, device: torch.device
) -> None:
    """Raise unless segment_ids is None or a (B, N) integer tensor of values in [0, n_segments)."""
    if segment_ids is None:
        return
    _check_ids("segment_ids", segment_ids, device=device)
    if tuple(segment_ids.shape) != shape or segment_ids.numel() and not (
        0 <= segment_ids.min() and segment_ids.max() < n_segments
    ):
        raise ValueError(
            f"segment_ids must be (B, N) = {shape} with values in [0, {n_segments}), "
            f"got shape {tuple(segment_ids.shape)}"
        )


def _check_special(special: object, vocab_size: int | None = None) -> None:
    if not isinstance(special, SpecialTokens):
        raise TypeError(f"special must be a SpecialTokens, got {type(special).__name__}")
    if vocab_size is not None and max(special.ids) >= vocab_size:
        raise ValueError(
            f"vocab_size must exceed every special token id {special.ids}, got {vocab_size}"
        )


# --8<-- [start:model]
class BertModel(nn.Module):
    """Embeddings, then ``n_layers`` post-norm blocks attending in both directions.

    Args:
        config: the model sizes.
        make_block: ``make_block(config)`` returns one encoder block, post-norm
            with GELU as in BERT, called as ``block(x, key_mask=key_mask)``.

    Shape:
        ``input_ids`` ``(B, N)`` -> hidden states ``(B, N, D)``.
    """

    def __init__(self, config: BertConfig, make_block: Callable[[BertConfig], nn.Module]) -> None:
        super().__init__()
        if not isinstance(config, BertConfig):
            raise TypeError(f"config must be a BertConfig, got {type(config).__name__}")
        if not callable(make_block):
            raise TypeError(f"make_block must be callable, got {type(make_block).__name__}")
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.layers = nn.ModuleList(make_block(config) for _ in range(config.n_layers))
        self.apply(_init_bert_weights)

    def forward(
        self,
        input_ids: torch.Tensor,
        *,
        segment_ids: torch.Tensor | None = None,
        key_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Encode a batch of token ids.

        Args:
            input_ids: ``(B, N)`` token ids.
            segment_ids: ``(B, N)``, 0 for sentence A and 1 for sentence B.
            key_mask: ``(B, N)`` boolean, True = real token. None means every
                token that is not [PAD].

        Returns:
            ``(B, N, D)``.
        """
        B, N = _check_ids("input_ids", input_ids)
        _check_bert_key_mask(key_mask, B, N, input_ids.device)
        if key_mask is None:
            key_mask = input_ids != self.config.special.pad  # (B, N)
        x = self.embeddings(input_ids, segment_ids)  # (B, N) -> (B, N, D)
        for layer in self.layers:
            # No causal mask: every token sees the whole sentence, left and right.
            x = layer(x, key_mask=key_mask)  # (B, N, D)
        return x
# --8<-- [end:model]


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


# --8<-- [start:mlm_head]
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

    def __init__(self, config: BertConfig, token_embedding: nn.Embedding) -> None:
        super().__init__()
        if not isinstance(config, BertConfig):
            raise TypeError(f"config must be a BertConfig, got {type(config).__name__}")
        want = (config.vocab_size, config.d_model)
        if not isinstance(token_embedding, nn.Embedding) or tuple(token_embedding.weight.shape) != want:
            got = (
                tuple(token_embedding.weight.shape)
                if isinstance(token_embedding, nn.Embedding) else type(token_embedding).__name__
            )
            raise TypeError(f"token_embedding must be an nn.Embedding of shape (V, D) = {want}, got {got}")
        self.transform = nn.Linear(config.d_model, config.d_model)
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.d_model, config.vocab_size)
        self.decoder.weight = token_embedding.weight  # tied: the same Parameter, not a copy
        nn.init.normal_(self.transform.weight, std=0.02)
        nn.init.zeros_(self.transform.bias)
        nn.init.zeros_(self.decoder.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        d_model = self.transform.in_features
        if not isinstance(hidden, torch.Tensor) or hidden.dim() != 3 or hidden.shape[-1] != d_model:
            got = tuple(hidden.shape) if isinstance(hidden, torch.Tensor) else type(hidden).__name__
            raise ValueError(f"hidden must have shape (B, N, D) with D = {d_model}, got {got}")
        _check_like_module("hidden", hidden, self.transform.weight)
        h = self.norm(F.gelu(self.transform(hidden)))  # (B, N, D) -> (B, N, D)
        return self.decoder(h)  # (B, N, D) @ (D, V) -> (B, N, V)


class BertForMaskedLM(nn.Module):
    """A BERT encoder with its masked-language-model head.

    Args:
        bert: a ``BertModel``.

    Shape:
        ``input_ids`` ``(B, N)`` -> logits ``(B, N, V)``.
    """

    def __init__(self, bert: BertModel) -> None:
        super().__init__()
        if not isinstance(bert, BertModel):
            raise TypeError(f"bert must be a BertModel, got {type(bert).__name__}")
        self.bert = bert
        self.mlm = MlmHead(bert.config, bert.embeddings.token)

    def forward(self, input_ids, *, segment_ids=None, key_mask=None) -> torch.Tensor:
        hidden = self.bert(input_ids, segment_ids=segment_ids, key_mask=key_mask)  # (B, N, D)
        return self.mlm(hidden)  # (B, N, V)


def mlm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over the selected positions only (labels != IGNORE_INDEX).

    Args:
        logits: ``(B, N, V)``.
        labels: ``(B, N)``: the original token where a position was selected,
            ``IGNORE_INDEX`` elsewhere.

    Returns:
        The mean loss over the selected positions, a scalar.
    """
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        got = logits.dtype if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise TypeError(f"logits must be a floating tensor (B, N, V), got {got}")
    if not isinstance(labels, torch.Tensor) or labels.dtype not in (torch.int64, torch.int32):
        got = labels.dtype if isinstance(labels, torch.Tensor) else type(labels).__name__
        raise TypeError(f"labels must be an int64 or int32 tensor, got {got}")
    if logits.dim() != 3 or tuple(labels.shape) != tuple(logits.shape[:2]):
        raise ValueError(
            f"logits must be (B, N, V) and labels (B, N), got logits {tuple(logits.shape)} "
            f"and labels {tuple(labels.shape)}"
        )
    if labels.device != logits.device:
        raise ValueError(f"labels must be on logits' device {logits.device}, got {labels.device}")
    known = (labels == IGNORE_INDEX) | ((labels >= 0) & (labels < logits.shape[-1]))
    if not bool(known.all()):
        raise ValueError(
            f"labels must be token ids in [0, V={logits.shape[-1]}) or IGNORE_INDEX={IGNORE_INDEX}, "
            f"got {labels[~known].unique().tolist()}"
        )
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)  # (B*N, V) vs (B*N,)
# --8<-- [end:mlm_head]


# --8<-- [start:masking]
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
    _check_ids("input_ids", input_ids)
    _check_ints(1, vocab_size=vocab_size)
    _check_special(special, vocab_size)
    _check_generator(generator)
    if isinstance(select_prob, bool) or not isinstance(select_prob, (int, float)) or not 0.0 < select_prob <= 1.0:
        raise ValueError(f"select_prob must be a float in (0, 1], got {select_prob!r}")
    regular = torch.ones(vocab_size, dtype=torch.bool, device=input_ids.device)
    regular[list(special.ids)] = False
    candidates = regular.nonzero().squeeze(1)  # ids a random swap may use
    if candidates.numel() == 0:
        raise ValueError(f"vocab_size must leave at least one non-special token, got {vocab_size}")
    if input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= vocab_size):
        raise ValueError(f"input_ids must lie in [0, vocab_size={vocab_size}), got ids outside it")

    draw_on = generator.device if generator is not None else input_ids.device  # where the generator lives

    def uniform() -> torch.Tensor:
        return torch.rand(input_ids.shape, generator=generator, device=draw_on).to(input_ids.device)  # (B, N)

    maskable = regular[input_ids]  # (B, N): False on special tokens
    selected = maskable & (uniform() < select_prob)  # (B, N)
    action = uniform()  # one draw decides between [MASK], random and unchanged
    to_mask = selected & (action < 0.8)
    to_random = selected & (action >= 0.8) & (action < 0.9)  # the remaining 10% stay unchanged
    random_ids = candidates[torch.randint(len(candidates), input_ids.shape, generator=generator, device=draw_on).to(input_ids.device)]

    corrupted = input_ids.masked_fill(to_mask, special.mask)
    corrupted = torch.where(to_random, random_ids, corrupted)
    labels = input_ids.masked_fill(~selected, IGNORE_INDEX)  # the loss sees selected positions only
    return corrupted, labels
# --8<-- [end:masking]


# --8<-- [start:classifier]
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

    def __init__(self, bert: BertModel, n_classes: int) -> None:
        super().__init__()
        if not isinstance(bert, BertModel):
            raise TypeError(f"bert must be a BertModel, got {type(bert).__name__}")
        if isinstance(n_classes, bool) or not isinstance(n_classes, int) or n_classes < 2:
            raise ValueError(f"n_classes must be an int >= 2, got {n_classes!r}")
        d_model = bert.config.d_model
        self.bert = bert
        self.pooler = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(bert.config.dropout)
        self.classifier = nn.Linear(d_model, n_classes)
        for linear in (self.pooler, self.classifier):
            nn.init.normal_(linear.weight, std=0.02)
            nn.init.zeros_(linear.bias)

    def pool(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.pooler(hidden[:, 0]))  # [CLS] is position 0: (B, N, D) -> (B, D)

    def forward(self, input_ids, *, segment_ids=None, key_mask=None) -> torch.Tensor:
        hidden = self.bert(input_ids, segment_ids=segment_ids, key_mask=key_mask)  # (B, N, D)
        return self.classifier(self.dropout(self.pool(hidden)))  # (B, D) -> (B, n_classes)
# --8<-- [end:classifier]


# --8<-- [start:loading]
_RENAMES = [  # (pattern in a transformers checkpoint, name in this file's modules)
    (r"embeddings\.word_embeddings\.", "embeddings.token."),
    (r"embeddings\.position_embeddings\.", "embeddings.position."),
    (r"embeddings\.token_type_embeddings\.", "embeddings.segment."),
    (r"embeddings\.LayerNorm\.", "embeddings.norm."),
    (r"encoder\.layer\.(\d+)\.attention\.output\.dense\.", r"layers.\1.attention.out_proj."),
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
_QKV = re.compile(r"(.*)encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)\.(weight|bias)")


def state_dict_from_transformers(hf_state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
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
    if not isinstance(hf_state, Mapping):
        raise TypeError(f"hf_state must be a mapping of names to tensors, got {type(hf_state).__name__}")
    for key in hf_state:
        if not isinstance(key, str):
            raise TypeError(f"hf_state must have str keys, got {key!r}")
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
                # "bert.pooler" belongs to the classifier: it sits beside bert, not in it.
                out[new.replace("bert.pooler.", "pooler.")] = value
                break
        else:
            raise ValueError(
                f"hf_state has a key this function cannot place: {key!r} (it reads the keys of "
                "transformers' BertModel, BertForMaskedLM and BertForSequenceClassification; got this one)"
            )
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


def _check_steps(name: str, steps: object) -> None:
    if (
        not isinstance(steps, (tuple, list))
        or not steps
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in steps)
    ):
        raise ValueError(f"{name} must be a non-empty tuple of ints, got {steps!r}")


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
    _check_ints(1, n_sequences=n_sequences, length=length, n_tokens=n_tokens)
    _check_steps("steps", steps)
    _check_special(special)
    _check_generator(generator)
    first = max(special.ids) + 1
    device = generator.device if generator is not None else None  # draw where the generator lives
    labels = torch.randint(len(steps), (n_sequences,), generator=generator, device=device)  # (B,)
    step = torch.tensor(steps, device=labels.device)[labels]  # (B,)
    start = torch.randint(n_tokens, (n_sequences, 1), generator=generator, device=device)  # (B, 1)
    body = first + (start + step[:, None] * torch.arange(length, device=labels.device)) % n_tokens  # (B, length)
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
    if not callable(make_block):
        raise TypeError(f"make_block must be callable, got {type(make_block).__name__}")
    if config is not None and not isinstance(config, BertConfig):
        raise TypeError(f"config must be a BertConfig or None, got {type(config).__name__}")
    _check_ints(1, length=length, n_tokens=n_tokens, batch_size=batch_size)
    _check_ints(0, steps=steps, finetune_steps=finetune_steps, seed=seed)
    _check_steps("count_steps", count_steps)
    _check_positive_float("lr", lr)
    if config is not None and (length + 2 > config.max_len or n_tokens > config.vocab_size - 1 - max(config.special.ids)):
        raise ValueError(
            f"length + 2 must fit config.max_len={config.max_len} and n_tokens the ids above the "
            f"special ones (vocab_size={config.vocab_size}), got length={length}, n_tokens={n_tokens}"
        )
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    n_special = len(SpecialTokens().ids)
    if config is None:
        config = BertConfig(vocab_size=n_special + n_tokens, d_model=64, n_layers=2, n_heads=4,
                            d_ff=128, max_len=length + 2, dropout=0.0)
    model = BertForMaskedLM(BertModel(config, make_block))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    vocab = config.vocab_size

    def corpus(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        return counting_corpus(n, length, n_tokens, count_steps, special=config.special, generator=g)

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
    train_ids, _ = corpus(1024)  # the no-context baseline: the most frequent token overall
    most_frequent = torch.bincount(train_ids[:, 1:-1].flatten(), minlength=vocab).argmax()
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
    return TinyBertResult(model, classifier, mlm_accuracy, mlm_baseline, cls_accuracy, cls_baseline, losses)
# --8<-- [end:train]
