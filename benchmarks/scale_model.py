"""Scale model: env steps/s against actor processes, actor hosts and learner hosts, built from
measured per-stage costs and checked against real runs on this machine.

  python benchmarks/scale_model.py [--actors=1,2,4,8,16] [--envs=8] [--seconds=15]

1. Stage costs (benchmarks/stages.py, configs/cartpole_ppo.py): CPU
   microseconds per env step of the actor's env step and encode, the server's parse + decode,
   inference, reply and trajectory store, and the learner's update, each timed alone.
2. Runs: learner.py and N actor.py processes of --envs envs each (CartPole-v1, PPO, learning on),
   measured for --seconds after warm-up: env steps/s, and CPU seconds per env step of the actors
   and of the learner, the learner's split between its interpreter threads (Python and gRPC
   threads, named like the process; they share one interpreter lock) and XLA's compute threads.
3. The model, for N actor processes on a machine of C cores:

     sps(N) = min(N * r1, C / (a + l), 1 / g)

   r1: one actor's rate alone (it waits for every round trip); a, l: actor and learner CPU per env
   step; g: the learner's interpreter-thread CPU per env step (one core at most). All four come
   from the N=1 run; the stage costs say what a and l are made of (the rest is transport: gRPC and
   the glue between stages). The predictions for N > 1 are compared with the runs.
4. Beyond one host: the same terms per host. Actor hosts add env steps at --env_sps_per_core per
   core; each learner host serves at most --serve_sps (its interpreter-bound serving path) and
   learns at most --update_sps; every update all-reduces the gradients of every sgd step across
   learner hosts (ring: 2 (L-1)/L x parameter bytes per host per sgd step) over a --nic_gbps link.
   The transfer adds to each update's time. The defaults are Breakout-v5 figures measured
   elsewhere (sources beside the flags and in RESULTS.md).

Writes JSON (benchmarks/results/ or --out) and prints Markdown tables. Takes about 3 minutes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
from absl import app, flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import results_io  # noqa: E402
from stages import breakdown  # noqa: E402

from seedlike.metrics import read_metrics  # noqa: E402

_ACTORS = flags.DEFINE_list("actors", ["1", "2", "4", "8", "16"], "Actor processes per run.")
_ENVS = flags.DEFINE_integer("envs", 8, "Envs per actor (rows per message).")
_SECONDS = flags.DEFINE_float("seconds", 15.0, "Measurement window per run.")
_WARMUP_S = flags.DEFINE_float("warmup_s", 8.0, "Seconds of traffic before measuring.")
_OUT = flags.DEFINE_string("out", None, "JSON output path.")
# Beyond one host (Breakout-v5, configs/atari_ppo.py). Sources: issue 13's accelerator-host table
# (raw envpool 9,556 steps/s with 16 threads on 16 cores; a single-process JAX + envpool PPO
# trainer with the same network and schedule ran at that ceiling on one H100, so one H100 learns
# at least that fast) and RESULTS.md "Serving capacity" (32 actors x 8 rows, trivial policy:
# 6,061 steps/s served by one learner process at about one core).
_ENV_SPS_PER_CORE = flags.DEFINE_float("env_sps_per_core", 9556 / 16, "Atari env steps/s/core.")
_ACTOR_CORES = flags.DEFINE_integer("actor_cores", 16, "Cores per actor host.")
_SERVE_SPS = flags.DEFINE_float("serve_sps", 6061, "Env steps/s one learner process serves.")
_UPDATE_SPS = flags.DEFINE_float("update_sps", 9556, "Env steps/s one accelerator learns (PPO).")
_NIC_GBPS = flags.DEFINE_float("nic_gbps", 25.0, "Network between learner hosts, Gbit/s.")

CONFIG = os.path.join(ROOT, "configs", "cartpole_ppo.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(all threads, interpreter threads) CPU seconds of a process; interpreter threads keep the
    process's name or have seedlike's prefix (XLA's and LLVM's pools name theirs)."""
    ticks = os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{pid}/comm") as f:
        name = f.read().strip()
    total = interpreter = 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                thread = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue  # a thread that just ended
        seconds = (int(fields[11]) + int(fields[12])) / ticks
        total += seconds
        if thread == name or thread.startswith("sl-"):  # seedlike/threadnames.py
            interpreter += seconds
    return total, interpreter


