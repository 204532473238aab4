"""The README's two commands are what CI runs, in a `.venv` inside the clone."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_readme_has_the_venv_the_install_and_the_test_command():
    commands = _readme_commands()
    assert commands[0].startswith("python3 -m venv .venv"), commands
    assert any(c.startswith("python -m pip install -r requirements.txt") and c.endswith("&& mkdocs serve") for c in commands)
    assert commands[-1] == "python -m pytest"


def test_ci_runs_the_readme_commands_in_a_venv_inside_the_clone():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    lines = [line.strip() for line in ci.splitlines() if line.strip() and not line.strip().startswith("#")]
    commands = _readme_commands()
    install = next(c for c in commands if c.startswith("python -m pip install")).split("&&")[0].strip()
    assert "python3 -m venv .venv" in lines
    assert ". .venv/bin/activate" in lines
    # The same requirement files, each installed, after the venv is active.
    for requirement in re.findall(r"-r (\S+)", install):
        assert any(f"-r {requirement}" in line and line.startswith("python -m pip install") for line in lines), requirement
    assert lines.index(". .venv/bin/activate") < min(i for i, line in enumerate(lines) if "pip install" in line)
    assert lines[-1] == commands[-1] == "python -m pytest"


def test_gitignore_expects_the_venv_inside_the_clone():
    assert "/.venv/" in (ROOT / ".gitignore").read_text(encoding="utf-8").split()
