"""Additive (Bahdanau) attention and the RNN encoder-decoder it was built for.

Paper: Bahdanau, Cho and Bengio (2014), "Neural Machine Translation by Jointly
Learning to Align and Translate", arXiv:1409.0473 (ICLR 2015), section 3 and
appendix A.
Page: docs/history/additive-attention.md (the training loop is run on
docs/examples/bahdanau_translation.py).
Tested against: the paper's equations written out with explicit loops
(tests/test_additive.py); the training comparison in
tests/test_history_training.py.

The paper's equations, in its own letters:

    e_ij     = v_a^T tanh(W_a s_{i-1} + U_a h_j)       alignment score
    alpha_ij = exp(e_ij) / sum_k exp(e_ik)              softmax over source j
    c_i      = sum_j alpha_ij h_j                       context vector
    s_i      = f(s_{i-1}, y_{i-1}, c_i)                 decoder state (a GRU cell here)

with h_j = [forward h_j; backward h_j] the annotations of a bidirectional RNN.
Shape comments use the paper's n (the width of one RNN direction and of the
decoder state), n' (the alignment MLP's width) and e (the embedding width).

Mask convention: ``key_mask`` is a ``(B, M)`` boolean tensor, True = a real
source token that may be attended. A query whose keys are all masked gets zero
weights and a zero context.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

__all__ = [
    "AdditiveAttention",
    "BahdanauEncoder",
    "BahdanauSeq2Seq",
    "PAD",
    "BOS",
    "EOS",
    "reversal_batch",
    "train_toy_translation",
    "accuracy_by_length",
]

PAD, BOS, EOS = 0, 1, 2  # digits d are tokens d + 3


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
# --8<-- [end:tensor_checks]


# --8<-- [start:checks]
def _check_token_ids(name, ids, vocab_size: int, like, shape=(None, None)) -> None:
    """Refuse anything but a (B, N) integer tensor of ids in [0, vocab_size)."""
    _check_tensor(name, ids, shape, like, (torch.int64, torch.int32))
    if (bad := ids[(ids < 0) | (ids >= vocab_size)].unique()).numel():
        raise ValueError(f"{name} must lie in [0, {vocab_size}), got {bad.tolist()}")


def _check_source(src, mask, embedding: nn.Embedding, mask_name: str) -> None:
    """Refuse src unless it holds ids, a mask unless right-padded with no empty row."""
    _check_token_ids("src", src, embedding.num_embeddings, embedding.weight)
    if mask is None:
        return
    _check_tensor(mask_name, mask, tuple(src.shape), src, (torch.bool,))
    prefix = torch.arange(src.shape[1], device=src.device) < mask.sum(-1, keepdim=True)
    if not torch.equal(mask, prefix) or not bool(mask[:, 0].all()):  # True..., False...
        raise ValueError(f"{mask_name} must be right-padded, got {mask.int().tolist()}")

# --8<-- [end:checks]


# --8<-- [start:masked_softmax]
def _masked_softmax(
    scores: torch.Tensor, allowed: torch.Tensor | None
) -> torch.Tensor:
    """Softmax over the last dim where allowed (True = may attend); empty rows -> 0."""
    if allowed is None:
        return torch.softmax(scores, dim=-1)
    # Neutral scores in a row with no allowed key: zeros out, no NaN in the gradient.
    empty = ~allowed.any(dim=-1, keepdim=True)
    scores = scores.masked_fill(~allowed, float("-inf")).masked_fill(empty, 0.0)
    return torch.softmax(scores, dim=-1).masked_fill(~allowed, 0.0)
# --8<-- [end:masked_softmax]


# --8<-- [start:attention_face]
class AdditiveAttention(nn.Module):
    """Bahdanau's alignment model: e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j).

    Args:
        query_dim: width of the decoder state s_{i-1} (the paper's n).
        key_dim: width of an annotation h_j (2n for a bidirectional encoder).
        attn_dim: width of the hidden layer of the alignment MLP (the paper's n').

    Forward args:
        query: decoder states s_{i-1}, ``(B, N, query_dim)``; N = 1 when
            decoding one step at a time.
        keys: annotations h_j, ``(B, M, key_dim)``; they are also the values.
        key_mask: ``(B, M)`` bool, True = real source token; None = all real.
        projected_keys: ``U_a h_j`` from :meth:`project_keys`, to reuse it
            across decoder steps.

    Returns:
        ``(context, weights)``: ``(B, N, key_dim)`` and ``(B, N, M)``.

    Shape:
        query ``(B, N, query_dim)``, keys ``(B, M, key_dim)`` ->
        context ``(B, N, key_dim)``, weights ``(B, N, M)``.
    """

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int) -> None:
        super().__init__()
        _check_positive_sizes(1, query_dim=query_dim, key_dim=key_dim,
                              attn_dim=attn_dim)
        # The paper writes the score without biases; so does this module.
        self.w_a = nn.Linear(query_dim, attn_dim, bias=False)  # W_a
        self.u_a = nn.Linear(key_dim, attn_dim, bias=False)  # U_a
        self.v_a = nn.Linear(attn_dim, 1, bias=False)  # v_a^T

    def _check_forward(self, query, keys, key_mask, projected_keys) -> None:
        """Refuse inputs that do not fit W_a, U_a or each other."""
        w, (attn_dim, key_dim) = self.w_a.weight, self.u_a.weight.shape
        _check_tensor("query", query, (None, None, self.w_a.in_features), w)
        _check_tensor("keys", keys, (query.shape[0], None, key_dim), w)
        b, m, _ = keys.shape
        if key_mask is not None:
            _check_tensor("key_mask", key_mask, (b, m), keys, (torch.bool,))
        if projected_keys is not None:
            _check_tensor("projected_keys", projected_keys, (b, m, attn_dim), w)
# --8<-- [end:attention_face]

    # --8<-- [start:score]
    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """U_a h_j for every j: it does not depend on i, so compute it once."""
        return self.u_a(keys)  # (B, M, 2n) -> (B, M, n')

    def scores(
        self, query: torch.Tensor, keys: torch.Tensor, projected_keys=None
    ) -> torch.Tensor:
        """The unnormalised alignment scores e_ij, (B, N, M)."""
        if projected_keys is None:
            projected_keys = self.project_keys(keys)  # (B, M, n')
        projected_query = self.w_a(query)  # (B, N, n) -> (B, N, n')
        # Every query meets every key: (B, N, 1, n') + (B, 1, M, n') -> (B, N, M, n')
        hidden = torch.tanh(projected_query.unsqueeze(2) + projected_keys.unsqueeze(1))
        return self.v_a(hidden).squeeze(-1)  # (B, N, M, n') -> (B, N, M)
    # --8<-- [end:score]

    # --8<-- [start:forward]
    def forward(self, query, keys, *, key_mask=None, projected_keys=None):
        """alpha_ij = softmax_j(e_ij) and c_i = sum_j alpha_ij h_j: (c, alpha)."""
        self._check_forward(query, keys, key_mask, projected_keys)
        scores = self.scores(query, keys, projected_keys)  # (B, N, M)
        allowed = None if key_mask is None else key_mask.unsqueeze(1)  # (B, 1, M)
        weights = _masked_softmax(scores, allowed)  # over the source positions j
        context = weights @ keys  # (B, N, M) @ (B, M, 2n) -> (B, N, 2n)
        return context, weights
    # --8<-- [end:forward]


# --8<-- [start:encoder_face]
class BahdanauEncoder(nn.Module):
    """Bidirectional GRU whose annotation h_j concatenates both directions at j.

    Args:
        vocab_size: number of source tokens.
        emb_dim: width e of the word embeddings.
        hidden_size: width n of each direction; annotations are 2n wide.
        padding_idx: the padding token id (its embedding stays zero).

    Shape:
        src ``(B, M)`` ids and key_mask ``(B, M)`` (True = real, right-padded;
        None = all real) -> annotations ``(B, M, 2n)``, zero where padded.
    """

    def __init__(
        self, vocab_size: int, emb_dim: int, hidden_size: int, *, padding_idx: int = 0
    ) -> None:
        super().__init__()
        _check_positive_sizes(1, vocab_size=vocab_size, emb_dim=emb_dim,
                              hidden_size=hidden_size)
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=padding_idx)
        self.rnn = nn.GRU(emb_dim, hidden_size, batch_first=True, bidirectional=True)
# --8<-- [end:encoder_face]

    # --8<-- [start:encoder]
    def forward(self, src: torch.Tensor, key_mask=None) -> torch.Tensor:
        """Annotations h_j = [forward h_j; backward h_j], (B, M, 2n)."""
        _check_source(src, key_mask, self.embedding, "key_mask")
        b, m = src.shape
        # pack_padded_sequence takes the lengths on the CPU
        full = torch.full((b,), m, device="cpu")
        lengths = full if key_mask is None else key_mask.sum(-1).cpu()
        emb = self.embedding(src)  # (B, M) -> (B, M, e)
        # Packed: the backward RNN starts at each sentence's last real token.
        packed = pack_padded_sequence(emb, lengths, True, enforce_sorted=False)
        out, _ = self.rnn(packed)
        annotations, _ = pad_packed_sequence(out, batch_first=True, total_length=m)
        return annotations  # (B, M, 2n), zeros at padded positions
    # --8<-- [end:encoder]


# --8<-- [start:model_face]
class BahdanauSeq2Seq(nn.Module):
    """RNN encoder-decoder: RNNsearch or a fixed-context ablation.

    With attention (``use_attention=True``, the paper's RNNsearch), step i reads
    the context c_i = sum_j alpha_ij h_j computed from s_{i-1}. Without it,
    every step reads the same fixed vector c: the two final states of the same
    bidirectional encoder (forward at the last token, backward at the first).
    That is an ablation of RNNsearch, not the paper's RNNencdec (the
    encoder-decoder of Cho et al.), whose encoder is unidirectional.

    Simplification against the paper: the output layer is one linear map of
    [s_i; c_i; E y_{i-1}] instead of the paper's maxout layer over
    (s_{i-1}, E y_{i-1}, c_i); the decoder cell is ``nn.GRUCell``.

    Args:
        src_vocab: number of source tokens.
        tgt_vocab: number of target tokens.
        emb_dim: width of the embeddings (the paper's m).
        hidden_size: width n of the encoder directions and of the decoder state.
        attn_dim: hidden width n' of the alignment MLP.
        use_attention: RNNsearch when True, the fixed-context baseline when False.

    Shape:
        ``forward(src, tgt_in, src_mask=None)``: src ``(B, M)``, tgt_in ``(B, T)``
        (BOS first) -> logits ``(B, T, V)`` and weights ``(B, T, M)`` or None.
        ``greedy_decode(src, max_len, src_mask=None)`` -> tokens
        ``(B, max_len)`` and weights ``(B, max_len, M)`` or None.
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        *,
        emb_dim: int = 32,
        hidden_size: int = 64,
        attn_dim: int = 64,
        use_attention: bool = True,
    ) -> None:
        super().__init__()
        # emb_dim, hidden_size and attn_dim: the encoder and the attention check them
        _check_positive_sizes(1, src_vocab=src_vocab, tgt_vocab=tgt_vocab)
        n = hidden_size
        self.use_attention = use_attention
        self.encoder = BahdanauEncoder(src_vocab, emb_dim, n)
        attention = AdditiveAttention(n, 2 * n, attn_dim) if use_attention else None
        self.attention = attention
        self.init_state = nn.Linear(n, n)  # s_0 = tanh(W_s backward h_1)
        self.tgt_embedding = nn.Embedding(tgt_vocab, emb_dim, padding_idx=PAD)
        self.cell = nn.GRUCell(emb_dim + 2 * n, n)  # s_i = f(s_{i-1}, y_{i-1}, c_i)
        self.readout = nn.Linear(n + 2 * n + emb_dim, tgt_vocab)

    def _start(self, src, src_mask):
        """Check the source, then encode it: annotations, summary, s_0, U_a h_j."""
        _check_source(src, src_mask, self.encoder.embedding, "src_mask")
        if src_mask is None:
            src_mask = torch.ones_like(src, dtype=torch.bool)
        annotations, summary, s = self.encode(src, src_mask)
        att = self.attention
        projected = att.project_keys(annotations) if att is not None else None
        return src_mask, annotations, summary, s, projected

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, *, src_mask=None):
        """Teacher forcing: logits (B, T, V) and weights (B, T, M) or None."""
        src_mask, annotations, summary, s, projected = self._start(src, src_mask)
        vocab, like = self.tgt_embedding.num_embeddings, src
        _check_token_ids("tgt_in", tgt_in, vocab, like, (src.shape[0], None))
        all_logits, all_weights = [], []
        for t in range(tgt_in.shape[1]):
            step = self.step(tgt_in[:, t], s, annotations, summary, src_mask, projected)
            logits, s, weights = step
            all_logits.append(logits)
            all_weights.append(weights)
        logits = torch.stack(all_logits, dim=1)  # T x (B, V) -> (B, T, V)
        no_weights = self.attention is None
        return logits, None if no_weights else torch.stack(all_weights, dim=1)

    @torch.no_grad()
    def greedy_decode(self, src: torch.Tensor, max_len: int, *, src_mask=None):
        """Feed back the argmax: tokens (B, T), weights (B, T, M) or None."""
        src_mask, annotations, summary, s, projected = self._start(src, src_mask)
        _check_positive_sizes(0, max_len=max_len)
        y = torch.full((src.shape[0],), BOS, dtype=torch.long, device=src.device)
        tokens, all_weights = [], []
        for _ in range(max_len):
            step = self.step(y, s, annotations, summary, src_mask, projected)
            logits, s, weights = step
            y = logits.argmax(dim=-1)  # (B, V) -> (B,)
            tokens.append(y)
            all_weights.append(weights)
        no_weights = self.attention is None
        weights = None if no_weights else torch.stack(all_weights, dim=1)
        return torch.stack(tokens, dim=1), weights
