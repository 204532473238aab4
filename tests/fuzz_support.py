"""The fuzz framework: malformed input thrown at every public function and class of snippets/.

Each public callable (the names in a snippet module's ``__all__``) registers an
entry in ``FUZZ`` from its area's ``tests/test_fuzz_<area>.py``: a function that
builds one or more valid calls from a few drawn sizes, and for each argument a
rule that says what makes it wrong (``T`` for a tensor, ``Bad`` for the values a
number or an object must refuse). The tests pick a call, an argument and one way
to break it (a wrong rank, a leading or head dimension that no longer agrees
with the other arguments, an integer or mismatched float dtype, a tensor on
another device, a list where a tensor belongs, a bad mask, an out-of-range
number) and the call must then raise ``ValueError`` or ``TypeError`` whose
message names the broken argument and says what it got. A ``RuntimeError``,
``IndexError`` or ``AttributeError`` from deep inside torch fails the test.
Next to the random draws, a deterministic sweep tries every way to break every
argument once.

What no user does is not fuzzed: ``True`` where a size belongs, the string
``"2"`` where a number belongs, a string where a tensor belongs, ``1`` where a
flag belongs. Those values are dropped from every rule here, so the snippets
need no armour against them.

"Another device" is PyTorch's ``meta`` device, so the device checks run on a
machine with only a CPU. A new snippet must register an entry:
``tests/test_fuzz_registry.py`` fails until it does.
"""


from __future__ import annotations

import importlib
import pathlib
import random
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn
from torch.nn.attention.flex_attention import create_block_mask

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODULES = sorted(
    ".".join(p.relative_to(ROOT).with_suffix("").parts)
    for p in (ROOT / "snippets").rglob("*.py")
    if p.name != "__init__.py" and "__pycache__" not in p.parts
)
OTHER_DEVICE = torch.device("meta")  # a second device that every machine has
BIG = 7  # a size no drawn size reaches, so a dimension of BIG never matches or broadcasts


def public_callables() -> dict[str, Any]:
    """``"area.topic.name" -> object`` for every callable in each module's ``__all__``."""
    found = {}
    for name in MODULES:
        module = importlib.import_module(name)
        names = getattr(module, "__all__", None)
        if names is None:  # no __all__: every public name defined in the module itself
            names = [n for n, o in vars(module).items()
                     if not n.startswith("_") and getattr(o, "__module__", None) == name]
        for attr in names:
            obj = getattr(module, attr)
            if callable(obj):
                found[f"{name.removeprefix('snippets.')}.{attr}"] = obj
    return found


# ----------------------------------------------------------------------------
# What makes an argument wrong
# ----------------------------------------------------------------------------

FLOAT, MASK, BOOL, INT, ANY = "float", "mask", "bool", "int", "any"


@dataclass(frozen=True)
class T:
    """A tensor argument and the rules it must follow.

    kind: FLOAT (a floating tensor), MASK (bool, or the dtype of the floating
        inputs), BOOL, INT (integer ids) or ANY dtype.
    rank: the exact number of dimensions; None for "at least ``min_rank``"
        with leading dimensions that broadcast.
    tied: dimensions whose size another argument (or the module) fixes; the
        valid call gives each a size >= 2, so size + 1 never fits.
    lead_fixed: a new leading dimension of size BIG is wrong (a mask must
        broadcast to the scores, never enlarge them).
    dtype_peer / device_peer: another argument or the module's parameters fix
        the dtype / the device, so float64 / ``meta`` is wrong.
    high: for INT ids, the first id out of range (ids must lie in [0, high)).
    names: names a message may use for a mismatch (default: the argument's).
    """

    kind: str = FLOAT
    rank: int | None = None
    min_rank: int = 0
    tied: tuple[int, ...] = ()
    lead_fixed: bool = False
    dtype_peer: bool = True
    device_peer: bool = True
    high: int | None = None
    names: tuple[str, ...] = ()

    def mutations(self, value: torch.Tensor) -> list[tuple[str, Callable[[], Any]]]:
        out: list[tuple[str, Callable[[], Any]]] = [
            ("a nested list", lambda: value.tolist()),
        ]
        wrong_dtypes = {
            FLOAT: [torch.int64, torch.int32, torch.bool] + ([torch.float64] if self.dtype_peer else []),
            MASK: [torch.int64, torch.uint8] + ([torch.float64] if self.dtype_peer else []),
            BOOL: [torch.int64, torch.float32, torch.uint8],
            INT: [torch.float32, torch.bool],
            ANY: [],
        }[self.kind]
        for dtype in wrong_dtypes:
            out.append((f"dtype {dtype}", lambda dtype=dtype: value.to(dtype)))
        if self.rank is not None:
            out.append(("one more dimension", lambda: torch.stack([value, value])))
            if value.dim() > 0:
                out.append(("one dimension fewer", lambda: value.select(0, 0)))
        elif self.min_rank > 0:
            out.append((f"fewer than {self.min_rank} dimensions",
                        lambda: value.flatten()[: value.shape[-1]] if self.min_rank > 1 else value.flatten()[0]))
        if self.lead_fixed:
            out.append((f"an extra leading dimension of {BIG}", lambda: value.expand(BIG, *value.shape)))
        for dim in self.tied:
            out.append((f"dimension {dim} one longer", lambda dim=dim: _grow(value, dim)))
        if self.device_peer:
            out.append(("another device", lambda: value.to(OTHER_DEVICE)))
        if self.high is not None:
            out.append(("an id out of range", lambda: _poke(value, self.high)))
            out.append(("a negative id", lambda: _poke(value, -1)))
        return out


