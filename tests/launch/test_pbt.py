"""python -m seedlike.launch.pbt: explore and exploit, a population resumed mid-way, and real
checkpoints copied whole."""

import json
import math
import os
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from seedlike.launch import api, jobs, pbt
from tests.procs import ROOT

CARTPOLE = os.path.join(ROOT, "configs", "cartpole_ppo.py")
SPACE = jobs.parse_space(
    [
        "optimizer.learning_rate=log:1e-5:1e-2",
        "ppo.epochs=int:1:10",
        "network.activation=choice:relu,tanh",
    ]
)


def test_explore_moves_only_the_space_values_within_their_ranges():
    explore = pbt.Explore(SPACE, perturb=(0.8, 1.2), resample=0.5)
    values = {"optimizer.learning_rate": "1e-3", "ppo.epochs": "10", "network.activation": "relu"}
    rng = np.random.default_rng(0)
    seen = {"lr": set(), "epochs": set(), "activation": set()}
    for _ in range(200):
        out = explore(values, rng)
        assert out.keys() == values.keys()
        seen["lr"].add(float(out["optimizer.learning_rate"]))
        seen["epochs"].add(out["ppo.epochs"])
        seen["activation"].add(out["network.activation"])
    assert sorted(seen["lr"]) == pytest.approx([8e-4, 1.2e-3])
    assert seen["epochs"] == {"8", "10"}  # 10 x 1.2 = 12 is kept at the range's end
    assert seen["activation"] == {"relu", "tanh"}
    top = {"optimizer.learning_rate": "0.01", "ppo.epochs": "1", "network.activation": "tanh"}
    low = pbt.Explore(SPACE, perturb=(0.8,), resample=0.0)(top, rng)
    assert low == {
        "optimizer.learning_rate": "0.008",
        "ppo.epochs": "1",
        "network.activation": "tanh",
    }
    high = pbt.Explore(SPACE, perturb=(1.2,), resample=0.0)(top, rng)
    assert high["optimizer.learning_rate"] == "0.01" and high["ppo.epochs"] == "1"


def test_the_bottom_quantile_copies_the_top_and_nothing_else_changes():
    members = [{"values": {"optimizer.learning_rate": str(lr)}} for lr in (1e-5, 1e-3, 1e-4, 1e-2)]
    before = [dict(m["values"]) for m in members]
    explore = pbt.Explore(jobs.parse_space(["optimizer.learning_rate=log:1e-6:1"]), (0.5,))
    fitness = [1.0, 4.0, 3.0, 2.0]
    pairs = pbt.exploit_explore(members, fitness, 0.25, explore, np.random.default_rng(0))
    assert pairs == [(0, 1)]  # the worst (member 0) copies the best (member 1)
    assert members[0]["values"] == {"optimizer.learning_rate": "0.0005"}
    assert [m["values"] for m in members[1:]] == before[1:]
    # Half of 4: the two worst copy from the two best; a member without a fitness ranks last.
    pairs = pbt.exploit_explore(members, [5.0, math.nan, 3.0, 1.0], 0.5, explore,
                                np.random.default_rng(1))  # fmt: skip
    assert sorted(p[0] for p in pairs) == [1, 3] and {p[1] for p in pairs} <= {0, 2}
    # Members without a fitness are never copied, even where they would fill the top quantile;
    # with none measured nothing changes.
    pairs = pbt.exploit_explore(members, [5.0, math.nan, math.nan, math.nan], 0.5, explore,
                                np.random.default_rng(1))  # fmt: skip
    assert {p[1] for p in pairs} == {0} and len(pairs) == 1
    assert (
        pbt.exploit_explore(members, [math.nan] * 4, 0.5, explore, np.random.default_rng(1)) == []
    )
    # For a loss, lower is better.
    pairs = pbt.exploit_explore(members, [1.0, 4.0, 3.0, 2.0], 0.25, explore,
                                np.random.default_rng(0), mode="min")  # fmt: skip
    assert pairs == [(1, 0)]


def _peak(values):
    """A stand-in return, best at a learning rate of 1e-3."""
    return -abs(math.log10(float(values["optimizer.learning_rate"])) + 3.0)


def fake_train(config, logdir, num_actors=2, overrides=None, flags=()):
    """Trains nothing: writes a metrics row and a 'checkpoint' naming what it ran."""
    pause = int(overrides["pause_at_env_steps"])
    os.makedirs(os.path.join(logdir, "checkpoints", str(pause)), exist_ok=True)
    with open(os.path.join(logdir, "checkpoints", str(pause), "state"), "w") as f:
        f.write(json.dumps(overrides, sort_keys=True))
    with open(os.path.join(logdir, "metrics.jsonl"), "a") as f:
        f.write(json.dumps({"time": time.time(), "env_steps": pause,
                            "episode_return_mean": _peak(overrides)}) + "\n")  # fmt: skip
    return api.Run(subprocess.Popen(["true"]), logdir)


