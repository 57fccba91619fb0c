"""Scale model: env steps/s against actor processes, actor hosts and learner hosts, built from
measured per-stage costs and checked against real runs on this machine.

  python -m benchmarks.scale_model [--actors=1,2,4,8,16] [--envs=8] [--seconds=15]

1. Stage costs (benchmarks/stages.py, configs/cartpole_ppo.py): CPU
   microseconds per env step of the actor's env step and encode, the server's parse + decode,
   inference, reply and trajectory store, and the learner's update, each timed alone.
2. Runs: learner.py and N actor.py processes of --envs envs each (CartPole-v1, PPO, learning on),
   measured for --seconds after warm-up: env steps/s, and CPU seconds per env step of the actors
   and of the learner, the learner's split between its Python threads (py-spy's list, which
   share one interpreter lock; seedlike/runtime/procstats.py) and the rest (XLA's, gRPC's threads).
3. The model, for N actor processes on a machine of C cores:

     sps(N) = min(N * r1, C / (a + l), 1 / g)

   r1: one actor's rate alone (it waits for every round trip); a, l: actor and learner CPU per env
   step; g: the learner's interpreter-thread CPU per env step (one core at most). All four come
   from the N=1 run; the stage costs say what a and l are made of (the rest is transport: gRPC and
   the glue between stages). The predictions for N > 1 are compared with the runs.
4. Beyond one host (Atari, configs/atari_ppo.py's network): actor hosts of --actor_cores cores
   add env steps at --env_sps_per_core per core. Each learner host (--learner_cores cores, one
   accelerator) serves at most

     serve = min(1 / p, (learner_cores - 2) / f)

   p: CPU per env step of the learner process's Python threads (they share one interpreter lock:
   one core at most), f: CPU per env step of the stream front ends (processes, as many as cores
   allow; two cores are left to the learner process), both from a server_capacity.py cell
   (--capacity, --capacity_cell) or the flags' defaults (measured on a 16-core H200 host;
   RESULTS.md). It learns at a measured --learn_sps (the default, benchmarks/learner_update.py
   on an H100 host), or with --learn_sps=0 at most update = --accel_tflops / F env steps/s, F
   the accelerator FLOPs per env step (PPO's epochs x (forward + backward) over the batch plus
   the acting forward pass, from XLA's cost analysis of the network), and every update
   all-reduces the gradients of each sgd step across learner hosts (ring: 2 (L-1)/L x parameter
   bytes per host) over a --nic_gbps link, adding to the update's time; each host learns from
   --host_batch_steps env steps per update. The same link brings each learner host its actors'
   steps (--step_bytes each), so it receives at most

     network = nic / (step_bytes + all-reduce bytes per env step)

   env steps/s. The table gives the fewest learner hosts that keep up with 1, 10 and 100 actor
   hosts, and prints every assumption beside it.

Writes JSON (benchmarks/results/ or --out) and prints Markdown tables. Takes about 3 minutes
(--noruns: the model beyond one host alone, seconds).
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

from benchmarks import results_io
from benchmarks.stages import breakdown
from seedlike.metrics import read_metrics
from seedlike.runtime import procstats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_ACTORS = flags.DEFINE_list("actors", ["1", "2", "4", "8", "16"], "Actor processes per run.")
_ENVS = flags.DEFINE_integer("envs", 8, "Envs per actor (rows per message).")
_SECONDS = flags.DEFINE_float("seconds", 15.0, "Measurement window per run.")
_WARMUP_S = flags.DEFINE_float("warmup_s", 8.0, "Seconds of traffic before measuring.")
_OUT = flags.DEFINE_string("out", None, "JSON output path.")
_RUNS = flags.DEFINE_bool("runs", True, "Measure the runs of 1-16 actors (else the model alone).")
# Beyond one host (Breakout-v5, configs/atari_ppo.py). Sources: the accelerator host of issue 13
# (raw envpool 9,556 steps/s with 16 threads on 16 cores); RESULTS.md "One learner host, many
# actor hosts" (server_capacity.py, 4 actors x 64 rows, one front end, this 2-core machine).
_ENV_SPS_PER_CORE = flags.DEFINE_float("env_sps_per_core", 9556 / 16, "Atari env steps/s/core.")
_ACTOR_CORES = flags.DEFINE_integer("actor_cores", 16, "Cores per actor host.")
_LEARNER_CORES = flags.DEFINE_integer("learner_cores", 16, "Cores per learner host.")
_CAPACITY = flags.DEFINE_string(
    "capacity", "", "A server_capacity.py JSON to take p and f from (else the flags below)."
)
_CAPACITY_CELL = flags.DEFINE_string(
    "capacity_cell", "4x64", "Its cell (ACTORSxROWS, the first with front ends)."
)
_PYTHON_US = flags.DEFINE_float(
    "python_us",
    12.8,
    "p: learner-process Python-thread CPU us per served env step (RESULTS.md, 'One learner host "
    "with cores to spare': a 16-core H200 host serving 16 x 64 Atari rows through 8 front ends in "
    "256-row batches, 79,053 env steps/s measured, 2026-11-27).",
)
_FRONT_END_US = flags.DEFINE_float(
    "front_end_us", 52.5, "f: front-end CPU us per env step (the same measurement)."
)
_ACCEL_TFLOPS = flags.DEFINE_float(
    "accel_tflops", 30.0, "Sustained accelerator TFLOP/s on the update (assumed: H100, TF32)."
)
_LEARN_SPS = flags.DEFINE_float(
    "learn_sps",
    152_000.0,
    "Env steps/s one learner host learns, measured: benchmarks/learner_update.py on an H100 host "
    "(RESULTS.md, 'Breakout on an accelerator host', run 5: 8,192 env steps per update, "
    "151,868-153,407); 0: --accel_tflops over the update's FLOPs instead.",
)
_HOST_BATCH_STEPS = flags.DEFINE_integer(
    "host_batch_steps", 8192, "Env steps each learner host learns from per update."
)
_NIC_GBPS = flags.DEFINE_float(
    "nic_gbps", 25.0, "Each learner host's network link (actors' steps in, all-reduce), Gbit/s."
)
_STEP_BYTES = flags.DEFINE_integer(
    "step_bytes",
    7_232,
    "Bytes an actor sends per env step: 64 Breakout-v5 envs (episodic_life) stepped 300 times "
    "with stacked frames sent once (actor.stack_once, the default: 99.3% of rows carry only "
    "their newest 84 x 84 frame), messages measured, over 64. Every row whole: 28,241.",
)

CONFIG = os.path.join(ROOT, "configs", "cartpole_ppo.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
            python = {
                learner.pid: procstats.python_threads(learner.pid)
            }  # the learner's Python threads
            cpu0 = {pid: procstats.interpreter_cpu_s(pid, python.get(pid)) for pid in pids}
            steps0, t0 = env_steps(logdir), time.monotonic()
            time.sleep(_SECONDS.value)
            cpu1 = {pid: procstats.interpreter_cpu_s(pid, python.get(pid)) for pid in pids}
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
    """Parameter bytes, update schedule and accelerator FLOPs per env step of
    configs/atari_ppo.py's network (the forward pass's FLOPs from XLA's cost analysis)."""
    import jax

    from networks import make_network
    from seedlike.config import load_config_file
    from seedlike.envs.envpool_env import make_env_spec

    config = load_config_file(os.path.join(ROOT, "configs", "atari_ppo.py"))
    spec = make_env_spec(config.env)
    network = make_network(config.network, spec)
    params = network.init(jax.random.key(0))
    norm = network.init_obs_norm()
    rows = 64
    obs = {k: np.zeros((rows, *s.shape), s.dtype) for k, s in spec.observation.items()}
    forward = jax.jit(lambda p, o: network.apply(p, norm, o, {})).lower(params, obs).compile()
    cost = forward.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    algo = config[config.algo]
    forward_flops = float(cost["flops"]) / rows
    # PPO: `epochs` passes of forward + backward (about 3 forwards) over every step, the
    # values before the first pass, and the acting forward pass on the same accelerator.
    per_step = (3 * algo.epochs + 2) * forward_flops
    return {
        "param_bytes": int(sum(np.asarray(x).nbytes for x in jax.tree.leaves(params))),
        "sgd_steps_per_update": int(algo.epochs * algo.num_minibatches),
        "steps_per_update": int(config.batch_unrolls * config.unroll_length),
        "forward_flops": forward_flops,
        "flops_per_env_step": per_step,
    }


