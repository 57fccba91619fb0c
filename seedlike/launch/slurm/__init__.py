"""A seedlike run as one SLURM batch job (`python -m seedlike.launch.slurm`).

The job's first node runs the learner (in the batch step, with the job's GPUs); `--actors` actor
processes run as one job step over the allocation (`scripts/slurm_job.sh` is the job's body). The
job asks SLURM for USR1 `--signal_s` seconds before its time limit: the learner checkpoints and
the job requeues itself, and every later start resumes from the checkpoint at its exact env step
(a preemption the cluster announces the same way, or `scancel --signal=USR1 --batch JOB`, does the
same). `scancel JOB` checkpoints and ends it. The learner's stop grace
(`checkpoint.stop_grace_s`) is lowered under the cluster's KillWait, after which SLURM kills what
is left. Everything a job writes goes under <logdir>/slurm: job_<id>.log (the job's own lines),
learner.log, actor_<k>.log.

This module writes the job script and submits it; what cannot work is said in one line before
anything is queued (no sbatch, a controller that does not answer, sbatch refusing the job: a
partition or account that does not exist, a time limit or size the cluster does not allow).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
JOB_BODY = os.path.join(ROOT, "scripts", "slurm_job.sh")
KILL_MARGIN_S = 10  # the learner's stop grace ends this long before SLURM's KillWait


class SlurmError(RuntimeError):
    """A job that cannot be submitted; the message says why in one line."""


@dataclasses.dataclass(frozen=True)
class Job:
    """What one submission asks for.

    Attributes:
      config: the experiment config file; config_flags: its --config.KEY=VALUE flags.
      logdir: the run directory (a resubmitted job with the same one resumes).
      actors: actor processes (job tasks), cpus_per_actor cores each.
      nodes: nodes of the allocation (the first runs the learner); > 1 uses TLS credentials.
      gpus: GPUs for the learner, on the first node (--gres=gpu:N).
      partition, account, time: sbatch's; "" leaves them to the cluster's defaults.
      signal_s: seconds before the time limit that the checkpoint-and-requeue signal comes.
      python: the interpreter of every process (one with seedlike installed, on every node).
      sbatch: further #SBATCH options, e.g. ("--qos=long",).
    """

    config: str
    logdir: str
    config_flags: tuple[str, ...] = ()
    actors: int = 2
    cpus_per_actor: int = 1
    nodes: int = 1
    gpus: int = 0
    partition: str = ""
    account: str = ""
    time: str = ""
    signal_s: int = 120
    python: str = ""
    sbatch: tuple[str, ...] = ()


def job_script(job: Job, stop_grace_s: float) -> str:
    """The batch script: #SBATCH options, then the settings scripts/slurm_job.sh reads."""
    logs = os.path.join(job.logdir, "slurm")
    options = [
        f"--job-name=seedlike-{os.path.basename(job.logdir.rstrip('/'))}",
        f"--nodes={job.nodes}",
        f"--ntasks={job.actors}",
        f"--cpus-per-task={job.cpus_per_actor}",
        f"--output={logs}/job_%j.log",
        "--open-mode=append",
        "--requeue",
        f"--signal=B:USR1@{job.signal_s}",
    ]
    if job.gpus:
        options.append(f"--gres=gpu:{job.gpus}")
    for flag, value in (("partition", job.partition), ("account", job.account), ("time", job.time)):
        if value:
            options.append(f"--{flag}={value}")
    options += list(job.sbatch)
    flags = [*job.config_flags, f"--config.checkpoint.stop_grace_s={stop_grace_s:g}"]
    settings = {
        "SEEDLIKE_ROOT": ROOT,
        "SEEDLIKE_PY": job.python,
        "SEEDLIKE_LOGDIR": job.logdir,
        "SEEDLIKE_CONFIG": job.config,
        "SEEDLIKE_CONFIG_FLAGS": "\n".join(flags),
        "SEEDLIKE_ACTORS": str(job.actors),
        "SEEDLIKE_CPUS_PER_ACTOR": str(job.cpus_per_actor),
        "SEEDLIKE_GPUS": str(job.gpus),
    }
    lines = ["#!/usr/bin/env bash", *(f"#SBATCH {o}" for o in options)]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in settings.items()]
    lines.append(f"exec bash {shlex.quote(JOB_BODY)}")
    return "\n".join(lines) + "\n"


def _run(command: list[str], env=None, timeout: float = 60.0) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except FileNotFoundError:
        raise SlurmError(
            f"{command[0]} not found: run this where SLURM's client commands are (a login node)"
        ) from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"`{' '.join(command)}` gave no answer within {timeout:g} s") from None


def _message(done: subprocess.CompletedProcess) -> str:
    lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
    return (
        re.sub(r"^(sbatch|scontrol): error: ", "", lines[-1])
        if lines
        else f"status {done.returncode}"
    )


def check_controller(env=None) -> None:
    """SlurmError unless the controller answers (`scontrol ping`)."""
    done = _run(["scontrol", "ping"], env=env)
    if done.returncode != 0 or "UP" not in done.stdout:
        said = (done.stdout.strip() or _message(done)).replace("\n", "; ")
        raise SlurmError(
            f"the SLURM controller does not answer ({said}); is slurmctld running, and does "
            "SLURM_CONF (or /etc/slurm/slurm.conf) name it?"
        )


def kill_wait_s(env=None) -> float:
    """SLURM's KillWait: how long after SIGTERM a job's processes are killed."""
    done = _run(["scontrol", "show", "config"], env=env)
    found = re.search(r"^KillWait\s*=\s*(\d+)", done.stdout, re.MULTILINE)
    return float(found.group(1)) if found else 30.0


def stop_grace(config_grace_s: float, kill_wait: float) -> float:
    """The learner's stop grace under SLURM: its own, ending KILL_MARGIN_S before KillWait."""
    return max(5.0, min(float(config_grace_s), kill_wait - KILL_MARGIN_S))


def submit(job: Job, stop_grace_s: float, env=None) -> str:
    """Writes <logdir>/slurm/job.sh and submits it; returns the job id."""
    logs = os.path.join(job.logdir, "slurm")
    os.makedirs(logs, exist_ok=True)
    path = os.path.join(logs, "job.sh")
    with open(path, "w") as f:
        f.write(job_script(job, stop_grace_s))
    done = _run(["sbatch", "--parsable", path], env=env)
    if done.returncode != 0:
        message = _message(done).replace("Batch job submission failed: ", "")
        lower = message.lower()
        if "partition" in lower:
            message += f" (--partition={job.partition or '<the default>'}; `sinfo` lists them)"
        elif "account" in lower:
            message += f" (--account={job.account or '<the default>'}; `sacctmgr show assoc "
            message += "user=$USER` lists yours)"
        raise SlurmError(f"sbatch refused the job: {message}")
    return done.stdout.strip().split(";")[0]
