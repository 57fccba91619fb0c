"""Stream front ends (seedlike.rpc.frontend, hub): actors' rows reach the learner process through
shared memory, each step's observations written once, by the front end, where the learner batch
reads them; the unrolls are the same as when the learner process serves the streams itself."""

import time

import numpy as np
import pytest

from seedlike.config import base_config
from seedlike.rpc import client, codec
from seedlike.rpc.listen import listen
from seedlike.server.trajectory_store import BatchQueue, TrajectoryStore
from seedlike.server.unrolls import UnrollPool
from seedlike.types import Rows
from tests.helpers import SERVE_SPEC as SPEC
from tests.helpers import service_of
from tests.procs import wait_for

HORIZON, ENVS, ACTORS, STEPS = 3, (3, 5, 2), 3, 11


def actor_rows(actor: int, t: int, envs: int) -> Rows:
    """Step t of an actor: obs (1000 actor + 10 env, t); env 1 ends its episode every 4 steps."""
    env = np.arange(envs, dtype=np.int32)
    obs = np.stack([1000.0 * actor + 10.0 * env, np.full(envs, float(t))], 1).astype(np.float32)
    done = (env == 1) & (t % 4 == 3)
    return Rows(
        {"obs": obs}, {}, np.full(envs, float(t), np.float32), done, np.zeros(envs, bool),
        env, np.zeros(envs, np.int32), ~done, done,
    )  # fmt: skip


def serving(front_ends: int, **server):
    """(batches, store, service, server, address): a service of batches of one unroll, served on
    loopback with `front_ends` and the other `server` settings given."""
    config = base_config().server
    config.update(front_ends=front_ends, **server)
    batches = BatchQueue(slots=1000)
    store = TrajectoryStore(UnrollPool(SPEC, HORIZON, shared=front_ends > 0), 1, batches)
    service = service_of(store, batch_timeout_ms=20.0)
    rpc, port = listen(service, "127.0.0.1", 0, config)
    return batches, store, service, rpc, f"127.0.0.1:{port}"


def run(front_ends: int):
    """Every unroll the learner gets from ACTORS actors stepping STEPS times, as (actor and env,
    the steps' t, rewards), and the stores' and service's in-place counts."""
    batches, store, service, server, address = serving(front_ends)
    connections = [
        client.Connection(address, codec.make_hello(SPEC, a, ENVS[a])) for a in range(ACTORS)
    ]
    try:
        for t in range(STEPS):
            for a, connection in enumerate(connections):
                reply = connection.step(codec.encode_step(t, actor_rows(a, t, ENVS[a])))
                assert client.decode_actions(reply, ENVS[a], SPEC).shape == (ENVS[a],)
        service.flush()
    finally:
        for connection in connections:
            connection.close()
        service.stop(finished=True)
        server.stop()
    unrolls = []
    for batch in iter(lambda: batches.next_batch(timeout=0), None):
        u = batch.unroll()
        batch.release()
        unrolls.append((int(u.obs["obs"][0, 0, 0]), tuple(u.obs["obs"][0, :, 1]),
                        tuple(u.reward[0]), tuple(u.first[0])))  # fmt: skip
    return sorted(unrolls), store.steps_written_in_place, service.stats.rows_read_in_place


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
@pytest.mark.parametrize("front_ends", [1, 2])
def test_front_ends_write_each_step_once_and_the_unrolls_are_the_same(front_ends):
    local, written_local, in_place_local = run(0)
    remote, written, in_place = run(front_ends)
    # Every env: unrolls of steps 0-3, 3-6, 6-9 (a step every turn), in order, once each.
    assert len(local) == 3 * sum(ENVS) and remote == local
    for source, ts, rewards, first in local:
        assert ts in {(0, 1, 2, 3), (3, 4, 5, 6), (6, 7, 8, 9)}
        assert rewards == ts[1:]  # the outcome of step t arrives with step t + 1
        env = source % 1000 // 10  # env 1 ends an episode at t = 3 and 7: t = 4, 8 start one
        starts = {0} | ({4, 8} if env == 1 else set())
        assert first == tuple(t in starts for t in ts), (source, ts, first)
    # In process nothing is written in place; with front ends every step after a seat's first.
    assert written_local == in_place_local == 0
    assert written == STEPS * sum(ENVS) - sum(ENVS)  # minus each seat's first step
    assert in_place > 0  # batches of neighbouring requests were read from the arena


