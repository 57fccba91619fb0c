"""Central inference: one pipeline from actor requests to actions and recorded trajectories.

Transport-agnostic: the gRPC layer (seedlike.rpc.streams, seedlike.rpc.hub) calls
`open_session`, `submit` and `close_session`; tests call them directly. Three threads, each doing
only its own work, joined by bounded handoffs (seedlike.server.handoff) so that a slow stage holds
back the ones before it (backpressure), and a fourth that sends the replies an identity's pacing
holds back (seedlike.server.pacing):

  batcher  -> gather : requests per the batching rule (seedlike.server.batcher), look up the
                       seats, place their steps (seedlike.server.unrolls), run the policy of every
                       seat group (dispatched: JAX computes while this thread gathers the next)
           -> reply  : fetch the outputs to the host, advance the seats, hand the batch to the
                       recorder, send the actions back (with where each seat's next step goes)
           -> record : episode statistics, team reward shaping, and whole batches into the
                       trajectory store

Actions go back before anything is recorded (a paced reply may go after); the recorder blocks only
when the learner has not taken the batches already built
(seedlike.server.trajectory_store.BatchQueue).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import faulthandler
import itertools
import logging
import queue
import threading
import time
from typing import NamedTuple

import jax
import numpy as np

from seedlike.league.players import LEARNER
from seedlike.policy import PolicyOutput, PolicyRegistry, PolicyRunner, Ready, bucket_size
from seedlike.runtime.threadnames import named
from seedlike.server.batcher import STOP, Batch, Batcher, Control, Request
from seedlike.server.episodes import Episodes
from seedlike.server.errors import ServerStopping
from seedlike.server.handoff import Counter, Handoff
from seedlike.server.matchmaking import Matchmaker
from seedlike.server.pacing import Pacer, RowRates
from seedlike.server.recorder import Recorder
from seedlike.server.seats import SeatTable
from seedlike.server.trajectory_store import StepRecord, Stopped, TrajectoryStore
from seedlike.server.unrolls import Placement, aligned_empty
from seedlike.types import LEGAL_ACTION_MASK, EnvSpec, Rows

# Wall time each stage's thread is busy, reported as a share of the interval (`busy/<stage>`): a
# stage near 1.0 is the bottleneck. decode is the gRPC event-loop thread's parsing and checking of
# requests (seedlike.rpc.streams); learn is the training loop's (seedlike.learner).
STAGES = ("decode", "prepare", "policy", "reply", "record")
# A request's latency, split where it changes hands (`latency_ms/<segment>`, interval means):
# waiting for its batch to close, preparing the batch, the policy (queued, computed, fetched), and
# handing the actions back to the gRPC event loop.
SEGMENTS = ("batching", "prepare", "policy", "reply")
# How long stop() waits for the pipeline threads in all (they normally end within milliseconds).
STOP_TIMEOUT_S = 10.0
# Batches between the reply and record threads. A full queue holds the replies back until the
# recorder catches up (backpressure). Two absorb the recorder's jitter; more let actors act on
# while the learner's queue is full, and those steps reach the learner older, at the same speed
# (RESULTS.md, "Serving capacity").
RECORD_QUEUE = 2


class InferenceStats:
    """Interval statistics, read and reset by the metrics loop (thread-safe)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.episodes_ended = 0  # since the start, never reset
        self.rows_read_in_place = 0  # policy inputs that were a front end's arena rows, ever
        self._reset()

    def _reset(self):
        self.batch_rows: list[int] = []
        self.latency_ms: list[float] = []
        self.episodes: list[Episodes] = []
        self.busy = dict.fromkeys(STAGES, 0.0)
        self.rows_read = [0, 0]  # policy input rows copied, read in place
        self.segment_sums = dict.fromkeys(SEGMENTS, 0.0)  # ms, summed over requests

    def read(self, rows: int, in_place: bool) -> None:
        """A batch's policy inputs: `rows` rows, read in place (a front end's arena) or copied."""
        with self._lock:
            self.rows_read[in_place] += rows
            self.rows_read_in_place += rows if in_place else 0

    def batch(self, rows: int, latencies_ms: list[float], segment_sums_ms: dict) -> None:
        """One batch: rows run, each request's latency, and each segment summed over requests."""
        with self._lock:
            self.batch_rows.append(rows)
            self.latency_ms.extend(latencies_ms)
            for name, total in segment_sums_ms.items():
                self.segment_sums[name] += total

    def ended(self, episodes: Episodes) -> None:
        if len(episodes.seat):
            with self._lock:
                self.episodes.append(episodes)
                self.episodes_ended += len(episodes.seat)

    def add_busy(self, stage: str, seconds: float) -> None:
        with self._lock:
            self.busy[stage] += seconds

    def take(self) -> dict:
        with self._lock:
            out = {
                "batch_rows": self.batch_rows,
                "latency_ms": self.latency_ms,
                "episodes": Episodes.concatenate(self.episodes),
                "busy_s": self.busy,
                "rows_in_place": self.rows_read[1] / max(sum(self.rows_read), 1),
                "segments_ms": {
                    k: total / len(self.latency_ms) if self.latency_ms else None
                    for k, total in self.segment_sums.items()
                },
            }
            self._reset()
        return out


