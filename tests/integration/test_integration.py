"""End to end with real processes: a learner (gRPC server + learning) and actors on loopback."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import grpc
import jax
import numpy as np
import pytest

import seedlike
from networks import make_network
from seedlike.checkpoint import Checkpointer, params_fingerprint
from seedlike.config import load_config_file
from seedlike.envs.envpool_env import make_env_spec
from seedlike.learning import train_state as ts
from seedlike.rpc import codec
from seedlike.rpc.codec import STREAM_METHOD
from seedlike.scores import final_score
from seedlike.types import ArraySpec, EnvSpec, Rows
from tests.procs import (
    CONFIG,
    HAS_NMMO,
    ROOT,
    failure_text,
    free_port,
    group_members,
    last,
    log_text,
    metrics,
    pids_matching,
    wait_for,
)

# Multi-process and learning runs: scripts/test.sh --fast leaves them out.
pytestmark = pytest.mark.slow

FAST = ["--config.log.interval_s=1", "--config.total_env_steps=100000000"]
ONE_DEVICE = {**os.environ, "XLA_FLAGS": ""}

REQUIRED_KEYS = {
    "time", "env_steps", "policy_version", "sps", "episodes",
    "episode_return_mean", "episode_length_mean", "staleness_mean", "sample_reuse", "rfps", "cfps",
    "inference_batch_mean", "inference_latency_ms_p50", "inference_latency_ms_p99",
    "inference_window_ms",
    "loss/total", "loss/policy", "loss/value", "loss/entropy",
    "process/rss_mb", "process/cpu", "process/threads", "process/open_files",
}  # fmt: skip


def version(logdir) -> int:
    return last(logdir, "policy_version", 0) or 0


def test_train_sh_learns_cartpole_and_stops_everything(tmp_path, procs):
    """Through the library API (seedlike.train runs scripts/train.sh), as a notebook would."""
    logdir = tmp_path / "run"
    run = seedlike.train(
        logdir=str(logdir), overrides={"total_env_steps": 70_000, "log.interval_s": 2}
    )
    assert run.wait(timeout=600) == 0, run.log()
    rows = metrics(logdir)
    assert REQUIRED_KEYS <= set(rows[-1]), REQUIRED_KEYS - set(rows[-1])
    returns = [r["episode_return_mean"] for r in rows if r["episode_return_mean"] is not None]
    # A random CartPole policy averages ~22, but the first reported mean may already follow ten
    # updates (it waits until more than half of the connected actors have each finished an
    # episode, and one update takes tens of milliseconds), so only its rise is asserted.
    assert max(returns) >= 200 and returns[0] < 0.75 * max(returns), returns
    assert rows[-1]["env_steps"] >= 70_000
    # The final row may cover a moment without an update (its learner values are null).
    learned = [r for r in rows if r["staleness_mean"] is not None]
    assert 0 <= learned[-1]["staleness_mean"] < 5 and learned[-1]["sample_reuse"] > 1
    # The learner's own usage: a JAX runtime, gRPC's pools and the run's files, a busy core.
    own = rows[-2]
    assert 100 < own["process/rss_mb"] < 8192 and own["process/threads"] >= 4, own
    assert own["process/open_files"] >= 5 and 0.1 < own["process/cpu"] <= os.cpu_count(), own
    address = open(logdir / "server_address").read().strip()
    assert not pids_matching(f"--server={address}"), "train.sh left actor processes behind"
    # The run explains itself: its resolved config, and a summary of what it reached.
    assert json.loads((logdir / "config.json").read_text())["total_env_steps"] == 70_000
    done = json.loads((logdir / "summary.json").read_text())
    assert done["outcome"] == "finished" and done["env_steps"] == rows[-1]["env_steps"]
    assert done["final_return"] == pytest.approx(final_score(rows, weight="episodes"))
    low, high = done["final_return_ci95"]
    assert low <= done["final_return"] <= high and (logdir / "summary.md").exists()
    # Run again, it says it is finished and starts nothing (no row, no actor log, exit 0).
    again = subprocess.run(
        ["scripts/train.sh", f"--logdir={logdir}", "--config.total_env_steps=70000"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "SEEDLIKE_PYTHON": sys.executable},
    )  # fmt: skip
    assert again.returncode == 0 and "is finished at" in again.stdout, again
    assert "--config.total_env_steps" in again.stdout and len(metrics(logdir)) == len(rows)

    # The final checkpoint serves as a frozen policy that plays (greedily) as well as it trained,
    # for a fixed number of episodes.
    serve_dir = tmp_path / "serve"
    server = procs.spawn(
        ["inference_server.py", f"--checkpoint={logdir}", f"--logdir={serve_dir}", "--port=0",
         "--greedy", "--episodes=20", "--interval_s=1"],
        "inference_server.log",
    )  # fmt: skip
    wait_for(lambda: (serve_dir / "server_address").exists(), 120, server, "inference server")
    actor = procs.actor((serve_dir / "server_address").read_text().strip(), 5)
    assert actor.wait(timeout=300) == 0, log_text(actor)[-3000:]
    assert server.wait(timeout=60) == 0, log_text(server)[-3000:]
    served = [r for r in metrics(serve_dir) if r["episode_return_mean"] is not None]
    assert served and all(r["policy_version"] == rows[-1]["policy_version"] for r in served)
    summary = json.loads(log_text(server).split("served: ", 1)[1].splitlines()[0])
    assert summary["episodes"] == 20
    # Serving untrained parameters would play near a random policy's ~22; the trained one,
    # greedily, played 280 in a CI run whose last reports swung 393, 273, 214 (each a 2 s
    # window of a stochastic policy), so a fixed bar far above random holds on any machine.
    assert summary["episode_return_mean"] >= 100, (summary, returns)

    # Ctrl-C twice in a terminal (two SIGINTs to the job's process group, 0.5 s apart): the
    # resumed job checkpoints a later version, and the script returns only when every process
    # it started has ended. (Stopped once it has learned, not while it still compiles.)
    done_version = rows[-1]["policy_version"]
    more = train_as_from_a_terminal(logdir=str(logdir), overrides={"total_env_steps": 10**9})
    more.process.log_path = os.path.join(logdir, "console.log")  # for wait_for's messages
    wait_for(lambda: version(logdir) > done_version, 300, more.process, "the resumed job")
    assert ctrl_c_twice(more) == 130, more.log()  # train.sh's status after Ctrl-C
    stacks = logdir / "stop_stacks.txt"  # written only when the learner missed its stop grace
    why = more.log(3000) + (stacks.read_text() if stacks.exists() else "")
    assert Checkpointer(str(logdir / "checkpoints")).steps()[-1] > done_version, why


def train_as_from_a_terminal(**kwargs) -> seedlike.Run:
    """seedlike.train with SIGINT at its default in the job, as a terminal's foreground job has
    it (this test process may have inherited it ignored, e.g. from a CI started with `&`, and a
    shell cannot trap a signal ignored on entry)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return seedlike.train(**kwargs)
    finally:
        signal.signal(signal.SIGINT, previous)


