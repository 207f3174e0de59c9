"""Shared Postgres plumbing for both Postgres engines.

Pool construction, SQL-file loading, driver-error mapping, row conversion, the single
forward-only migration stream with the schema files applied after it (ADR 0012), the
LISTEN-based notifier and the leader lock.
"""