# --8<-- [end:model_face]

    # --8<-- [start:encode]
    def encode(self, src: torch.Tensor, src_mask: torch.Tensor):
        """Annotations h (B, M, 2n), the fixed summary c (B, 2n) and s_0 (B, n)."""
        annotations = self.encoder(src, src_mask)  # (B, M, 2n)
        n = annotations.shape[-1] // 2
        last = src_mask.sum(dim=-1) - 1  # each sentence's last real token, (B,)
        rows = torch.arange(src.shape[0], device=src.device)
        forward_last = annotations[rows, last, :n]  # (B, n)
        backward_first = annotations[:, 0, n:]  # (B, n)
        summary = torch.cat([forward_last, backward_first], dim=-1)  # (B, 2n)
        s0 = torch.tanh(self.init_state(backward_first))  # (B, n)
        return annotations, summary, s0
    # --8<-- [end:encode]

    # --8<-- [start:step]
    def step(self, y_prev, s_prev, annotations, summary, src_mask, projected_keys):
        """One decoder step: logits (B, V), s_i (B, n), weights (B, M) or None."""
        emb = self.tgt_embedding(y_prev)  # (B,) -> (B, e)
        if self.attention is not None:  # query s_{i-1}: (B, 1, n)
            context, weights = self.attention(
                s_prev.unsqueeze(1), annotations, key_mask=src_mask,
                projected_keys=projected_keys,
            )  # (B, 1, 2n), (B, 1, M)
            context, weights = context.squeeze(1), weights.squeeze(1)  # (B, 2n), (B, M)
        else:
            context, weights = summary, None  # the same c at every step
        # s_i = f(s_{i-1}, y_{i-1}, c_i): (B, e + 2n) -> (B, n)
        s = self.cell(torch.cat([emb, context], dim=-1), s_prev)
        # g(s_i, y_{i-1}, c_i): (B, 3n + e) -> (B, V)
        logits = self.readout(torch.cat([s, context, emb], dim=-1))
        return logits, s, weights
    # --8<-- [end:step]


