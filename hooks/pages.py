"""MkDocs hook: build facts in every footer, and downloadable snippet files.

* ``config.extra.build`` records the torch version and the device the examples
  ran on; ``overrides/partials/copyright.html`` prints it on every page.
* Every file under ``snippets/`` is published at ``<site>/snippets/...``; a page
  that includes a snippet section gets a link to the whole file right after
  its "The code" heading (or at its end), so a reader can take it in one click.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import logging
import os
import pathlib
import platform
import re
import sys

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files
from mkdocs.utils import get_relative_url

log = logging.getLogger("mkdocs.hooks.pages")

INCLUDE = re.compile(r'^[ \t]*--8<--[ \t]+"([^":]+\.py)(?::[A-Za-z][\w-]*)?"[ \t]*$', re.M)
CODE_HEADING = re.compile(r"^## The code[^\n]*\n", re.M)


def _root(config) -> pathlib.Path:
    return pathlib.Path(config.config_file_path).resolve().parent


@event_priority(200)  # first: the examples hook keys its cache on the device
def on_config(config):
    root = _root(config)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from snippets.device import pick_device  # the same choice the examples make

    import torch

    device = pick_device()
    os.environ.setdefault("FIELD_GUIDE_DEVICE", device.type)
    build = {
        "torch": importlib.metadata.version("torch"),
        "device": device.type if device.type != "cuda" else torch.cuda.get_device_name(device),
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "date": datetime.date.today().isoformat(),
    }
    config.extra["build"] = build
    log.info(
        "build: torch %s on %s, Python %s, %d threads",
        build["torch"], build["device"], build["python"], build["threads"],
    )
    return config


def on_files(files: Files, config) -> Files:
    snippets = _root(config) / "snippets"
    for path in sorted(snippets.rglob("*.py")):
        if path.name == "__init__.py" or "__pycache__" in path.parts:
            continue
        uri = "snippets/" + path.relative_to(snippets).as_posix()
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def on_page_markdown(markdown: str, page, config, files: Files) -> str:
    included = sorted(set(INCLUDE.findall(markdown)))
    if not included:
        return markdown
    links = []
    for rel in included:
        uri = f"snippets/{rel}"
        if files.get_file_from_path(uri) is None:
            continue  # pymdownx.snippets reports the missing file itself
        href = get_relative_url(uri, page.file.src_uri)
        links.append(f"[`{uri}`]({href}){{ download }}")
    if not links:
        return markdown
    note = (
        '\n!!! abstract "Take the code"\n\n'
        f"    The code on this page is tested; download the whole file: {', '.join(links)}. "
        "It needs only PyTorch.\n\n"
    )
    match = CODE_HEADING.search(markdown)
    if match:
        return markdown[: match.end()] + note + markdown[match.end():]
    return markdown + "\n" + note