def test_an_evicted_session_keeps_its_unroll_buffers_until_its_front_end_lets_go():
    """The gate gives a silent session's slot to a newcomer. Its front end wrote steps into the
    session's unroll buffers and would write the next one there, before the learner process
    sees it: the buffers must not be the newcomer's by then. The evicted actor's next step is
    refused (naming the setting), and every unroll the newcomer fills holds its steps only."""
    batches, _, service, server, address = serving(1, max_actors=1, evict_idle_s=0.3)
    silent = client.Connection(address, codec.make_hello(SPEC, 0, 2))
    newcomer = None
    try:
        for t in range(2):  # mid-unroll: the front end knows where its next step goes
            silent.step(codec.encode_step(t, actor_rows(0, t, 2)))
        time.sleep(0.6)  # idle past evict_idle_s
        newcomer = client.Connection(address, codec.make_hello(SPEC, 1, 2))
        # The newcomer's seats opened while the recorder still held the evicted session's
        # buffers: they take those for their second unrolls (steps 3-6), the next buffers
        # released. Step 5 lies where the evicted session's step 2 would: its front end's write,
        # had it gone there, would overwrite it before the unroll is complete.
        for t in range(6):
            newcomer.step(codec.encode_step(t, actor_rows(1, t, 2)))
        with pytest.raises(client.Disconnected, match="server.evict_idle_s"):
            silent.step(codec.encode_step(2, actor_rows(0, 2, 2)))
        for t in range(6, 11):
            newcomer.step(codec.encode_step(t, actor_rows(1, t, 2)))
        service.flush()
    finally:
        silent.close()
        if newcomer is not None:
            newcomer.close()
        service.stop(finished=True)
        server.stop()
    sources = []
    for batch in iter(lambda: batches.next_batch(timeout=0), None):
        u = batch.unroll()
        batch.release()
        sources.append((u.obs["obs"][0, :, 0].tolist(), u.obs["obs"][0, :, 1].tolist()))
    newcomers = [s for s in sources if s[0][0] >= 1000]
    assert len(newcomers) == 2 * 3  # steps 0-3, 3-6, 6-9 of both envs
    for actor_env, ts in newcomers:
        assert len(set(actor_env)) == 1 and ts == list(range(int(ts[0]), int(ts[0]) + 4)), (
            actor_env,
            ts,
        )


def test_the_learner_process_checks_the_seat_ids_a_front_end_hands_it():
    """Ids index the service's arrays: a front end that names a seat outside its session (or one
    twice) loses its streams; the run goes on. The ids are copied: the front end's later writes
    to its segment cannot change them."""
    from types import SimpleNamespace

    from seedlike.rpc.hub import FrontEnds

    hub = SimpleNamespace(service=SimpleNamespace(spec=SimpleNamespace(num_players=2)))
    step = actor_rows(0, 0, 3)._replace(player_id=np.array([1, 0, 1], np.int32))
    rows, seats = FrontEnds._checked_seats(hub, step, 6)  # 3 envs x 2 players
    assert seats.tolist() == [1, 2, 5]
    step.env_id[:] = 7
    assert rows.env_id.tolist() == [0, 1, 2]
    for env_id, player_id in (([0, 3, 1], [0, 0, 0]), ([0, -1, 1], [0, 0, 0]),
                              ([0, 1, 2], [0, 2, 0]), ([0, 1, 0], [1, 1, 1])):  # fmt: skip
        bad = step._replace(
            env_id=np.array(env_id, np.int32), player_id=np.array(player_id, np.int32)
        )
        with pytest.raises(ValueError, match="outside its session|one seat twice"):
            FrontEnds._checked_seats(hub, bad, 6)


def test_a_front_end_that_dies_loses_its_streams_and_is_started_again():
    """Its sessions close once the process is gone (it wrote into their unroll buffers), the
    actor's stream breaks, and a new front end serves the actor that reconnects."""
    import os
    import signal

    _, _, service, server, address = serving(1)
    try:
        actor = client.Connection(address, codec.make_hello(SPEC, 0, 2))
        actor.step(codec.encode_step(0, actor_rows(0, 0, 2)))
        (dead,) = server.pids
        os.kill(dead, signal.SIGKILL)
        with pytest.raises(client.Disconnected):
            actor.step(codec.encode_step(1, actor_rows(0, 1, 2)))
        actor.close()
        wait_for(
            lambda: service.num_sessions == 0 and server.pids != [dead], 30,
            what="the dead front end's sessions closed and a new front end started",
        )  # fmt: skip

        def connect():
            try:
                return client.Connection(address, codec.make_hello(SPEC, 0, 2))
            except client.Disconnected:
                return None

        again = wait_for(connect, 30, what="the new front end listening")
        for t in range(3):
            assert again.step(codec.encode_step(t, actor_rows(0, t, 2))).sequence == t
        again.close()
    finally:
        service.stop(finished=True)
        server.stop()
