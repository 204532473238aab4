"""Helpers shared by the MkDocs hooks in ``hooks/``, one module per job.

MkDocs loads each hook by its path, so a hook file cannot import a sibling.
Each entry file (``hooks/examples.py``, ``hooks/figures.py``, ...) therefore
appends ``hooks/`` to ``sys.path`` (after the build's own folders, so nothing
there is shadowed) and imports what it needs from this package:

* ``closure``: the local modules a source file imports, transitively, and the
  cache key built from them (the examples, the figures and the explorer's
  model are all cached on it);
* ``examples.state``: what one build of the executed examples holds, in one
  named object (``STATE``);
* ``examples.kernels``: the Jupyter kernels that run the examples and the pool
  of threads that drives them;
* ``examples.notebook_html``: the executed notebooks' HTML (alternative texts,
  links, the notebook stylesheet);
* ``examples.bundles``: the zip a reader downloads to run an example;
* ``api_reference``: the API reference pages, written from the snippets.
"""