def ctrl_c_twice(run: seedlike.Run) -> int:
    """Two SIGINTs to the job's process group 0.5 s apart; returns train.sh's exit status once it
    has exited, after checking that no process of the job outlived it."""
    os.killpg(run.process.pid, signal.SIGINT)
    time.sleep(0.5)
    os.killpg(run.process.pid, signal.SIGINT)
    status = run.process.wait(timeout=120)
    assert not group_members(run.process.pid), group_members(run.process.pid)
    return status


def test_ctrl_c_twice_during_start_up_leaves_no_process_behind(tmp_path):
    """Two Ctrl-Cs while the learner is still starting (importing JAX, building the network):
    the prompt used to come back while the learner went on to serve and save a checkpoint."""
    logdir = tmp_path / "run"
    run = train_as_from_a_terminal(logdir=str(logdir), overrides={"total_env_steps": 10**9})
    # Its stop handler is in place (the first line of its log) and it does not serve yet.
    console = logdir / "console.log"
    wait_for(lambda: "device(s)" in console.read_text(), 120, what="the learner's first line")
    assert ctrl_c_twice(run) == 130, run.log()
    assert not pids_matching(f"--logdir={logdir}"), run.log()


def test_ssh_actors_train_over_tls_and_end_with_the_run(tmp_path, procs):
    """scripts/ssh_actors.sh with tests/fake_ssh standing in for ssh: two "hosts", one actor
    each with the host's own certificate (two identities), TLS and the run token, until the
    learner finishes."""
    from tests.helpers import make_credentials

    creds = make_credentials(tmp_path / "creds", "learner-host", actors=("h1", "h2"))
    tls = f"--config.transport.credentials={creds}"
    logdir = str(tmp_path / "run")
    learner, address = procs.learner(logdir, tls, "--config.total_env_steps=12000")
    launcher = subprocess.run(
        [
            "scripts/ssh_actors.sh", "--hosts=h1,h2", f"--server={address}",
            f"--credentials={creds}/actors/{{host}}",
            f"--remote_dir={ROOT}", f"--logdir={tmp_path}/ssh", "--first_actor_id=4",
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "SSH": os.path.join(ROOT, "tests", "fake_ssh"), "FAKE_SSH_HOME": "/"},
    )  # fmt: skip
    assert launcher.returncode == 0, launcher.stdout + launcher.stderr
    assert learner.wait(timeout=120) == 0
    assert "actor 4 on h1" in launcher.stdout and "actor 5 on h2" in launcher.stdout
    for log in ("h1_4.log", "h2_5.log"):
        assert "connected to" in (tmp_path / "ssh" / log).read_text()
    assert last(logdir, "env_steps") >= 12000
    assert max(r["episode_identities"] for r in metrics(logdir)) == 2


