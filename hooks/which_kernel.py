"""MkDocs hook: the which-kernel form's script and style, on its page only.

A page that holds the form (``class="fg-which-kernel"``, in
``docs/efficiency/which-kernel.md``) gets a ``<script>`` tag for
``javascripts/which_kernel.js`` and a link to ``stylesheets/which-kernel.css``
at the end of its content; no other page loads them. The paths are made
relative to the page, so the form also works in the offline build read from
``file://``. Material's instant navigation re-runs scripts found in the
content, so the form starts after an instant page change too.
"""

from __future__ import annotations

from mkdocs.utils import get_relative_url

SCRIPT_URI = "javascripts/which_kernel.js"
STYLE_URI = "stylesheets/which-kernel.css"
FORM_CLASS = 'class="fg-which-kernel'


def on_page_content(html: str, page, config, files) -> str:
    if FORM_CLASS not in html:
        return html
    style = get_relative_url(STYLE_URI, page.file.url)
    script = get_relative_url(SCRIPT_URI, page.file.url)
    return (f'{html}\n<link rel="stylesheet" href="{style}">\n'
            f'<script src="{script}" defer></script>\n')
