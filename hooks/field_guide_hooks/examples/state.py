"""What one build of the executed examples holds, in one named object.

``hooks/examples.py`` resets ``STATE`` when the files are collected
(``on_files``) and every later event reads and fills it; the rooms of this
package receive the parts they need as arguments.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable

HOOK_VERSION = "6"  # bump to invalidate every cached example
EXAMPLES_DIR = "examples"
LOGGER = "mkdocs.hooks.examples"


@dataclasses.dataclass
class ExamplesBuild:
    """The examples' share of one build."""

    # Waits for the background runs and raises if one failed; None once called.
    finish: Callable[[], None] | None = None
    # Example file name ("masks.py") -> the executed notebook in the cache.
    executed: dict[str, pathlib.Path] = dataclasses.field(default_factory=dict)
    # Page source URI ("examples/masks.py") -> the example's source file.
    sources: dict[str, str] = dataclasses.field(default_factory=dict)
    # Links with an anchor, checked once every page is rendered:
    # (example URI, target File, anchor).
    links: list[tuple] = dataclasses.field(default_factory=list)
    # The notebook stylesheet, by site URI, and the classes the pages use.
    css: dict[str, str] = dataclasses.field(default_factory=dict)
    classes: set[str] = dataclasses.field(default_factory=set)

    def failed(self) -> bool:
        """Whether an example has failed already (the runs may go on)."""
        return self.finish is not None and getattr(self.finish, "failed", lambda: False)()

    def is_example(self, page) -> bool:
        return page.file.src_uri in self.sources

    def reset(self) -> None:
        """Start a new build (``mkdocs serve`` builds again in the same process)."""
        self.__dict__.update(ExamplesBuild().__dict__)

    def ready(self, page) -> None:
        """Wait for the example of ``page`` only (nothing to wait for once
        ``wait`` has run)."""
        if self.finish is not None:
            self.finish.ready(pathlib.PurePosixPath(page.file.src_uri).name)

    def order(self) -> list[str]:
        """Example file names in the order their runs are expected to end."""
        return list(getattr(self.finish, "order", []))

    def wait(self) -> None:
        """Wait for the examples (once); raise if one failed."""
        finish, self.finish = self.finish, None
        if finish is not None:
            finish()


STATE = ExamplesBuild()
