"""Tests of Whole jobs from the command line: learning runs, faults, notebooks."""
