"""The equivalence ledger: every identity the site proves, in one registry.

An identity is a function that builds its inputs, computes both sides and
returns them, ``(a, b)``; it is registered with a key, the claim in words, the
page that teaches it and the largest error the claim allows::

    @identity("sdpa-equals-torch", "scaled_dot_product_attention equals F.scaled_dot_product_attention",
              page="foundations/scaled-dot-product.md", tol=1e-12)
    def _():
        ...
        return ours, theirs

``tests/test_ledger.py`` runs every identity and fails when an error exceeds
its tolerance. The site build runs the same functions (``hooks/ledger.py``) and
renders what they measured on the ledger page and in each page's "proven"
badge, so the page and the proof cannot drift apart. Identities live in
``tests/identities/<area>.py``, one file per area of ``snippets/``.
"""

from __future__ import annotations

import importlib
import pathlib
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

HERE = pathlib.Path(__file__).resolve().parent
ROOT_DOCS = HERE.parents[1] / "docs"


@dataclass
class Identity:
    key: str
    claim: str
    page: str
    tol: float
    fn: Callable[[], tuple[torch.Tensor, torch.Tensor]]
    test: str
    needs: tuple[str, ...] = ()


@dataclass
class Measurement:
    key: str
    error: float | None  # None: not measured (a package it needs is missing)
    dtype: str
    device: str
    torch: str
    seconds: float
    why_not: str = ""
    extra: dict = field(default_factory=dict)


IDENTITIES: dict[str, Identity] = {}


def identity(key: str, claim: str, *, page: str, tol: float, needs: tuple[str, ...] = ()):
    """Register ``fn() -> (a, b)`` as the proof that ``claim`` holds to ``tol``."""

    def register(fn):
        if key in IDENTITIES:
            raise ValueError(f"identity key {key!r} is registered twice")
        module = fn.__module__.rsplit(".", 1)[-1]
        IDENTITIES[key] = Identity(key, claim, page, tol, fn,
                                   f"tests/identities/{module}.py::{fn.__name__}", needs)
        return fn

    return register


def load_all() -> dict[str, Identity]:
    """Import every ``tests/identities/*.py`` and return the registry."""
    for path in sorted(HERE.glob("*.py")):
        if path.stem != "__init__":
            importlib.import_module(f"{__name__}.{path.stem}")
    return IDENTITIES


def missing_needs(ident: Identity) -> list[str]:
    out = []
    for name in ident.needs:
        try:
            importlib.import_module(name)
        except ImportError:
            out.append(name)
    return out


def measure(ident: Identity) -> Measurement:
    """Run one identity on the CPU from a fixed seed: the largest absolute difference of its sides."""
    version = torch.__version__.split("+")[0]
    missing = missing_needs(ident)
    if missing:
        return Measurement(ident.key, None, "", "cpu", version, 0.0, f"needs {', '.join(missing)}")
    torch.manual_seed(0)
    start = time.perf_counter()
    with torch.no_grad():
        a, b = ident.fn()
    seconds = time.perf_counter() - start
    if a.shape != b.shape:
        raise AssertionError(f"{ident.key}: the two sides have shapes {tuple(a.shape)} and {tuple(b.shape)}")
    error = (a.detach().double() - b.detach().double()).abs().max().item() if a.numel() else 0.0
    return Measurement(ident.key, error, str(a.dtype).removeprefix("torch."), str(a.device), version, seconds,
                       extra={"python": platform.python_version()})
