"""Benchmarks of seedlike, each run from the repository root as python -m benchmarks.<name>."""
