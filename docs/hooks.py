"""MkDocs hook: rlcore's docstrings use Sphinx roles (``:class:`Params```); on the site they are plain code."""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:class|func|data|meth|mod|attr|exc|obj):(<code>)~?")


def on_page_content(html: str, **_: Any) -> str:
    """The page's HTML with each role prefix removed from the code it marks."""
    return ROLE.sub(r"\1", html)
