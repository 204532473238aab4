"""GPT: a decoder-only Transformer pre-trained to predict the next token.

Paper: Radford, Narasimhan, Salimans and Sutskever (2018), "Improving Language
Understanding by Generative Pre-Training", OpenAI technical report (no arXiv id).
Section 3.1 gives the objective and the model: a stack of masked (causal)
self-attention blocks, learned position embeddings, and an output layer tied
to the token embedding.
Page: docs/history/gpt.md
Tested against: the next-token loss and the causal property written out in
tests/test_gpt.py, and F.scaled_dot_product_attention(is_causal=True) through
the blocks the tests build.

Nothing here imports a sibling file: ``GPT`` receives a ``make_block`` function
that builds one block, called as ``block(x, is_causal=True)``. The guide's
TransformerBlock around its MultiHeadAttention is the intended block (post-norm
as in GPT-1, or pre-norm as in GPT-2, which then adds a final LayerNorm).

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "GPTConfig", "GPT", "next_token_loss", "generate", "reversal_task", "train_tiny_gpt"
]


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
def _check_gpt_config(c) -> None:
    """Refuse sizes that are not positive ints, or D not divisible by H."""
    names = ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_len")
    _check_positive_sizes(1, **{name: getattr(c, name) for name in names})
    if c.d_model % c.n_heads:
        raise ValueError(f"d_model must divide by n_heads={c.n_heads}, got {c.d_model}")
    _check_number("dropout", c.dropout, 0.0, 1.0)
    _check_number("layer_norm_eps", c.layer_norm_eps, 0.0, low_ok=False)
# --8<-- [end:checks]


# --8<-- [start:config]
@dataclass(frozen=True)
class GPTConfig:
    """Sizes of a GPT model. The defaults are GPT-1 (117M parameters)."""

    vocab_size: int = 40478  # 40,000 byte-pair merges plus base symbols
    d_model: int = 768  # D
    n_layers: int = 12
    n_heads: int = 12  # H
    d_ff: int = 3072  # 4 * D
    max_len: int = 512  # the context window: learned positions end here
    dropout: float = 0.1
    layer_norm_eps: float = 1e-5
    norm_first: bool = False  # GPT-1 is post-norm; True gives GPT-2's layout

    def __post_init__(self) -> None:
        _check_gpt_config(self)
# --8<-- [end:config]


# --8<-- [start:model_face]
class GPT(nn.Module):
    """Token + learned position embeddings, causal blocks, tied output layer.

    Args:
        config: the model sizes.
        make_block: ``make_block(config)`` returns one block, called as
            ``block(x, is_causal=True)``; its norm placement should match
            ``config.norm_first``.

    Forward args:
        input_ids: ``(B, N)`` token ids, ``N <= max_len``.

    Returns:
        Logits ``(B, N, V)``: row ``i`` scores token ``i + 1`` from tokens ``0..i``.

    Shape:
        ``input_ids`` ``(B, N)`` with ``N <= max_len`` -> logits ``(B, N, V)``.
    """

    def _check_forward(self, input_ids) -> None:
        """Refuse ids the vocabulary lacks and sequences longer than max_len."""
        vocab, n_max = self.config.vocab_size, self.config.max_len
        _check_token_ids("input_ids", input_ids, vocab, self.token.weight)
        if (n := input_ids.shape[1]) > n_max:
            raise ValueError(f"input_ids must have N <= max_len={n_max}, got N = {n}")
# --8<-- [end:model_face]

    # --8<-- [start:init]
    def __init__(self, config: GPTConfig, make_block: Callable[[GPTConfig], nn.Module]):
        super().__init__()
        self.config, d = config, config.d_model
        self.token = nn.Embedding(config.vocab_size, d)  # E_tok, (V, D)
        self.position = nn.Embedding(config.max_len, d)  # E_pos: learned, as in GPT-1
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(make_block(config) for _ in range(config.n_layers))
        # Pre-norm leaves the last residual sum unnormalised: GPT-2 adds a LayerNorm.
        eps = config.layer_norm_eps
        self.norm = nn.LayerNorm(d, eps=eps) if config.norm_first else None
        self.lm_head = nn.Linear(d, config.vocab_size, bias=False)
        self.apply(_init_gpt_weights)
        self.lm_head.weight = self.token.weight  # tied: one (V, D) matrix
    # --8<-- [end:init]

    # --8<-- [start:model]
    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Logits (B, N, V): row i scores token i + 1 from tokens 0..i."""
        self._check_forward(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)  # (N,)
        x = self.dropout(self.token(input_ids) + self.position(positions))  # (B, N, D)
        for layer in self.layers:
            x = layer(x, is_causal=True)  # token i sees tokens 0..i only: (B, N, D)
        if self.norm is not None:  # GPT-2's final LayerNorm
            x = self.norm(x)
        return self.lm_head(x)  # (B, N, D) @ (D, V) -> (B, N, V)
    # --8<-- [end:model]


