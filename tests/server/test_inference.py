"""The inference pipeline without gRPC: actions go back before recording, sessions come and go,
and every answered step ends up recorded once."""

import numpy as np
import pytest

from seedlike.server.inference import RECORD_QUEUE
from seedlike.server.trajectory_store import BatchQueue, TrajectoryStore
from seedlike.server.unrolls import UnrollPool
from seedlike.types import Rows
from tests.helpers import SERVE_SPEC as SPEC
from tests.helpers import rows, service_of


def test_actions_go_back_while_the_recorder_waits_for_the_learner():
    """The learner takes no batch, so recording stalls after the first one; the actors are still
    answered (until the queue between reply and record is full), because recording happens after
    the reply, off the inference path."""
    batches = BatchQueue(slots=1)
    store = TrajectoryStore(UnrollPool(SPEC, 1), 4, batches)
    service = service_of(store)
    try:
        session = service.open_session(0, 4)
        # Every step from the second on completes a batch of 4 unrolls. The recorder records
        # steps 0 and 1 and then waits for the learner to take the first batch; the next
        # RECORD_QUEUE steps wait in the queue between reply and record, and are answered.
        steps = RECORD_QUEUE + 2
        for t in range(steps):
            actions, version = service.submit(session, rows(4, t)).result(timeout=10)
            assert actions.shape == (4,) and version == 3
        assert service.env_steps < steps * 4, "the recorder must be waiting for the learner"
        taken = [batches.next_batch(timeout=10).unroll() for _ in range(steps - 1)]  # it catches up
        service.flush()
        assert service.env_steps == steps * 4
    finally:
        service.stop(finished=True)
    # Each unroll holds the steps t, t + 1 of one env, in order.
    obs = np.concatenate([b.obs["obs"][:, :, 0] for b in taken])
    assert sorted(map(tuple, obs.tolist())) == [
        (t, t + 1) for t in range(steps - 1) for _ in "abcd"
    ]


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
def test_sessions_of_many_sizes_are_batched_and_recorded_once():
    batches = BatchQueue(slots=1000)
    store = TrajectoryStore(UnrollPool(SPEC, 2), 1, batches)
    service = service_of(store, batch_timeout_ms=50.0)
    try:
        sessions = {service.open_session(i, n): n for i, n in enumerate([1, 3, 5])}
        for t in range(7):
            futures = {s: service.submit(s, rows(n, t)) for s, n in sessions.items()}
            for s, future in futures.items():
                actions, _ = future.result(timeout=10)
                assert actions.shape == (sessions[s],) and ((0 <= actions) & (actions < 3)).all()
        service.flush()
        stats = service.stats.take()
        # Requests that arrive together are answered together.
        assert max(stats["batch_rows"]) == 9 and np.mean(stats["batch_rows"]) > 4.5
        closing = next(iter(sessions))
        service.close_session(closing)
        survivor = service.submit(list(sessions)[1], rows(3, 7.0))
        survivor.result(timeout=10)
        service.flush()
    finally:
        service.stop(finished=True)
    unrolls = [b.unroll() for b in iter(lambda: batches.next_batch(timeout=0), None)]
    # 9 seats x 3 unrolls of steps (0-2, 2-4, 4-6); then one more step of session 2 only.
    assert len(unrolls) == 27 and service.env_steps == 7 * 9 + 3
    firsts = sorted(float(u.obs["obs"][0, 0, 0]) for u in unrolls)
    assert firsts == [0.0] * 9 + [2.0] * 9 + [4.0] * 9


def test_an_episode_is_credited_to_the_actor_that_played_it_even_after_its_seat_is_reused():
    """Episodes are read at the next metrics row, up to log.interval_s later; by then the seat
    may be another actor's. The identity is taken where the episode is recorded."""
    store = TrajectoryStore(UnrollPool(SPEC, 2), 1, BatchQueue(slots=1000))
    service = service_of(store, batch_timeout_ms=5.0)

    def step(session, t, over):
        done = np.array([over])
        zero = np.zeros(1, np.int32)
        obs = {"obs": np.full((1, 2), t, np.float32)}
        row = Rows(obs, {}, np.ones(1, np.float32), done, ~done & False, zero, zero, ~done, done)
        service.submit(session, row).result(timeout=10)

    try:
        first = service.open_session(0, 1, "host-a")
        for t in range(3):
            step(first, float(t), over=t == 2)  # an episode of two steps ends
        service.flush()
        identity_first = service._sessions[first][2]
        service.close_session(first)
        second = service.open_session(1, 1, "host-b")
        step(second, 0.0, over=False)
        service.flush()
        identity_second = service._sessions[second][2]
        episodes = service.stats.take()["episodes"]
    finally:
        service.stop(finished=True)
    assert identity_first != identity_second
    np.testing.assert_allclose(episodes.episode_return, [2.0])
    assert episodes.identity.tolist() == [identity_first]
