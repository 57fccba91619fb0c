"""Games per second of self-play with the league, on the device (pgx) against the SEED path
(envpool's board games through actors), one after the other on this machine, each for the same
wall time, and what each had learned by then (games against the scripted agent, or random).

    python -m benchmarks.selfplay_games --logdir=runs/games                     # Connect Four
    python -m benchmarks.selfplay_games --logdir=runs/games --game=tictactoe --seconds=60

Each side is `scripts/train.sh` with its shipped config (wandb off), stopped by SIGINT after
--seconds (a checkpoint, as Ctrl-C); a rerun reads the runs already in --logdir. Games are the
learner's episodes (one seat per game on both paths), counted from the metrics rows after the
first --warmup_s (compiling apart); env steps are the learner's moves. Then `play.py`'s match
of each run's greedy policy against the bot. Writes <logdir>/selfplay_games.json.
"""

import json
import os
import signal
import subprocess
import sys
import time

from absl import app, flags

from benchmarks.results_io import ROOT
from seedlike.metrics import read_metrics

GAMES = {  # game -> (SEED path config, on-device config, bot to score against)
    "connect4": ("connect4_selfplay", "pgx_connect4", "scripted"),
    "tictactoe": ("tictactoe_selfplay", "pgx_tictactoe", "random"),
}

_LOGDIR = flags.DEFINE_string("logdir", None, "Where the runs and the results go.")
_GAME = flags.DEFINE_enum("game", "connect4", list(GAMES), "Which game.")
_SECONDS = flags.DEFINE_float("seconds", 180.0, "Wall time of each side's training.")
_WARMUP = flags.DEFINE_float("warmup_s", 30.0, "Rows before this (from the first) are not timed.")
_EVAL_GAMES = flags.DEFINE_integer("eval_games", 400, "Games of each policy against the bot.")
flags.mark_flag_as_required("logdir")


def train(config: str, run_dir: str, seconds: float) -> None:
    command = [
        "scripts/train.sh", f"--config=configs/{config}.py", f"--logdir={run_dir}",
        "--config.log.wandb_mode=disabled", "--config.total_env_steps=10000000000",
    ]  # fmt: skip
    print(" ".join(command), flush=True)
    job = subprocess.Popen(command, cwd=ROOT, start_new_session=True)
    try:
        job.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGINT)  # as Ctrl-C: every process saves and stops
        job.wait(timeout=300)


def rates(run_dir: str, warmup_s: float) -> dict:
    """Games/s and env steps/s over the rows after the warmup."""
    rows = read_metrics(run_dir)
    start = rows[0]["time"] + warmup_s
    timed = [r for r in rows if r["time"] >= start]
    if len(timed) < 2:
        raise SystemExit(f"{run_dir}: fewer than 2 rows after {warmup_s} s; give more --seconds")
    span = timed[-1]["time"] - timed[0]["time"]
    games = sum(r["episodes"] for r in timed[1:])
    steps = timed[-1]["env_steps"] - timed[0]["env_steps"]
    return {
        "games_per_s": games / span,
        "env_steps_per_s": steps / span,
        "env_steps": rows[-1]["env_steps"],
        "policy_version": rows[-1]["policy_version"],
        "timed_s": span,
    }


def score(run_dir: str, bot: str, games: int) -> dict:
    command = [
        sys.executable, "play.py", f"--a={run_dir}", f"--b={bot}", f"--games={games}", "--greedy",
        "--json",
    ]  # fmt: skip
    out = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv):
    del argv
    seed_path, device, bot = GAMES[_GAME.value]
    result = {"game": _GAME.value, "seconds": _SECONDS.value, "bot": bot, "sides": {}}
    for side, config in (("seed_path", seed_path), ("device", device)):
        run_dir = os.path.join(_LOGDIR.value, side)
        started = time.time()
        if not os.path.exists(os.path.join(run_dir, "metrics.jsonl")):  # a rerun reads it
            train(config, run_dir, _SECONDS.value)
        record = {"config": config, "wall_s": time.time() - started}
        record.update(rates(run_dir, _WARMUP.value))
        record["vs_" + bot] = score(run_dir, bot, _EVAL_GAMES.value)
        result["sides"][side] = record
        print(json.dumps({side: record}), flush=True)
    sides = result["sides"]
    result["games_per_s_ratio"] = sides["device"]["games_per_s"] / sides["seed_path"]["games_per_s"]
    path = os.path.join(_LOGDIR.value, "selfplay_games.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    app.run(main)
