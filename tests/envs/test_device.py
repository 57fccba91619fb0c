"""seedlike.envs.device: envpool's auto-reset for envs written as JAX functions, against a
counting env whose episodes are known in closed form; and the gymnax backend's spaces and
truncation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seedlike.envs import device


def counting_env(terminal_at: int = 3):
    """obs = the step count; reward = the action + 1; the episode ends when the count reaches
    `terminal_at` (terminated) and, with a step limit of 5 seen as a truncation, never else."""

    def reset(key):
        del key
        return jnp.int32(0), {"obs": jnp.zeros((1,), jnp.float32)}

    def step(state, action, key):
        del key
        state = state + 1
        obs = {"obs": jnp.full((1,), state, jnp.float32)}
        return state, obs, (action + 1).astype(jnp.float32), state >= terminal_at, state >= 5

    return device.DeviceEnv(reset, step)


def test_an_episode_ends_on_its_terminal_observation_and_resets_the_step_after():
    env = counting_env(terminal_at=3)
    slot = device.start(env, jax.random.key(0))
    seen = []
    for t in range(8):
        before = slot
        slot, out = device.advance(env, slot, jnp.int32(t % 2), jax.random.key(t))
        seen.append((float(before.obs["obs"][0]), bool(before.first), bool(before.done),
                     float(out.reward), bool(out.terminated), bool(out.ended),
                     float(out.episode_return), int(out.episode_length)))  # fmt: skip
    # obs, first, done (this obs is terminal: the action is ignored), reward, terminated, ended,
    # and the episode's return and length where it ended (actions 0, 1, 0, ...: rewards 1, 2).
    assert seen == [
        (0.0, True, False, 1.0, False, False, 0.0, 0),
        (1.0, False, False, 2.0, False, False, 0.0, 0),
        (2.0, False, False, 1.0, True, True, 4.0, 3),
        (3.0, False, True, 0.0, False, False, 0.0, 0),  # the reset step: nothing happened
        (0.0, True, False, 1.0, False, False, 0.0, 0),
        (1.0, False, False, 2.0, False, False, 0.0, 0),
        (2.0, False, False, 1.0, True, True, 4.0, 3),
        (3.0, False, True, 0.0, False, False, 0.0, 0),
    ]


def test_advance_is_jittable_and_vmappable_with_one_carry_type():
    env = counting_env(terminal_at=4)
    slots = jax.vmap(lambda k: device.start(env, k))(jax.random.split(jax.random.key(1), 3))

    def body(slots, t):
        keys = jax.random.split(jax.random.fold_in(jax.random.key(2), t), 3)
        return jax.vmap(lambda s, k: device.advance(env, s, jnp.int32(0), k))(slots, keys)

    slots, outcome = jax.jit(lambda s: jax.lax.scan(body, s, jnp.arange(10)))(slots)
    # 10 steps of 5 (4 stepped + 1 reset): two episodes of return 4 each, in every env.
    np.testing.assert_array_equal(np.asarray(outcome.ended).sum(0), [2, 2, 2])
    np.testing.assert_array_equal(np.asarray(outcome.episode_return).sum(0), [8.0, 8.0, 8.0])


def test_gymnax_cartpole_has_the_spaces_of_envpools_and_truncates_at_500():
    pytest.importorskip("gymnax")
    from ml_collections import ConfigDict

    from seedlike.envs import UnknownEnv, check_env, device_env, make_env_spec

    config = ConfigDict({"backend": "gymnax", "name": "CartPole-v1", "levels": (), "teammates": 0})
    spec = make_env_spec(config)
    assert spec.observation["obs"].shape == (4,) and spec.num_actions == 2
    env = device_env(config, spec)
    state, _ = env.reset(jax.random.key(0))
    state = state.replace(time=499)  # one step from gymnax's limit, pole upright
    _, _, reward, terminated, truncated = env.step(state, jnp.int32(0), jax.random.key(1))
    assert (float(reward), bool(terminated), bool(truncated)) == (1.0, False, True)
    with pytest.raises(UnknownEnv, match="is not a gymnax env; gymnax has"):
        check_env(ConfigDict({**config.to_dict(), "name": "CartPole-v9"}))


def test_the_host_adapter_gives_the_rows_an_actor_would():
    """Through the adapter contract: the terminal observation is a row that does not act, and
    the reset after it starts the next episode with the action ignored."""
    from ml_collections import ConfigDict

    adapter = device.HostAdapter(ConfigDict({"num_envs": 2}), None, 0, counting_env(2))
    adapter.reset()
    seen = []
    for _ in range(4):
        rows = adapter.recv()
        seen.append((rows.obs["obs"][:, 0].tolist(), rows.reward.tolist(),
                     rows.terminated.tolist(), rows.acting.tolist()))  # fmt: skip
        adapter.send(np.array([1, 0], np.int32), rows)
    assert seen == [
        ([0.0, 0.0], [0.0, 0.0], [False, False], [True, True]),
        ([1.0, 1.0], [2.0, 1.0], [False, False], [True, True]),
        ([2.0, 2.0], [2.0, 1.0], [True, True], [False, False]),
        ([0.0, 0.0], [0.0, 0.0], [False, False], [True, True]),
    ]
