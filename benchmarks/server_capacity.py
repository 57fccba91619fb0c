"""Server capacity: how many env steps per second one learner process serves to many actors.

  python -m benchmarks.server_capacity [--actors=1,4,16,32] [--rows=8] [--policies=trivial,nature]
                                      [--learn]

Synthetic actors (separate processes, no envs, no JAX) replay one fixed, valid Atari-sized
StepBatch (Breakout-v5's spec: 4x84x84 uint8 frames per row, `--rows` rows per message; every
`--episode` messages the rows end their episode) against a real learner process (`learner.py
--config=configs/atari_ppo.py`: gRPC, batching, inference, trajectory store and learner batches
exactly as in training; PPO updates too with --learn). Each cell of the table starts a fresh
learner, waits until it has compiled and served `--warmup_rows` metrics rows (and, with --learn,
made two updates), then measures for `--seconds`:

  served_sps:        rows answered per second, counted by the actors;
  batch_mean:        inference_batch_mean of the learner's metrics rows in the window, against
                     rows_in_flight = actors x rows (the most a batch can hold);
  window_ms:         inference_window_ms: how long a batch waited for more after its latest
                     request (the batch timeout, or longer where front ends are slow);
  latency p50/p99:   the learner's inference_latency_ms (arrival of a request to its actions), and
                     the actors' own round trip;
  learner_cpu:       CPU seconds per second the learner process used (2 cores = 2.0);
  busy:              where the server's time goes: the share of wall time each stage's thread was
                     busy (the learner's `busy/*` metrics, where the server reports them).

Policies: `trivial` is a linear policy over the frames (serving cost without a network); `nature`
is the config's Nature CNN. Writes JSON to --out (default benchmarks/results/) and prints a
Markdown table.
"""

from __future__ import annotations

import json
import multiprocessing as mp
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

_ACTORS = flags.DEFINE_list("actors", ["1", "4", "16", "32"], "Numbers of synthetic actors.")
_ROWS = flags.DEFINE_integer("rows", 8, "Rows (envs) per actor message.")
_SHAPES = flags.DEFINE_list(
    "shapes",
    [],
    "Cells as ACTORSxROWS (e.g. 16x8,4x64,2x256) instead of --actors at --rows.",
)
_FRONT_ENDS = flags.DEFINE_list(
    "front_ends",
    [],
    "server.front_ends values to measure, one cell each (empty: the config's default; a "
    "checkout without the setting, as --learner_root may be, takes none).",
)
_POLICIES = flags.DEFINE_list("policies", ["trivial", "nature"], "trivial | nature.")
_SECONDS = flags.DEFINE_float("seconds", 20.0, "Measurement window per cell.")
_LEARN = flags.DEFINE_bool(
    "learn",
    False,
    "Learn as in training. Off (the default), the learner process serves, records and builds "
    "learner batches but drops them (config.learn=False): what the serving path sustains "
    "without the learner's compute, which on a CPU host would otherwise be the bottleneck.",
)
_WARMUP_ROWS = flags.DEFINE_integer("warmup_rows", 3, "Metrics rows with traffic before measuring.")
_WARMUP_TIMEOUT = flags.DEFINE_float("warmup_timeout", 300.0, "Give up warming up after this.")
_EPISODE = flags.DEFINE_integer("episode", 200, "Messages per episode of the synthetic actors.")
_STACK_ONCE = flags.DEFINE_bool(
    "stack_once",
    False,
    "The actors send each stacked frame once (actor.stack_once, seedlike/rpc/frames.py): a "
    "stream's first step and the step after each episode end carry whole stacks, the others "
    "only the newest frame of each row (a learner_root without it refuses the Hello).",
)
_CONFIG = flags.DEFINE_string("config", "configs/atari_ppo.py", "Learner config (Atari).")
_LEARNER_FLAGS = flags.DEFINE_list("learner_flags", [], "Extra learner.py flags for every cell.")
_OUT = flags.DEFINE_string("out", None, "Output JSON path.")
_PROFILE = flags.DEFINE_string(
    "profile", "", "Also sample the learner process with py-spy (pip install py-spy) into DIR."
)
_LEARNER_ROOT = flags.DEFINE_string(
    "learner_root",
    ROOT,
    "Checkout whose learner.py serves (another worktree, to compare commits back to back with "
    "the same benchmark and venv).",
)

