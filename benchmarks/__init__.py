"""Measurements: speed benchmarks and load clients, run from the repository root as ``python -m benchmarks.NAME``."""
