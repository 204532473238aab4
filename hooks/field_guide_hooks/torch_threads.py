"""One torch thread for work the build process does on small tensors.

The figures and the explorer's tiny GPT compute on tensors far too small to
gain from a second thread, and the build shares the cores with the example
kernels: a second thread there only spins while it waits for a core. One thread
also gives the same numbers on every run. The build's own count is restored
afterwards.
"""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def one_thread():
    """Run the block with ``torch.set_num_threads(1)``, then restore the count."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
