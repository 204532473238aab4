"""Keep Python's cycle collector off the objects a process holds for its life.

A build process holds millions of objects that live until it ends: torch,
matplotlib, nbconvert, the theme, the parsed API. Every full collection of the
cycle collector walks all of them, and a build triggers about twenty: 5.7 s of
a cold build's CPU went to those walks, and in an example kernel, IPython's
``%reset`` walked them once per example (0.2 s each). ``settle`` collects once
and moves the survivors to the permanent generation (``gc.freeze``), so later
collections walk only the objects made since; nothing live is ever freed by a
collection, so what the process computes does not change.

A frozen object is never freed, even once it is garbage. The build process
settles in its first build (before and while it draws the figures) and in any
build that draws more than two figure scripts; a rebuild after one edit does
not, since it would walk every object made since the first build for the sake
of a figure or two. What the first build held when it settled (its
configuration, its file list) then stays when a rebuild of ``mkdocs serve``
replaces it: once per process, not once per rebuild.

``release`` hands the frozen objects back to the collector. The ledger's
process, which loads triton, calls it before it exits: the final collection
skips frozen objects, and triton's bindings would print a page of "leaked"
objects at exit.
"""

from __future__ import annotations

import gc


_settled: list[bool] = []


def settle() -> None:
    """Collect the garbage there is, then freeze every object that survived."""
    gc.collect()
    gc.freeze()
    _settled[:] = [True]


def settled() -> bool:
    """Whether this process has settled before."""
    return bool(_settled)


def release() -> None:
    """Return every frozen object to the collector."""
    gc.unfreeze()
