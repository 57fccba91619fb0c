"""Where benchmark JSON goes: --out, or benchmarks/results/<name>-<time>.json."""

import json
import os
import subprocess
import sys
import time

from seedlike import aggregate
from seedlike.scores import final_score

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write(name: str, result: dict, out: str | None = None, echo: dict | None = None) -> str:
    """Writes `result` as JSON and prints `echo` (default: the result)."""
    out = out or os.path.join(RESULTS, f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result if echo is None else echo, indent=2))
    return out


def run_summary(run_dir: str) -> dict:
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    started = os.path.getmtime(os.path.join(run_dir, "server_address"))
    wall = rows[-1]["time"] - started
    return {
        "final": final_score(rows, weight="episodes"),
        "best_row": max(r["episode_return_mean"] for r in rows if r["episode_return_mean"]),
        "env_steps": rows[-1]["env_steps"],
        "wall_s": wall,
        "sps": rows[-1]["env_steps"] / wall,
        "curve": [(r["env_steps"], r["episode_return_mean"]) for r in rows],
    }


def plot_curves(panels: dict, path: str) -> None:
    """One panel per title: {title: ([(label, [(env_steps, return or None), ...]), ...],
    (reference, its label) or None)}, return against millions of env steps, into a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4.8 * len(panels), 3.4), squeeze=False)
    for ax, (title, (curves, reference)) in zip(axes[0], panels.items()):
        for label, curve in curves:
            x, y = zip(*[(s, v) for s, v in curve if v is not None])
            ax.plot([s / 1e6 for s in x], y, label=label)
        if reference is not None:
            ax.axhline(reference[0], color="k", ls="--", lw=1, label=reference[1])
        ax.set_title(title)
        ax.set_xlabel("env steps (M)")
        ax.set_ylabel("episode return")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def finished(run_dir: str, steps: int) -> bool:
    """Whether a run's metrics reached `steps` env steps."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return False
    with open(path) as f:
        rows = [json.loads(line) for line in f]
    return bool(rows) and rows[-1]["env_steps"] >= steps


def train(run_dir: str, config: str, seed: int, steps: int, actors: int, flags=()) -> None:
    """A run of `steps` env steps through scripts/train.sh (resumed where it stopped; nothing
    if it has finished)."""
    if finished(run_dir, steps):
        return
    command = [
        "scripts/train.sh", f"--logdir={run_dir}", f"--num_actors={actors}",
        f"--config={config}", f"--config.seed={seed}", f"--config.total_env_steps={steps}",
        "--config.log.wandb_mode=disabled", *flags,
    ]  # fmt: skip
    print(" ".join(command), flush=True)
    subprocess.run(command, cwd=ROOT, check=True)


def greedy_return(run_dir: str, episodes: int) -> float:
    """The mean return of `episodes` greedy episodes of the run's last checkpoint (evaluate.py;
    kept in <run_dir>/evaluation_greedy.json)."""
    out = os.path.join(run_dir, "evaluation_greedy.json")
    if not os.path.exists(out):
        command = [
            sys.executable, "evaluate.py", f"--checkpoint={run_dir}", "--greedy",
            f"--episodes={episodes}", f"--out={out}",
        ]  # fmt: skip
        subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
    with open(out) as f:
        return float(json.load(f)["return"]["mean"])


def over_seeds(values) -> dict:
    """The IQM and mean of one task's per-seed values, with stratified bootstrap 95% intervals
    (seedlike.aggregate)."""
    return aggregate.summarize({"task": [v for v in values if v is not None and v == v]})


def stat_cell(summary: dict, name: str, fmt: str = ".1f") -> str:
    """A table cell "487.2 [431.9, 500.0]" of aggregate.summarize's `name` ("iqm", "mean")."""
    s = summary[name]
    return f"{s['value']:{fmt}} [{s['ci95'][0]:{fmt}}, {s['ci95'][1]:{fmt}}]"


def per_seed(values, fmt: str = ".1f") -> str:
    """A table cell of one number per seed: "487.2 / 500.0 / 431.9"."""
    return " / ".join(format(x, fmt) for x in values)


def write_markdown(path: str, lines: list[str]) -> str:
    """Writes a Markdown table (its lines) to `path`, prints it and returns it."""
    table = "\n".join(lines)
    with open(path, "w") as f:
        f.write(table + "\n")
    print(table)
    return table
