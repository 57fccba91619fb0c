"""Tests of seedlike/runtime: process statistics and XLA settings."""
