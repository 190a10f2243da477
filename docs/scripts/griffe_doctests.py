"""A griffe extension for the API reference: show docstrings' doctest examples as code.

magister's docstrings hold ``>>>`` examples as plain paragraphs (the test suite runs them as doctests). In
Markdown such a paragraph would be reflowed and ``x["a"]["b"]`` would read as a link, so this extension
fences every unindented run of ``>>>`` lines and their output as a ``pycon`` block before mkdocstrings
renders the docstring. Loaded by mkdocs.yml (``plugins.mkdocstrings.handlers.python.options.extensions``).
"""

from __future__ import annotations

from typing import Any

import griffe


def fence_doctests(text: str) -> str:
    """Wrap each unindented doctest run (prompt lines and the output up to a blank line) in a fence."""
    out: list[str] = []
    inside = False
    in_fence = False
    for line in text.split("\n"):
        if line.startswith("```"):
            in_fence = not in_fence
        if not in_fence and not inside and line.startswith(">>>"):
            out.append("```pycon")
            inside = True
        elif inside and not line.strip():
            out.append("```")
            inside = False
        out.append(line)
    if inside:
        out.append("```")
    return "\n".join(out)


class DoctestBlocks(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
