"""seedlike's env steps/s on one host against that host's raw envpool ceiling, and a short
learning run, in one command.

Made for the accelerator host of ../shared/gpu/README.md (no venv there: carry `.gpu`, whose
site-packages this script puts on the path of every process it starts). The defaults are the
whole check, about 9 minutes on a 16-core host:

  python3 -m benchmarks.accel_host --site=.gpu/site --out=$OUT/accel.json --logroot=$OUT/runs

1. The ceiling: envpool alone, --ceiling_envs envs on every core, random actions, --ceiling_s,
   stepped together (the ceiling of ../shared/gpu/README.md) and (--async_ceiling) twice as many
   in two halves in flight, which keeps the threads busy through each batch's slowest env: 512
   envs by default, as many as the default sizing keeps in flight (8 actors x 64).
2. Each setup of --setups (SETUPS below): learner.py and its actors as scripts/train.sh starts them
   (Breakout-v5, configs/atari_ppo.py, learning on). Once env steps flow (the first compilation
   takes a minute on a GPU), --warmup_s pass, then --window_s are measured: env steps/s from the
   learner's metrics rows, inference batch and latency (and where the latency goes: batching,
   prepare, policy, reply), staleness, policy versions/s, and the CPU cores each group of
   processes used over the window (learner process, its stream front ends, actors; from /proc).
3. Learning (--learn): each config of --learn_configs on --learn_env (Pong-v5) at the default
   sizing for --learn_s of wall time from the learner's start, compilation included: the env
   steps it made, its env steps/s once moving, and the mean return of its last 10% of episodes.

Every run in one command shares one JAX compilation cache, so only the first compiles in full.
Writes JSON (benchmarks/results_io.py) and the same as a Markdown table beside it (.md): two files.
"""

from __future__ import annotations

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
from seedlike.scores import final_score

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name -> (actor processes, config overrides for learner and actors).
SETUPS = {
    "16x8": (16, ["--config.env.num_envs=8"]),
    "4x32": (4, ["--config.env.num_envs=32", "--config.env.num_threads=4"]),
}


def _async(actors: int, envs: int, parts: int, threads: int) -> tuple[int, list[str]]:
    """`actors` actors of `envs` envs each, stepped in `parts` asynchronous parts on `threads`
    envpool threads: while one part's actions are on their way, the others step."""
    return actors, [
        f"--config.env.num_envs={envs}",
        f"--config.env.batch_envs={envs // parts}",
        f"--config.env.num_threads={threads}",
    ]


# NxMasync: two halves in flight per actor; NxMq: four quarters. 8x64async is what
# scripts/train.sh sizes on 16 cores (seedlike.config.actor_sizing); 4x128async keeps as many envs
# in flight with half the actors, in 64-row messages (an actor's CPU beyond its envs: 6.0% there
# against 8.2% with 32-row ones on 2 cores; benchmarks/RESULTS.md, "What an actor costs").
SETUPS.update(
    {
        "4x64async": _async(4, 64, 2, 4),
        "8x32async": _async(8, 32, 2, 2),
        "8x64async": _async(8, 64, 2, 2),
        "8x128async": _async(8, 128, 2, 2),
        "16x32async": _async(16, 32, 2, 1),
        "4x128q": _async(4, 128, 4, 4),
        "8x64q": _async(8, 64, 4, 2),
        "4x128async": _async(4, 128, 2, 4),
    }
)

