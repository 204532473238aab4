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


# --8<-- [start:check_key_mask]
def _check_key_mask(
    key_mask: torch.Tensor | None, batch: int, n_keys: int, device: torch.device
) -> None:
    """Raise a clear error unless key_mask is None or a (B, M) bool tensor on device."""
    if key_mask is None:
        return
    if not isinstance(key_mask, torch.Tensor):
        raise TypeError(
            f"key_mask must be a torch.Tensor or None, got {type(key_mask).__name__}"
        )
    if key_mask.dtype != torch.bool:
        raise TypeError(
            f"key_mask must be torch.bool (True = real key), got {key_mask.dtype}"
        )
    if tuple(key_mask.shape) != (batch, n_keys):
        raise ValueError(
            f"key_mask must have shape (B, M) = ({batch}, {n_keys}), "
            f"got {tuple(key_mask.shape)}"
        )
    if key_mask.device != device:
        raise ValueError(
            f"key_mask must be on the device of the inputs {device}, got {key_mask.device}"
        )
# --8<-- [end:check_key_mask]


# --8<-- [start:validate]
def _check_like_module(name: str, t: torch.Tensor, weight: torch.Tensor) -> None:
    """Raise unless t has the device (and, outside autocast, the dtype) of the module's weight."""
    if t.device != weight.device:
        raise ValueError(f"{name} must be on the module's device {weight.device}, got {t.device}")
    autocast = torch.amp.is_autocast_available(t.device.type) and torch.is_autocast_enabled(t.device.type)
    if t.dtype != weight.dtype and not autocast:
        raise TypeError(f"{name} must have the module's dtype {weight.dtype}, got {t.dtype}")


