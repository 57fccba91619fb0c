"""The pipeline's handoffs behave as queue.Queue and threading.Semaphore did where it used them."""

import queue
import threading

import pytest

from seedlike.server.handoff import Counter, Handoff


def test_a_bounded_handoff_is_first_in_first_out_and_full_at_its_size():
    h = Handoff(maxsize=2)
    h.put("a", timeout=0.01)
    h.put("b", timeout=0.01)
    with pytest.raises(queue.Full):
        h.put("c", timeout=0.01)
    assert h.get(timeout=0.01) == "a"
    h.put("c", timeout=0.01)  # the place "a" left
    assert [h.get(timeout=0.01), h.get(timeout=0)] == ["b", "c"]
    with pytest.raises(queue.Empty):
        h.get(timeout=0.01)
    with pytest.raises(queue.Empty):
        h.get(timeout=0)


def test_unfinished_counts_items_put_and_not_yet_handled():
    h = Handoff(maxsize=3)
    for item in range(3):
        h.put(item)
    assert h.unfinished == 3
    h.get()
    assert h.unfinished == 3  # taken, not handled
    h.done()
    assert h.unfinished == 2


def test_a_full_handoff_lets_its_producer_on_when_a_consumer_takes_an_item():
    h = Handoff(maxsize=1)
    h.put(0)
    got = []
    producer = threading.Thread(target=lambda: [h.put(i) for i in range(1, 200)])
    producer.start()
    while len(got) < 200:
        got.append(h.get(timeout=5))
    producer.join(timeout=5)
    assert got == list(range(200)) and h.empty()


def test_many_producers_lose_no_count():
    h = Handoff(maxsize=8000)
    threads = [threading.Thread(target=lambda: [h.put(0) for _ in range(2000)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert h.unfinished == 8000


def test_a_counter_is_positive_while_ups_outnumber_downs_and_down_waits_for_an_up():
    c = Counter()
    assert not c.positive()
    c.up()
    c.up()
    c.down()
    assert c.positive()
    c.down()
    assert not c.positive()
    done = threading.Event()
    waiter = threading.Thread(target=lambda: (c.down(), done.set()))
    waiter.start()
    assert not done.wait(0.05)
    c.up()
    assert done.wait(5)
    waiter.join()


def test_a_counter_starts_at_its_count_and_down_gives_up_after_its_timeout():
    c = Counter(2)
    assert c.down(timeout=0) and c.down(timeout=0)
    assert c.down(timeout=0.01) is False and not c.positive()  # nothing taken by the failed down
    c.up()
    assert c.down(timeout=0.01) is True