_SETUPS = flags.DEFINE_list(
    "setups", ["8x64async", "4x128async"], f"Setups to run, of {sorted(SETUPS)}."
)
_CONFIG = flags.DEFINE_string("config", "configs/atari_ppo.py", "Config of every setup.")
_FLAGS = flags.DEFINE_list("flags", [], "More config overrides for every setup.")
_CEILING_ENVS = flags.DEFINE_integer("ceiling_envs", 256, "Envs of the ceiling run (0: none).")
_CEILING_S = flags.DEFINE_float("ceiling_s", 15.0, "Seconds of each ceiling run.")
_ASYNC_CEILING = flags.DEFINE_bool(
    "async_ceiling",
    True,
    "Also measure envpool with twice --ceiling_envs in two halves in flight (asynchronous "
    "stepping: 2.1x the synchronous ceiling on an H200 host, RESULTS run 4).",
)
_START_S = flags.DEFINE_float("start_s", 240.0, "Longest wait for the first env steps.")
_WARMUP_S = flags.DEFINE_float("warmup_s", 20.0, "Seconds after the first env steps, unmeasured.")
_WINDOW_S = flags.DEFINE_float("window_s", 45.0, "Seconds measured per setup.")
_LEARN = flags.DEFINE_bool("learn", True, "Also the learning runs (3. above).")
_LEARN_ENV = flags.DEFINE_string("learn_env", "Pong-v5", "The learning runs' task.")
_LEARN_CONFIGS = flags.DEFINE_list(
    "learn_configs", ["configs/atari_ppo.py"], "One learning run per config, one after another."
)
_LEARN_S = flags.DEFINE_float("learn_s", 240.0, "Wall time of each learning run.")
_LEARN_SETUP = flags.DEFINE_string("learn_setup", "8x64async", "Sizing of the learning runs.")
_LEARN_FLAGS = flags.DEFINE_list(
    "learn_flags",
    ["--config.batch_unrolls=64"],
    "More overrides for the learning runs (configs/atari_ppo.py's advice for 512 envs in flight).",
)
_LOGROOT = flags.DEFINE_string("logroot", "", "Run directories go here (default: a temp dir).")
_SITE = flags.DEFINE_string(
    "site", "", "Packages for every process (.gpu/site on the accelerator host, which has no venv)."
)
_OUT = flags.DEFINE_string("out", None, "JSON path (default benchmarks/results/...).")


def child_env() -> dict:
    env = dict(os.environ, WANDB_MODE="disabled", PYTHONUNBUFFERED="1")
    paths = [ROOT] + ([os.path.abspath(_SITE.value)] if _SITE.value else [])
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(tempfile.gettempdir(), "jax-cache"))
    return env


def ceiling(num_envs: int, seconds: float, parts: int = 1) -> dict:
    """Raw envpool steps/s with random actions on every core: `num_envs` envs stepped in `parts`
    batches in flight (1: all together, and each batch waits for its slowest env)."""
    code = (
        "import sys, time, numpy as np, envpool\n"
        "n, b, threads, secs = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),\n"
        "                       float(sys.argv[4]))\n"
        "env = envpool.make('Breakout-v5', env_type='gymnasium', num_envs=n, batch_size=b,\n"
        "                   num_threads=threads, seed=0)\n"
        "env.async_reset(); steps, t = 0, time.time()\n"
        "while time.time() - t < secs:\n"
        "    _, r, _, _, info = env.recv()\n"
        "    env.send(np.random.randint(0, env.action_space.n, size=len(r)), info['env_id'])\n"
        "    steps += len(r)\n"
        "print(steps / (time.time() - t))\n"
    )
    threads = os.cpu_count()
    batch = num_envs // parts
    out = subprocess.run(
        [sys.executable, "-c", code, str(num_envs), str(batch), str(threads), str(seconds)],
        env=child_env(),
        capture_output=True,
        text=True,
    )
    if out.returncode:
        raise RuntimeError(f"the ceiling run failed: {out.stderr.strip().splitlines()[-1:]}")
    return {
        "envs": num_envs,
        "batch_size": batch,
        "threads": threads,
        "sps": float(out.stdout.split()[-1]),
    }


def cpu_groups(learner: int, actors: list[int]) -> dict:
    return {
        "learner": procstats.cpu_s(learner),
        "front_ends": sum(procstats.cpu_s(c) for c in procstats.children(learner)),
        "actors": sum(procstats.cpu_s(a) for a in actors),
    }


