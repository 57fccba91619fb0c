"""Runs and plans written by an earlier commit keep loading (tests/fixtures/d4cf845/README.md).

The fixture run is a CartPole LSTM checkpoint (policy version 2, env step 3,088) and a surgery
plan derived for it by that commit; the numbers below are what that commit printed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from seedlike.checkpoint import load_checkpoint, params_fingerprint
from seedlike.config import load_config_file
from surgery.checkpoint_surgery import run_surgery
from surgery.plan import Plan
from tests.procs import ROOT, failure_text

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "d4cf845")
RUN = os.path.join(FIXTURES, "run")
FINGERPRINT = "ab88a88deb8fb484"  # "checkpoint 2 saved (...; params ab88a88deb8fb484)"
CONFIG = os.path.join(ROOT, "configs", "cartpole_pomdp_lstm.py")


def test_a_checkpoint_of_an_earlier_commit_loads_as_it_was_saved():
    config, network, state, meta = load_checkpoint(RUN)
    assert params_fingerprint(state.params) == FINGERPRINT
    assert (meta["policy_version"], meta["env_steps"], meta["episodes"]) == (2, 3088, 136)
    assert int(state.sgd_steps) == 64  # 2 updates x 8 epochs x 4 minibatches
    assert int(state.policy_version) == 2  # stored as `updates` then (TrainStateV1)
    assert network.is_recurrent and config.network.core_size == 16


def test_a_checkpoint_from_before_the_target_parameters_loads_as_it_was_saved():
    # tests/fixtures/0624281: a PPO run saved before TrainState had target_params.
    run = os.path.join(ROOT, "tests", "fixtures", "0624281", "run")
    config, network, state, meta = load_checkpoint(run)
    assert params_fingerprint(state.params) == "46c90883124cca49"
    assert meta["policy_version"] == int(state.policy_version) == 2
    assert state.target_params == {} and config.algo == "ppo" and not network.q


def test_a_plan_of_an_earlier_commit_applies_exactly(tmp_path):
    with open(os.path.join(FIXTURES, "plan.json")) as f:
        plan = Plan.from_json(f.read())
    new = load_config_file(CONFIG)
    with new.unlocked():
        new.network.core_size, new.network.hidden_sizes = 24, (20,)
        new.env.obs_indices = (0, 2, 3)
    outcome = run_surgery(RUN, str(tmp_path / "wide"), plan=plan, new_config=new)
    report = outcome.report
    # What that commit's surgery printed: max |dlogits| 2.98e-08, max |dvalue| 4.77e-07.
    assert report.unroll_max_abs_logits < 1e-6 and report.unroll_max_abs_value < 1e-5
    _, network, state, _ = load_checkpoint(str(tmp_path / "wide"))
    params = state.params["params"]
    assert np.shape(params["torso"]["dense_0"]["kernel"]) == (3, 20)
    assert np.shape(params["core"]["lstm"]["hi"]["kernel"]) == (24, 24)


@pytest.mark.slow
def test_a_run_of_an_earlier_commit_resumes_where_it_stopped(tmp_path):
    logdir = tmp_path / "run"
    shutil.copytree(RUN, logdir)
    result = subprocess.run(
        [
            "scripts/train.sh",
            f"--logdir={logdir}",
            f"--config={CONFIG}",
            "--num_actors=1",
            "--config.total_env_steps=5120",
            "--config.network.core_size=16",
            "--config.network.hidden_sizes=(16,)",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, failure_text(result.stderr)
    resumed = re.search(r"resumed from \S+ at env step (\d+), policy version (\d+)", result.stderr)
    assert resumed and resumed.groups() == ("3088", "2"), failure_text(result.stderr)
    with open(logdir / "metrics.jsonl") as f:
        rows = [json.loads(line) for line in f]
    assert rows[-1]["env_steps"] >= 5120 and rows[-1]["policy_version"] > 2
