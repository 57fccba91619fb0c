"""Small real runs that must learn: a broken loss, target or carry cannot pass these."""

import os

import numpy as np
import pytest

from tests.procs import ROOT, returns, train

# Multi-process and learning runs: scripts/test.sh --fast leaves them out.
pytestmark = pytest.mark.slow

POMDP = os.path.join(ROOT, "configs", "cartpole_pomdp_lstm.py")
VTRACE = os.path.join(ROOT, "configs", "cartpole_vtrace.py")
RAINBOW = os.path.join(ROOT, "configs", "cartpole_rainbow.py")
R2D2 = os.path.join(ROOT, "configs", "cartpole_pomdp_r2d2.py")
PQN = os.path.join(ROOT, "configs", "cartpole_pqn.py")
TICTACTOE = os.path.join(ROOT, "configs", "tictactoe_selfplay.py")
QUICK = ["--config.log.interval_s=2", "--config.log.wandb_mode=disabled"]
ONE_DEVICE = {**os.environ, "XLA_FLAGS": ""}


def test_lstm_solves_cartpole_without_velocities_where_feed_forward_cannot(tmp_path):
    # Memoryless: positions alone do not tell which way the pole is falling (plateau ~50 from
    # about 60k steps on, where the control stops). One device: what is proven here is the carry,
    # not pmap (covered by tests/learning/test_learner.py), and the recurrent learner runs twice as
    # fast.
    ff = returns(
        train(
            tmp_path / "ff",
            POMDP,
            "--config.network.core=none",
            "--config.total_env_steps=60000",
            *QUICK,
            env=ONE_DEVICE,
        )
    )
    lstm = returns(
        train(
            tmp_path / "lstm",
            POMDP,
            "--config.total_env_steps=250000",
            "--config.stop_at_return=125",  # (about 120k steps: RESULTS.md)
            "--config.log.stop_hold_s=1",
            *QUICK,
            env=ONE_DEVICE,
        )
    )
    assert max(ff[-3:]) < 80, ff
    assert max(lstm) >= 120, lstm


def test_vtrace_learns_cartpole(tmp_path):
    rows = train(
        tmp_path / "vtrace",
        VTRACE,
        "--config.total_env_steps=200000",
        "--config.stop_at_return=160",
        "--config.log.stop_hold_s=1",
        *QUICK,
    )
    assert max(returns(rows)) >= 150, returns(rows)
    # The run ended, as finished, once the return had held the target for log.stop_hold_s (1 s
    # here): the last rows before the flush after the loop are at it, short of total_env_steps.
    reached = [i for i, r in enumerate(rows) if (r["episode_return_mean"] or 0) >= 160]
    assert reached and reached[-1] >= len(rows) - 2, returns(rows)
    assert rows[-1]["env_steps"] < 200000, rows[-1]


def test_rainbow_learns_cartpole_at_the_replay_ratio_it_is_given(tmp_path):
    rows = train(
        tmp_path / "rainbow",
        RAINBOW,
        "--config.total_env_steps=150000",
        "--config.optimizer.anneal_lr=False",  # the rate of the first 150k steps of 500k
        # Stopped where the test's threshold is: Rainbow can reach 210 for one row and fall back
        # below 100 before it held 200 for a second (a clean-clone run, 2026-12-07).
        "--config.stop_at_return=190",
        "--config.log.stop_hold_s=1",
        *QUICK,
    )
    assert max(returns(rows)) >= 190, returns(rows)
    assert rows[-1]["env_steps"] < 150_000  # stopped at the return, not the budget
    # Sampled transitions per received env step, each interval once learning runs (the replay
    # holds rainbow.min_fill): the configured 8 within 10% (a batch's sgd steps may fall in the
    # next interval).
    learning = [r["sample_reuse"] for r in rows if r["replay/size"] and r["replay/size"] > 6000]
    learning = [x for x in learning if x == x]
    assert len(learning) >= 3 and abs(np.mean(learning) - 8) <= 0.8, learning
    # Each actor's identity holds one Ape-X slot while connected (a row before it connects, or
    # after it leaves, says null: docs/metrics.md). Where both slots are held, slot 1's rate is
    # its own eps_1 annealed by the same share as slot 0's (seedlike.server.exploration):
    # left = (e0 - r0) / (1 - r0), e1 = r1 + (1 - r1) left, r from the config's 0.05, 3, 4 slots.
    r0, r1 = 0.05, 0.05 ** (1 + 3.0 / 3)
    held = [r for r in rows if None not in (r["exploration/epsilon_0"], r["exploration/epsilon_1"])]
    assert len(held) >= 3, [(r["exploration/epsilon_0"], r["exploration/epsilon_1"]) for r in rows]
    for r in held:
        left = (r["exploration/epsilon_0"] - r0) / (1 - r0)
        assert 0 <= left <= 1 and r["exploration/epsilon_1"] == pytest.approx(
            r1 + (1 - r1) * left, abs=1e-5
        ), r


