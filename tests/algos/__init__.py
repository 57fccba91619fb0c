"""Tests of seedlike/algos: returns, advantages and losses against closed forms and references."""
