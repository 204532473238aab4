"""Hugging Face ``transformers`` as a test oracle: skip locally without it, fail in CI.

The README's install line installs ``requirements-extra.txt``; a reader who
skipped it still gets a green local run of everything else. Under ``CI=true``
(where ``.ci/run`` installs it) a missing library fails each test instead.
"""

from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")

try:
    import transformers
    MISSING = ""
except ImportError as error:  # pragma: no cover - depends on the environment
    transformers = None
    # installed but not importable (a dependency too old, say) says why
    MISSING = ("transformers is not installed: pip install -r requirements-extra.txt"
               + ("" if isinstance(error, ModuleNotFoundError) and error.name == "transformers"
                  else f" (importing it failed: {error})"))


def skip_module_without_transformers() -> None:
    """Skip the calling test module when the library is missing, except in CI."""
    if transformers is None and not IN_CI:
        pytest.skip(MISSING, allow_module_level=True)


def require_transformers():
    """The ``transformers`` module; in CI a missing library fails the test, not skips it."""
    if transformers is None:
        pytest.fail(MISSING, pytrace=False)
    return transformers
