"""What an actor costs beyond its envs: CPU per env step of a real actor against a bare envpool
loop stepping the same envs the same way, and the learner's CPU per row it serves.

  python -m benchmarks.actor_overhead [--config=configs/atari_ppo.py] [--envs=64] [--parts=2]
      [--threads=1] [--seconds=20] [--roots=.,/path/to/worktree] [--pairs=3]
  python -m benchmarks.actor_overhead --sections [--envs=64] [--pairs=3]

Two kinds of cell, each a fresh set of processes measured over `--seconds` once warm, at each of
two sizings: `--envs` (64: 32-row messages) and `--learner_envs` (128: 64-row messages, so the
learner serves 64-row batches):

  bare:     a process stepping envpool directly (the envs of the config's task, `--parts`
            parts in flight, `--threads` envpool threads, random actions): recv, send, nothing else.
  actor:    `actor.py` of a checkout (the same envs, sizing and seed), its real codec and gRPC
            stream, against that checkout's `learner.py` serving a linear policy
            (`--config.learn=False`: it serves and records, and learns nothing); also the learner
            process's CPU per row it serves, by thread, and the inference stages' busy time per
            row (`busy/prepare`, `busy/policy`; its metrics).

An actor cell's `overhead` is its process's CPU per env step over the median bare cell's of the
same sizing, minus one: what the actor does that envpool's own stepping does not. Process CPU is
split by thread: `envpool` (threads named envpool; a checkout that does not name them: the
unnamed threads other than the main one), `main` (the actor's Python loop), `grpc` (gRPC's own
threads) and `other`. Env steps are the learner's `env_steps`, interpolated at the window's ends.

`--sections` times the actor's main thread by section instead (this checkout, `--envs`): an
actor of the benchmark's sizing in a process of this file, its loop's calls wrapped, reports per
step message the thread CPU of envpool's `recv` and `send`, the stack test (`split`), writing
the message (`write_step`), the gRPC round trip (`exchange`) and checking the reply's actions
(`decode_actions`), the latter twice in a row on the same reply: the second call is the same work
with warm caches, which shows what the loop's cold caches cost.

`--roots` lists checkouts (another commit's worktree sharing the venv) measured in turn, `--pairs`
times, with a bare cell before each round of a sizing: alternating, so that drift on the machine
falls on every checkout alike. Writes JSON (benchmarks/results/ or --out) and prints a Markdown
table.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from absl import app, flags

from benchmarks import results_io
from seedlike.metrics import read_metrics
from seedlike.runtime import procstats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CONFIG = flags.DEFINE_string("config", "configs/atari_ppo.py", "Config of the task (Atari).")
_ENVS = flags.DEFINE_integer("envs", 64, "Envs of the actor and of the bare loop.")
_PARTS = flags.DEFINE_integer("parts", 2, "Parts in flight (env.batch_envs = envs / parts).")
_THREADS = flags.DEFINE_integer("threads", 1, "envpool threads.")
_LEARNER_ENVS = flags.DEFINE_integer(
    "learner_envs", 128, "A second sizing (64-row batches at the learner; 0: none)."
)
_SECONDS = flags.DEFINE_float("seconds", 20.0, "Measurement window per cell.")
_WARMUP = flags.DEFINE_float("warmup_s", 8.0, "Seconds of steady stepping before a window.")
_ROOTS = flags.DEFINE_list("roots", [ROOT], "Checkouts whose actor.py and learner.py run.")
_PAIRS = flags.DEFINE_integer("pairs", 1, "Rounds over --roots (each with a bare cell first).")
_OUT = flags.DEFINE_string("out", None, "Output JSON path.")
_BARE = flags.DEFINE_bool("bare", False, "(internal) run one bare loop and print its JSON.")
_SECTIONS = flags.DEFINE_bool(
    "sections", False, "Only the actor's main thread by section, at --envs (module docstring)."
)
_SECTIONS_ACTOR = flags.DEFINE_string(
    "sections_actor", None, "(internal) an instrumented actor against this address."
)

POLICY_FLAGS = ["--config.network.torso=mlp", "--config.network.hidden_sizes=()"]
GRPC_THREADS = ("grpc", "event_engine", "lifeguard", "default-executo", "resolver")


def _config():
    from seedlike.config import load_config_file

    return load_config_file(os.path.join(ROOT, _CONFIG.value))


def _sizing(envs: int) -> list[str]:
    return [
        f"--config.env.num_envs={envs}",
        f"--config.env.batch_envs={envs // _PARTS.value}",
        f"--config.env.num_threads={_THREADS.value}",
    ]


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of a process by kind of thread (module docstring); {} once it is gone."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            process_name = f.read().strip()
    except FileNotFoundError:
        return {}
    table = procstats.thread_usage(pid)
    named = any(name == "envpool" for _, name, _ in table)
    out = {"envpool": 0.0, "main": 0.0, "grpc": 0.0, "other": 0.0}
    for tid, name, seconds in table:
        if tid == pid:
            kind = "main"
        elif name.startswith(GRPC_THREADS):
            kind = "grpc"
        elif name == "envpool" or (not named and name == process_name):
            kind = "envpool"
        else:
            kind = "other"
        out[kind] += seconds
    return out


def bare_loop() -> None:
    """The bare cell's process: envpool stepped with random actions, no seedlike in the loop."""
    import envpool

    from seedlike.envs.envpool_env import envpool_kwargs
    from seedlike.runtime.threadnames import name_new_threads, thread_ids

    config = _config()
    config.env.num_envs = _ENVS.value
    config.env.batch_envs = _ENVS.value // _PARTS.value
    config.env.num_threads = _THREADS.value
    before = thread_ids()
    env = envpool.make(config.env.name, env_type="gymnasium", seed=1, **envpool_kwargs(config.env))
    name_new_threads("envpool", before)
    num_actions = env.action_space.n
    rng = np.random.default_rng(0)
    actions = rng.integers(0, num_actions, 1 << 16).astype(np.int32)
    env.async_reset()
    steps, begin, end = 0, time.monotonic() + _WARMUP.value, None
    cpu = {}
    k = 0
    while True:
        obs, reward, terminated, truncated, info = env.recv()
        env_id = info["env_id"]
        n = env_id.shape[0]
        k = (k + n) % (actions.shape[0] - n)
        env.send(actions[k : k + n], env_id)
        now = time.monotonic()
        if end is None and now >= begin:
            cpu, steps, end = thread_cpu(os.getpid()), 0, now + _SECONDS.value
            start = now
        elif end is not None:
            steps += n
            if now >= end:
                break
    after = thread_cpu(os.getpid())
    env.close()
    print(
        json.dumps(
            {
                "cell": "bare",
                "envs": _ENVS.value,
                "env_steps": steps,
                "seconds": now - start,
                "cpu_s": {k: after[k] - cpu[k] for k in after},
            }
        )
    )