class Answer(NamedTuple):
    """What a request's sink (seedlike.rpc.hub) is told: the actions, the policy version, and for
    a writer of observations in place, where each row's seat records its next step (flat step
    indices, seedlike.server.unrolls) and which steps it wrote to repeat as step 0 of the next
    unroll. Futures get (actions, policy_version)."""

    actions: np.ndarray  # int32 [n] (float32 [n, K]: EnvSpec.action_spec)
    policy_version: int
    next: np.ndarray | None  # int64 [n]; None without unrolls
    moves: tuple | None  # (src int64 [k], dst int64 [k]) or None


@dataclasses.dataclass
class _Job:
    """A dispatched batch on its way from the gather thread to the reply thread."""

    requests: list[Request]
    rows: Rows  # every row of the batch, concatenated in request order
    seat: np.ndarray  # int64 [n]
    ran: np.ndarray  # bool [n]: the policy runs on the row (it acts or ends an episode)
    obs: dict  # [m, ...] of the rows the policy runs on, as it sees them
    extras: dict
    first: np.ndarray  # [m]
    policy: np.ndarray  # [m]
    carry: object  # [m, ...] before the step
    groups: list  # (row indices into the m rows, Pending or Ready)
    policy_version: int
    placement: Placement | None  # where the steps go (None: no unrolls)
    written: np.ndarray | None  # bool [m]: the step is in place already (a front end wrote it)
    closed: float = 0.0  # perf_counter when the batch closed
    dispatched: float = 0.0  # ... and when its policies were dispatched


@dataclasses.dataclass
class _Seats:
    """A session opening or closing on its way to the recorder (in order with the records)."""

    seats: np.ndarray
    opens: bool
    session_id: int
    identity: int = 0  # an opening session's actor identity
    buffers: np.ndarray | None = None  # a closing session's partial unrolls ...
    recorded: np.ndarray | None = None  # ... and the steps recorded in each