def test_train_sh_restarts_a_crashed_actor_and_stops_when_it_keeps_failing(tmp_path):
    logdir, stderr = tmp_path / "run", tmp_path / "stderr.txt"
    with open(stderr, "w") as err:
        job = subprocess.Popen(
            ["scripts/train.sh", f"--logdir={logdir}", "--num_actors=1",
             "--max_actor_restarts=1", *FAST],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, env=ONE_DEVICE,
            start_new_session=True,
        )  # fmt: skip
    job.log_path = str(stderr)  # for wait_for's messages
    try:

        def actor_pid():
            pids = pids_matching(f"--server={(logdir / 'server_address').read_text().strip()}")
            return pids[0] if len(pids) == 1 else None

        wait_for(lambda: (logdir / "server_address").exists(), 120, job, "learner")
        wait_for(lambda: actor_pid() and last(logdir, "actors_connected", 0), 120, job, "actor")
        first = actor_pid()
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: actor_pid() not in (None, first), 60, job, "the restarted actor")
        assert "restarting actor 0 (1 of 1)" in stderr.read_text()
        os.kill(actor_pid(), signal.SIGKILL)
        assert job.wait(timeout=120) == 1
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    text = stderr.read_text()
    assert "actor 0 exited with status 137" in text, text  # 128 + SIGKILL
    assert "stopping the job: actor 0 cannot run" in text and f"--logdir={logdir}" in text, text
    # The learner was stopped cleanly: it checkpointed, and nothing is left running.
    assert Checkpointer(str(logdir / "checkpoints")).steps()
    address = (logdir / "server_address").read_text().strip()
    for pattern in (f"--server={address}", f"--logdir={logdir}"):
        assert not pids_matching(pattern), f"train.sh left processes behind: {pattern}"


