"""League roles: who each role plays, when exploiters join the league and reset, the snapshots they
exchange through their directories, and the launcher that starts one learner per role."""

import json
import os
import subprocess
import sys

import chex
import jax
import numpy as np
import pytest

from seedlike.actor import Actor
from seedlike.config import ConfigError, load_config_file, validate
from seedlike.launch import api, jobs
from seedlike.launch.league import RoleLeague, role_runs
from seedlike.league import players, roles
from seedlike.league.league import League, PeerSnapshots, load_snapshot, save_snapshot
from seedlike.league.payoff import DRAW, LOSS, WIN
from seedlike.league.players import BOTS, LEARNER, UNSEEN
from seedlike.metrics import read_metrics
from seedlike.rpc import client
from tests.helpers import league_config
from tests.procs import ROOT

STRIDE = roles.STRIDE
C4_LEAGUE = "configs/connect4_league.py"


def params(x: float):
    return {"params": {"w": np.full((2, 3), x, np.float32)}, "obs_norm": {}}


def role_league(tmp_path, role, **overrides):
    directory = os.path.join(tmp_path, role, "league", "snapshots")
    config = league_config(role=role, role_dir=str(tmp_path), **overrides)
    return League(config, seed=0, snapshot_dir=directory)


def play(league, opponent, outcomes):
    for outcome in outcomes:
        league.record(opponent, outcome)


# Ids and who plays whom ------------------------------------------------------------------------


def test_snapshot_ids_keep_main_versions_and_put_other_roles_above_the_stride():
    assert roles.snapshot_id("main", 40) == 40
    assert roles.snapshot_id("main_exploiter", 40) == STRIDE + 40
    assert roles.snapshot_id("league_exploiter", 7) == 2 * STRIDE + 7
    for policy in (40, STRIDE + 40, 2 * STRIDE + 7):
        assert players.policy_id(players.describe(policy)) == policy
    assert players.describe(STRIDE + 40) == "main_exploiter/v40" and players.describe(40) == "v40"
    with pytest.raises(ValueError, match="'main/v3' is not a policy id"):
        players.policy_id("main/v3")  # the main agent's snapshots are plain versions
    assert roles.role_of(2 * STRIDE + 7) == "league_exploiter" and roles.version_of(STRIDE + 3) == 3
    with pytest.raises(ValueError, match="unknown league.role 'coach'; choose from main"):
        roles.snapshot_id("coach", 1)


def test_the_main_exploiter_plays_the_newest_main_snapshot_or_the_mains_it_half_beats(tmp_path):
    league = role_league(tmp_path, "main_exploiter", payoff_prior_games=0.0)
    assert league.sampler.probabilities() == {LEARNER: 1.0}  # no main agent yet: itself
    for v, x in ((10, 0.1), (20, 0.2), (30, 0.3)):
        league.add_peer_snapshot("main", v, params(x))
    league.add_peer_snapshot("league_exploiter", 5, params(0.5))  # never its opponent
    assert league.sampler.probabilities() == {30: 1.0}
    picks = league.opponents(200)
    assert set(picks.tolist()) == {30}
    # Beaten by the newest (1 win in 20 < 10%): main snapshots by x (1 - x), x its win rates.
    play(league, 30, [WIN] + [LOSS] * 19)
    play(league, 20, [WIN] * 3 + [LOSS])  # x = 0.75
    play(league, 10, [WIN, LOSS])  # x = 0.5
    w = np.array([0.5 * 0.5, 0.75 * 0.25, 0.05 * 0.95])
    expected = dict(zip([10, 20, 30], (w / w.sum()).tolist()))
    got = league.sampler.probabilities()
    assert list(got) == [10, 20, 30]
    np.testing.assert_allclose(list(got.values()), list(expected.values()), rtol=1e-12)
    assert STRIDE * 2 + 5 not in league.opponents(300)


