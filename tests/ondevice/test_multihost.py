"""An on-device run over several hosts (seedlike.ondevice.run with config.distributed): 2
learner.py processes of 1 CPU device each, joined on loopback with gloo collectives, compute what
1 process of 2 devices computes, also when stopped and resumed (process 0's checkpoint holds both
processes' envs); a lost process ends the other in one line."""

import os

import jax
import numpy as np
import pytest

from seedlike import checkpoint as ckpt_lib
from seedlike.metrics import read_metrics, read_summary
from seedlike.ondevice import run
from tests.ondevice.test_run import CONFIG, config
from tests.procs import Processes, free_port, log_text, wait_for

pytestmark = pytest.mark.slow  # several processes: scripts/test.sh --fast leaves them out
ONE_DEVICE = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}
PER_VERSION = 4 * 16  # the config's 4 envs x unroll_length 16
SMALL = {"unroll_length": 16, "optimizer.anneal_lr": False}


def start(procs, logdir, name, *flags):
    coordinator = f"127.0.0.1:{free_port()}"
    return [
        procs.spawn(
            [
                "learner.py", f"--config={CONFIG}", f"--logdir={logdir}",
                "--config.unroll_length=16", "--config.optimizer.anneal_lr=False",
                "--config.log.wandb_mode=disabled", "--config.distributed.num_processes=2",
                f"--config.distributed.coordinator={coordinator}",
                f"--config.distributed.process_id={k}", *flags,
            ],
            f"{name}_{k}.log",
            env=ONE_DEVICE,
        )
        for k in range(2)
    ]  # fmt: skip


def params(logdir):
    return jax.tree.leaves(ckpt_lib.load_checkpoint(os.path.join(logdir, "checkpoints"))[2].params)


def test_two_processes_train_what_one_process_with_two_devices_trains(tmp_path):
    whole = str(tmp_path / "whole")
    run.train(config(**SMALL, total_env_steps=12 * PER_VERSION), whole)

    logdir = str(tmp_path / "hosts")
    procs = Processes(tmp_path)
    try:
        paused = start(procs, logdir, "paused", f"--config.total_env_steps={12 * PER_VERSION}",
                       f"--config.pause_at_env_steps={6 * PER_VERSION}")  # fmt: skip
        assert [p.wait(timeout=240) for p in paused] == [0, 0], log_text(paused[1])[-3000:]
        assert read_summary(logdir)["outcome"] == "paused"
        assert not os.path.exists(os.path.join(logdir, "process_1")), "process 0 writes"

        resumed = start(procs, logdir, "resumed", f"--config.total_env_steps={12 * PER_VERSION}")
        assert [p.wait(timeout=240) for p in resumed] == [0, 0], log_text(resumed[1])[-3000:]
    finally:
        procs.stop_all()
    rows = read_metrics(logdir)
    assert rows[-1]["policy_version"] == 12 and rows[-1]["env_steps"] == 12 * PER_VERSION
    assert read_summary(logdir)["outcome"] == "finished"
    # The gradients and statistics are sums of two devices' numbers either way (a + b = b + a).
    for x, y in zip(params(whole), params(logdir), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)


def test_a_lost_process_ends_the_other_in_one_line(tmp_path):
    logdir = str(tmp_path / "hosts")
    procs = Processes(tmp_path)
    try:
        flags = ["--config.total_env_steps=100000000", "--config.log.interval_s=0.5"]
        learners = start(procs, logdir, "learner", *flags, "--config.distributed.peer_timeout_s=5")
        wait_for(
            lambda: (
                os.path.exists(os.path.join(logdir, "metrics.jsonl"))
                and len(read_metrics(logdir)) >= 3
            ),
            120,
            learners[0],
            "training",
        )
        learners[1].kill()
        assert learners[0].wait(timeout=60) == 1
    finally:
        procs.stop_all()
    text = log_text(learners[0])
    assert "error: another learner process stopped answering" in text
    assert "Traceback" not in text