SECTIONS = ("recv", "split", "write_step", "exchange", "decode_actions", "send")


def sections_actor() -> None:
    """The --sections actor's process: the loop's calls wrapped to add up this thread's CPU."""
    import threading

    from seedlike import actor as actor_module
    from seedlike.envs import envpool_env
    from seedlike.rpc import client, codec, frames

    spent = dict.fromkeys((*SECTIONS, "decode_again"), 0)
    messages = [0]  # replies received

    def timed(owner, name, section, awaited=False):
        call = getattr(owner, name)

        def add(began):
            spent[section] += time.thread_time_ns() - began
            messages[0] += section == "exchange"

        async def wrapped_async(*args, **kwargs):
            began = time.thread_time_ns()
            try:
                return await call(*args, **kwargs)
            finally:
                add(began)

        def wrapped(*args, **kwargs):
            began = time.thread_time_ns()
            try:
                return call(*args, **kwargs)
            finally:
                add(began)

        setattr(owner, name, wrapped_async if awaited else wrapped)

    timed(envpool_env.EnvpoolAdapter, "recv", "recv")
    timed(envpool_env.EnvpoolAdapter, "send", "send")
    timed(frames.Deltas, "split", "split")
    timed(codec.wire, "write_step", "write_step")
    timed(client.Connection, "exchange", "exchange", awaited=True)
    plain = client.decode_actions
    timed(client, "decode_actions", "decode_actions")
    first = client.decode_actions

    def twice(*args):
        out = first(*args)
        began = time.thread_time_ns()
        plain(*args)  # the same reply again, caches warm
        spent["decode_again"] += time.thread_time_ns() - began
        return out

    client.decode_actions = twice

    config = _config()
    config.env.num_envs = _ENVS.value
    config.env.batch_envs = _ENVS.value // _PARTS.value
    config.env.num_threads = _THREADS.value
    stop = threading.Event()
    result = {}

    def window():
        main, deadline = os.getpid(), time.monotonic() + 180
        while not messages[0] and time.monotonic() < deadline:  # connected, the policy compiled
            stop.wait(0.2)
        stop.wait(_WARMUP.value)
        before, cpu = messages[0], thread_cpu(main)["main"]
        spent.update(dict.fromkeys(spent, 0))
        stop.wait(_SECONDS.value)
        count = max(messages[0] - before, 1)
        result["messages"] = messages[0] - before
        us = {k: v / 1e3 / count for k, v in spent.items()}
        # The loop's own, without the second decode it makes for this measure.
        main_us = 1e6 * (thread_cpu(main)["main"] - cpu) / count - us["decode_again"]
        result["main_us_per_message"], result["us_per_message"] = main_us, us
        stop.set()

    threading.Thread(target=window, daemon=True).start()
    actor_module.Actor(config, _SECTIONS_ACTOR.value, 0, stop=stop).run()
    print(json.dumps({"cell": "sections", "envs": _ENVS.value, **result}))


