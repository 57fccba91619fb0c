"""Tests of seedlike/server: batching, inference, recording, influence bounds, curricula."""
