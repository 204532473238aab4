"""The build treats a Python warning that its own figures or examples cause
as an error, so the first `mkdocs serve` prints no tracebacks of them; a
warning from elsewhere is not the build's business."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

from conftest import ROOT


def load_hook(name: str):
    spec = importlib.util.spec_from_file_location(f"hook_{name}_warnings", ROOT / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FIGURE = """\
import torch
from matplotlib.figure import Figure


def bars(style):
    fig = Figure()
    fig.add_subplot().bar(range(3), {values})
    return fig
"""


def test_a_figure_that_hands_matplotlib_a_tensor_fails(tmp_path):
    hook = load_hook("figures")
    script = tmp_path / "docs" / "figures" / "tensors.py"
    script.parent.mkdir(parents=True)
    script.write_text(FIGURE.format(values="torch.tensor([1.0, 2.0, 3.0]).float()"))
    with pytest.raises(hook.FigureError, match=r"tensors\.py:bars \(light\) failed: DeprecationWarning: .*treats it as an error"):
        hook.render_script(script, tmp_path / "out")
    script.write_text(FIGURE.format(values="torch.tensor([1.0, 2.0, 3.0]).tolist()"))
    assert hook.render_script(script, tmp_path / "out") == ["bars"]


def test_an_example_that_warns_fails_on_its_cell(tmp_path):
    hook = load_hook("examples")
    example = tmp_path / "warns.py"
    example.write_text(
        "# %%\nimport warnings\nprint('quiet so far')\n"
        "# %%\nwarnings.warn('this call is deprecated', DeprecationWarning)\n"
    )
    kernel = hook.Kernel(ROOT, 1)
    try:
        with pytest.raises(hook.ExampleError, match=r"^cell 2: DeprecationWarning: this call is deprecated"):
            kernel.run(example, tmp_path / "warns.ipynb")
        quiet = tmp_path / "quiet.py"
        quiet.write_text("# %%\nprint('nothing to warn about')\n")
        kernel.run(quiet, tmp_path / "quiet.ipynb")  # the same kernel runs on cleanly
    finally:
        kernel.close()