def test_the_league_exploiter_plays_every_role_by_pfsp_and_never_itself_or_bots(tmp_path):
    league = role_league(tmp_path, "league_exploiter", bots=("random",), p_bots=0.5)
    assert league.bots == [] and league.p_bots == 0.0  # exploiters learn against the league alone
    league.add_peer_snapshot("main", 10, params(1))
    league.add_peer_snapshot("main_exploiter", 4, params(2))
    league.add_snapshot(6, params(3))  # its own, joined the league
    ids = [10, STRIDE + 4, 2 * STRIDE + 6]
    assert league.pool.ids == ids
    play(league, 10, [WIN] * 9)  # (9 + 0.5) / 10 -> weight 0.05^2
    play(league, STRIDE + 4, [LOSS] * 9)  # 0.5 / 10 -> weight 0.95^2
    x = np.array([0.95, 0.05, 0.5])
    w = (1 - x) ** 2
    got = league.sampler.probabilities()
    assert got[LEARNER] == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose([got[i] for i in ids], w / w.sum(), rtol=1e-12)
    picks = league.opponents(500)
    assert LEARNER not in picks and set(picks.tolist()) <= set(ids)


def test_the_main_agent_samples_every_roles_snapshots_and_keeps_its_bots(tmp_path):
    league = role_league(
        tmp_path, "main", sampler="uniform_recent", recent_k=3, p_latest=0.0,
        bots=("random",), p_bots=0.2,
    )  # fmt: skip
    league.add_snapshot(20, params(1))
    league.add_peer_snapshot("main_exploiter", 3, params(2))
    league.add_peer_snapshot("league_exploiter", 9, params(3))
    assert league.pool.ids == [20, STRIDE + 3, 2 * STRIDE + 9]
    picks = league.opponents(3000)
    shares = {p: np.mean(picks == p) for p in (20, STRIDE + 3, 2 * STRIDE + 9)}
    assert all(0.22 < s < 0.32 for s in shares.values()), shares  # 0.8 / 3 each
    assert 0.17 < np.mean(picks == BOTS["random"].id) < 0.23
    assert league.rule is None  # the main agent never resets


# Joining the league and resetting --------------------------------------------------------------


def test_a_main_exploiter_that_beats_the_main_agent_joins_the_league_and_resets(tmp_path):
    league = role_league(
        tmp_path, "main_exploiter", exploit_win_rate=0.7, exploit_min_games=10.0,
        payoff_prior_games=0.0,
    )  # fmt: skip
    league.add_peer_snapshot("main", 10, params(0))
    play(league, 10, [WIN] * 7 + [LOSS] * 2)  # 0.78, but 9 games < 10
    assert league.after_update(5, 1000, lambda: params(5)) is False
    play(league, 10, [DRAW])  # 7.5 / 10 = 0.75 > 0.7
    assert league.after_update(6, 1100, lambda: params(6)) is True
    assert league.exploit_win_rate == pytest.approx(0.75)
    saved = os.path.join(tmp_path, "main_exploiter", "league", "snapshots", "6")
    assert os.path.isdir(saved)  # on disk for the main agent
    assert league.pool.ids == [10]  # not in its own pool: it plays only the main agent
    assert league.payoff.games(LEARNER, 10) == pytest.approx(0.0, abs=1e-12)  # judged anew
    assert league.after_update(7, 1200, lambda: params(7)) is False
    m = league.take_metrics()
    assert (m["league/joined"], m["league/resets"]) == (1, 1)


