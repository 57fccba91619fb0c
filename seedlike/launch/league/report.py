"""What a league of roles did (python -m seedlike.launch.league): did the exploiters find
weaknesses of the main agent, and did the main agent then lose them?

    python -m seedlike.launch.league.report --logdir=runs/c4league --vs=runs/c4single

1. The payoff over time: every snapshot a main exploiter left in the league (one per exploit
   found or time limit) plays `--games` games against main-agent snapshots taken along the run
   (`--main_versions` of them, evenly spaced). Row: a main snapshot, by the minute it was taken;
   column: an exploiter snapshot, by the minute it joined. An exploit found and then lost reads as
   a column whose early rows are below 0.5 for the main agent and whose later rows are above it.
2. The main agent's last checkpoint against the scripted agent (policy alone, sampled and greedy)
   and, with --vs, head to head against another run's (both colours: envpool draws the first
   mover; 95% Wilson intervals).
Writes <logdir>/league_roles.json and league_roles.png.
"""

from __future__ import annotations

import json
import os

import numpy as np
from absl import app, flags

from seedlike.league import games
from seedlike.league.roles import snapshot_dir
from seedlike.metrics import read_metrics

_LOGDIR = flags.DEFINE_string(
    "logdir", None, "The league's directory (python -m seedlike.launch.league)."
)
_VS = flags.DEFINE_string("vs", None, "Another run that the main agent plays head to head.")
_GAMES = flags.DEFINE_integer("games", 100, "Games per pair in the payoff over time.")
_FINAL_GAMES = flags.DEFINE_integer("final_games", 400, "Games of each final match.")
_MAIN_VERSIONS = flags.DEFINE_integer("main_versions", 10, "Main snapshots in the payoff matrix.")
_EXPLOITS = flags.DEFINE_integer("exploits", 12, "At most this many exploiter snapshots.")
_ENVS = flags.DEFINE_integer("envs", 50, "Games played at once.")
_REPLOT = flags.DEFINE_bool("replot", False, "Draw league_roles.png again from the JSON.")


def versions(directory: str) -> list[int]:
    """The snapshot versions in a role's snapshot directory, oldest first."""
    return (
        sorted(int(v) for v in os.listdir(directory) if v.isdigit())
        if os.path.isdir(directory)
        else []
    )


def spaced(items: list, n: int) -> list:
    """At most n items, evenly spaced, the last one always in."""
    if len(items) <= n:
        return list(items)
    picks = np.linspace(0, len(items) - 1, n).round().astype(int)
    return [items[i] for i in sorted(set(picks.tolist()))]


def minute_of(rows: list[dict], version: int, start: float) -> float:
    """The minute of the league (from `start`) when a role reached policy `version`."""
    for row in rows:
        if row.get("policy_version", -1) >= version:
            return (row["time"] - start) / 60.0
    return (rows[-1]["time"] - start) / 60.0 if rows else float("nan")


def match(a, b, games_: int, seed: int, envs: int) -> dict:
    """`games_` Connect Four games of agent a against b, `envs` at once: games.summarize's."""
    result = games.play_match("ConnectFour-v1", a, b, games_, seed=seed, num_envs=envs)
    return games.summarize(result)


def payoff_over_time(
    logdir: str, rows: dict, start: float, games_: int, main_versions: int, exploits: int, envs: int
) -> dict:
    """The main agent's win rate of `games_` games for each pair of (at most `main_versions`
    main snapshots, at most `exploits` main-exploiter snapshots), with the minute of the league
    each was taken."""
    mains = spaced(versions(snapshot_dir(logdir, "main")), main_versions)
    found = spaced(versions(snapshot_dir(logdir, "main_exploiter")), exploits)
    agent = lambda role, v: games.checkpoint_agent(  # noqa: E731
        os.path.join(snapshot_dir(logdir, role), str(v)), name=f"{role}/v{v}"
    )
    exploiters = {v: agent("main_exploiter", v) for v in found}
    table = np.full((len(mains), len(found)), np.nan)
    for i, m in enumerate(mains):
        main_agent = agent("main", m)
        for j, e in enumerate(found):
            outcome = match(main_agent, exploiters[e], games_, seed=i * 1000 + j, envs=envs)
            table[i, j] = outcome["win_rate"]
            print(f"main v{m} vs main_exploiter v{e}: {table[i, j]:.2f}", flush=True)
    return {
        "main_versions": mains,
        "main_minutes": [minute_of(rows["main"], v, start) for v in mains],
        "exploiter_versions": found,
        "exploiter_minutes": [minute_of(rows["main_exploiter"], v, start) for v in found],
        "main_win_rate": table.tolist(),
        "games_per_pair": games_,
    }


