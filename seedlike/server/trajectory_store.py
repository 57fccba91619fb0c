"""Per-seat unroll buffers: whole inference batches in, learner batches of complete unrolls out.

Alignment (see seedlike.types.Unroll): a row carries the observation after the seat's previous
action and that action's outcome. On arrival the outcome is added to the seat's pending step, then
a new step is recorded if the policy ran on the row (it acts, or it ends the episode: the final
observation's value bootstraps a truncated episode). In turn-based games the rows of a player who
does not move only add their reward to the player's pending step.

Seats are global (seedlike.server.seats), so one `record` call handles every row of an inference
batch with a few vectorized operations, whatever the number of actors in it. Complete unrolls are
written straight into the learner's next batch [batch_unrolls, T+1, ...] (no per-unroll copies
and no stacking later); a full batch goes to the `BatchQueue`. A closed session takes its partial
unrolls with it: nothing incomplete is ever emitted.

Only the recorder thread calls into the store, so it needs no locks.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, NamedTuple

import jax
import numpy as np

from seedlike.league.players import LEARNER
from seedlike.types import EnvSpec, Unroll


class StepRecord(NamedTuple):
    """One inference batch as the store records it: every row, and what the policy did on the m
    rows it ran on (those that act or end an episode), in row order.

    Layout:
      seat:       int64 [n]  global seat of every row
      reward, terminated, truncated, acting, game_over: [n]  as in seedlike.types.Rows
      ran:        bool  [n]  the policy ran on the row
      obs, extras: dict key -> [m, ...], as the policy saw them (after annealing)
      first:      bool  [m]  the step starts an episode
      policy:     int64 [m]  who played (seedlike.league.players policy ids)
      carry:      [m, ...]   recurrent state before the step (() feed-forward)
      action:     int32 [m];  logp, value: float32 [m]
      version:    policy version of the learning policy's params
    """

    seat: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    acting: np.ndarray
    game_over: np.ndarray
    ran: np.ndarray
    obs: dict
    extras: dict
    first: np.ndarray
    policy: np.ndarray
    carry: Any
    action: np.ndarray
    logp: np.ndarray
    value: np.ndarray
    version: int


class Episodes(NamedTuple):
    """Episodes that ended (whole games: an Atari life lost does not end one), [k] each."""

    seat: np.ndarray  # int64: global seat
    episode_return: np.ndarray  # float64: undiscounted
    length: np.ndarray  # int64: steps the seat acted
    policy: np.ndarray  # int64: who played the seat

    @classmethod
    def empty(cls) -> Episodes:
        return cls(*(np.zeros(0, d) for d in (np.int64, np.float64, np.int64, np.int64)))

    @classmethod
    def concatenate(cls, parts: list[Episodes]) -> Episodes:
        if not parts:
            return cls.empty()
        return cls(*(np.concatenate(fields) for fields in zip(*parts)))


class Stopped(Exception):
    """The batch queue was closed while the store waited for room."""


class BatchQueue:
    """Learner batches between the recorder and the learner loop, with backpressure.

    The store `reserve`s a slot before it starts filling a batch, and reserves the next one as
    soon as a batch is full; it blocks while `slots` batches are filled and not yet taken by the
    learner: acting then waits instead of piling up stale data. With one slot, at most one batch
    is acted while the learner trains on the previous one.
    """

    def __init__(self, slots: int = 1):
        self._ready: queue.Queue = queue.Queue()
        self._slots = threading.Semaphore(max(int(slots), 1))
        self._closed = threading.Event()

    def reserve(self) -> None:
        while not self._slots.acquire(timeout=0.1):
            if self._closed.is_set():
                raise Stopped()

    def put(self, batch: Unroll) -> None:
        self._ready.put(batch)

    def get(self, timeout: float) -> Unroll | None:
        """The next full batch, or None after `timeout` seconds."""
        try:
            batch = self._ready.get(timeout=timeout)
        except queue.Empty:
            return None
        self._slots.release()
        return batch

    def qsize(self) -> int:
        return self._ready.qsize()

    def close(self) -> None:
        self._closed.set()


class TrajectoryStore:
    """Builds unrolls of `horizon` steps for every open seat and episode statistics.

    Args:
      spec: the environment spec (as the server records it, see seedlike.server.anneal).
      horizon: T, the number of learning steps per unroll; None keeps only episode statistics
        (serving a frozen policy).
      batch_unrolls: unrolls per learner batch.
      batches: where full batches go.
      carry_template: the recurrent state of one seat (a pytree of arrays [1, ...]; () if
        feed-forward): the shape and dtype of the stored carries.
      max_owner_share: the largest share of a learner batch whose unrolls may come from one owner
        (the session that opened the seats: one actor). Unrolls beyond it are dropped and
        counted in `unrolls_capped`, so one actor, honest or not, cannot make up a whole batch.
        1.0: no cap. The cap never goes below an equal split of the batch among the owners with
        open seats, so batches always fill, however few actors are connected.
      teams: shapes the rewards that are learned from (seedlike.teams.Teams; team spirit,
        zero-sum, time decay); None or no shaping configured: raw rewards. Episode returns are
        always raw.
    """

    def __init__(
        self,
        spec: EnvSpec,
        horizon: int | None = None,
        batch_unrolls: int = 1,
        batches: BatchQueue | None = None,
        carry_template=(),
        max_owner_share: float = 1.0,
        teams=None,
    ):
        self.spec = spec
        self._teams = teams if teams is not None and teams.shapes else None
        self.horizon = horizon
        self.batch_unrolls = int(batch_unrolls)
        self.batches = batches
        self._owner_cap = max(1, int(max_owner_share * self.batch_unrolls))
        self._owner_counts: dict[int, int] = {}  # unrolls per owner in the batch being filled
        self._owner_seats: dict[int, int] = {}  # open seats per owner
        self._carry_template = jax.tree.map(np.asarray, carry_template)
        self._batch: Unroll | None = None  # the learner batch being filled
        self._filled = 0
        self._capacity = 0
        self._fields: dict[str, np.ndarray] = {}
        self._carry_start = jax.tree.map(lambda c: c[:0], self._carry_template)
        self.pos = np.zeros(0, np.int64)  # steps recorded in each seat's current unroll
        self.in_episode = np.zeros(0, np.bool_)
        self.episode_return = np.zeros(0, np.float64)
        self.episode_length = np.zeros(0, np.int64)
        self.episode_policy = np.zeros(0, np.int64)
        self.owner = np.zeros(0, np.int64)  # who opened each seat
        self.rows_received = 0
        self.unrolls_emitted = 0
        self.steps_dropped = 0
        self.unrolls_capped = 0
        self.last_batch_max_share = 0.0  # the largest owner's share of the last full batch

    # Seats ------------------------------------------------------------------------------------

    def open(self, seats: np.ndarray, owner: int = 0) -> None:
        """Starts recording `seats` (new ones, or released ones given to a new session) for
        `owner` (the session: the unit of max_owner_share)."""
        if seats.size and seats.max() >= self._capacity:
            self._grow(int(seats.max()) + 1)
        self.owner[seats] = owner
        if seats.size:
            self._owner_seats[owner] = self._owner_seats.get(owner, 0) + int(seats.size)
        self.pos[seats] = 0
        self.in_episode[seats] = False
        self.episode_return[seats] = 0.0
        self.episode_length[seats] = 0
        self.episode_policy[seats] = LEARNER

    def close(self, seats: np.ndarray) -> int:
        """Forgets the partial unrolls of `seats`; returns how many recorded steps were lost."""
        if not seats.size:
            return 0
        owners, counts = np.unique(self.owner[seats], return_counts=True)
        for owner, count in zip(owners.tolist(), counts.tolist()):
            left = self._owner_seats.get(owner, 0) - count
            if left > 0:
                self._owner_seats[owner] = left
            else:
                self._owner_seats.pop(owner, None)
        dropped = int(self.pos[seats].sum())
        self.pos[seats] = 0
        self.steps_dropped += dropped
        return dropped

    # Recording --------------------------------------------------------------------------------

    def record(self, step: StepRecord) -> Episodes:
        """Records one inference batch; returns the episodes that ended with it."""
        self.rows_received += step.seat.shape[0]
        seat = step.seat
        reward = step.reward
        if self._teams is not None and self.horizon is not None:
            # The pending action was the seat's episode_length-th of its episode.
            t = np.maximum(self.episode_length[seat] - 1, 0)
            reward = self._teams.shape(step.reward, seat, t, step.version)
        episodes = self._episode_statistics(step)
        if self.horizon is None:
            return episodes
        done = step.terminated | step.truncated
        f = self._fields

        # 1. The outcome of each seat's pending step (shaped for teams).
        pending = self.pos[seat] > 0
        s, idx = seat[pending], self.pos[seat[pending]] - 1
        f["reward"][s, idx] += reward[pending]
        f["terminated"][s, idx] |= step.terminated[pending]
        f["truncated"][s, idx] |= step.truncated[pending]

        # 2. New steps for the rows the policy ran on.
        s = seat[step.ran]
        p = self.pos[s]
        for key, array in step.obs.items():
            f["obs/" + key][s, p] = array
        for key, array in step.extras.items():
            f["extras/" + key][s, p] = array
        acted = step.acting[step.ran] & ~done[step.ran]
        f["action"][s, p] = step.action
        f["behaviour_logp"][s, p] = step.logp
        f["behaviour_value"][s, p] = step.value
        # Only the learning policy's moves are trained on (opponents' seats keep their state).
        f["valid"][s, p] = acted & (step.policy == LEARNER)
        f["first"][s, p] = step.first
        f["policy_version"][s, p] = step.version
        for key in ("reward", "terminated", "truncated"):
            f[key][s, p] = 0
        starts = p == 0
        for start, before in zip(jax.tree.leaves(self._carry_start), jax.tree.leaves(step.carry)):
            start[s[starts]] = before[starts]
        self.pos[s] += 1

        # 3. Complete unrolls go to the learner; their last step is the first of the next one.
        t = self.horizon
        complete = np.flatnonzero(self.pos[s] == t + 1)
        if complete.size:
            k = s[complete]
            self._emit(k[f["valid"][k, :t].any(axis=1)])
            for key, field in f.items():
                field[k, 0] = 0 if key in ("reward", "terminated", "truncated") else field[k, t]
            carry_last = jax.tree.map(lambda c: c[complete], step.carry)
            for start, before in zip(
                jax.tree.leaves(self._carry_start), jax.tree.leaves(carry_last)
            ):
                start[k] = before
            self.pos[k] = 1
        return episodes

    def _episode_statistics(self, step: StepRecord) -> Episodes:
        """Returns over whole games; a seat's first row starts its first game."""
        seat, over = step.seat, step.game_over
        live = self.in_episode[seat]
        self.episode_return[seat] += np.where(live, step.reward, 0.0)
        ran = seat[step.ran]
        starting = step.first
        self.episode_policy[ran[starting]] = step.policy[starting]
        ended = seat[over & live]
        episodes = Episodes(
            ended.copy(),
            self.episode_return[ended].copy(),
            self.episode_length[ended].copy(),
            self.episode_policy[ended].copy(),
        )
        self.episode_return[seat[over]] = 0.0
        self.episode_length[seat[over]] = 0
        self.in_episode[seat] = ~over
        done = step.terminated | step.truncated
        acted = ran[step.acting[step.ran] & ~done[step.ran]]
        self.episode_length[acted] += 1
        return episodes

    def _emit(self, seats: np.ndarray) -> None:
        """Copies the unrolls of `seats` into learner batches."""
        t = self.horizon
        while seats.size:
            if self._batch is None:
                self.batches.reserve()
                self._batch = self._empty_batch()
                self._filled = 0
            take = seats[: self.batch_unrolls - self._filled]
            seats = seats[take.size :]
            take = self._within_owner_cap(take)
            if not take.size:
                continue
            rows = slice(self._filled, self._filled + take.size)
            b, f = self._batch, self._fields
            # Copied once, straight into the batch: `a[rows] = f[take]` would copy twice
            # (through a temporary), and observations are most of the bytes the server moves.
            # (mode="clip": the seats are valid, and out= is not buffered then.)
            for key, dst in (("obs", b.obs), ("extras", b.extras)):
                for name, array in dst.items():
                    np.take(f[f"{key}/{name}"], take, axis=0, out=array[rows], mode="clip")
            for name in ("action", "behaviour_logp", "behaviour_value", "valid", "first"):
                getattr(b, name)[rows] = f[name][take]
            b.policy_version[rows] = f["policy_version"][take]
            for name in ("reward", "terminated", "truncated"):
                getattr(b, name)[rows] = f[name][take, :t]
            for dst, src in zip(jax.tree.leaves(b.carry), jax.tree.leaves(self._carry_start)):
                dst[rows] = src[take]
            self._filled += take.size
            self.unrolls_emitted += take.size
            if self._filled == self.batch_unrolls:
                self.last_batch_max_share = max(self._owner_counts.values()) / self._filled
                self._owner_counts = {}
                self.batches.put(self._batch)
                # The next batch's slot is taken now, not when its first unroll completes: with
                # every seat's unroll completing at once (lockstep actors), waiting until then
                # would let a whole extra round of steps be acted on the old policy while the
                # learner works, and those steps reach it a version later (staleness ~2, not ~1).
                self.batches.reserve()
                self._batch = self._empty_batch()
                self._filled = 0

    def _within_owner_cap(self, seats: np.ndarray) -> np.ndarray:
        """The seats whose unrolls fit their owner's remaining share of the batch being filled
        (in order); the others are dropped. Counts every owner's unrolls, cap or not."""
        owners = self.owner[seats]
        equal_split = -(-self.batch_unrolls // max(len(self._owner_seats), 1))
        cap = max(self._owner_cap, equal_split)
        keep = np.ones(seats.size, np.bool_)
        for owner in np.unique(owners):  # a few actors per call, not a loop over rows
            mine = np.flatnonzero(owners == owner)
            room = max(cap - self._owner_counts.get(int(owner), 0), 0)
            keep[mine[room:]] = False
            self._owner_counts[int(owner)] = self._owner_counts.get(int(owner), 0) + min(
                room, mine.size
            )
        self.unrolls_capped += int(seats.size - keep.sum())
        return seats[keep]

    # Buffers ----------------------------------------------------------------------------------

    def _step_specs(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        specs = {f"obs/{k}": (s.shape, s.dtype) for k, s in self.spec.observation.items()}
        specs.update({f"extras/{k}": (s.shape, s.dtype) for k, s in self.spec.extras.items()})
        specs.update(
            action=((), np.int32),
            behaviour_logp=((), np.float32),
            behaviour_value=((), np.float32),
            valid=((), np.bool_),
            first=((), np.bool_),
            policy_version=((), np.int32),
            reward=((), np.float32),
            terminated=((), np.bool_),
            truncated=((), np.bool_),
        )
        return specs

    def _empty_batch(self) -> Unroll:
        b, t = self.batch_unrolls, self.horizon
        specs = self._step_specs()

        def empty(name, steps):
            shape, dtype = specs[name]
            return np.empty((b, steps, *shape), dtype)

        return Unroll(
            obs={k: empty(f"obs/{k}", t + 1) for k in self.spec.observation},
            extras={k: empty(f"extras/{k}", t + 1) for k in self.spec.extras},
            action=empty("action", t + 1),
            behaviour_logp=empty("behaviour_logp", t + 1),
            behaviour_value=empty("behaviour_value", t + 1),
            valid=empty("valid", t + 1),
            first=empty("first", t + 1),
            policy_version=empty("policy_version", t + 1),
            reward=empty("reward", t),
            terminated=empty("terminated", t),
            truncated=empty("truncated", t),
            carry=jax.tree.map(
                lambda c: np.empty((b, *c.shape[1:]), c.dtype), self._carry_template
            ),
        )

    def _grow(self, seats: int) -> None:
        capacity = max(seats, 2 * self._capacity)

        def grown(old, shape, dtype):
            new = np.zeros((capacity, *shape), dtype)
            new[: old.shape[0]] = old
            return new

        self.pos = grown(self.pos, (), np.int64)
        self.in_episode = grown(self.in_episode, (), np.bool_)
        self.episode_return = grown(self.episode_return, (), np.float64)
        self.episode_length = grown(self.episode_length, (), np.int64)
        self.episode_policy = grown(self.episode_policy, (), np.int64)
        self.owner = grown(self.owner, (), np.int64)
        if self.horizon is not None:
            steps = self.horizon + 1
            old = self._fields
            self._fields = {
                name: grown(
                    old.get(name, np.zeros((0, steps, *shape), dtype)), (steps, *shape), dtype
                )
                for name, (shape, dtype) in self._step_specs().items()
            }
            self._carry_start = jax.tree.map(
                lambda c: grown(c, c.shape[1:], c.dtype), self._carry_start
            )
        self._capacity = capacity