def test_shared_games_count_for_the_main_exploiter_as_games_against_the_newest_main(tmp_path):
    """league.shared_games: games against the main agent's live policy (UNSEEN here) are judged as
    games against the newest main snapshot the exploiter holds; the main agent only counts them."""
    exploiter = role_league(
        tmp_path, "main_exploiter", exploit_win_rate=0.7, exploit_min_games=8.0,
        payoff_prior_games=0.0, shared_games=("main_exploiter",),
    )  # fmt: skip
    play(exploiter, UNSEEN, [WIN])  # no main snapshot yet: nothing to judge it against
    assert exploiter.payoff.games(LEARNER, 10) == pytest.approx(0.0, abs=1e-12)
    exploiter.add_peer_snapshot("main", 10, params(0))
    exploiter.add_peer_snapshot("main", 20, params(1))
    play(exploiter, UNSEEN, [WIN] * 7 + [LOSS])
    assert exploiter.payoff.games(LEARNER, 20) == pytest.approx(8.0)
    assert exploiter.payoff.games(LEARNER, 10) == pytest.approx(0.0, abs=1e-12)
    assert exploiter.after_update(3, 1000, lambda: params(3)) is True  # 7 / 8 > 0.7: an exploit
    m = exploiter.take_metrics()
    assert m["league/games_shared"] == 9
    assert m["league/win_rate_vs_shared"] == pytest.approx(8 / 9)

    main = role_league(tmp_path, "main", shared_games=("main_exploiter",))
    main.add_peer_snapshot("main_exploiter", 5, params(2))
    play(main, UNSEEN, [LOSS, WIN, LOSS, LOSS])
    assert main.payoff.games(LEARNER, roles.snapshot_id("main_exploiter", 5)) == pytest.approx(
        0.0, abs=1e-12
    )
    m = main.take_metrics()
    assert m["league/games_shared"] == 4
    assert m["league/win_rate_vs_shared"] == pytest.approx(0.25)
    assert "league/games_shared" not in role_league(tmp_path, "main").take_metrics()


def test_a_shared_game_actor_sends_each_side_to_its_learner_as_player_0(tmp_path):
    config = load_config_file("configs/tictactoe_selfplay.py")
    with config.unlocked():
        config.league.update(
            roles=("main", "main_exploiter"), role="main_exploiter", role_dir=str(tmp_path),
            shared_games=("main_exploiter",),
        )  # fmt: skip
    shared = Actor(config, "127.0.0.1:1", actor_id=3)
    np.testing.assert_array_equal(shared.member, [0, 1])  # player 0 to the main agent
    np.testing.assert_array_equal(shared._player_in_member, [0, 0])
    assert shared._main_id == 1003  # an identity of its own among the main agent's actors
    # Without the main agent's address the actor waits for it (reconnects), as for any server.
    with pytest.raises(client.Disconnected, match="main agent's learner is not up"):
        shared._connect(None)
    with config.unlocked():
        config.league.shared_games = ()
    plain = Actor(config, "127.0.0.1:1", actor_id=3)
    np.testing.assert_array_equal(plain.member, [0, 0])
    np.testing.assert_array_equal(plain._player_in_member, [0, 1])


def test_an_exploiter_without_success_joins_and_resets_at_its_time_limit(tmp_path):
    league = role_league(tmp_path, "main_exploiter", reset_env_steps=5000)
    league.add_peer_snapshot("main", 10, params(0))
    assert league.after_update(1, 4999, lambda: params(1)) is False
    assert league.after_update(2, 5000, lambda: params(2)) is True
    assert league.after_update(3, 9999, lambda: params(3)) is False  # the clock restarted
    assert league.after_update(4, 10000, lambda: params(4)) is True
    assert sorted(os.listdir(league.snapshot_dir)) == ["2", "4"]
    assert (league.rule.successes, league.rule.resets) == (0, 2)


