"""The README's install lines are what CI runs, in a `.venv` inside the clone,
and every requirement is pinned exactly."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"


def _readme_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Install and serve", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def _installs(commands: list[str]) -> list[str]:
    """Every `python -m pip install ...` part of the README's commands, in order."""
    parts = [part.strip() for command in commands for part in command.split("&&")]
    return [part for part in parts if part.startswith("python -m pip install")]


def test_readme_has_the_venv_the_install_and_the_test_command():
    commands = _readme_commands()
    assert commands[0].startswith("python3 -m venv .venv"), commands
    installs = _installs(commands)
    # A Linux reader without a GPU gets the CPU build as written: torch comes
    # from PyTorch's CPU index before anything else is installed.
    assert installs[0].startswith("python -m pip install torch==") and CPU_INDEX in installs[0], installs
    pinned = re.search(r"torch==(\S+)", installs[0]).group(1)
    docs = (ROOT / "requirements-docs.txt").read_text(encoding="utf-8")
    assert f"torch=={pinned}\n" in docs, f"the README installs torch {pinned}, requirements-docs.txt pins another"
    assert any(c.startswith("python -m pip install -r requirements.txt") and c.endswith("&& mkdocs serve") for c in commands)
    assert commands[-1] == "python -m pytest"


def test_ci_runs_the_readme_commands_in_a_venv_inside_the_clone():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    lines = [line.strip() for line in ci.splitlines() if line.strip() and not line.strip().startswith("#")]
    commands = _readme_commands()
    assert "python3 -m venv .venv" in lines
    assert ". .venv/bin/activate" in lines
    # Each install of the README, exactly, in the same order, after the venv is active.
    ci_installs = [line for line in lines if line.startswith("python -m pip install")]
    assert ci_installs == _installs(commands), (ci_installs, _installs(commands))
    assert lines.index(". .venv/bin/activate") < min(i for i, line in enumerate(lines) if "pip install" in line)
    assert lines[-1] == commands[-1] == "python -m pytest"


def test_gitignore_expects_the_venv_inside_the_clone():
    assert "/.venv/" in (ROOT / ".gitignore").read_text(encoding="utf-8").split()


PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[\w,-]+\])?==[0-9][\w.+!-]*(\s*;\s*[^#]+)?$")


def test_every_requirement_is_an_exact_pin():
    """requirements*.txt name exact versions (`==`), so a build made today
    and one made next year install the same packages; `-r` lines include
    another pinned file."""
    files = sorted(ROOT.glob("requirements*.txt"))
    assert {p.name for p in files} >= {"requirements.txt", "requirements-docs.txt", "requirements-extra.txt"}
    loose = []
    for path in files:
        for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            line = raw.split(" #", 1)[0].strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("-r "):
                assert (ROOT / line[3:].strip()).is_file(), f"{path.name}:{number} includes a missing file"
                continue
            if not PIN.match(line):
                loose.append(f"{path.name}:{number}: {line}")
    assert not loose, "not an exact == pin:\n" + "\n".join(loose)
