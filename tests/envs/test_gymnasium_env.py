"""env.backend=gymnasium: registered ids and entry points as rows, spaces, errors, and a user's own
env trained from one command."""

import os
import re

import gymnasium as gym
import numpy as np
import pytest

from examples.corridor import Corridor
from seedlike.config import load_config_file
from seedlike.envs import UnknownEnv, check_env, make_env, make_env_spec
from tests.procs import ROOT, random_play_return, returns, train

CONFIG = os.path.join(ROOT, "configs", "gymnasium_ppo.py")


def env_config(name, num_envs=3, **kwargs):
    c = load_config_file(CONFIG)
    with c.unlocked():
        c.env.name, c.env.num_envs, c.env.kwargs = name, num_envs, kwargs
    return c.env


class Mixed(gym.Env):
    """A Dict observation of a Box and a Discrete, and a MultiDiscrete action."""

    observation_space = gym.spaces.Dict(
        {"pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float64), "room": gym.spaces.Discrete(3)}
    )
    action_space = gym.spaces.MultiDiscrete([2, 3])

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return {"pos": np.zeros(2), "room": 1}, {}

    def step(self, action):
        self.t += 1
        self.last = np.asarray(action)
        return {"pos": np.full(2, 0.5), "room": int(action[1])}, float(action[0]), False, False, {}


def test_an_entry_point_steps_as_rows_with_envpools_conventions():
    config = env_config("examples.corridor:Corridor", length=4)
    spec = make_env_spec(config)
    assert spec.observation["obs"].shape == (4,) and spec.num_actions == 2  # one-hot positions
    env = make_env(config, spec, seed=0)
    env.reset()
    rows = env.recv()
    np.testing.assert_array_equal(rows.obs["obs"], np.eye(4, dtype=np.float32)[[0, 0, 0]])
    assert rows.acting.all() and not rows.reward.any() and rows.player_id.tolist() == [0, 0, 0]
    right = np.array([1, 1, 0], np.int32)  # env 2 walks into the wall
    for _ in range(3):
        env.send(right, rows)
        rows = env.recv()
    assert rows.terminated.tolist() == [True, True, False]
    assert rows.acting.tolist() == [False, False, True] and rows.game_over.tolist()[:2] == [1, 1]
    np.testing.assert_allclose(rows.reward, [1.0, 1.0, -0.01])
    env.send(right, rows)  # ended envs reset: their actions are ignored
    rows = env.recv()
    np.testing.assert_allclose(rows.reward[:2], [0.0, 0.0])
    assert rows.acting.all()
    np.testing.assert_array_equal(rows.obs["obs"][:2], np.eye(4, dtype=np.float32)[[0, 0]])
    env.close()


def test_registered_ids_and_dict_observations_have_their_specs(monkeypatch):
    taxi = make_env_spec(env_config("Taxi-v4"))
    assert taxi.observation["obs"].shape == (500,) and taxi.num_actions == 6
    cartpole = make_env_spec(env_config("CartPole-v1"))
    assert (
        cartpole.observation["obs"].shape == (4,)
        and cartpole.observation["obs"].dtype == np.float32
    )
    monkeypatch.setattr("examples.corridor.Mixed", Mixed, raising=False)
    config = env_config("examples.corridor:Mixed", num_envs=2)
    spec = make_env_spec(config)
    assert spec.observation["pos"].shape == (2,) and spec.observation["pos"].dtype == np.float32
    assert spec.observation["room"].shape == (3,) and spec.action_heads == (2, 3)
    env = make_env(config, spec, seed=1)
    env.reset()
    rows = env.recv()
    np.testing.assert_array_equal(rows.obs["room"], [[0, 1, 0], [0, 1, 0]])
    env.send(np.array([5, 3], np.int32), rows)  # 5 = (1, 2), 3 = (1, 0) in the heads' order
    rows = env.recv()
    np.testing.assert_array_equal(rows.obs["room"], [[0, 0, 1], [1, 0, 0]])
    np.testing.assert_allclose(rows.reward, [1.0, 1.0])
    env.close()


class Typist(Corridor):
    """An action space seedlike cannot serve: free text."""

    def __init__(self):
        super().__init__()
        self.action_space = gym.spaces.Text(8)


def test_what_cannot_be_made_is_named_in_one_line():
    for name, message in [
        (
            "tests.envs.test_gymnasium_env:Typist",
            "seedlike supports Discrete, 1-d MultiDiscrete, Box",
        ),
        ("NoSuchEnv-v0", "Environment `NoSuchEnv` doesn't exist"),
        ("no_such_module:Env", "cannot import 'no_such_module'"),
        ("examples.corridor:Nothing", "examples.corridor has no env class or function 'Nothing'"),
        ("collections:OrderedDict", "returned a OrderedDict, not a gymnasium.Env"),
    ]:
        with pytest.raises((UnknownEnv, ValueError), match=re.escape(message)) as error:
            config = env_config(name)
            check_env(config)
            make_env_spec(config)
        assert "\n" not in str(error.value)


@pytest.mark.slow
def test_a_users_own_env_trains_from_one_command(tmp_path):
    rows = train(
        tmp_path / "corridor",
        CONFIG,
        "--config.env.name=examples.corridor:Corridor",
        "--config.total_env_steps=40000",
        "--config.stop_at_return=0.93",  # ends the run once learned (held for stop_hold_s)
        "--config.log.stop_hold_s=1",
        "--config.log.interval_s=2",
        "--config.log.wandb_mode=disabled",
    )
    got = returns(rows)
    # The shortest walk returns 1 - 6 x 0.01 = 0.94; random play far less.
    assert max(got) >= 0.93, got
    random = random_play_return(Corridor(), 300)
    assert random < 0.5, random


def test_watch_asks_for_frames_only_where_the_env_can_give_them():
    from seedlike.envs.gymnasium_env import takes_render_mode

    assert takes_render_mode("CartPole-v1")  # gymnasium.make takes render_mode
    assert not takes_render_mode("examples.corridor:Corridor")  # watch.py says so in one line
    assert takes_render_mode("gymnasium.envs.classic_control.cartpole:CartPoleEnv")


@pytest.mark.parametrize("make", [Corridor, lambda: __import__("examples.dial").dial.Dial()])
def test_the_single_agent_envs_the_project_ships_pass_gymnasiums_check(make):
    from gymnasium.utils.env_checker import check_env as gym_check_env

    gym_check_env(make(), skip_render_check=True)


def test_the_parallel_envs_the_project_ships_pass_pettingzoos_api_test():
    from pettingzoo.test import parallel_api_test

    from seedlike.envs.coins import Coins
    from seedlike.envs.targets import Targets

    for env in (Coins(), Targets()):
        parallel_api_test(env, num_cycles=100)
