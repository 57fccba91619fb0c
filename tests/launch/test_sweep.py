"""python -m seedlike.launch.sweep and the jobs it runs (seedlike.launch.jobs): cells, checks,
results, and a sweep that survives a killed run."""

import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

from seedlike.launch import api, jobs, sweep
from tests.procs import ROOT, wait_for

CARTPOLE = os.path.join(ROOT, "configs", "cartpole_ppo.py")


def test_grid_cells_are_every_combination_in_the_order_given():
    grid = jobs.parse_grid(["optimizer.learning_rate=1e-4,3e-4,1e-3", "ppo.epochs=4,10"])
    cells = jobs.make_cells(grid, {}, 0, 0)
    assert len(cells) == 6
    assert cells[0] == {"optimizer.learning_rate": "1e-4", "ppo.epochs": "4"}
    assert cells[1] == {"optimizer.learning_rate": "1e-4", "ppo.epochs": "10"}
    assert cells[-1] == {"optimizer.learning_rate": "1e-3", "ppo.epochs": "10"}
    assert jobs.cell_name(cells[1]) == "optimizer.learning_rate=1e-4__ppo.epochs=10"
    assert jobs.cell_name({"env.name": "a/b c"}) == "env.name=a_b_c"
    assert jobs.make_cells({}, {}, 0, 0) == [{}] and jobs.cell_name({}) == "base"
    for bad, why in [
        (["ppo.epochs"], "expected KEY=VALUES"),
        (["ppo.epochs=1", "ppo.epochs=2"], "given twice"),
    ]:
        with pytest.raises(jobs.SpecError, match=why):
            jobs.parse_grid(bad)


def test_random_cells_are_reproducible_and_within_their_ranges():
    space = jobs.parse_space(
        [
            "optimizer.learning_rate=log:1e-5:1e-2",
            "ppo.clip_eps=uniform:0.1:0.3",
            "ppo.epochs=int:2:4",
            "network.activation=choice:relu,tanh",
        ]
    )
    cells = jobs.make_cells({"seed": ["1", "2"]}, space, 50, seed=7)
    assert len(cells) == 100 and cells == jobs.make_cells({"seed": ["1", "2"]}, space, 50, 7)
    assert cells[0]["seed"] == "1" and cells[1]["seed"] == "2"  # each draw crossed with the grid
    assert cells[0]["ppo.clip_eps"] == cells[1]["ppo.clip_eps"]
    lr = np.array([float(c["optimizer.learning_rate"]) for c in cells])
    assert lr.min() >= 1e-5 and lr.max() <= 1e-2 and lr.min() < 1e-4 < lr.max()
    clip = np.array([float(c["ppo.clip_eps"]) for c in cells])
    assert clip.min() >= 0.1 and clip.max() <= 0.3
    assert {c["ppo.epochs"] for c in cells} == {"2", "3", "4"}  # HIGH included
    assert {c["network.activation"] for c in cells} == {"relu", "tanh"}
    assert jobs.make_cells({}, space, 3, seed=8) != jobs.make_cells({}, space, 3, seed=7)
    for bad, why in [
        ("a=gauss:0:1", "is not one of"),
        ("a=log:0:1", "LOW > 0"),
        ("a=uniform:2:1", "LOW < HIGH"),
        ("a=int:x", "expected int:LOW:HIGH"),
    ]:
        with pytest.raises(jobs.SpecError, match=why):
            jobs.parse_space([bad])
    with pytest.raises(jobs.SpecError, match="needs --space"):
        jobs.make_cells({}, {}, 3, 0)


def test_cells_are_checked_against_the_config_before_anything_runs():
    jobs.check_cell(CARTPOLE, {"ppo.epochs": "4", "optimizer.learning_rate": "1e-3"})
    jobs.check_cell(CARTPOLE, {"network.normalize_obs": "true", "total_env_steps": "2e4"})
    for cell, why in [
        ({"ppo.epoch": "4"}, "unknown config key 'ppo.epoch'"),
        ({"nothing.here": "4"}, "unknown config key 'nothing.here'"),
        ({"ppo.epochs": "four"}, "ppo.epochs='four': not a int"),
        ({"ppo.epochs": "2.5"}, "not a int"),
        ({"network.normalize_obs": "maybe"}, "not a bool"),
        ({"env.num_envs": "0"}, "env.num_envs=0: .*num_envs"),
    ]:
        with pytest.raises(jobs.SpecError, match=why):
            jobs.check_cell(CARTPOLE, cell)


