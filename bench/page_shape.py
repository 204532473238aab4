"""Print what the teaching pages show open and the checks share of snippets/.

    python bench/page_shape.py

The same counter that ``tests/test_page_shape.py`` asserts with.
"""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))

import page_shape  # noqa: E402


def main() -> None:
    if len(sys.argv) > 1:  # one area: python bench/page_shape.py modern
        area = sys.argv[1]
        if not (page_shape.SNIPPETS / area).is_dir():
            areas = sorted(p.name for p in page_shape.SNIPPETS.iterdir() if p.is_dir())
            sys.exit(f"usage: python bench/page_shape.py [AREA]; AREA is one of {', '.join(areas)}, "
                     f"got {area!r}")
        checks, code = page_shape.checks_share(sorted((page_shape.SNIPPETS / area).rglob("*.py")))
        opened = [inc for inc in page_shape.open_includes() if inc.page.parent.name == area]
        print(f"{area}: checks {checks} of {code} code lines ({checks / code:.1%}); "
              f"{len(opened)} open blocks, {sum(len(i.lines) > 20 for i in opened)} over 20 lines, "
              f"{sum(page_shape.has_raise(i.lines) for i in opened)} with a raise")
        return
    for name, value in page_shape.figures().items():
        print(f"{name}: {value:.1%}" if isinstance(value, float) and value < 1 and "share" in name
              else f"{name}: {value}")
    for page in ("foundations/scaled-dot-product.md", "attention/multi-head.md",
                 "modern/latent-attention.md"):
        print(f"code lines shown open on {page}: {page_shape.open_lines_on(page)}")


if __name__ == "__main__":
    main()
