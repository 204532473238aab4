"""The zip a reader downloads to run an example on their own machine.

Each example page links to a zip of the example and the project files it
imports (``snippets/...``), laid out so that it runs where it is unpacked.
"""

from __future__ import annotations

import ast
import pathlib
import sys

from field_guide_hooks.closure import imported_names, local_dependencies, parse


def bundle_files(example: pathlib.Path, root: pathlib.Path) -> dict[str, pathlib.Path]:
    """What a reader needs to run ``example`` on their own: archive name -> file.

    The example sits at the top with the helpers of ``docs/examples`` it
    imports, so ``python <example>.py`` puts them on the path; the project's
    packages (``snippets/``, ``bench/``) keep their place relative to it, as
    do data files the code opens by a path written in it ("docs/data/...")."""
    examples_dir = example.parent
    files = {example.name: example}
    for dep in local_dependencies(example, [root, examples_dir]):
        files[dep.name if dep.parent == examples_dir else dep.relative_to(root).as_posix()] = dep
    for source in list(files.values()):
        for node in ast.walk(parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "/" in node.value:
                data = root / node.value
                if len(node.value) < 200 and "\n" not in node.value and data.is_file() and root in data.resolve().parents:
                    files[node.value] = data
    return files


def third_party_imports(files: list[pathlib.Path], local: set[str]) -> list[str]:
    """Top-level modules the files import that are neither local nor in the standard library."""
    names = set()
    for file in files:
        names.update(name.split(".")[0] for name in imported_names(file.read_text(encoding="utf-8")))
    return sorted(n for n in names if n not in local and n not in sys.stdlib_module_names and n != "__future__")


def write_bundle(example: pathlib.Path, root: pathlib.Path, target: pathlib.Path) -> dict[str, pathlib.Path]:
    """Write ``target`` (a zip): the example, the files it needs, and a README."""
    import zipfile

    files = bundle_files(example, root)
    local = {name.split("/")[0].removesuffix(".py") for name in files}
    needs = third_party_imports([f for f in files.values() if f.suffix == ".py"], local)
    readme = (
        f"{example.name}: an executed example of the Attention Field Guide.\n\n"
        f"Unpack this folder anywhere and run, from inside it:\n\n    python {example.name}\n\n"
        f"It needs Python 3.10 or newer and: {', '.join(needs) or 'nothing beyond the standard library'}"
        f"{' (pip install pyyaml)' if 'yaml' in needs else ''}.\n"
        "The other files are the project's own code that the example imports, "
        "at the same relative paths as in the repository.\n"
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    stamp = (2020, 1, 1, 0, 0, 0)  # fixed dates: the same sources give the same zip
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        folder = example.stem
        archive.writestr(zipfile.ZipInfo(f"{folder}/README.txt", stamp), readme)
        for name, path in sorted(files.items()):
            archive.writestr(zipfile.ZipInfo(f"{folder}/{name}", stamp), path.read_bytes(), zipfile.ZIP_DEFLATED)
    return files