def _sections_cell(envs: int) -> dict:
    with _serving(ROOT, envs) as (_, address, _):
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.actor_overhead", f"--sections_actor={address}",
             f"--config={_CONFIG.value}", f"--envs={envs}", f"--parts={_PARTS.value}",
             f"--threads={_THREADS.value}", f"--seconds={_SECONDS.value}",
             f"--warmup_s={_WARMUP.value}"],
            capture_output=True, text=True, cwd=ROOT, timeout=_SECONDS.value + _WARMUP.value + 180,
        )  # fmt: skip
    if out.returncode:
        raise RuntimeError(f"sections actor failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def sections_table(cells: list[dict]) -> str:
    lines = [
        "| envs | main thread us/message | " + " | ".join(SECTIONS) + " | decode_actions again |",
        "| ---: | ---: |" + " ---: |" * (len(SECTIONS) + 1),
    ]
    for c in cells:
        us = c["us_per_message"]
        lines.append(
            f"| {c['envs']} | {c['main_us_per_message']:.0f} | "
            + " | ".join(f"{us[k]:.0f}" for k in (*SECTIONS, "decode_again"))
            + " |"
        )
    return "\n".join(lines)


def _bare_cell(envs: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.actor_overhead", "--bare", f"--config={_CONFIG.value}",
         f"--envs={envs}", f"--parts={_PARTS.value}", f"--threads={_THREADS.value}",
         f"--seconds={_SECONDS.value}", f"--warmup_s={_WARMUP.value}"],
        capture_output=True, text=True, cwd=ROOT, timeout=_SECONDS.value + _WARMUP.value + 120,
    )  # fmt: skip
    if out.returncode:
        raise RuntimeError(f"bare loop failed: {out.stderr[-2000:]}")
    return _per_step(json.loads(out.stdout.strip().splitlines()[-1]))


def _per_step(cell: dict) -> dict:
    steps = max(cell["env_steps"], 1)
    cell["us_per_step"] = {k: 1e6 * v / steps for k, v in cell["cpu_s"].items()}
    cell["us_per_step"]["total"] = sum(cell["us_per_step"].values())
    cell["sps"] = cell["env_steps"] / cell["seconds"]
    return cell


def _steps_at(rows: list[dict], t: float) -> float:
    times = np.array([r["time"] for r in rows])
    return float(np.interp(t, times, np.array([r["env_steps"] for r in rows], float)))


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()


