"""Server-side recurrent state: replaying an unroll from its stored carry reproduces acting."""

import jax
import ml_collections
import numpy as np

from networks import make_network
from seedlike.config import base_config
from seedlike.envs.envpool_env import EnvpoolAdapter, make_env_spec
from seedlike.policy import PolicyRegistry
from seedlike.server.inference import InferenceService
from seedlike.server.trajectory_store import BatchQueue, TrajectoryStore
from seedlike.server.unrolls import UnrollPool


def test_replay_from_stored_carry_matches_the_server(tmp_path):
    config = base_config()
    config.env.name, config.env.num_envs = "CartPole-v1", 4
    config.env.kwargs = ml_collections.ConfigDict({"max_episode_steps": 20})  # many resets
    config.network.core, config.network.core_size = "lstm", 16
    spec = make_env_spec(config.env)
    network = make_network(config.network, spec)
    params = network.init(jax.random.key(3))
    # Non-trivial normalizer statistics, as a trained run would have.
    obs_norm = jax.tree.map(lambda x: x * 0.5 + 0.1, network.init_obs_norm())
    registry = PolicyRegistry()
    registry.publish(7, {"params": params, "obs_norm": obs_norm})
    batches = BatchQueue(slots=1000)
    store = TrajectoryStore(UnrollPool(spec, 8), 1, batches, network.initial_carry(1))
    config.seed = 1
    service = InferenceService.from_config(
        config, spec=spec, network=network, registry=registry, store=store
    )
    service.start()
    try:
        session = service.open_session(0, 4)
        env = EnvpoolAdapter(config.env, spec, seed=0)
        env.reset()
        for _ in range(60):
            rows = env.recv()
            actions, version = service.submit(session, rows).result(timeout=30)
            assert version == 7
            env.send(actions, rows)
    finally:
        service.stop(finished=True)
    unrolls = [b.unroll() for b in iter(lambda: batches.next_batch(timeout=0), None)]
    assert len(unrolls) >= 20
    batch = jax.tree.map(lambda *x: np.concatenate(x), *unrolls)
    assert batch.first[:, 1:].any(), "episodes must end inside unrolls"
    assert np.abs(batch.carry[0]).max() > 0.01, "unrolls must start from non-zero carries"
    logits, values, _ = network.unroll(params, obs_norm, batch.obs, {}, batch.carry, batch.first)
    logp = jax.nn.log_softmax(logits)
    logp = np.take_along_axis(np.asarray(logp), batch.action[..., None], -1)[..., 0]
    np.testing.assert_allclose(logp, batch.behaviour_logp, atol=1e-5)
    np.testing.assert_allclose(values, batch.behaviour_value, atol=1e-5)
    # Without the stored carry (zeros instead) the replay would differ: the carry matters.
    wrong, _, _ = network.unroll(
        params, obs_norm, batch.obs, {}, network.initial_carry(len(unrolls)), batch.first
    )
    assert np.abs(np.asarray(wrong) - np.asarray(logits)).max() > 1e-3
