"""Enqueue jobs on your own database connection: ``insert_job`` / ``insert_job_sync``."""

from awa.entrypoints.bridge import insert_job, insert_job_sync

__all__ = ["insert_job", "insert_job_sync"]
