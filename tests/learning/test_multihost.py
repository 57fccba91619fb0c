"""Several learner processes act as one learner (seedlike.runtime.distributed): 2 processes x 1 CPU
device, joined on loopback with gloo collectives, compute the update of 1 process x 2 devices."""

import os
import re
import signal
import subprocess
import sys

import jax
import numpy as np
import pytest

from networks import make_network
from seedlike.learning.update import Learner
from tests.helpers import LEARNER_SPEC as SPEC
from tests.helpers import random_unrolls, variant_config
from tests.learning.multihost_worker import BASE_ENV_STEPS
from tests.procs import CONFIG, ROOT, Processes, free_port, last, log_text, metrics, wait_for

pytestmark = pytest.mark.slow  # several processes: scripts/test.sh --fast leaves them out
ONE_DEVICE = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}


def run_processes(tmp_path, variant, num_processes=2):
    """Runs the worker as num_processes learner processes; returns each one's npz contents."""
    coordinator = f"127.0.0.1:{free_port()}"
    procs, outs = [], []
    for i in range(num_processes):
        outs.append(os.path.join(tmp_path, f"process_{i}.npz"))
        log = open(os.path.join(tmp_path, f"process_{i}.log"), "wb")
        args = [coordinator, str(num_processes), str(i), variant, outs[-1]]
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "tests.learning.multihost_worker", *args],
                cwd=ROOT,
                env=ONE_DEVICE,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
    try:
        for i, proc in enumerate(procs):
            code = proc.wait(timeout=240)
            text = open(os.path.join(tmp_path, f"process_{i}.log"), errors="replace").read()
            assert code == 0, f"learner process {i} exited with {code}:\n{text[-3000:]}"
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return [dict(np.load(out)) for out in outs]


def reference(variant):
    """One process, two devices, the batch shuffled in two blocks as two hosts would."""
    config = variant_config(variant)
    network = make_network(config.network, SPEC)
    learner = Learner(
        config,
        network,
        window_s=config.server.fair_window_s,
        devices=jax.local_devices()[:2],
        shuffle_blocks=2,
    )
    initial = learner.init_state(jax.random.key(0))
    learner.set_state(initial)
    metrics = []
    for i in range(2):
        unrolls = random_unrolls(
            network, initial.params, initial.obs_norm, config.batch_unrolls, config.unroll_length, i
        )
        metrics.append(learner.update(unrolls))
    return learner.state(), metrics, initial


