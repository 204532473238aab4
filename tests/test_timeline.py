"""Exercise 1 of docs/history/timeline.md: Nadaraya-Watson kernel regression (1964)
with a Gaussian kernel is scaled dot-product attention with scale 1/h^2 and a
per-key bias -||k_j||^2 / (2 h^2).

Oracle: the estimator written out as a ratio of sums, against PyTorch's
F.scaled_dot_product_attention and the site's own function.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F
from torch.testing import assert_close

from snippets.foundations.scaled_dot_product import scaled_dot_product_attention


def _nadaraya_watson(x_new, x_known, y_known, h):
    """f(x) = sum_j K(x - x_j) y_j / sum_m K(x - x_m), K(u) = exp(-||u||^2 / (2 h^2))."""
    out = torch.zeros(x_new.shape[0], y_known.shape[1], dtype=x_new.dtype)
    for i, x in enumerate(x_new):
        kernel = [math.exp(-float(((x - xj) ** 2).sum()) / (2 * h**2)) for xj in x_known]
        total = sum(kernel)
        out[i] = sum(kj * yj for kj, yj in zip(kernel, y_known)) / total
    return out


def test_kernel_regression_is_attention():
    torch.manual_seed(0)
    h = 0.7
    x_known = torch.randn(12, 2, dtype=torch.float64)  # keys x_j
    y_known = torch.sin(x_known).sum(-1, keepdim=True)  # values y_j
    x_new = torch.randn(5, 2, dtype=torch.float64)  # queries x
    bias = (-(x_known**2).sum(-1) / (2 * h**2)).expand(5, 12)  # (N, M) float mask, one bias per key
    want = _nadaraya_watson(x_new, x_known, y_known, h)
    got = F.scaled_dot_product_attention(x_new, x_known, y_known, attn_mask=bias, scale=1 / h**2)
    assert_close(got, want)
    ours, _ = scaled_dot_product_attention(x_new, x_known, y_known, attn_mask=bias, scale=1 / h**2)
    assert_close(ours, want)
    # without the per-key bias it is not kernel regression
    plain = F.scaled_dot_product_attention(x_new, x_known, y_known, scale=1 / h**2)
    assert not torch.allclose(plain, want)


def _timeline_tables():
    """{section title: [(year, row text), ...]} for each table of docs/history/timeline.md."""
    from pathlib import Path
    import re

    text = (Path(__file__).resolve().parents[1] / "docs" / "history" / "timeline.md").read_text(encoding="utf-8")
    tables = {}
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        title = section.splitlines()[0]
        rows = [(int(m.group(1)), m.group(0)) for m in re.finditer(r"^\| (\d{4}) \|.*$", section, re.M)]
        if rows:
            tables[title] = rows
    return tables


def test_timeline_runs_to_2026_in_order():
    tables = _timeline_tables()
    modern = tables["The modern decoder (2023 to 2026)"]
    assert max(year for year, _ in modern) == 2026 and min(year for year, _ in modern) == 2023
    for title, rows in tables.items():
        years = [year for year, _ in rows]
        assert years == sorted(years), f"{title}: rows out of order {years}"
        assert all("arXiv:" in row or "doi" in row.lower() or "report" in row.lower() or "Sankhy" in row
                   for _, row in rows), title
    for name in ("DeepSeek-V2", "Gemma 3", "gpt-oss", "Kimi K2", "DeepSeek-V4"):
        assert any(name in row for _, row in modern), name