def test_a_league_exploiter_joins_on_its_pfsp_weighted_win_rate_and_resets_by_chance(tmp_path):
    def succeed(reset_p):
        league = role_league(
            tmp_path / str(reset_p), "league_exploiter", exploit_win_rate=0.6,
            exploit_min_games=5.0, payoff_prior_games=0.0, league_exploiter_reset_p=reset_p,
        )  # fmt: skip
        league.add_peer_snapshot("main", 10, params(0))
        league.add_peer_snapshot("main", 20, params(1))
        play(league, 10, [WIN] * 10)  # x = 1: weight 0
        play(league, 20, [WIN] * 4 + [LOSS] * 6)  # x = 0.4: all the weight, 0.4 < 0.6
        assert league.after_update(1, 100, lambda: params(1)) is False
        assert league.exploit_win_rate == pytest.approx(0.4)
        play(league, 20, [WIN] * 20)  # 24 / 30 = 0.8
        return league.after_update(2, 200, lambda: params(2)), league

    reset, league = succeed(0.0)
    assert reset is False and league.rule.successes == 1 and league.rule.resets == 0
    assert 2 * STRIDE + 2 in league.pool  # league exploiters play their own past too
    reset, league = succeed(1.0)
    assert reset is True and league.rule.resets == 1


def test_learner_reset_restores_the_initial_params_and_optimizer_as_a_new_version():
    from networks import make_network
    from seedlike import config as config_lib
    from seedlike.learning.update import Learner

    config = load_config_file("configs/cartpole_ppo.py")
    network = make_network(config.network, config_lib.env_spec(config))
    learner = Learner(config, network, window_s=config.server.fair_window_s)
    initial = learner.init_state(jax.random.key(0))
    trained = learner.init_state(jax.random.key(1))
    trained = trained.replace(
        policy_version=trained.policy_version + 7, sgd_steps=trained.sgd_steps + 56
    )
    learner.set_state(trained)
    learner.reset(initial)
    after = learner.state()
    assert learner.policy_version == 8 and int(after.sgd_steps) == 56
    chex.assert_trees_all_equal(
        (after.params, after.opt_state), (initial.params, initial.opt_state)
    )
    leaves = jax.tree.leaves(jax.tree.map(lambda a, b: bool((np.asarray(a) != b).any()),
                                          initial.params, trained.params))  # fmt: skip
    assert any(leaves)  # the two starts differ, so the equality above means something


def test_an_exploiter_resets_to_the_newest_main_snapshot_with_a_fresh_optimizer(tmp_path):
    from networks import make_network
    from seedlike import config as config_lib
    from seedlike.learning.update import Learner

    config = load_config_file("configs/cartpole_ppo.py")
    network = make_network(config.network, config_lib.env_spec(config))
    learner = Learner(config, network, window_s=config.server.fair_window_s)
    initial = learner.init_state(jax.random.key(0))
    trained = learner.init_state(jax.random.key(1))
    learner.set_state(trained.replace(policy_version=trained.policy_version + 3))

    def snapshot(seed):
        state = learner.init_state(jax.random.key(seed))
        return {"params": state.params, "obs_norm": state.obs_norm}

    league = role_league(tmp_path, "league_exploiter", exploiter_reset="main")
    assert league.reset_state(initial) is initial  # no main snapshot yet: the run's start
    league.add_peer_snapshot("main", 10, snapshot(10))
    league.add_peer_snapshot("main", 20, snapshot(20))
    league.add_peer_snapshot("main_exploiter", 5, snapshot(5))  # newer in the pool, not main's
    learner.reset(league.reset_state(initial))
    after = learner.state()
    assert learner.policy_version == 4

    chex.assert_trees_all_equal(learner.policy_params(), snapshot(20))
    chex.assert_trees_all_equal(after.opt_state, initial.opt_state)
    with pytest.raises(AssertionError):
        chex.assert_trees_all_equal(after.params, initial.params)  # the equalities mean something
    plain = role_league(tmp_path, "main_exploiter")  # exploiter_reset="initial"
    plain.add_peer_snapshot("main", 10, snapshot(10))
    assert plain.reset_state(initial) is initial


# Snapshots between roles -----------------------------------------------------------------------