# --8<-- [start:train]
def reversal_batch(batch_size: int, min_len: int, max_len: int, rng: random.Random):
    """A toy "translation": a digit string and the same digits reversed.

    Returns ``src (B, M)``, ``src_mask (B, M)`` (True = real), ``tgt_in (B, T)``
    (BOS + target), ``tgt_out (B, T)`` (target + EOS, PAD after), with
    M = the longest source and T = M + 1. Digit d is token d + 3.
    """
    _check_positive_sizes(1, batch_size=batch_size, min_len=min_len)
    _check_positive_sizes(min_len, max_len=max_len)
    lengths = [rng.randint(min_len, max_len) for _ in range(batch_size)]
    m = max(lengths)
    src = torch.full((batch_size, m), PAD, dtype=torch.long)
    tgt_in = torch.full((batch_size, m + 1), PAD, dtype=torch.long)
    tgt_out = torch.full((batch_size, m + 1), PAD, dtype=torch.long)
    for b, length in enumerate(lengths):
        digits = [rng.randrange(10) + 3 for _ in range(length)]
        target = digits[::-1]
        src[b, :length] = torch.tensor(digits)
        tgt_in[b, : length + 1] = torch.tensor([BOS] + target)
        tgt_out[b, : length + 1] = torch.tensor(target + [EOS])
    return src, src != PAD, tgt_in, tgt_out


