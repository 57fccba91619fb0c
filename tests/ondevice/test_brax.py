"""brax on the device (seedlike.envs.brax_env): the spec brax's env gives, actions clipped to its
bounds, episodes truncated at their length, a run that learns a task quickly and plays from the
host, and configs refused in one line."""

import os

import jax
import jax.numpy as jnp
import pytest

from seedlike import envs
from seedlike.config import ConfigError
from seedlike.envs import UnknownEnv, device
from seedlike.metrics import read_metrics
from seedlike.ondevice import run
from tests.helpers import config_file, evaluated

pytest.importorskip("brax")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, "configs", "brax_ppo.py")


def config(task="inverted_pendulum", **values):
    return config_file(f"{CONFIG}:{task}", **values)


def test_the_spec_is_braxs_and_actions_beyond_the_bounds_are_paid_as_the_bounds():
    """inverted_double_pendulum: brax's 8 observations and one action in [-1, 1]. halfcheetah
    charges its control cost on the action it is given (brax clips the actuators, not the cost):
    an action of 5 in every joint earns exactly what 1 does (the env gets the sample clipped),
    where unclipped it would cost 25 times as much, and 0.5 earns something else."""
    c = config("inverted_double_pendulum")
    spec = envs.make_env_spec(c.env)
    assert spec.observation["obs"].shape == (8,) and spec.continuous == 1
    assert spec.action_low == (-1.0,) and spec.action_high == (1.0,) and spec.num_actions == 0
    c = config("halfcheetah", **{"env.kwargs": {"backend": "spring"}})
    spec = envs.make_env_spec(c.env)
    env = envs.device_env(c.env, spec)
    state, _ = env.reset(jax.random.key(0))
    step = jax.jit(env.step)
    paid = {a: float(step(state, jnp.full((6,), a), jax.random.key(1))[2]) for a in
            (5.0, 1.0, 0.5, -1.0, -5.0)}  # fmt: skip
    # Bitwise: the clipped 5 and the 1 are the same input to the same computation.
    assert paid[5.0] == paid[1.0] and paid[-5.0] == paid[-1.0], paid
    assert paid[0.5] != paid[1.0], paid


def test_an_episode_is_truncated_at_its_length_and_the_next_step_starts_another():
    """env.kwargs.episode_length=6 on halfcheetah (which never terminates): steps 1-5 go on, step
    6 is truncated (not terminated) with its return the sum of its rewards, step 7 starts anew."""
    c = config("halfcheetah", **{"env.kwargs": {"backend": "spring", "episode_length": 6}})
    spec = envs.make_env_spec(c.env)
    env = envs.device_env(c.env, spec)
    slot = device.start(env, jax.random.key(0))
    advance = jax.jit(lambda s, a, k: device.advance(env, s, a, k))
    action = jnp.full((6,), 0.3, jnp.float32)
    rewards = []
    for i in range(1, 8):
        slot, out = advance(slot, action, jax.random.key(i))
        rewards.append(float(out.reward))
        assert not bool(out.terminated)
        assert bool(out.truncated) == (i == 6), i
        if i == 6:
            assert float(out.episode_return) == pytest.approx(sum(rewards[:6]), abs=1e-4)
            assert int(out.episode_length) == 6
    assert bool(slot.first) and rewards[-1] == 0.0  # step 7 was the reset (its reward a literal 0)


@pytest.mark.slow
def test_ppo_learns_inverted_pendulum_on_the_device_and_plays_from_the_host(tmp_path):
    """configs/brax_ppo.py:inverted_pendulum at 128 envs x 5 steps, 200k env steps: 418 in the
    last row here (2026-12-07; a random policy balances about 9 steps, 1000 is the most); its
    checkpoint plays through the host adapter (evaluate.py) with continuous actions."""
    values = {"batch_unrolls": 128, "ppo.num_minibatches": 4, "total_env_steps": 200_000,
              "log.interval_s": 1.0}  # fmt: skip
    logdir = str(tmp_path)
    run.train(config(**values), logdir)
    rows = read_metrics(logdir)
    assert rows[-1]["env_steps"] >= 200_000
    # The episodes that ended in the last 20% of the env steps (a last call may end none).
    tail = [r for r in rows if r["env_steps"] > 160_000 and r["episodes"]]
    returns = sum(r["episode_return_mean"] * r["episodes"] for r in tail)
    assert returns / sum(r["episodes"] for r in tail) >= 150, tail[-3:]
    evaluation = evaluated(logdir, episodes=8)
    assert evaluation["episodes"] == 8 and evaluation["return"]["mean"] >= 150, evaluation


def test_what_brax_cannot_make_or_run_is_one_line():
    with pytest.raises(UnknownEnv, match="is not a brax env; brax has"):
        envs.check_env(config(**{"env.name": "pong"}).env)
    with pytest.raises(UnknownEnv, match=r"env.kwargs.episode_length=0 must be an int >= 1"):
        envs.check_env(config(**{"env.kwargs": {"episode_length": 0}}).env)
    with pytest.raises(UnknownEnv, match="do not fit brax's inverted_pendulum"):
        envs.check_env(config(**{"env.kwargs": {"gravity": 3}}).env)
    with pytest.raises(ConfigError, match=r"does not take network.action_squash") as e:
        run.check(config(**{"network.action_squash": True}))
    assert "\n" not in str(e.value)
