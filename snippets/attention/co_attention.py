"""Co-attention: a question attends to an image and the image to the question.

Paper: Lu, Yang, Batra and Parikh (2016), "Hierarchical Question-Image
Co-Attention for Visual Question Answering", NeurIPS 2016, arXiv:1606.00061,
section 3.3 (parallel and alternating co-attention).
Page: docs/attention/co-attention.md
Tested against: the paper's equations written out per example in the paper's
column-vector layout (tests/test_co_attention.py); PyTorch has no co-attention
module to compare with.

Layout. The paper stores features as columns: Q is (d, T) for T question
words, V is (d, N) for N image regions. The code is batch-first and stores
features as rows, so ``question`` is (B, T, d) and ``image`` is (B, N, d): each
example's ``question`` is the paper's Q transposed. Every product is transposed
accordingly; the shape comments give the batch-first form.

Masks: ``question_mask`` (B, T) and ``image_mask`` (B, N) are True for a real
word or region and False for padding. Padding gets weight zero and changes
nothing else; an example with no real word (or region) returns zeros.

Kernels: ``ParallelCoAttention._co_attend`` (the paper's parallel equations),
``GuidedAttention.forward`` (A(X; g)) and ``AlternatingCoAttention.forward``;
the constructors, ``affinity``, the float32 plumbing and the checks are the face.

This file needs only torch and the standard library: copy it into a project.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["ParallelCoAttention", "GuidedAttention", "AlternatingCoAttention"]


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


def _accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    # Half-precision inputs are computed in float32: a d-term product of large
    # float16 entries overflows 65504 (inf - inf = NaN) before tanh can bound it.
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _init_matrix(rows: int, cols: int) -> nn.Parameter:
    # Same range as nn.Linear's default: uniform in +-1/sqrt(fan_in).
    bound = 1.0 / math.sqrt(cols)
    return nn.Parameter(torch.empty(rows, cols).uniform_(-bound, bound))


# --8<-- [start:parallel]
class ParallelCoAttention(nn.Module):
    """Parallel co-attention (Lu et al. 2016, section 3.3).

    Both attentions are computed at once through the affinity matrix
    ``C = tanh(Q^T W_b V)``, which scores every (word, region) pair.

    Args:
        d_model: d, the width of a word and of a region feature.
        d_hidden: k, the width of the hidden attention layer.

    Shape:
        question ``(B, T, d)``, image ``(B, N, d)`` ->
        q_hat ``(B, d)``, v_hat ``(B, d)``, a_q ``(B, T)``, a_v ``(B, N)``.
        ``question_mask`` ``(B, T)`` and ``image_mask`` ``(B, N)``: True = real.
    """

    def __init__(self, d_model: int, d_hidden: int) -> None:
        super().__init__()
        _check_sizes(d_model=d_model, d_hidden=d_hidden)
        self.d_model, self.d_hidden = d_model, d_hidden
        # Names follow the paper; like its equations, there are no biases.
        self.w_b = _init_matrix(d_model, d_model)  # W_b (d, d)
        self.w_q = _init_matrix(d_hidden, d_model)  # W_q (k, d)
        self.w_v = _init_matrix(d_hidden, d_model)  # W_v (k, d)
        self.w_hq = _init_matrix(1, d_hidden)  # w_hq^T (1, k)
        self.w_hv = _init_matrix(1, d_hidden)  # w_hv^T (1, k)

    def affinity(
        self,
        question: torch.Tensor,
        image: torch.Tensor,
        *,
        question_mask: torch.Tensor | None = None,
        image_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The affinity matrix C = tanh(Q^T W_b V), ``(B, T, N)``, in the input dtype.

        Entries that involve a padded word or region are zero, so padding
        cannot reach the hidden layers through C.
        """
        _check_question_image(self, question, image, question_mask, image_mask)
        acc = _accumulation_dtype(question.dtype)
        c = self._affinity(question.to(acc), image.to(acc), question_mask, image_mask)
        return c.to(question.dtype)

    def forward(
        self,
        question: torch.Tensor,
        image: torch.Tensor,
        *,
        question_mask: torch.Tensor | None = None,
        image_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Attend to the image and to the question at once.

        Returns:
            ``(q_hat, v_hat, a_q, a_v)``: the attended question ``(B, d)``, the
            attended image ``(B, d)``, the word weights ``(B, T)`` and the
            region weights ``(B, N)``, each weight vector summing to 1 over the
            real positions.
        """
        _check_question_image(self, question, image, question_mask, image_mask)
        acc = _accumulation_dtype(question.dtype)
        q, v = question.to(acc), image.to(acc)  # float32 for half precision
        out = self._co_attend(q, v, question_mask, image_mask)
        return tuple(t.to(question.dtype) for t in out)
# --8<-- [end:parallel]

    # --8<-- [start:affinity_kernel]
    def _affinity(self, q, v, q_mask, v_mask) -> torch.Tensor:
        """C = tanh(Q^T W_b V), zero in the rows and columns of padding."""
        # (B, T, d) @ (d, d) @ (B, d, N) -> (B, T, N)
        c = torch.tanh(q @ self.w_b.to(q.dtype) @ v.transpose(1, 2))
        if q_mask is not None:
            c = c.masked_fill(~q_mask.unsqueeze(2), 0.0)  # rows of padded words
        if v_mask is not None:
            c = c.masked_fill(~v_mask.unsqueeze(1), 0.0)  # columns of padded regions
        return c
    # --8<-- [end:affinity_kernel]

    # --8<-- [start:parallel_kernel]
    def _co_attend(self, q, v, q_mask, v_mask) -> tuple[torch.Tensor, ...]:
        """H^v, H^q from C; a^v, a^q by softmax; v_hat, q_hat as weighted sums."""
        w_q, w_v = self.w_q.to(q.dtype), self.w_v.to(q.dtype)  # (k, d) each
        w_hq, w_hv = self.w_hq.to(q.dtype), self.w_hv.to(q.dtype)  # (1, k) each
        c = self._affinity(q, v, q_mask, v_mask)  # (B, T, N)
        wq_q, wv_v = q @ w_q.T, v @ w_v.T  # (W_q Q)^T (B, T, k), (W_v V)^T (B, N, k)
        h_v = torch.tanh(wv_v + c.transpose(1, 2) @ wq_q)  # W_v V + W_q Q C, (B, N, k)
        h_q = torch.tanh(wq_q + c @ wv_v)  # W_q Q + (W_v V) C^T, (B, T, k)
        a_v = _masked_softmax((h_v @ w_hv.T).squeeze(-1), v_mask)  # over N regions
        a_q = _masked_softmax((h_q @ w_hq.T).squeeze(-1), q_mask)  # over T words
        v_hat = (a_v.unsqueeze(1) @ v).squeeze(1)  # (B, 1, N) @ (B, N, d) -> (B, d)
        q_hat = (a_q.unsqueeze(1) @ q).squeeze(1)  # (B, 1, T) @ (B, T, d) -> (B, d)
        return q_hat, v_hat, a_q, a_v
    # --8<-- [end:parallel_kernel]


# --8<-- [start:guided]
class GuidedAttention(nn.Module):
    """The paper's attention operation x_hat = A(X; g) (Lu et al. 2016, section 3.3).

    ``H = tanh(W_x X + (W_g g) 1^T)``, ``a^x = softmax(w_hx^T H)``,
    ``x_hat = sum_i a^x_i x_i``: the guidance g is added to every position.

    Args:
        d_model: d, the width of x and of g.
        d_hidden: k, the width of the hidden attention layer.
        guided: False for the first alternating step, where g = 0 and W_g
            would have nothing to multiply (no W_g parameter is made).

    Shape:
        x ``(B, L, d)``, g ``(B, d)`` (required when ``guided``, else None),
        ``x_mask`` ``(B, L)`` (True = real) -> x_hat ``(B, d)``, a ``(B, L)``.
    """

    def __init__(self, d_model: int, d_hidden: int, *, guided: bool = True) -> None:
        super().__init__()
        _check_sizes(d_model=d_model, d_hidden=d_hidden)
        self.d_model, self.d_hidden, self.guided = d_model, d_hidden, guided
        self.w_x = _init_matrix(d_hidden, d_model)  # W_x (k, d)
        self.w_g = _init_matrix(d_hidden, d_model) if guided else None  # W_g (k, d)
        self.w_hx = _init_matrix(1, d_hidden)  # w_hx^T (1, k)

    def _check_forward(self, x, g, x_mask) -> None:
        _check_features("x", x, x_mask, self, x)
        got = (tuple(g.shape), g.dtype, g.device) if torch.is_tensor(g) else g
        want = ((x.shape[0], x.shape[2]), x.dtype, x.device) if self.guided else None
        if got != want:  # g is (B, d_model) like x when guided, else None
            raise ValueError(f"g must be {want} (x's (B, D) when guided), got {got}")
# --8<-- [end:guided]

    # --8<-- [start:guided_forward]
    def forward(
        self, x: torch.Tensor, g: torch.Tensor | None = None, *,
        x_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x_hat = A(X; g), and the weights a over the L positions of x."""
        self._check_forward(x, g, x_mask)
        acc = _accumulation_dtype(x.dtype)  # float32 for half precision
        xa = x.to(acc)
        pre = xa @ self.w_x.to(acc).T  # (B, L, d) @ (d, k) -> (B, L, k): (W_x X)^T
        if g is not None:  # (W_g g) 1^T repeats the guidance at every position
            pre = pre + (g.to(acc) @ self.w_g.to(acc).T).unsqueeze(1)  # + (B, 1, k)
        h = torch.tanh(pre)  # (B, L, k)
        logits = (h @ self.w_hx.to(acc).T).squeeze(-1)  # (B, L, k) @ (k, 1) -> (B, L)
        a = _masked_softmax(logits, x_mask)  # over the L positions
        x_hat = (a.unsqueeze(1) @ xa).squeeze(1)  # (B, 1, L) @ (B, L, d) -> (B, d)
        return x_hat.to(x.dtype), a.to(x.dtype)
    # --8<-- [end:guided_forward]


# --8<-- [start:alternating]
class AlternatingCoAttention(nn.Module):
    """Alternating co-attention (Lu et al. 2016, section 3.3).

    Three applications of A(X; g): summarise the question (g = 0), attend the
    image guided by that summary, then attend the question guided by the
    attended image. Each step has its own parameters.

    Args:
        d_model: d, the width of a word and of a region feature.
        d_hidden: k, the width of the hidden attention layers.

    Shape:
        question ``(B, T, d)``, image ``(B, N, d)`` ->
        q_hat ``(B, d)``, v_hat ``(B, d)``, a_q ``(B, T)``, a_v ``(B, N)``
        (``a_q`` from the third step). Masks as in ``ParallelCoAttention``.
    """

    def __init__(self, d_model: int, d_hidden: int) -> None:
        super().__init__()  # each GuidedAttention checks d_model and d_hidden
        self.d_model, self.d_hidden = d_model, d_hidden
        self.summarise = GuidedAttention(d_model, d_hidden, guided=False)
        self.attend_image = GuidedAttention(d_model, d_hidden)
        self.attend_question = GuidedAttention(d_model, d_hidden)
# --8<-- [end:alternating]

    # --8<-- [start:alternating_forward]
    def forward(
        self, question: torch.Tensor, image: torch.Tensor, *,
        question_mask: torch.Tensor | None = None,
        image_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Question -> image -> question: three guided attentions in a row."""
        _check_question_image(self, question, image, question_mask, image_mask)
        s_hat, _ = self.summarise(question, x_mask=question_mask)  # (B, d)
        v_hat, a_v = self.attend_image(image, s_hat, x_mask=image_mask)  # (B, d) (B, N)
        # (B, d), (B, T)
        q_hat, a_q = self.attend_question(question, v_hat, x_mask=question_mask)
        return q_hat, v_hat, a_q, a_v
    # --8<-- [end:alternating_forward]


# --8<-- [start:validate]
def _check_sizes(**sizes: int) -> None:
    """Refuse a width that is not a positive int."""
    for name, value in sizes.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def _check_question_image(module, question, image, question_mask, image_mask) -> None:
    """Refuse a question and an image (and their masks) that do not fit the module."""
    _check_features("question", question, question_mask, module, question)
    _check_features("image", image, image_mask, module, question)


def _check_features(name: str, x, mask, module: nn.Module, like) -> None:
    """Refuse x unless floating (B, L, d_model) on the module's device with like's B and
    dtype (question and image share them); then its mask unless None or (B, L) bool
    on the same device."""
    d_model, device = module.d_model, next(module.parameters()).device
    ok = torch.is_tensor(x) and x.is_floating_point() and x.dim() == 3
    ok = ok and x.shape[-1] == d_model and x.device == device
    if not (ok and (x.shape[0], x.dtype) == (like.shape[0], like.dtype)):
        got = (tuple(x.shape), x.dtype, x.device) if torch.is_tensor(x) else type(x)
        raise ValueError(f"{name} must be floating (B, L, {d_model}) on {device}, B "
                         f"and dtype as the question's, got {got}")
    got = (mask.shape, mask.dtype, mask.device) if torch.is_tensor(mask) else mask
    if got is not None and got != (tuple(x.shape[:2]), torch.bool, x.device):
        raise ValueError(f"{name}_mask must be None or bool (True = real) of shape "
                         f"(B, L) = {tuple(x.shape[:2])} on {x.device}, got {got}")
# --8<-- [end:validate]
