"""Population-based training (Jaderberg et al. 2017): a population of runs whose hyperparameters
evolve with the training, in generations.

  python -m seedlike.launch.pbt --config=configs/cartpole_ppo.py --logdir=runs/pbt --members=4 \\
      --interval=25000 --space=optimizer.learning_rate=log:1e-5:1e-2 \\
      --space=ppo.clip_eps=uniform:0.05:0.4

Each member is a `scripts/train.sh` run in <logdir>/member_<m> with seed config.seed + m and its
own values of the --space keys (drawn at the start, seedlike.launch.jobs.parse_space).
A generation trains every member --interval more env steps (config.pause_at_env_steps: the job
ends with a checkpoint; schedules still run to config.total_env_steps), --parallel at a time.
Then each member's fitness is the mean of --fitness (a metrics key: episode_return_robust, a league
win rate, trueskill_mu) over the later half of its rows of that generation, and:

* exploit: each member of the bottom --quantile takes a random member of the top quantile's
  checkpoints (parameters, optimizer state, counters, league: the whole checkpoints/ and
  league/ directories) and its hyperparameters;
* explore: every --space value it took is multiplied by one of --perturb (0.8 or 1.2) and kept
  within its range (int: rounded; choice: drawn again with probability --resample).

Nothing else changes. <logdir>/pbt.jsonl has one row per member per generation (fitness,
hyperparameters, env steps, and the member it copied), pbt.png the fitness and every
hyperparameter over the generations, pbt_state.json the population (checkpointed after every
generation and every finished member: the same command resumes where it stopped, and the draws
come from --pbt_seed and the generation, so a resumed population makes the same choices).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import time

import numpy as np

from seedlike.config import load_config_file
from seedlike.launch import api, jobs
from seedlike.metrics import read_metrics
from seedlike.scores import final_score

STATE_FILE = "pbt_state.json"
COPIED = ("checkpoints", "league")  # what a member takes from the one it copies


@dataclasses.dataclass(frozen=True)
class Explore:
    """How explore moves a member's values: factors for numbers, resampling for choices."""

    space: dict  # key -> jobs.Dist
    perturb: tuple[float, ...] = (0.8, 1.2)
    resample: float = 0.25

    def __call__(self, values: dict[str, str], rng: np.random.Generator) -> dict[str, str]:
        out = dict(values)
        for key, dist in self.space.items():
            if dist.kind == "choice":
                if rng.random() < self.resample:
                    out[key] = dist.sample(rng)
                continue
            low, high = dist.args
            value = float(values[key]) * self.perturb[int(rng.integers(len(self.perturb)))]
            value = min(max(value, low), high)
            out[key] = str(int(round(value))) if dist.kind == "int" else f"{value:.6g}"
        return out


def generation_rng(seed: int, generation: int) -> np.random.Generator:
    """The draws of one generation's exploit and explore: the same after a resume."""
    return np.random.default_rng([seed, generation + 1])


def exploit_explore(
    members: list[dict], fitness: list[float], quantile: float, explore: Explore, rng, mode="max"
) -> list[tuple[int, int]]:
    """Replaces the bottom `quantile` of `members` ({"values": {...}}) in place by explore()d
    copies of random top-quantile members; returns the (copier, copied) pairs. Members without
    a fitness (nan) rank last and are never copied; with none measured, nothing changes."""
    n = len(members)
    cut = max(1, int(math.floor(quantile * n))) if n > 1 else 0
    cut = min(cut, sum(not math.isnan(f) for f in fitness))
    sign = -1.0 if mode == "max" else 1.0
    keyed = [
        (math.isnan(f), sign * (0.0 if math.isnan(f) else f), m) for m, f in enumerate(fitness)
    ]
    order = [m for *_, m in sorted(keyed)]
    top, bottom = order[:cut], order[n - cut :]
    pairs = []
    for m in bottom:
        source = top[int(rng.integers(len(top)))]
        members[m]["values"] = explore(members[source]["values"], rng)
        pairs.append((m, source))
    return pairs


def copy_member(logdir: str, source: int, target: int) -> None:
    """`target` continues from `source`'s checkpoints (and league): exactly its files."""
    for name in COPIED:
        src, dst = (os.path.join(logdir, member_dir(m), name) for m in (source, target))
        if os.path.exists(dst):
            shutil.rmtree(dst)
        if os.path.exists(src):
            shutil.copytree(src, dst)


def member_dir(m: int) -> str:
    return f"member_{m}"


def fitness_of(rows: list[dict], since: float, key: str) -> float:
    """The mean of `key` over the later half of the rows written at or after `since` (a final
    score, seedlike.scores.final_score); NaN before any row has it."""
    return final_score([r for r in rows if r.get("time", 0) >= since], key, share=0.5)


