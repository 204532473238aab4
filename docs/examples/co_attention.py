# %% [markdown]
# # Example: co-attention on a made-up picture
#
# This page was executed when the site was built. It trains the guide's
# [parallel co-attention](../attention/co-attention.md) for a few seconds on a
# toy question-answering task, then draws, for the question "what colour is the
# cat on the sofa", the weights over the question words, the weights over the
# image regions, and the word-by-region affinity $C$.
#
# Everything is invented and seeded: a "picture" is a 3 x 3 grid of regions,
# each holding one object in one colour, and a region's feature is the sum of
# fixed random vectors for its object, its colour and its place in the grid.
# A word's feature is a fixed random vector for the word plus one for its
# position in the question (real word features, from an LSTM or a Transformer,
# carry such context; without it "the cat on the sofa" and "the sofa on the
# cat" would look the same). An object's word and its region vector are
# unrelated, so the model has to learn, through $W_b$, which word matches which
# region.

# %%
import matplotlib.pyplot as plt
import torch
from torch import nn

from snippets.attention.co_attention import ParallelCoAttention
from _plotting import attention_heatmap

torch.manual_seed(0)
d, k = 32, 32
objects = ["cat", "sofa", "dog", "lamp", "table", "plant", "rug", "window", "book"]
colours = ["red", "green", "blue", "black", "white"]
places = [f"{row} {col}" for row in ("top", "middle", "bottom") for col in ("left", "centre", "right")]
answers = colours + places
vocab = ["<pad>", "what", "colour", "where", "is", "the", "on"] + objects
word_vec = torch.randn(len(vocab), d) / d**0.5  # fixed word features
position_vec = torch.randn(8, d) / d**0.5  # word order: "cat on the sofa" is not "sofa on the cat"
object_vec = torch.randn(len(objects), d) / d**0.5  # fixed region features:
colour_vec = torch.randn(len(colours), d) / d**0.5  # object + colour + place
place_vec = torch.randn(len(places), d) / d**0.5
T_max, N = 8, 9  # longest question, regions per picture
X, Y = -1, -2  # placeholders for the asked object and the other one
templates = [
    "what colour is the X", "what colour is the X on the Y",
    "where is the X", "where is the X on the Y",
]
template_ids = torch.tensor([
    [{"X": X, "Y": Y}.get(w, vocab.index(w) if w in vocab else 0) for w in t.split()]
    + [0] * (T_max - len(t.split()))
    for t in templates
])  # (4, T_max), 0 = padding
object_word = torch.tensor([vocab.index(o) for o in objects])  # object -> word id
template_len = torch.tensor([len(t.split()) for t in templates])


def make_batch(batch: int, generator: torch.Generator):
    """Random pictures and questions, and the answer (a colour or a place)."""
    layout = torch.rand(batch, N, generator=generator).argsort(dim=-1)  # (B, N), a shuffle per picture
    colour = torch.randint(len(colours), (batch, N), generator=generator)  # (B, N)
    image = (object_vec[layout] + colour_vec[colour] + place_vec
             + 0.05 * torch.randn(batch, N, d, generator=generator))  # (B, N, d)
    target = torch.randint(N, (batch,), generator=generator)  # the region asked about
    other = (target + 1 + torch.randint(N - 1, (batch,), generator=generator)) % N
    kind = torch.randint(len(templates), (batch,), generator=generator)
    rows = torch.arange(batch)
    words = template_ids[kind]  # (B, T_max)
    words = torch.where(words == X, object_word[layout[rows, target]][:, None], words)
    words = torch.where(words == Y, object_word[layout[rows, other]][:, None], words)
    question_mask = torch.arange(T_max) < template_len[kind, None]  # (B, T_max), True = real word
    question = word_vec[words] + position_vec  # (B, T_max, d)
    asks_colour = kind < 2
    answer = torch.where(asks_colour, colour[rows, target], len(colours) + target)  # (B,)
    return question, question_mask, image, answer


print("question", (64, T_max, d), "image", (64, N, d))

# %% [markdown]
# ## A few seconds of training
#
# Questions ask either for the colour or for the place of one object. A linear
# layer reads the answer from the attended question $\hat q$ (which kind of
# question?) and the attended image $\hat v$ (which region?), so both
# attentions have a job. A constant guess gets about one answer in ten right.

# %%
coatt = ParallelCoAttention(d, k)
head = nn.Linear(2 * d, len(answers))
opt = torch.optim.Adam([*coatt.parameters(), *head.parameters()], lr=2e-2)
gen = torch.Generator().manual_seed(1)
for step in range(401):
    question, question_mask, image, answer = make_batch(64, gen)
    q_hat, v_hat, a_q, a_v = coatt(question, image, question_mask=question_mask)
    loss = nn.functional.cross_entropy(head(torch.cat([q_hat, v_hat], -1)), answer)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 100 == 0:
        print(f"step {step:3d}  loss {loss.item():.3f}")