def gpu_utilization() -> float | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
        return float(out.split()[0])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None


def start_run(name: str, logdir: str, num_actors: int, config: list[str]) -> tuple[list, str]:
    """learner.py and `num_actors` actor.py processes as scripts/train.sh starts them: (processes,
    the learner first; its run directory). Stops what it started if the learner does not come up."""
    os.makedirs(logdir, exist_ok=True)
    env = child_env()
    procs = []

    def start(args, log):
        with open(os.path.join(logdir, log), "w") as f:
            procs.append(subprocess.Popen(args, cwd=ROOT, env=env, stdout=f, stderr=f))
        return procs[-1]

    run_dir = os.path.join(logdir, "run")
    learner = start(
        [sys.executable, "learner.py", *config, f"--logdir={run_dir}", "--port=0"], "learner.log"
    )
    address = os.path.join(run_dir, "server_address")
    deadline = time.monotonic() + 120
    while not os.path.exists(address) and learner.poll() is None:
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if not os.path.exists(address):
        stop_run(procs)
        raise RuntimeError(f"{name}: the learner did not start; see {logdir}/learner.log")
    with open(address) as f:
        server = f.read().strip()
    for i in range(num_actors):
        start(
            [sys.executable, "actor.py", f"--server={server}", f"--actor_id={i}", *config],
            f"actor_{i}.log",
        )
    return procs, run_dir


def stop_run(procs: list) -> None:
    for proc in reversed(procs):
        proc.terminate()
    for proc in reversed(procs):
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def wait_for_steps(name: str, learner, run_dir: str) -> float:
    """Seconds until the learner's metrics count env steps (RuntimeError after --start_s)."""
    t0 = time.monotonic()
    while not any(r.get("env_steps", 0) > 0 for r in read_metrics(run_dir)):
        if time.monotonic() - t0 > _START_S.value or learner.poll() is not None:
            raise RuntimeError(f"{name}: no env steps; see {os.path.dirname(run_dir)}/learner.log")
        time.sleep(1.0)
    return time.monotonic() - t0


def run_setup(name: str, logroot: str) -> dict:
    num_actors, overrides = SETUPS[name]
    logdir = os.path.join(logroot, name)
    config = [f"--config={_CONFIG.value}", "--config.log.interval_s=5", *overrides, *_FLAGS.value]
    procs, run_dir = start_run(name, logdir, num_actors, config)
    learner, actors = procs[0], procs[1:]
    try:
        first_steps_s = wait_for_steps(name, learner, run_dir)
        time.sleep(_WARMUP_S.value)
        start_time, cpu0 = time.time(), cpu_groups(learner.pid, [a.pid for a in actors])
        time.sleep(_WINDOW_S.value / 2)
        gpu = gpu_utilization()
        time.sleep(_WINDOW_S.value / 2)
        end_time, cpu1 = time.time(), cpu_groups(learner.pid, [a.pid for a in actors])
        time.sleep(5.5)  # the row that covers the window's end
    finally:
        stop_run(procs)
    rows = [r for r in read_metrics(run_dir) if start_time <= r["time"] <= end_time + 5.5]
    if len(rows) < 2:
        raise RuntimeError(f"{name}: fewer than two metrics rows in the window")
    a, b = rows[0], rows[-1]
    seconds = b["time"] - a["time"]
    inner = rows[1:]

    def median(key):
        values = [r[key] for r in inner if r.get(key) is not None and r[key] == r[key]]
        return float(np.median(values)) if values else None

    cores = {k: (cpu1[k] - cpu0[k]) / (end_time - start_time) for k in cpu0}
    return {
        "setup": name,
        "actors": num_actors,
        "overrides": overrides + list(_FLAGS.value),
        "first_env_steps_s": round(first_steps_s, 1),
        "sps": (b["env_steps"] - a["env_steps"]) / seconds,
        "policy_versions_per_s": (b["policy_version"] - a["policy_version"]) / seconds,
        "inference_batch_mean": median("inference_batch_mean"),
        "inference_rows_in_place": median("inference_rows_in_place"),
        "latency_ms_p50": median("inference_latency_ms_p50"),
        "latency_ms_p99": median("inference_latency_ms_p99"),
        "staleness_mean": median("staleness_mean"),
        "busy": {k[5:]: median(k) for k in sorted(b) if k.startswith("busy/")},
        # Where a request's time in the learner process goes (batching, prepare, policy, reply).
        "latency_segments_ms": {
            k[len("latency_ms/") :]: median(k) for k in sorted(b) if k.startswith("latency_ms/")
        },
        "cores": cores,
        "gpu_utilization_pct": gpu,
    }


