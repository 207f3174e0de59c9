"""Focused benchmarks; run them as modules (``python -m benchmarks.drain``)."""
