"""Shared Postgres plumbing for both Postgres engines.

Pool construction, SQL-file loading, driver-error mapping, row conversion, the single
forward-only migration stream, the LISTEN-based notifier and the leader lock.
"""