def run_learning(config_path: str, logroot: str) -> dict:
    """A learning run of `config_path` on --learn_env for --learn_s (3. in the docstring)."""
    num_actors, overrides = SETUPS[_LEARN_SETUP.value]
    name = f"learn-{os.path.splitext(os.path.basename(config_path))[0]}"
    config = [f"--config={config_path}", f"--config.env.name={_LEARN_ENV.value}",
              "--config.log.interval_s=5", *overrides, *_FLAGS.value,
              *_LEARN_FLAGS.value]  # fmt: skip
    began = time.monotonic()
    procs, run_dir = start_run(name, os.path.join(logroot, name), num_actors, config)
    try:
        first_steps_s = wait_for_steps(name, procs[0], run_dir)
        time.sleep(max(0.0, _LEARN_S.value - (time.monotonic() - began)))
        time.sleep(5.5)  # the last metrics row
    finally:
        stop_run(procs)
    rows = read_metrics(run_dir)
    moving = [r for r in rows if r.get("env_steps")]
    sps = (moving[-1]["env_steps"] - moving[0]["env_steps"]) / max(
        moving[-1]["time"] - moving[0]["time"], 1e-9
    )
    return {
        "config": config_path,
        "env": _LEARN_ENV.value,
        "setup": _LEARN_SETUP.value,
        "flags": list(_LEARN_FLAGS.value),
        "wall_s": _LEARN_S.value,
        "first_env_steps_s": round(first_steps_s, 1),
        "env_steps": moving[-1]["env_steps"],
        "sps": sps,
        "final_return": final_score(rows, weight="episodes"),
        "episodes": int(sum(r.get("episodes") or 0 for r in rows)),
        "policy_version": moving[-1]["policy_version"],
    }


