"""The package version: the one place it is written (packaging metadata reads it)."""

__version__ = "0.1.0"
