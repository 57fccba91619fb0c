"""Pacing of an actor identity served far faster than the others (seedlike.server.pacing)."""

import threading
import time

import pytest

from seedlike.server.pacing import MAX_HOLD_S, Pacer, RowRates


def test_an_identity_served_faster_than_twice_the_median_is_held_to_that_rate():
    rates = RowRates(factor=2.0, window_s=1.0)
    assert rates.hold_s(0, 100, now=0.0) == pytest.approx(0.0, abs=1e-12)
    assert rates.hold_s(1, 100, now=0.0) == pytest.approx(0.0, abs=1e-12)
    # Identity 2: 300 rows in the window against the median's 100, over 2 x 100 rows/s: its
    # bucket fills (300 / 200 s); the next reply waits for it to drain, at most MAX_HOLD_S.
    assert rates.hold_s(2, 300, now=0.0) == pytest.approx(0.0, abs=1e-12)
    assert rates.hold_s(2, 100, now=0.2) == pytest.approx(MAX_HOLD_S)
    assert (
        rates.hold_s(0, 100, now=0.3)
        == rates.hold_s(1, 100, now=0.3)
        == pytest.approx(0.0, abs=1e-12)
    )  # never held
    # Much later the window holds only steady traffic: identity 2 at the median is not held.
    for t in (5.0, 5.5):
        assert [rates.hold_s(o, 100, now=t) for o in (0, 1, 2)] == pytest.approx(
            [0.0, 0.0, 0.0], abs=1e-12
        )
    # Two identities cannot be told apart: nobody is held.
    two = RowRates(factor=2.0, window_s=1.0)
    assert (
        two.hold_s(0, 16, now=0.0) == two.hold_s(1, 4096, now=0.0) == pytest.approx(0.0, abs=1e-12)
    )
    assert two.hold_s(1, 4096, now=0.1) == pytest.approx(0.0, abs=1e-12)


def test_the_pacer_calls_in_time_order_and_drops_the_rest_when_stopped():
    pacer, calls, done = Pacer(), [], threading.Event()
    now = time.monotonic()
    pacer.at(now + 0.2, lambda: (calls.append("b"), done.set()))
    pacer.at(now + 0.05, lambda: calls.append("a"))
    pacer.at(now + 60.0, lambda: calls.append("never"))
    assert done.wait(10)
    pacer.stop()
    assert calls == ["a", "b"]
