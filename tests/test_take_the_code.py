"""The "Take the code" box says what each snippet file needs, and the claim holds.

``hooks/pages.py`` reads each included file's imports and names the packages
beyond the standard library. Here the same reading is checked against the truth
for every snippet: a copy of the file imports in a fresh interpreter whose only
third-party packages are the ones the box names (anything else is blocked), so a
file that needs an unnamed package fails. The README names the one exception.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hooks"))

from pages import _needs_words, snippet_needs  # noqa: E402

FILES = sorted(p for p in (ROOT / "snippets").rglob("*.py") if p.name != "__init__.py")

BLOCKER = """
import builtins, importlib, os, sys
allowed = set(sys.argv[1].split(",")) if sys.argv[1] else set()
target = os.path.join(sys.argv[2], sys.argv[3] + ".py")
real_import = builtins.__import__
def guarded(name, globals=None, locals=None, fromlist=(), level=0):
    # Refuse a third-party package that the snippet file itself imports and the
    # box does not name; what torch or triton import for themselves is theirs.
    top = name.split(".")[0]
    if level == 0 and (globals or {}).get("__file__") == target and top not in allowed \\
            and top not in sys.stdlib_module_names and top != "__future__":
        raise ImportError(f"blocked: {name}")
    return real_import(name, globals, locals, fromlist, level)
builtins.__import__ = guarded
sys.path.insert(0, sys.argv[2])
importlib.import_module(sys.argv[3])
print("ok")
"""


def test_the_box_names_triton_for_the_triton_file_and_pytorch_only_elsewhere():
    needs = {p.relative_to(ROOT / "snippets").as_posix(): snippet_needs(p) for p in FILES}
    assert needs["efficiency/flash_triton.py"] == ["torch", "triton"]
    assert _needs_words(needs["efficiency/flash_triton.py"]) == "PyTorch and Triton"
    assert _needs_words(["torch"]) == "only PyTorch"
    assert _needs_words([]) == "only the standard library"
    others = {rel: n for rel, n in needs.items()
              if n not in (["torch"], []) and rel != "efficiency/flash_triton.py"}
    assert not others, f"files that need more than PyTorch: {others}"
    assert "flash_triton.py` needs Triton" in (ROOT / "README.md").read_text()


@pytest.mark.parametrize("path", FILES, ids=[p.relative_to(ROOT / "snippets").as_posix() for p in FILES])
def test_each_file_imports_with_only_what_the_box_names(path, tmp_path):
    (tmp_path / path.name).write_text(path.read_text())
    allowed = ",".join(snippet_needs(path))
    env = {"TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, "-c", BLOCKER, allowed, str(tmp_path), path.stem],
                         capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-2000:]


def test_the_check_catches_an_unnamed_package(tmp_path):
    (tmp_path / "needs_numpy.py").write_text("import torch\nimport numpy\n")
    run = subprocess.run([sys.executable, "-c", BLOCKER, "torch", str(tmp_path), "needs_numpy"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode != 0 and "blocked: numpy" in run.stderr
