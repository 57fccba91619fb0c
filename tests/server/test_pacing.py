"""Pacing of an actor identity served far faster than the others (seedlike.server.pacing)."""

import threading
import time

import pytest

from seedlike.server.pacing import MAX_HOLD_S, Pacer, RowRates


def test_an_identity_served_faster_than_twice_the_median_is_held_to_that_rate():
    rates = RowRates(factor=2.0, window_s=1.0)
    # The first window only measures: nobody is held while rates cover less than one.
    for t in (0.0, 0.5):
        assert [rates.hold_s(o, 100, now=t) for o in (0, 1)] == [0.0, 0.0]
        assert rates.hold_s(2, 300, now=t) == 0.0
    # At 1.0 s the window holds 300 rows of identities 0 and 1 and 900 of identity 2: 2 x 300
    # rows/s are allowed, its bucket starts now and each reply waits for those before it.
    assert rates.hold_s(0, 100, now=1.0) == rates.hold_s(1, 100, now=1.0) == 0.0  # never held
    assert rates.hold_s(2, 300, now=1.0) == pytest.approx(0.0, abs=1e-12)  # drains by 1.5 s
    assert rates.hold_s(2, 300, now=1.0) == pytest.approx(0.5)  # then by 2.0 s
    # Whatever its size: at 1.1 s the median is 200 rows, 400 rows/s allowed, 15 s for these.
    assert rates.hold_s(2, 6000, now=1.1) == pytest.approx(0.9)
    # Its rate has fallen below the bound, but its bucket holds replies until 17 s: held.
    assert rates.hold_s(0, 100, now=4.0) == rates.hold_s(1, 100, now=4.0) == 0.0
    assert rates.hold_s(2, 100, now=4.0) == pytest.approx(13.0)
    # Much later the window holds only steady traffic and the bucket is empty: not held.
    for t in (30.0, 30.5):
        assert [rates.hold_s(o, 100, now=t) for o in (0, 1, 2)] == [0.0, 0.0, 0.0]
    # Two identities cannot be told apart: nobody is held.
    two = RowRates(factor=2.0, window_s=1.0)
    for t in (0.0, 2.0, 2.1):
        assert two.hold_s(0, 16, now=t) == two.hold_s(1, 4096, now=t) == 0.0
    assert MAX_HOLD_S >= 10.0  # a bucket of 16 x 4096 rows at 12,800 rows/s waits 5 s


def served_rows_per_s(streams, seconds=60.0, measured_from=20.0):
    """Simulated actors against RowRates(factor=2, window 5 s): `streams` is [(identity, rows per
    request, seconds the actor takes between a reply and its next request)], each stream
    waiting for its reply before its next request, the server answering at once unless held.
    Rows/s each identity was served (at release) from `measured_from` on."""
    rates, served = RowRates(factor=2.0, window_s=5.0), {}
    events = [(0.0, k) for k in range(len(streams))]
    while events:
        events.sort()
        now, k = events.pop(0)
        identity, rows, think = streams[k]
        released = now + rates.hold_s(identity, rows, now)
        if measured_from <= released < seconds:
            served[identity] = served.get(identity, 0) + rows
        if released + think < seconds:
            events.append((released + think, k))
    return {who: n / (seconds - measured_from) for who, n in served.items()}


def test_oversize_requests_are_paced_to_the_factor_and_honest_replies_are_never_held():
    """Issue 76's oversize attack: 16 streams x 4,096 envs under one certificate beside honest
    identities of one 64-env stream each (10 ms per env step). Served at most 2x an honest
    identity (the factor), and the honest ones at their own pace: 64 rows per 10 ms."""
    honest = [(who, 64, 0.01) for who in range(3)]
    rates = served_rows_per_s(honest + [(9, 4096, 0.001)] * 16)
    for who in range(3):
        assert rates[who] == pytest.approx(6400, rel=0.01)
    assert rates[9] <= 2.0 * 6400 * 1.05  # the bucket's rate, to the size of one reply
    assert rates[9] >= 1.5 * 6400  # held to its share, not starved


def test_beside_two_honest_identities_of_unequal_pace_the_bound_is_the_others_median():
    """The faults benchmark's oversize run: two honest identities, one served half as fast
    (64 rows per 10 ms and per 20 ms). The median of the others (their mean, 4,800 rows/s) bounds
    the attacker at 2x that; the median of all three was the faster honest one's, which let it
    have 2x 6,400 = 2.67x the honest mean."""
    honest = [(0, 64, 0.01), (1, 64, 0.02)]
    rates = served_rows_per_s(honest + [(9, 4096, 0.001)] * 16)
    assert rates[0] == pytest.approx(6400, rel=0.01) and rates[1] == pytest.approx(3200, rel=0.01)
    mean = (rates[0] + rates[1]) / 2
    assert 1.5 * mean <= rates[9] <= 2.0 * mean * 1.05


def test_the_pacer_calls_in_time_order_and_drops_the_rest_when_stopped():
    pacer, calls, done = Pacer(), [], threading.Event()
    now = time.monotonic()
    pacer.at(now + 0.2, lambda: (calls.append("b"), done.set()))
    pacer.at(now + 0.05, lambda: calls.append("a"))
    pacer.at(now + 60.0, lambda: calls.append("never"))
    assert done.wait(10)
    pacer.stop()
    assert calls == ["a", "b"]
