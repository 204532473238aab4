"""Pages that build on the previous one highlight exactly the lines that are new.

Naive self-attention -> self-attention -> causal self-attention: each later
page shows its kernel with Material's ``hl_lines`` on the code block. The
highlight is computed here again with ``difflib`` from the two kernels as the
page includes them, so a change to either file that moves or adds a line fails
this test until the page's ``hl_lines`` follows.
"""

from __future__ import annotations

import difflib
import re
import textwrap

import pytest

from page_shape import ROOT, section_lines

# (page, the kernel it shows, the previous page's kernel it builds on)
PROGRESSIONS = [
    ("attention/self-attention.md", "attention/self_attention.py:forward",
     "attention/naive_self_attention.py:kernel"),
    ("attention/causal.md", "attention/causal.py:forward",
     "attention/self_attention.py:forward"),
]

BLOCK = re.compile(r'^(?P<indent> *)```python(?P<attrs>[^\n]*)\n(?P=indent)--8<-- "(?P<inc>[^"]+)"\n',
                   re.M)


def kernel_lines(include: str) -> list[str]:
    """The lines of ``path:section`` as the page shows them (dedented, like the build)."""
    path, section = include.split(":")
    text = textwrap.dedent("\n".join(section_lines(path, section)))
    return [line.rstrip() for line in text.splitlines()]


def new_lines(previous: list[str], current: list[str]) -> set[int]:
    """1-based numbers of the lines of ``current`` that ``previous`` does not have."""
    matcher = difflib.SequenceMatcher(a=previous, b=current, autojunk=False)
    kept = {j for tag, _, _, j1, j2 in matcher.get_opcodes() if tag == "equal"
            for j in range(j1, j2)}
    return {j + 1 for j in range(len(current)) if j not in kept}


def parse_hl_lines(attrs: str) -> set[int] | None:
    m = re.search(r'hl_lines="([^"]*)"', attrs)
    if m is None:
        return None
    out: set[int] = set()
    for part in m.group(1).split():
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


@pytest.mark.parametrize("page, include, previous", PROGRESSIONS,
                         ids=[p for p, _, _ in PROGRESSIONS])
def test_hl_lines_mark_what_is_new(page, include, previous):
    text = (ROOT / "docs" / page).read_text()
    blocks = [m for m in BLOCK.finditer(text) if m.group("inc") == include]
    assert blocks, f"{page} does not show {include}"
    shown = parse_hl_lines(blocks[0].group("attrs"))
    assert shown is not None, f"{page}: the block of {include} has no hl_lines"
    current = kernel_lines(include)
    want = new_lines(kernel_lines(previous), current)
    assert want, f"{include} has nothing new over {previous}"
    assert shown == want, (
        f"{page}: hl_lines marks {sorted(shown)} but the lines new over {previous} are "
        f"{sorted(want)}:\n" + "\n".join(f"{i:3} {'+' if i in want else ' '} {line}"
                                          for i, line in enumerate(current, 1)))


def test_the_diff_sees_a_changed_line():
    """The counter itself: one changed line and one added line are new, the rest is not."""
    before = ["def f(x):", "    y = x + 1", "    return y"]
    after = ["def f(x):", "    y = x + 2", "    z = y", "    return y"]
    assert new_lines(before, after) == {2, 3}
    assert parse_hl_lines(' title="a" hl_lines="1 3-5"') == {1, 3, 4, 5}
