"""Tests of seedlike's own modules: config, checkpoints, metrics, watching and scoring, defaults."""
