"""seedlike as a library: start training jobs and use what they produce, from Python or a notebook.

    import seedlike

    run = seedlike.train("configs/cartpole_ppo.py", "runs/nb", overrides={"total_env_steps": 1e5})
    run.wait()                                     # or poll run.metrics() while it trains
    seedlike.plot_runs(["runs/nb"], out="runs/nb/curve.png")
    seedlike.evaluate("runs/nb", episodes=10)      # {"episodes": 10, "return_mean": ...}
    seedlike.record("runs/nb", "runs/nb/episode.gif")
    seedlike.play("runs/c4", "scripted", games=100)

A job is `scripts/train.sh` in its own process group (learner and actors, exactly as from the
shell), so a notebook kernel never holds the accelerator or the actors' envs. Paths are resolved
against the current directory; configs also against the repository. Surgery is
`surgery.run_surgery` (the `surgery` package builds on this one).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from seedlike.metrics import read_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONSOLE_LOG = "console.log"


class Run:
    """A training job started by `train`: its logdir, metrics and process."""

    def __init__(self, process: subprocess.Popen, logdir: str):
        self.process = process
        self.logdir = logdir

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def metrics(self) -> list[dict]:
        """The metrics rows written so far (docs/metrics.md)."""
        return read_metrics(self.logdir)

    def latest(self, *keys: str) -> dict:
        """The most recent non-null value of each key (a row without episodes ending in its
        interval has no return, say): {key: value or None}."""
        rows = self.metrics()
        return {k: next((r[k] for r in reversed(rows) if r.get(k) is not None), None) for k in keys}

    def log(self, chars: int = 4000) -> str:
        """The end of the job's console output (<logdir>/console.log)."""
        # Bytes, not characters: a long job's log is not read whole for its last lines.
        with open(os.path.join(self.logdir, CONSOLE_LOG), "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - chars))
            return f.read().decode(errors="replace")

    def wait(self, timeout: float | None = None) -> int:
        """Waits for the job to end; returns its exit status (0: trained to total_env_steps)."""
        return self.process.wait(timeout)

    def stop(self, timeout: float = 120.0) -> int:
        """Stops the job as Ctrl-C would: the learner checkpoints (rerun `train` with the same
        logdir to resume) and every process ends; returns train.sh's status, 130."""
        if self.running:
            # SIGTERM, which train.sh and its processes treat as Ctrl-C: a shell started from a
            # background job inherits SIGINT ignored and cannot trap it (a CI run launched with
            # `&` saw train.sh end with status 0, its learner alone having checkpointed).
            os.killpg(self.process.pid, signal.SIGTERM)
        return self.process.wait(timeout)


def _config_path(config: str) -> str:
    """The absolute path of a config file, keeping a `:argument` (configs/of_run.py:RUN)."""
    path, sep, arg = config.partition(":")
    for candidate in (path, os.path.join(ROOT, path)):
        if os.path.exists(candidate):
            return os.path.abspath(candidate) + sep + arg
    raise FileNotFoundError(f"no config file {path} (here or in {ROOT})")


def train(
    config: str = "configs/cartpole_ppo.py",
    logdir: str = "runs/api",
    num_actors: int = 2,
    overrides: dict | None = None,
    flags: tuple[str, ...] = (),
    nice: int = 0,
) -> Run:
    """Starts `scripts/train.sh` (learner + `num_actors` actors) and returns at once.

    Args:
      config: a configs/*.py file.
      logdir: the run directory; an existing run there resumes.
      overrides: config values by dotted key, e.g. {"total_env_steps": 100_000, "seed": 3}.
      flags: further train.sh / learner.py flags, e.g. ("--max_actor_restarts=1",).
      nice: the scheduling niceness of the job's processes (learner and actors), 0 to 19.
    """
    logdir = os.path.abspath(logdir)
    os.makedirs(logdir, exist_ok=True)
    command = [
        *(["nice", "-n", str(int(nice))] if nice else []),
        os.path.join(ROOT, "scripts", "train.sh"),
        f"--config={_config_path(config)}",
        f"--logdir={logdir}",
        f"--num_actors={int(num_actors)}",
        *(f"--config.{key}={_flag_value(value)}" for key, value in (overrides or {}).items()),
        *flags,
    ]
    with open(os.path.join(logdir, CONSOLE_LOG), "ab") as log:
        # The job runs on this interpreter (it has seedlike installed: this module is running),
        # not on a .venv that train.sh would otherwise build (scripts/setup_venv.sh).
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "SEEDLIKE_PYTHON": sys.executable},
        )
    if nice:
        _nice_session(process.pid, int(nice))
    return Run(process, logdir)


