"""The library API (seedlike/launch/api.py) on untrained checkpoints; train() and Run are exercised
by tests/integration/test_integration.py's train.sh job, which runs through them."""

import os
import subprocess

import numpy as np
import pytest
from PIL import Image

import seedlike
from seedlike.launch import api
from tests.helpers import save_untrained_run


def test_the_api_is_importable_from_the_package_lazily():
    assert seedlike.train is api.train and seedlike.evaluate is api.evaluate
    assert {"train", "evaluate", "play", "record", "plot_runs"} <= set(dir(seedlike))
    with pytest.raises(AttributeError, match="no attribute 'trian'"):
        seedlike.trian  # noqa: B018


def test_evaluate_plays_whole_episodes(tmp_path):
    save_untrained_run(tmp_path, "cartpole_ppo")
    result = seedlike.evaluate(str(tmp_path), episodes=3)
    assert result["episodes"] == 3
    # CartPole pays 1 per step; greedy play of a fixed policy from random starts.
    assert result["return_mean"] == result["length_mean"] > 0


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
def test_play_and_record_a_board_game(tmp_path):
    save_untrained_run(tmp_path, "tictactoe_selfplay")
    summary = seedlike.play(str(tmp_path), "random", games=20)
    assert summary["games"] == 20 == summary["wins"] + summary["draws"] + summary["losses"]
    rec = seedlike.record(str(tmp_path), str(tmp_path / "game.gif"), opponent="random")
    assert len(rec.returns) == 1 and Image.open(tmp_path / "game.gif").n_frames == len(rec.frames)
    with pytest.raises(ValueError, match="at least one agent must be a checkpoint"):
        seedlike.play("random", "scripted")


def test_config_paths_resolve_here_or_in_the_repository(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert api._config_path("configs/cartpole_ppo.py") == f"{api.ROOT}/configs/cartpole_ppo.py"
    with pytest.raises(FileNotFoundError, match="no config file configs/nope.py"):
        api._config_path("configs/nope.py")
    assert api._flag_value(1e5) == "100000" and api._flag_value(0.5) == "0.5"
    assert np.isclose(float(api._flag_value(2.5e-4)), 2.5e-4)


def test_train_sh_help_lists_its_own_flags_and_starts_nothing():
    runs = os.path.join(api.ROOT, "runs")
    before = sorted(os.listdir(runs)) if os.path.isdir(runs) else None
    done = subprocess.run(
        [os.path.join(api.ROOT, "scripts", "train.sh"), "--help"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.startswith("usage: scripts/train.sh")
    for flag in ("--num_actors=N", "--learners=L", "--population=P", "--actor_python=PATH"):
        assert flag in done.stdout
    assert "learner.py --helpfull" in done.stdout
    after = sorted(os.listdir(runs)) if os.path.isdir(runs) else None
    assert after == before  # no run directory made
