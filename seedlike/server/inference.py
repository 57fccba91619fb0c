"""Central inference: batches step requests from all actor sessions and runs one policy step.

Transport-agnostic: the gRPC service (seedlike.rpc.service) calls `open_session`, `submit` and
`close_session`; tests can call them directly. One thread owns the batcher loop, the policy call
and the trajectory store, so the store needs no locks and sessions open/close in arrival order.

Batching rule: after the first request arrives, keep collecting until every open session has a
request waiting (nobody else can add to the batch), or `max_batch_rows` rows are in, or
`batch_timeout_ms` has passed.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import logging
import queue
import threading
import time

import jax
import numpy as np

from seedlike.envs.envpool_env import LEGAL_ACTION_MASK
from seedlike.league import games
from seedlike.league.league import BOT_NAMES, LEARNER
from seedlike.rpc import codec
from seedlike.server import policy as policy_lib
from seedlike.server.trajectory_store import Episode, PolicyInputs, TrajectoryStore


class ServerStopping(RuntimeError):
    """The server is shutting down: `finished` means training is over (streams end with OK);
    otherwise the learner is only stopping (preemption, restart) and actors should reconnect."""

    def __init__(self, finished: bool):
        super().__init__("training finished" if finished else "server stopping")
        self.finished = finished


@dataclasses.dataclass
class _Step:
    session_id: int
    rows: codec.StepRows
    future: concurrent.futures.Future
    arrived: float


@dataclasses.dataclass
class _Control:
    kind: str  # "open" | "close"
    session_id: int
    num_envs: int = 0


class InferenceStats:
    """Interval statistics, read and reset by the metrics loop (thread-safe)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._reset()

    def _reset(self):
        self.batch_rows: list[int] = []
        self.latency_ms: list[float] = []
        self.episodes: list[Episode] = []
        self.rows = 0

    def add(self, batch_rows: int, latencies_ms: list[float], rows: int, episodes: list[Episode]):
        with self._lock:
            self.batch_rows.append(batch_rows)
            self.latency_ms.extend(latencies_ms)
            self.rows += rows
            self.episodes.extend(episodes)

    def take(self) -> dict:
        with self._lock:
            out = {
                "batch_rows": self.batch_rows,
                "latency_ms": self.latency_ms,
                "episodes": self.episodes,
                "rows": self.rows,
            }
            self._reset()
        return out