@contextlib.contextmanager
def _serving(root: str, envs: int):
    """A learner of checkout `root` serving a linear policy and learning nothing: (its log
    directory, its address, the process)."""
    with tempfile.TemporaryDirectory() as logdir:
        learner_cmd = [
            sys.executable, "learner.py", f"--config={_CONFIG.value}", f"--logdir={logdir}",
            "--port=0", "--config.log.interval_s=1", "--config.total_env_steps=1000000000",
            "--config.log.wandb_mode=disabled", "--config.checkpoint.interval_s=1000000",
            "--config.learn=False", *POLICY_FLAGS, *_sizing(envs),
        ]  # fmt: skip
        with open(os.path.join(logdir, "learner.log"), "w") as learner_log:
            learner = subprocess.Popen(
                learner_cmd, cwd=root, stdout=learner_log, stderr=subprocess.STDOUT
            )
            try:
                address_file = os.path.join(logdir, "server_address")
                deadline = time.time() + 180
                while not (os.path.exists(address_file) and open(address_file).read().strip()):
                    if learner.poll() is not None or time.time() > deadline:
                        raise RuntimeError(
                            f"learner did not start: {open(learner_log.name).read()}"
                        )
                    time.sleep(0.2)
                yield logdir, open(address_file).read().strip(), learner
            finally:
                _stop(learner)


def _pair_cell(root: str, envs: int, cell: str) -> dict:
    """A learner and one actor of checkout `root`; the CPU of both over the window."""
    with _serving(root, envs) as (logdir, address, learner):
        actor = actor_log = None
        deadline = time.time() + 180
        try:
            actor_log = open(os.path.join(logdir, "actor.log"), "w")
            actor = subprocess.Popen(
                [sys.executable, "actor.py", f"--config={_CONFIG.value}",
                 f"--server={address}", *_sizing(envs)],
                cwd=root, stdout=actor_log, stderr=subprocess.STDOUT,
            )  # fmt: skip
            while True:  # compiled and serving
                moving = [r for r in read_metrics(logdir) if r.get("sps")]
                if len(moving) >= 2:
                    break
                if actor.poll() is not None or learner.poll() is not None:
                    raise RuntimeError(f"no steps: {open(actor_log.name).read()[-2000:]}")
                if time.time() > deadline:
                    raise RuntimeError("no steps within 180 s")
                time.sleep(0.5)
            time.sleep(_WARMUP.value)
            start = time.time()
            actor_cpu, learner_cpu = thread_cpu(actor.pid), _learner_threads(learner.pid)
            time.sleep(_SECONDS.value)
            end = time.time()
            actor_end, learner_end = thread_cpu(actor.pid), _learner_threads(learner.pid)
            time.sleep(2.5)  # the metrics row after the window
            rows = [r for r in read_metrics(logdir) if r.get("env_steps") is not None]
        finally:
            if actor is not None:
                _stop(actor)
            if actor_log is not None:
                actor_log.close()
    steps = _steps_at(rows, end) - _steps_at(rows, start)
    window = [r for r in rows if start <= r["time"] <= end + 1.0]
    busy = {
        stage: 1e6 * float(np.mean([r.get(f"busy/{stage}") or 0.0 for r in window]))
        * (end - start) / max(steps, 1.0)
        for stage in ("prepare", "policy", "reply", "record", "decode")
    }  # fmt: skip
    learner_us = {k: 1e6 * (learner_end[k] - learner_cpu.get(k, 0.0)) / max(steps, 1.0)
                  for k in learner_end}  # fmt: skip
    batch = [r["inference_batch_mean"] for r in window if r.get("inference_batch_mean")]
    out = _per_step(
        {
            "cell": cell,
            "root": root,
            "envs": envs,
            "env_steps": steps,
            "seconds": end - start,
            "cpu_s": {k: actor_end[k] - actor_cpu[k] for k in actor_end},
        }
    )
    out["learner_us_per_row"] = learner_us
    out["learner_busy_us_per_row"] = busy
    out["batch_mean"] = float(np.mean(batch)) if batch else None
    return out


def _learner_threads(pid: int) -> dict[str, float]:
    """CPU seconds of the learner process by thread name (seedlike's own are named sl-*), and of
    its child processes (stream front ends) together."""
    out: dict[str, float] = {}
    for _, name, seconds in procstats.thread_usage(pid):
        key = name if name.startswith("sl-") else "native"
        out[key] = out.get(key, 0.0) + seconds
    out["front_ends"] = sum(procstats.cpu_s(child) for child in procstats.children(pid))
    out["total"] = sum(out.values())
    return out


def _commit(root: str) -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True)
    return out.stdout.decode().strip()


