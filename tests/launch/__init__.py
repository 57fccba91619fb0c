"""Tests of seedlike/launch: the Python API, sweeps, PBT, deploy."""