def test_peer_snapshots_are_read_from_the_other_roles_directories_once(tmp_path):
    league = role_league(tmp_path, "league_exploiter")
    main_dir = roles.snapshot_dir(str(tmp_path), "main")
    for v in (3, 7):
        save_snapshot(main_dir, v, params(v))
    os.makedirs(os.path.join(main_dir, "8.orbax-checkpoint-tmp-1"))  # a save in progress
    peers = PeerSnapshots(league, str(tmp_path), ("main", "main_exploiter"), params(0))
    assert peers.scan() == 2 and peers.scan() == 0
    np.testing.assert_array_equal(league.params(7)["params"]["w"], params(7)["params"]["w"])
    save_snapshot(roles.snapshot_dir(str(tmp_path), "main_exploiter"), 2, params(2))
    os.makedirs(os.path.join(main_dir, "11"))  # unreadable: skipped, not retried
    assert peers.scan() == 1
    assert league.pool.ids == [3, 7, STRIDE + 2]
    assert peers.scan() == 0 and league.newest_version("main") == 11


def test_a_roles_league_state_survives_a_checkpoint_round_trip(tmp_path):
    league = role_league(tmp_path, "main_exploiter", reset_env_steps=100)
    save_snapshot(roles.snapshot_dir(str(tmp_path), "main"), 30, params(3))
    league.add_peer_snapshot("main", 30, params(3))
    play(league, 30, [WIN, LOSS, WIN])
    assert league.after_update(4, 100, lambda: params(4)) is True
    play(league, 30, [WIN])
    state = league.state_dict()
    restored = role_league(tmp_path, "main_exploiter", reset_env_steps=100)
    restored.load_state_dict(state, params(0))
    assert restored.pool.ids == [30] and restored.newest_version("main") == 30
    assert restored.rule.state_dict() == league.rule.state_dict()
    assert {k: v for k, v in league.rule.state_dict().items() if k != "rng"} == {
        "since_env_steps": 100, "resets": 1, "successes": 0,
    }  # fmt: skip
    assert restored.payoff.counts(LEARNER, 30) == league.payoff.counts(LEARNER, 30)
    np.testing.assert_array_equal(restored.params(30)["params"]["w"], params(3)["params"]["w"])
    assert isinstance(restored.sampler, roles.MainExploiterSampler)


def test_payoff_decay_and_prior_from_the_config_follow_a_hand_computed_sequence(tmp_path):
    league = League(league_config(payoff_decay=0.9, payoff_prior_games=2.0))
    league.add_snapshot(20, params(0))
    play(league, 20, [WIN, WIN, LOSS, DRAW])
    # w, d, l after each game: (1, 0, 0); (1.9, 0, 0); (1.71, 0, 1); (1.539, 1, 0.9)
    wins, draws, losses = league.payoff.counts(LEARNER, 20)
    np.testing.assert_allclose([wins, draws, losses], [1.539, 1.0, 0.9], rtol=1e-12)
    games = 1.539 + 1.0 + 0.9
    np.testing.assert_allclose(
        league.payoff.win_rate(LEARNER, 20), (1.539 + 0.5 + 0.5 * 2.0) / (games + 2.0), rtol=1e-12
    )


# Config and launcher ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"role": "coach", "role_dir": "x"}, "league.role='coach' must be one of"),
        ({"role": "main"}, "league.role needs league.role_dir"),
        ({"roles": ("main_exploiter",)}, "league.roles needs a main agent"),
        ({"roles": ("main", "main")}, "must name distinct roles"),
        ({"roles": ("main",), "role_actors": (1, 2)}, "one actor count per entry"),
        ({"payoff_decay": 0.99, "exploit_min_games": 100.0}, "is never reached"),
        ({"exploiter_reset": "best"}, "league.exploiter_reset='best' must be one of"),
        ({"roles": ("main",), "shared_games": ("main",)}, "must name distinct exploiter roles"),
        (
            {"roles": ("main", "league_exploiter"), "shared_games": ("main_exploiter",)},
            "must name distinct exploiter roles",
        ),
    ],
)
def test_role_settings_that_cannot_work_are_one_line_errors(overrides, message):
    config = load_config_file("configs/connect4_selfplay.py")
    with config.unlocked():
        config.league.update(overrides)
    with pytest.raises(ConfigError, match=message):
        validate(config)


