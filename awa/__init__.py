"""Awa: a Postgres-native background job queue."""
