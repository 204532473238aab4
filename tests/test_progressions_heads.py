"""Progressions shown as diffs: the highlighted lines of a kernel are exactly the
lines that differ from the kernel of the page before.

multi-head builds on causal self-attention and grouped-query on multi-head: each
page highlights the new lines of its ``forward`` with Material's ``hl_lines`` on
the code block (no marker comments in the files). The expected ranges are
computed here with difflib, so a highlight cannot drift from the code.
"""

from __future__ import annotations

import difflib
import re
import textwrap

import pytest

from page_shape import ROOT, section_lines

# (page, the kernel it shows, the kernel of the page it builds on)
PROGRESSIONS = [
    ("attention/multi-head.md", "attention/multi_head.py:forward", "attention/causal.py:forward"),
    ("attention/grouped-query.md", "attention/grouped_query.py:forward",
     "attention/multi_head.py:forward"),
]


def kernel(spec: str) -> list[str]:
    path, section = spec.split(":")
    lines = textwrap.dedent("\n".join(section_lines(path, section))).splitlines()
    return [line.rstrip() for line in lines]


def new_lines(before: list[str], after: list[str]) -> set[int]:
    """1-based numbers of the lines of ``after`` that ``before`` does not have."""
    matcher = difflib.SequenceMatcher(a=[l.strip() for l in before],
                                      b=[l.strip() for l in after], autojunk=False)
    out: set[int] = set()
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            out.update(range(j1 + 1, j2 + 1))
    return out


def ranges(numbers: set[int]) -> str:
    """{1, 2, 3, 5} -> "1-3 5", the way hl_lines writes them."""
    out, run = [], []
    for n in sorted(numbers):
        if run and n != run[-1] + 1:
            out.append(run)
            run = []
        run.append(n)
    if run:
        out.append(run)
    return " ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in out)


def parse_hl_lines(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split():
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def highlighted(page: str, spec: str) -> set[int] | None:
    """The hl_lines of the code block on ``page`` that includes ``spec``."""
    lines = (ROOT / "docs" / page).read_text().splitlines()
    fence = None
    for line in lines:
        if line.lstrip().startswith("```"):
            fence = line
        if f'--8<-- "{spec}"' in line and fence is not None:
            m = re.search(r'hl_lines="([^"]*)"', fence)
            return parse_hl_lines(m.group(1)) if m else set()
    return None


@pytest.mark.parametrize("page, new, old", PROGRESSIONS, ids=[p[0] for p in PROGRESSIONS])
def test_highlight_marks_exactly_the_new_lines(page, new, old):
    shown = highlighted(page, new)
    assert shown is not None, f"{page} does not include {new}"
    want = new_lines(kernel(old), kernel(new))
    assert want, f"{new} has no line that {old} lacks: nothing to highlight"
    assert shown == want, (f"{page}: the block of {new} highlights {ranges(shown)!r}, "
                           f'but the lines new since {old} are hl_lines="{ranges(want)}"')


def test_the_diff_helpers():
    assert new_lines(["a", "b", "c"], ["a", "x", "c", "d"]) == {2, 4}
    assert ranges({1, 2, 3, 5, 7, 8}) == "1-3 5 7-8"
    assert parse_hl_lines("1-3 5 7-8") == {1, 2, 3, 5, 7, 8}