def test_the_launcher_gives_each_role_its_directory_seed_actors_and_niceness(tmp_path):
    runs, actors, nice = role_runs(C4_LEAGUE, str(tmp_path), {"seed": "4"}, 4)
    assert list(runs) == ["main", "main_exploiter", "league_exploiter"]
    assert runs["main"] == ({"league.role": "main", "league.role_dir": str(tmp_path)}, 4)
    assert runs["league_exploiter"][0]["league.eval_interval_s"] == "0"
    assert runs["main_exploiter"][0]["total_env_steps"] == str(10**12)  # ends with the main agent
    assert [runs[r][1] for r in runs] == [4, 5, 6]
    assert actors == {"main": 2, "main_exploiter": 1, "league_exploiter": 1}
    assert nice == {"main": 0, "main_exploiter": 5, "league_exploiter": 5}
    with pytest.raises(jobs.SpecError, match="has no league.roles"):
        role_runs("configs/connect4_selfplay.py", str(tmp_path), {}, 0)
    # Exploiters only, on top of everything else.
    cheap = {"league.exploiter_overrides": "('ppo.epochs=1', 'config.ppo.num_minibatches = 2')"}
    runs, _, _ = role_runs(C4_LEAGUE, str(tmp_path), cheap, 0)
    assert "ppo.epochs" not in runs["main"][0]
    for role in ("main_exploiter", "league_exploiter"):
        assert runs[role][0]["ppo.epochs"] == "1" and runs[role][0]["ppo.num_minibatches"] == "2"
    with pytest.raises(jobs.SpecError, match="unknown config key 'ppo.epoch'"):
        role_runs(C4_LEAGUE, str(tmp_path), {"league.exploiter_overrides": "('ppo.epoch=1',)"}, 0)
    with pytest.raises(jobs.SpecError, match="'ppo.epochs' is not KEY=VALUE"):
        role_runs(C4_LEAGUE, str(tmp_path), {"league.exploiter_overrides": "('ppo.epochs',)"}, 0)


def test_the_exploiters_stop_when_the_main_agents_run_ends(tmp_path, monkeypatch):
    monkeypatch.setattr(jobs, "POLL_S", 0.01)
    started = {}

    def train(config, logdir, num_actors=2, overrides=None, flags=(), nice=0):
        role = os.path.basename(logdir)
        seconds = 0.3 if role == "main" else 60
        proc = subprocess.Popen(
            [sys.executable, "-c", f"import time; time.sleep({seconds})"], start_new_session=True
        )
        started[role] = (proc, num_actors, nice)
        return api.Run(proc, logdir)

    league = RoleLeague(C4_LEAGUE, str(tmp_path), {}, 1, 0, 0, train=train)
    state = league.run()["runs"]
    assert state["main"]["state"] == "done"
    assert state["main_exploiter"]["state"] == state["league_exploiter"]["state"] == "stopped"
    assert all(proc.poll() is not None for proc, *_ in started.values())
    assert {r: (n, k) for r, (_, n, k) in started.items()} == {
        "main": (2, 0), "main_exploiter": (1, 5), "league_exploiter": (1, 5),
    }  # fmt: skip
    started.clear()  # the same command again: the league is over, nothing starts
    again = RoleLeague(C4_LEAGUE, str(tmp_path), {}, 1, 0, 0, train=train).run()["runs"]
    assert started == {} and again["main"]["state"] == "done"


