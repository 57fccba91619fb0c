"""Tests of seedlike/envs: the env backends and their adapters."""
