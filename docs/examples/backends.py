# %% [markdown]
# # Example: which SDPA backend runs here
#
# This page was executed when the site was built. It asks
# `F.scaled_dot_product_attention` to run on each backend in turn, on the
# machine that built the site, and times the math backend against the fused
# kernel. The [backends page](../efficiency/backends.md) explains the rules.
# Letters follow the [notation](../notation.md) page.

# %%
import time
import warnings

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

torch.manual_seed(0)
torch.set_num_threads(1)  # one thread: stable numbers on a shared build machine
print(f"torch {torch.__version__}, CUDA available: {torch.cuda.is_available()}, "
      f"threads: {torch.get_num_threads()}")
BACKENDS = [SDPBackend.MATH, SDPBackend.FLASH_ATTENTION,
            SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]

# %% [markdown]
# ## What each backend accepts on this device
#
# Inside `with sdpa_kernel(backend):` only that backend may run; if it cannot
# take the inputs, the call raises instead of falling back.

# %%
device = "cuda" if torch.cuda.is_available() else "cpu"


def attempt(backend, dtype, **kwargs):
    q, k, v = (torch.randn(1, 8, 128, 64, device=device, dtype=dtype) for _ in range(3))
    try:
        with sdpa_kernel(backend), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a refusing kernel also warns with its reasons
            F.scaled_dot_product_attention(q, k, v, **kwargs)
        return "ok"
    except RuntimeError:
        return "refused"


mask = torch.ones(128, 128, dtype=torch.bool, device=device).tril()
cases = {
    "float32": (torch.float32, {}),
    "float32, is_causal": (torch.float32, {"is_causal": True}),
    "float32, bool attn_mask": (torch.float32, {"attn_mask": mask}),
    "float32, dropout_p=0.1": (torch.float32, {"dropout_p": 0.1}),
    "bfloat16": (torch.bfloat16, {}),
    "float16": (torch.float16, {}),
}
print(f"{'inputs on ' + device:<26}" + "".join(f"{b.name:>22}" for b in BACKENDS))
for label, (dtype, kwargs) in cases.items():
    print(f"{label:<26}" + "".join(f"{attempt(b, dtype, **kwargs):>22}" for b in BACKENDS))

# %% [markdown]
# ## Math against the fused kernel
#
# One size, $(B, H, N, d) = (1, 8, 1024, 64)$, float32, causal. The two calls
# alternate, five rounds each, and the median is kept; both results are
# compared.

# %%
q, k, v = (torch.randn(1, 8, 1024, 64, device=device) for _ in range(3))
fused = SDPBackend.FLASH_ATTENTION if device == "cpu" else SDPBackend.EFFICIENT_ATTENTION
timings = {SDPBackend.MATH: [], fused: []}
outs = {}
with torch.no_grad():
    for backend in timings:  # warm-up
        with sdpa_kernel(backend):
            outs[backend] = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    for _ in range(5):
        for backend in timings:
            with sdpa_kernel(backend):
                if device == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                F.scaled_dot_product_attention(q, k, v, is_causal=True)
                if device == "cuda":
                    torch.cuda.synchronize()
                timings[backend].append(time.perf_counter() - t0)
med = {b: sorted(ts)[len(ts) // 2] for b, ts in timings.items()}
for b, t in med.items():
    print(f"{b.name:>20}: {t * 1e3:8.1f} ms")
print(f"fused is {med[SDPBackend.MATH] / med[fused]:.1f}x faster; "
      f"max |difference| = {(outs[SDPBackend.MATH] - outs[fused]).abs().max():.1e}")

# %%
# alt: Bar chart of the median time of one causal attention call with N = 1024 on the build machine: the math backend's bar is several times taller than the fused kernel's.
fig, ax = plt.subplots(figsize=(5, 3))
ax.bar([b.name for b in med], [t * 1e3 for t in med.values()], color=["tab:gray", "tab:blue"])
ax.set(ylabel="ms per call (median of 5)",
       title=f"SDPA backends on {device}, N = 1024, float32, {torch.get_num_threads()} thread(s)")
fig.tight_layout()
plt.show()