def serving_costs() -> dict:
    """p and f (CPU us per served env step), from --capacity's cell or the flags."""
    if not _CAPACITY.value:
        return {"python_us": _PYTHON_US.value, "front_end_us": _FRONT_END_US.value,
                "source": "flags"}  # fmt: skip
    actors, rows = (int(x) for x in _CAPACITY_CELL.value.split("x"))
    with open(_CAPACITY.value) as f:
        cells = json.load(f)["cells"]
    for c in cells:
        fe = int(c["front_ends"] or 0)
        if c["actors"] == actors and c["rows_in_flight"] == actors * rows and fe > 0:
            return {
                "python_us": c["central_interpreter_us_per_step"],
                "front_end_us": c["front_ends_us_per_step"],
                "source": f"{_CAPACITY.value} {_CAPACITY_CELL.value}",
            }
    raise app.UsageError(f"--capacity has no cell {_CAPACITY_CELL.value} with front ends")


def learner_host(shape: dict, costs: dict) -> dict:
    """What one learner host serves and learns (env steps/s), from the model's inputs."""
    serve = min(1e6 / costs["python_us"], (_LEARNER_CORES.value - 2) * 1e6 / costs["front_end_us"])
    update = _LEARN_SPS.value or _ACCEL_TFLOPS.value * 1e12 / shape["flops_per_env_step"]
    return {"serve_sps": serve, "update_sps": update}


