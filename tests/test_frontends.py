"""Stream front ends (seedlike.rpc.frontend, hub): actors' rows reach the learner process through
shared memory, each step's observations written once, by the front end, where the learner batch
reads them; the unrolls are the same as when the learner process serves the streams itself."""

import numpy as np
import pytest

from seedlike.config import base_config
from seedlike.rpc import client, codec
from seedlike.rpc.listen import serve
from seedlike.server.trajectory_store import BatchQueue, TrajectoryStore
from seedlike.server.unrolls import UnrollPool
from seedlike.types import Rows
from tests.test_inference import SPEC, service_of

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


def run(front_ends: int):
    """Every unroll the learner gets from ACTORS actors stepping STEPS times, as (actor and env,
    the steps' t, rewards), and the stores' and service's in-place counts."""
    config = base_config().server
    config.front_ends = front_ends
    batches = BatchQueue(slots=1000)
    pool = UnrollPool(SPEC, HORIZON, shared=front_ends > 0)
    store = TrajectoryStore(pool, 1, batches)
    service = service_of(store, batch_timeout_ms=20.0)
    server, port = serve(service, "127.0.0.1", 0, config)
    connections = [
        client.Connection(f"127.0.0.1:{port}", codec.make_hello(SPEC, a, ENVS[a]))
        for a in range(ACTORS)
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
    for batch in iter(lambda: batches.get(timeout=0), None):
        u = batch.unroll()
        batch.release()
        unrolls.append((int(u.obs["obs"][0, 0, 0]), tuple(u.obs["obs"][0, :, 1]),
                        tuple(u.reward[0]), tuple(u.first[0])))  # fmt: skip
    return sorted(unrolls), store.steps_written_in_place, service.stats.rows_read_in_place


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