def test_curriculum_sh_continues_one_run_across_environments(tmp_path):
    """CartPole-v0 (episodes end at 200 steps) then CartPole-v1 (500): one run, one step counter."""
    # The script is under test, not pmap: one device starts the learner twice as fast here.
    logdir = tmp_path / "run"
    result = subprocess.run(
        ["scripts/curriculum.sh", f"--logdir={logdir}",
         "--stages=CartPole-v0:20000,CartPole-v1:40000", "--config.log.interval_s=1"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env=ONE_DEVICE,
    )  # fmt: skip
    assert result.returncode == 0, failure_text(result.stderr)
    resumed = re.findall(r"resumed from \S+ at env step (\d+)", result.stderr)
    assert len(resumed) == 1 and int(resumed[0]) >= 20_000, failure_text(result.stderr)
    rows = metrics(logdir)
    first = [r for r in rows if r["env_steps"] <= int(resumed[0])]
    assert first and all(
        r["episode_length_mean"] is None or r["episode_length_mean"] <= 200 for r in first
    )
    assert rows[-1]["env_steps"] >= 40_000
    checkpoints = Checkpointer(str(logdir / "checkpoints"))
    try:
        meta = checkpoints.read_meta(checkpoints.steps()[-1])
    finally:
        checkpoints.close()
    assert meta["config"]["env"]["name"] == "CartPole-v1" and meta["env_steps"] >= 40_000

    bad = subprocess.run(
        ["scripts/curriculum.sh", f"--logdir={logdir}",
         "--stages=CartPole-v1:40000,CartPole-v0:100"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "STEPS increasing" in bad.stderr


def test_killed_actor_is_dropped_and_a_restarted_one_reconnects(tmp_path, procs):
    logdir = str(tmp_path / "run")
    learner, address = procs.learner(logdir, *FAST)
    first = procs.actor(address, 0)
    procs.actor(address, 1)
    wait_for(
        lambda: version(logdir) >= 5 and last(logdir, "actors_connected") == 2,
        120,
        learner,
        "training",
    )
    assert last(logdir, "steps_dropped") == 0

    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    killed_at = version(logdir)
    wait_for(
        lambda: last(logdir, "actors_connected") == 1 and version(logdir) >= killed_at + 5,
        120, learner, "training to continue with one actor",
    )  # fmt: skip
    # The dead actor's partial unrolls were discarded (every seat had at least one recorded step).
    assert last(logdir, "steps_dropped") >= 16

    restarted = procs.actor(address, 0)
    wait_for(lambda: last(logdir, "actors_connected") == 2, 60, learner, "the restarted actor")
    resumed_at = version(logdir)
    wait_for(lambda: version(logdir) >= resumed_at + 3, 60, learner, "training with both actors")
    assert "connected to" in log_text(restarted)
    learner.send_signal(signal.SIGTERM)
    assert learner.wait(timeout=60) == 0


def _raw_stream(address, messages):
    channel = grpc.insecure_channel(address)
    try:
        call = channel.stream_stream(STREAM_METHOD)(iter(messages), timeout=30)
        return list(call)
    finally:
        channel.close()


def test_malformed_requests_are_rejected_while_an_actor_keeps_training(tmp_path, procs):
    logdir = str(tmp_path / "run")
    learner, address = procs.learner(logdir, *FAST)
    actor = procs.actor(address, 0)
    wait_for(lambda: version(logdir) >= 3, 120, learner, "training")

    spec = EnvSpec("CartPole-v1", {"obs": ArraySpec(np.float32, (4,))}, num_actions=2)
    hello = codec.pb.ActorMessage(
        hello=codec.make_hello(spec, actor_id=9, num_envs=2)
    ).SerializeToString()

    def step(obs, **kw):
        fields = dict(
            sequence=0, obs={"obs": obs}, reward=np.zeros(2, np.float32),
            terminated=np.zeros(2, bool), truncated=np.zeros(2, bool),
            env_id=np.arange(2, dtype=np.int32), player_id=np.zeros(2, np.int32),
            acting=np.ones(2, bool),
        )  # fmt: skip
        fields.update(kw)
        sequence = fields.pop("sequence")
        rows = Rows(extras={}, game_over=None, **fields)
        return codec.encode_step(sequence, rows).SerializeToString()

    good_obs = np.zeros((2, 4), np.float32)
    wrong_env = codec.make_hello(EnvSpec("Acrobot-v1", spec.observation, 2), 9, 2)
    cases = {
        "garbage": ([b"\xff\xff\xff garbage bytes"], "request: not a seedlike.ActorMessage"),
        "no hello": ([step(good_obs)], "request.hello"),
        "wrong env": (
            [codec.pb.ActorMessage(hello=wrong_env).SerializeToString()],
            "hello.env_name",
        ),
        "wrong dtype": (
            [hello, step(good_obs.astype(np.float64))],
            "step.observation['obs']: dtype float64",
        ),
        "wrong shape": (
            [hello, step(np.zeros((2, 5), np.float32))],
            "step.observation['obs']: shape [2, 5]",
        ),
        "unknown field": (
            [hello, step(good_obs) + b"\x98\x06\x05"],
            "unknown field number(s) [99]",
        ),
        "nan reward": (
            [hello, step(good_obs, reward=np.array([0, np.nan], np.float32))],
            "step.reward",
        ),
    }
    for name, (messages, expected) in cases.items():
        with pytest.raises(grpc.RpcError) as info:
            _raw_stream(address, messages)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, name
        assert expected in info.value.details(), (name, info.value.details())

    # A well-formed stream still works after all that, and the real actor never stopped.
    replies = _raw_stream(address, [hello, step(good_obs)])
    assert len(replies) == 2
    rejected_at = version(logdir)
    wait_for(
        lambda: version(logdir) >= rejected_at + 3, 60, learner, "training after the bad requests"
    )
    wait_for(lambda: last(logdir, "actors_connected") == 1, 10, learner, "bad sessions to close")
    assert actor.poll() is None


def test_sigterm_checkpoints_and_restart_resumes_with_identical_params(tmp_path, procs):
    logdir = str(tmp_path / "run")
    port = free_port()
    learner, address = procs.learner(logdir, *FAST, port=port)
    actors = [procs.actor(address, i) for i in range(2)]
    wait_for(lambda: version(logdir) >= 5, 120, learner, "training")

    learner.send_signal(signal.SIGTERM)
    assert learner.wait(timeout=60) == 0
    saved = re.findall(
        r"checkpoint (\d+) saved \(stop requested; params (\w+)\)", log_text(learner)
    )
    assert saved, log_text(learner)[-3000:]
    saved_step, saved_fingerprint = int(saved[-1][0]), saved[-1][1]
    saved_env_steps = metrics(logdir)[-1]["env_steps"]

    # The checkpoint on disk holds exactly those parameters.
    config = load_config_file(CONFIG)
    network = make_network(config.network, make_env_spec(config.env))
    target = ts.init_train_state(network, ts.make_optimizer(config.optimizer), jax.random.key(0))
    checkpointer = Checkpointer(os.path.join(logdir, "checkpoints"))
    state, meta = checkpointer.restore(target)
    checkpointer.close()
    assert params_fingerprint(state.params) == saved_fingerprint
    assert int(state.policy_version) == saved_step and meta["env_steps"] == saved_env_steps

    # Actors outlive the learner: they keep retrying and rejoin the restarted one on the same port.
    assert all(a.poll() is None for a in actors)
    learner, _ = procs.learner(logdir, *FAST, port=port, name="learner2.log")
    wait_for(lambda: "resumed from" in log_text(learner), 60, learner, "resume")
    resumed = re.search(
        r"resumed from .* at env step (\d+), policy version (\d+) \(params (\w+)\)",
        log_text(learner),
    )
    assert resumed.groups() == (str(saved_env_steps), str(saved_step), saved_fingerprint)
    wait_for(
        lambda: version(logdir) >= saved_step + 3 and last(logdir, "actors_connected") == 2,
        120,
        learner,
        "resumed training",
    )
    assert metrics(logdir)[-1]["env_steps"] > saved_env_steps
    learner.send_signal(signal.SIGTERM)
    assert learner.wait(timeout=60) == 0


def test_a_stop_request_during_a_long_update_is_honoured_within_the_grace(tmp_path, procs):
    """Issue 33: a CPU learner inside a long update ignored SIGTERM for over 10 minutes. Updates
    here take seconds (400 epochs): SIGTERM in the second abandons it at the next epoch and
    saves version 1. Restarted with checkpoint.stop_grace_s far shorter than a save, a stop
    request ends the learner at the grace with one line that names a file of every thread's
    stack, the saved checkpoint intact."""
    logdir = str(tmp_path / "run")
    slow = [*FAST, "--config.ppo.epochs=400"]
    learner, address = procs.learner(logdir, *slow)
    procs.actor(address, 0)
    wait_for(lambda: version(logdir) >= 1, 180, learner, "a first update")
    learner.send_signal(signal.SIGTERM)
    assert learner.wait(timeout=60) == 0
    log = log_text(learner)
    assert re.search(r"update \d+ abandoned at a stop request", log), log[-3000:]
    saved = re.findall(r"checkpoint (\d+) saved \(stop requested", log)
    assert saved and int(saved[-1]) >= 1

    learner, _ = procs.learner(
        logdir, *slow, "--config.checkpoint.stop_grace_s=0.001", name="learner2.log"
    )
    wait_for(lambda: "resumed from" in log_text(learner), 120, learner, "resume")
    learner.send_signal(signal.SIGTERM)
    assert learner.wait(timeout=60) == 1
    last_line = log_text(learner).strip().splitlines()[-1]
    assert last_line.startswith("error: the learner did not stop within 0.001 s"), last_line
    stacks = os.path.join(logdir, "stop_stacks.txt")
    assert last_line.endswith(f"thread stacks in {stacks}"), last_line
    with open(stacks) as f:  # what held the learner: its main thread's stack among them
        assert "most recent call first" in f.read()
    names = os.listdir(os.path.join(logdir, "checkpoints"))
    assert saved[-1] in names


def test_a_checkpoint_directory_that_fails_ends_the_learner_in_one_line(tmp_path, procs):
    """A save that cannot be written (here: the directory replaced by a file) ends the learner
    within seconds, saying where and why; it used to hang on orbax's threads, deaf to SIGTERM."""
    logdir = tmp_path / "run"
    learner, address = procs.learner(
        str(logdir), "--config.checkpoint.interval_s=2", "--config.log.interval_s=1"
    )
    procs.actor(address, 0)
    ckpts = logdir / "checkpoints"

    # Two saves committed and none under way: a save caught mid-write fails inside tensorstore,
    # whose threads print errors of their own.
    def between_saves():
        names = os.listdir(ckpts)
        return len(names) >= 2 and not any("tmp" in n for n in names)

    wait_for(between_saves, 120, learner, "two checkpoints")
    ckpts.rename(logdir / "checkpoints.saved")
    ckpts.write_text("not a directory")
    assert learner.wait(timeout=60) == 1
    log = log_text(learner)
    assert "Traceback" not in log, log[-3000:]
    last_line = log.strip().splitlines()[-1]
    # The OS's reason depends on which step of the save met the change (ENOTDIR, ENOENT, ...).
    assert re.match(r"error: cannot write checkpoint \d+ in .*/run/checkpoints: \w", last_line)
    assert "The last complete checkpoint is" in last_line and "--logdir to resume" in last_line


@pytest.mark.skipif(HAS_NMMO, reason="nmmo is installed in this interpreter (CI's .venv has not)")
def test_an_actor_without_its_envs_package_stops_the_job_at_once_in_one_line(tmp_path):
    done = subprocess.run(
        ["scripts/train.sh", "--config=configs/nmmo_entities.py", f"--logdir={tmp_path / 'r'}",
         "--num_actors=1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    assert "restarted 0 of --max_actor_restarts" in done.stderr  # not restarted: it cannot help
    log = (tmp_path / "r" / "actor_0.log").read_text()
    assert "Traceback" not in log and "scripts/nmmo_venv.sh" in log, log[-3000:]