def _population(logdir, exploit=True):
    explore = pbt.Explore(jobs.parse_space(["optimizer.learning_rate=log:1e-5:1e-1"]), (0.5, 2.0))
    return pbt.Population(
        CARTPOLE, logdir, 4, 75_000, explore, 0.25, "episode_return_mean", "max", seed=3,
        flags=[], exploit=exploit, train=fake_train,
    )  # fmt: skip


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
def test_a_resumed_population_makes_the_same_choices(tmp_path, monkeypatch):
    monkeypatch.setattr(jobs, "POLL_S", 0.01)  # the stand-in jobs end at once
    whole = str(tmp_path / "whole")
    assert _population(whole).run()  # 300k env steps / 75k: four generations
    records = pbt.read_records(whole)
    assert [r["generation"] for r in records] == [g for g in range(4) for _ in range(4)]
    copies = [r for r in records if "copied" in r]
    assert len(copies) == 3  # one each generation but the last
    first, last = records[:4], records[-4:]
    assert np.mean([r["fitness"] for r in last]) > np.mean([r["fitness"] for r in first])
    assert os.path.getsize(os.path.join(whole, "pbt.png")) > 10_000

    resumed = str(tmp_path / "resumed")
    population = _population(resumed)
    assert population._train_generation()  # one generation, then the command is killed
    del population
    assert _population(resumed).run()
    assert pbt.read_records(resumed) == records

    # The control: the same members, values fixed.
    control = str(tmp_path / "control")
    assert _population(control, exploit=False).run()
    fixed = pbt.read_records(control)
    assert not any("copied" in r for r in fixed)
    assert [r["fitness"] for r in fixed[-4:]] == [r["fitness"] for r in records[:4]]


def test_a_copy_takes_the_sources_files_exactly(tmp_path):
    logdir = str(tmp_path)
    for m in (0, 1):
        fake_train(None, os.path.join(logdir, f"member_{m}"), overrides={
            "pause_at_env_steps": "10", "optimizer.learning_rate": str(10.0**-m)})  # fmt: skip
    os.makedirs(os.path.join(logdir, "member_1", "league"))
    with open(os.path.join(logdir, "member_1", "league", "pool"), "w") as f:
        f.write("snapshots")
    pbt.copy_member(logdir, 1, 0)
    read = lambda m, *p: open(os.path.join(logdir, f"member_{m}", *p)).read()  # noqa: E731
    assert read(0, "checkpoints", "10", "state") == read(1, "checkpoints", "10", "state")
    assert read(0, "league", "pool") == "snapshots"
    assert read(0, "metrics.jsonl") != read(1, "metrics.jsonl")  # its own history stays


@pytest.mark.slow
def test_exploit_copies_parameters_and_optimizer_state_of_a_real_run(tmp_path):
    from seedlike.checkpoint import load_checkpoint

    logdir = str(tmp_path)
    explore = pbt.Explore(jobs.parse_space(["optimizer.learning_rate=log:1e-5:1e-2"]), (0.8,))
    population = pbt.Population(
        CARTPOLE, logdir, 2, 10_000, explore, 0.5, "episode_return_mean", "max", seed=0,
        flags=["--config.total_env_steps=20000", "--config.log.interval_s=1",
               "--config.log.wandb_mode=disabled"], total_env_steps=20_000,
    )  # fmt: skip
    assert population.generations == 2
    assert population._train_generation()
    (copy,) = [r for r in pbt.read_records(logdir) if "copied" in r]
    target, source = copy["member"], copy["copied"]
    _, _, copied, _ = load_checkpoint(os.path.join(logdir, f"member_{target}"))
    _, _, original, _ = load_checkpoint(os.path.join(logdir, f"member_{source}"))
    same = jax.tree.map(np.array_equal, (copied.params, copied.opt_state),
                        (original.params, original.opt_state))  # fmt: skip
    assert all(jax.tree.leaves(same))
    assert int(copied.policy_version) > 0
    values = population.state["members"][target]["values"]
    source_lr = float(population.state["members"][source]["values"]["optimizer.learning_rate"])
    assert values == {"optimizer.learning_rate": f"{max(source_lr * 0.8, 1e-5):.6g}"}


@pytest.mark.slow
def test_a_network_key_cannot_evolve(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "seedlike.launch.pbt", f"--logdir={tmp_path}",
         "--space=network.activation=choice:relu,tanh"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 1
    assert out.stderr.strip().startswith("error: --space network.activation: it changes what")


def test_a_fitness_no_member_logs_stops_the_population_naming_what_they_log(tmp_path, monkeypatch):
    """A misspelt --fitness read NaN for everyone, and member 3 was overwritten by member 0
    every generation while the command reported success."""
    monkeypatch.setattr(jobs, "POLL_S", 0.01)
    explore = pbt.Explore(jobs.parse_space(["optimizer.learning_rate=log:1e-5:1e-1"]), (0.5, 2.0))
    population = pbt.Population(
        CARTPOLE, str(tmp_path), 4, 75_000, explore, 0.25, "episode_retrun_mean", "max", seed=3,
        flags=[], train=fake_train,
    )  # fmt: skip
    with pytest.raises(jobs.SpecError, match="--fitness=episode_retrun_mean: no member logged it; "
                       "the metrics rows hold env_steps, episode_return_mean, time"):  # fmt: skip
        population.run()
    assert pbt.read_records(str(tmp_path)) == []


def test_settings_made_per_run_are_no_grid_or_space_keys():
    """A swept seed was overwritten by each run's own; PBT sets seeds and pauses itself."""
    for key in ("seed", "pause_at_env_steps"):
        with pytest.raises(jobs.SpecError, match=f"--space {key}: PBT sets it"):
            jobs.check_not_set_per_run({key: None, "ppo.epochs": None}, "--space", "PBT sets it")
    jobs.check_not_set_per_run({"ppo.epochs", "optimizer.learning_rate"}, "--grid", "")