def env_steps(logdir: str) -> int:
    rows = read_metrics(logdir)
    return rows[-1]["env_steps"] if rows else 0


def run(num_actors: int) -> dict:
    """Measures a real run of learner.py and num_actors actor.py processes."""
    common = [
        f"--config={CONFIG}",
        f"--config.env.num_envs={_ENVS.value}",
        "--config.total_env_steps=1000000000",
    ]
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="scale-") as logdir:
        procs = []
        log = open(os.path.join(logdir, "out.log"), "ab")

        def spawn(args):
            procs.append(
                subprocess.Popen(
                    [sys.executable, *args], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
                )
            )
            return procs[-1]

        try:
            learner = spawn(
                ["learner.py", *common, "--config.log.interval_s=0.5",
                 "--config.log.wandb_mode=disabled", f"--logdir={logdir}", f"--port={port}"]
            )  # fmt: skip
            while not os.path.exists(os.path.join(logdir, "server_address")):
                if learner.poll() is not None:
                    raise RuntimeError(f"learner exited; see {logdir}/out.log")
                time.sleep(0.2)
            actors = [
                spawn(["actor.py", *common, f"--server=127.0.0.1:{port}", f"--actor_id={i}"])
                for i in range(num_actors)
            ]
            while env_steps(logdir) == 0:
                time.sleep(0.2)
            time.sleep(_WARMUP_S.value)
            pids = [learner.pid] + [a.pid for a in actors]
            cpu0 = {pid: cpu_seconds(pid) for pid in pids}
            steps0, t0 = env_steps(logdir), time.monotonic()
            time.sleep(_SECONDS.value)
            cpu1 = {pid: cpu_seconds(pid) for pid in pids}
            steps1, t1 = env_steps(logdir), time.monotonic()
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
    steps = max(steps1 - steps0, 1)
    learner_cpu = cpu1[learner.pid][0] - cpu0[learner.pid][0]
    interpreter = cpu1[learner.pid][1] - cpu0[learner.pid][1]
    actor_cpu = sum(cpu1[p.pid][0] - cpu0[p.pid][0] for p in actors)
    return {
        "actors": num_actors,
        "sps": steps / (t1 - t0),
        "actor_cpu_us_per_step": actor_cpu / steps * 1e6,
        "learner_cpu_us_per_step": learner_cpu / steps * 1e6,
        "learner_interpreter_us_per_step": interpreter / steps * 1e6,
        "cores_used": (learner_cpu + actor_cpu) / (t1 - t0),
        "learner_cores": learner_cpu / (t1 - t0),
        "learner_interpreter_cores": interpreter / (t1 - t0),
    }


def predict(n: int, one: dict, cores: int) -> tuple[float, str]:
    """sps(N) = min(N r1, C / (a + l), 1 / g) from the one-actor run; returns (sps, the bound)."""
    bounds = {
        "actors": n * one["sps"],
        "cpu": cores / ((one["actor_cpu_us_per_step"] + one["learner_cpu_us_per_step"]) * 1e-6),
        "interpreter": 1.0 / (one["learner_interpreter_us_per_step"] * 1e-6),
    }
    name = min(bounds, key=bounds.get)
    return bounds[name], name


def atari_shape() -> dict:
    """Parameter bytes and update schedule of configs/atari_ppo.py's network."""
    import jax

    from networks import make_network
    from seedlike.config import load_config_file
    from seedlike.envs.envpool_env import make_env_spec

    config = load_config_file(os.path.join(ROOT, "configs", "atari_ppo.py"))
    network = make_network(config.network, make_env_spec(config.env))
    params = network.init(jax.random.key(0))
    algo = config[config.algo]
    return {
        "param_bytes": int(sum(np.asarray(x).nbytes for x in jax.tree.leaves(params))),
        "sgd_steps_per_update": int(algo.epochs * algo.num_minibatches),
        "steps_per_update": int(config.batch_unrolls * config.unroll_length),
    }


