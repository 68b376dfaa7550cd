"""Benchmarks that need the test rigs (run from the repository root: ``python -m benchmarks.NAME``)."""