def train_toy_translation(
    model: nn.Module,
    *,
    steps: int = 400,
    batch_size: int = 64,
    min_len: int = 3,
    max_len: int = 12,
    lr: float = 3e-3,
    seed: int = 0,
) -> list[float]:
    """Train ``model`` on :func:`reversal_batch` data with Adam; return each loss.

    The same ``seed`` gives the same batches to every model, so two models
    trained with the same arguments saw exactly the same data.
    """
    _check_positive_sizes(0, steps=steps, seed=seed)
    if not isinstance(lr, (int, float)) or not 0 < lr < float("inf"):
        raise ValueError(f"lr must be a finite float > 0, got {lr!r}")
    rng = random.Random(seed)
    torch.manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    losses = []
    device = next(model.parameters()).device  # the batches go where the model is
    for _ in range(steps):
        batch = reversal_batch(batch_size, min_len, max_len, rng)
        src, src_mask, tgt_in, tgt_out = (t.to(device) for t in batch)
        logits, _ = model(src, tgt_in, src_mask=src_mask)  # (B, T, V)
        logits, targets = logits.flatten(0, 1), tgt_out.flatten()  # (B*T, V), (B*T,)
        loss = F.cross_entropy(logits, targets, ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses


@torch.no_grad()
def accuracy_by_length(
    model: nn.Module, lengths: Iterable[int], *, n_per_length: int = 100, seed: int = 1
) -> dict[int, float]:
    """Share of sentences of each length reversed exactly (greedy, EOS included)."""
    lengths = list(lengths)
    _check_positive_sizes(1, n_per_length=n_per_length)
    _check_positive_sizes(1, **{f"lengths[{i}]": n for i, n in enumerate(lengths)})
    rng = random.Random(seed)
    model.eval()
    result = {}
    device = next(model.parameters()).device
    for length in lengths:
        batch = reversal_batch(n_per_length, length, length, rng)
        src, src_mask, _, tgt_out = (t.to(device) for t in batch)
        # (B, T): the tokens, EOS included
        tokens, _ = model.greedy_decode(src, tgt_out.shape[1], src_mask=src_mask)
        result[length] = (tokens == tgt_out).all(dim=-1).float().mean().item()
    return result
# --8<-- [end:train]
