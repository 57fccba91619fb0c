"""A Neural MMO population run's agents over time: lifetime, return and achievements per member.

Reads the `episode infos` lines the actors log every 30 s (means over the agent episodes that
ended since the last line, per population member) and each member's metrics.jsonl, and averages
them over windows of the run, weighted by episodes:

    python -m seedlike.envs.nmmo_summary --run=runs/nmmo --windows=6

The lines are seedlike/actor.py's (any PettingZoo env that reports episode infos writes them);
the default keys are Neural MMO's (seedlike/envs/nmmo_env.py).
"""

from __future__ import annotations

import glob
import json
import os
import re
from datetime import datetime

import numpy as np
from absl import app, flags

_RUN = flags.DEFINE_string("run", None, "the run directory (scripts/train.sh --logdir)")
_WINDOWS = flags.DEFINE_integer("windows", 6, "equal spans of the run to average over")
_KEYS = flags.DEFINE_list(
    "keys",
    "lifetime,achievements/eat_food,achievements/drink_water,achievements/harvest_item,"
    "achievements/level_up,achievements/score_hit,achievements/npc_kill,achievements/player_kill",
    "episode-info keys to report",
)
LINE = re.compile(r"^I(\d{4} \d\d:\d\d:\d\d\.\d+) .*episode infos (\{.*\})$")


def episode_infos(run: str) -> list[tuple[float, dict]]:
    """(seconds since the first line, info means) of every actor's `episode infos` lines."""
    out = []
    for path in sorted(glob.glob(os.path.join(run, "actor_*.log"))):
        with open(path) as f:
            for line in f:
                m = LINE.match(line.strip())
                if m:
                    stamp = datetime.strptime(m.group(1), "%m%d %H:%M:%S.%f").timestamp()
                    out.append((stamp, json.loads(m.group(2))))
    if not out:
        raise SystemExit(f"no 'episode infos' lines in {run}/actor_*.log")
    start = min(t for t, _ in out)
    return [(t - start, info) for t, info in out]


def summarize(run: str, windows: int, keys: list[str]) -> list[dict]:
    infos = episode_infos(run)
    end = max(t for t, _ in infos) + 1e-9
    members = sorted({info["member"] for _, info in infos})
    rows = []
    for member in members:
        for w in range(windows):
            lo, hi = w * end / windows, (w + 1) * end / windows
            chosen = [i for t, i in infos if i["member"] == member and lo <= t < hi]
            n = np.array([i["episodes"] for i in chosen], np.float64)
            row = {"member": member, "minutes": f"{lo / 60:.0f}-{hi / 60:.0f}", "episodes": n.sum()}
            for key in keys:
                values = np.array([i.get(key, 0.0) for i in chosen])
                row[key] = float(values @ n / n.sum()) if n.sum() else None
            rows.append(row)
    return rows


def main(argv):
    del argv
    rows = summarize(_RUN.value, _WINDOWS.value, _KEYS.value)
    keys = ["member", "minutes", "episodes", *_KEYS.value]
    print("| " + " | ".join(k.replace("achievements/", "") for k in keys) + " |")
    print("|" + " --- |" * len(keys))
    for row in rows:
        cells = [f"{row[k]:.1f}" if isinstance(row[k], float) else str(row[k]) for k in keys]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    flags.mark_flag_as_required("run")
    app.run(main)
