"""Pins down the envpool behaviour the trajectory store relies on (envpool 1.2.5)."""

import numpy as np
import pytest

from seedlike.config import section
from seedlike.envs.envpool_env import EnvpoolAdapter, check_task_id, make_env_spec
from seedlike.types import ArraySpec


def env_config(name="CartPole-v1", num_envs=2, batch_envs=0, **kwargs):
    return section("env", name=name, num_envs=num_envs, batch_envs=batch_envs, kwargs=kwargs)


def test_auto_reset_after_termination():
    """After a terminal step comes a reset: reward 0, not done, elapsed_step 0, action ignored."""
    import envpool

    env = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=1, seed=3)
    env.async_reset()
    obs, reward, terminated, truncated, info = env.recv()
    assert reward[0] == 0 and info["elapsed_step"][0] == 0
    steps = 0
    while True:
        env.send(np.zeros(1, np.int32), info["env_id"])  # always push left: falls quickly
        obs, reward, terminated, truncated, info = env.recv()
        steps += 1
        assert reward[0] == 1.0  # CartPole pays 1 for every step, the terminal one included
        if terminated[0]:
            break
        assert info["elapsed_step"][0] == steps
    assert not truncated[0] and 5 < steps < 50
    terminal_obs = obs.copy()
    env.send(np.ones(1, np.int32), info["env_id"])
    obs, reward, terminated, truncated, info = env.recv()
    assert reward[0] == 0.0 and not terminated[0] and not truncated[0]
    assert info["elapsed_step"][0] == 0
    assert np.all(np.abs(obs[0]) <= 0.05)  # CartPole resets to U(-0.05, 0.05)
    assert not np.allclose(obs, terminal_obs)


def test_truncation_at_max_episode_steps():
    import envpool

    env = envpool.make(
        "CartPole-v1", env_type="gymnasium", num_envs=1, seed=0, max_episode_steps=10
    )
    env.async_reset()
    _, _, terminated, truncated, info = env.recv()
    flags = []
    for _ in range(11):
        # Alternate pushes keep the pole up for 10 steps.
        env.send(np.array([len(flags) % 2], np.int32), info["env_id"])
        _, reward, terminated, truncated, info = env.recv()
        flags.append((bool(terminated[0]), bool(truncated[0]), int(info["elapsed_step"][0])))
    assert flags[9] == (False, True, 10)
    assert flags[10] == (False, False, 0)


def test_async_mode_reports_env_ids():
    import envpool

    env = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=4, batch_size=2, seed=0)
    env.async_reset()
    seen = set()
    for _ in range(8):
        obs, _, _, _, info = env.recv()
        assert obs.shape == (2, 4)
        seen.update(info["env_id"].tolist())
        env.send(np.zeros(2, np.int32), info["env_id"])
    assert seen == {0, 1, 2, 3}


def test_adapter_rows_single_player():
    spec = make_env_spec(env_config())
    env = EnvpoolAdapter(env_config(), spec, seed=0)
    env.reset()
    rows = env.recv()
    assert rows.obs["obs"].shape == (2, 4) and rows.obs["obs"].dtype == np.float32
    np.testing.assert_array_equal(rows.player_id, [0, 0])
    assert rows.acting.all()
    env.send(np.zeros(2, np.int32), rows)
    assert env.recv().reward.tolist() == [1.0, 1.0]


def test_two_player_rows_and_terminal_rewards():
    """Board games: one row per (env, player); only the mover acts; both seats see the result."""
    cfg = env_config("TicTacToe-v1", num_envs=3)
    spec = make_env_spec(cfg)
    assert spec.num_players == 2 and spec.extras["legal_action_mask"].shape == (9,)
    env = EnvpoolAdapter(cfg, spec, seed=1)
    env.reset()
    rng = np.random.default_rng(0)
    finished = 0
    for _ in range(60):
        rows = env.recv()
        assert rows.reward.shape == (6,)
        done = rows.terminated | rows.truncated
        for e in range(3):
            mine = rows.env_id == e
            # exactly one mover per live env, none in a finished one
            assert rows.acting[mine].sum() == (0 if done[mine].any() else 1)
            if done[mine].any():
                assert sorted(rows.reward[mine].tolist()) in ([-1.0, 1.0], [0.0, 0.0])
                finished += 1
        actions = np.zeros(6, np.int32)
        for i in np.flatnonzero(rows.acting):
            actions[i] = rng.choice(np.flatnonzero(rows.extras["legal_action_mask"][i]))
        env.send(actions, rows)
    assert finished >= 6


def test_unknown_task_id_suggests_names():
    with pytest.raises(ValueError, match="CartPole-v1"):
        check_task_id("CartPole-v9")


def test_atari_episodic_life_marks_lives_and_reports_the_game_end():
    """terminated flags every lost life; info["terminated"] only the end of the game."""
    cfg = env_config("Breakout-v5", num_envs=1, episodic_life=True)
    spec = make_env_spec(cfg)
    assert spec.observation["obs"] == ArraySpec(np.uint8, (4, 84, 84)) and spec.num_actions == 4
    env = EnvpoolAdapter(cfg, spec, seed=0)
    env.reset()
    rng = np.random.default_rng(0)
    lives_lost, games = 0, 0
    for _ in range(400):
        rows = env.recv()
        if rows.terminated[0]:
            lives_lost += 1
            games += int(rows.game_over[0])
            assert rows.game_over[0] == (lives_lost % 5 == 0)
        env.send(rng.integers(0, 4, 1).astype(np.int32), rows)
    assert lives_lost >= 5 and games >= 1