def _init_gpt_weights(module: nn.Module) -> None:
    """GPT-1's initialisation: normal(0, 0.02) weights, zero biases."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)


# --8<-- [start:loss]
def shifted_cross_entropy(logits: torch.Tensor, input_ids: torch.Tensor):
    """L = -mean_i log p(t_{i+1} | t_0..t_i): position i is scored on token i + 1."""
    predictions = logits[:, :-1]  # (B, N - 1, V)
    targets = input_ids[:, 1:]  # (B, N - 1)
    # (B (N - 1), V) against (B (N - 1),)
    return F.cross_entropy(predictions.flatten(0, 1), targets.flatten())
# --8<-- [end:loss]


# --8<-- [start:loss_face]
def next_token_loss(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """The language-modelling objective: -mean log p(token i+1 | tokens 0..i).

    Args:
        logits: ``(B, N, V)`` from ``GPT``, ``N >= 2``.
        input_ids: the ``(B, N)`` ids the logits were computed from.

    Returns:
        The mean cross-entropy over the ``B * (N - 1)`` predictions, a scalar.
    """
    floats = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
    _check_tensor("logits", logits, (None, None, None), logits, floats)
    if logits.shape[1] < 2:
        raise ValueError(f"logits must have N >= 2, got {tuple(logits.shape)}")
    shape = tuple(logits.shape[:2])
    _check_token_ids("input_ids", input_ids, logits.shape[-1], logits, shape)
    return shifted_cross_entropy(logits, input_ids)
# --8<-- [end:loss_face]


# --8<-- [start:generate]
@torch.no_grad()
def decode(model: GPT, ids: torch.Tensor, max_new_tokens: int, temperature=0.0,
           generator=None) -> torch.Tensor:
    """Append max_new_tokens tokens, each chosen from the last position's logits."""
    for _ in range(max_new_tokens):
        context = ids[:, -model.config.max_len :]  # the window positions cover
        logits = model(context)[:, -1]  # only the last position predicts: (B, V)
        if temperature == 0.0:  # greedy
            next_id = logits.argmax(dim=-1, keepdim=True)  # (B, 1)
        else:  # a draw from softmax(logits / tau)
            probs = torch.softmax(logits.float() / temperature, dim=-1)  # (B, V)
            on = getattr(generator, "device", "cpu")  # draw where the generator is
            next_id = torch.multinomial(probs.to(on), 1, generator=generator)  # (B, 1)
        ids = torch.cat([ids, next_id.to(ids.device)], dim=1)  # (B, N) -> (B, N + 1)
    return ids
# --8<-- [end:generate]


