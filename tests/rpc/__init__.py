"""Tests of seedlike/rpc and the actor: the wire, streams, front ends, security."""
