"""The console line, the wandb run kept across resumes, and the plot command."""

import json
import os
import re
import struct
import subprocess
import sys

import numpy as np
import pytest

from seedlike import metrics, plot
from seedlike.runtime import storage
from seedlike.runtime.storage import StorageError
from tests.procs import ROOT


def _row(**values):
    row = {"env_steps": 0, "sps": 100.0, "time": 0.0}
    row.update(values)
    return row


def test_console_line_shows_progress_and_eta():
    line = metrics.console_line(_row(env_steps=1_200_000), 75, 10_000_000, rate=2_000.0)
    # 8.8M steps left at 2,000/s: 4,400 s = 1 h 13 min.
    assert line.startswith("[00:01:15]  steps 1.2M / 10M 12% ETA 1h13m  sps 100")
    done = metrics.console_line(_row(env_steps=10_000_000), 5, 10_000_000, rate=2_000.0)
    assert "steps 10M / 10M 100%  sps" in done  # no ETA once finished
    assert "steps 1.2M  sps" in metrics.console_line(_row(env_steps=1_200_000), 5)


def test_console_line_shows_run_specific_metrics_only_where_the_run_has_them():
    plain = metrics.console_line(_row(), 1)
    assert "success" not in plain and "trueskill" not in plain and "win vs" not in plain
    league = metrics.console_line(
        _row(
            **{
                "league/win_rate_vs_pool": 0.625,
                "league/win_rate_vs_scripted": None,
                "trueskill_mu": 23.44,
                "episode_success_rate": 0.9,
            }
        ),
        1,
    )
    assert "success 0.90" in league
    assert "win vs pool 0.62" in league and "trueskill 23.4" in league
    assert "win vs scripted -" in league  # a bot with no game in the interval


