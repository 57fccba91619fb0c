"""Multi-agent envs as rows: the PettingZoo adapter (agents that die and appear mid-episode, env
resets, agent ids), MAgent2's battle, envpool's simultaneous multi-agent tasks, and a small team
game that must learn through real actors and the league."""

import os
import subprocess

import numpy as np
import pytest

from seedlike.config import ConfigError, base_config, section, validate
from seedlike.envs import UnknownEnv, check_env, make_env, make_env_spec
from seedlike.envs.coins import Coins
from seedlike.envs.pettingzoo_env import AGENT_ID, load_factory
from tests.procs import HAS_NMMO, ROOT, Processes, metrics, returns, train

COINS = os.path.join(ROOT, "configs", "coins_teams.py")


def coins_config(**kwargs):
    return section(
        "env", **{"backend": "pettingzoo", "name": "seedlike.envs.coins", "num_envs": 3, **kwargs}
    )


def test_spec_of_a_pettingzoo_env():
    spec = make_env_spec(coins_config(agent_id=True))
    assert spec.num_players == 8 and spec.num_actions == 5 and not spec.extras
    assert str(spec.observation["obs"]) == "float32[9, 9, 4]"
    assert str(spec.observation[AGENT_ID]) == "float32[8]"


def test_rows_follow_agents_that_die_and_appear():
    """A dying agent reports once more (terminated, not acting) and never again in its game; a
    new agent (Coins: the player's next life) appears mid-game with a fresh row (reward 0)."""
    config = coins_config(num_envs=2, agent_id=True, kwargs={"size": 3, "max_steps": 40})
    spec = make_env_spec(config)
    assert spec.num_players == 8  # 2 teams x 2 players x 2 lives
    env = make_env(config, spec, seed=0)
    env.reset()
    rng = np.random.default_rng(0)
    gone = set()  # seats that died in their env's current game
    seen = {0: set(), 1: set()}  # seats that have reported in each env's current game
    deaths = appeared = games = 0
    for step in range(400):
        rows = env.recv()
        seats = list(zip(rows.env_id.tolist(), rows.player_id.tolist()))
        assert len(set(seats)) == len(seats)
        np.testing.assert_array_equal(rows.obs[AGENT_ID].argmax(1), rows.player_id)
        np.testing.assert_array_equal(rows.acting, ~(rows.terminated | rows.truncated))
        assert not gone & set(seats), "an agent reported after it died"
        for i, (e, p) in enumerate(seats):
            if step and seen[e] and p not in seen[e]:  # joined a game in progress
                assert rows.reward[i] == 0 and rows.acting[i]
                appeared += 1
            seen[e].add(p)
        died = {seat for seat, t in zip(seats, rows.terminated) if t}
        gone |= died
        deaths += len(died)
        # An env whose game ended resets: the next rows are a new game's first.
        for e in set(rows.env_id[rows.truncated].tolist()):
            games += 1
            seen[e] = set()
            gone = {s for s in gone if s[0] != e}
        env.send(rng.integers(0, 5, rows.reward.shape[0]).astype(np.int32), rows)
    assert deaths >= 3 and appeared >= 3 and games >= 10, (deaths, appeared, games)


def test_an_env_resets_after_its_last_agent_is_done():
    config = coins_config(num_envs=1, kwargs={"max_steps": 3})
    spec = make_env_spec(config)
    env = make_env(config, spec, seed=0)
    env.reset()
    steps = []
    for _ in range(5):
        rows = env.recv()
        steps.append((rows.truncated.all(), float(np.abs(rows.reward).sum())))
        env.send(np.zeros(rows.reward.shape[0], np.int32), rows)
    # Steps 1-2 play on, step 3 truncates everyone, the next rows are a new game's first.
    assert [t for t, _ in steps] == [False, False, False, True, False]
    assert steps[4][1] == 0.0


def test_magent_battle_rows():
    pytest.importorskip("magent2")
    config = section(
        "env", backend="pettingzoo", name="magent2.environments.battle_v4", num_envs=2,
        kwargs={"map_size": 45, "max_cycles": 5},
    )  # fmt: skip
    spec = make_env_spec(config)
    assert spec.num_players == 162 and spec.num_actions == 21
    assert str(spec.observation["obs"]) == "float32[13, 13, 5]"
    env = make_env(config, spec, seed=0)
    env.reset()
    rows = env.recv()
    assert rows.reward.shape == (324,) and rows.acting.all()
    np.testing.assert_array_equal(rows.player_id[:162], np.arange(162))
    for _ in range(5):
        env.send(np.zeros(rows.reward.shape[0], np.int32), rows)
        rows = env.recv()
    assert rows.truncated.all() and not rows.acting.any()  # max_cycles ended the game
    env.close()


def test_envpool_simultaneous_multi_agent_task():
    """intersection-multi-agent-v0 used to crash the actor (KeyError 'id'); its players now act
    together, one row each."""
    config = section("env", name="intersection-multi-agent-v0", num_envs=3)
    spec = make_env_spec(config)
    assert spec.num_players == 2 and not spec.extras
    env = make_env(config, spec, seed=0)
    env.reset()
    ended = np.zeros(3, bool)
    for _ in range(300):
        rows = env.recv()
        # Rows come grouped by env (in the order envpool returns them), players 0 and 1 in each.
        np.testing.assert_array_equal(rows.player_id, [0, 1] * 3)
        np.testing.assert_array_equal(rows.env_id[0::2], rows.env_id[1::2])
        assert sorted(rows.env_id[0::2]) == [0, 1, 2]
        done = rows.terminated | rows.truncated
        np.testing.assert_array_equal(done[0::2], done[1::2])  # a whole env ends together
        np.testing.assert_array_equal(rows.acting, ~done)
        ended[rows.env_id[0::2][done[0::2]]] = True
        env.send(np.full(6, 2, np.int32), rows)
        if ended.all():
            break
    assert ended.all()  # full speed ahead: every env's episode ends (a crash or the time limit)


