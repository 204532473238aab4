"""Every identity in the equivalence ledger holds to its stated tolerance.

The same functions feed the ledger page and the "proven" badges at build time
(``hooks/ledger.py``); here each must hold, and the registry must be large
enough that the ledger page means something.
"""

from __future__ import annotations

import math
import re

import pytest

from identities import ROOT_DOCS, load_all, measure, missing_needs

IDENTITIES = load_all()


@pytest.mark.parametrize("key", sorted(IDENTITIES))
def test_identity_holds(key):
    ident = IDENTITIES[key]
    missing = missing_needs(ident)
    if missing:
        from transformers_support import IN_CI  # skip locally, fail under CI=true

        (pytest.fail if IN_CI else pytest.skip)(f"{key} needs {', '.join(missing)}")
    result = measure(ident)
    assert result.error is not None and math.isfinite(result.error), f"{key}: error {result.error}"
    assert result.error <= ident.tol, f"{key}: {ident.claim}: error {result.error:.3g} > tolerance {ident.tol:.3g}"


@pytest.mark.parametrize("key", sorted(IDENTITIES))
def test_identity_names_a_real_page(key):
    ident = IDENTITIES[key]
    assert (ROOT_DOCS / ident.page).is_file(), f"{key}: page {ident.page} does not exist"
    assert re.fullmatch(r"[a-z0-9][a-z0-9-]*", key), f"{key}: keys are lower-case words joined by hyphens"
