"""Several learner hosts as one learner (SEED RL's multi-host layout), with `jax.distributed`.

Each learner process serves its own actors, runs inference on its own devices and keeps its own
trajectory store; it learns from batch_unrolls / num_processes unrolls of its own per update, and
the gradients are averaged over every device of every host (the learner's pmap spans them all).
The processes therefore call the same collectives in the same order, one update at a time:

  * process 0 restores the checkpoint and broadcasts the state and counters (`broadcast_start`);
    only it writes checkpoints (every host holds the same replicated state);
  * before each update the processes agree (`Lockstep.agree`) on the env steps received by all of
    them and on whether any wants to stop, so all stop after the same update.

With one process none of this runs a collective: `Lockstep` then only counts local steps.

A process that dies is noticed by the others through `PeerWatch` (a counter each process bumps in
the coordination service every second), also while they wait for batches and run no collective:
otherwise JAX's coordination service would end them with an abort once the dead process missed
its heartbeats (100 s), with no checkpoint and no word from seedlike.
"""

from __future__ import annotations

import logging
import queue
import signal
import threading
import time

import jax
import numpy as np


class PeerLost(RuntimeError):
    """A step shared by the learner processes failed, most often because one of them is gone.
    Entrypoints print the message alone and exit at once (JAX's shutdown would wait for a lost
    process); the full error is in the log."""


def peer_lost(error: Exception) -> PeerLost:
    first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return PeerLost(
        f"another learner process stopped answering, or a step shared with it failed "
        f"({first_line[:200]}; the whole error is logged above); restart every learner process "
        "with the same flags to resume from process 0's last checkpoint"
    )


def initialize(config, address: str = "") -> None:
    """Joins the run's learner processes (config.distributed); a no-op for a single process.

    Must run before anything starts a JAX backend. On CPU the collectives use gloo over TCP, and
    gloo tells the other processes to reach this one at what this machine's host name resolves
    to: where that is a loopback address (Debian's /etc/hosts maps it to 127.0.1.1) the others
    connect to themselves and fail. `address`, the host the learner binds for actors, is used
    instead when it names one (not 0.0.0.0 or loopback).
    """
    d = config.distributed
    if int(d.num_processes) <= 1:
        return
    logging.info(
        "learner process %d of %d, coordinator %s", d.process_id, d.num_processes, d.coordinator
    )
    # JAX's preemption notifier takes over SIGTERM when the process joins; the learner's own
    # handler (checkpoint, then stop every process at the same update) is put back.
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    jax.distributed.initialize(
        coordinator_address=d.coordinator,
        num_processes=int(d.num_processes),
        process_id=int(d.process_id),
        initialization_timeout=int(d.timeout_s),
    )
    host = address.strip("[]")
    if host and host not in ("0.0.0.0", "::") and not _is_loopback(host):
        _gloo_at(host)
    if threading.current_thread() is threading.main_thread():
        for signum, handler in handlers.items():
            if handler is not None:
                signal.signal(signum, handler)


def _is_loopback(host: str) -> bool:
    """Whether `host` (an address, or a name as this machine resolves it) is a loopback one."""
    import ipaddress
    import socket

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return True  # unresolvable here: leave gloo to the host name, as jax would


def _gloo_at(host: str) -> None:
    """The CPU backend, when it starts, with gloo collectives that listen at `host`. (jax's own
    factory passes no host; the hook is jax's backend registry, pinned with jax in setup.py.)"""
    from jax._src import distributed as jax_distributed
    from jax._src import xla_bridge
    from jaxlib import _jax

    def cpu_client():
        collectives = _jax.make_gloo_tcp_collectives(
            distributed_client=jax_distributed.global_state.client, hostname=host
        )
        return xla_bridge.make_cpu_client(collectives)

    xla_bridge.register_backend_factory("cpu", cpu_client, priority=0, fail_quietly=False)


def is_primary() -> bool:
    """Process 0 writes checkpoints and owns the run directory."""
    return jax.process_index() == 0


def broadcast_start(state, counters: dict[str, int]):
    """Process 0's (state, counters) on every process; unchanged with one process.

    Counters are non-negative ints (env steps can pass 2**31, so each travels as two int32 halves:
    JAX computes in 32 bits unless x64 is on).
    """
    if jax.process_count() == 1:
        return state, counters
    from jax.experimental import multihost_utils

    keys = sorted(counters)
    halves = np.array([[counters[k] >> 31, counters[k] & (2**31 - 1)] for k in keys], np.int32)
    state, halves = multihost_utils.broadcast_one_to_all((jax.device_get(state), halves))
    halves = np.asarray(halves, np.int64)
    return state, {k: int(hi << 31 | lo) for k, (hi, lo) in zip(keys, halves)}


