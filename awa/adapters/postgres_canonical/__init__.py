"""The canonical (compatibility) Postgres storage engine."""

from awa.adapters.postgres_canonical.base import CanonicalUnitOfWork
from awa.adapters.postgres_canonical.engine import CanonicalEngine

__all__ = ["CanonicalEngine", "CanonicalUnitOfWork"]
