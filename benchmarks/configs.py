"""The shipped configs that run in minutes on a small machine, each at its own budget, one after
another: what a first run of each should show (env steps, wall time, env steps/s, final return
and the task's own metric where it has one). README's table of configs cites the result.

    python -m benchmarks.configs --logdir=runs/configs
    python -m benchmarks.configs --logdir=runs/configs --configs=cartpole_ppo,tictactoe_selfplay

Each run goes through scripts/train.sh with its config untouched but wandb off (rerun to resume:
a finished run is read, not run again). The numbers are the run's own summary.json (wall time
from the learner's start, compiling included) and its last metrics row. Writes
<logdir>/configs.json and configs.md.
"""

import json
import os
import subprocess

from absl import app, flags

from benchmarks.results_io import ROOT, write_markdown
from seedlike.metrics import read_metrics, read_summary

# config -> the metrics key that says whether the task is learned, beside the return.
QUICK = {
    "cartpole_ppo": "",
    "cartpole_vtrace": "",
    "cartpole_rainbow": "",
    "cartpole_pomdp_lstm": "",
    "cartpole_pomdp_r2d2": "",
    "gymnasium_ppo": "",
    "tictactoe_selfplay": "league/win_rate_vs_random",
    "coins_teams": "league/win_rate_vs_random",
    "targets_pointer": "",
    "gymnax_cartpole_ppo": "",
}

_LOGDIR = flags.DEFINE_string("logdir", None, "Where the runs and the results go.")
_CONFIGS = flags.DEFINE_list("configs", list(QUICK), "Configs (names in configs/) to run.")


def run_config(name: str, run_dir: str) -> dict:
    """One run of configs/<name>.py at its own budget, and what it showed."""
    if read_summary(run_dir) is None or read_summary(run_dir)["outcome"] != "finished":
        command = [
            "scripts/train.sh", f"--config=configs/{name}.py", f"--logdir={run_dir}",
            "--config.log.wandb_mode=disabled",
        ]  # fmt: skip
        print(" ".join(command), flush=True)
        subprocess.run(command, cwd=ROOT, check=True)
    summary = read_summary(run_dir)
    key = QUICK.get(name, "")
    values = [r[key] for r in read_metrics(run_dir) if r.get(key) is not None] if key else []
    return {
        "config": name,
        "env_steps": summary["env_steps"],
        "wall_s": summary["wall_s"],
        "env_steps_per_s": summary["env_steps_per_s"],
        "final_return": summary["final_return"],
        "final_return_ci95": summary["final_return_ci95"],
        "metric": key,
        "metric_last": values[-1] if values else None,
    }


def table(results: list[dict]) -> list[str]:
    lines = [
        "| config | env steps | wall time | env steps/s | final return [95%] | task metric |",
        "| --- | ---: | ---: | ---: | --- | --- |",
    ]
    for r in results:
        low, high = r["final_return_ci95"] or (float("nan"),) * 2
        metric = f"{r['metric']} {r['metric_last']:.2f}" if r["metric_last"] is not None else "-"
        lines.append(
            f"| `configs/{r['config']}.py` | {r['env_steps']:,} | {r['wall_s'] / 60:.1f} min "
            f"| {r['env_steps_per_s']:,.0f} | {r['final_return']:.1f} [{low:.1f}, {high:.1f}] "
            f"| {metric} |"
        )
    return lines


def main(argv):
    del argv
    logdir = os.path.abspath(_LOGDIR.value)
    results = [run_config(name, os.path.join(logdir, name)) for name in _CONFIGS.value]
    with open(os.path.join(logdir, "configs.json"), "w") as f:
        json.dump({"runs": results}, f, indent=1)
    write_markdown(os.path.join(logdir, "configs.md"), table(results))


if __name__ == "__main__":
    flags.mark_flag_as_required("logdir")
    app.run(main)
