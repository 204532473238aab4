"""Identities proven for the history pages: Bahdanau, Luong, BERT and GPT.

Each side is computed independently: the paper's equation written out here with
einsum or a loop, or the ``transformers`` model with the same weights.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from identities import identity
from snippets.history import additive_attention as add
from snippets.history import luong_attention as luong

F64 = torch.float64
ADD_PAGE = "history/additive-attention.md"
LUONG_PAGE = "history/luong-attention.md"


def _prefix_mask(lengths: list[int], m: int) -> torch.Tensor:
    return torch.arange(m) < torch.tensor(lengths).unsqueeze(-1)  # (B, M)


def _softmax_where(e: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """exp(e) / sum exp(e) over the real positions only, written out."""
    w = torch.exp(e - e.max(dim=-1, keepdim=True).values) * real
    return w / w.sum(dim=-1, keepdim=True)


# ----------------------------------------------------------------------------
# Bahdanau
# ----------------------------------------------------------------------------


@identity("additive-score-equals-equation",
          "AdditiveAttention.scores equals e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j), written with einsum",
          page=ADD_PAGE, tol=1e-12)
def additive_score_equals_equation():
    att = add.AdditiveAttention(5, 6, 7).to(F64)
    s, h = torch.randn(2, 3, 5, dtype=F64), torch.randn(2, 4, 6, dtype=F64)
    w_a, u_a, v_a = att.w_a.weight, att.u_a.weight, att.v_a.weight[0]
    pre = torch.einsum("an,bin->bia", w_a, s)[:, :, None] + torch.einsum("am,bjm->bja", u_a, h)[:, None]
    return att.scores(s, h), torch.einsum("a,bija->bij", v_a, torch.tanh(pre))


@identity("additive-precomputed-keys",
          "Additive attention with U_a h_j computed once (projected_keys) equals computing it at every call",
          page=ADD_PAGE, tol=0.0)
def additive_precomputed_keys():
    att = add.AdditiveAttention(4, 6, 5).to(F64)
    s, h = torch.randn(2, 3, 4, dtype=F64), torch.randn(2, 5, 6, dtype=F64)
    mask = _prefix_mask([5, 3], 5)
    reused, _ = att(s, h, key_mask=mask, projected_keys=att.project_keys(h))
    fresh, _ = att(s, h, key_mask=mask)
    return reused, fresh


@identity("additive-attention-equals-equations",
          "Additive attention with padding equals alpha = softmax over the real j, c_i = sum_j alpha_ij h_j, "
          "written out",
          page=ADD_PAGE, tol=1e-12)
def additive_attention_equals_equations():
    att = add.AdditiveAttention(5, 6, 7).to(F64)
    s, h = torch.randn(2, 3, 5, dtype=F64), torch.randn(2, 4, 6, dtype=F64)
    mask = _prefix_mask([4, 2], 4)
    context, weights = att(s, h, key_mask=mask)
    e = torch.einsum("a,bija->bij", att.v_a.weight[0], torch.tanh(
        (s @ att.w_a.weight.T)[:, :, None] + (h @ att.u_a.weight.T)[:, None]))
    alpha = _softmax_where(e, mask[:, None])
    return torch.cat([context, weights], -1), torch.cat([alpha @ h, alpha], -1)


@identity("bahdanau-encoder-ignores-padding",
          "The annotations of a right-padded sentence equal those of the same sentence alone",
          page=ADD_PAGE, tol=1e-12)
def bahdanau_encoder_ignores_padding():
    enc = add.BahdanauEncoder(13, 6, 5).to(F64)
    src = torch.tensor([[3, 4, 5, 6, add.PAD, add.PAD], [7, 8, 9, 10, 11, 12]])
    padded = enc(src, src != add.PAD)[:1, :4]  # (1, 4, 10)
    return padded, enc(src[:1, :4], None)


@identity("bahdanau-decoder-equals-equations",
          "RNNsearch's logits equal s_i = GRUCell([E y_{i-1}; c_i], s_{i-1}), g = W [s_i; c_i; E y_{i-1}], "
          "unrolled by hand",
          page=ADD_PAGE, tol=1e-12)
def bahdanau_decoder_equals_equations():
    model = add.BahdanauSeq2Seq(13, 13, emb_dim=6, hidden_size=5, attn_dim=4).to(F64)
    src = torch.tensor([[3, 4, 5, 6], [7, 8, add.PAD, add.PAD]])
    mask = src != add.PAD
    tgt_in = torch.tensor([[add.BOS, 6, 5], [add.BOS, 8, 7]])
    logits, _ = model(src, tgt_in, src_mask=mask)
    h = model.encoder(src, mask)
    s = torch.tanh(model.init_state(h[:, 0, 5:]))  # s_0 = tanh(W_s backward h_1)
    att, want = model.attention, []
    for i in range(tgt_in.shape[1]):
        e = torch.einsum("a,bja->bj", att.v_a.weight[0],
                         torch.tanh((s @ att.w_a.weight.T)[:, None] + h @ att.u_a.weight.T))
        c = (_softmax_where(e, mask)[:, :, None] * h).sum(1)  # (B, 2n)
        emb = model.tgt_embedding(tgt_in[:, i])
        s = model.cell(torch.cat([emb, c], -1), s)
        want.append(model.readout(torch.cat([s, c, emb], -1)))
    return logits, torch.stack(want, 1)


# ----------------------------------------------------------------------------
# Luong
# ----------------------------------------------------------------------------


def _luong(score: str, window=None) -> luong.LuongAttention:
    return luong.LuongAttention(4, score, window=window).to(F64)


def _luong_inputs():
    return torch.randn(2, 3, 4, dtype=F64), torch.randn(2, 6, 4, dtype=F64)


@identity("luong-dot-equals-equation", "Luong's dot score equals h_t^T h_s written with einsum",
          page=LUONG_PAGE, tol=1e-12)
def luong_dot_equals_equation():
    q, k = _luong_inputs()
    return _luong("dot").scores(q, k), torch.einsum("btd,bsd->bts", q, k)


@identity("luong-general-equals-equation", "Luong's general score equals h_t^T W_a h_s written with einsum",
          page=LUONG_PAGE, tol=1e-12)
def luong_general_equals_equation():
    q, k = _luong_inputs()
    att = _luong("general")
    return att.scores(q, k), torch.einsum("btd,de,bse->bts", q, att.w_a.weight, k)


@identity("luong-concat-equals-equation",
          "Luong's concat score equals v_a^T tanh(W_a [h_t; h_s]) with every pair concatenated",
          page=LUONG_PAGE, tol=1e-12)
def luong_concat_equals_equation():
    q, k = _luong_inputs()
    att = _luong("concat")
    pairs = torch.cat([q[:, :, None].expand(-1, -1, 6, -1), k[:, None].expand(-1, 3, -1, -1)], -1)
    return att.scores(q, k), torch.tanh(pairs @ att.w_a.weight.T) @ att.v_a.weight[0]


@identity("luong-concat-is-additive",
          "Luong's concat score equals Bahdanau's additive score with W_a split into its two halves",
          page="history/score-functions.md", tol=1e-12)
def luong_concat_is_additive():
    q, k = _luong_inputs()
    concat, additive = _luong("concat"), add.AdditiveAttention(4, 4, 4).to(F64)
    with torch.no_grad():
        additive.w_a.weight.copy_(concat.w_a.weight[:, :4])
        additive.u_a.weight.copy_(concat.w_a.weight[:, 4:])
        additive.v_a.weight.copy_(concat.v_a.weight)
    return concat.scores(q, k), additive.scores(q, k)


@identity("luong-general-identity-is-dot", "Luong attention with the general score and W_a = I equals the dot score",
          page=LUONG_PAGE, tol=0.0)
def luong_general_identity_is_dot():
    q, k = _luong_inputs()
    general, dot = _luong("general"), _luong("dot")
    with torch.no_grad():
        general.w_a.weight.copy_(torch.eye(4, dtype=F64))
        dot.w_c.weight.copy_(general.w_c.weight)
    return general(q, k)[0], dot(q, k)[0]


@identity("luong-global-equals-equations",
          "Global attention equals a_t = softmax over the real s, c_t = sum_s a_t(s) h_s, "
          "h~_t = tanh(W_c [c_t; h_t]), written out",
          page=LUONG_PAGE, tol=1e-12)
def luong_global_equals_equations():
    q, k = _luong_inputs()
    att, mask = _luong("general"), _prefix_mask([6, 4], 6)
    a = _softmax_where(torch.einsum("btd,de,bse->bts", q, att.w_a.weight, k), mask[:, None])
    h_tilde = torch.tanh(torch.cat([a @ k, q], -1) @ att.w_c.weight.T)
    return att(q, k, key_mask=mask)[0], h_tilde


@identity("luong-local-equals-equations",
          "Local-p weights equal the softmax inside [p_t - R, p_t + R] times exp(-(s - p_t)^2 / (2 (R/2)^2)), "
          "with p_t = S sigmoid(v_p^T tanh(W_p h_t)), written out",
          page=LUONG_PAGE, tol=1e-12)
def luong_local_equals_equations():
    q, k = _luong_inputs()
    att, mask, r = _luong("dot", window=2), _prefix_mask([6, 4], 6), 2
    lengths = mask.sum(-1).to(F64)[:, None]  # S per sentence, (B, 1)
    p = lengths * torch.sigmoid(torch.tanh(q @ att.w_p.weight.T) @ att.v_p.weight[0])  # (B, N)
    distance = torch.arange(6, dtype=F64) - p[..., None]  # (B, N, M)
    window = mask[:, None] & (distance.abs() <= r)
    align = _softmax_where(torch.einsum("btd,bsd->bts", q, k), window)
    return att(q, k, key_mask=mask)[1], align * torch.exp(-distance**2 / (2 * (r / 2) ** 2))


# ----------------------------------------------------------------------------
# GPT
# ----------------------------------------------------------------------------

GPT_PAGE = "history/gpt.md"


def _gpt(norm_first: bool = False, activation: str = "gelu"):
    from snippets.architecture.transformer_block import TransformerBlock
    from snippets.attention.multi_head import MultiHeadAttention
    from snippets.history import gpt

    def make_block(c):
        attention = MultiHeadAttention(c.d_model, c.n_heads)
        return TransformerBlock(attention, c.d_model, c.d_ff, activation=activation,
                                norm_first=c.norm_first, layer_norm_eps=c.layer_norm_eps)

    config = gpt.GPTConfig(vocab_size=13, d_model=8, n_layers=2, n_heads=2, d_ff=32, max_len=10,
                           dropout=0.0, norm_first=norm_first)
    return gpt, gpt.GPT(config, make_block).to(F64).eval()


@identity("gpt1-equals-transformers",
          "GPT in GPT-1's post-norm layout equals transformers' OpenAIGPTLMHeadModel with the weights "
          "copied (ReLU in both: transformers maps GPT-1's \"gelu\" to its tanh approximation)",
          page=GPT_PAGE, tol=1e-10, needs=("transformers",))
def gpt1_equals_transformers():
    from transformers import OpenAIGPTConfig, OpenAIGPTLMHeadModel

    _, model = _gpt(activation="relu")
    hf = OpenAIGPTLMHeadModel(OpenAIGPTConfig(
        vocab_size=13, n_positions=10, n_embd=8, n_layer=2, n_head=2, afn="relu",
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5)).to(F64).eval()
    state = {"token.weight": hf.transformer.tokens_embed.weight,
             "position.weight": hf.transformer.positions_embed.weight}
    parts = {"attention.in_proj": "attn.c_attn", "attention.out_proj": "attn.c_proj",
             "linear1": "mlp.c_fc", "linear2": "mlp.c_proj", "norm1": "ln_1", "norm2": "ln_2"}
    for i, block in enumerate(hf.transformer.h):
        for ours, theirs in parts.items():
            module = block.get_submodule(theirs)
            weight = module.weight if ours.startswith("norm") else module.weight.T  # Conv1D: (in, out)
            state[f"layers.{i}.{ours}.weight"], state[f"layers.{i}.{ours}.bias"] = weight, module.bias
    state["lm_head.weight"] = state["token.weight"]
    model.load_state_dict(state)
    ids = torch.randint(13, (2, 7))
    return model(ids), hf(input_ids=ids).logits


@identity("gpt-prefix-logits",
          "GPT's logits for the first k tokens of a sequence equal the first k rows of its logits for the "
          "whole sequence (causality: what a KV cache relies on)",
          page=GPT_PAGE, tol=1e-12)
def gpt_prefix_logits():
    _, model = _gpt(norm_first=True)
    ids = torch.randint(13, (2, 9))
    return model(ids[:, :5]), model(ids)[:, :5]


@identity("gpt-loss-equals-equation",
          "next_token_loss equals -1/(B(N-1)) sum_i log softmax(logits_i)[t_{i+1}], written out",
          page=GPT_PAGE, tol=1e-12)
def gpt_loss_equals_equation():
    gpt, _ = _gpt()
    logits, ids = torch.randn(3, 6, 13, dtype=F64), torch.randint(13, (3, 6))
    log_p = logits.log_softmax(-1)[:, :-1].gather(-1, ids[:, 1:, None])  # (B, N - 1, 1)
    return gpt.next_token_loss(logits, ids), -log_p.mean()


@identity("gpt-greedy-equals-argmax-loop",
          "Greedy generate equals a loop that appends the argmax of the full model's last logits",
          page=GPT_PAGE, tol=0.0)
def gpt_greedy_equals_argmax_loop():
    gpt, model = _gpt(norm_first=True)
    ids = torch.randint(13, (2, 3))
    want = ids
    for _ in range(5):
        want = torch.cat([want, model(want)[:, -1].argmax(-1, keepdim=True)], 1)
    return gpt.generate(model, ids, 5), want


# ----------------------------------------------------------------------------
# BERT
# ----------------------------------------------------------------------------

BERT_PAGE = "history/bert.md"


def _bert_pair(hf_class_name: str, wrapper: str | None = None):
    """A random transformers BERT in float64 and ours with its weights copied in."""
    import transformers

    from snippets.architecture.transformer_block import TransformerBlock
    from snippets.attention.multi_head import MultiHeadAttention
    from snippets.history import bert

    def make_block(c):
        attention = MultiHeadAttention(c.d_model, c.n_heads, dropout=c.dropout)
        return TransformerBlock(attention, c.d_model, c.d_ff, dropout=c.dropout, activation="gelu",
                                norm_first=False, layer_norm_eps=c.layer_norm_eps)

    config = transformers.BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=32,
                                     max_position_embeddings=12, type_vocab_size=2, pad_token_id=0)
    kwargs = {"add_pooling_layer": False} if hf_class_name == "BertModel" else {}
    theirs = getattr(transformers, hf_class_name)(config, **kwargs).to(F64).eval()
    with torch.no_grad():  # random weights away from the initialisation
        for name, p in theirs.named_parameters():
            p.normal_(mean=1.0 if "LayerNorm.weight" in name else 0.0, std=0.3)
    special = bert.SpecialTokens(pad=0, cls=1, sep=2, mask=3)
    ours = bert.BertModel(bert.BertConfig.from_transformers(config, special=special), make_block)
    if wrapper is not None:
        ours = getattr(bert, wrapper)(ours)
    ours = ours.to(F64)  # before loading, so the float64 weights arrive whole
    ours.load_state_dict(bert.state_dict_from_transformers(theirs.state_dict()), strict=True)
    ids = torch.tensor([[1, 5, 6, 2, 7, 8, 2, 0], [1, 9, 10, 11, 2, 0, 0, 0]])
    segments = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 0], [0, 0, 0, 0, 0, 0, 0, 0]])
    return ours.eval(), theirs, ids, segments


@identity("bert-equals-transformers",
          "BertModel (the guide's post-norm blocks) equals transformers' BertModel with the weights copied, "
          "on the real tokens of a padded batch of sentence pairs",
          page=BERT_PAGE, tol=1e-10, needs=("transformers",))
def bert_equals_transformers():
    ours, theirs, ids, segments = _bert_pair("BertModel")
    real = ids != 0
    mine = ours(ids, segment_ids=segments, key_mask=real)
    hf = theirs(input_ids=ids, token_type_ids=segments, attention_mask=real.long()).last_hidden_state
    return mine[real], hf[real]


@identity("bert-mlm-equals-transformers",
          "BertForMaskedLM's logits (tied MLM head) equal transformers' BertForMaskedLM with the weights copied",
          page=BERT_PAGE, tol=1e-10, needs=("transformers",))
def bert_mlm_equals_transformers():
    ours, theirs, ids, segments = _bert_pair("BertForMaskedLM", "BertForMaskedLM")
    real = ids != 0
    mine = ours(ids, segment_ids=segments, key_mask=real)
    hf = theirs(input_ids=ids, token_type_ids=segments, attention_mask=real.long()).logits
    return mine[real], hf[real]


@identity("bert-loss-equals-equation",
          "mlm_loss equals -1/|M| sum over the selected positions of log softmax(logits_i)[t_i], written out",
          page=BERT_PAGE, tol=1e-12)
def bert_loss_equals_equation():
    from snippets.history import bert

    logits, ids = torch.randn(2, 8, 30, dtype=F64), torch.randint(4, 30, (2, 8))
    _, labels = bert.mask_tokens(ids, 30, select_prob=0.5, generator=torch.Generator(device=torch.get_default_device()).manual_seed(0))
    selected = labels != bert.IGNORE_INDEX
    log_p = logits.log_softmax(-1)[selected].gather(-1, labels[selected][:, None])
    return bert.mlm_loss(logits, labels), -log_p.mean()
