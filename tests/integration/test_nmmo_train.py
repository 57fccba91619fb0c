"""Neural MMO end to end from the main suite: the nmmo virtualenv is built by its script, the
wrapper's own tests run in it, and a tiny population job trains through scripts/train.sh with
actors in that venv and learners without nmmo."""

import os
import subprocess

import pytest

from tests.procs import ROOT, metrics, train

# Builds a virtualenv and runs a multi-process job: scripts/test.sh --fast leaves it out.
pytestmark = pytest.mark.slow

VENV = os.path.join(ROOT, ".nmmo-venv")
CONFIG = os.path.join(ROOT, "configs", "nmmo_entities.py")


@pytest.fixture(scope="module")
def nmmo_python():
    built = subprocess.run(
        ["scripts/nmmo_venv.sh", VENV], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert built.returncode == 0, built.stderr[-3000:]
    python = os.path.join(VENV, "bin", "python")
    has_pytest = subprocess.run([python, "-c", "import pytest"], capture_output=True)
    if has_pytest.returncode != 0:  # the wrapper's tests only; actors do not need it
        subprocess.run(
            [python, "-m", "pip", "install", "--quiet", "pytest==9.2.0"], check=True, timeout=300
        )
    return python


def test_the_wrapper_passes_its_tests_where_nmmo_is(nmmo_python):
    done = subprocess.run(
        [
            nmmo_python,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/envs/test_nmmo_env.py",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and " passed" in done.stdout, done.stdout[-3000:]
    assert "skipped" not in done.stdout, done.stdout[-3000:]


def test_a_population_trains_on_neural_mmo(nmmo_python, tmp_path):
    logdir = tmp_path / "nmmo"
    train(
        logdir, CONFIG, "--population=2", f"--actor_python={nmmo_python}", "--num_actors=1",
        "--config.env.kwargs.num_agents=16", "--config.env.kwargs.map_size=32",
        "--config.env.kwargs.horizon=64", "--config.teams.sizes=(8, 8)",
        "--config.total_env_steps=3000", "--config.batch_unrolls=8",
        "--config.log.interval_s=2", "--config.log.wandb_mode=disabled",
    )  # fmt: skip
    for member in ("member_0", "member_1"):
        rows = metrics(logdir / member)
        assert rows and rows[-1]["policy_version"] >= 1, rows[-1:]
        lengths = [r["episode_length_mean"] for r in rows if r["episode_length_mean"]]
        assert lengths and all(0 < n <= 65 for n in lengths), lengths