def test_pqn_learns_cartpole_through_actors(tmp_path):
    """No replay and no target network: epsilon-greedy at the inference server, Q(lambda) from
    each batch (the shipped config reached 476 by 146k env steps, 500 at 500k: RESULTS.md)."""
    rows = train(
        tmp_path / "pqn",
        PQN,
        "--config.total_env_steps=150000",
        "--config.pqn.anneal_steps=50000",
        "--config.stop_at_return=250",
        "--config.log.stop_hold_s=1",
        *QUICK,
    )
    assert max(returns(rows)) >= 240, returns(rows)
    assert rows[-1]["env_steps"] < 150_000  # stopped at the return, not the budget


def test_r2d2_learns_cartpole_without_velocities(tmp_path):
    """Past the ~50 a memoryless policy plateaus at (the LSTM test above; benchmarks/r2d2.py
    measures R2D2 feed-forward too): the stored states and the burn-in carry what the positions
    alone cannot tell. One device, as the LSTM test above."""
    rows = train(
        tmp_path / "r2d2",
        R2D2,
        "--config.total_env_steps=300000",
        "--config.optimizer.anneal_lr=False",  # the rate of the first 300k steps of 1M
        "--config.stop_at_return=150",
        "--config.log.stop_hold_s=1",
        *QUICK,
        env=ONE_DEVICE,
    )
    assert max(returns(rows)) >= 140, returns(rows)
    assert rows[-1]["env_steps"] < 300_000  # stopped at the return, not the budget
    # The mean age of the sampled sequences' stored states, in policy versions, per row at
    # version v: the replay holds every version since the first (a uniform draw averages v / 2;
    # one run measured 0.47-0.58 v over its first 100 versions, priorities favouring the new),
    # so 0 <= age < 0.8 v, and the older states are drawn (> 1 by the end). States stored with
    # the current version would read 0; stored without one, the version itself.
    aged = [(r["loss/state_age"], r["policy_version"]) for r in rows]
    aged = [(a, v) for a, v in aged if a is not None]
    assert aged and all(0 <= a < max(1.0, 0.8 * v) for a, v in aged), aged
    assert aged[-1][0] > 1, aged


def test_selfplay_tictactoe_beats_the_random_agent(tmp_path):
    from seedlike.league import games, players

    logdir = tmp_path / "ttt"
    rows = train(
        logdir, TICTACTOE, "--config.total_env_steps=180000", "--config.league.eval_interval_s=10",
        *QUICK,
    )  # fmt: skip
    assert any(r.get("trueskill_mu") is not None for r in rows), "TrueSkill was never logged"
    assert rows[-1]["league/pool_size"] >= 5 and (logdir / "league" / "snapshots").is_dir()
    agent = games.checkpoint_agent(str(logdir))
    result = games.play_match("TicTacToe-v1", agent, players.RandomAgent(), 300, seed=1)
    # Random against random wins ~45% of games as either colour (a standard error of 0.03 over
    # 300 games); the trained agent far more. Self-play aims at the pool, not at random, and runs
    # spread: 0.73-0.85 in 8 runs at 180k steps (5 beside a Neural MMO job), 0.64 in one under
    # the whole suite's load, which is still 6 standard errors above random.
    assert result.win_rate() > 0.6, games.summarize(result)

    # Resuming restores the league: the pool, its snapshots and the TrueSkill references.
    pool = rows[-1]["league/pool_size"]
    resumed = train(logdir, TICTACTOE, "--config.total_env_steps=200000", *QUICK)
    assert resumed[-1]["league/pool_size"] >= pool
    assert resumed[-1]["env_steps"] > rows[-1]["env_steps"]
