"""The generalization protocol of Gotta Learn Fast (seed 003) for envs with numbered levels
(Procgen through envpool: `num_levels` levels from `start_level`): score a policy level by level
on the levels it trained on and on held-out ones, beside a random policy, and fine-tune it on
held-out levels against training from scratch with the same budget (evaluate.py runs it all).

A level's score is the mean undiscounted return of `episodes` episodes played on that level alone
(envpool with num_levels=1, start_level=level), each the first episode of its own env; the
interval is mean +- 1.96 standard errors. A set of levels scores the mean of its levels' scores,
with the interval over levels.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import ml_collections
import numpy as np

from seedlike.envs import in_env_order, make_env, make_env_spec
from seedlike.policy import PolicyRunner

# Levels played at once (their envs step together, one policy call for all of them).
LEVELS_AT_ONCE = 8


def parse_levels(text: str) -> list[int]:
    """'200:300' (a range), '200:300:10' (every 10th) or '3,17,42' -> level numbers."""
    text = text.strip()
    try:
        if ":" in text:
            parts = [int(p) for p in text.split(":")]
            if (
                len(parts) not in (2, 3)
                or parts[1] <= parts[0]
                or (len(parts) == 3 and parts[2] < 1)
            ):
                raise ValueError
            return list(range(*parts))
        levels = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise ValueError(
            f"levels {text!r}: write START:STOP, START:STOP:STEP or a comma-separated list"
        ) from None
    if not levels or min(levels) < 0:
        raise ValueError(f"levels {text!r}: need at least one level, none negative")
    return levels


def level_config(env_config, level: int, episodes: int):
    """`env_config` for `episodes` envs that all play `level` and nothing else."""
    config = ml_collections.ConfigDict(env_config.to_dict())
    if "num_levels" not in config.kwargs:
        raise ValueError(
            f"{config.name} has no numbered levels (env.kwargs.num_levels, start_level): the "
            "level protocol needs a Procgen task"
        )
    config.kwargs.num_levels, config.kwargs.start_level = 1, int(level)
    config.num_envs, config.batch_envs = int(episodes), 0
    return config


class Played(NamedTuple):
    """The episodes played on one level."""

    returns: np.ndarray  # float64 [episodes], undiscounted
    lengths: np.ndarray  # int64 [episodes], env steps


def play_levels(
    network,
    policy_params,
    env_config,
    levels: list[int],
    episodes: int,
    greedy: bool = False,
    seed: int = 0,
) -> dict[int, Played]:
    """`episodes` episodes on each level, each the first of its own env: level -> Played.

    `policy_params` None plays uniformly random actions (the protocol's floor).
    """
    runner = PolicyRunner(network, greedy=greedy, seed=seed) if policy_params is not None else None
    rng = np.random.default_rng(seed)
    scores = {}
    for start in range(0, len(levels), LEVELS_AT_ONCE):
        group = levels[start : start + LEVELS_AT_ONCE]
        scores.update(_play_group(network, runner, policy_params, env_config, group, episodes, rng))
    return scores


def _play_group(network, runner, policy_params, env_config, levels, episodes, rng):
    spec = make_env_spec(level_config(env_config, levels[0], episodes))
    envs = [
        make_env(level_config(env_config, level, episodes), spec, int(rng.integers(1 << 30)))
        for level in levels
    ]
    n = len(levels) * episodes
    returns = np.zeros(n)
    lengths = np.zeros(n, np.int64)
    finished = np.zeros(n, bool)
    first = np.ones(n, bool)
    carry = jax.tree.map(np.asarray, network.initial_carry(n))
    try:
        for env in envs:
            env.reset()
        while not finished.all():
            parts = [in_env_order(env.recv()) for env in envs]
            # Row i of level k is env k * episodes + env_id.
            index = np.concatenate([k * episodes + p.env_id for k, p in enumerate(parts)])
            reward = np.concatenate([p.reward for p in parts])
            done = np.concatenate([p.terminated | p.truncated for p in parts])
            playing = ~finished[index]
            returns[index[playing]] += reward[playing]
            lengths[index[playing & ~first[index]]] += 1  # steps taken (the first row is a reset)
            finished[index[done]] = True
            if runner is None:
                action = rng.integers(0, spec.num_actions, index.shape[0]).astype(np.int32)
            else:
                obs = {k: np.concatenate([p.obs[k] for p in parts]) for k in spec.observation}
                rows_carry = jax.tree.map(lambda c, i=index: c[i], carry)
                out = runner.step(policy_params, obs, {}, rows_carry, first[index])
                for store, new in zip(jax.tree.leaves(carry), jax.tree.leaves(out.carry)):
                    store[index] = new
                action = out.action
            first[index] = done  # the row after an episode's last starts the next one
            offset = 0
            for env, part in zip(envs, parts):
                k = part.reward.shape[0]
                env.send(action[offset : offset + k], part)
                offset += k
    finally:
        for env in envs:
            env.close()
    part = [slice(k * episodes, (k + 1) * episodes) for k in range(len(levels))]
    return {level: Played(returns[p], lengths[p]) for level, p in zip(levels, part)}


@dataclasses.dataclass
class Interval:
    mean: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values) -> Interval:
        values = np.asarray(values, np.float64)
        half = 1.96 * values.std(ddof=1) / math.sqrt(values.size) if values.size > 1 else 0.0
        mean = float(values.mean())
        return cls(mean, mean - half, mean + half, int(values.size))

    def __str__(self) -> str:
        return f"{self.mean:.2f} [{self.low:.2f}, {self.high:.2f}]"


def summarize(played: dict[int, Played]) -> dict:
    """Per-level intervals and the set's score (mean of level means, interval over levels)."""
    per_level = {level: Interval.of(p.returns) for level, p in played.items()}
    return {
        "levels": {str(k): dataclasses.asdict(v) for k, v in per_level.items()},
        "score": dataclasses.asdict(Interval.of([v.mean for v in per_level.values()])),
    }


def markdown(report: dict) -> str:
    """The report of evaluate.py as Markdown tables."""
    lines = [f"# Generalization: {report['checkpoint']}", ""]
    lines += [f"{report['env']}, {report['episodes']} episodes per level, "
              f"{'greedy' if report['greedy'] else 'sampled'} actions; "
              "score = mean return, [95% interval]", ""]  # fmt: skip
    lines += ["| levels | policy | random | policy - random |", "| --- | ---: | ---: | ---: |"]
    for name in ("train", "test"):
        part = report.get(name)
        if part is None:
            continue
        p, r = Interval(**part["policy"]["score"]), Interval(**part["random"]["score"])
        lines.append(f"| {name} ({part['describe']}) | {p} | {r} | {p.mean - r.mean:+.2f} |")
    if "gap" in report:
        lines += ["", f"Generalization gap (train - test score): {report['gap']:+.2f}"]
    finetune = report.get("finetune")
    if finetune:
        lines += ["", f"Fine-tuning on held-out levels, {finetune['steps']} env steps each:", ""]
        lines += [
            "| level | zero-shot | fine-tuned | from scratch |",
            "| ---: | ---: | ---: | ---: |",
        ]
        for row in finetune["levels"]:
            cells = [
                str(Interval(**row[k]["score"])) for k in ("zero_shot", "finetuned", "scratch")
            ]
            lines.append(f"| {row['level']} | " + " | ".join(cells) + " |")
        means = {k: np.mean([row[k]["score"]["mean"] for row in finetune["levels"]])
                 for k in ("zero_shot", "finetuned", "scratch")}  # fmt: skip
        row = " | ".join(f"{means[k]:.2f}" for k in ("zero_shot", "finetuned", "scratch"))
        lines.append(f"| mean | {row} |")
    return "\n".join(lines) + "\n"


def write(report: dict, out: str) -> tuple[str, str]:
    """Writes `out` (JSON) and the Markdown beside it (same name, .md); returns both paths."""
    from seedlike import scores

    return scores.write(report, out, markdown)