class InferenceService:
    """The inference pipeline: sessions, batching, the policy, replies and recording (module
    docstring). Built from a run's config by `from_config`; every argument is a keyword.

    Args:
    spec: the EnvSpec actors must match.
    network: the networks.Network of the learning policy (and of league snapshots).
    registry: the published params of the learning policy.
    store: the TrajectoryStore the recorder writes into (its pool places every step); None
      keeps episode statistics only (serving a frozen policy).
    server_config: the `server` config section (batching, queues, limits).
    matchmaker: who plays each episode (league, bots, annealing); None: the learning policy in
      every seat, every change.
    seed: seeds action sampling.
    guard: runs JAX computations (seedlike.runtime.devices.ComputeGuard).
    greedy: play the most likely legal action instead of sampling (evaluation; never while
      learning, whose behaviour log-probs assume sampling).
    return_scale: scales the rewards learned from (seedlike.server.return_scale); None: off.
    exploration: each identity's epsilon for a Q network's policy (seedlike.server.exploration);
      None: the policy samples (or, greedy, takes) its actions itself.
    """

    def __init__(
        self,
        *,
        spec: EnvSpec,
        network,
        registry: PolicyRegistry,
        store: TrajectoryStore | None,
        server_config,
        matchmaker: Matchmaker | None = None,
        seed: int = 0,
        guard=None,
        greedy: bool = False,
        return_scale=None,
        exploration=None,
    ):
        self.spec = spec
        self.exploration = None if greedy else exploration
        self.registry = registry
        self.store = store
        self.pool = store.pool if store is not None else None
        self.max_envs_per_actor = int(server_config.max_envs_per_actor)
        self.matchmaker = matchmaker or Matchmaker(spec, seed=seed)
        self.recorder = Recorder(store, self.matchmaker.teams, return_scale)
        self.stats = InferenceStats()
        self.runner = PolicyRunner(network, greedy=greedy, seed=seed, guard=guard)
        self.seats = SeatTable(spec.num_players, network.initial_carry)
        self.batcher = Batcher(
            server_config.max_batch_rows,
            server_config.batch_timeout_ms / 1e3,
            server_config.batch_share,
            server_config.min_batch_rows,
        )
        # Two batches may be in flight between gather and reply: one computing, one being fetched.
        self._jobs = Handoff(maxsize=2)
        self._computing = Counter()  # batches dispatched and not yet fetched
        self._records = Handoff(maxsize=RECORD_QUEUE)
        self._session_ids = itertools.count(1)
        # Session id -> (actor id, identity name, identity); the reply thread reads identities
        # (pacing).
        self._sessions: dict[int, tuple[int, str, int]] = {}
        # Identity name (seedlike.rpc.security.identity) -> [identity, open sessions]; forgotten
        # with its last session (identities are never reused, so a returning actor starts afresh
        # in the influence windows).
        self._labels: dict[str, list] = {}
        self._next_label = itertools.count()
        # Identities served far faster than the others get their replies later (pacing.py).
        pace = float(server_config.pace_factor)
        self._rates = RowRates(pace) if pace > 0 else None
        self._pacer = Pacer() if pace > 0 else None
        self._sessions_lock = threading.Lock()
        self._stopping = threading.Event()
        self._pending: set = set()  # futures of the requests submitted and not yet answered
        self._finished = False
        self._crashed = False
        self._threads = [
            threading.Thread(target=named(name, self._guarded(loop)), name=name, daemon=True)
            for name, loop in (
                ("gather", self._gather_loop),
                ("reply", self._reply_loop),
                ("record", self._record_loop),
            )
        ]

    @classmethod
    def from_config(
        cls, config, *, spec: EnvSpec, network, registry: PolicyRegistry,
        store: TrajectoryStore | None = None, **parts,
    ) -> InferenceService:  # fmt: skip
        """The service of a run's config (its `server` section and seed); `parts` are the
        optional keywords of the constructor (matchmaker, guard, greedy, return_scale,
        exploration)."""
        return cls(
            spec=spec, network=network, registry=registry, store=store,
            server_config=config.server, seed=int(config.seed), **parts,
        )  # fmt: skip

    # Called from handler threads ---------------------------------------------------------------

    def open_session(self, actor_id: int, num_envs: int, identity: str | None = None) -> int:
        """Opens a session for an actor with `num_envs` envs (the transport has checked its
        specs); returns the session id.

        `identity` names the unit of the influence bounds (seedlike.server.influence): every
        session of one name counts as one actor. The transport derives it from what the stream
        proved (seedlike.rpc.security.identity). None (in process, no transport): each session
        is an identity of its own."""
        if self._stopping.is_set():
            raise ServerStopping(self._finished)
        session_id = next(self._session_ids)
        name = identity if identity is not None else f"session {session_id}"
        with self._sessions_lock:
            entry = self._labels.setdefault(name, [next(self._next_label), 0])
            entry[1] += 1
            identity = entry[0]
            self._sessions[session_id] = (actor_id, name, identity)
        if self.exploration is not None:
            self.exploration.join(identity)
        self.batcher.enqueue(Control(session_id, num_envs, identity))
        logging.info("actor %d connected (session %d, %d envs)", actor_id, session_id, num_envs)
        return session_id

    def submit(
        self,
        session_id: int,
        rows: Rows,
        future=None,
        arrived: float | None = None,
        written: tuple | None = None,
        span: tuple | None = None,
        spread_s: float = 0.0,
    ):
        """Queues one step. The future resolves to (actions int32 [n], policy version), or fails
        with ServerStopping when the service stops first.

        Args:
          future: an asyncio.Future of the caller's event loop (the gRPC layer), an object with a
            `sink` (a ReplySink: the replies of one batch reach it in one call), or None for a
            new concurrent.futures.Future. A batch resolves all of one loop's futures in one
            callback, so the loop is woken once per batch, not once per request.
          arrived: when the request arrived (time.perf_counter(), the same clock in every
            process of this host); default now. The latency metrics count from it.
          written: (bool [n], int64 [n]) which rows' steps the caller wrote in place already and
            where (the flat steps of the previous Answer's `next`); None: none.
          span: (arena, start) where the rows' observations lie among other requests' rows
            (seedlike.rpc.shm.Arena): a batch of neighbouring requests is given to the policy
            without a copy.
          spread_s: seconds the caller spends per request (a front end's CPU since its previous
            one), about how far apart one caller's requests arrive (seedlike.server.batcher).
        """
        future = future if future is not None else concurrent.futures.Future()
        # Registered before the check, so that stop() either sees it or it sees stop().
        self._pending.add(future)
        if self._stopping.is_set():
            self._fail(future)
        else:
            arrived = time.perf_counter() if arrived is None else arrived
            written, wrote_at = written or (None, None)
            self.batcher.enqueue(
                Request(session_id, rows, future, arrived, written, wrote_at, span, spread_s)
            )
        return future

    def close_session(self, session_id: int) -> None:
        with self._sessions_lock:
            session = self._sessions.pop(session_id, None)
            if session is not None:
                entry = self._labels[session[1]]
                entry[1] -= 1
                if not entry[1]:
                    del self._labels[session[1]]
                    if self.exploration is not None:
                        self.exploration.leave(entry[0])
        if session is not None:
            self.batcher.enqueue(Control(session_id))
            logging.info("actor %d disconnected (session %d)", session[0], session_id)

    def level_probs(self) -> tuple[int, list[float]]:
        """(version, level probabilities) of the curriculum for the actors; (0, []) without one."""
        curriculum = self.matchmaker.curriculum
        if curriculum is None:
            return 0, []
        version, probs = curriculum.probs()
        return version, probs.tolist()

    def flush(self, timeout_s: float = 30.0) -> None:
        """Waits until every batch answered so far has been recorded."""
        deadline = time.monotonic() + timeout_s
        while self._records.unfinished and time.monotonic() < deadline:
            self.check_alive()
            time.sleep(0.005)

    @property
    def env_steps(self) -> int:
        """Rows recorded since this process started."""
        return self.recorder.env_steps

    @property
    def num_sessions(self) -> int:
        with self._sessions_lock:
            return len(self._sessions)

    # Lifecycle ----------------------------------------------------------------------------------

    def check_alive(self) -> None:
        """Raises if a pipeline thread died (its exception is in the log)."""
        if self._crashed:
            raise RuntimeError("the inference pipeline crashed; see the exception logged above")

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, finished: bool) -> None:
        """Fails pending and future requests with ServerStopping and joins the threads.

        Args:
          finished: training is complete (actors exit) rather than interrupted (actors reconnect).
        """
        self._finished = finished
        self._stopping.set()
        if self._pacer is not None:
            self._pacer.stop()  # held replies stay pending: failed below
        self.batcher.enqueue(STOP)
        if self.store is not None and self.store.batches is not None:
            self.store.batches.close()  # a recorder waiting for the learner gives up
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for thread in self._threads:
            thread.join(timeout=max(deadline - time.monotonic(), 0.0))
        stuck = [t.name for t in self._threads if t.is_alive()]
        if stuck:
            # Daemon threads: the learner can still save and exit. Their stacks say why.
            logging.warning("%s did not stop within %.0f s; stacks follow", stuck, STOP_TIMEOUT_S)
            faulthandler.dump_traceback(all_threads=True)
        for future in list(self._pending):
            self._fail(future)

    @property
    def finished(self) -> bool:
        """Whether the service stopped because training is over (actors exit) rather than for a
        restart (actors reconnect)."""
        return self._finished

    def _fail(self, future) -> None:
        error = ServerStopping(self._finished)
        sink = _sink_of(future)
        if sink is not None:
            sink.deliver([(future, error)])
        elif not future.done():
            future.set_exception(error)
        self._pending.discard(future)

    def _guarded(self, loop):
        def run():
            try:
                loop()
            except Stopped:
                pass
            except Exception:
                logging.exception("inference pipeline thread crashed")
                self._crashed = True
                self._stopping.set()
                self.batcher.enqueue(STOP)
                raise

        return run

    def _put(self, q: Handoff, item) -> bool:
        """Blocking put that gives up when the service stops (False)."""
        while not self._stopping.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _items(self, q: Handoff):
        """What arrives on `q` until the service stops (what is left then is dropped)."""
        while not self._stopping.is_set():
            try:
                yield q.get(timeout=0.1)
            except queue.Empty:
                continue

    # Stage 1: gather and dispatch ---------------------------------------------------------------

    def _gather_loop(self) -> None:
        while not self._stopping.is_set():
            batch = self.batcher.gather(busy=self._policy_busy)
            if batch is None:
                return
            for control in batch.controls:
                if control.opens:
                    seats = self.seats.open(control.session_id, control.num_envs)
                    if self.pool is not None:
                        self.pool.open(seats)
                    opened = _Seats(seats, True, control.session_id, identity=control.identity)
                    self._put(self._records, opened)
            if batch.requests:
                start = time.perf_counter()
                job = self._dispatch(batch)
                job.closed, job.dispatched = batch.closed, time.perf_counter()
                self.stats.add_busy("prepare", job.dispatched - start)
                self._computing.up()
                self._put(self._jobs, job)
            for control in batch.controls:
                if not control.opens:
                    seats = self.seats.close(control.session_id)
                    closing = _Seats(seats, False, control.session_id)
                    if self.pool is not None:
                        closing.buffers, closing.recorded = self.pool.close(seats)
                    self._put(self._records, closing)

    def _dispatch(self, batch: Batch) -> _Job:
        requests = batch.requests
        version, latest = self.registry.latest()
        rows = _concatenate([r.rows for r in requests])  # per-row fields; observations below
        seat = np.concatenate(
            [self.seats.seats(r.session_id, r.rows.env_id, r.rows.player_id) for r in requests]
        )
        # Only rows that act or end an episode need the policy (a waiting player's row does not).
        ran = rows.acting | rows.terminated | rows.truncated
        run_seats = seat[ran]
        first, carry, policy, changed = self.seats.inputs(run_seats)
        if first.any():
            starting = np.flatnonzero(first)
            policy[starting], changed[starting] = self.matchmaker.draw_players(
                run_seats[starting], version
            )
            self.seats.begin_episodes(run_seats[starting], policy[starting], changed[starting])
        obs, extras, shared = _policy_inputs(requests, ran)
        m = first.shape[0]  # rows the policy runs on; obs and extras are padded beyond them
        self.stats.read(m, shared)
        if self.matchmaker.annealing is not None:
            obs, extras = self.matchmaker.annealing.hide_change(
                {k: v[:m] for k, v in obs.items()},
                {k: v[:m] for k, v in extras.items()},
                changed,
                self.spec.logits_size,
            )
        epsilon = None
        if self.exploration is not None:
            with self._sessions_lock:
                labels = [self._sessions.get(r.session_id, (0, "", 0))[2] for r in requests]
            sizes = [r.rows.env_id.shape[0] for r in requests]
            identity = np.repeat(np.asarray(labels, np.int64), sizes)[ran]
            epsilon = self.exploration.epsilon(identity, self.env_steps)
        groups = self._run_policies(latest, obs, extras, carry, first, policy, epsilon)
        placement, written = None, None
        if self.pool is not None:
            placement = self.pool.place(seat, ran)
            if self.matchmaker.annealing is None:  # else the store writes what the policy saw
                written = _written(requests, ran, placement.target)
        # The recorder gets the observations of the steps it writes itself, and every extras row
        # (the curriculum reads levels there); none of them may stay views of rows a front end
        # will reuse once it has its actions.
        unwritten = slice(None) if written is None else ~written
        if self.pool is None:
            obs = {}
        else:
            obs = {k: v[:m][unwritten] for k, v in obs.items()}
            if shared and written is None:
                obs = {k: v.copy() for k, v in obs.items()}
        extras = {k: v[:m].copy() if shared else v[:m] for k, v in extras.items()}
        return _Job(
            requests, rows, seat, ran, obs, extras, first, policy, carry, groups, version,
            placement, written,
        )  # fmt: skip

    def _run_policies(self, latest, obs, extras, carry, first, policy, epsilon=None) -> list:
        """Dispatches each policy on its rows: the learning policy, league snapshots and bots
        (`epsilon` [n]: each row's exploration rate, for a Q network)."""
        if (policy == LEARNER).all():  # the common case, without np.unique's sort
            return [(None, self.runner.dispatch(latest, obs, extras, carry, first, epsilon))]
        ids = np.unique(policy)
        groups = []
        for policy_id in ids:
            idx = np.flatnonzero(policy == policy_id)
            part_obs, part_extras, part_carry = jax.tree.map(
                lambda x, idx=idx: x[idx], (obs, extras, carry)
            )
            bot = self.matchmaker.bots.get(int(policy_id))
            if bot is not None:  # no network: logp and value 0, carry unchanged
                mask = part_extras.get(LEGAL_ACTION_MASK)
                if mask is None:  # every action is legal
                    mask = np.ones((idx.size, self.spec.logits_size), np.bool_)
                actions = bot.act(
                    part_obs,
                    mask,
                    idx,
                    first[idx],
                    self.matchmaker.bot_rng,
                )
                zeros = np.zeros(idx.size, np.float32)
                output = PolicyOutput(np.asarray(actions, np.int32), zeros, zeros, part_carry)
                groups.append((idx, Ready(output)))
                continue
            params = self.matchmaker.params(int(policy_id), latest)
            groups.append(
                (idx, self.runner.dispatch(params, part_obs, part_extras, part_carry, first[idx]))
            )
        return groups

    def _policy_busy(self) -> bool:
        """Whether a dispatched batch is still being computed (or waits to be fetched)."""
        return self._computing.positive()

    # Stage 2: fetch and reply -------------------------------------------------------------------

    def _reply_loop(self) -> None:
        for job in self._items(self._jobs):
            start = time.perf_counter()
            output = _gather_outputs(job.groups, job.first.shape[0])
            fetched = time.perf_counter()
            self._computing.down()
            self.stats.add_busy("policy", fetched - start)
            done = job.rows.terminated | job.rows.truncated
            self.seats.advance(job.seat[job.ran], done[job.ran], output.carry)
            record = StepRecord.of(
                job.seat, job.rows, job.ran, job.obs, job.extras, job.first, job.policy,
                job.carry, output, job.policy_version, job.placement, job.written,
            )  # fmt: skip
            # Queued before the actions go out, so a session's close (which the batcher reports
            # only after its last reply, even if its stream broke while it waited) always reaches
            # the recorder after the session's last record.
            if not self._put(self._records, record):
                return
            act = self.spec.action_spec
            actions = np.zeros((job.seat.shape[0], *act.shape), act.dtype)
            actions[job.ran] = output.action
            pool = self.pool
            moves = _moves(job, pool.steps, pool.overlap) if pool is not None else {}
            now = time.perf_counter()
            clock = time.monotonic()
            offset, sinks, answered = 0, {}, []
            for i, request in enumerate(job.requests):
                n = request.num_rows
                rows = slice(offset, offset + n)
                offset += n
                sink = _sink_of(request.future)
                if sink is not None:
                    place = job.placement
                    nxt = place.next[rows] if place is not None and place.next is not None else None
                    outcome = Answer(actions[rows], job.policy_version, nxt, moves.get(i))
                else:
                    outcome = (actions[rows], job.policy_version)
                session = self._sessions.get(request.session_id) if self._rates else None
                hold = 0.0 if session is None else self._rates.hold_s(session[2], n, clock)
                if hold > 0:
                    self._pacer.at(clock + hold, self._later(request, sink, outcome))
                    continue
                if sink is not None:
                    sinks.setdefault(sink, []).append((request.future, outcome))
                else:
                    request.future.set_result(outcome)
                self._pending.discard(request.future)
                answered.append(request.session_id)
            for sink, replies in sinks.items():
                sink.deliver(replies)
            self.batcher.replied(answered)
            replied = time.perf_counter()
            n = len(job.requests)
            segments = {
                "batching": sum(job.closed - r.arrived for r in job.requests) * 1e3,
                "prepare": (job.dispatched - job.closed) * 1e3 * n,
                "policy": (fetched - job.dispatched) * 1e3 * n,
                "reply": (replied - fetched) * 1e3 * n,
            }
            latencies = [(now - r.arrived) * 1e3 for r in job.requests]
            self.stats.batch(int(job.ran.sum()), latencies, segments)
            self.stats.add_busy("reply", time.perf_counter() - fetched)

    def _later(self, request: Request, sink, outcome):
        """A held reply, for the pacer thread (seedlike.server.pacing)."""

        def deliver():
            if self._stopping.is_set():
                return  # stop() fails the request's future
            if sink is not None:
                sink.deliver([(request.future, outcome)])
            elif not request.future.done():
                request.future.set_result(outcome)
            self._pending.discard(request.future)
            self.batcher.replied([request.session_id])

        return deliver

    # Stage 3: record ----------------------------------------------------------------------------

    def _record_loop(self) -> None:
        for item in self._items(self._records):
            start = time.perf_counter()
            if not isinstance(item, _Seats):
                episodes = self.recorder.record_batch(item)
                identity = self.store.identity if self.store is not None else None
                if identity is not None and episodes.seat.size:
                    episodes = episodes._replace(identity=identity[episodes.seat])
                self.matchmaker.report(item, episodes, identity)
                self.stats.ended(episodes)
                self.stats.add_busy("record", time.perf_counter() - start)
            elif item.opens:
                self.recorder.open(item.seats, item.identity)
                self.matchmaker.opened(item.seats)
            else:
                dropped = self.recorder.close(item.seats, item.buffers, item.recorded)
                if dropped:
                    logging.info(
                        "session %d: dropped %d steps of partial unrolls", item.session_id, dropped
                    )
            self._records.done()


