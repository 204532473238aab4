"""MkDocs hook: one API reference page per snippets area, from the docstrings.

The pages (``api/index.md`` and ``api/<area>.md``) are written at build time
from the files present in ``snippets/`` (``field_guide_hooks.api_reference``)
and rendered by mkdocstrings' Python handler (griffe reads the files; nothing
is imported, and no inventory is fetched). Each file's section links to the
page that teaches it and to the file.
"""

from __future__ import annotations

import logging
import pathlib
import sys

from mkdocs.structure.files import File, Files

# MkDocs loads hooks by path: shared helpers live in a package next to this file.
_HOOKS = str(pathlib.Path(__file__).resolve().parent)
if _HOOKS not in sys.path:
    sys.path.append(_HOOKS)

from field_guide_hooks import api_reference as ref  # noqa: E402

log = logging.getLogger("mkdocs.hooks.api_reference")


def on_files(files: Files, config) -> Files:
    root = pathlib.Path(config.config_file_path).resolve().parent
    docs = pathlib.Path(config.docs_dir)
    by_area = ref.collect(root, docs)
    titles = ref.nav_titles(config.nav, list(by_area))
    files.append(File.generated(config, f"{ref.API_DIR}/index.md", content=ref.index_markdown(titles)))
    for area, snippet_files in by_area.items():
        text = ref.area_markdown(area, titles[area], snippet_files, docs)
        files.append(File.generated(config, f"{ref.API_DIR}/{area}.md", content=text))
    log.info(
        "api reference: %d pages, %d files, %d entries",
        len(by_area), sum(len(f) for f in by_area.values()),
        sum(len(s.names) for f in by_area.values() for s in f),
    )
    return files
