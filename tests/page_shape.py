"""What a teaching page shows open, and how much of snippets/ is checking.

Shared by ``tests/test_page_shape.py`` and ``bench/page_shape.py``: the first
asserts the limits, the second prints the figures.

A page shows an included section *open* unless the include sits inside a
collapsed ``???`` block (``???+`` opens by default, so it counts as open).
"""

from __future__ import annotations

import ast
import io
import pathlib
import re
import statistics
import tokenize
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parents[1]
SNIPPETS = ROOT / "snippets"
TEACHING_AREAS = ("foundations", "attention", "architecture", "modern", "efficiency",
                  "linear", "distributed", "history")
MAX_OPEN_LINES = 20
MAX_LINE = 88

INCLUDE = re.compile(r'^(?P<indent>\s*)--8<--\s+"(?P<path>[^":]+)(?::(?P<section>[\w-]+))?"')
FOLD = re.compile(r"^(?P<indent>\s*)\?\?\?(?P<open>\+?)\s")
FENCE = re.compile(r"^\s*(```|~~~)")


def teaching_pages() -> list[pathlib.Path]:
    return sorted(p for area in TEACHING_AREAS for p in (ROOT / "docs" / area).glob("*.md"))


def section_lines(path: str, section: str | None) -> list[str]:
    """The lines pymdownx.snippets includes for ``path[:section]`` (markers dropped)."""
    lines = (SNIPPETS / path).read_text().splitlines()
    if section is not None:
        start = next(i for i, l in enumerate(lines) if re.search(rf"--8<-- \[start:{section}\]", l))
        end = next(i for i, l in enumerate(lines) if re.search(rf"--8<-- \[end:{section}\]", l))
        lines = lines[start + 1:end]
    return [l for l in lines if not re.search(r"--8<-- \[(start|end):", l)]


@dataclass
class Include:
    page: pathlib.Path
    lineno: int
    path: str
    section: str | None
    folded: bool

    @property
    def lines(self) -> list[str]:
        return section_lines(self.path, self.section)

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT / 'docs')}:{self.lineno} {self.path}:{self.section}"


def includes(page: pathlib.Path) -> list[Include]:
    """Every snippet include on a page, and whether a collapsed block hides it."""
    found, folds = [], []  # folds: indents of the enclosing ??? blocks (True = collapsed)
    for lineno, line in enumerate(page.read_text().splitlines(), 1):
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        while folds and indent <= folds[-1][0]:
            folds.pop()
        fold = FOLD.match(line)
        if fold:
            folds.append((indent, not fold.group("open")))
            continue
        m = INCLUDE.match(line)
        if m:
            found.append(Include(page, lineno, m.group("path"), m.group("section"),
                                 any(collapsed for _, collapsed in folds)))
    return found


def long_docstrings(lines: list[str]) -> list[str]:
    """Docstrings (triple-quoted strings that stand alone) longer than one line."""
    text = "\n".join(lines)
    out = []
    for m in re.finditer(r'(?m)^\s*[rb]?("""|\'\'\')(.*?)\1', text, flags=re.S):
        if "\n" in m.group(2).strip():
            out.append(m.group(2).strip().splitlines()[0])
    return out


def has_raise(lines: list[str]) -> bool:
    return any(re.match(r"\s*raise\b", l) for l in lines)


# ----------------------------------------------------------------------------
# The checks share of snippets/
# ----------------------------------------------------------------------------


def _code_lines(source: str) -> set[int]:
    """Line numbers that hold code: not blank, not only a comment, not a docstring."""
    tree = ast.parse(source)
    doc = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None),
                                                                     ast.Constant) \
                    and isinstance(body[0].value.value, str):
                doc.update(range(body[0].lineno, body[0].end_lineno + 1))
    code = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                        tokenize.DEDENT, tokenize.ENDMARKER):
            continue
        code.update(range(tok.start[0], tok.end[0] + 1))
    return code - doc


def check_lines(source: str) -> set[int]:
    """Lines that check input: ``_check*`` definitions, their calls, ``if ...: raise`` blocks."""
    tree = ast.parse(source)
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith(
                ("_check", "_validate")):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            out.update(range(first, node.end_lineno + 1))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            f = node.value.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name.startswith(("_check", "_validate")):
                out.update(range(node.lineno, node.end_lineno + 1))
        elif isinstance(node, ast.If) and node.body and all(isinstance(s, ast.Raise) for s in node.body):
            out.update(range(node.lineno, node.body[-1].end_lineno + 1))
        elif isinstance(node, ast.Raise):
            out.update(range(node.lineno, node.end_lineno + 1))
    return out


def checks_share(files: list[pathlib.Path] | None = None) -> tuple[int, int]:
    """(check lines, code lines) over snippet files."""
    files = files if files is not None else sorted(SNIPPETS.rglob("*.py"))
    checks = code = 0
    for path in files:
        source = path.read_text()
        lines = _code_lines(source)
        code += len(lines)
        checks += len(lines & check_lines(source))
    return checks, code


def open_includes() -> list[Include]:
    return [inc for page in teaching_pages() for inc in includes(page) if not inc.folded]


def figures() -> dict[str, float]:
    opened = open_includes()
    lengths = [len(inc.lines) for inc in opened]
    checks, code = checks_share()
    return {
        "open blocks": len(opened),
        "median open block (lines)": statistics.median(lengths) if lengths else 0,
        "open blocks longer than 20 lines": sum(n > MAX_OPEN_LINES for n in lengths),
        "open blocks with a raise": sum(has_raise(inc.lines) for inc in opened),
        "checks share of snippet code": checks / code,
        "snippet lines over 88 characters": sum(
            len(l) > MAX_LINE for p in SNIPPETS.rglob("*.py") for l in p.read_text().splitlines()),
    }


def open_lines_on(page: str) -> int:
    return sum(len(inc.lines) for inc in includes(ROOT / "docs" / page) if not inc.folded)
