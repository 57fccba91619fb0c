"""Recording a checkpoint's episodes (seedlike.watch, watch.py) and clean checkpoint-path errors."""

import json
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from seedlike import watch
from seedlike.league.players import RandomAgent
from tests.helpers import save_untrained_run
from tests.procs import ROOT


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
def test_recording_has_one_frame_per_observation_and_the_episode_returns(tmp_path):
    save_untrained_run(tmp_path, "cartpole_ppo")
    rec = watch.record_episodes(str(tmp_path), episodes=1)
    assert rec.env_name == "CartPole-v1" and len(rec.returns) == 1
    # CartPole pays 1 per step: the return is the episode's length. The episode is seen in its
    # first observation plus one per step.
    assert rec.returns == rec.lengths and rec.lengths[0] > 0
    assert len(rec.frames) == rec.lengths[0] + 1
    assert rec.frames[0].shape == (400, 600, 3) and rec.frames[0].dtype == np.uint8
    # The cart moves: frames differ.
    assert not np.array_equal(rec.frames[0], rec.frames[len(rec.frames) // 2])

    path = tmp_path / "cartpole.gif"
    watch.save_gif(rec.frames, str(path), fps=50)
    gif = Image.open(path)
    assert gif.size == (600, 400)
    # Pillow merges identical consecutive frames and adds up their delays: the GIF plays as long
    # as the episode, 20 ms per observation.
    total = 0
    for i in range(gif.n_frames):
        gif.seek(i)
        total += gif.info["duration"]
    assert total == 20 * len(rec.frames)


def test_a_recurrent_policy_is_recorded_with_its_state_per_env(tmp_path):
    save_untrained_run(tmp_path, "cartpole_pomdp_lstm")
    rec = watch.record_episodes(str(tmp_path), episodes=2, render=False)
    assert len(rec.returns) == 2 and all(r == n for r, n in zip(rec.returns, rec.lengths))


def test_a_board_game_is_recorded_against_a_bot(tmp_path):
    save_untrained_run(tmp_path, "tictactoe_selfplay")
    rec = watch.record_episodes(str(tmp_path), episodes=2, opponent=RandomAgent())
    assert rec.env_name == "TicTacToe-v1" and len(rec.returns) == 2
    assert set(rec.returns) <= {-1.0, 0.0, 1.0}
    # A game is 5-9 moves (the recorded player makes 2-5 of them), plus its first board.
    assert all(2 <= n <= 5 for n in rec.lengths) and 12 <= len(rec.frames) <= 20


@pytest.mark.slow  # watch.py and envpool's renderer probe in processes of their own
def test_watch_py_records_mujoco_on_a_machine_without_a_display(tmp_path):
    """envpool's MuJoCo renderer needs an EGL device; where it has none, Gymnasium's copy of the
    task is rendered by OSMesa. Either way the GIF shows the hopper moving."""
    save_untrained_run(tmp_path, "mujoco_ppo", env_name="Hopper-v4")
    here = tmp_path / "cwd"  # where the user runs it: left as it was
    here.mkdir()
    done = subprocess.run(
        [sys.executable, f"{ROOT}/watch.py", f"--checkpoint={tmp_path}",
         f"--out={tmp_path / 'h.gif'}", "--max_frames=40"],
        cwd=here, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "frames of Hopper-v4" in done.stdout and not list(here.iterdir())
    gif = Image.open(tmp_path / "h.gif")
    frames = []
    for i in range(gif.n_frames):
        gif.seek(i)
        frames.append(np.asarray(gif.convert("RGB")))
    assert len(frames) > 5 and frames[0].std() > 10  # a scene, not a blank
    assert not np.array_equal(frames[0], frames[-1])


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
def test_watch_cli_rejects_missing_paths_in_one_line(tmp_path):
    missing = tmp_path / "no_such_run"
    bad = subprocess.run(
        [sys.executable, "watch.py", f"--checkpoint={missing}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert f"error: no run or checkpoint at {missing}" in bad.stderr
    assert not missing.exists()  # nothing created for a path that does not exist


@pytest.mark.slow  # 3 s or more on 2 cores: in the whole suite, not --fast
def test_evaluate_py_scores_a_run_in_one_command(tmp_path):
    """evaluate.py --checkpoint=RUN: mean and spread of return and length, JSON and Markdown."""
    save_untrained_run(tmp_path, "cartpole_ppo")
    done = subprocess.run(
        [sys.executable, "evaluate.py", f"--checkpoint={tmp_path}", "--episodes=4", "--greedy"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.load(open(tmp_path / "evaluation.json"))
    assert report["env"] == "CartPole-v1" and report["episodes"] == 4 and report["greedy"]
    assert report["policy_version"] == 0 and "games" not in report
    # CartPole pays 1 per step: return and length agree; the numbers are the episodes' own.
    assert report["return"] == report["length"]
    r = report["return"]
    assert r["min"] <= r["mean"] <= r["max"] and r["std"] >= 0
    assert r["ci95"][0] <= r["mean"] <= r["ci95"][1]
    markdown = (tmp_path / "evaluation.md").read_text()
    assert f"| return | {r['mean']:.2f} ± {r['std']:.2f} |" in markdown
    assert markdown in done.stdout


def test_evaluate_py_plays_a_board_game_against_a_named_opponent(tmp_path):
    from seedlike import scores

    save_untrained_run(tmp_path, "tictactoe_selfplay")
    report = scores.evaluate(str(tmp_path), episodes=12, opponent="random")
    games = report["games"]
    assert report["opponent"] == "random" and report["episodes"] == 12
    assert games["wins"] + games["draws"] + games["losses"] == 12
    assert games["win_rate"] == games["wins"] / 12
    assert report["return"]["mean"] == (games["wins"] - games["losses"]) / 12
