"""Keep Python's cycle collector off the objects a process holds for its life.

A build process holds millions of objects that live until it ends: torch,
matplotlib, nbconvert, the theme, the parsed API. Every full collection of the
cycle collector walks all of them, and a build triggers about twenty: 5.7 s of
a cold build's CPU went to those walks, and in an example kernel, IPython's
``%reset`` walked them once per example (0.2 s each). ``settle`` collects once
and moves the survivors to the permanent generation (``gc.freeze``), so later
collections walk only the objects made since; nothing live is ever freed by a
collection, so what the process computes does not change.

``release`` hands the frozen objects back to the collector. ``mkdocs serve``
calls it at the start of each build: what the previous build held (its pages,
its navigation) can then be freed once the new build replaces it. A process
calls it before it exits too: the final collection skips frozen objects, and
triton's bindings then print a page of "leaked" objects at exit.
"""

from __future__ import annotations

import gc


def settle() -> None:
    """Collect the garbage there is, then freeze every object that survived."""
    gc.collect()
    gc.freeze()


def release() -> None:
    """Return every frozen object to the collector."""
    gc.unfreeze()