def markdown(result: dict) -> str:
    """The JSON's numbers as the tables of benchmarks/RESULTS.md."""
    lines = [
        f"Host: {result['host']['cores']} cores; config {result['config']}.",
        "",
        "| what | env steps/s | of the async ceiling | learner / front ends / actors cores | "
        "GPU busy | batch | latency p50 ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for key in ("ceiling", "async_ceiling"):
        if key in result:
            c = result[key]
            lines.append(
                f"| raw envpool, {c['envs']} envs in batches of {c['batch_size']}, "
                f"{c['threads']} threads | {c['sps']:,.0f} | | | | | |"
            )
    for row in result["setups"]:
        if "error" in row:
            lines.append(f"| {row['setup']} | failed: {row['error']} | | | | | |")
            continue
        cores = " / ".join(f"{row['cores'][k]:.2f}" for k in ("learner", "front_ends", "actors"))
        lines.append(
            f"| seedlike {row['setup']} | {row['sps']:,.0f} | "
            f"{_number(row.get('of_async_ceiling'), '.2f')} | {cores} | "
            f"{_number(row['gpu_utilization_pct'], '.0f', '%')} | "
            f"{_number(row['inference_batch_mean'], '.1f')} | "
            f"{_number(row['latency_ms_p50'], '.1f')} |"
        )
    if result.get("learning"):
        lines += [
            "",
            "| learning run | env steps in the wall time | env steps/s | return (last 10%) | "
            "episodes |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        for run in result["learning"]:
            if "error" in run:
                lines.append(f"| {run['config']} | failed: {run['error']} | | | |")
                continue
            lines.append(
                f"| {run['config']}, {run['env']}, {run['setup']}, {run['wall_s']:.0f} s | "
                f"{run['env_steps']:,} | {run['sps']:,.0f} | {run['final_return']:.1f} | "
                f"{run['episodes']} |"
            )
    return "\n".join(lines) + "\n"


def _number(value, fmt: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{fmt}}{unit}"


def write(result: dict, out: str) -> None:
    """The JSON and its Markdown beside it; what a time limit cuts short stays."""
    results_io.write("accel_host", result, out, echo={})
    with open(os.path.splitext(out)[0] + ".md", "w") as f:
        f.write(markdown(result))


def main(_):
    logroot = _LOGROOT.value or tempfile.mkdtemp(prefix="accel-host-")
    out = _OUT.value or os.path.join(
        results_io.RESULTS, f"accel_host-{time.strftime('%Y%m%d-%H%M%S')}.json"
    )
    result = {"host": {"cores": os.cpu_count()}, "config": _CONFIG.value, "setups": []}
    if _CEILING_ENVS.value:
        result["ceiling"] = ceiling(_CEILING_ENVS.value, _CEILING_S.value)
        print(f"ceiling: {result['ceiling']['sps']:,.0f} env steps/s", flush=True)
        if _ASYNC_CEILING.value:
            result["async_ceiling"] = ceiling(2 * _CEILING_ENVS.value, _CEILING_S.value, parts=2)
            print(f"async ceiling: {result['async_ceiling']['sps']:,.0f} env steps/s", flush=True)
    for name in _SETUPS.value:
        if name not in SETUPS:
            sys.exit(f"--setups: unknown setup {name!r}; known: {', '.join(sorted(SETUPS))}")
        try:
            row = run_setup(name, logroot)
        except RuntimeError as e:
            print(e, flush=True)
            result["setups"].append({"setup": name, "error": str(e)})
            continue
        if "ceiling" in result:
            row["of_ceiling"] = row["sps"] / result["ceiling"]["sps"]
        if "async_ceiling" in result:
            row["of_async_ceiling"] = row["sps"] / result["async_ceiling"]["sps"]
        result["setups"].append(row)
        write(result, out)
        cores = ", ".join(f"{k} {v:.2f}" for k, v in row["cores"].items())
        print(
            f"{name}: {row['sps']:,.0f} env steps/s ({row.get('of_ceiling', 0):.2f} of the "
            f"ceiling, {row.get('of_async_ceiling', 0):.2f} of the async one), batch "
            f"{row['inference_batch_mean']}, latency p50 {row['latency_ms_p50']} ms, "
            f"staleness {row['staleness_mean']}, versions/s "
            f"{row['policy_versions_per_s']:.2f}, cores: {cores}, "
            f"gpu {row['gpu_utilization_pct']}%",
            flush=True,
        )
    if _LEARN.value:
        result["learning"] = []
        for config_path in _LEARN_CONFIGS.value:
            try:
                run = run_learning(config_path, logroot)
            except RuntimeError as e:
                print(e, flush=True)
                run = {"config": config_path, "error": str(e)}
            result["learning"].append(run)
            write(result, out)
            if "error" not in run:
                print(
                    f"learning {config_path} on {run['env']}: {run['env_steps']:,} env steps in "
                    f"{run['wall_s']:.0f} s ({run['sps']:,.0f}/s once moving), return "
                    f"{run['final_return']:.1f}",
                    flush=True,
                )
    write(result, out)
    print(markdown(result), flush=True)


if __name__ == "__main__":
    app.run(main)