def beyond_one_host(actor_hosts: int, learner_hosts: int, shape: dict, host: dict) -> dict:
    """Env steps/s of actor_hosts x learner_hosts for Atari, and which term bounds it.

    Each learner host fills its own batch of --host_batch_steps env steps per update and, within
    the update, all-reduces the gradients of every sgd step (ring: 2 (L-1)/L x parameter bytes
    sent per host); the transfer adds to the update's compute time (no overlap assumed). The
    host's link carries its actors' steps in as well as the all-reduce: their bytes per env step
    together bound the steps it can receive."""
    L = learner_hosts
    bytes_per_update = shape["sgd_steps_per_update"] * 2 * (L - 1) / L * shape["param_bytes"]
    nic_bytes_per_s = _NIC_GBPS.value * 1e9 / 8
    allreduce_s = bytes_per_update / nic_bytes_per_s
    update_s = _HOST_BATCH_STEPS.value / host["update_sps"] + allreduce_s
    in_bytes_per_step = _STEP_BYTES.value + bytes_per_update / _HOST_BATCH_STEPS.value
    bounds = {
        "acting": actor_hosts * _ACTOR_CORES.value * _ENV_SPS_PER_CORE.value,
        "serving": L * host["serve_sps"],
        "learning": L * _HOST_BATCH_STEPS.value / update_s,
        "network": L * nic_bytes_per_s / in_bytes_per_step,
    }
    name = min(bounds, key=bounds.get)
    return {
        "sps": bounds[name],
        "bound": name,
        "allreduce_ms_per_update": allreduce_s * 1e3,
        "in_bytes_per_step": in_bytes_per_step,
        **{f"{k}_sps": v for k, v in bounds.items()},
    }


def local_runs(cores: int) -> dict:
    """Parts 1-3: stage costs, runs of 1-16 actors and the one-host model against them."""
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
    return {"stage_us_per_step": stages, "transport_us_per_step_at_one_actor": transport,
            "runs": runs}  # fmt: skip