class _LoopSink:
    """Delivers replies to asyncio futures on their event loop, all of a batch in one callback."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop

    def __hash__(self) -> int:
        return hash(self._loop)

    def __eq__(self, other) -> bool:
        return isinstance(other, _LoopSink) and other._loop is self._loop

    def deliver(self, replies) -> None:
        answered = [(f, a if isinstance(a, BaseException) else a[:2]) for f, a in replies]
        self._loop.call_soon_threadsafe(_resolve, answered)


def _sink_of(future):
    """Where a request's reply goes when it is not a concurrent.futures.Future: a sink whose
    `deliver([(future, Answer or exception), ...])` takes a batch's replies at once (the event
    loop of an asyncio future, or the `sink` of a front end's request)."""
    if isinstance(future, asyncio.Future):
        return _LoopSink(future.get_loop())
    return getattr(future, "sink", None)


def _resolve(replies) -> None:
    """Sets (future, result or exception) pairs, on the futures' event loop."""
    for future, outcome in replies:
        if future.done():
            continue
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)


def _written(requests: list[Request], ran: np.ndarray, target: np.ndarray) -> np.ndarray | None:
    """bool [m]: the ran rows whose step a front end wrote in place already: where the placement
    puts it (a row it wrote elsewhere, which would be a bug, is written again by the store)."""
    if all(r.written is None for r in requests):
        return None
    written = np.concatenate(
        [r.written if r.written is not None else np.zeros(r.num_rows, np.bool_) for r in requests]
    )[ran]
    wrote_at = np.concatenate(
        [r.wrote_at if r.wrote_at is not None else np.full(r.num_rows, -1) for r in requests]
    )[ran]
    return written & (wrote_at == target)


