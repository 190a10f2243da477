"""MkDocs hook: the 404 page links relative to the site's root folder, so it works opened from disk.

MkDocs renders error pages with site-root paths (``/assets/...``) for web servers that show them at any
URL; a site read from the file system has no such root. The 404 page sits at the top of the site, so
links relative to its own folder (``./assets/...``) reach the same files.
"""

from __future__ import annotations

from typing import Any


def on_template_context(context: dict[str, Any], template_name: str, config: Any) -> dict[str, Any]:
    if template_name == "404.html":
        context["base_url"] = "."
    return context