@pytest.mark.slow
def test_a_league_of_roles_runs_from_the_command_line_and_shares_its_snapshots(tmp_path):
    logdir = tmp_path / "league"
    command = [
        sys.executable, "-m", "seedlike.launch.league", "--config=configs/tictactoe_selfplay.py",
        f"--logdir={logdir}", "--config.league.roles=('main','main_exploiter','league_exploiter')",
        # 120k: the main agent plays 60k in about 10 s, about when the exploiters first join
        # (a clean-clone suite run ended before it met either, 2026-12-07).
        "--config.total_env_steps=120000", "--config.league.reset_env_steps=1000",
        "--config.league.snapshot_every=2", "--config.league.peer_refresh_s=1",
        "--config.league.eval_interval_s=0", "--config.log.interval_s=2",
        "--config.league.shared_games=('main_exploiter',)",
    ]  # fmt: skip
    root = ROOT
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "roles: main done, main_exploiter stopped, league_exploiter stopped" in done.stdout
    main = read_metrics(str(logdir / "main"))
    exploiter = read_metrics(str(logdir / "main_exploiter"))
    hunter = read_metrics(str(logdir / "league_exploiter"))
    assert main[-1]["env_steps"] >= 120000
    # The main exploiter's actors played shared games: both learners recorded their sides.
    for run in (main, exploiter):
        assert sum(r.get("league/games_shared") or 0 for r in run) > 0
        assert any(r.get("league/win_rate_vs_shared") is not None for r in run)
    # The exploiters joined the league on their time limit, and the main agent played them.
    assert max(r.get("league/resets") or 0 for r in exploiter) >= 1
    assert versions_on_disk(logdir, "main_exploiter") and versions_on_disk(logdir, "main")
    # Either exploiter's snapshots, picked up from its directory (which joins first depends on
    # how the machine shares its cores among the three).
    assert any(
        r.get(f"league/win_rate_vs_{role}") is not None
        for r in main
        for role in ("main_exploiter", "league_exploiter")
    )
    assert any(r.get("league/win_rate_vs_main") is not None for r in hunter)


def versions_on_disk(logdir, role) -> list[int]:
    directory = roles.snapshot_dir(str(logdir), role)
    return sorted(int(v) for v in os.listdir(directory) if v.isdigit())


def test_a_snapshot_reached_again_after_a_crash_is_the_one_on_disk(tmp_path):
    """The main agent wrote snapshot 20 and crashed before its next checkpoint; resumed, it
    reaches version 20 again with other params. The other roles and a resume know the disk
    copy, so the pool takes that one too: one policy per id, everywhere."""
    league = role_league(tmp_path, "main", sampler="uniform_recent", p_latest=0.0)
    save_snapshot(league.snapshot_dir, 20, params(7))  # the lost timeline's
    league.add_snapshot(20, params(1))
    np.testing.assert_array_equal(league.params(20)["params"]["w"], np.full((2, 3), 7.0))
    on_disk = load_snapshot(league.snapshot_dir, 20, params(0))
    np.testing.assert_array_equal(on_disk["params"]["w"], np.full((2, 3), 7.0))
    league.add_snapshot(40, params(2))  # a new version is written as it is
    np.testing.assert_array_equal(league.params(40)["params"]["w"], np.full((2, 3), 2.0))
    on_disk = load_snapshot(league.snapshot_dir, 40, params(0))
    np.testing.assert_array_equal(on_disk["params"]["w"], np.full((2, 3), 2.0))


def test_the_reset_draws_go_on_across_a_resume():
    """A league exploiter's reset draws continue the saved stream: a restart used to replay the
    first draw, so with seed 0 (0.129 < 0.25) it reset after every success."""
    rule = roles.ResetRule("league_exploiter", 0.7, 100.0, 0, 0.25, seed=0)
    for _ in range(5):
        rule._rng.random()
    state = json.loads(json.dumps(rule.state_dict()))
    resumed = roles.ResetRule("league_exploiter", 0.7, 100.0, 0, 0.25, seed=0)
    resumed.load_state_dict(state)
    assert [resumed._rng.random() for _ in range(3)] == [rule._rng.random() for _ in range(3)]