def test_integer_settings_reach_the_runs_as_integers_and_seed_is_not_a_grid_key(tmp_path):
    """--config flags read integers with int(): "2e4" and "4.0" passed the check and then failed
    every run; a grid over seed was overwritten by each run's own (the command says so)."""
    assert jobs.canonical(
        CARTPOLE,
        {"total_env_steps": "2e4", "ppo.epochs": "4.0", "optimizer.learning_rate": "1e-3",
         "network.normalize_obs": "true"},
    ) == {"total_env_steps": "20000", "ppo.epochs": "4", "optimizer.learning_rate": "1e-3",
          "network.normalize_obs": "true"}  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-m", "seedlike.launch.sweep", f"--config={CARTPOLE}",
         f"--logdir={tmp_path}", "--grid=seed=1,2"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 1 and "error: --grid seed: set per run" in out.stderr


def test_a_runs_final_and_best_values():
    rows = [
        {"env_steps": i, "r": v} for i, v in enumerate([None, 1, 2, None, 3, 4, 5, 6, 7, 8, 9, 10])
    ]
    rows.append({"env_steps": 99, "r": float("nan")})
    result = jobs.run_result(rows, "r", "max", 0.2)
    assert result == {
        "final": pytest.approx(9.5),
        "best": 10.0,
        "env_steps": 99,
    }  # last 2 of 10 values
    assert jobs.run_result(rows, "r", "min", 0.01)["final"] == pytest.approx(10.0)  # at least one
    assert jobs.run_result(rows, "r", "min", 0.2)["best"] == 1.0
    assert jobs.run_result(rows[:1], "r", "max", 0.1) is None


def _fake_run(logdir, run_id, values):
    os.makedirs(os.path.join(logdir, run_id))
    with open(os.path.join(logdir, run_id, "metrics.jsonl"), "w") as f:
        for i, v in enumerate(values):
            f.write(json.dumps({"time": i, "env_steps": 1000 * i, "episode_return_mean": v}) + "\n")


def test_the_table_ranks_cells_by_their_final_mean_and_names_failed_runs(tmp_path):
    logdir = str(tmp_path)
    state = {"runs": {}}
    runs = {
        ("a=1", 0): ([10, 20, 30], "done"),
        ("a=1", 1): ([10, 20, 50], "done"),
        ("a=2", 0): ([100, 200, 300], "done"),
        ("a=2", 1): ([1], "failed"),
        ("a=3", 0): ([], "failed"),
        ("a=1", 2): ([10, 20, 900], "stopped"),  # not finished: no final value
        ("a=2", 2): ([5], "running"),
    }
    for (name, seed), (values, status) in runs.items():
        run_id = f"{name}/seed_{seed}"
        _fake_run(logdir, run_id, values)
        cell = {"a": name[2:]}
        state["runs"][run_id] = {"cell": cell, "name": name, "seed": seed, "state": status}
    cells = sweep.write_results(state, logdir, "episode_return_mean", "max", 0.3)
    assert [c["cell"] for c in cells] == ["a=2", "a=1", "a=3"]
    assert cells[0]["final_mean"] == pytest.approx(300.0)
    assert cells[0]["final"]["iqm"] == {"value": 300.0, "ci95": [300.0, 300.0]}  # one seed
    assert cells[0]["failed"] == [1] and cells[2]["failed"] == [0]
    # Finals 30 and 50: two seeds resampled give means 30, 40 or 50 (1/4, 1/2, 1/4), so the
    # bootstrap's 2.5 and 97.5 percentiles are the two finals themselves.
    assert cells[1]["final"]["mean"] == {"value": 40.0, "ci95": [30.0, 50.0]}
    assert cells[1]["final"]["iqm"]["value"] == 40.0 and cells[1]["best"]["mean"]["value"] == 40
    table = open(os.path.join(logdir, "sweep.md")).read().splitlines()
    assert table[2] == (
        "| 2 | 300 [300, 300] | 300 [300, 300] | 300 [300, 300] | 0: 300; failed: 1; "
        "incomplete: 2 |"
    )
    assert table[3] == (
        "| 1 | 40 [30, 50] | 40 [30, 50] | 40 [30, 50] | 0: 30, 1: 50; incomplete: 2 |"
    )
    assert table[4] == "| 3 | - | - | - | failed: 0 |"
    assert json.load(open(os.path.join(logdir, "sweep.json")))["cells"][0]["cell"] == "a=2"
    assert os.path.getsize(os.path.join(logdir, "sweep.png")) > 10_000


