"""Schema-version compatibility between a database and this package."""

from __future__ import annotations


def schema_compatible(found: int, required: int) -> bool:
    """Whether a database at schema version ``found`` serves a package that needs
    ``required``: migrations only add, so a newer schema is compatible ("at least")."""
    return found >= required