def _moves(job: _Job, steps: int, overlap: int = 0) -> dict:
    """Per request (its index): the (src, dst) flat steps its writer repeats, for the unrolls this
    batch completed whose step T it wrote in place: step T of the old buffer is step `overlap`
    of the new one (steps = T + 1). The store repeats the others itself."""
    place = job.placement
    if place is None or job.written is None or not place.done_row.size:
        return {}
    mine = job.written[place.done_row]
    if not mine.any():
        return {}
    rows = place.done_row[mine]
    src, dst = place.target[rows], place.done_new[mine] * steps + overlap
    request = np.repeat(np.arange(len(job.requests)), [r.num_rows for r in job.requests])
    request = request[job.ran][rows]
    return {int(i): (src[request == i], dst[request == i]) for i in np.unique(request)}


def _concatenate(parts: list[Rows]) -> Rows:
    """The per-row fields of several requests' rows, concatenated (obs and extras left empty).
    Always copies, even one request's: a front end's rows are views of its segment, which it
    reuses once it has its actions, and the recorder reads these after that."""
    return Rows({}, {}, *(np.concatenate([p[i] for p in parts]) for i in _ROW_FIELDS))


_ROW_FIELDS = range(2, len(Rows._fields))  # Rows' per-row fields follow obs and extras