def main(argv):
    del argv
    cores = os.cpu_count()
    result = {"cores": cores, "envs_per_actor": _ENVS.value}
    if _RUNS.value:
        result.update(local_runs(cores))
    shape = atari_shape()
    costs = serving_costs()
    host = learner_host(shape, costs)
    hosts = []
    for actor_hosts in (1, 10, 100):
        acting = actor_hosts * _ACTOR_CORES.value * _ENV_SPS_PER_CORE.value
        # The fewest learner hosts that keep up with the actors.
        for learner_hosts in range(1, 4097):
            plan = beyond_one_host(actor_hosts, learner_hosts, shape, host)
            if plan["sps"] >= acting * 0.999:
                break
        per_actor_host = learner_hosts / actor_hosts
        hosts.append(
            {"actor_hosts": actor_hosts, "learner_hosts": learner_hosts,
             "learner_hosts_per_actor_host": per_actor_host, **plan}
        )  # fmt: skip
    inputs = {
        "env_sps_per_core": _ENV_SPS_PER_CORE.value,
        "actor_cores": _ACTOR_CORES.value,
        "learner_cores": _LEARNER_CORES.value,
        **costs,
        "accel_tflops": _ACCEL_TFLOPS.value,
        "learn_sps": _LEARN_SPS.value,
        "host_batch_steps": _HOST_BATCH_STEPS.value,
        "nic_gbps": _NIC_GBPS.value,
        "step_bytes": _STEP_BYTES.value,
    }
    result["atari"] = {**shape, **host, "inputs": inputs, "hosts": hosts}
    results_io.write("scale_model", result, _OUT.value, echo={})
    print("\nAssumptions (Atari, configs/atari_ppo.py's Nature CNN, PPO):")
    print(f"- actor hosts: {_ACTOR_CORES.value} cores x {_ENV_SPS_PER_CORE.value:,.0f} env steps/s "
          "per core (raw envpool Breakout-v5 on a 16-core accelerator host, issue 13)")  # fmt: skip
    print(f"- serving, per learner host of {_LEARNER_CORES.value} cores: the learner process's "
          f"Python threads {costs['python_us']:.1f} us and the front ends "
          f"{costs['front_end_us']:.1f} us of CPU per env step ({costs['source']}): "
          f"{host['serve_sps']:,.0f} env steps/s")  # fmt: skip
    learning = (
        f"{_LEARN_SPS.value:,.0f} env steps/s (measured, --learn_sps)"
        if _LEARN_SPS.value
        else f"{_ACCEL_TFLOPS.value:g} sustained TFLOP/s (assumed, not measured): "
        f"{host['update_sps']:,.0f} env steps/s"
    )
    print(f"- learning: {shape['flops_per_env_step'] / 1e6:.0f} MFLOP per env step "
          f"({shape['forward_flops'] / 1e6:.1f} per forward pass); {learning}; "
          f"{_HOST_BATCH_STEPS.value:,} env steps per host per update, "
          f"{shape['sgd_steps_per_update']} sgd steps each all-reducing "
          f"{shape['param_bytes'] / 1e6:.2f} MB over {_NIC_GBPS.value:g} Gbit/s")  # fmt: skip
    print(f"- network: each learner host's {_NIC_GBPS.value:g} Gbit/s link brings in "
          f"{_STEP_BYTES.value:,} bytes per env step from the actors (--step_bytes) and the "
          "all-reduce's bytes (column: both, per env step)")  # fmt: skip
    print(
        "\n| actor hosts | learner hosts needed | learner hosts per actor host | env steps/s | "
        "bound | acting | serving | learning | network | all-reduce ms per update | "
        "bytes in per env step |"
    )
    print("| ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for h in hosts:
        print(
            f"| {h['actor_hosts']} | {h['learner_hosts']} | "
            f"{h['learner_hosts_per_actor_host']:.2f} | {h['sps']:,.0f} | {h['bound']} | "
            f"{h['acting_sps']:,.0f} | {h['serving_sps']:,.0f} | {h['learning_sps']:,.0f} | "
            f"{h['network_sps']:,.0f} | {h['allreduce_ms_per_update']:.0f} | "
            f"{h['in_bytes_per_step']:,.0f} |"
        )


if __name__ == "__main__":
    app.run(main)