def test_unknown_backend_and_module_are_one_line_errors():
    with pytest.raises(UnknownEnv, match="env.backend='gym' is not one of"):
        check_env(section("env", backend="gym", name="x"))
    config = base_config()
    config.env.backend = "pettingzoo"
    config.env.name = "no_such_package.battle"
    with pytest.raises(ConfigError, match=r"cannot import 'no_such_package.battle'.*pip install"):
        validate(config)


def test_coins_is_a_pettingzoo_parallel_env():
    from pettingzoo.test import parallel_api_test

    parallel_api_test(Coins(), num_cycles=100)


@pytest.mark.slow
def test_team_of_two_learns_coins_against_the_league(tmp_path):
    """One shared policy for team 0 against league snapshots and a random team, with team spirit
    and zero-sum rewards: random agents score ~1.6 coins a game, and lose half their games."""
    rows = train(
        tmp_path / "coins", COINS,
        "--config.total_env_steps=60000", "--config.log.interval_s=3",
        "--config.log.wandb_mode=disabled",
    )  # fmt: skip
    assert max(returns(rows)) >= 4.0, returns(rows)
    vs_random = [r["league/win_rate_vs_random"] for r in rows[-4:]]
    assert max(v for v in vs_random if v is not None) >= 0.8, vs_random
    assert rows[-1]["league/pool_size"] >= 3

    # watch.py's recorder plays every agent of both teams: one frame per step, a game is 32 steps.
    from seedlike.watch import record_episodes

    recording = record_episodes(str(tmp_path / "coins"), episodes=2)
    assert recording.lengths == [32, 32] and len(recording.frames) == 2 * 33
    assert recording.frames[0].shape == (80, 80, 3)


@pytest.mark.slow
def test_an_actor_runs_in_its_own_virtualenv_without_jax(tmp_path):
    """scripts/actor_venv.sh makes a venv with the actor's packages only; its actor plays Coins
    for a real learner until training ends, with OpenAI Five's pool across teammates (their
    observations cross the wire in every row and the learner trains the pooled network)."""
    venv = tmp_path / "actor-venv"
    made = subprocess.run(
        ["scripts/actor_venv.sh", str(venv)], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert made.returncode == 0, made.stderr[-3000:]
    python = str(venv / "bin" / "python")
    probe = subprocess.run([python, "-c", "import jax"], capture_output=True, text=True)
    assert "No module named 'jax'" in probe.stderr
    procs = Processes(tmp_path)
    try:
        logdir = tmp_path / "run"
        pool = ["--config.env.teammates=4", "--config.network.team_pool=0.5"]
        learner, address = procs.learner(
            logdir, "--config.total_env_steps=5000", "--config.log.wandb_mode=disabled", *pool,
            config=COINS,
        )  # fmt: skip
        actor = procs.spawn(
            ["actor.py", f"--server={address}", f"--config={COINS}", *pool], "actor.log",
            python=python,
        )  # fmt: skip
        assert actor.wait(timeout=300) == 0  # training over
        assert learner.wait(timeout=120) == 0
        last = metrics(logdir)[-1]
        assert last["env_steps"] >= 5000 and last["policy_version"] >= 3
    finally:
        procs.stop_all()


@pytest.mark.slow
def test_a_population_of_two_learners_each_learns_from_its_own_team(tmp_path):
    """train.sh --population=2: two independent learners in one world, each actor streaming red's
    rows to member 0 and blue's to member 1; both teams learn to collect coins."""
    done = subprocess.run(
        ["scripts/train.sh", f"--logdir={tmp_path}", f"--config={COINS}", "--population=2",
         "--config.total_env_steps=40000", "--config.log.interval_s=3",
         "--config.log.wandb_mode=disabled"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    for member in (0, 1):
        rows = metrics(tmp_path / f"member_{member}")
        assert rows[-1]["env_steps"] >= 30000  # both got their own agents' rows, half each
        assert max(returns(rows)) >= 3.5, (member, returns(rows))
        assert rows[-1].get("league/pool_size") is None  # its opponent is the other member


def test_an_aec_module_and_a_missing_package_say_what_to_do(tmp_path, monkeypatch):
    (tmp_path / "aec_only.py").write_text("def env(**kwargs):\n    raise AssertionError\n")
    (tmp_path / "needs_pkg.py").write_text("import not_installed_pkg_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=r"AEC.*aec_to_parallel\(aec_only.env\(\*\*kwargs\)\)"):
        load_factory("aec_only")
    with pytest.raises(ValueError, match=r"install it \(pip install not_installed_pkg_xyz\)"):
        load_factory("needs_pkg")


@pytest.mark.skipif(HAS_NMMO, reason="nmmo is installed in this interpreter (CI's .venv has not)")
def test_neural_mmo_without_nmmo_names_the_script_that_installs_it():
    from seedlike.envs.nmmo_env import NmmoEnv

    with pytest.raises(ValueError, match=r"cannot import .*scripts/nmmo_venv.sh.*--actor_python"):
        NmmoEnv()
