"""Tests of seedlike/league: pools, samplers, payoffs, ratings, games and roles."""
