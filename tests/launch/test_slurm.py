"""python -m seedlike.launch.slurm on a real one-node SLURM cluster that the test starts here
(munged, slurmctld and slurmd of Debian's slurm-wlm, with a config, key, socket, ports, state and
logs of their own in a temporary folder; nothing written to /etc) and stops afterwards: a run
trains, is preempted, requeues and resumes at its checkpoint's exact env step, and is cancelled;
what cannot work ends in one line."""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys

import pytest

from seedlike.checkpoint import Checkpointer
from seedlike.launch import slurm
from tests.procs import ROOT, free_port, last, pids_matching, wait_for, wait_until

PACKAGES = ("slurmctld", "slurmd", "munge", "slurm-client")
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch")


def _installed() -> bool:
    return all(shutil.which(d) or os.path.exists(f"/usr/sbin/{d}") for d in DAEMONS)


def _install() -> str:
    """'' once the daemons are here (installed with apt if need be), else why not."""
    if _installed():
        return ""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "SLURM is not installed and this is not root with apt-get"
    for command in (["apt-get", "install", "-y", "-qq", *PACKAGES], ["apt-get", "update", "-qq"],
                    ["apt-get", "install", "-y", "-qq", *PACKAGES]):  # fmt: skip
        subprocess.run(command, capture_output=True, timeout=600)
        if _installed():
            return ""
    return f"apt-get could not install {' '.join(PACKAGES)}"