POLICY_FLAGS = {
    "trivial": ["--config.network.torso=mlp", "--config.network.hidden_sizes=()"],
    "nature": [],
}


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _messages(rows: int, seed: int, stack_once: bool):
    """(hello bytes, body of a normal StepBatch, body of a terminal one, body of a whole one)
    without the sequence. With `stack_once` normal and terminal steps carry only the newest
    frame of every row (all rows continued), and a whole step follows each terminal one;
    without it, all three carry whole stacks.

    The StepBatches are serialized once; each request only prepends its sequence number (field
    1), so the actors spend their time waiting for the server, not encoding.
    """
    from seedlike.rpc import seedlike_pb2 as pb

    def tensor(array):
        return pb.Tensor(dtype=array.dtype.name, shape=array.shape, data=array.tobytes())

    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 256, (rows, 4, 84, 84), dtype=np.uint8)
    hello = pb.Hello(
        protocol_version=1,
        actor_id=seed,
        env_name="Breakout-v5",
        observation=[pb.TensorSpec(name="obs", dtype="uint8", shape=[4, 84, 84])],
        num_actions=4,
        num_envs=rows,
        num_players=1,
        stacked_observation=["obs"] if stack_once else [],
    )
    bodies = []
    for done, whole in ((False, not stack_once), (True, not stack_once), (False, True)):
        flag = np.full(rows, done)
        step = pb.StepBatch(
            reward=tensor(rng.random(rows).astype(np.float32)),
            terminated=tensor(flag),
            truncated=tensor(np.zeros(rows, bool)),
            env_id=tensor(np.arange(rows, dtype=np.int32)),
            player_id=tensor(np.zeros(rows, np.int32)),
            acting=tensor(~flag),
        )
        step.observation["obs"].CopyFrom(tensor(frames if whole else frames[:0]))
        if stack_once:
            step.newest["obs"].CopyFrom(tensor(frames[: 0 if whole else rows, 0]))
        if stack_once:
            step.continued.CopyFrom(tensor(np.full(rows, not whole)))
        bodies.append(step.SerializeToString())
    return pb.ActorMessage(hello=hello).SerializeToString(), *bodies


def _request(sequence: int, body: bytes) -> bytes:
    step = b"\x08" + _varint(sequence) + body if sequence else body
    return b"\x12" + _varint(len(step)) + step  # ActorMessage.step (field 2)


