"""Tests for snippets/history/gpt.py.

Oracles written out here: the forward pass (embeddings, causal blocks, optional
final norm, logits against the tied token matrix), the shifted next-token
cross-entropy, greedy decoding as an argmax loop. The causal blocks themselves
run on F.scaled_dot_product_attention through the guide's MultiHeadAttention.
Properties: logits never depend on later tokens, sampling is reproducible with
a generator, generation past the context window keeps the last max_len tokens.
Every validation message is hit.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from huge_scores import WrittenOut, keys_against_queries
from snippets.architecture.transformer_block import TransformerBlock
from snippets.attention.multi_head import MultiHeadAttention
from snippets.history.gpt import GPT, GPTConfig, generate, next_token_loss, reversal_task

SNIPPET = Path(__file__).resolve().parents[1] / "snippets" / "history" / "gpt.py"


def make_block(c: GPTConfig) -> TransformerBlock:
    attention = MultiHeadAttention(c.d_model, c.n_heads, dropout=c.dropout)
    return TransformerBlock(attention, c.d_model, c.d_ff, dropout=c.dropout, activation="gelu",
                            norm_first=c.norm_first, layer_norm_eps=c.layer_norm_eps)


def config(norm_first=False, **kw):
    base = dict(vocab_size=13, d_model=16, n_layers=2, n_heads=4, d_ff=32, max_len=10, dropout=0.0,
                norm_first=norm_first)
    base.update(kw)
    return GPTConfig(**base)


def model(norm_first=False, seed=0, **kw) -> GPT:
    torch.manual_seed(seed)
    m = GPT(config(norm_first, **kw), make_block)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.normal_(mean=1.0 if name.endswith("weight") else 0.0, std=0.2)
    return m.eval()


def ids(seed=0, n=7):
    return torch.randint(13, (3, n), generator=torch.Generator(device=torch.get_default_device()).manual_seed(seed))


@pytest.mark.parametrize("norm_first", [False, True])
def test_forward_written_out(norm_first):
    m = model(norm_first)
    x_ids = ids()
    x = m.token.weight[x_ids] + m.position.weight[: x_ids.shape[1]]
    for layer in m.layers:
        x = layer(x, is_causal=True)
    if norm_first:
        x = F.layer_norm(x, (16,), m.norm.weight, m.norm.bias)
    assert (m.norm is not None) == norm_first  # GPT-2's final LayerNorm only with pre-norm
    assert m.lm_head.weight is m.token.weight
    assert_close(m(x_ids), x @ m.token.weight.T)


@pytest.mark.parametrize("norm_first", [False, True])
def test_logits_never_depend_on_later_tokens(norm_first):
    m = model(norm_first)
    a = ids(0)
    b = a.clone()
    b[:, 4:] = (b[:, 4:] + 1) % 13
    la, lb = m(a), m(b)
    assert_close(la[:, :4], lb[:, :4])
    assert not torch.allclose(la[:, 4:], lb[:, 4:])


@pytest.mark.parametrize("written_out", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
def test_later_tokens_stay_out_at_huge_scores(norm_first, written_out):
    # In every layer W_k = -W_q with W_q scaled by 1e7: a token scores about
    # -1e10 or less against itself (float32), so token 0, which may see only
    # itself, has nothing but that one hugely negative score. Later tokens
    # outscore it by far; with -inf masking the logits of tokens 0..2 still do
    # not move when tokens 3.. change, while a fill of -1e4 (or -1e9) lets them in.
    m = model(norm_first)
    for layer in m.layers:
        if written_out:
            layer.attention = WrittenOut(layer.attention)
        mha = layer.attention.mha if written_out else layer.attention
        keys_against_queries(mha.in_proj.weight, mha.in_proj.bias, 1e7)
    a = ids(0)
    b = a.clone()
    b[:, 3:] = (b[:, 3:] + 5) % 13
    la, lb = m(a), m(b)
    assert torch.isfinite(la).all() and torch.isfinite(lb).all()
    assert_close(lb[:, :3], la[:, :3], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(lb[:, 3:], la[:, 3:])


def test_next_token_loss_is_the_shifted_cross_entropy():
    g = torch.Generator(device=torch.get_default_device()).manual_seed(0)
    logits = torch.randn(2, 5, 13, generator=g)
    x = torch.randint(13, (2, 5), generator=g)
    by_hand = torch.stack([
        -torch.log_softmax(logits[b, i], -1)[x[b, i + 1]] for b in range(2) for i in range(4)
    ]).mean()
    assert_close(next_token_loss(logits, x), by_hand)
    other = logits.clone()
    other[:, -1] = 50 * torch.randn(2, 13, generator=g)  # the last position predicts nothing
    assert_close(next_token_loss(other, x), by_hand)


def test_greedy_generation_is_an_argmax_loop():
    m = model()
    prompt = ids(1, n=3)
    out = generate(m, prompt, 4)
    x = prompt
    for _ in range(4):
        x = torch.cat([x, m(x)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, x)
    assert torch.equal(out[:, :3], prompt)


def test_sampling_is_reproducible_and_cold_sampling_is_greedy():
    m = model()
    prompt = ids(2, n=3)
    a = generate(m, prompt, 5, temperature=1.0, generator=torch.Generator(device=torch.get_default_device()).manual_seed(0))
    b = generate(m, prompt, 5, temperature=1.0, generator=torch.Generator(device=torch.get_default_device()).manual_seed(0))
    assert torch.equal(a, b)
    cold = generate(m, prompt, 5, temperature=1e-4, generator=torch.Generator(device=torch.get_default_device()).manual_seed(1))
    assert torch.equal(cold, generate(m, prompt, 5))
    hot = [generate(m, prompt, 5, temperature=5.0, generator=torch.Generator(device=torch.get_default_device()).manual_seed(s)) for s in range(4)]
    assert any(not torch.equal(h, hot[0]) for h in hot[1:])


def test_cold_sampling_from_float16_logits_is_greedy():
    # Float16 logits near 30 divided by a temperature of 1e-4 are ~3e5, far past
    # float16's 65504: dividing before leaving float16 gives inf, softmax NaN and
    # multinomial an error. Sampling must stay finite and pick the argmax.
    m = model().half()
    with torch.no_grad():
        m.token.weight.mul_(100)  # logits of tens, not hundredths
    prompt = ids(2, n=3)
    logits = m(prompt)[:, -1]
    assert logits.dtype == torch.float16 and logits.abs().max() / 1e-4 > 65504
    cold = generate(m, prompt, 5, temperature=1e-4, generator=torch.Generator(device=torch.get_default_device()).manual_seed(1))
    assert torch.equal(cold, generate(m, prompt, 5))
    assert torch.equal(cold[:, 3], logits.argmax(-1))


def test_generation_past_the_window_reads_the_last_max_len_tokens():
    m = model()
    prompt = ids(3, n=8)
    out = generate(m, prompt, 6)  # 14 tokens > max_len = 10
    assert out.shape == (3, 14)
    seen = []
    m.register_forward_pre_hook(lambda module, args: seen.append(args[0].clone()))
    out = generate(m, prompt, 6, temperature=1.0, generator=torch.Generator(device=torch.get_default_device()).manual_seed(0))
    for step, t in enumerate(range(8, 14)):  # token t is chosen from the (at most) 10 before it
        assert torch.equal(seen[step], out[:, max(0, t - 10):t]), t


def test_generate_restores_training_mode_and_turns_dropout_off():
    torch.manual_seed(0)
    m = GPT(config(dropout=0.5), make_block).train()
    prompt = ids(4, n=3)
    assert torch.equal(generate(m, prompt, 4), generate(m, prompt, 4))
    assert m.training


def test_dropout_only_in_training():
    torch.manual_seed(0)
    m = GPT(config(dropout=0.3), make_block)
    x = ids()
    m.eval()
    assert_close(m(x), m(x))
    m.train()
    assert not torch.allclose(m(x), m(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_finite_with_large_embeddings(dtype):
    m = model(norm_first=True).to(dtype)
    with torch.no_grad():
        m.token.weight.mul_(1e3)
    assert torch.isfinite(m(ids())).all()


def test_gradcheck_float64():
    m = model(n_layers=1).double()
    x = ids(n=4)
    emb = (m.token.weight[x] + m.position.weight[:4]).detach().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda e: m.layers[0](e, is_causal=True), (emb,), fast_mode=True)


def test_reversal_task():
    x = reversal_task(5, 4, 10, generator=torch.Generator(device=torch.get_default_device()).manual_seed(0))
    assert x.shape == (5, 9) and (x[:, 4] == 10).all()
    assert torch.equal(x[:, 5:], x[:, :4].flip(1))


def test_exercise_gpt1_parameters():
    with torch.device("meta"):
        gpt1 = GPT(GPTConfig(), make_block)
    assert sum(p.numel() for p in gpt1.parameters()) == 116_534_784


def test_exercise_loss_floor():
    import math

    length = 6
    x = reversal_task(4, length, 10, generator=torch.Generator(device=torch.get_default_device()).manual_seed(0))
    logits = torch.zeros(4, 2 * length + 1, 11)  # uniform over digits where nothing is known
    logits[:, :, 10] = -math.inf  # "=" never appears among the random digits
    for i in range(length - 1, 2 * length):  # "=" and the answer: certain
        logits[torch.arange(4), i] = -math.inf
        logits[torch.arange(4), i, x[:, i + 1]] = 0.0
    assert_close(next_token_loss(logits, x).item(), (length - 1) / (2 * length) * math.log(10))


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: GPTConfig(n_layers=0), ValueError, r"n_layers must be an int >= 1, got \{'n_layers': 0\}"),
        (lambda: GPTConfig(d_model=10, n_heads=3), ValueError, "d_model must divide by n_heads=3, got 10"),
    ],
)
def test_constructor_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_forward_and_generate_errors():
    m = model()
    with pytest.raises(TypeError, match=r"input_ids must have dtype \(torch.int64, torch.int32\) on cpu, got torch.float32"):
        m(torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"input_ids must have shape \(None, None\), got \(3,\)"):
        m(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="input_ids must have N <= max_len=10, got N = 11"):
        m(torch.zeros(1, 11, dtype=torch.long))
    with pytest.raises(ValueError, match=r"logits must have N >= 2, got \(1, 1, 13\)"):
        next_token_loss(torch.zeros(1, 1, 13), torch.zeros(1, 1, dtype=torch.long))
    with pytest.raises(ValueError, match=r"prompt must hold N0 >= 1 tokens, got \(2, 0\)"):
        generate(m, torch.zeros(2, 0, dtype=torch.long), 3)
    with pytest.raises(ValueError, match=r"max_new_tokens must be an int >= 0, got \{'max_new_tokens': -1\}"):
        generate(m, ids(), -1)
    with pytest.raises(ValueError, match=r"temperature must be in \[0.0, inf\), got -0.5"):
        generate(m, ids(), 2, temperature=-0.5)




def test_config_loss_generation_and_training_errors():
    from snippets.history.gpt import train_tiny_gpt

    m = model()
    x = ids()
    cases = [
        (lambda: GPTConfig(dropout=-0.1), ValueError, r"dropout must be in \[0.0, 1.0\), got -0.1"),
        (lambda: GPTConfig(layer_norm_eps=0.0), ValueError, r"layer_norm_eps must be in \(0.0, inf\), got 0.0"),
        (lambda: m(x + 13), ValueError, r"input_ids must lie in \[0, 13\), got \[13, 14, .*, 25\]"),
        (lambda: m(x.to("meta")), TypeError, r"input_ids must have dtype .* on cpu, got .* on meta"),
        (lambda: next_token_loss([0.0], x), ValueError, r"logits must have shape \(None, None, None\), got list"),
        (lambda: next_token_loss(torch.zeros(3, 7, 13), x.float()), TypeError,
         r"input_ids must have dtype \(torch.int64, torch.int32\) on cpu, got torch.float32"),
        (lambda: next_token_loss(torch.zeros(3, 7, 5), x), ValueError, r"input_ids must lie in \[0, 5\)"),
        (lambda: generate("model", x, 2), AttributeError, r"'str' object has no attribute 'config'"),
        (lambda: generate(m, x.float(), 2), TypeError, r"prompt must have dtype \(torch.int64, torch.int32\) on cpu, got torch.float32"),
        (lambda: generate(m, x, 2, temperature=1.0, generator=0), TypeError, r"multinomial\(\): argument 'generator' must be torch.Generator, not int"),
        (lambda: reversal_task(0, 3, 5), ValueError, r"n_sequences must be an int >= 1, got \{'n_sequences': 0\}"),
        (lambda: train_tiny_gpt(None), TypeError, r"'NoneType' object is not callable"),
        (lambda: train_tiny_gpt(make_block, config=3), AttributeError, r"'int' object has no attribute"),
        (lambda: train_tiny_gpt(make_block, steps=-1), ValueError, r"steps must be an int >= 0, got \{'steps': -1\}"),
        (lambda: train_tiny_gpt(make_block, lr=float("inf")), ValueError, r"lr must be in \(0.0, inf\), got inf"),
        (lambda: train_tiny_gpt(make_block, config=config(), length=6), ValueError,
         r"input_ids must have N <= max_len=10, got N = 13"),  # the model's own check
    ]
    for make, error, match in cases:
        with pytest.raises(error, match=match):
            make()