def _check_ints(minimum: int, **values: object) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def _check_alignment_inputs(
    query: torch.Tensor,
    keys: torch.Tensor,
    key_mask: torch.Tensor | None,
    projected_keys: torch.Tensor | None,
    w_a: nn.Linear,
    u_a: nn.Linear,
) -> None:
    """Raise a clear error unless query (B, N, query_dim) and keys (B, M, key_dim) fit W_a and U_a."""
    for name, t in (("query", query), ("keys", keys)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3:
            shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a 3-D tensor (B, length, width), got {shape}")
    (b, n, dq), (bk, m, dk) = query.shape, keys.shape
    if bk != b:
        raise ValueError(f"query and keys must share the batch size B, got {b} and {bk}")
    if dq != w_a.in_features:
        raise ValueError(f"query must have width query_dim={w_a.in_features}, got {dq}")
    if dk != u_a.in_features:
        raise ValueError(f"keys must have width key_dim={u_a.in_features}, got {dk}")
    _check_like_module("query", query, w_a.weight)
    _check_like_module("keys", keys, u_a.weight)
    _check_key_mask(key_mask, b, m, keys.device)
    if projected_keys is not None:
        if not isinstance(projected_keys, torch.Tensor):
            raise TypeError(
                f"projected_keys must be a torch.Tensor or None, got {type(projected_keys).__name__}"
            )
        if tuple(projected_keys.shape) != (b, m, u_a.out_features):
            raise ValueError(
                f"projected_keys must have shape (B, M, attn_dim) = ({b}, {m}, {u_a.out_features}), "
                f"got {tuple(projected_keys.shape)}"
            )
        _check_like_module("projected_keys", projected_keys, u_a.weight)


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


def _check_source(
    src: torch.Tensor, mask: torch.Tensor | None, embedding: nn.Embedding, mask_name: str
) -> None:
    """Raise unless src (B, M) holds ids for ``embedding`` and mask is its right-padded (B, M) mask."""
    b, m = _check_ids("src", src, embedding.num_embeddings, embedding.weight.device)
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(f"{mask_name} must be a torch.bool tensor (True = real token), got {got}")
    if tuple(mask.shape) != (b, m) or mask.device != src.device:
        raise ValueError(
            f"{mask_name} must have src's shape (B, M) = ({b}, {m}) and device {src.device}, "
            f"got {tuple(mask.shape)} on {mask.device}"
        )
    lengths = mask.sum(dim=-1)  # (B,)
    if bool((lengths == 0).any()):
        raise ValueError(
            f"{mask_name} must mark at least one real token in every sentence, "
            f"got {lengths.tolist()} real tokens"
        )
    if not torch.equal(mask, torch.arange(m, device=src.device) < lengths.unsqueeze(-1)):
        raise ValueError(
            f"{mask_name} must be right-padded: True for a prefix of each row, then False; "
            f"got {mask.int().tolist()}"
        )


def _check_model(name: str, model: object) -> None:
    if not isinstance(model, nn.Module) or not hasattr(model, "greedy_decode"):
        raise TypeError(
            f"{name} must be a BahdanauSeq2Seq (an nn.Module with greedy_decode), "
            f"got {type(model).__name__}"
        )
# --8<-- [end:validate]


# --8<-- [start:score]
class AdditiveAttention(nn.Module):
    """Bahdanau's alignment model: e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j).

    Args:
        query_dim: width of the decoder state s_{i-1} (the paper's n).
        key_dim: width of an annotation h_j (2n for a bidirectional encoder).
        attn_dim: width of the hidden layer of the alignment MLP (the paper's n').

    Shape:
        query ``(B, N, query_dim)``, keys ``(B, M, key_dim)`` ->
        context ``(B, N, key_dim)``, weights ``(B, N, M)``.
    """

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int) -> None:
        super().__init__()
        for name, value in (("query_dim", query_dim), ("key_dim", key_dim), ("attn_dim", attn_dim)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        # The paper writes the score without biases; so does this module.
        self.w_a = nn.Linear(query_dim, attn_dim, bias=False)  # W_a
        self.u_a = nn.Linear(key_dim, attn_dim, bias=False)  # U_a
        self.v_a = nn.Linear(attn_dim, 1, bias=False)  # v_a^T

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """U_a h_j for every j: it does not depend on i, so compute it once per sentence."""
        return self.u_a(keys)  # (B, M, key_dim) -> (B, M, attn_dim)

    def scores(
        self, query: torch.Tensor, keys: torch.Tensor, projected_keys: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The unnormalised alignment scores e_ij, ``(B, N, M)``."""
        if projected_keys is None:
            projected_keys = self.project_keys(keys)  # (B, M, attn_dim)
        projected_query = self.w_a(query)  # (B, N, query_dim) -> (B, N, attn_dim)
        # Every query meets every key: broadcast (B, N, 1, a) + (B, 1, M, a).
        hidden = torch.tanh(projected_query.unsqueeze(2) + projected_keys.unsqueeze(1))  # (B, N, M, attn_dim)
        return self.v_a(hidden).squeeze(-1)  # (B, N, M, attn_dim) -> (B, N, M)
# --8<-- [end:score]

    # --8<-- [start:forward]
    def forward(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        *,
        key_mask: torch.Tensor | None = None,
        projected_keys: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Weights alpha_ij = softmax_j(e_ij) and contexts c_i = sum_j alpha_ij h_j.

        Args:
            query: decoder states s_{i-1}, ``(B, N, query_dim)``; N = 1 when
                decoding one step at a time.
            keys: annotations h_j, ``(B, M, key_dim)``; they are also the values.
            key_mask: ``(B, M)`` bool, True = real source token; None = all real.
            projected_keys: ``U_a h_j`` from :meth:`project_keys`, to reuse it
                across decoder steps.

        Returns:
            ``(context, weights)``: ``(B, N, key_dim)`` and ``(B, N, M)``.
        """
        _check_alignment_inputs(query, keys, key_mask, projected_keys, self.w_a, self.u_a)

        scores = self.scores(query, keys, projected_keys)  # (B, N, M)
        if key_mask is not None:
            # -inf, not a large negative constant: exp(-inf) is exactly 0 in every dtype.
            scores = scores.masked_fill(~key_mask.unsqueeze(1), float("-inf"))  # (B, 1, M) over (B, N, M)
        # A query with no allowed key has a row of only -inf: softmax would give
        # 0/0 = NaN (and NaN gradients through a float mask). Score it 0 instead,
        # then give it zero weights, so it returns zeros.
        empty_row = torch.isneginf(scores).all(dim=-1, keepdim=True)  # (B, N, 1)
        weights = torch.softmax(scores.masked_fill(empty_row, 0.0), dim=-1)  # normalise over the M source positions j
        weights = weights.masked_fill(empty_row, 0.0)
        context = weights @ keys  # (B, N, M) @ (B, M, key_dim) -> (B, N, key_dim)
        return context, weights
    # --8<-- [end:forward]


# --8<-- [start:encoder]
class BahdanauEncoder(nn.Module):
    """Bidirectional GRU whose annotation h_j concatenates both directions at j.

    Args:
        vocab_size: number of source tokens.
        emb_dim: width of the word embeddings.
        hidden_size: width n of each direction; annotations are 2n wide.
        padding_idx: the padding token id (its embedding stays zero).
    """

    def __init__(self, vocab_size: int, emb_dim: int, hidden_size: int, *, padding_idx: int = 0) -> None:
        super().__init__()
        _check_ints(1, vocab_size=vocab_size, emb_dim=emb_dim, hidden_size=hidden_size)
        if isinstance(padding_idx, bool) or not isinstance(padding_idx, int) or not 0 <= padding_idx < vocab_size:
            raise ValueError(f"padding_idx must be an int in [0, vocab_size={vocab_size}), got {padding_idx!r}")
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=padding_idx)
        self.rnn = nn.GRU(emb_dim, hidden_size, batch_first=True, bidirectional=True)

    def forward(self, src: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        """Annotations ``(B, M, 2n)``; padded positions are zero.

        The sentences are packed so that the backward direction starts at each
        sentence's last real token, not at the padding after it.
        """
        _check_source(src, key_mask, self.embedding, "key_mask")
        if key_mask is None:
            raise TypeError("key_mask must be a (B, M) torch.bool tensor, got None")
        m = src.shape[1]
        lengths = key_mask.sum(dim=-1)  # (B,)
        emb = self.embedding(src)  # (B, M) -> (B, M, emb_dim)
        packed = nn.utils.rnn.pack_padded_sequence(emb, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.rnn(packed)
        annotations, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=m)  # (B, M, 2n)
        return annotations
# --8<-- [end:encoder]


PAD, BOS, EOS = 0, 1, 2  # digits d are tokens d + 3


# --8<-- [start:model]
class BahdanauSeq2Seq(nn.Module):
    """RNN encoder-decoder: RNNsearch (``use_attention=True``) or a fixed-context ablation.

    With attention, step i reads the context c_i = sum_j alpha_ij h_j computed
    from s_{i-1}. Without it (``use_attention=False``), every step reads the same
    fixed vector c: the two final states of the same bidirectional encoder
    (forward at the last token, backward at the first). That is an ablation of
    RNNsearch, not the paper's RNNencdec, whose encoder is unidirectional.

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
        _check_ints(1, src_vocab=src_vocab, tgt_vocab=tgt_vocab, emb_dim=emb_dim,
                    hidden_size=hidden_size, attn_dim=attn_dim)
        n = hidden_size
        self.use_attention = use_attention
        self.encoder = BahdanauEncoder(src_vocab, emb_dim, n)
        self.attention = AdditiveAttention(n, 2 * n, attn_dim) if use_attention else None
        self.init_state = nn.Linear(n, n)  # s_0 = tanh(W_s backward h_1)
        self.tgt_embedding = nn.Embedding(tgt_vocab, emb_dim, padding_idx=PAD)
        self.cell = nn.GRUCell(emb_dim + 2 * n, n)  # s_i = f(s_{i-1}, y_{i-1}, c_i)
        self.readout = nn.Linear(n + 2 * n + emb_dim, tgt_vocab)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None):
        """Annotations ``(B, M, 2n)``, the fixed summary ``(B, 2n)`` and s_0 ``(B, n)``."""
        _check_source(src, src_mask, self.encoder.embedding, "src_mask")
        if src_mask is None:
            src_mask = torch.ones_like(src, dtype=torch.bool)
        annotations = self.encoder(src, src_mask)  # (B, M, 2n)
        n = annotations.shape[-1] // 2
        last = src_mask.sum(dim=-1) - 1  # index of each sentence's last real token, (B,)
        forward_last = annotations[torch.arange(src.shape[0], device=src.device), last, :n]  # (B, n)
        backward_first = annotations[:, 0, n:]  # (B, n)
        summary = torch.cat([forward_last, backward_first], dim=-1)  # (B, 2n)
        s0 = torch.tanh(self.init_state(backward_first))  # (B, n)
        return annotations, summary, s0

    def step(self, y_prev, s_prev, annotations, summary, src_mask, projected_keys):
        """One decoder step: returns logits ``(B, V)``, s_i ``(B, n)``, weights ``(B, M)`` or None."""
        emb = self.tgt_embedding(y_prev)  # (B,) -> (B, emb_dim)
        if self.attention is not None:
            context, weights = self.attention(
                s_prev.unsqueeze(1), annotations, key_mask=src_mask, projected_keys=projected_keys
            )  # (B, 1, 2n), (B, 1, M)
            context, weights = context.squeeze(1), weights.squeeze(1)  # (B, 2n), (B, M)
        else:
            context, weights = summary, None  # the same c at every step
        s = self.cell(torch.cat([emb, context], dim=-1), s_prev)  # (B, emb_dim + 2n) -> (B, n)
        logits = self.readout(torch.cat([s, context, emb], dim=-1))  # (B, 3n + emb_dim) -> (B, V)
        return logits, s, weights

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, *, src_mask: torch.Tensor | None = None):
        """Teacher forcing: ``tgt_in`` (B, T) starts with BOS; returns logits ``(B, T, V)`` and weights ``(B, T, M)`` or None."""
        _check_source(src, src_mask, self.encoder.embedding, "src_mask")
        b, _ = _check_ids("tgt_in", tgt_in, self.tgt_embedding.num_embeddings, src.device)
        if b != src.shape[0]:
            raise ValueError(f"tgt_in must have src's batch size B={src.shape[0]}, got {tuple(tgt_in.shape)}")
        if src_mask is None:
            src_mask = torch.ones_like(src, dtype=torch.bool)
        annotations, summary, s = self.encode(src, src_mask)
        projected_keys = self.attention.project_keys(annotations) if self.attention is not None else None
        all_logits, all_weights = [], []
        for t in range(tgt_in.shape[1]):
            logits, s, weights = self.step(tgt_in[:, t], s, annotations, summary, src_mask, projected_keys)
            all_logits.append(logits)
            all_weights.append(weights)
        logits = torch.stack(all_logits, dim=1)  # T x (B, V) -> (B, T, V)
        weights = torch.stack(all_weights, dim=1) if self.attention is not None else None  # (B, T, M)
        return logits, weights

    @torch.no_grad()
    def greedy_decode(self, src: torch.Tensor, max_len: int, *, src_mask: torch.Tensor | None = None):
        """Feed back the most likely token; returns tokens ``(B, max_len)`` and weights ``(B, max_len, M)`` or None."""
        _check_source(src, src_mask, self.encoder.embedding, "src_mask")
        _check_ints(0, max_len=max_len)
        if src_mask is None:
            src_mask = torch.ones_like(src, dtype=torch.bool)
        annotations, summary, s = self.encode(src, src_mask)
        projected_keys = self.attention.project_keys(annotations) if self.attention is not None else None
        y = torch.full((src.shape[0],), BOS, dtype=torch.long, device=src.device)
        tokens, all_weights = [], []
        for _ in range(max_len):
            logits, s, weights = self.step(y, s, annotations, summary, src_mask, projected_keys)
            y = logits.argmax(dim=-1)  # (B, V) -> (B,)
            tokens.append(y)
            all_weights.append(weights)
        weights = torch.stack(all_weights, dim=1) if self.attention is not None else None
        return torch.stack(tokens, dim=1), weights
# --8<-- [end:model]


# --8<-- [start:train]
def reversal_batch(batch_size: int, min_len: int, max_len: int, rng: random.Random):
    """A toy "translation": a digit string and the same digits reversed.

    Returns ``src (B, M)``, ``src_mask (B, M)`` (True = real), ``tgt_in (B, T)``
    (BOS + target), ``tgt_out (B, T)`` (target + EOS, PAD after), with
    M = the longest source and T = M + 1. Digit d is token d + 3.
    """
    _check_ints(1, batch_size=batch_size, min_len=min_len, max_len=max_len)
    if not (1 <= min_len <= max_len):
        raise ValueError(f"need 1 <= min_len <= max_len, got min_len={min_len!r}, max_len={max_len!r}")
    if not isinstance(rng, random.Random):
        raise TypeError(f"rng must be a random.Random, got {type(rng).__name__}")
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
    """Train ``model`` on :func:`reversal_batch` data with Adam; return the loss per step.

    The same ``seed`` gives the same batches to every model, so two models
    trained with the same arguments saw exactly the same data.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    _check_ints(0, steps=steps, seed=seed)
    _check_ints(1, batch_size=batch_size, min_len=min_len, max_len=max_len)
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < float("inf"):
        raise ValueError(f"lr must be a finite float > 0, got {lr!r}")
    rng = random.Random(seed)
    torch.manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    losses = []
    for _ in range(steps):
        src, src_mask, tgt_in, tgt_out = reversal_batch(batch_size, min_len, max_len, rng)
        logits, _ = model(src, tgt_in, src_mask=src_mask)  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses


@torch.no_grad()
def accuracy_by_length(model: nn.Module, lengths, *, n_per_length: int = 100, seed: int = 1) -> dict[int, float]:
    """Share of sentences of each length reversed exactly (greedy decoding, EOS included)."""
    _check_model("model", model)
    if isinstance(lengths, (str, bytes)) or not isinstance(lengths, Iterable):
        raise TypeError(f"lengths must be an iterable of ints >= 1, got {type(lengths).__name__}")
    lengths = list(lengths)
    _check_ints(1, n_per_length=n_per_length, **{f"lengths[{i}]": n for i, n in enumerate(lengths)})
    _check_ints(0, seed=seed)
    rng = random.Random(seed)
    model.eval()
    result = {}
    for length in lengths:
        src, src_mask, _, tgt_out = reversal_batch(n_per_length, length, length, rng)
        tokens, _ = model.greedy_decode(src, tgt_out.shape[1], src_mask=src_mask)  # (B, T)
        result[length] = (tokens == tgt_out).all(dim=-1).float().mean().item()
    return result
# --8<-- [end:train]