def test_metrics_writer_eta_counts_only_this_processes_steps(tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    writer = metrics.MetricsWriter(str(tmp_path), {}, total_env_steps=1_000_000)
    with caplog.at_level("INFO"):
        # A resumed run, half done before this process: its first row's interval holds the
        # restart (sps 9), the next one's steps may have begun partway through. Then 10k steps
        # every 10 s: at 530k, 470 s left.
        writer.write(_row(env_steps=500_000, time=1000.0, sps=9.0))
        writer.write(_row(env_steps=510_000, time=1010.0, sps=1000.0))
        writer.write(_row(env_steps=520_000, time=1020.0, sps=1000.0))
        writer.write(_row(env_steps=530_000, time=1030.0, sps=1000.0))
    writer.close()
    lines = [r.getMessage() for r in caplog.records[-4:]]
    assert all("ETA" not in line for line in lines[:3]) and "sps -" in lines[0]
    assert "sps -" in lines[1] and "sps 1,000" in lines[2]
    assert "steps 530k / 1M 53% ETA 7m" in lines[3]
    rows = metrics.read_metrics(str(tmp_path))
    assert [r["env_steps"] for r in rows] == [500_000, 510_000, 520_000, 530_000]


def test_the_eta_waits_for_steps_to_move(tmp_path, caplog, monkeypatch):
    """A self-play run: no steps while it compiles and its actors connect, then a slow start;
    no ETA is guessed from the standstill."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    writer = metrics.MetricsWriter(str(tmp_path), {}, total_env_steps=1_000_000)
    with caplog.at_level("INFO"):
        for t, steps in [(0, 0), (10, 0), (20, 0), (30, 200), (40, 10_200), (50, 20_200)]:
            writer.write(_row(env_steps=steps, time=float(t)))
    writer.close()
    lines = [r.getMessage() for r in caplog.records[-6:]]
    assert all("ETA" not in line for line in lines[:5]), lines
    assert "steps 20.2k / 1M 2% ETA 16m" in lines[5]  # 979.8k steps at 1,000/s: 980 s


def test_resumed_run_logs_to_the_same_wandb_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    for _ in range(2):
        writer = metrics.MetricsWriter(str(tmp_path), {"a": 1}, "offline")
        writer.write(_row())
        writer.close()
    run_dirs = [d for d in os.listdir(tmp_path / "wandb") if d.startswith("offline-run-")]
    run_id = (tmp_path / metrics.WANDB_ID_FILE).read_text().strip()
    # offline-run-<date>_<time>-<id>, with "-1" added when both start in the same second
    assert len(run_dirs) == 2
    assert all(re.fullmatch(rf"offline-run-\d+_\d+-{run_id}(-\d+)?", d) for d in run_dirs)


def _tfrecords(path):
    """The records of a TFRecord file, read by its layout: length (uint64 LE), its masked CRC,
    the bytes, their masked CRC."""
    data, out, i = open(path, "rb").read(), [], 0
    while i < len(data):
        (n,) = struct.unpack("<Q", data[i : i + 8])
        out.append(data[i + 12 : i + 12 + n])
        i += 12 + n + 4
    return out


def test_tensorboard_scalars_continue_across_a_resume(tmp_path, monkeypatch):
    from tensorboardX.proto import event_pb2

    monkeypatch.setenv("WANDB_MODE", "disabled")
    for steps in (1000, 2000):  # two processes: a run and its resume
        writer = metrics.MetricsWriter(str(tmp_path), {}, tensorboard=True)
        writer.write(_row(env_steps=steps, episode_return_mean=steps / 100, loss=float("nan")))
        writer.close()
    files = sorted(os.listdir(tmp_path / metrics.TENSORBOARD_DIR))
    assert len(files) == 2 and all(f.startswith("events.out.tfevents.") for f in files)
    scalars = {}
    for name in files:
        for record in _tfrecords(tmp_path / metrics.TENSORBOARD_DIR / name):
            event = event_pb2.Event.FromString(record)
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    # TensorBoard merges the files of a directory by step.
    assert sorted(scalars["episode_return_mean"]) == [(1000, 10.0), (2000, 20.0)]
    assert sorted(scalars["env_steps"]) == [(1000, 1000.0), (2000, 2000.0)]
    assert "loss" not in scalars  # NaN is logged as null, and null is not a scalar


def _write_run(logdir, rows):
    os.makedirs(logdir, exist_ok=True)
    with open(os.path.join(logdir, "metrics.jsonl"), "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def test_curve_skips_nulls_smooths_and_counts_minutes_without_the_stopped_time():
    rows = [
        _row(env_steps=100, time=0.0, r=1.0),
        _row(env_steps=200, time=60.0, r=None),
        _row(env_steps=300, time=120.0, r=3.0),
        _row(env_steps=400, time=10_000.0, r=5.0),  # resumed long after
        _row(env_steps=500, time=10_060.0, r=7.0),
    ]
    xs, ys = plot.curve(rows, "r")
    np.testing.assert_array_equal(xs, [100, 300, 400, 500])
    np.testing.assert_array_equal(ys, [1, 3, 5, 7])
    _, smoothed = plot.curve(rows, "r", smooth=2)
    np.testing.assert_array_equal(smoothed, [1, 2, 4, 6])
    minutes, _ = plot.curve(rows, "r", x="minutes")
    np.testing.assert_allclose(minutes, [0, 2, 3, 4])


def test_plot_runs_draws_one_line_per_run_and_panel_per_key(tmp_path):
    a = [_row(env_steps=s, episode_return_mean=s / 10) for s in (10, 20, 30)]
    b = [_row(env_steps=s, episode_return_mean=-s, sps=5.0) for s in (10, 20)]
    _write_run(tmp_path / "a", a)
    _write_run(tmp_path / "b", b)
    fig = plot.plot_runs(
        plot.load_runs([str(tmp_path / "a"), str(tmp_path / "b")]),
        ["episode_return_mean", "sps"],
    )
    top, bottom = fig.axes
    lines = {line.get_label(): line for line in top.get_lines()}
    assert set(lines) == {"a", "b"}
    np.testing.assert_array_equal(lines["a"].get_ydata(), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(lines["b"].get_xdata(), [10, 20])
    assert top.get_ylabel() == "episode_return_mean" and len(bottom.get_lines()) == 2
    with pytest.raises(plot.PlotError, match="no run has the key 'retrun'; keys in these runs"):
        plot.plot_runs(plot.load_runs([str(tmp_path / "a")]), ["retrun"])
    with pytest.raises(plot.PlotError, match="no metrics.jsonl rows"):
        plot.load_runs([str(tmp_path / "missing")])


def test_plot_command_writes_a_png_and_reports_bad_input_in_one_line(tmp_path):
    _write_run(tmp_path / "run", [_row(env_steps=s, episode_return_mean=s) for s in (1, 2, 3)])
    out = tmp_path / "curve.png"
    cmd = [sys.executable, "-m", "seedlike.plot", str(tmp_path / "run"), f"--out={out}"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = subprocess.run(
        cmd + ["--keys=nope"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert "error: no run has the key 'nope'" in bad.stderr


def test_the_eta_follows_the_speed_of_the_last_minute(tmp_path, caplog, monkeypatch):
    """A slow first minute (compiling, actors connecting) does not stretch the ETA later on."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    writer = metrics.MetricsWriter(str(tmp_path), {}, total_env_steps=1_000_000)
    with caplog.at_level("INFO"):
        for t, steps in ((0, 500_000), (60, 501_000), (120, 621_000), (180, 741_000)):
            writer.write(_row(env_steps=steps, time=float(t)))
    writer.close()
    # 2,000 steps/s over the last minute: 259k left take 129 s (since the first row: 193 s).
    assert "steps 741k / 1M 74% ETA 2m  sps" in caplog.records[-1].getMessage()


def test_the_run_ends_with_one_summary_line_and_labels_its_lines(tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    writer = metrics.MetricsWriter(str(tmp_path), {}, total_env_steps=1000, label="member 1")
    with caplog.at_level("INFO"):
        writer.write(_row(env_steps=500, time=1.0, episode_return_mean=180.0, policy_version=3))
        writer.write(_row(env_steps=1000, time=2.0, episode_return_mean=150.5, policy_version=7))
    assert all(r.getMessage().startswith("member 1: [00:00:") for r in caplog.records)
    line = writer.summary("finished", "/runs/x/checkpoints/7")
    writer.close()
    assert line.startswith("member 1: finished at 1k env steps, policy version 7, after ")
    assert "return 150.50 (best 180.00); checkpoint /runs/x/checkpoints/7; metrics " in line
    assert line.endswith(os.path.join(str(tmp_path), "metrics.jsonl"))


def test_wandb_says_where_its_offline_run_is_in_one_line(tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    with caplog.at_level("INFO"):
        writer = metrics.MetricsWriter(str(tmp_path), {"seed": 0})
        writer.write(_row(env_steps=10, time=1.0))
        writer.close()
    ours = [r.getMessage() for r in caplog.records if r.name == "root"]  # not wandb's own logger
    lines = [m for m in ours if m.startswith("wandb")]
    assert len(lines) == 1 and "offline run in " + str(tmp_path / "wandb") in lines[0]


def test_a_full_disk_is_a_storage_error_naming_the_file(tmp_path):
    os.symlink("/dev/full", tmp_path / "metrics.jsonl")  # every write: ENOSPC
    writer = metrics.MetricsWriter(str(tmp_path), {}, use_wandb=False)
    with pytest.raises(
        StorageError, match=r"cannot write .*metrics.jsonl: No space left on device"
    ):
        writer.write({"env_steps": 1, "time": 0.0})
    writer.close()  # the unflushed line is not a second error


def test_storage_reason_is_the_innermost_os_error():
    try:
        try:
            raise OSError(28, "No space left on device", "/runs/x/7.tmp")
        except OSError as e:
            raise RuntimeError("orbax: save failed") from e
    except RuntimeError as e:
        assert storage.reason(e) == "No space left on device: '/runs/x/7.tmp'"
    assert storage.reason(ValueError("bad")) == "ValueError: bad"


@pytest.mark.parametrize("partial", ['{"env_steps": 3, "ti', '{"note": "' + "x" * 150_000])
def test_a_resume_cuts_the_row_its_run_was_writing_when_it_stopped(tmp_path, partial, caplog):
    """A run stopped in the middle of a row (a full disk, a kill); the resumed run's rows start
    on lines of their own, and every reader sees whole rows only."""
    writer = metrics.MetricsWriter(str(tmp_path), {}, use_wandb=False)
    writer.write(_row(env_steps=1))
    writer.write(_row(env_steps=2))
    writer.close()
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write(partial)
    resumed = metrics.MetricsWriter(str(tmp_path), {}, use_wandb=False)
    resumed.write(_row(env_steps=3))
    resumed.close()
    assert "ended in a half-written row" in caplog.text
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["env_steps"] for line in lines] == [1, 2, 3]
    assert [r["env_steps"] for r in metrics.read_metrics(str(tmp_path))] == [1, 2, 3]


def test_reading_leaves_out_lines_that_are_not_rows(tmp_path, caplog):
    """A file an older seedlike appended to after a half-written row: the row is left out with a
    warning naming its line; a live run's half-written last line is left out silently."""
    rows = ['{"env_steps": 1}', '{"env_steps": 2, "ti{"env_steps": 3}', '{"env_steps": 4}']
    (tmp_path / "metrics.jsonl").write_text("\n".join(rows) + '\n{"env_st')
    assert [r["env_steps"] for r in metrics.read_metrics(str(tmp_path))] == [1, 4]
    assert "lines [2] are not metrics rows" in caplog.text


def test_staleness_counts_the_steps_that_count_in_the_loss():
    """Step T of an unroll only bootstraps (and is the next unroll's step 0): acted on version
    2, 2 and 3 (step T), learned at 4: staleness 2, not 5/3."""
    from types import SimpleNamespace

    from seedlike.learner import _staleness

    unrolls = SimpleNamespace(
        policy_version=np.array([[2, 2, 3], [0, 0, 0]]),
        valid=np.array([[True, True, True], [False, False, True]]),  # an episode's last step
    )
    assert _staleness(4, unrolls) == pytest.approx(2.0)
