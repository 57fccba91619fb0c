"""League roles and TrueSkill on the device (seedlike.ondevice.opponents and .run): a role plays
the other roles' snapshots read from their directories, an exploiter resets to its start as the
next policy version, and `python -m seedlike.launch.league` runs the roles as on-device runs
with the main agent rated by TrueSkill beside its program."""

import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from networks import make_network
from seedlike import envs
from seedlike.algos import ALGORITHMS
from seedlike.checkpoint import load_checkpoint
from seedlike.league import roles
from seedlike.league.league import save_snapshot
from seedlike.metrics import read_metrics
from seedlike.ondevice import opponents, run
from tests.helpers import config_file
from tests.procs import wait_for

pytest.importorskip("pgx")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, "configs", "pgx_tictactoe.py")


def config(**values):
    return config_file(CONFIG, **{"league.eval_interval_s": 0.0, **values})


def leaves_equal(a, b) -> None:
    """Bitwise: copies of the same arrays."""
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_a_role_plays_the_other_roles_snapshots_from_their_directories(tmp_path):
    """A main exploiter's snapshot 7 on disk: the main agent's reader holds it, and at the next
    snapshot's version (10) it joins the pool and takes a slot that holds its params, drawn with
    the league's probability for it (OpenAI Five: 0.2 of the games over 2 snapshots, 0.1)."""
    c = config(**{"league.role": "main", "league.role_dir": str(tmp_path),
                  "league.peer_refresh_s": 0.1, "league.max_snapshots": 4,
                  "league.bots": (), "league.p_bots": 0.0})  # fmt: skip
    network = make_network(c.network, envs.make_env_spec(c.env))

    def policy(seed):
        params = network.init(jax.random.key(seed))
        return jax.device_get({"params": params, "obs_norm": network.init_obs_norm()})

    theirs = policy(1)
    save_snapshot(roles.snapshot_dir(str(tmp_path), "main_exploiter"), 7, theirs)
    league = opponents.DeviceLeague(c, str(tmp_path / "main"), policy(0))
    league.start(c, network, {})
    try:
        peer = roles.snapshot_id("main_exploiter", 7)
        wait_for(lambda: league.arrivals.newest_version("main_exploiter") == 7, 120,
                 what="the reader to read the peer's snapshot")  # fmt: skip
        before = league.league.probabilities()
        league.after_update(5, 0, None)  # not a snapshot's version: the pool stands still
        assert peer not in league.league.pool_ids() and league.league.probabilities() == before
        league.after_update(10, 0, lambda: policy(2))  # main's own v10 joins, and the peer's
        slot = league.slots.index(peer)
        leaves_equal(jax.tree.map(lambda x: x[slot], league.players), theirs)
        drawn = dict(zip(league.choices(), np.exp(np.asarray(league.table().logits)).tolist()))
        assert drawn[peer] == pytest.approx(0.1, abs=1e-6)
        assert drawn[peer] == pytest.approx(league.league.probabilities()[peer], abs=1e-6)
    finally:
        league.close()


def test_an_exploiter_resets_to_its_start_as_the_next_version(tmp_path):
    """A main exploiter with a time limit of one env step and no main snapshot to beat: at its
    first snapshot's version (10) it joins the league in its directory and goes on from its
    initial params with a fresh optimizer as version 11, its gradient steps counted on."""
    c = config(**{"league.role": "main_exploiter", "league.role_dir": str(tmp_path),
                  "league.reset_env_steps": 1})  # fmt: skip
    device_run = run.DeviceRun(c, str(tmp_path / "main_exploiter"))
    try:
        device_run.call(10)
        state = jax.device_get(jax.tree.map(lambda x: x[0, 0], device_run.state))
    finally:
        device_run.close()
    initial = device_run.initial_state
    assert int(state.policy_version) == 11 and device_run.agents[0].version == 11
    leaves_equal(state.params, initial.params)
    leaves_equal(state.opt_state, initial.opt_state)
    assert int(state.sgd_steps) == 10 * ALGORITHMS[c.algo].sgd_steps(c)
    assert os.listdir(roles.snapshot_dir(str(tmp_path), "main_exploiter")) == ["10"]
    assert device_run.league.league.rule.resets == 1
    assert roles.snapshot_id("main_exploiter", 10) not in device_run.league.league.pool_ids()


@pytest.mark.slow
def test_a_league_of_roles_runs_on_the_device_from_the_command_line(tmp_path):
    """Tic-tac-toe on pgx, three roles from one command: the exploiters join on their time limit
    at their first snapshot's version and reset, the main agent meets their snapshots, and its
    TrueSkill evaluation rates it beside the program and is in its checkpoint."""
    logdir = tmp_path / "league"
    command = [
        sys.executable, "-m", "seedlike.launch.league", "--config=configs/pgx_tictactoe.py",
        f"--logdir={logdir}", "--config.league.roles=('main','main_exploiter','league_exploiter')",
        "--config.total_env_steps=150000", "--config.league.reset_env_steps=1",
        "--config.league.snapshot_every=2", "--config.league.peer_refresh_s=1",
        "--config.league.eval_interval_s=2", "--config.league.eval_games=20",
        "--config.league.reference_games=20", "--config.log.interval_s=1",
        "--config.log.wandb_mode=disabled",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "roles: main done, main_exploiter stopped, league_exploiter stopped" in done.stdout
    main = read_metrics(str(logdir / "main"))
    assert main[-1]["env_steps"] >= 150000
    for role in ("main_exploiter", "league_exploiter"):
        rows = read_metrics(str(logdir / role))
        assert os.listdir(roles.snapshot_dir(str(logdir), role)), role  # joined the league
        assert not any("trueskill_mu" in r for r in rows)  # the launcher turns it off there
        if role == "main_exploiter":  # it resets whenever it joins (the other one at 25%)
            assert max(r.get("league/resets") or 0 for r in rows) >= 1
    assert any(
        r.get(f"league/win_rate_vs_{role}") is not None
        for r in main
        for role in ("main_exploiter", "league_exploiter")
    )
    rated = [r for r in main if r.get("trueskill_version", 0) > 0]
    assert rated and np.isfinite(rated[-1]["trueskill_mu"])
    # Against the references nearest its skill (league.eval_opponents of them).
    assert any(k.startswith("eval/win_rate_vs_") for k in rated[-1])
    _, _, _, meta = load_checkpoint(str(logdir / "main" / "checkpoints"))
    assert meta["evaluation"]["evaluator"]["references"]
