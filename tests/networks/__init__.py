"""Tests of networks/: torsos, encoders, heads and the distributions they define."""
