"""MkDocs hook: a form's script and style, on the pages that hold the form only.

A page whose content holds one of the forms below gets a ``<script>`` tag for
the form's script (and a link to its stylesheet, if it has one) at the end of
its content; no other page loads them. The paths are made relative to the
page, so the forms also work in the offline build read from ``file://``.
Material's instant navigation re-runs scripts found in the content, so a form
starts after an instant page change too (each script starts its forms once:
they carry ``data-fg-ready`` afterwards).

* ``class="fg-which-kernel"`` (docs/efficiency/which-kernel.md):
  ``javascripts/which_kernel.js`` and ``stylesheets/which-kernel.css``;
* ``class="fg-calc"`` (docs/modern/models.md): ``javascripts/config_calculator.js``.
"""

from __future__ import annotations

from mkdocs.utils import get_relative_url

FORMS = {
    'class="fg-which-kernel': ("javascripts/which_kernel.js", "stylesheets/which-kernel.css"),
    'class="fg-calc"': ("javascripts/config_calculator.js", None),
}


def on_page_content(html: str, page, config, files) -> str:
    for marker, (script, style) in FORMS.items():
        if marker not in html:
            continue
        if style:
            html += f'\n<link rel="stylesheet" href="{get_relative_url(style, page.file.url)}">'
        html += f'\n<script src="{get_relative_url(script, page.file.url)}" defer></script>\n'
    return html
