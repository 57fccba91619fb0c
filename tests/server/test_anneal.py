"""Annealing a new action and new observation features into a fraction of episodes."""

import jax
import ml_collections
import numpy as np

from networks import make_network
from seedlike.config import base_config
from seedlike.policy import PolicyRegistry
from seedlike.server.anneal import Annealing
from seedlike.server.inference import InferenceService
from seedlike.server.matchmaking import Matchmaker
from seedlike.server.trajectory_store import BatchQueue, TrajectoryStore
from seedlike.server.unrolls import UnrollPool
from seedlike.types import ArraySpec, EnvSpec, Rows

SPEC = EnvSpec("t", {"obs": ArraySpec(np.float32, (3,))}, num_actions=4)


def rows(n, obs=1.0):
    zeros = np.zeros(n, bool)
    return Rows(
        {"obs": np.full((n, 3), obs, np.float32)}, {}, np.zeros(n, np.float32), zeros, zeros,
        np.arange(n, dtype=np.int32), np.zeros(n, np.int32), ~zeros, zeros,
    )  # fmt: skip


def annealing(**kw):
    c = ml_collections.ConfigDict(
        {"start_version": 10, "versions": 20, "new_actions": (3,), "new_obs_features": (2,)}
    )
    c.update(kw)
    return Annealing.from_config(c)


def test_fraction_ramps_linearly_and_zero_versions_disables():
    a = annealing()
    assert [a.fraction(v) for v in (0, 10, 15, 20, 30, 99)] == [0.0, 0.0, 0.25, 0.5, 1.0, 1.0]
    assert annealing(versions=0) is None


def test_episodes_without_the_change_see_the_old_world():
    a = annealing()
    spec = a.server_spec(SPEC)
    assert spec.extras["legal_action_mask"].shape == (4,)
    batch = rows(3)
    obs, extras = a.hide_change(batch.obs, batch.extras, np.array([True, False, True]), 4)
    np.testing.assert_array_equal(obs["obs"][:, 2], [1.0, 0.0, 1.0])
    np.testing.assert_array_equal(obs["obs"][:, :2], 1.0)
    np.testing.assert_array_equal(extras["legal_action_mask"][:, 3], [True, False, True])
    assert extras["legal_action_mask"][:, :3].all()
    np.testing.assert_array_equal(batch.obs["obs"], 1.0)  # the actor's rows are not changed


def test_teammates_see_the_world_of_the_agents_episode():
    """env.teammates: a row's teammates' observations lose the new features with the row's."""
    a = annealing(new_actions=())
    mates = np.arange(3 * 2 * 3, dtype=np.float32).reshape(3, 2, 3) + 1
    obs, _ = a.hide_change(
        {"obs": np.ones((3, 3), np.float32), "teammates/obs": mates}, {},
        np.array([True, False, True]), 4,
    )  # fmt: skip
    want = mates.copy()
    want[1, :, 2] = 0.0
    np.testing.assert_array_equal(obs["teammates/obs"], want)
    np.testing.assert_array_equal(obs["obs"][:, 2], [1.0, 0.0, 1.0])


def test_each_episode_draws_the_change_once_and_the_learner_sees_what_the_policy_saw():
    """Through a real inference pipeline: half of the episodes (fraction 0.5) have the change.
    Without it the policy, which prefers the new action 3, cannot play it and sees feature 2 as 0;
    the recorded unrolls hold exactly those inputs, and an episode keeps its draw until it ends."""
    a = annealing(start_version=0, versions=2)
    config = base_config()
    config.network.hidden_sizes = ()
    config.network.normalize_obs = False
    network = make_network(config.network, SPEC)
    params = network.init(jax.random.key(0))
    params["params"]["policy_head"]["logits"]["bias"] = np.array([0, 0, 0, 50], np.float32)
    params["params"]["policy_head"]["logits"]["kernel"] *= 0.0
    registry = PolicyRegistry()
    registry.publish(1, {"params": params, "obs_norm": {}})  # fraction(1) = 0.5
    batches = BatchQueue(slots=1000)
    store = TrajectoryStore(UnrollPool(a.server_spec(SPEC), 4), 1, batches)
    service = InferenceService.from_config(
        config, spec=SPEC, network=network, registry=registry, store=store,
        matchmaker=Matchmaker(SPEC, annealing=a),
    )  # fmt: skip
    service.start()
    try:
        session = service.open_session(0, 64)
        for step in range(9):  # episodes of 3 actions and an end
            done = np.full(64, step % 4 == 3)
            batch = rows(64)._replace(terminated=done, acting=~done, game_over=done)
            service.submit(session, batch).result(timeout=30)
        service.flush()
    finally:
        service.stop(finished=True)
    unrolls = [
        jax.tree.map(lambda x: x[0], b.unroll()) for b in iter(lambda: batches.next_batch(0), None)
    ]
    assert len(unrolls) == 128  # per env: steps 0-4, then 4-8
    draws = []
    for u in unrolls:
        start = 0 if u.first[0] else 1  # the first unroll starts with episode 1's first step
        changed = u.obs["obs"][start : start + 3, 2] == 1.0
        assert changed.all() or not changed.any(), "the change is drawn once per episode"
        mask = u.extras["legal_action_mask"][start : start + 3, 3]
        np.testing.assert_array_equal(mask, changed)
        np.testing.assert_array_equal(u.action[start : start + 3] == 3, changed)
        draws.append(changed[0])
    first, second = np.array(draws[:64]), np.array(draws[64:])
    assert 0.3 < first.mean() < 0.7 and 0.3 < second.mean() < 0.7
    assert (first != second).any(), "every episode draws anew"
