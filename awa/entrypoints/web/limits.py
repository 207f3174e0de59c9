"""Defaults of the admin server that the CLI shows without importing the web stack (it
needs the ``ui`` extra)."""

from __future__ import annotations

#: The largest request body accepted by default: 2 MiB.
DEFAULT_MAX_BODY_BYTES = 2 * 1024 * 1024
#: A page login lasts 12 hours unless ``--session-ttl`` says otherwise.
DEFAULT_SESSION_TTL = 12 * 3600.0
