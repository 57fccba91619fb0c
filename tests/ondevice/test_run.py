"""seedlike.ondevice: PPO on gymnax CartPole inside one compiled program, over the two forced CPU
devices of the suite (each holds half the envs; the sgd step averages their gradients)."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seedlike import checkpoint as ckpt_lib
from seedlike.config import ConfigError, load_config_file
from seedlike.metrics import read_metrics, read_summary
from seedlike.ondevice import run
from tests.helpers import config_file, evaluated

pytest.importorskip("gymnax")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, "configs", "gymnax_cartpole_ppo.py")
PQN = os.path.join(ROOT, "configs", "gymnax_cartpole_pqn.py")


def config(path=CONFIG, **values):
    return config_file(path, **values)


@pytest.mark.slow
def test_ppo_learns_cartpole_on_the_device(tmp_path):
    """PureJaxRL's settings (configs/gymnax_cartpole_ppo.py): 5 of 5 seeds here played 500 over
    the last 100k of 500k env steps (benchmarks/RESULTS.md); random play lasts about 22 steps."""
    row = run.train(config(**{"log.interval_s": 0.5}), str(tmp_path))
    assert row["env_steps"] >= 500_000 and row["episode_return_mean"] >= 400
    summary = read_summary(str(tmp_path))
    assert summary["outcome"] == "finished" and summary["final_return"] >= 400
    assert len(jax.local_devices()) == 2  # the program was pmapped over both


@pytest.mark.slow
def test_pqn_learns_cartpole_on_the_device(tmp_path):
    """purejaxql's settings (configs/gymnax_cartpole_pqn.py) at 150k env steps, epsilon annealed
    over the first 50k: 3 of 3 seeds played 464-500 in the median of their last 5 rows
    (2026-12-02), 485 over the episodes of the last 20% (2026-12-08); epsilon 0.2 stays on, so
    the greedy policy plays better still."""
    values = {"total_env_steps": 150_000, "pqn.anneal_steps": 50_000, "log.interval_s": 0.5}
    run.train(config(PQN, **values), str(tmp_path))
    rows = read_metrics(str(tmp_path))
    assert rows[-1]["env_steps"] >= 150_000
    # The episodes of the last 20% of the env steps, however the calls cut them into rows: a
    # row's mean is of the few episodes that ended in its call, and calls shorten under load
    # (a suite run on one busy core read a median of 318 from its last five rows).
    tail = [r for r in rows if r["env_steps"] > 120_000 and r["episodes"]]
    mean = sum(r["episode_return_mean"] * r["episodes"] for r in tail) / sum(
        r["episodes"] for r in tail
    )
    assert mean >= 400, tail
    assert rows[-1]["exploration/epsilon_0"] == pytest.approx(0.2)
    assert rows[0]["exploration/epsilon_0"] > 0.9  # annealed from 1


def test_a_stopped_and_resumed_run_ends_with_the_parameters_of_an_unbroken_one(tmp_path):
    """Stopped at 40 policy versions and resumed to 80 (envs, carry and keys restored from the
    checkpoint's "device" item, with the return statistics of the reward normalization),
    against 80 in one run: the same parameters, bit for bit."""
    small = {"total_env_steps": 80 * 4 * 32, "unroll_length": 32, "optimizer.anneal_lr": False}
    small["ppo.normalize_rewards"] = True
    whole = run.train(config(**small), str(tmp_path / "whole"))
    half = {**small, "total_env_steps": 40 * 4 * 32}
    run.train(config(**half), str(tmp_path / "broken"))
    resumed = run.train(config(**small), str(tmp_path / "broken"))
    assert whole["policy_version"] == resumed["policy_version"] == 80
    params = []
    for name in ("whole", "broken"):
        _, _, state, meta = ckpt_lib.load_checkpoint(str(tmp_path / name / "checkpoints"))
        params.append(jax.tree.leaves(state.params))
        assert meta["env_steps"] == 80 * 4 * 32
    # Bitwise: both runs execute the same compiled program on this CPU, update for update (the
    # call sizes differ, but every call runs the same loop body), so nothing rounds differently.
    for a, b in zip(*params, strict=True):
        np.testing.assert_array_equal(a, b)
    rows = read_metrics(str(tmp_path / "broken"))
    assert rows[-1]["env_steps"] == 80 * 4 * 32 and rows[0]["env_steps"] == 4 * 32


def test_seeds_side_by_side_in_one_program_train_as_each_would_alone(tmp_path):
    """seeds=2 from seed 3: agent 1 (seed 4) against seed 4 trained alone, 10 policy versions:
    the same parameters up to rounding (6e-8 seen: vmapped, the ops may round differently),
    while the two agents differ by O(1). Rerunning the group resumes both."""
    small = {"total_env_steps": 10 * 4 * 32, "unroll_length": 32, "optimizer.anneal_lr": False}
    run.train(config(**small, seeds=2, seed=3), str(tmp_path / "group"))
    run.train(config(**small, seed=4), str(tmp_path / "alone"))

    def params(path):
        return jax.tree.leaves(ckpt_lib.load_checkpoint(str(path / "checkpoints"))[2].params)

    alone, twin, other = (params(tmp_path / p) for p in ("alone", "group/seed_1", "group/seed_0"))
    for a, b in zip(alone, twin, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    assert max(float(np.abs(a - b).max()) for a, b in zip(alone, other)) > 0.1
    for k in (0, 1):
        own = tmp_path / "group" / f"seed_{k}"
        assert json.load(open(own / "config.json"))["seed"] == 3 + k
        assert read_summary(str(own))["outcome"] == "finished"
        assert read_metrics(str(own))[-1]["env_steps"] == 10 * 4 * 32
    more = {**small, "total_env_steps": 15 * 4 * 32}
    row = run.train(config(**more, seeds=2, seed=3), str(tmp_path / "group"))
    assert row["policy_version"] == 15
    assert read_metrics(str(tmp_path / "group" / "seed_1"))[-1]["policy_version"] == 15


def test_seeds_through_actors_are_refused_in_one_line():
    from seedlike import learner

    c = load_config_file(os.path.join(ROOT, "configs", "cartpole_ppo.py"))
    c.seeds = 3
    with pytest.raises(ConfigError, match="seeds=3 trains agents side by side in one program"):
        learner._checked(c)


def test_an_lstm_keeps_its_carry_in_the_program_and_in_the_checkpoint(tmp_path):
    """network.core='lstm': the program acts with the carry across rollouts and learns from
    whole unrolls replayed from the carry they started with; stopped at 6 versions and resumed
    to 12 it ends with the parameters of 12 in one run, bit for bit (the carry is in the
    checkpoint's "device" item: a fresh carry would change the rollouts)."""
    small = {
        "network.core": "lstm",
        "unroll_length": 16,
        "optimizer.anneal_lr": False,
        "ppo.num_minibatches": 2,  # whole sequences: 2 envs per device
    }
    whole = run.train(config(**small, total_env_steps=12 * 4 * 16), str(tmp_path / "whole"))
    run.train(config(**small, total_env_steps=6 * 4 * 16), str(tmp_path / "broken"))
    resumed = run.train(config(**small, total_env_steps=12 * 4 * 16), str(tmp_path / "broken"))
    assert whole["policy_version"] == resumed["policy_version"] == 12
    saved = ckpt_lib.Checkpointer(str(tmp_path / "broken" / "checkpoints"))
    try:
        probe = run.DeviceRun(config(**small), str(tmp_path / "probe"))
        probe.close()
        fresh = jax.tree.map(lambda x: x[:, 0], probe.acting_host())
        carry = saved.restore_extra(12, fresh).carry
    finally:
        saved.close()
    assert any(np.abs(c).max() > 0 for c in jax.tree.leaves(carry))  # not the initial zeros
    for name in ("whole", "broken"):
        assert read_summary(str(tmp_path / name))["outcome"] == "finished"
    a, b = (
        jax.tree.leaves(ckpt_lib.load_checkpoint(str(tmp_path / n / "checkpoints"))[2].params)
        for n in ("whole", "broken")
    )
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def test_pauses_return_targets_and_init_from_work_as_on_the_seed_path(tmp_path):
    """What PBT generations (pause_at_env_steps), learning checks (stop_at_return) and
    fine-tuning (init_from) need of a run, on the device."""
    per = 4 * 16
    small = {"unroll_length": 16, "total_env_steps": 10 * per}
    run.train(config(**small, pause_at_env_steps=4 * per), str(tmp_path / "a"))
    summary = read_summary(str(tmp_path / "a"))
    assert summary["outcome"] == "paused" and summary["env_steps"] == 4 * per
    run.train(config(**small), str(tmp_path / "a"))  # goes on to total_env_steps
    assert read_summary(str(tmp_path / "a"))["outcome"] == "finished"
    assert read_metrics(str(tmp_path / "a"))[-1]["policy_version"] == 10

    # A return any episode reaches, held 0 s: the run ends as finished at its first row.
    reached = {**small, "total_env_steps": 1000 * per, "stop_at_return": 1.0}
    row = run.train(config(**reached, **{"log.stop_hold_s": 0.0}), str(tmp_path / "b"))
    assert row["env_steps"] < 1000 * per
    assert read_summary(str(tmp_path / "b"))["outcome"] == "finished"

    # A new run from a's parameters: at learning rate 0 it keeps them through its one update.
    tuned = {**small, "total_env_steps": per, "optimizer.learning_rate": 0.0}
    run.train(config(**tuned, init_from=str(tmp_path / "a")), str(tmp_path / "c"))

    def params(name):
        path = str(tmp_path / name / "checkpoints")
        return jax.tree.leaves(ckpt_lib.load_checkpoint(path)[2].params)

    for x, y in zip(params("a"), params("c"), strict=True):
        np.testing.assert_array_equal(x, y)


def test_what_the_device_cannot_run_is_one_line_naming_it():
    with pytest.raises(
        ConfigError, match=r"does not take algo='rainbow' \(it learns from a replay"
    ):
        run.check(config(algo="rainbow"))
    with pytest.raises(ConfigError, match="take population.size > 1 yet"):
        run.check(config(**{"population.size": 2}))
    with pytest.raises(ConfigError, match="must split over 2 devices"):
        run.DeviceRun(config(batch_unrolls=3), "/nonexistent/never-written")


@pytest.mark.slow
def test_train_sh_runs_an_on_device_config_without_actors(tmp_path):
    logdir = str(tmp_path / "run")
    out = subprocess.run(
        ["scripts/train.sh", f"--config={CONFIG}", f"--logdir={logdir}",
         "--config.total_env_steps=20000", "--config.log.wandb_mode=disabled"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "no actors" in out.stderr and "finished at 20.5k env steps" in out.stderr
    assert not [f for f in os.listdir(logdir) if f.startswith("actor_")]
    assert read_summary(logdir)["env_steps"] == 20_480
    # Its checkpoint plays outside the program, through the backend's host adapter.
    assert evaluated(logdir, episodes=3, timeout=120)["episodes"] == 3
    again = subprocess.run(
        [sys.executable, "learner.py", f"--config={CONFIG}", f"--logdir={logdir}",
         "--config.algo=rainbow", "--config.total_env_steps=40000"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert again.returncode == 1 and again.stderr.strip().splitlines()[-1].startswith("error: ")


@pytest.mark.slow
def test_surgery_widens_an_on_device_run_exactly_and_it_trains_on(tmp_path):
    """Surgery reads an on-device checkpoint as any other; the widened run resumes on the device
    (its checkpoint has no envs saved: new episodes, the parameters go on)."""
    from surgery.checkpoint_surgery import run_surgery

    small = {"total_env_steps": 20 * 4 * 32, "unroll_length": 32}
    run.train(config(**small), str(tmp_path / "small"))
    wide = config(**{**small, "total_env_steps": 40 * 4 * 32, "network.hidden_sizes": (96, 64)})
    outcome = run_surgery(str(tmp_path / "small"), str(tmp_path / "wide"), new_config=wide)
    assert outcome.report.unroll_max_abs_logits < 1e-5
    row = run.train(wide, str(tmp_path / "wide"))
    assert row["policy_version"] == 40 and row["env_steps"] == 40 * 4 * 32
    _, network, state, _ = ckpt_lib.load_checkpoint(str(tmp_path / "wide" / "checkpoints"))
    assert state.params["params"]["policy_torso"]["dense_0"]["kernel"].shape == (4, 96)


def test_a_resume_with_another_number_of_envs_starts_them_afresh(tmp_path, caplog):
    """The saved envs are 4; the resumed run has 8: its checkpoint's "device" item does not fit
    (orbax would restore the old shape without a word), so the run goes on in new episodes."""
    small = {"unroll_length": 16, "optimizer.anneal_lr": False}
    run.train(config(**small, total_env_steps=10 * 4 * 16), str(tmp_path))
    more = config(**small, batch_unrolls=8, total_env_steps=10 * 4 * 16 + 5 * 8 * 16)
    row = run.train(more, str(tmp_path))
    assert row["policy_version"] == 15 and row["env_steps"] == 10 * 4 * 16 + 5 * 8 * 16
    assert "its 'device' state has other shapes; starting fresh envs" in caplog.text
    eight = run.DeviceRun(more, str(tmp_path / "fresh"))
    eight.close()
    acting = jax.tree.map(lambda x: x[:, 0], eight.acting_host())  # [devices, seeds, ...]
    checkpoints = ckpt_lib.Checkpointer(str(tmp_path / "checkpoints"))
    try:
        assert np.shape(checkpoints.restore_extra(15, acting).slots.first) == (2, 4)
        with pytest.raises(ckpt_lib.IncompatibleCheckpoint, match="has other shapes"):
            checkpoints.restore_extra(10, acting)
    finally:
        checkpoints.close()


def test_rewards_on_the_device_are_scaled_as_the_seed_paths_recorder_scales_them(tmp_path):
    """rollout.scale_rewards step by step against seedlike.server.return_scale.ReturnScale (the
    SEED path's, numpy) on the same rewards and episode ends of 6 envs."""
    from seedlike.ondevice import rollout
    from seedlike.server.return_scale import ReturnScale

    rng = np.random.default_rng(0)
    reward = (rng.normal(size=(40, 6)) * 30).astype(np.float32)
    ended = rng.random((40, 6)) < 0.1
    norm = rollout.RewardNorm(gamma=0.9, clip=2.0)
    reference = ReturnScale(0.9, 2.0)
    acting = rollout.Acting(None, (), None, jnp.zeros(6), rollout.normalization.init_stats(()))
    step = jax.jit(lambda a, r, e: rollout.scale_rewards(norm, a, r, e))
    for t in range(40):
        got, acting = step(acting, reward[t], ended[t])
        want = reference(reward[t], np.arange(6), ended[t])
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-5)
    assert np.abs(got).max() <= 2.0 and float(acting.return_stats.count) == 240
    # The program scales with them where the config asks: one update counts every env's steps
    # in the statistics, on both devices alike.
    device_run = run.DeviceRun(
        config(**{"ppo.normalize_rewards": True, "unroll_length": 8}), str(tmp_path)
    )
    try:
        device_run.call(1)
        counts = device_run.acting_host().return_stats.count  # [devices, seeds]
        np.testing.assert_array_equal(counts, np.full((2, 1), 4 * 8))
    finally:
        device_run.close()
