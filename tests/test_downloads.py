"""Downloads run where a reader puts them.

Each executed example is offered as a zip (hooks/examples.py): the example,
the project files it imports and the data files it opens. Unpacked in a
folder far from the repository, with no PYTHONPATH, every import of every
example resolves, and one example runs from start to end.

The README's copy-a-snippet block runs verbatim next to the copied file.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p for p in (ROOT / "docs" / "examples").glob("*.py") if not p.name.startswith("_"))


def _hook():
    spec = importlib.util.spec_from_file_location("hook_examples_downloads", ROOT / "hooks" / "examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
    env["MPLBACKEND"] = "Agg"
    return env


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, pathlib.Path]:
    """Every example's zip, written by the hook and unpacked: name -> folder."""
    hook = _hook()
    out = tmp_path_factory.mktemp("downloads")
    folders = {}
    for example in EXAMPLES:
        archive = out / f"{example.stem}.zip"
        hook.write_bundle(example, ROOT, archive)
        with zipfile.ZipFile(archive) as opened:
            names = opened.namelist()
            assert all(n.startswith(f"{example.stem}/") for n in names), names
            opened.extractall(out / "unpacked")
        folders[example.stem] = out / "unpacked" / example.stem
    return folders


# Run in a fresh interpreter: for each unpacked example, the import statements
# of the example (only those) with that folder first on the path, as
# `python example.py` would have it. The project's own modules are unloaded
# between examples, so each folder must provide them itself.
IMPORTS_ONLY = r"""
import ast, json, sys
folders = json.loads(sys.argv[1])
own = ("snippets", "bench", "_plotting")
problems = {}
for name, folder in folders.items():
    for mod in [m for m in sys.modules if m.split(".")[0] in own]:
        del sys.modules[mod]
    sys.path[0] = folder
    source = open(f"{folder}/{name}.py", encoding="utf-8").read()
    tree = ast.parse(source)
    imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    try:
        exec(compile(ast.Module(body=imports, type_ignores=[]), name, "exec"), {})
        for mod in [m for m in sys.modules if m.split(".")[0] in own]:
            path = getattr(sys.modules[mod], "__file__", None) or ""
            if path and not path.startswith(folder):
                problems[name] = f"{mod} came from {path}"
    except Exception as exc:
        problems[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(problems))
"""


def test_every_example_zip_has_what_its_imports_need(bundles, tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", IMPORTS_ONLY, json.dumps({k: str(v) for k, v in bundles.items()})],
        cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    problems = json.loads(result.stdout.strip().splitlines()[-1])
    assert not problems, f"imports that fail from the unpacked zip: {problems}"


def test_data_files_an_example_opens_are_in_its_zip(bundles):
    opened = 0
    for example in EXAMPLES:
        for node in ast.walk(ast.parse(example.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("docs/"):
                if (ROOT / node.value).is_file():
                    opened += 1
                    assert (bundles[example.stem] / node.value).is_file(), f"{example.name}: {node.value}"
    assert opened >= 1, "no example opens a data file: the check checks nothing"


def test_readme_in_the_zip_names_what_to_run_and_install(bundles):
    readme = (bundles["local_global"] / "README.txt").read_text(encoding="utf-8")
    assert "python local_global.py" in readme
    assert "torch" in readme and "yaml" in readme and "pyyaml" in readme


def test_an_unpacked_example_runs_alone(bundles, tmp_path):
    # Moved away from where it was unpacked, as a reader would.
    folder = shutil.copytree(bundles["scaled_dot_product"], tmp_path / "elsewhere")
    result = subprocess.run(
        [sys.executable, "scaled_dot_product.py"], cwd=folder, env=_clean_env(),
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # The example's own check against PyTorch, printed as it runs.
    assert "every row of weights sums to 1: True" in result.stdout, result.stdout[-1000:]


# ----------------------------------------------------------------------------
# The README's "Copy a snippet into your project"
# ----------------------------------------------------------------------------
def _readme_copy_section() -> tuple[str, str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Copy a snippet into your project", 1)[1].split("\n## ", 1)[0]
    shell = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    python = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    return shell, python


def test_readme_copy_a_snippet_block_runs_verbatim(tmp_path):
    shell, python = _readme_copy_section()
    copied = re.search(r"^cp (snippets/\S+\.py) (\S+)/$", shell, re.M)
    assert copied, f"the README's copy line changed shape: {shell!r}"
    project = tmp_path / copied.group(2)
    project.mkdir()
    shutil.copy(ROOT / copied.group(1), project)
    (project / "readme_block.py").write_text(python, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "readme_block.py"], cwd=project, env=_clean_env(),
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, f"the README's Python block fails:\n{result.stderr[-2000:]}"