class PeerWatch:
    """Notices a learner process that stopped: each process bumps its own counter in the
    coordination service's key-value store every `period_s`; a peer whose counter has not moved
    for `timeout_s` (this process's clock: no clocks are compared), or a store that stopped
    answering within `timeout_s` (process 0, which hosts it, is gone or cut off), sets `lost` to a
    one-line reason. A thread of its own: the learner loop reads `lost` and calls `acknowledge`.

    A loop that does not read it within `grace_s` of its being set, most often because it waits
    inside a collective with the lost process (a partition drops packets, so nothing fails: gloo
    and JAX's heartbeats would abort the process with a core dump a minute later), or is in a
    long compile or save, is ended by `on_stuck(reason)`: the peer is gone either way."""

    def __init__(
        self, timeout_s: float, period_s: float = 1.0, on_stuck=None, grace_s: float = 5.0
    ):
        self._client = None
        if jax.process_count() > 1:
            from jax._src import distributed as jax_distributed  # jax.distributed's own client

            self._client = jax_distributed.global_state.client
        self._me, self._count = jax.process_index(), jax.process_count()
        self.timeout_s, self.period_s = float(timeout_s), float(period_s)
        self.grace_s = float(grace_s)
        self._on_stuck = on_stuck
        self.lost: str | None = None
        self._acknowledged = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peer-watch", daemon=True)
        # The store's calls wait without a deadline on a peer that is cut off: they run in a
        # daemon thread of their own (one stuck there must not hold the interpreter's exit).
        self._requests: queue.Queue = queue.Queue()
        self._replies: queue.Queue = queue.Queue()
        self._caller = threading.Thread(target=self._call, name="peer-watch-store", daemon=True)

    def start(self) -> PeerWatch:
        if self._client is not None:
            self._caller.start()
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _call(self) -> None:
        while True:
            beat = self._requests.get()
            try:
                self._replies.put((True, self._beat(beat)))
            except Exception as e:  # noqa: BLE001 - handed to the watching thread
                self._replies.put((False, e))

    def acknowledge(self) -> None:
        """The learner loop has seen `lost` and is ending the process its own way."""
        self._acknowledged.set()

    def _run(self) -> None:
        self.lost = self._watch()
        if self.lost is None or self._on_stuck is None:
            return
        if not self._acknowledged.wait(self.grace_s) and not self._stop.is_set():
            self._on_stuck(self.lost)

    def _beat(self, beat: int) -> dict:
        self._client.key_value_set(f"seedlike/alive/{self._me}", str(beat), True)
        return {k: self._peek(k) for k in range(self._count) if k != self._me}

    def _watch(self) -> str | None:
        """Beats until a peer or the store is lost (its reason) or stop() (None)."""
        beat = 0
        seen = {k: (None, time.monotonic()) for k in range(self._count) if k != self._me}
        while not self._stop.wait(self.period_s):
            beat += 1
            self._requests.put(beat)
            try:
                ok, values = self._replies.get(timeout=self.timeout_s)
            except queue.Empty:
                return f"the coordination service gave no answer for {self.timeout_s:.0f} s"
            if not ok:  # the coordinator (process 0) is gone
                if self._stop.is_set():
                    return None
                return f"the coordination service stopped answering ({str(values)[:120]})"
            now = time.monotonic()
            for k, value in values.items():  # a peer that has not written yet counts from now
                last, since = seen[k]
                if value != last:
                    seen[k] = (value, now)
                elif now - since > self.timeout_s and not self._stop.is_set():
                    return f"learner process {k} gave no sign of life for {now - since:.0f} s"
        return None

    def _peek(self, k: int) -> str | None:
        try:
            return self._client.key_value_try_get(f"seedlike/alive/{k}")
        except Exception as e:  # noqa: BLE001 - jaxlib raises a plain error for a missing key
            if "NOT_FOUND" in str(e):
                return None
            raise


class Lockstep:
    """Counts env steps across learner processes and agrees when to stop.

    `agree` is a collective when there are several processes: each must call it once before every
    update (and once to stop), in the same order as the learner's own collectives.
    """

    def __init__(self, devices, base_env_steps: int = 0):
        self.shared = jax.process_count() > 1
        self._base = int(base_env_steps)
        self._agreed = int(base_env_steps)  # every process's steps, as of the last agreement
        self._counted = 0  # this process's steps already in _agreed
        if self.shared:
            local = [d for d in devices if d.process_index == jax.process_index()]
            self._local_devices = len(local)
            self._sum = jax.pmap(lambda x: jax.lax.psum(x, "all"), "all", devices=devices)

    def env_steps(self, local_steps: int) -> int:
        """Steps since the run began: live with one process, as of the last agreement with more.

        local_steps: steps this process received since it started (monotonic).
        """
        return self._agreed if self.shared else self._base + int(local_steps)

    def agree(self, local_steps: int, stop: bool) -> bool:
        """Adds this process's new steps to every process's count; True if any wants to stop."""
        if not self.shared:
            return stop
        # One row per local device; only the first carries this process's numbers.
        x = np.zeros((self._local_devices, 2), np.int32)
        x[0] = (int(local_steps) - self._counted, int(stop))
        total = np.asarray(self._sum(x))[0]
        self._counted = int(local_steps)
        self._agreed += int(total[0])
        return bool(total[1])


def agree_call(updates: int, save: bool, stop: bool) -> tuple[int, bool, bool]:
    """An on-device run's next call, agreed by its processes (a collective with several; each
    calls it once before every call and once to stop): process 0's `updates` and `save` (its
    clock sizes the calls and times the checkpoints), and `stop` if any process wants to stop."""
    if jax.process_count() == 1:
        return updates, save, stop
    from jax.experimental import multihost_utils

    mine = np.array([updates, int(save), int(stop)], np.int32)
    every = np.asarray(multihost_utils.process_allgather(mine))  # [processes, 3]
    return int(every[0, 0]), bool(every[0, 1]), bool(every[:, 2].any())