class InferenceService:
    def __init__(
        self,
        spec,
        network,
        registry: policy_lib.PolicyRegistry,
        store: TrajectoryStore,
        server_config,
        seed: int = 0,
        guard=None,
        league=None,
        annealing=None,
    ):
        self.spec = spec
        self.registry = registry
        self.store = store
        self.config = server_config
        self.stats = InferenceStats()
        self._policy_step = policy_lib.make_policy_step(network)
        self._initial_carry = network.initial_carry
        self.league = league
        self._bot_rng = np.random.default_rng(seed + 3)
        self._bots = (
            {bot: games.make_bot(BOT_NAMES[bot], spec) for bot in league.bots} if league else {}
        )
        self.annealing = annealing
        self._anneal_rng = np.random.default_rng(seed + 1)
        self._guard = guard or (lambda fn, *args: fn(*args))
        self._seed = np.uint32(seed)
        self._counter = itertools.count()
        self._inbox: queue.Queue = queue.Queue()
        self._session_ids = itertools.count(1)
        self._sessions: dict[int, int] = {}  # session id -> actor id (handler-side view)
        self._sessions_lock = threading.Lock()
        self._open_in_loop = 0  # sessions the loop knows about
        self._stopping = threading.Event()
        self._finished = False
        self._crashed = False
        self._thread = threading.Thread(target=self._loop, name="inference", daemon=True)

    # Called from handler threads ---------------------------------------------------------------

    def open_session(self, hello) -> int:
        """Validates a Hello and opens a session; raises codec.ProtocolError on mismatch."""
        if self._stopping.is_set():
            raise ServerStopping(self._finished)
        codec.check_hello(hello, self.spec, int(self.config.max_envs_per_actor))
        session_id = next(self._session_ids)
        with self._sessions_lock:
            self._sessions[session_id] = hello.actor_id
        self._inbox.put(_Control("open", session_id, hello.num_envs))
        logging.info(
            "actor %d connected (session %d, %d envs)", hello.actor_id, session_id, hello.num_envs
        )
        return session_id

    def submit(self, session_id: int, rows: codec.StepRows) -> concurrent.futures.Future:
        """Queues one step; the future resolves to (actions int32 [n], policy version)."""
        future = concurrent.futures.Future()
        if self._stopping.is_set():
            future.set_exception(ServerStopping(self._finished))
        else:
            self._inbox.put(_Step(session_id, rows, future, time.perf_counter()))
        return future

    def result(self, future: concurrent.futures.Future):
        """Waits for a submitted step; never hangs on a request that raced with stop()."""
        while True:
            try:
                return future.result(timeout=0.5)
            except concurrent.futures.TimeoutError:
                if self._stopping.is_set() and not self._thread.is_alive():
                    raise ServerStopping(self._finished) from None

    def close_session(self, session_id: int) -> None:
        with self._sessions_lock:
            actor_id = self._sessions.pop(session_id, None)
        if actor_id is not None:
            self._inbox.put(_Control("close", session_id))
            logging.info("actor %d disconnected (session %d)", actor_id, session_id)

    @property
    def num_sessions(self) -> int:
        with self._sessions_lock:
            return len(self._sessions)

    # Lifecycle ----------------------------------------------------------------------------------

    def check_alive(self) -> None:
        """Raises if the inference thread died (its exception is in the log)."""
        if self._crashed:
            raise RuntimeError("the inference thread crashed; see the exception logged above")

    def start(self) -> None:
        self._thread.start()

    def stop(self, finished: bool) -> None:
        """Fails pending and future requests with ServerStopping and joins the loop.

        Args:
          finished: training is complete (actors exit) rather than interrupted (actors reconnect).
        """
        self._finished = finished
        self._stopping.set()
        self._inbox.put(None)
        self._thread.join(timeout=30)
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, _Step) and not item.future.done():
                item.future.set_exception(ServerStopping(finished))

    # The inference thread -----------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            while not self._stopping.is_set():
                steps, controls = self._gather()
                if steps:
                    self._run(steps)
                for control in controls:
                    self._apply(control)
        except Exception:
            logging.exception("inference loop crashed")
            self._crashed = True
            self._stopping.set()
            raise

    def _apply(self, control: _Control) -> None:
        if control.kind == "open":
            self.store.open_session(control.session_id, control.num_envs)
            self._open_in_loop += 1
        else:
            dropped = self.store.close_session(control.session_id)
            self._open_in_loop -= 1
            if dropped:
                logging.info(
                    "session %d: dropped %d steps of partial unrolls", control.session_id, dropped
                )

    def _gather(self) -> tuple[list[_Step], list[_Control]]:
        """Collects steps per the batching rule; a control message ends the batch."""
        steps: list[_Step] = []
        rows = 0
        deadline = None
        max_rows = int(self.config.max_batch_rows)
        timeout = float(self.config.batch_timeout_ms) / 1000.0
        while True:
            if deadline is None:
                wait = 0.1
            else:
                wait = deadline - time.perf_counter()
                if wait <= 0:
                    return steps, []
            try:
                item = self._inbox.get(timeout=wait)
            except queue.Empty:
                if deadline is None:
                    return steps, []
                continue
            if item is None:
                return steps, []
            if isinstance(item, _Control):
                return steps, [item]
            steps.append(item)
            rows += item.rows.reward.shape[0]
            if deadline is None:
                deadline = item.arrived + timeout
            if rows >= max_rows or len(steps) >= self._open_in_loop:
                return steps, []

    def _run(self, steps: list[_Step]) -> None:
        version, latest = self.registry.latest()
        # Only rows that act or end an episode need the policy (a waiting player's row does not).
        infer = [s.rows.acting | s.rows.terminated | s.rows.truncated for s in steps]
        counts = [int(m.sum()) for m in infer]
        total = sum(counts)
        known = [self.store.has_session(s.session_id) for s in steps]
        inputs = [
            self.store.policy_inputs(s.session_id, s.rows, m) if ok else self._fresh_inputs(c)
            for s, m, c, ok in zip(steps, infer, counts, known)
        ]
        if self.annealing is not None:
            for step, mask, x in zip(steps, infer, inputs):
                changed = np.ones(mask.shape[0], np.bool_)
                changed[mask] = x.changed
                step.rows = self.annealing.apply(step.rows, changed, self.spec.num_actions)
        obs = {
            k: np.concatenate([s.rows.obs[k][m] for s, m in zip(steps, infer)])
            for k in self.store.spec.observation
        }
        extras = {
            k: np.concatenate([s.rows.extras[k][m] for s, m in zip(steps, infer)])
            for k in self.store.spec.extras
        }
        first = np.concatenate([x.first for x in inputs])
        carry = jax.tree.map(lambda *c: np.concatenate(c), *[x.carry for x in inputs])
        policy = np.concatenate([x.policy for x in inputs])
        action, logp, value, new_carry = self._infer(latest, obs, extras, carry, first, policy)

        now = time.perf_counter()
        offset = 0
        results = []
        for step, mask, count in zip(steps, infer, counts):
            n = mask.shape[0]
            full = [np.zeros(n, np.int32), np.zeros(n, np.float32), np.zeros(n, np.float32)]
            for dst, src in zip(full, (action, logp, value)):
                dst[mask] = src[offset : offset + count]
            part = jax.tree.map(lambda c, o=offset, k=count: c[o : o + k], new_carry)
            offset += count
            step.future.set_result((full[0], version))
            results.append((*full, part))

        episodes = []
        for step, (a, lp, v, c), ok in zip(steps, results, known):
            if ok:
                ended = self.store.record(step.session_id, step.rows, a, lp, v, version, c)
                self._report_games(ended)
                episodes.extend(e for e in ended if e.policy == LEARNER)
        self.stats.add(
            total,
            [(now - s.arrived) * 1000.0 for s in steps],
            sum(s.rows.reward.shape[0] for s in steps),
            episodes,
        )

    def _infer(self, latest, obs, extras, carry, first, policy):
        """Runs each policy on its rows (the learning policy, league snapshots or bots)."""
        total = first.shape[0]
        groups = np.unique(policy)
        if groups.size == 1 and groups[0] == LEARNER:
            return self._policy_call(latest, obs, extras, carry, first)
        action, logp, value = np.zeros(total, np.int32), np.zeros(total), np.zeros(total)
        new_carry = jax.tree.map(np.zeros_like, carry)
        for pid in groups:
            idx = np.flatnonzero(policy == pid)
            part = jax.tree.map(lambda x, idx=idx: x[idx], (obs, extras, carry, first))
            if pid in self._bots:  # no network: logp, value and carry stay 0
                mask = part[1][LEGAL_ACTION_MASK]
                action[idx] = self._bots[pid].act(part[0], mask, idx, part[3], self._bot_rng)
                continue
            # A snapshot that left the pool mid-episode is played by the latest policy.
            params = latest if pid == LEARNER else self.league.params(pid)
            params = latest if params is None else params
            out = self._policy_call(params, *part)
            for dst, src in zip((action, logp, value), out[:3]):
                dst[idx] = src
            for dst, src in zip(jax.tree.leaves(new_carry), jax.tree.leaves(out[3])):
                dst[idx] = src
        return action, logp.astype(np.float32), value.astype(np.float32), new_carry

    def _policy_call(self, params, obs, extras, carry, first):
        total = first.shape[0]
        size = policy_lib.bucket_size(total)
        obs, extras, carry = policy_lib.pad_rows((obs, extras, carry), total, size)
        first = np.concatenate([first, np.ones(size - total, np.bool_)])
        counter = np.uint32(next(self._counter))
        out = self._guard(self._policy_step, params, obs, extras, carry, first, self._seed, counter)
        return jax.tree.map(lambda x: np.asarray(x)[:total], jax.device_get(out))

    def _report_games(self, ended) -> None:
        """Pairs the two seats of every finished two-player game and reports the result."""
        if self.league is None or not ended:
            return
        players = self.spec.num_players
        by_seat = {e.seat: e for e in ended}
        for e in ended:
            if e.seat % players == 0 and e.seat + 1 in by_seat:
                self.league.record(by_seat[e.seat + 1].policy, int(np.sign(e.episode_return)))

    def _fresh_inputs(self, count: int) -> PolicyInputs:
        carry = jax.tree.map(np.asarray, self._initial_carry(count))
        ones = np.ones(count, np.bool_)
        return PolicyInputs(ones, carry, np.full(count, -1, np.int64), ones)

    def changes(self, n: int) -> np.ndarray:
        """Whether n starting episodes have the change being annealed in (store callback)."""
        return self._anneal_rng.random(n) < self.annealing.fraction(self.registry.version)


def latency_summary(latency_ms: list[float]) -> tuple[float, float]:
    if not latency_ms:
        return float("nan"), float("nan")
    return float(np.percentile(latency_ms, 50)), float(np.percentile(latency_ms, 99))


def batch_summary(batch_rows: list[int]) -> float:
    return float(np.mean(batch_rows)) if batch_rows else float("nan")