def _sweep(logdir, *extra):
    return subprocess.Popen(
        [
            sys.executable, "-m", "seedlike.launch.sweep", f"--config={CARTPOLE}",
            f"--logdir={logdir}",
            "--grid=ppo.epochs=1,2", "--retries=0", "--config.total_env_steps=20000",
            "--config.log.interval_s=1", "--config.checkpoint.interval_s=2", *extra,
        ],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True, env={**os.environ, "WANDB_MODE": "disabled"},
    )  # fmt: skip


def _state(logdir):
    try:
        with open(os.path.join(logdir, sweep.STATE_FILE)) as f:
            return json.load(f)["runs"]
    except (OSError, ValueError):
        return {}


@pytest.mark.slow
def test_a_sweep_survives_a_killed_run_and_resumes(tmp_path):
    logdir = str(tmp_path / "sw")
    first, second = "ppo.epochs=1/seed_0", "ppo.epochs=2/seed_0"
    proc = _sweep(logdir)
    try:
        # Kill the first run's whole job (learner and actors) once it is training.
        def training():
            run = _state(logdir).get(first, {})
            rows = os.path.join(logdir, first, "metrics.jsonl")
            busy = run.get("state") == "running" and os.path.exists(rows)
            return run if busy and os.path.getsize(rows) else None

        os.killpg(wait_for(training, 180, what="the first run training")["pid"], signal.SIGKILL)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1, out
    assert f"sweep: {first} failed (exit" in out and "1 of 2 runs done" in out
    runs = _state(logdir)
    assert runs[first]["state"] == "failed" and runs[second]["state"] == "done"
    table = open(os.path.join(logdir, "sweep.md")).read()
    assert "failed: 0" in table
    done_rows = os.path.getsize(os.path.join(logdir, second, "metrics.jsonl"))

    # The same command again: the done run is left alone, the failed one runs to the end.
    proc = _sweep(logdir)
    try:
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out
    assert "2 runs in 2 cells (1 done before)" in out and "2 of 2 runs done" in out
    assert os.path.getsize(os.path.join(logdir, second, "metrics.jsonl")) == done_rows
    cells = json.load(open(os.path.join(logdir, "sweep.json")))["cells"]
    assert sorted(c["cell"] for c in cells) == ["ppo.epochs=1", "ppo.epochs=2"]
    assert all(c["final_mean"] is not None and not c["failed"] for c in cells)
    steps = [
        json.loads(line)["env_steps"] for line in open(os.path.join(logdir, first, "metrics.jsonl"))
    ]
    assert steps[-1] >= 20000


