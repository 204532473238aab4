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

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["GPTConfig", "GPT", "next_token_loss", "generate", "reversal_task", "train_tiny_gpt"]


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
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_len"):
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
# --8<-- [end:config]


# --8<-- [start:model]
class GPT(nn.Module):
    """Token + learned position embeddings, causal blocks, tied output layer.

    Args:
        config: the model sizes.
        make_block: ``make_block(config)`` returns one block, called as
            ``block(x, is_causal=True)``; its norm placement should match
            ``config.norm_first``.

    Shape:
        ``input_ids`` ``(B, N)`` with ``N <= max_len`` -> logits ``(B, N, V)``.
    """

    def __init__(self, config: GPTConfig, make_block: Callable[[GPTConfig], nn.Module]) -> None:
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise TypeError(f"config must be a GPTConfig, got {type(config).__name__}")
        if not callable(make_block):
            raise TypeError(f"make_block must be callable, got {type(make_block).__name__}")
        self.config = config
        self.token = nn.Embedding(config.vocab_size, config.d_model)
        self.position = nn.Embedding(config.max_len, config.d_model)  # learned, as in GPT-1
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(make_block(config) for _ in range(config.n_layers))
        # Pre-norm leaves the last residual sum unnormalised: GPT-2 adds one LayerNorm.
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.norm_first else None
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.apply(_init_gpt_weights)
        self.lm_head.weight = self.token.weight  # tied: one (V, D) matrix reads and writes tokens

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Score every possible next token at every position.

        Args:
            input_ids: ``(B, N)`` token ids.

        Returns:
            ``(B, N, V)``: row ``i`` scores token ``i + 1`` from tokens ``0..i``.
        """
        B, N = _check_ids("input_ids", input_ids, self.config.vocab_size, self.token.weight.device)
        if N > self.config.max_len:
            raise ValueError(
                f"input_ids must have length N <= max_len = {self.config.max_len}, got N = {N}"
            )
        positions = torch.arange(N, device=input_ids.device)  # (N,)
        x = self.dropout(self.token(input_ids) + self.position(positions))  # (B, N, D)
        for layer in self.layers:
            x = layer(x, is_causal=True)  # token i sees tokens 0..i only: (B, N, D)
        if self.norm is not None:
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
def next_token_loss(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """The language-modelling objective: -mean log p(token i+1 | tokens 0..i).

    Args:
        logits: ``(B, N, V)`` from ``GPT``.
        input_ids: the ``(B, N)`` ids the logits were computed from.

    Returns:
        The mean cross-entropy over the ``B * (N - 1)`` predictions, a scalar.
    """
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        got = logits.dtype if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise TypeError(f"logits must be a floating tensor (B, N, V), got {got}")
    _check_ids("input_ids", input_ids)
    if logits.dim() != 3 or tuple(input_ids.shape) != tuple(logits.shape[:2]) or logits.shape[1] < 2:
        raise ValueError(
            f"logits must be (B, N, V) and input_ids (B, N) with N >= 2, got logits "
            f"{tuple(logits.shape)} and input_ids {tuple(input_ids.shape)}"
        )
    _check_ids("input_ids", input_ids, logits.shape[-1], logits.device)
    predictions = logits[:, :-1]  # position i predicts token i + 1: (B, N - 1, V)
    targets = input_ids[:, 1:]  # (B, N - 1)
    return F.cross_entropy(predictions.flatten(0, 1), targets.flatten())  # (B*(N-1), V) vs (B*(N-1),)
# --8<-- [end:loss]


# --8<-- [start:generate]
@torch.no_grad()
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
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a GPT, got {type(model).__name__}")
    if not isinstance(prompt, torch.Tensor) or prompt.dim() != 2 or prompt.shape[1] < 1:
        got = tuple(prompt.shape) if isinstance(prompt, torch.Tensor) else type(prompt).__name__
        raise ValueError(f"prompt must be a (B, N0) tensor of ids with N0 >= 1, got {got}")
    _check_ids("prompt", prompt, model.config.vocab_size, model.token.weight.device)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be a non-negative int, got {max_new_tokens!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0.0:
        raise ValueError(f"temperature must be a float >= 0, got {temperature!r}")
    _check_generator(generator)
    was_training = model.training
    model.eval()  # no dropout while generating
    ids = prompt
    for _ in range(max_new_tokens):
        context = ids[:, -model.config.max_len:]  # the window the positions cover: (B, <= max_len)
        logits = model(context)[:, -1]  # only the last position predicts the new token: (B, V)
        if temperature == 0.0:
            next_id = logits.argmax(dim=-1, keepdim=True)  # (B, 1)
        else:
            probs = torch.softmax(logits.float() / temperature, dim=-1)  # (B, V)
            next_id = torch.multinomial(probs.cpu(), 1, generator=generator).to(ids.device)  # (B, 1)
        ids = torch.cat([ids, next_id], dim=1)  # (B, N) -> (B, N + 1)
    model.train(was_training)
    return ids
# --8<-- [end:generate]


# ----------------------------------------------------------------------------
# A tiny GPT that learns on the page
# ----------------------------------------------------------------------------


# --8<-- [start:task]
def reversal_task(
    n_sequences: int, length: int, n_digits: int, *, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Sequences ``x_1 ... x_L = x_L ... x_1``: some digits, "=", then the digits reversed.

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
    _check_ints(1, n_sequences=n_sequences, length=length, n_digits=n_digits)
    _check_generator(generator)
    device = generator.device if generator is not None else None  # draw where the generator lives
    digits = torch.randint(n_digits, (n_sequences, length), generator=generator, device=device)  # (B, L)
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
    if not callable(make_block):
        raise TypeError(f"make_block must be callable, got {type(make_block).__name__}")
    if config is not None and not isinstance(config, GPTConfig):
        raise TypeError(f"config must be a GPTConfig or None, got {type(config).__name__}")
    _check_ints(1, length=length, n_digits=n_digits, batch_size=batch_size)
    _check_ints(0, steps=steps, seed=seed)
    _check_positive_float("lr", lr)
    if config is not None and (config.vocab_size <= n_digits or config.max_len < 2 * length + 1):
        raise ValueError(
            f"config must hold n_digits + 1 tokens and 2 * length + 1 positions, got "
            f"vocab_size={config.vocab_size}, max_len={config.max_len} for n_digits={n_digits}, length={length}"
        )
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    if config is None:
        # Pre-norm (GPT-2's layout): post-norm at this learning rate and without
        # warm-up stalls near chance for hundreds of steps.
        config = GPTConfig(vocab_size=n_digits + 1, d_model=64, n_layers=2, n_heads=4,
                           d_ff=128, max_len=2 * length + 1, dropout=0.0, norm_first=True)
    model = GPT(config, make_block)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    losses = []
    model.train()
    for _ in range(steps):
        ids = reversal_task(batch_size, length, n_digits, generator=g)
        loss = next_token_loss(model(ids), ids)  # every position, as in pre-training
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())

    model.eval()
    ids = reversal_task(1024, length, n_digits, generator=g)
    answer = ids[:, length + 1:]  # (B, L): the reversed digits
    with torch.no_grad():
        # positions L .. 2L - 1 predict the L answer digits
        predicted = model(ids)[:, length:-1].argmax(-1)  # (B, L)
    accuracy = (predicted == answer).float().mean().item()
    most_frequent = torch.bincount(ids[:, :length].flatten(), minlength=n_digits).argmax()
    baseline = (answer == most_frequent).float().mean().item()
    # Generation feeds the model its own guesses: one early mistake can spoil the rest.
    completed = generate(model, ids[:256, : length + 1], length)  # (256, 2L + 1)
    generated_accuracy = (completed[:, length + 1:] == answer[:256]).float().mean().item()
    return TinyGPTResult(model, accuracy, baseline, generated_accuracy, losses)
# --8<-- [end:train]
