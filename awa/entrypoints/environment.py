"""Environment variables the composition root reads, named where a light module (the
command line building its help) can use them without loading the driver or the engines.

:mod:`awa.entrypoints.bootstrap` re-exports them; this is their one definition."""

from __future__ import annotations

#: ``pooler=`` / ``AWA_POOLER``: what the database URL points at (ADR 0015).
POOLER_ENV = "AWA_POOLER"
#: ``listen_database_url=`` / ``awa worker --listen-database-url``: where wake-ups listen.
LISTEN_URL_ENV = "AWA_LISTEN_DATABASE_URL"