def _grow(t: torch.Tensor, dim: int) -> torch.Tensor:
    """``t`` with one more entry along ``dim`` (a copy of the first)."""
    return torch.cat([t, t.narrow(dim, 0, 1)], dim)


def _poke(t: torch.Tensor, value: int) -> torch.Tensor:
    t = t.clone()
    t.view(-1)[0] = value
    return t


class Bad:
    """A non-tensor argument: the values that must be refused."""

    def __init__(self, *values: Any, names: tuple[str, ...] = ()) -> None:
        self.values, self.names = values, names

    def mutations(self, value: Any) -> list[tuple[str, Callable[[], Any]]]:
        return [(repr(v), lambda v=v: v) for v in self.values if not _pedantic(v)]


def _pedantic(value: Any) -> bool:
    """A value no caller passes by mistake: a bool for a number, a number as text."""
    if isinstance(value, bool):
        return True
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return False
        return True
    return False


POS_INT = Bad(0, -1, 2.5, True, "2")  # an int >= 1
NONNEG_INT = Bad(-1, 2.5, True, "2")  # an int >= 0
PROB = Bad(-0.1, 1.0, 1.5, "0.1", None, True)  # a float in [0, 1)
POS_FLOAT = Bad(0.0, -1.0, float("nan"), float("inf"), "1", None, True)  # a float > 0
FLOAT_DTYPE = Bad(torch.int64, torch.bool, "float32", 3)  # a floating torch.dtype
NOT_A_MODULE = Bad(3, "module", None)


@dataclass
class Call:
    """One valid call: ``fn(**kwargs)`` works; ``specs`` says how each argument breaks."""

    fn: Callable[..., Any]
    kwargs: dict[str, Any]
    specs: dict[str, T | Bad]
    label: str = "call"
    target: str | None = None  # for a builder shared by several callables: whose call this is


FUZZ: dict[str, Callable[[SimpleNamespace], list[Call]]] = {}


OWNER: dict[str, str] = {}  # key -> the test module that registered it
SWEPT: set[str] = set()  # the keys some fuzz_tests(...) call parametrises


def fuzz(*keys: str):
    """Register a builder of valid calls for one or more public callables.

    A builder shared by several callables marks each call with its ``target``
    (the callable's name); each callable is then fuzzed through its own calls.
    """

    def register(build):
        for key in keys:
            assert key not in FUZZ, key
            name = key.rsplit(".", 1)[1]
            OWNER[key] = build.__module__
            FUZZ[key] = lambda s, build=build, name=name: [
                c for c in build(s) if c.target in (None, name)
            ]
        return build

    return register