def _start_profile(pid: int, name: str):
    """py-spy sampling the learner process (all threads, idle ones left out) for the window, to
    --profile/<name>.txt (collapsed stacks: `thread;frame;... count`); None without --profile."""
    if not _PROFILE.value:
        return None
    os.makedirs(_PROFILE.value, exist_ok=True)
    return subprocess.Popen(
        ["py-spy", "record", "--pid", str(pid), "--duration", str(int(_SECONDS.value)),
         "--rate", "200", "--threads", "--format", "raw", "--nonblocking",
         "--output", os.path.join(_PROFILE.value, name + ".txt")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _process_cpu(learner_pid: int, python: set[int] | None) -> dict:
    """CPU seconds so far of the learner process (all threads, Python threads) and of its child
    processes (stream front ends)."""
    threads: dict = {}
    total, interpreter = procstats.interpreter_cpu_s(learner_pid, python, threads)
    front_ends = sum(procstats.cpu_s(child) for child in procstats.children(learner_pid))
    out = {"central": total, "central_interpreter": interpreter, "front_ends": front_ends}
    out.update({f"thread/{k}": v for k, v in threads.items()})
    return out


def _median(rows, key):
    values = [r[key] for r in rows if r.get(key) is not None]
    return float(np.median(values)) if values else None


def measure(policy: str, num_actors: int, rows: int, front_ends: str | None) -> dict:
    """One cell: a learner serving `policy` to `num_actors` synthetic actors of `rows` rows
    each, measured over --seconds once it has warmed up."""
    with tempfile.TemporaryDirectory() as logdir:
        learner, log = _start_learner(logdir, policy, rows, front_ends)
        ctx = mp.get_context("spawn")
        results = ctx.Queue()
        actors = []
        try:
            address = _address(logdir, learner, log)
            far = time.time() + 1e6  # the window is set once the learner has warmed up
            start_at, stop_at = ctx.Value("d", far), ctx.Value("d", far)
            actors = [
                ctx.Process(
                    target=_actor,
                    args=(
                        address,
                        i,
                        rows,
                        _EPISODE.value,
                        _STACK_ONCE.value,
                        start_at,
                        stop_at,
                        results,
                    ),
                )  # fmt: skip
                for i in range(num_actors)
            ]
            for p in actors:
                p.start()
            _warm_up(logdir, learner, log, actors, results)
            begin = time.time() + 1.0
            start_at.value, stop_at.value = begin, begin + _SECONDS.value
            while time.time() < begin:
                time.sleep(0.01)
            cpu, python = _learner_cpu(learner, f"{policy}-{front_ends}-{num_actors}x{rows}")
            outcomes = [results.get(timeout=120) for _ in actors]
        finally:
            _stop(actors, learner)
            log.close()
        errors = [o["error"] for o in outcomes if "error" in o]
        if errors:
            raise RuntimeError(f"actors failed: {errors[:3]}")
        window = [
            r
            for r in read_metrics(logdir)
            if begin + 1.0 <= r["time"] <= begin + _SECONDS.value + 1.0
        ]
    cell = {"policy": policy, "front_ends": front_ends, "actors": num_actors}
    return {**cell, **_summary(window, outcomes, cpu, python, num_actors * rows)}


def _start_learner(logdir: str, policy: str, rows: int, front_ends: str | None):
    """The learner process (a checkout's learner.py) and its log file."""
    cmd = [
        sys.executable, "learner.py", f"--config={_CONFIG.value}", f"--logdir={logdir}",
        "--port=0", f"--config.env.num_envs={rows}", "--config.log.interval_s=2",
        "--config.total_env_steps=1000000000", "--config.optimizer.anneal_lr=False",
        "--config.log.wandb_mode=disabled",
        "--config.checkpoint.interval_s=1000000", f"--config.learn={_LEARN.value}",
        *POLICY_FLAGS[policy], *_LEARNER_FLAGS.value,
    ]  # fmt: skip
    if front_ends is not None:
        cmd.append(f"--config.server.front_ends={front_ends}")
    log = open(os.path.join(logdir, "learner.log"), "w")
    learner = subprocess.Popen(cmd, cwd=_LEARNER_ROOT.value, stdout=log, stderr=subprocess.STDOUT)
    return learner, log


def _address(logdir: str, learner, log) -> str:
    """The learner's address, once it writes it (within 120 s)."""
    address_file = os.path.join(logdir, "server_address")
    deadline = time.time() + 120
    while not (os.path.exists(address_file) and open(address_file).read().strip()):
        if learner.poll() is not None or time.time() > deadline:
            raise RuntimeError(f"learner did not start: {open(log.name).read()[-3000:]}")
        time.sleep(0.2)
    return open(address_file).read().strip()


def _warm_up(logdir: str, learner, log, actors, results) -> None:
    """Waits until the learner has compiled, serves, and (when learning) updates."""
    deadline = time.time() + _WARMUP_TIMEOUT.value
    while True:
        busy = [r for r in read_metrics(logdir) if r["sps"]]
        learned = not _LEARN.value or (busy and busy[-1]["policy_version"] >= 2)
        if len(busy) >= _WARMUP_ROWS.value and learned:
            return
        if not any(p.is_alive() for p in actors):  # each says why (results)
            raise RuntimeError(f"every actor ended: {results.get(timeout=5)}")
        if learner.poll() is not None or time.time() > deadline:
            raise RuntimeError(f"no warm-up: {open(log.name).read()[-3000:]}")
        time.sleep(0.5)


def _learner_cpu(learner, label: str) -> tuple[dict, list]:
    """The learner process's cores by part over --seconds (profiled with --profile), and its
    Python threads."""
    python = procstats.python_threads(learner.pid)
    cpu_start = _process_cpu(learner.pid, python)
    profiler = _start_profile(learner.pid, label)
    time.sleep(_SECONDS.value)
    cpu_end = _process_cpu(learner.pid, python)
    if profiler is not None:
        profiler.wait(timeout=60)
    return {k: (cpu_end[k] - cpu_start.get(k, 0.0)) / _SECONDS.value for k in cpu_end}, python


def _stop(actors, learner) -> None:
    for p in actors:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
    learner.terminate()
    try:
        learner.wait(timeout=60)
    except subprocess.TimeoutExpired:
        learner.kill()


def _summary(window: list[dict], outcomes: list[dict], cpu: dict, python, in_flight: int):
    """A cell's figures from the learner's metrics rows in the window and the actors' counts."""
    rtts = np.concatenate([o["rtt_ms"] for o in outcomes])
    served = sum(o["served"] for o in outcomes) / _SECONDS.value
    per_step = {f"{k}_us_per_step": v / max(served, 1e-9) * 1e6 for k, v in cpu.items()}
    families = {}
    for family in ("busy", "latency_ms"):
        keys = sorted({k for r in window for k in r if k.startswith(family + "/")})
        families[family] = {k[len(family) + 1 :]: _median(window, k) for k in keys}
    return {
        "rows_in_flight": in_flight,
        "served_sps": served,
        "batch_mean": _median(window, "inference_batch_mean"),
        "window_ms": _median(window, "inference_window_ms"),
        "rows_in_place": _median(window, "inference_rows_in_place"),
        "server_latency_ms_p50": _median(window, "inference_latency_ms_p50"),
        "server_latency_ms_p99": _median(window, "inference_latency_ms_p99"),
        "actor_rtt_ms_p50": float(np.percentile(rtts, 50)),
        "actor_rtt_ms_p99": float(np.percentile(rtts, 99)),
        "learner_sps": _median(window, "sps"),
        "staleness_mean": _median(window, "staleness_mean"),
        "python_threads_from": "py-spy" if python else "thread names",
        "learner_cpu": cpu["central"] + cpu["front_ends"],
        "cpu_cores": cpu,
        **per_step,
        "actors_cpu": sum(o["cpu_s"] for o in outcomes) / _SECONDS.value,
        "metrics_rows": len(window),
        **families,
    }


def _actor(address, actor_id, rows, episode, stack_once, start_at, stop_at, results):
    """Plays until stop_at (a shared value, set once the learner has warmed up); counts the replies
    that arrive after start_at. A grpc.aio stream on one event loop: one write and one read per
    step, and nothing else, so that the actors cost the shared CPU as little as possible."""
    import asyncio

    import grpc

    hello, normal, terminal, whole = _messages(rows, actor_id, stack_once)
    options = [
        ("grpc.max_receive_message_length", 256 << 20),
        ("grpc.max_send_message_length", 256 << 20),
    ]

    async def play():
        async with grpc.aio.insecure_channel(address, options=options) as channel:
            call = channel.stream_stream("/seedlike.Inference/Stream")()
            served, rtts, sequence, cpu = 0, [], 0, None
            await call.write(hello)
            await call.read()  # Welcome
            while time.time() < stop_at.value:
                body = terminal if sequence % episode == episode - 1 else normal
                if sequence % episode == 0:  # a stream's first step, or after an episode's end
                    body = whole
                sent = time.perf_counter()
                await call.write(_request(sequence, body))
                await call.read()
                if time.time() >= start_at.value:
                    if cpu is None:
                        cpu = time.process_time()
                    served += rows
                    rtts.append((time.perf_counter() - sent) * 1000.0)
                sequence += 1
            call.cancel()
        return {"served": served, "rtt_ms": rtts, "cpu_s": time.process_time() - cpu}

    try:
        results.put({"actor": actor_id, **asyncio.run(play())})
    except grpc.RpcError as e:
        results.put({"actor": actor_id, "error": f"{e.code()}: {e.details()}"})


def table(cells: list[dict]) -> str:
    lines = [
        "| policy | front ends | actors x rows | served steps/s | batch mean / in flight | "
        "server latency p50 / p99 ms | actor round trip p50 / p99 ms | "
        "CPU central (interpreter) / front ends / actors | central interpreter us per step |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in cells:
        batch = f"{c['batch_mean']:.1f}" if c["batch_mean"] is not None else "-"
        lat = "-"
        if c["server_latency_ms_p50"] is not None:
            lat = f"{c['server_latency_ms_p50']:.1f} / {c['server_latency_ms_p99']:.1f}"
        lines.append(
            f"| {c['policy']} | {c['front_ends'] if c['front_ends'] is not None else '-'} | "
            f"{c['actors']} x {c['rows_in_flight'] // c['actors']} | "
            f"{c['served_sps']:,.0f} | {batch} / {c['rows_in_flight']} | {lat} | "
            f"{c['actor_rtt_ms_p50']:.1f} / {c['actor_rtt_ms_p99']:.1f} | "
            f"{c['cpu_cores']['central']:.2f} ({c['cpu_cores']['central_interpreter']:.2f}) / "
            f"{c['cpu_cores']['front_ends']:.2f} / {c['actors_cpu']:.2f} | "
            f"{c['central_interpreter_us_per_step']:.1f} |"
        )
    stage_names = sorted({k for c in cells for k in c["busy"]})
    if stage_names:
        lines += ["", "Share of wall time each stage's thread was busy:", ""]
        lines.append("| policy | front ends | actors x rows | " + " | ".join(stage_names) + " |")
        lines.append("| --- | --- | --- |" + " ---: |" * len(stage_names))
        for c in cells:
            values = [c["busy"].get(s) for s in stage_names]
            shown = ["-" if v is None else f"{v:.2f}" for v in values]
            fe = c["front_ends"] if c["front_ends"] is not None else "-"
            shape = f"{c['actors']} x {c['rows_in_flight'] // c['actors']}"
            lines.append(f"| {c['policy']} | {fe} | {shape} | " + " | ".join(shown) + " |")
    return "\n".join(lines)


def main(argv):
    del argv
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True)
    cells = []
    for policy in _POLICIES.value:
        if policy not in POLICY_FLAGS:
            raise app.UsageError(f"--policies: {policy!r} is not one of {sorted(POLICY_FLAGS)}")
        shapes = [s.split("x") for s in _SHAPES.value] or [(n, _ROWS.value) for n in _ACTORS.value]
        for actors, rows in shapes:
            for front_ends in _FRONT_ENDS.value or [None]:
                cell = measure(policy, int(actors), int(rows), front_ends)
                print(json.dumps(cell))
                cells.append(cell)
    result = {
        "benchmark": "server_capacity",
        "commit": commit.stdout.decode().strip(),
        "learn": _LEARN.value,
        "config": _CONFIG.value,
        "learner_root": _LEARNER_ROOT.value,
        "seconds": _SECONDS.value,
        "stack_once": _STACK_ONCE.value,
        "cores": os.cpu_count(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "cells": cells,
    }
    results_io.write("server_capacity", result, _OUT.value, echo={"cells": len(cells)})
    print(table(cells))


if __name__ == "__main__":
    app.run(main)