@pytest.mark.slow
def test_a_sweep_with_a_bad_value_says_so_in_one_line(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "seedlike.launch.sweep", f"--config={CARTPOLE}",
         f"--logdir={tmp_path}", "--grid=ppo.epochs=4,lots"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 1
    assert out.stderr.strip() == ("error: ppo.epochs='lots': not a int like the config's 10"), (
        out.stderr
    )
    assert not os.path.exists(os.path.join(tmp_path, sweep.STATE_FILE))


def test_the_runner_keeps_parallel_jobs_going_and_retries_a_failure(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(jobs, "POLL_S", 0.01)
    started, fails = [], {"b/seed_0": 1}  # b fails once, then succeeds

    def train(config, logdir, num_actors=2, overrides=None, flags=()):
        run_id = os.path.relpath(logdir, tmp_path)
        running = [r for r in started if r[1].poll() is None]
        code = 3 if fails.get(run_id, 0) > 0 else 0
        fails[run_id] = fails.get(run_id, 0) - 1
        proc = subprocess.Popen(
            [sys.executable, "-c", f"import time; time.sleep(0.3); exit({code})"]
        )
        started.append((run_id, proc, len(running)))
        os.makedirs(logdir, exist_ok=True)
        return api.Run(proc, logdir)

    runs = {f"{c}/seed_0": ({"x": c}, 0) for c in "abcd"}
    runner = jobs.Runner(CARTPOLE, str(tmp_path), runs, [], 2, 2, 1, "state.json", train=train)
    state = runner.run()
    assert all(r["state"] == "done" for r in state["runs"].values())
    said = capsys.readouterr().out.splitlines()
    assert said[0] == "jobs: started a/seed_0 (run 1 of 4)"
    assert "jobs: b/seed_0 exited with 3; starting it again" in said
    assert "jobs: started b/seed_0 (run 2 of 4, attempt 2)" in said
    assert sum(re.fullmatch(r"jobs: ./seed_0 done in 0s", line) is not None for line in said) == 4
    assert [r for r, *_ in started].count("b/seed_0") == 2  # retried once
    assert max(n for *_, n in started) == 1 and started[1][2] == 1  # two at a time, never three
    assert state["runs"]["b/seed_0"]["attempts"] == 2


def test_progress_lines_give_each_run_and_an_eta_once_speeds_are_measured(tmp_path, monkeypatch):
    runs = {f"{c}/seed_0": ({"total_env_steps": "100000"}, 0) for c in "abc"}
    runner = jobs.Runner(CARTPOLE, str(tmp_path), runs, [], 2, 2, 0, "s.json", label="sweep")
    clock = {"now": 0.0}
    monkeypatch.setattr(jobs.time, "monotonic", lambda: clock["now"])
    runner._paces = {r: jobs.Pace(0.0) for r in ("a/seed_0", "b/seed_0")}

    def at(t, steps):  # both active runs have reached `steps` at time t
        clock["now"] = t
        for r, s in zip(("a/seed_0", "b/seed_0"), steps):
            os.makedirs(tmp_path / r, exist_ok=True)
            with open(tmp_path / r / "metrics.jsonl", "a") as f:
                f.write(json.dumps({"env_steps": s, "episode_return_robust": s / 1000}) + "\n")
        return runner.progress(["a/seed_0", "b/seed_0"], pending=1)

    assert at(30, (0, 0)) == (
        "sweep: 0 of 3 done, running a/seed_0 0% episode_return_robust 0; b/seed_0 0% "
        "episode_return_robust 0, 1 waiting"
    )
    lines = [at(60, (10_000, 0)), at(90, (20_000, 10_000)), at(120, (30_000, 20_000))]
    assert all("ETA" not in line for line in lines), lines  # b has moved for one interval only
    # Each moves 10k steps per 30 s. a: measured from 60 s, 60k left: 180 s; b: from 90 s, 70k
    # left: 210 s. The waiting run takes the mean of their lengths (330 s, 360 s) on one of the
    # two slots: 210 + 345 / 2 = 382 s.
    line = at(150, (40_000, 30_000))
    assert line == (
        "sweep: 0 of 3 done, running a/seed_0 40% episode_return_robust 40; b/seed_0 30% "
        "episode_return_robust 30, 1 waiting; ETA 6m"
    ), line


def test_a_runs_own_values_win_over_the_flags_every_run_gets(tmp_path, monkeypatch):
    monkeypatch.setattr(jobs, "POLL_S", 0.01)
    seen = []

    def train(config, logdir, num_actors=2, overrides=None, flags=()):
        seen.append((overrides, flags))
        return api.Run(subprocess.Popen(["true"]), logdir)

    shared = ["--config.seed=10", "--config.ppo.epochs=3", "--config.total_env_steps=5000"]
    seed = jobs.base_seed(CARTPOLE, jobs.config_values(shared))
    runs = {f"seed_{k}": ({"ppo.epochs": "4"}, seed + k) for k in range(2)}
    jobs.Runner(CARTPOLE, str(tmp_path), runs, shared, 2, 1, 0, "s.json", train=train).run()
    # train.sh reads flags after the run's values: a shared seed would give both runs seed 10.
    assert [o for o, _ in seen] == [
        {"ppo.epochs": "4", "seed": 10},
        {"ppo.epochs": "4", "seed": 11},
    ]
    assert all(f == ("--config.total_env_steps=5000",) for _, f in seen)
    assert jobs.base_seed(CARTPOLE, {}) == 0
    with pytest.raises(jobs.SpecError, match="--config.seed='x': not an integer"):
        jobs.base_seed(CARTPOLE, {"seed": "x"})
