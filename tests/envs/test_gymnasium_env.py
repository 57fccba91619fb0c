"""env.backend=gymnasium: registered ids and entry points as rows, spaces, errors, and a user's own
env trained from one command."""

import json
import os
import re
import subprocess
import sys

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


class Described(gym.Env):
    """Observations of every shape the backend flattens: a Dict holding a Tuple, a Text, and a
    space that is no array at all (a Graph)."""

    observation_space = gym.spaces.Dict(
        {
            "pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
            "seat": gym.spaces.Tuple((gym.spaces.Discrete(3, start=1), gym.spaces.MultiBinary(2))),
            "mission": gym.spaces.Text(40),
            "map": gym.spaces.Graph(gym.spaces.Box(0, 1, (1,)), None),
        }
    )
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        return self._obs(), 0.0, True, False, {}

    def _obs(self):
        graph = gym.spaces.GraphInstance(np.zeros((1, 1), np.float32), None, None)
        seat = (2, np.array([1, 0], np.int8))
        return {"pos": np.full(2, 0.5, np.float32), "seat": seat, "mission": "go to the door",
                "map": graph}  # fmt: skip


def test_tuples_and_texts_are_flattened_and_obs_keys_apply_first(monkeypatch):
    monkeypatch.setattr("examples.corridor.Described", Described, raising=False)
    name = "examples.corridor:Described"
    # A Graph is no array: refused in one line that names the obs_keys leaving it out.
    with pytest.raises(ValueError, match=re.escape("leave it out with --config.env.obs_keys=")):
        make_env_spec(env_config(name))
    config = env_config(name, num_envs=2)
    with config.unlocked():
        config.obs_keys = ("pos", "seat_0", "seat_1", "mission")
    spec = make_env_spec(config)  # the text is left out (with a note): no mission_tokens
    assert {k: (v.dtype, v.shape) for k, v in spec.observation.items()} == {
        "pos": (np.float32, (2,)),
        "seat_0": (np.float32, (3,)),  # Discrete(3, start=1): one-hot of value - 1
        "seat_1": (np.int8, (2,)),
    }
    with config.unlocked():
        config.mission_tokens = 6
    spec = make_env_spec(config)
    assert spec.observation["mission"].shape == (6,)
    env = make_env(config, spec, seed=0)
    env.reset()
    obs = env.recv().obs
    np.testing.assert_array_equal(obs["seat_0"], [[0, 1, 0], [0, 1, 0]])
    np.testing.assert_array_equal(obs["seat_1"], [[1, 0], [1, 0]])
    from seedlike.envs.text import tokenize

    np.testing.assert_array_equal(obs["mission"], [tokenize("go to the door", 6)] * 2)
    env.close()
    with config.unlocked():
        config.obs_keys = ("pos", "nothing")
    with pytest.raises(ValueError, match=re.escape("has no observation ['nothing']; it has")):
        make_env_spec(config)
    from seedlike.envs.gymnasium_env import observation_parts

    box = gym.spaces.Box(0, 1, (1,))
    clash = gym.spaces.Dict({"a_b": box, "a": gym.spaces.Dict({"b": box})})
    with pytest.raises(ValueError, match=re.escape("parts ['a_b'] flatten to the same name")):
        observation_parts("Clash-v0", clash, env_config("Clash-v0"))


def test_an_id_a_package_registers_on_import_is_named_with_the_package():
    # (An id of an importable package that registers nothing: minigrid's ids stay registered
    # once any test of this process has imported it.)
    with pytest.raises(ValueError, match=re.escape("write env.name='examples:Examples-Maze-v0'")):
        make_env_spec(env_config("Examples-Maze-v0"))
    spec = make_env_spec(env_config("minigrid:MiniGrid-Empty-5x5-v0"))  # its mission left out
    assert sorted(spec.observation) == ["direction", "image"] and spec.num_actions == 7


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


@pytest.mark.slow
def test_envs_of_other_packages_and_shapes_train_from_the_readme_commands(tmp_path):
    """MiniGrid by package:Id (a Dict with a mission), Blackjack (a Tuple observation) and
    Pendulum (continuous actions, on the MuJoCo config), as README "Your own environment" runs
    them; each run ends once its return is reached."""
    minigrid = returns(
        train(
            tmp_path / "minigrid",
            CONFIG,
            "--config.env.name=minigrid:MiniGrid-Empty-5x5-v0",
            "--config.total_env_steps=100000",
            "--config.stop_at_return=0.9",
            *QUICK,
        )
    )
    assert max(minigrid) >= 0.9, minigrid
    import minigrid as _  # noqa: F401 (registers MiniGrid-Empty-5x5-v0)

    assert random_play_return(gym.make("MiniGrid-Empty-5x5-v0"), 100) < 0.5
    pendulum = returns(
        train(
            tmp_path / "pendulum",
            os.path.join(ROOT, "configs", "mujoco_ppo.py"),
            "--config.env.backend=gymnasium",
            "--config.env.name=Pendulum-v1",
            "--config.total_env_steps=300000",
            "--config.stop_at_return=-400",
            *QUICK,
        )
    )
    assert max(pendulum) >= -400, pendulum
    assert random_play_return(gym.make("Pendulum-v1"), 20) < -900
    logdir = tmp_path / "blackjack"
    train(logdir, CONFIG, "--config.env.name=Blackjack-v1", "--config.total_env_steps=60000",
          *QUICK)  # fmt: skip
    done = subprocess.run(
        [sys.executable, "evaluate.py", f"--checkpoint={logdir}", "--greedy", "--episodes=2000",
         f"--out={tmp_path / 'eval.json'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    greedy = json.loads((tmp_path / "eval.json").read_text())["return"]["mean"]
    random = random_play_return(gym.make("Blackjack-v1"), 4000)  # about -0.4
    assert greedy >= random + 0.2, (greedy, random)


QUICK = ("--config.log.stop_hold_s=1", "--config.log.interval_s=2",
         "--config.log.wandb_mode=disabled")  # fmt: skip