def _policy_inputs(requests: list[Request], ran: np.ndarray) -> tuple[dict, dict, bool]:
    """obs and extras of the rows the policy runs on, padded to the policy's batch size
    (seedlike.policy.bucket_size), and whether they are views of a front end's arena.

    When every row runs and the requests' rows lie side by side in one arena (a front end writes
    each step right after the previous one), they are rows of the arena itself, padded with the
    rows after them: no copy here, and JAX reads them in place on the CPU. Otherwise they are
    copied once into 64-byte aligned arrays, padded with zeros."""
    m = int(ran.sum())
    size = bucket_size(m)
    if m == ran.shape[0] and requests[0].span is not None:
        arena, start = requests[0].span
        end = start
        for r in requests:
            if r.span is None or r.span[0] is not arena or r.span[1] != end:
                break
            end += r.num_rows
        else:
            if start + size <= arena.rows:
                views = [{k: a[start : start + size] for k, a in d.items()}
                         for d in (arena.obs, arena.extras)]  # fmt: skip
                return views[0], views[1], True
    out = []
    for part in ("obs", "extras"):
        arrays = {}
        for key, array in getattr(requests[0].rows, part).items():
            buffer = aligned_empty((size, *array.shape[1:]), array.dtype)  # JAX takes it as is
            offset, start = 0, 0
            for r in requests:
                n = r.num_rows
                mask = ran[start : start + n]
                source = getattr(r.rows, part)[key]
                taken = source if mask.all() else source[mask]
                buffer[offset : offset + taken.shape[0]] = taken
                offset += taken.shape[0]
                start += n
            buffer[offset:] = 0
            arrays[key] = buffer
        out.append(arrays)
    return out[0], out[1], False


def _gather_outputs(groups, rows: int) -> PolicyOutput:
    """The outputs of every policy group, fetched and put back in row order."""
    if len(groups) == 1 and groups[0][0] is None:
        return groups[0][1].fetch()
    parts = [(idx, pending.fetch()) for idx, pending in groups]
    template = parts[0][1]
    out = jax.tree.map(lambda x: np.zeros((rows, *x.shape[1:]), x.dtype), template)
    for idx, part in parts:
        for dst, src in zip(jax.tree.leaves(out), jax.tree.leaves(part)):
            dst[idx] = src
    return out


def latency_summary(latency_ms: list[float]) -> tuple[float, float]:
    if not latency_ms:
        return float("nan"), float("nan")
    return float(np.percentile(latency_ms, 50)), float(np.percentile(latency_ms, 99))


def batch_summary(batch_rows: list[int]) -> float:
    return float(np.mean(batch_rows)) if batch_rows else float("nan")