@pytest.mark.parametrize("variant", ["ppo", "vtrace_lstm"])
def test_two_processes_compute_the_update_of_one_process_with_two_devices(tmp_path, variant):
    results = run_processes(tmp_path, variant)
    state, metrics, initial = reference(variant)
    expected = {
        f"state/{jax.tree_util.keystr(path)}": np.asarray(leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]
    }
    start = {
        f"state/{jax.tree_util.keystr(path)}": np.asarray(leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(initial)[0]
    }
    moved = max(float(np.max(np.abs(expected[k] - start[k]))) for k in expected if "params" in k)
    assert moved > 1e-3, "the update must change the parameters"
    for i, result in enumerate(results):
        assert list(result["devices"]) == [2, 1], "2 devices in all, 1 per process"
        assert int(result["local_batch_unrolls"]) == 2
        for key, value in expected.items():
            np.testing.assert_allclose(
                result[key], value, rtol=1e-5, atol=1e-6, err_msg=f"process {i}: {key}"
            )
        keys = list(result["metric_keys"])
        assert keys == sorted(metrics[0])
        got = result["metrics"]
        want = np.array([[m[k] for k in keys] for m in metrics])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
        # Process 0's counters reach everyone, whole above 2**31.
        assert list(result["counters"]) == [BASE_ENV_STEPS, 11]
        # Steps agreed before each update: 100 + 200, then 200 + 400, then 1000 + 1000 in all.
        assert int(result["env_steps"]) == BASE_ENV_STEPS + 2000
        # Only the last process asked to stop, at the last agreement: every process stops there.
        assert list(result["stops"]) == [False, False, True]


def test_two_learner_processes_train_stop_together_and_resume(tmp_path):
    """learner.py as 2 processes with an actor each: SIGTERM to process 1 alone stops both after
    the same update; process 0 saves; restarted, process 1 gets process 0's checkpoint and both
    finish together; SIGKILL to process 1 ends process 0 with a checkpoint and a one-line error."""
    logdir = str(tmp_path / "run")
    coordinator = f"127.0.0.1:{free_port()}"
    procs = Processes(tmp_path)
    dirs = [logdir, os.path.join(logdir, "process_1")]
    ports = [free_port(), free_port()]  # the same after the restart: the actors wait there

    def start(name, *flags):
        for d in dirs:
            if os.path.exists(os.path.join(d, "server_address")):
                os.remove(os.path.join(d, "server_address"))
        learners = []
        for k in range(2):
            learners.append(
                procs.spawn(
                    [
                        "learner.py", f"--config={CONFIG}", f"--logdir={logdir}",
                        f"--port={ports[k]}",
                        "--config.log.interval_s=1", "--config.log.wandb_mode=disabled",
                        "--config.distributed.num_processes=2",
                        f"--config.distributed.coordinator={coordinator}",
                        f"--config.distributed.process_id={k}", *flags,
                    ],
                    f"{name}_{k}.log",
                    env=ONE_DEVICE,
                )
            )  # fmt: skip
        addresses = [
            wait_for(lambda d=d: read(os.path.join(d, "server_address")), 120, p, "learner start")
            for d, p in zip(dirs, learners)
        ]
        return learners, addresses

    try:
        learners, addresses = start("learner", "--config.total_env_steps=100000000")
        actors = [procs.actor(address, k) for k, address in enumerate(addresses)]
        wait_for(lambda: (last(logdir, "policy_version") or 0) >= 4, 120, learners[0], "training")
        learners[1].send_signal(signal.SIGTERM)
        assert [p.wait(timeout=60) for p in learners] == [0, 0]
        saved = re.findall(r"checkpoint (\d+) saved \(stop requested; params (\w+)\)",
                           log_text(learners[0]))  # fmt: skip
        held = re.findall(r"process 1 at policy version (\d+) \(stop requested; params (\w+)\)",
                          log_text(learners[1]))  # fmt: skip
        assert saved and held and saved[-1] == held[-1], "both processes hold the saved params"
        rows = [metrics(d)[-1] for d in dirs]
        assert rows[0]["policy_version"] == rows[1]["policy_version"] == int(saved[-1][0])
        assert rows[0]["env_steps"] == rows[1]["env_steps"], "steps are counted across processes"
        assert not os.path.exists(os.path.join(dirs[1], "checkpoints")), "process 0 saves"
        assert all(a.poll() is None for a in actors), "actors wait for the learners to return"

        total = rows[0]["env_steps"] + 3000
        learners, _ = start("resumed", f"--config.total_env_steps={total}")
        assert [p.wait(timeout=120) for p in learners] == [0, 0]
        resumed = re.search(r"state from process 0: env step (\d+), policy version (\d+) "
                            r"\(params (\w+)\)", log_text(learners[1]))  # fmt: skip
        assert resumed.groups() == (str(rows[0]["env_steps"]), *saved[-1])
        assert "training complete" in log_text(learners[0])
        assert metrics(logdir)[-1]["env_steps"] >= total
        for actor in actors:
            assert actor.wait(timeout=60) == 0, "training over: the actors end normally"

        # A learner process that dies takes the others down, with the last complete version
        # saved and one line saying how to go on, also while they wait for batches and run no
        # collective (its actors gone too): then PeerWatch notices, before JAX's heartbeat would
        # abort them.
        done = metrics(logdir)[-1]["policy_version"]
        learners, addresses = start(
            "killed", "--config.total_env_steps=100000000", "--config.distributed.peer_timeout_s=5"
        )
        actors = [procs.actor(address, k) for k, address in enumerate(addresses)]
        wait_for(
            lambda: (
                "resumed from" in log_text(learners[0])
                and last(logdir, "policy_version") >= done + 3
            ),
            120,
            learners[0],
            "more updates",
        )
        for actor in actors:
            actor.kill()
        learners[1].kill()
        assert learners[0].wait(timeout=60) == 1
        text = log_text(learners[0])
        assert "error: another learner process stopped answering" in text
        assert "Traceback" not in text
        assert int(re.findall(r"checkpoint (\d+) saved", text)[-1]) >= done + 3
    finally:
        procs.stop_all()


def read(path):
    return os.path.exists(path) and open(path).read().strip()
