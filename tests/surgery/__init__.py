"""Tests of surgery/: function-preserving expansion, plans and whole checkpoints."""