def r(*shape: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


def ids(*shape: int, high: int) -> torch.Tensor:
    return torch.randint(high, shape)


def ones(*shape: int) -> torch.Tensor:
    return torch.ones(*shape, dtype=torch.bool)


# Tensor rules used over and over.
SEQ = T(rank=3, tied=(0, -1))  # (B, L, D): batch and width fixed by a peer
X_ONLY = T(rank=3, tied=(-1,))  # (B, N, D) into a module: its width is fixed
KEY_MASK = T(BOOL, rank=2, tied=(0, 1))  # (B, M), True = real key


# ----------------------------------------------------------------------------


CAUSAL_MASK_SPECS = {"n_queries": NONNEG_INT, "n_keys": NONNEG_INT}


def qkv_specs(*, lead_tied=(0, 1)) -> dict[str, T]:
    """q (B, H, N, d), k (B, H, M, d), v (B, H, M, d_v) for functions with broadcasting leading dims."""
    return {
        "q": T(min_rank=2, tied=lead_tied + (-1,)),
        "k": T(min_rank=2, tied=lead_tied + (-2, -1)),
        "v": T(min_rank=2, tied=lead_tied + (-2,)),
    }


def qkv(s, *, d_v=None) -> dict[str, torch.Tensor]:
    return {"q": r(s.b, s.h, s.n, s.d), "k": r(s.b, s.h, s.m, s.d), "v": r(s.b, s.h, s.m, d_v or s.d + 1)}


def _module_calls(cls, init_kwargs, init_specs, forward, forward_kwargs, forward_specs):
    """A call of the constructor and a call of ``forward(module, **kwargs)`` on a built module."""
    module = cls(**init_kwargs).eval()
    return [Call(cls, dict(init_kwargs), init_specs, "init"),
            Call(lambda **kw: forward(module, **kw), forward_kwargs, forward_specs, "forward")]


SCALE = Bad(0.0, -1.0, float("nan"), float("inf"), "1", True)  # None or a positive finite number


FLAG = Bad()  # a bool: anything truthy works as True, so nothing to refuse


# Not fuzzed: an exception class and a frozen record of four ints, neither of
# which takes an argument a caller could get wrong in an interesting way.
NOT_FUZZED = {
    "distributed.context_parallel.PeerTimeoutError": "an exception class: its one argument is the message",
    "linear.sparse_attention.AttentionCost": "a frozen dataclass of four counts, built only by the *_decode_cost functions",
    "efficiency.prefix_cache.RadixCache": "its constructor takes no argument; insert and match take token lists",
}


# ----------------------------------------------------------------------------
# The tests, collected by each area's file over its own entries
# ----------------------------------------------------------------------------

SIZES = st.builds(
    SimpleNamespace,
    b=st.integers(2, 3), h=st.integers(2, 3), n=st.integers(2, 4), m=st.integers(2, 5), d=st.sampled_from([2, 4]),
)


def _names_in(message: str, names: tuple[str, ...]) -> bool:
    return any(re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)", message) for n in names)


def _complaint(call: Call, arg: str, how: str, make: Callable[[], Any], names: tuple[str, ...]) -> str | None:
    """Call with ``arg`` broken by ``make``; None if a good error came, else what went wrong."""
    context = f"[{call.label}] with {arg} = {how}"
    try:
        call.fn(**{**call.kwargs, arg: make()})
    except (ValueError, TypeError) as error:
        message = str(error)
        if not _names_in(message, (arg,) + names):
            return f"{context}: the message does not name {arg!r}: {message}"
        if "got" not in message:
            return f"{context}: the message does not say what it got: {message}"
        return None
    except Exception as error:  # noqa: BLE001 - the point of the test
        return f"{context}: raised {type(error).__name__} instead of ValueError/TypeError: {error}"
    return f"{context}: no error was raised"


def fuzz_tests(*prefixes: str):
    """The three fuzz tests, parametrised over the entries whose key starts with a prefix."""
    caller = sys._getframe(1).f_globals["__name__"]  # only the entries the calling file registered
    keys = sorted(k for k in FUZZ if k.startswith(prefixes) and OWNER[k] == caller)
    SWEPT.update(keys)

    @pytest.mark.parametrize("key", keys)
    def test_valid_calls_run(key):
        """Every entry's unbroken call works, so an error in the fuzz test is the broken argument's."""
        torch.default_generator.manual_seed(0)  # CPU only: cheaper than torch.manual_seed per example
        for call in FUZZ[key](SimpleNamespace(b=2, h=2, n=3, m=4, d=2)):
            call.fn(**call.kwargs)

    @pytest.mark.parametrize("key", keys)
    def test_every_way_to_break_each_argument_once(key):
        """Deterministic sweep: every mutation of every argument, once, at fixed sizes."""
        torch.default_generator.manual_seed(0)
        complaints = []
        for call in FUZZ[key](SimpleNamespace(b=2, h=3, n=3, m=4, d=2)):
            for arg, spec in call.specs.items():
                for how, make in spec.mutations(call.kwargs.get(arg)):
                    complaint = _complaint(call, arg, how, make, spec.names)
                    if complaint:
                        complaints.append(complaint)
        assert not complaints, f"{key}:\n" + "\n".join(complaints)

    @pytest.mark.parametrize("key", keys)
    @settings(max_examples=25, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.function_scoped_fixture])
    @given(data=st.data())
    def test_malformed_input_gets_a_named_error(key, data):
        torch.default_generator.manual_seed(0)  # CPU only: cheaper than torch.manual_seed per example
        sizes = data.draw(SIZES, label="sizes")
        calls = [c for c in FUZZ[key](sizes)
                 if any(spec.mutations(c.kwargs.get(arg)) for arg, spec in c.specs.items())]
        if not calls:
            return  # nothing about this callable's arguments is worth refusing
        call = data.draw(st.sampled_from(calls), label="call")
        arg = data.draw(st.sampled_from(sorted(a for a, spec in call.specs.items()
                                                if spec.mutations(call.kwargs.get(a)))), label="argument")
        spec = call.specs[arg]
        base = call.kwargs.get(arg)
        how, make = data.draw(st.sampled_from(spec.mutations(base)), label="mutation")
        complaint = _complaint(call, arg, how, make, spec.names)
        assert complaint is None, f"{key} {complaint}"

    return test_valid_calls_run, test_every_way_to_break_each_argument_once, test_malformed_input_gets_a_named_error


__all__ = [n for n in dir() if not n.startswith("__")]
