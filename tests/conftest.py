"""Test setup: two forced CPU devices (before JAX is imported), no wandb, a shared JAX
compilation cache, and the `procs` fixture (learner and actor processes, always stopped)."""

import os

import pytest

from seedlike.runtime import xla_flags

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
# wandb's offline run costs every learner process about a second and a service process of its own;
# the tests of that path (tests/core/test_metrics.py) set WANDB_MODE=offline themselves.
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One persistent compilation cache for this process and every learner, actor and notebook kernel
# it starts: the same CartPole and TicTacToe programs are compiled by dozens of processes, and
# reusing them took 3 integration tests from 76 s to 59 s on a cold cache here. It lives in the
# user's cache, not the checkout, so that a fresh clone's suite starts warm too (the whole suite
# took 18:48 with an empty cache and 14:15 with a full one, 2026-11-28). Entries are keyed by
# program, flags and JAX version, so results are unchanged and checkouts can share it.
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR",
    os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "seedlike", "jax-tests"
    ),
)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
xla_flags.tune_cpu()


@pytest.fixture
def procs(tmp_path):
    from tests.procs import Processes

    p = Processes(tmp_path)
    yield p
    p.stop_all()