def final_matches(logdir: str, vs: str | None, games_: int, envs: int) -> dict:
    """The main agent's last checkpoint against the scripted agent (sampled and greedy) and, with
    `vs`, against that run's, which also plays the scripted agent."""
    final = os.path.join(logdir, "main")
    finals = {}
    for greedy in (False, True):
        name = "vs_scripted_greedy" if greedy else "vs_scripted"
        finals[name] = match(
            games.checkpoint_agent(final, greedy=greedy), games.make_agent("scripted"),
            games_, seed=7, envs=envs,
        )  # fmt: skip
    if vs:
        finals["head_to_head"] = match(
            games.checkpoint_agent(final), games.checkpoint_agent(vs), games_, seed=8, envs=envs
        )
        finals["other_vs_scripted"] = match(
            games.checkpoint_agent(vs), games.make_agent("scripted"), games_, seed=7, envs=envs
        )
    return finals


def main(argv):
    del argv
    logdir = os.path.abspath(_LOGDIR.value)
    rows = {r: read_metrics(os.path.join(logdir, r)) for r in ("main", "main_exploiter")}
    start = min(rs[0]["time"] for rs in rows.values() if rs)
    if _REPLOT.value:
        with open(os.path.join(logdir, "league_roles.json")) as f:
            return plot(json.load(f), rows, start, os.path.join(logdir, "league_roles.png"))
    out = payoff_over_time(
        logdir, rows, start, _GAMES.value, _MAIN_VERSIONS.value, _EXPLOITS.value, _ENVS.value
    )
    out["final"] = finals = final_matches(logdir, _VS.value, _FINAL_GAMES.value, _ENVS.value)
    for name, s in finals.items():
        low, high = s["win_rate_ci95"]
        print(f"{name}: {s['win_rate']:.3f} [{low:.3f}, {high:.3f}] "
              f"({s['wins']}/{s['draws']}/{s['losses']})")  # fmt: skip
    with open(os.path.join(logdir, "league_roles.json"), "w") as f:
        json.dump(out, f, indent=1)
    plot(out, rows, start, os.path.join(logdir, "league_roles.png"))


def plot(out: dict, rows: dict, start: float, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 5))
    table = np.array(out["main_win_rate"])
    if table.size:
        _heat_map(fig, ax, out, table)
    else:  # a run stopped before the main exploiter's first snapshot joined the league
        ax.text(0.5, 0.5, "no main or main-exploiter snapshots yet", ha="center", va="center")
        ax.set_axis_off()
    exploiter = rows["main_exploiter"]
    minutes = [(r["time"] - start) / 60 for r in exploiter]
    bx.plot(
        minutes,
        [r.get("league/exploit_win_rate") for r in exploiter],
        label="main exploiter vs main's newest snapshot",
    )
    joins = [
        m
        for m, a, b in zip(minutes[1:], exploiter, exploiter[1:])
        if b.get("league/joined", 0) > a.get("league/joined", 0)
    ]
    for m in joins:
        bx.axvline(m, color="grey", lw=0.5)
    main = rows["main"]
    mm = [(r["time"] - start) / 60 for r in main]
    lines = {
        "league/win_rate_vs_main_exploiter": "main vs exploiter snapshots",
        "league/win_rate_vs_scripted": "main vs the scripted bot (its training games)",
    }
    for key, label in lines.items():
        bx.plot(mm, [r.get(key) for r in main], label=label)
    bx.set_xlabel("minutes")
    bx.set_ylabel("win rate")
    bx.set_ylim(0, 1)
    bx.legend(fontsize=8)
    bx.set_title("exploits found (grey lines: an exploiter joined)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _heat_map(fig, ax, out: dict, table: np.ndarray) -> None:
    image = ax.imshow(table, cmap="RdBu", vmin=0, vmax=1, aspect="auto", origin="lower")
    ax.set_xticks(range(len(out["exploiter_versions"])))
    ax.set_xticklabels([f"{m:.0f}" for m in out["exploiter_minutes"]])
    ax.set_yticks(range(len(out["main_versions"])))
    ax.set_yticklabels([f"{m:.0f}" for m in out["main_minutes"]])
    ax.set_xlabel("main exploiter snapshot: minute it joined the league")
    ax.set_ylabel("main agent snapshot: minute taken")
    ax.set_title("main agent's win rate against each exploit")
    for i in range(table.shape[0]):
        for j in range(table.shape[1]):
            ax.text(j, i, f"{table[i, j]:.2f}", ha="center", va="center", fontsize=7)
    # Where each exploit joined, on the main agent's time axis: rows below it are older.
    mains = np.array(out["main_minutes"])
    for j, minute in enumerate(out["exploiter_minutes"]):
        ax.plot(j, np.interp(minute, mains, np.arange(len(mains))), "k_", markersize=14)
    fig.colorbar(image, ax=ax)


if __name__ == "__main__":
    flags.mark_flag_as_required("logdir")
    app.run(main)
