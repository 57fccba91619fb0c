"""Tests of seedlike/learning: the train state and the learner's updates, on one and many hosts."""