# --8<-- [start:generate_face]
def generate(
    model: GPT,
    prompt: torch.Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Extend ``prompt`` one token at a time, feeding each choice back in.

    Every step re-reads the whole context (at most ``max_len`` tokens): simple
    and correct, but quadratic in the length; a KV cache avoids the re-reading.

    Args:
        model: a ``GPT``; it is put in eval mode for the call and restored.
        prompt: ``(B, N0)`` token ids, ``N0 >= 1``.
        max_new_tokens: how many tokens to add.
        temperature: 0 picks the most likely token (greedy); above 0 samples
            from ``softmax(logits / temperature)``.
        generator: a seeded ``torch.Generator`` for reproducible sampling.

    Returns:
        ``(B, N0 + max_new_tokens)``: the prompt followed by the new tokens.
    """
    vocab, weight = model.config.vocab_size, model.token.weight
    _check_token_ids("prompt", prompt, vocab, weight)
    if prompt.shape[1] < 1:
        raise ValueError(f"prompt must hold N0 >= 1 tokens, got {tuple(prompt.shape)}")
    _check_positive_sizes(0, max_new_tokens=max_new_tokens)
    _check_number("temperature", temperature, 0.0)
    was_training = model.training
    model.eval()  # no dropout while generating
    ids = decode(model, prompt, max_new_tokens, temperature, generator)
    model.train(was_training)
    return ids
# --8<-- [end:generate_face]


# ----------------------------------------------------------------------------
# A tiny GPT that learns on the page
# ----------------------------------------------------------------------------


# --8<-- [start:task]
def reversal_task(
    n_sequences: int, length: int, n_digits: int, *, generator=None
) -> torch.Tensor:
    """Sequences ``x_1 ... x_L = x_L ... x_1``: digits, "=", the digits reversed.

    The digits before "=" are random, so nothing predicts them; every digit
    after "=" is fixed by one digit of the prompt, which the model must find
    by position. Token ids: the digits are ``0 .. n_digits - 1``, "=" is
    ``n_digits``.

    Args:
        n_sequences: B.
        length: L, the number of digits to reverse.
        n_digits: how many different digits there are.
        generator: a seeded ``torch.Generator``.

    Returns:
        ``(B, 2 * L + 1)`` token ids.
    """
    _check_positive_sizes(1, n_sequences=n_sequences, length=length, n_digits=n_digits)
    device = generator.device if generator is not None else None  # draw there
    shape = (n_sequences, length)
    # (B, L) random digits
    digits = torch.randint(n_digits, shape, generator=generator, device=device)
    equals = torch.full((n_sequences, 1), n_digits, device=digits.device)  # (B, 1)
    return torch.cat([digits, equals, digits.flip(1)], dim=1)  # (B, 2L + 1)
# --8<-- [end:task]


@dataclass
class TinyGPTResult:
    """What ``train_tiny_gpt`` returns."""

    model: GPT
    accuracy: float  # held-out next-token accuracy on the answer digits
    baseline: float  # always predicting the most frequent digit
    generated_accuracy: float  # greedy generation from the prompt alone, per digit
    losses: list[float]


# --8<-- [start:train]
def train_tiny_gpt(
    make_block: Callable[[GPTConfig], nn.Module],
    *,
    config: GPTConfig | None = None,
    length: int = 6,
    n_digits: int = 10,
    steps: int = 300,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
) -> TinyGPTResult:
    """Train a tiny GPT on ``reversal_task`` with the plain next-token loss.

    Args:
        make_block: builds one block from a ``GPTConfig``.
        config: the model sizes; a 2-layer, D = 64, pre-norm model by default.
        length, n_digits: the task (see ``reversal_task``).
        steps: training steps.
        batch_size: sequences per step.
        lr: the AdamW learning rate.
        seed: seeds the model and the data.

    Returns:
        A ``TinyGPTResult`` with the trained model and held-out metrics.
    """
    _check_positive_sizes(1, length=length, n_digits=n_digits, batch_size=batch_size)
    _check_positive_sizes(0, steps=steps, seed=seed)
    _check_number("lr", lr, 0.0, low_ok=False)
    if config is None:
        # Pre-norm (GPT-2's layout): post-norm at this learning rate and without
        # warm-up stalls near chance for hundreds of steps.
        config = GPTConfig(n_digits + 1, d_model=64, n_layers=2, n_heads=4, d_ff=128,
                           max_len=2 * length + 1, dropout=0.0, norm_first=True)
    # A config too small for the task fails the model's own input_ids check.
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    model = GPT(config, make_block)
    device = next(model.parameters()).device  # drawn on the CPU by g, trained here
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    losses = []
    model.train()
    for _ in range(steps):
        ids = reversal_task(batch_size, length, n_digits, generator=g).to(device)
        loss = next_token_loss(model(ids), ids)  # every position, as in pre-training
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())

    model.eval()
    ids = reversal_task(1024, length, n_digits, generator=g).to(device)
    answer = ids[:, length + 1 :]  # (B, L): the reversed digits
    with torch.no_grad():
        # positions L .. 2L - 1 predict the L answer digits
        predicted = model(ids)[:, length:-1].argmax(-1)  # (B, L)
    accuracy = (predicted == answer).float().mean().item()
    counts = torch.bincount(ids[:, :length].flatten(), minlength=n_digits)
    baseline = (answer == counts.argmax()).float().mean().item()
    # Generation feeds the model its own guesses: one early mistake can spoil the rest.
    completed = generate(model, ids[:256, : length + 1], length)  # (256, 2L + 1)
    right = completed[:, length + 1 :] == answer[:256]  # (256, L)
    generated_accuracy = right.float().mean().item()
    return TinyGPTResult(model, accuracy, baseline, generated_accuracy, losses)
# --8<-- [end:train]
