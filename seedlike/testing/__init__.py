"""Helpers that tests and benchmarks share: hosts in network namespaces and a malicious actor."""