def beyond_one_host(actor_hosts: int, learner_hosts: int, shape: dict) -> dict:
    """Env steps/s of actor_hosts x learner_hosts for Atari, and which term bounds it.

    Each learner host fills its own batch of steps_per_update env steps per update and, within
    the update, all-reduces the gradients of every sgd step (ring: 2 (L-1)/L x parameter bytes
    sent per host); the transfer adds to the update's compute time (no overlap assumed)."""
    L = learner_hosts
    bytes_per_update = shape["sgd_steps_per_update"] * 2 * (L - 1) / L * shape["param_bytes"]
    allreduce_s = bytes_per_update * 8 / (_NIC_GBPS.value * 1e9)
    update_s = shape["steps_per_update"] / _UPDATE_SPS.value + allreduce_s
    bounds = {
        "acting": actor_hosts * _ACTOR_CORES.value * _ENV_SPS_PER_CORE.value,
        "serving": L * _SERVE_SPS.value,
        "learning": L * shape["steps_per_update"] / update_s,
    }
    name = min(bounds, key=bounds.get)
    return {
        "sps": bounds[name],
        "bound": name,
        "allreduce_ms_per_update": allreduce_s * 1e3,
        **{f"{k}_sps": v for k, v in bounds.items()},
    }


def main(argv):
    del argv
    cores = os.cpu_count()
    stages = breakdown("CartPole-v1", "cartpole_ppo.py")
    print("stage costs (us of CPU per env step):", json.dumps(stages), flush=True)
    runs = []
    for n in [int(a) for a in _ACTORS.value]:
        runs.append(run(n))
        print(json.dumps({k: round(v, 2) for k, v in runs[-1].items()}), flush=True)
    one = next(r for r in runs if r["actors"] == 1)
    for r in runs:
        r["predicted_sps"], r["predicted_bound"] = predict(r["actors"], one, cores)
        r["error"] = r["predicted_sps"] / r["sps"] - 1

    actor_stages = stages["actor_env_step"] + stages["actor_encode"]
    server_stages = sum(
        stages[k]
        for k in ("server_decode_validate", "server_encode_reply", "server_inference")
        + ("server_trajectory_store", "learner_update")
    )
    transport = {
        "actor_transport_us_per_step": one["actor_cpu_us_per_step"] - actor_stages,
        "learner_transport_us_per_step": one["learner_cpu_us_per_step"] - server_stages,
    }
    shape = atari_shape()
    hosts = []
    for actor_hosts in (1, 10, 100):
        acting = actor_hosts * _ACTOR_CORES.value * _ENV_SPS_PER_CORE.value
        # The fewest learner hosts that keep up with the actors.
        for learner_hosts in range(1, 4097):
            plan = beyond_one_host(actor_hosts, learner_hosts, shape)
            if plan["sps"] >= acting * 0.999:
                break
        hosts.append({"actor_hosts": actor_hosts, "learner_hosts": learner_hosts, **plan})

    result = {
        "cores": cores,
        "envs_per_actor": _ENVS.value,
        "stage_us_per_step": stages,
        "transport_us_per_step_at_one_actor": transport,
        "runs": runs,
        "atari": {
            **shape,
            "inputs": {
                k: v.value
                for k, v in (
                    ("env_sps_per_core", _ENV_SPS_PER_CORE),
                    ("actor_cores", _ACTOR_CORES),
                    ("serve_sps", _SERVE_SPS),
                    ("update_sps", _UPDATE_SPS),
                    ("nic_gbps", _NIC_GBPS),
                )
            },
            "hosts": hosts,
        },  # fmt: skip
    }
    results_io.write("scale_model", result, _OUT.value, echo={})
    print("\n| actors | measured sps | predicted | bound | error | cores used | learner cores "
          "(interpreter) | actor / learner us per step |")  # fmt: skip
    print("| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |")
    for r in runs:
        print(
            f"| {r['actors']} | {r['sps']:,.0f} | {r['predicted_sps']:,.0f} | "
            f"{r['predicted_bound']} | {r['error']:+.0%} | {r['cores_used']:.2f} | "
            f"{r['learner_cores']:.2f} ({r['learner_interpreter_cores']:.2f}) | "
            f"{r['actor_cpu_us_per_step']:.0f} / {r['learner_cpu_us_per_step']:.0f} |"
        )
    print(
        "\n| actor hosts | learner hosts needed | env steps/s | bound | acting | serving | "
        "learning | all-reduce ms per update |"
    )
    print("| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |")
    for h in hosts:
        print(
            f"| {h['actor_hosts']} | {h['learner_hosts']} | {h['sps']:,.0f} | {h['bound']} | "
            f"{h['acting_sps']:,.0f} | {h['serving_sps']:,.0f} | {h['learning_sps']:,.0f} | "
            f"{h['allreduce_ms_per_update']:.0f} |"
        )


if __name__ == "__main__":
    app.run(main)