def _pid(path) -> int | None:
    try:
        return int(open(path).read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"


def _conf(folder, port: int, host: str) -> str:
    cpus = os.cpu_count() or 2
    return f"""ClusterName=seedliketest
SlurmctldHost={host}
SlurmctldPort={port}
SlurmdPort={port + 1}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={folder}/munge.sock,cred_expire=10
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
KillWait=30
MpiDefault=none
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
NodeName={host} CPUs={cpus} RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def _two_free_ports() -> int:
    """A port p with p + 1 free too (slurmctld's and slurmd's)."""
    for _ in range(50):
        port = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue
    raise RuntimeError("no two free ports in a row")


@pytest.fixture
def cluster(tmp_path_factory):
    why = _install()
    if why:
        pytest.skip(f"no SLURM here: {why}")
    folder = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool"):
        (folder / sub).mkdir()
    (folder / "munge.key").write_bytes(os.urandom(1024))
    os.chmod(folder / "munge.key", 0o400)
    host = socket.gethostname().split(".")[0]
    conf = folder / "slurm.conf"
    conf.write_text(_conf(folder, _two_free_ports(), host))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    env.pop("SLURM_JOB_ID", None)
    pids = {}
    try:
        munge = [
            "munged", "--force", f"--socket={folder}/munge.sock",
            f"--key-file={folder}/munge.key", f"--pid-file={folder}/munged.pid",
            f"--log-file={folder}/munged.log", f"--seed-file={folder}/munged.seed",
        ]  # fmt: skip
        started = subprocess.run(munge, capture_output=True, text=True, timeout=30)
        if started.returncode != 0:
            pytest.skip(f"munged does not start here: {started.stderr.strip()[-300:]}")
        pids["munged"] = _pid(folder / "munged.pid")
        for daemon in (["slurmctld", "-c"], ["slurmd"]):
            started = subprocess.run(daemon, env=env, capture_output=True, text=True, timeout=30)
            if started.returncode != 0:
                pytest.skip(f"{daemon[0]} does not start here: {started.stderr.strip()[-300:]}")
        wait_for(lambda: _pid(folder / "slurmctld.pid") and _pid(folder / "slurmd.pid"), 30,
                 what="the daemons' pid files")  # fmt: skip
        pids["slurmctld"] = _pid(folder / "slurmctld.pid")
        pids["slurmd"] = _pid(folder / "slurmd.pid")

        def idle():
            out = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True,
                                 text=True).stdout  # fmt: skip
            return out.strip() == "idle"

        wait_for(idle, 60, what=f"an idle node (logs in {folder})")
        yield env, folder
    finally:
        subprocess.run(["scancel", "--full", "--user=root"], env=env, capture_output=True)
        wait_until(lambda: not subprocess.run(
            ["squeue", "-h"], env=env, capture_output=True, text=True
        ).stdout.strip(), 60)  # fmt: skip
        for name in ("slurmd", "slurmctld", "munged"):
            pid = pids.get(name)
            if _alive(pid):
                os.kill(pid, signal.SIGTERM)
                if not wait_until(lambda: not _alive(pid), 30):  # noqa: B023 (waited for here)
                    os.kill(pid, signal.SIGKILL)
        assert not [n for n, p in pids.items() if _alive(p)], "a daemon outlived the test"


def launch(env, logdir, *flags, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "seedlike.launch.slurm", f"--logdir={logdir}", *flags],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def job_id(done) -> str:
    assert done.returncode == 0, done.stderr[-2000:]
    return re.match(r"submitted job (\d+):", done.stdout).group(1)


def state(env, job: str) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=env, capture_output=True,
                         text=True)  # fmt: skip
    return out.stdout.strip()


QUICK = ("--config.log.interval_s=1", "--config.log.wandb_mode=disabled")


@pytest.mark.slow  # a real cluster and a real run on it: about 70 s
def test_a_run_trains_requeues_at_a_preemption_resumes_exactly_and_stops(cluster, tmp_path):
    env, folder = cluster
    # What cannot work: one line each, nothing queued.
    done = launch(env, tmp_path / "x", "--partition=nowhere", *QUICK)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.strip() == (
        "error: sbatch refused the job: Invalid partition name specified (--partition=nowhere; "
        "`sinfo` lists them)"
    )
    elsewhere = folder / "elsewhere.conf"
    elsewhere.write_text(re.sub(r"SlurmctldPort=\d+", f"SlurmctldPort={free_port()}",
                                (folder / "slurm.conf").read_text()))  # fmt: skip
    done = launch({**env, "SLURM_CONF": str(elsewhere)}, tmp_path / "x", *QUICK)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: the SLURM controller does not answer")
    assert not subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True).stdout

    # A job whose actors cannot run (Neural MMO's package is not installed here) ends, saying so.
    broken = tmp_path / "nmmo"
    broken_job = job_id(
        launch(env, broken, "--config=configs/nmmo_entities.py", "--actors=1", *QUICK)
    )
    run = tmp_path / "cartpole"
    job = job_id(launch(env, run, "--actors=1", "--config.total_env_steps=1000000000", *QUICK))
    logs = run / "slurm"
    wait_for(lambda: (last(run, "policy_version") or 0) >= 20, 180,
             what=f"training ({logs})")  # fmt: skip

    # Preempted: the learner checkpoints, the job requeues and starts again from that checkpoint.
    subprocess.run(["scancel", "--signal=USR1", "--batch", job], env=env, check=True)
    wait_for(lambda: "resumed from" in (logs / "learner.log").read_text(), 180,
             what=f"the requeued job's learner ({logs})")  # fmt: skip
    learner = (logs / "learner.log").read_text()
    saved = int(re.search(r"checkpoint (\d+) saved \(stop requested", learner).group(1))
    resumed = re.search(r"resumed from \S+ at env step (\d+), policy version (\d+)", learner)
    meta = Checkpointer(str(run / "checkpoints")).read_meta(saved)
    assert int(resumed.group(2)) == saved and int(resumed.group(1)) == meta["env_steps"]
    said = (logs / f"job_{job}.log").read_text()
    assert f"seedlike job {job} (start 0): checkpointed" in said and "requeueing" in said
    assert f"seedlike job {job} (start 1): learner on" in said
    wait_for(lambda: (last(run, "policy_version") or 0) > saved + 10, 120, what="training again")

    # Cancelled: the learner checkpoints once more and nothing of the job is left.
    subprocess.run(["scancel", job], env=env, check=True)
    wait_for(lambda: not state(env, job), 90, what="the cancelled job to end")
    assert len(re.findall(r"saved \(stop requested", (logs / "learner.log").read_text())) == 2
    assert "stopped and checkpointed" in (logs / f"job_{job}.log").read_text()
    assert not pids_matching(f"--logdir={run}") and not pids_matching(f"{run}")

    # Submitted again with a budget just past where it stopped: it resumes and finishes, and a
    # finished run ends its job as done (the actors leave first, at the end of training).
    steps = int(last(run, "env_steps"))
    again = job_id(launch(env, run, "--actors=1", f"--config.total_env_steps={steps + 20000}",
                          *QUICK))  # fmt: skip
    wait_for(lambda: not state(env, again), 180, what="the resubmitted run to finish")
    said = (logs / f"job_{again}.log").read_text()
    assert "the learner exited with status 0" in said and "stopping the job" not in said, said
    assert (last(run, "env_steps") or 0) >= steps + 20000

    wait_for(lambda: not state(env, broken_job), 180, what="the job without actors to end")
    said = (broken / "slurm" / f"job_{broken_job}.log").read_text()
    line = [x for x in said.splitlines() if "the actors' step ended" in x]
    assert line and "status 2" in line[0] and "nmmo_venv.sh" in line[0], said[-2000:]
    assert not pids_matching(f"{broken}")


def test_the_job_script_asks_sbatch_for_what_the_flags_say(tmp_path):
    job = slurm.Job(
        config="/repo/configs/atari_ppo.py", logdir=str(tmp_path / "run"), actors=32,
        cpus_per_actor=2, nodes=4, gpus=1, partition="gpu", time="24:00:00", signal_s=150,
        python="/venv/bin/python", sbatch=("--qos=long",),
        config_flags=("--config.seed=3", "--config.env.name=Pong-v5"),
    )  # fmt: skip
    script = slurm.job_script(job, stop_grace_s=20.0)
    options = [line.split(" ", 1)[1] for line in script.splitlines() if line.startswith("#SBATCH")]
    assert options == [
        "--job-name=seedlike-run", "--nodes=4", "--ntasks=32", "--cpus-per-task=2",
        f"--output={tmp_path}/run/slurm/job_%j.log", "--open-mode=append", "--requeue",
        "--signal=B:USR1@150", "--gres=gpu:1", "--partition=gpu", "--time=24:00:00", "--qos=long",
    ]  # fmt: skip
    # The settings the job body reads, run through bash as the job would.
    body = script.replace("exec bash", "echo") + 'printf "%s|" "$SEEDLIKE_CONFIG_FLAGS"'
    shown = subprocess.run(["bash", "-c", body], capture_output=True, text=True, check=True).stdout
    assert shown.endswith(
        "--config.seed=3\n--config.env.name=Pong-v5\n--config.checkpoint.stop_grace_s=20|"
    )


def test_the_learners_stop_grace_ends_before_slurm_kills():
    assert slurm.stop_grace(60.0, kill_wait=30.0) == 20.0  # KillWait's default
    assert slurm.stop_grace(60.0, kill_wait=300.0) == 60.0  # the config's, when it fits
    assert slurm.stop_grace(60.0, kill_wait=8.0) == 5.0  # never below 5 s
