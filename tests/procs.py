"""Real processes for integration tests: learner and actors on 127.0.0.1, always cleaned up."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "configs", "cartpole_ppo.py")


# nmmo lives in its own virtualenv (scripts/nmmo_venv.sh), not in the suite's.
HAS_NMMO = importlib.util.find_spec("nmmo") is not None


def has_qt5() -> bool:
    """Whether envpool's Procgen tasks can load (scripts/setup_venv.sh installs Qt 5 as root)."""
    found = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    return "libQt5Gui.so.5" in found


# Procgen tests need the system Qt 5 runtime; where it could not be installed they say so.
NEEDS_QT = "no libQt5Gui.so.5: apt-get install -y --no-install-recommends libqt5gui5"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Processes:
    """Starts learner/actor processes and guarantees they are gone afterwards."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen] = []

    def spawn(self, args, log_name, env=None, python=None, prefix=()) -> subprocess.Popen:
        """Starts `python *args` (this interpreter unless `python`) in the repository root,
        logging to tmp_path/log_name; `prefix` runs it elsewhere (seedlike/testing/netns.py:
        another host)."""
        log = open(os.path.join(self.tmp_path, log_name), "ab")
        proc = subprocess.Popen(
            [*prefix, python or sys.executable, *args],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        proc.log_path = log.name
        self.procs.append(proc)
        return proc

    def learner(
        self, logdir, *flags, port=0, config=CONFIG, name="learner.log", prefix=()
    ) -> tuple[subprocess.Popen, str]:
        address_file = os.path.join(logdir, "server_address")
        if os.path.exists(address_file):
            os.remove(address_file)
        proc = self.spawn(
            ["learner.py", f"--config={config}", f"--logdir={logdir}", f"--port={port}", *flags],
            name,
            prefix=prefix,
        )
        wait_for(
            lambda: os.path.exists(address_file) and open(address_file).read().strip(),
            120,
            proc,
            "learner start",
        )
        return proc, open(address_file).read().strip()

    def actor(self, address, actor_id, *flags, config=CONFIG, prefix=()) -> subprocess.Popen:
        return self.spawn(
            [
                "actor.py",
                f"--server={address}",
                f"--actor_id={actor_id}",
                f"--config={config}",
                *flags,
            ],
            f"actor_{actor_id}_{len(self.procs)}.log",
            prefix=prefix,
        )

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        for proc in self.procs:
            proc.wait(timeout=30)


def pids_matching(pattern: str) -> list[int]:
    """Processes whose command line contains `pattern` (after `--`: patterns that start with
    "--" would otherwise be read as pgrep options, and pgrep would fail and match nothing)."""
    found = subprocess.run(["pgrep", "-f", "--", pattern], capture_output=True, text=True)
    if found.returncode not in (0, 1):
        raise RuntimeError(f"pgrep failed: {found.stderr.strip()}")
    return [int(pid) for pid in found.stdout.split()]


def group_members(pgid: int) -> list[str]:
    """The command lines of the living processes in process group `pgid` (zombies excluded)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                # The command name (field 2) may hold spaces: fields after its ")" are plain.
                state, _, pgrp = f.read().rsplit(")", 1)[1].split()[:3]
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(pgrp) == pgid and state != "Z":
            found.append(cmdline)
    return found


def log_text(proc) -> str:
    with open(proc.log_path, errors="replace") as f:
        return f.read()


def wait_until(predicate, timeout) -> bool:
    """Whether `predicate` came true within `timeout` seconds (polled every 0.2 s; no error when
    it did not: a cleanup's wait)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return bool(predicate())


def repeat_for(seconds: float, action) -> int:
    """Calls `action()` again and again for at least `seconds`; returns how many times."""
    start, count = time.monotonic(), 0
    while time.monotonic() - start < seconds:
        action()
        count += 1
    return count


def wait_for(predicate, timeout, proc=None, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(
                f"{what}: process exited with {proc.returncode}:\n{log_text(proc)[-4000:]}"
            )
        time.sleep(0.2)
    detail = f"\n{log_text(proc)[-4000:]}" if proc is not None else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}{detail}")


def metrics(logdir) -> list[dict]:
    path = os.path.join(logdir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    rows = []
    with open(path) as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a line being written right now
    return rows


def last(logdir, key, default=None):
    rows = metrics(logdir)
    return rows[-1].get(key, default) if rows else default


def train(logdir, config, *flags, timeout=600, env=None) -> list[dict]:
    """Runs scripts/train.sh to completion and returns its metrics rows."""
    result = subprocess.run(
        ["scripts/train.sh", f"--logdir={logdir}", f"--config={config}", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert result.returncode == 0, failure_text(result.stderr)
    return metrics(logdir)


def failure_text(stderr: str, tail: int = 4000) -> str:
    """What a failed run printed last. A crash's cause, header and the stack of the thread that
    crashed come first: the other threads' stacks after them would push all three out of the
    tail."""
    start = stderr.find("Fatal Python error")
    if start < 0:
        return stderr[-tail:]
    head = stderr[start:]
    current = head.find("Current thread")
    end = head.find("\n\n", current)  # the crashing thread's stack can be the last block
    crashed = head[current : end if end >= 0 else None] if current >= 0 else ""
    # A native abort says why just above the header (a failed check, an assertion).
    before = stderr[max(0, start - 1500) : start]
    return f"{before}{head[:300]}\n{crashed[:3000]}\n...\n{stderr[-tail:]}"


def random_play_return(env, episodes: int, seed: int = 0) -> float:
    """The mean return of a gymnasium.Env under uniformly random actions: the baseline a learning
    test measures itself against."""
    env.action_space.seed(seed)
    env.reset(seed=seed)
    total = 0.0
    for _ in range(episodes):
        env.reset()
        done = False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total, done = total + reward, terminated or truncated
    return total / episodes


def returns(rows) -> list[float]:
    return [r["episode_return_mean"] for r in rows if r["episode_return_mean"] is not None]
