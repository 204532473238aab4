"""The "Take the code" box says what each snippet file needs, and the claim holds.

``hooks/pages.py`` reads each included file's imports and names the packages
beyond the standard library. Here the same reading is checked against the truth
for every snippet: a copy of the file imports in a fresh interpreter whose only
third-party packages are the ones the box names (anything else is blocked), so a
file that needs an unnamed package fails. The README names the one exception.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hooks"))

from pages import _needs_words, snippet_needs  # noqa: E402

FILES = sorted(p for p in (ROOT / "snippets").rglob("*.py") if p.name != "__init__.py")

# One fresh interpreter imports many copied files, each from its own folder
# with only that folder on the path, and forgets each module afterwards, so no
# file can lean on another; a file that imports a third-party package its box
# does not name is refused. Prints one JSON object: stem -> "ok" or the error.
BLOCKER = """
import builtins, importlib, json, sys, traceback
jobs = json.loads(sys.argv[1])  # [[allowed packages, folder, module name], ...]
targets = {}
real_import = builtins.__import__
def guarded(name, globals=None, locals=None, fromlist=(), level=0):
    # Refuse a third-party package that a snippet file itself imports and its
    # box does not name; what torch or triton import for themselves is theirs.
    allowed = targets.get((globals or {}).get("__file__"))
    top = name.split(".")[0]
    if allowed is not None and level == 0 and top not in allowed \\
            and top not in sys.stdlib_module_names and top != "__future__":
        raise ImportError(f"blocked: {name}")
    return real_import(name, globals, locals, fromlist, level)
builtins.__import__ = guarded
results, base = {}, [p for p in sys.path if p not in ("", ".")]  # no working folder
for allowed, folder, stem in jobs:
    targets[f"{folder}/{stem}.py"] = set(allowed)
    sys.path[:] = [folder] + base
    try:
        importlib.import_module(stem)
        results[folder + "/" + stem] = "ok"
    except BaseException:
        results[folder + "/" + stem] = traceback.format_exc(limit=3)
    finally:
        sys.modules.pop(stem, None)
        sys.path[:] = base
print(json.dumps(results))
"""


def _import_alone(jobs: list[tuple[list[str], pathlib.Path, str]]) -> dict[str, str]:
    """Run BLOCKER over (allowed, folder, stem) jobs; folder/stem -> "ok" or the error."""
    env = {"TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin"}
    payload = json.dumps([[a, str(f), stem] for a, f, stem in jobs])
    run = subprocess.run([sys.executable, "-c", BLOCKER, payload], capture_output=True, text=True,
                         timeout=600, env=env, cwd=jobs[0][1])
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def imported_alone(tmp_path_factory) -> dict[pathlib.Path, str]:
    """Every snippet file copied into a folder of its own and imported alone,
    all in one interpreter (starting one per file cost about 2.4 s each)."""
    jobs, keys = [], {}
    for path in FILES:
        folder = tmp_path_factory.mktemp("alone")
        (folder / path.name).write_text(path.read_text())
        jobs.append((snippet_needs(path), folder, path.stem))
        keys[f"{folder}/{path.stem}"] = path
    return {keys[k]: v for k, v in _import_alone(jobs).items()}


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
def test_each_file_imports_with_only_what_the_box_names(path, imported_alone):
    assert imported_alone[path] == "ok", imported_alone[path][-2000:]


def test_the_check_catches_an_unnamed_package_and_a_sibling_import(tmp_path):
    for name, text in {"a/plain.py": "import torch\n", "b/needs_numpy.py": "import torch\nimport numpy\n",
                       "c/leans.py": "import plain\n", "d/fine_again.py": "import json\nimport torch\n"}.items():
        (tmp_path / name).parent.mkdir()
        (tmp_path / name).write_text(text)
    found = _import_alone([(["torch"], tmp_path / "a", "plain"), (["torch"], tmp_path / "b", "needs_numpy"),
                           (["torch", "plain"], tmp_path / "c", "leans"), (["torch"], tmp_path / "d", "fine_again")])
    assert found[f"{tmp_path}/a/plain"] == "ok" and found[f"{tmp_path}/d/fine_again"] == "ok", found
    assert "blocked: numpy" in found[f"{tmp_path}/b/needs_numpy"], found
    # Even with "plain" allowed, and imported from another folder first, c/ must not see it.
    assert "No module named 'plain'" in found[f"{tmp_path}/c/leans"], found
