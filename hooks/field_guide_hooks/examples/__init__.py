"""The executed examples, by job: ``state`` (what one build holds), ``kernels``
(running them), ``notebook_html`` (their pages' HTML), ``bundles`` (their zips).
The MkDocs events that drive them are in ``hooks/examples.py``."""