def _nice_session(pid: int, nice: int) -> None:
    """Where the kernel groups each session's processes for scheduling (autogroup), a process's
    own niceness only ranks it within its session, and the job is a session of its own: the
    group's niceness is what ranks it against other jobs."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(nice))
    except OSError:
        pass  # no autogroup (or not Linux): the processes' own niceness applies


def _flag_value(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # 1e5 -> 100000 for integer fields
    return str(value)


def load_policy(path: str):
    """(network, {"params", "obs_norm"}, label) of a run, checkpoint or league snapshot."""
    from seedlike.league.games import load_policy as load

    return load(path)


def evaluate(
    checkpoint: str, episodes: int = 10, greedy: bool = True, seed: int = 0, opponent="self"
) -> dict:
    """Plays `episodes` episodes of a checkpoint's policy in one copy of its env (two-player games:
    against `opponent`, by default itself); returns their mean and std of return and length
    (and wins, draws, losses in games). `evaluate.py --checkpoint` prints the full report."""
    from seedlike import scores

    report = scores.evaluate(checkpoint, episodes, greedy, opponent, seed)
    out = {
        "episodes": report["episodes"],
        "return_mean": report["return"]["mean"],
        "return_std": report["return"]["std"],
        "length_mean": report["length"]["mean"],
        "length_std": report["length"]["std"],
    }
    if "games" in report:
        out["games"] = report["games"]
    return out


def record(checkpoint: str, out: str, episodes: int = 1, opponent=None, fps: float = 30.0):
    """Records episodes of a checkpoint to the GIF `out` (watch.py); returns the Recording.
    `opponent` (two-player games): None for the policy itself, or a name or path as in play."""
    from seedlike.league import games
    from seedlike.watch import record_episodes, save_gif

    agent = games.make_agent(opponent) if isinstance(opponent, str) else opponent
    rec = record_episodes(checkpoint, episodes, opponent=agent)
    save_gif(rec.frames, out, fps)
    return rec


def play(a, b, games: int = 100, greedy: bool = False, search_depth: int = 0, seed=0):
    """Plays two agents in their two-player game, as play.py; returns the summary (wins, draws,
    losses, win rate with its interval). An agent is a run, checkpoint or snapshot path,
    `random`, `scripted`, `human` (you type the moves) or an Agent object."""
    from seedlike.league import games as lib

    agents = [
        lib.make_agent(x, greedy=greedy, search_depth=search_depth) if isinstance(x, str) else x
        for x in (a, b)
    ]
    env = lib.game_of(agents)
    if env is None:
        raise ValueError("at least one agent must be a checkpoint (it names the game)")
    return lib.summarize(lib.play_match(env, *agents, games, seed=seed))


def plot_runs(runs, keys=("episode_return_mean",), x: str = "env_steps", smooth=1, out=None):
    """Learning curves of run directories (python -m seedlike.plot); saved to `out` if given."""
    from seedlike import plot

    fig = plot.plot_runs(plot.load_runs(list(runs)), list(keys), x, smooth)
    if out is not None:
        fig.savefig(out, dpi=120)
    return fig