with torch.no_grad():
    question, question_mask, image, answer = make_batch(1000, torch.Generator().manual_seed(2))
    q_hat, v_hat, a_q, a_v = coatt(question, image, question_mask=question_mask)
    accuracy = (head(torch.cat([q_hat, v_hat], -1)).argmax(-1) == answer).float().mean()
print(f"held-out accuracy {accuracy:.3f}")
print("word weights of padding are zero:", bool((a_q[~question_mask] == 0).all()))
print("weights sum to 1:", torch.allclose(a_q.sum(-1), torch.ones(1000)),
      torch.allclose(a_v.sum(-1), torch.ones(1000)))

# %% [markdown]
# ## One question, one picture

# %%
text = "what colour is the cat on the sofa".split()
grid = ["lamp", "window", "plant", "book", "cat", "dog", "sofa", "rug", "table"]
grid_colours = ["white", "blue", "green", "red", "black", "white", "red", "green", "blue"]
question = (word_vec[torch.tensor([vocab.index(w) for w in text])] + position_vec).unsqueeze(0)  # (1, T, d)
image = (object_vec[torch.tensor([objects.index(o) for o in grid])]
         + colour_vec[torch.tensor([colours.index(c) for c in grid_colours])]
         + place_vec).unsqueeze(0)  # (1, N, d)
with torch.no_grad():
    q_hat, v_hat, a_q, a_v = coatt(question, image)
    c = coatt.affinity(question, image)[0]  # (T, N)
    guess = answers[head(torch.cat([q_hat, v_hat], -1)).argmax(-1).item()]
print("question", tuple(question.shape), "image", tuple(image.shape), "C", tuple(c.shape))
print("answer:", guess, "(the cat is black)")
for word, w in zip(text, a_q[0]):
    print(f"  {word:>7s} {w:.3f}")
print("most attended region:", grid[a_v[0].argmax()], f"({a_v[0].max():.3f})")

# %% [markdown]
# Read the printout above: the region weights should pick out the cat, the
# object the question asks about, and not the sofa it mentions as well. The
# word weights need only tell a colour question from a place question, so they
# settle on whichever word does that best (a word that never occurs in the
# other kind of question), not necessarily on "cat". The weights of the region
# decide *what* is read; the weights of the words decide *which* answer.

# %%
# alt: Left, a bar chart of the weight of each word of "what colour is the cat on the sofa". Right, a 3 by 3 grid of the made-up picture's regions, each labelled with its object and colour and shaded by its attention weight; the region holding the cat is the brightest.
fig, (ax_q, ax_v) = plt.subplots(1, 2, figsize=(9, 3.4))
ax_q.bar(range(len(text)), a_q[0].numpy(), color="#3f51b5")
ax_q.set_xticks(range(len(text)), text, rotation=45, ha="right")
ax_q.set(ylabel="weight $a^q_t$", title="question words")
im = ax_v.imshow(a_v[0].reshape(3, 3).numpy(), cmap="viridis", vmin=0.0)
for n, (obj, col) in enumerate(zip(grid, grid_colours)):
    weight = a_v[0, n].item()
    ax_v.text(n % 3, n // 3, f"{col}\n{obj}\n{weight:.2f}", ha="center", va="center",
              color="white" if weight < 0.6 * a_v[0].max().item() else "black", fontsize=8)
ax_v.set(xticks=[], yticks=[], title="image regions $a^v_n$")
fig.colorbar(im, ax=ax_v, fraction=0.046, pad=0.04)
fig.tight_layout()

# %% [markdown]
# The affinity $C = \tanh(Q^\top W_b V)$ is the map behind both sets of
# weights: a row per word, a column per region.

# %%
# alt: Heatmap of the affinity matrix C with the eight question words down the side and the nine named regions along the top; the entries are between -1 and 1.
ax = attention_heatmap(c, text, [f"{col} {obj}" for obj, col in zip(grid, grid_colours)],
                       title="affinity C (words x regions)", cmap="coolwarm")
ax.images[0].set_clim(-1.0, 1.0)
ax.set(xlabel="image region", ylabel="question word")

# %% [markdown]
# Look along the row of "cat": after training it is high only in the cat's
# column, although the word "cat" and the cat's region started as unrelated
# random vectors. $W_b$ has learned the match. Many other entries sit at
# $\pm 1$: the $\tanh$ saturates, one of the pitfalls on the
# [co-attention page](../attention/co-attention.md).