class Population:
    """The population's state, its generations and their records (see the module docstring).

    `total_env_steps`, `base_seed`: the runs' (when flags override the config's); member m gets
    seed base_seed + m; `exploit` False keeps
    every member's values (the control); `train` starts a member's job (seedlike.launch.api.train's
    signature; tests give a stand-in)."""

    def __init__(self, config: str, logdir: str, members: int, interval: int, explore: Explore,
                 quantile: float, fitness: str, mode: str, seed: int, flags: list[str],
                 num_actors: int = 2, parallel: int = 1, retries: int = 1,
                 total_env_steps: int | None = None, base_seed: int | None = None,
                 exploit: bool = True,
                 train=api.train):  # fmt: skip
        self.config, self.logdir, self.interval = config, logdir, int(interval)
        self.explore, self.quantile, self.fitness, self.mode = explore, quantile, fitness, mode
        self.seed, self.flags = seed, flags
        self.num_actors, self.parallel, self.retries, self.train = (
            num_actors, parallel, retries, train,
        )  # fmt: skip
        loaded = load_config_file(config)
        self.total = int(total_env_steps or loaded.total_env_steps)
        self.exploit = exploit
        self.base_seed = int(loaded.seed if base_seed is None else base_seed)
        self.generations = math.ceil(self.total / self.interval)
        os.makedirs(logdir, exist_ok=True)
        self.state = jobs.load_state(logdir, STATE_FILE)
        if "members" not in self.state:
            rng = np.random.default_rng([seed, 0])  # generation g draws from [seed, g + 1]
            self.state = {
                "generation": 0,
                "members": [
                    {"values": {k: d.sample(rng) for k, d in explore.space.items()}}
                    for _ in range(members)
                ],
            }
        elif len(self.state["members"]) != members:
            raise jobs.SpecError(
                f"{logdir} holds a population of {len(self.state['members'])}, not --members="
                f"{members}; use another --logdir"
            )
        self.stopping = False
        self.runner = None  # the generation's jobs.Runner, while it trains

    def run(self) -> bool:
        """Trains the remaining generations; False if stopped (the state allows a resume)."""
        while self.state["generation"] < self.generations and not self.stopping:
            if not self._train_generation():
                return False
        return not self.stopping

    def _train_generation(self) -> bool:
        g = self.state["generation"]
        pause = min((g + 1) * self.interval, self.total)
        started = self.state.setdefault("started", {})
        runs = {}
        for m, member in enumerate(self.state["members"]):
            started.setdefault(str(m), time.time())
            cell = {**member["values"], "pause_at_env_steps": str(pause)}
            runs[member_dir(m)] = (cell, self.base_seed + m)
        jobs.save_state(self.logdir, self.state, STATE_FILE)
        self.runner = jobs.Runner(
            self.config, self.logdir, runs, self.flags, self.num_actors, self.parallel,
            self.retries, state_file=f"pbt_generation_{g}.json", train=self.train,
            label=f"pbt generation {g}", metric=self.fitness,
        )  # fmt: skip
        states = self.runner.run()["runs"]
        if self.stopping or any(states[r]["state"] != "done" for r in runs):
            return False
        rows = [
            read_metrics(os.path.join(self.logdir, member_dir(m)))
            for m in range(len(self.state["members"]))
        ]
        if not any(self.fitness in r for member in rows for r in member):
            logged = sorted({k for member in rows for r in member[-1:] for k in r})
            raise jobs.SpecError(
                f"--fitness={self.fitness}: no member logged it; the metrics rows hold "
                f"{', '.join(logged[:12])}{', ...' if len(logged) > 12 else ''}"
            )
        fitness = [fitness_of(rows[m], started[str(m)], self.fitness) for m in range(len(rows))]
        records = [
            {
                "generation": g,
                "member": m,
                "env_steps": pause,
                "fitness": f,
                **self.state["members"][m]["values"],
            }  # fmt: skip
            for m, f in enumerate(fitness)
        ]
        if g + 1 < self.generations and self.exploit:
            pairs = exploit_explore(
                self.state["members"], fitness, self.quantile, self.explore,
                generation_rng(self.seed, g), self.mode,
            )  # fmt: skip
            for target, source in pairs:
                copy_member(self.logdir, source, target)
                records[target]["copied"] = source
                records[target]["next"] = self.state["members"][target]["values"]
        with open(os.path.join(self.logdir, "pbt.jsonl"), "a") as f:
            for record in records:
                f.write(json.dumps(record) + "\n")
        copies = [f"{r['member']} <- {r['copied']}" for r in records if "copied" in r]
        print(
            f"pbt: generation {g + 1} of {self.generations} done at {pause} env steps; "
            f"{self.fitness} by member {', '.join(f'{f:.4g}' for f in fitness)}"
            + (f"; copied {', '.join(copies)}" if copies else ""),
            flush=True,
        )
        self.state["generation"] = g + 1
        self.state.pop("started")
        jobs.save_state(self.logdir, self.state, STATE_FILE)
        plot(self.logdir, list(self.explore.space))
        return True


def read_records(logdir: str) -> list[dict]:
    path = os.path.join(logdir, "pbt.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def plot(logdir: str, keys: list[str]) -> None:
    """pbt.png: fitness and each hyperparameter per member over the generations."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_records(logdir)
    if not records:
        return
    panels = ["fitness", *keys]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.8), squeeze=False)
    members = sorted({r["member"] for r in records})
    for ax, key in zip(axes[0], panels):
        for m in members:
            mine = [r for r in records if r["member"] == m]
            xs = [r["env_steps"] for r in mine]
            try:
                ys = [float(r[key]) for r in mine]
            except (TypeError, ValueError):  # a choice: its values as categories
                ys = [str(r[key]) for r in mine]
            ax.plot(xs, ys, marker="o", markersize=3, label=f"member {m}")
            copies = [r for r in mine if "copied" in r]
            ax.scatter([r["env_steps"] for r in copies], [ys[mine.index(r)] for r in copies],
                       marker="x", color="k", zorder=3)  # fmt: skip
        if key != "fitness" and all(isinstance(r[key], str) for r in records):
            values = [float(r[key]) for r in records if _is_number(r[key])]
            if values and min(values) > 0 and max(values) / min(values) > 20:
                ax.set_yscale("log")
        ax.set(xlabel="env steps", title=key)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("population-based training (x: copied a better member, then explored)")
    fig.tight_layout()
    fig.savefig(os.path.join(logdir, "pbt.png"), dpi=110)
    plt.close(fig)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
