"""Throughput of the acting path, measured in one run so the numbers compare.

  python -m benchmarks.throughput [--config=configs/cartpole_ppo.py] [--num_actors=2]

Three measurements on the same env settings (the config's env section, --num_actors processes):
  raw_env_sps:     envpool stepping with random actions, no server: the ceiling.
  grpc_server_sps: env steps/s the inference server sustains over gRPC on loopback, with clients
                   that replay one pre-encoded batch (no env cost) and a trivial (linear) policy.
  actor_sps_sync / actor_sps_async: env steps/s of real actor processes against that server, with
                   all of an actor's envs in one request (env.batch_envs 0) or half of them per
                   request (envpool's asynchronous mode: one half steps while the other half's
                   request is answered).
  train_sps:       end-to-end training SPS of learner.py + actor.py processes (scripts/train.sh).
Writes JSON to --out (default benchmarks/results/throughput-<time>.json) and prints it.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import platform
import subprocess
import tempfile
import threading
import time

import numpy as np
from absl import app, flags

from benchmarks import results_io

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CONFIG = flags.DEFINE_string("config", os.path.join(ROOT, "configs", "cartpole_ppo.py"), "Config.")
_NUM_ACTORS = flags.DEFINE_integer("num_actors", 2, "Actor processes (as scripts/train.sh).")
_SECONDS = flags.DEFINE_float("seconds", 15.0, "Duration of the raw and gRPC measurements.")
_TRAIN_STEPS = flags.DEFINE_integer(
    "train_steps", 300_000, "Env steps of the training run (0: no training run)."
)
_OUT = flags.DEFINE_string("out", None, "Output JSON path.")


def _raw_worker(config_path, seed, seconds, results):
    from seedlike.config import load_config_file
    from seedlike.envs.envpool_env import EnvpoolAdapter, make_env_spec

    config = load_config_file(config_path)
    spec = make_env_spec(config.env)
    env = EnvpoolAdapter(config.env, spec, seed)
    rng = np.random.default_rng(seed)
    env.reset()
    steps, deadline = 0, None
    while True:
        rows = env.recv()
        if deadline is None:  # start the clock after the first (warm-up) batch
            deadline, start = time.monotonic() + seconds, time.monotonic()
        elif time.monotonic() >= deadline:
            break
        actions = rng.integers(0, spec.num_actions, rows.reward.shape[0]).astype(np.int32)
        env.send(actions, rows)
        steps += rows.reward.shape[0]
    results.put(steps / (time.monotonic() - start))


def _parallel(target, args_list):
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, results)) for args in args_list]
    for p in procs:
        p.start()
    values = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    return values


def raw_env_sps(config_path, num_actors, seconds) -> dict:
    per_actor = _parallel(_raw_worker, [(config_path, i, seconds) for i in range(num_actors)])
    return {"raw_env_sps": float(sum(per_actor)), "raw_env_sps_per_actor": per_actor}


def _grpc_client(address, config_path, actor_id, seconds, results):
    from seedlike.config import load_config_file
    from seedlike.envs.envpool_env import make_env_spec
    from seedlike.rpc import client, codec
    from seedlike.types import Rows

    config = load_config_file(config_path)
    spec = make_env_spec(config.env)
    n = int(config.env.num_envs)
    obs = {k: np.zeros((n, *s.shape), s.dtype) for k, s in spec.observation.items()}
    extras = {k: np.ones((n, *s.shape), s.dtype) for k, s in spec.extras.items()}
    zeros = np.zeros(n, np.bool_)
    rows = Rows(
        obs, extras, np.zeros(n, np.float32), zeros, zeros, np.arange(n, dtype=np.int32),
        np.zeros(n, np.int32), ~zeros, zeros,
    )  # fmt: skip
    connection = client.Connection(address, codec.make_hello(spec, actor_id, n))
    steps, sequence, start = 0, 0, time.monotonic()
    while time.monotonic() - start < seconds:
        message = codec.encode_step(sequence, rows)
        connection.step(message)
        sequence += 1
        steps += n
    results.put(steps / (time.monotonic() - start))
    connection.close()


@contextlib.contextmanager
def trivial_server(config_path):
    """The inference service in this process, serving a trivial (linear) policy, with full
    learner batches taken and dropped: what serving costs, without a network or learning.
    Yields (service, store, address)."""
    import jax
    import ml_collections

    from networks import make_network
    from seedlike.config import load_config_file
    from seedlike.envs.envpool_env import make_env_spec
    from seedlike.policy import PolicyRegistry
    from seedlike.rpc.listen import start_inference
    from seedlike.server.inference import InferenceService
    from seedlike.server.trajectory_store import BatchQueue, TrajectoryStore
    from seedlike.server.unrolls import UnrollPool

    config = load_config_file(config_path)
    spec = make_env_spec(config.env)
    trivial = ml_collections.ConfigDict(config.network.to_dict())
    trivial.hidden_sizes = ()  # linear policy: measures serving, not the network
    network = make_network(trivial, spec)
    params = network.init(jax.random.key(0))
    registry = PolicyRegistry()
    registry.publish(0, {"params": params, "obs_norm": network.init_obs_norm()})
    batches = BatchQueue()
    store = TrajectoryStore(
        UnrollPool(spec, config.unroll_length), config.batch_unrolls, batches,
        network.initial_carry(1),
    )  # fmt: skip
    drained = threading.Event()

    def drain():
        while not drained.is_set():
            batch = batches.next_batch(timeout=0.1)
            if batch is not None:
                batch.release()

    threading.Thread(target=drain, daemon=True).start()
    with tempfile.TemporaryDirectory() as logdir:
        service = InferenceService.from_config(
            config, spec=spec, network=network, registry=registry, store=store
        )
        server, address = start_inference(service, config, logdir, "127.0.0.1", 0)
        try:
            yield service, store, address
        finally:
            drained.set()
            service.stop(finished=True)
            server.stop()


def grpc_server_sps(config_path, num_actors, seconds) -> dict:
    with trivial_server(config_path) as (service, _, address):
        per_actor = _parallel(
            _grpc_client, [(address, config_path, i, seconds) for i in range(num_actors)]
        )
        stats = service.stats.take()
    return {
        "grpc_server_sps": float(sum(per_actor)),
        "grpc_inference_batch_mean": float(np.mean(stats["batch_rows"])),
        "grpc_latency_ms_p50": float(np.percentile(stats["latency_ms"], 50)),
        "grpc_latency_ms_p99": float(np.percentile(stats["latency_ms"], 99)),
    }


def _actor_worker(address, config_path, actor_id, batch_size):
    from seedlike.actor import Actor
    from seedlike.config import load_config_file

    config = load_config_file(config_path)
    config.unlock()
    config.env.batch_envs = batch_size
    Actor(config, address, actor_id).run()


def actor_sps(config_path, num_actors, seconds, batch_size) -> float:
    """Env steps/s of real actor processes (envpool) against the trivial server: the acting side
    with env.batch_envs = `batch_size` (0: all envs in lockstep; less: envpool's asynchronous
    mode, the envs of one request step while another is being answered)."""
    ctx = mp.get_context("spawn")
    with trivial_server(config_path) as (service, store, address):
        procs = [
            ctx.Process(target=_actor_worker, args=(address, config_path, i, batch_size))
            for i in range(num_actors)
        ]
        for p in procs:
            p.start()
        try:
            deadline = time.monotonic() + 120
            while service.num_sessions < num_actors or service.env_steps == 0:
                if time.monotonic() > deadline:
                    raise RuntimeError("actors did not connect")
                time.sleep(0.1)
            time.sleep(min(5.0, seconds / 3))  # envs started, inference compiled
            rows, start = service.env_steps, time.monotonic()
            time.sleep(seconds)
            return (service.env_steps - rows) / (time.monotonic() - start)
        finally:
            for p in procs:
                p.kill()
                p.join()


def train_sps(config_path, num_actors, steps) -> dict:
    from seedlike.metrics import read_metrics

    with tempfile.TemporaryDirectory() as logdir:
        cmd = [
            os.path.join(ROOT, "scripts", "train.sh"),
            f"--config={config_path}",
            f"--num_actors={num_actors}",
            f"--logdir={logdir}",
            f"--config.total_env_steps={steps}",
            "--config.log.interval_s=2",
            "--config.log.wandb_mode=disabled",
        ]
        start = time.monotonic()
        subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
        wall = time.monotonic() - start
        rows = read_metrics(logdir)
    # Steady state: from the first metrics row (startup and compilation done) to the last.
    first, last = rows[0], rows[-1]
    steady = (last["env_steps"] - first["env_steps"]) / (last["time"] - first["time"])
    returns = [r["episode_return_mean"] for r in rows if r["episode_return_mean"] is not None]
    return {
        "train_sps": float(steady),
        "train_wall_s": wall,
        "train_env_steps": last["env_steps"],
        "train_final_return": returns[-1] if returns else None,
        "train_staleness_mean": float(np.nanmean([r["staleness_mean"] or np.nan for r in rows])),
    }


def machine() -> dict:
    import jax

    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "devices": [str(d) for d in jax.devices()],
    }


def main(argv):
    del argv
    config, actors = _CONFIG.value, _NUM_ACTORS.value
    result = {"config": os.path.relpath(config, ROOT), "num_actors": actors, "machine": machine()}
    result.update(raw_env_sps(config, actors, _SECONDS.value))
    result.update(grpc_server_sps(config, actors, _SECONDS.value))
    from seedlike.config import load_config_file

    half = int(load_config_file(config).env.num_envs) // 2
    result["actor_sps_sync"] = actor_sps(config, actors, _SECONDS.value, batch_size=0)
    result["actor_sps_async"] = actor_sps(config, actors, _SECONDS.value, batch_size=half)
    result["actor_async_vs_sync"] = result["actor_sps_async"] / result["actor_sps_sync"]
    if _TRAIN_STEPS.value:
        result.update(train_sps(config, actors, _TRAIN_STEPS.value))
        result["train_fraction_of_raw"] = result["train_sps"] / result["raw_env_sps"]
    result["grpc_fraction_of_raw"] = result["grpc_server_sps"] / result["raw_env_sps"]
    result["time"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    results_io.write("throughput", result, _OUT.value)


if __name__ == "__main__":
    app.run(main)