def table(result: dict) -> str:
    lines = [
        "Bare envpool loop, us of CPU per env step (median): "
        + ", ".join(f"{envs} envs {us:.1f}" for envs, us in result["bare_us_per_step"].items()),
        "",
        "| commit | envs | actor us/step (envpool / main / grpc / other) | overhead (each pair) | "
        "env steps/s | learner us/row | prepare / policy us/row | batch |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for summary in result["by_root"].values():
        for envs, s in summary["sizings"].items():
            parts = " / ".join(f"{s['actor_us'][k]:.1f}" for k in ("envpool", "main", "grpc",
                                                                   "other"))  # fmt: skip
            each = ", ".join(f"{100 * o:.1f}" for o in s["overheads"])
            lines.append(
                f"| {summary['commit']} | {envs} | {s['actor_us']['total']:.1f} ({parts}) | "
                f"{100 * s['overhead']:.1f}% ({each}) | {s['sps']:,.0f} | "
                f"{s['learner_us_per_row']:.1f} | {s['prepare_us_per_row']:.1f} / "
                f"{s['policy_us_per_row']:.1f} | {s['batch_mean']:.0f} |"
            )
    return "\n".join(lines)


def summarize(cells: list[dict], roots: list[str]) -> tuple[dict, dict]:
    """(bare us per env step by envs, per root and sizing: medians over the pairs)."""
    bare = {}
    for envs in sorted({c["envs"] for c in cells if c["cell"] == "bare"}):
        mine = [
            c["us_per_step"]["total"] for c in cells if c["cell"] == "bare" and c["envs"] == envs
        ]
        bare[envs] = float(np.median(mine))
    by_root = {}
    for root in roots:
        sizings = {}
        for envs in sorted({c["envs"] for c in cells if c.get("root") == root}):
            mine = [c for c in cells if c.get("root") == root and c["envs"] == envs]
            overheads = [c["us_per_step"]["total"] / bare[envs] - 1.0 for c in mine]

            def median(values):
                return float(np.median(list(values)))

            sizings[envs] = {
                "overheads": overheads,
                "overhead": median(overheads),
                "actor_us": {
                    k: median(c["us_per_step"][k] for c in mine) for k in mine[0]["us_per_step"]
                },  # fmt: skip
                "sps": median(c["sps"] for c in mine),
                "learner_us_per_row": median(c["learner_us_per_row"]["total"] for c in mine),
                "prepare_us_per_row": median(c["learner_busy_us_per_row"]["prepare"] for c in mine),
                "policy_us_per_row": median(c["learner_busy_us_per_row"]["policy"] for c in mine),
                "batch_mean": median(c["batch_mean"] or 0.0 for c in mine),
            }
        by_root[root] = {"commit": _commit(root), "sizings": sizings}
    return bare, by_root


def main(argv):
    del argv
    if _BARE.value:
        return bare_loop()
    if _SECTIONS_ACTOR.value:
        return sections_actor()
    if _SECTIONS.value:
        cells = []
        for _ in range(_PAIRS.value):
            cells.append(_sections_cell(_ENVS.value))
            print(json.dumps(cells[-1]))
        result = {"benchmark": "actor_sections", "config": _CONFIG.value, "parts": _PARTS.value,
                  "threads": _THREADS.value, "seconds": _SECONDS.value, "cores": os.cpu_count(),
                  "commit": _commit(ROOT), "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                  "cells": cells}  # fmt: skip
        results_io.write("actor_sections", result, _OUT.value, echo={"cells": len(cells)})
        print(sections_table(cells))
        return None
    roots = [os.path.abspath(r) for r in _ROOTS.value]
    sizes = [_ENVS.value] + ([_LEARNER_ENVS.value] if _LEARNER_ENVS.value else [])
    cells = []
    for _ in range(_PAIRS.value):
        for envs in sizes:
            cells.append(_bare_cell(envs))
            print(json.dumps(cells[-1]))
            for root in roots:
                cells.append(_pair_cell(root, envs, "actor"))
                print(json.dumps(cells[-1]))
    bare, by_root = summarize(cells, roots)
    result = {
        "benchmark": "actor_overhead",
        "config": _CONFIG.value,
        "parts": _PARTS.value,
        "threads": _THREADS.value,
        "seconds": _SECONDS.value,
        "cores": os.cpu_count(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "bare_us_per_step": bare,
        "by_root": by_root,
        "cells": cells,
    }
    results_io.write("actor_overhead", result, _OUT.value, echo={"cells": len(cells)})
    print(table(result))


if __name__ == "__main__":
    app.run(main)
