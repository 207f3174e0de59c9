"""Load SQL from ``.sql`` files shipped beside the adapter that runs it.

A query file holds several named statements, each introduced by a ``-- name: <name>``
line. Files are read once per process (``importlib.resources``) and cached.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

_NAME_LINE = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


@functools.cache
def load_text(package: str, filename: str) -> str:
    """The text of ``filename`` inside ``package`` (cached)."""
    return resources.files(package).joinpath(filename).read_text(encoding="utf-8")


def parse_named_queries(text: str) -> dict[str, str]:
    """Split ``text`` into ``{name: statement}`` at ``-- name:`` lines.

    Text before the first marker (a file header) is ignored; a duplicated name is a
    packaging bug and raises ``ValueError``.
    """
    queries: dict[str, str] = {}
    matches = list(_NAME_LINE.finditer(text))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        body = text[match.end() : end].strip()
        name = match.group(1)
        if name in queries:
            raise ValueError(f"duplicate query name {name!r}")
        if not body:
            raise ValueError(f"query {name!r} is empty")
        queries[name] = body
    return queries


@functools.cache
def load_queries(package: str, filename: str) -> dict[str, str]:
    """The named statements of ``filename`` inside ``package`` (parsed once, cached)."""
    return parse_named_queries(load_text(package, filename))
