"""Complete unrolls into learner batches: whole inference batches in, batches of unroll buffers out.

Alignment (see seedlike.types.Unroll): a row carries the observation after the seat's previous
action and that action's outcome. On arrival the outcome is added to the seat's pending step, then
a new step is recorded if the policy ran on the row (it acts, or it ends the episode: the final
observation's value bootstraps a truncated episode). In turn-based games the rows of a player who
does not move only add their reward to the player's pending step.

Where each step goes was decided before the batch was dispatched (seedlike.server.unrolls:
`UnrollPool.place`); the store writes the small fields of each step there (action, behaviour
log-probability and value, flags, rewards, policy version), the observations of the steps no
front end has written in place already, and the recurrent carry at each unroll's start. A complete
unroll goes into the learner batch being filled as a reference to its buffer (its observations are
not copied); a full batch goes to the `BatchQueue`, and its buffers return to the pool when the
learner is done with them (`LearnerBatch.release`). A closed session takes its partial unrolls
with it: nothing incomplete is ever emitted.

Only the recorder thread calls into the store, so it needs no locks.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from seedlike.league.players import LEARNER
from seedlike.server import influence
from seedlike.server.handoff import Counter
from seedlike.server.unrolls import Placement, UnrollPool, aligned_empty
from seedlike.types import Rows, Unroll

# Small per-step fields of an unroll: name -> dtype (its observations live in the pool); the
# action's dtype and shape are the env's (`small_fields`).
SMALL_FIELDS = {
    "action": np.int32,
    "behaviour_logp": np.float32,
    "behaviour_value": np.float32,
    "valid": np.bool_,
    "first": np.bool_,
    "policy_version": np.int32,
    "reward": np.float32,
    "terminated": np.bool_,
    "truncated": np.bool_,
}
OUTCOMES = ("reward", "terminated", "truncated")


def small_fields(spec) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """name -> (dtype, per-step shape) of the small fields for an EnvSpec."""
    fields = {name: (np.dtype(d), ()) for name, d in SMALL_FIELDS.items()}
    fields["action"] = (spec.action_spec.dtype, spec.action_spec.shape)
    return fields  # a step's, known one step later


class StepRecord(NamedTuple):
    """One inference batch as the recorder sees it: every row, and what the policy did on the m
    rows it ran on (those that act or end an episode), in row order.

    Layout:
      seat:       int64 [n]  global seat of every row
      reward, terminated, truncated, acting, game_over: [n]  as in seedlike.types.Rows
      ran:        bool  [n]  the policy ran on the row
      obs:        dict key -> [j, ...]  the observations of the steps not written in place, as
                             the policy saw them (after annealing): all m when `written` is None
      extras:     dict key -> [m, ...]  every ran row's extras (legal masks, levels)
      written:    bool  [m]  the step's observations and extras are in place already (a front
                             end wrote them where `placement` says); None: none are
      first:      bool  [m]  the step starts an episode
      policy:     int64 [m]  who played (seedlike.league.players policy ids)
      carry:      [m, ...]   recurrent state before the step (() feed-forward)
      action:     int32 [m] (float32 [m, K]: EnvSpec.action_spec);  logp, value: float32 [m]
      placement:  where the steps go (seedlike.server.unrolls.Placement); None: no unrolls
      policy_version: of the learning policy's params
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
    written: np.ndarray | None
    first: np.ndarray
    policy: np.ndarray
    carry: Any
    action: np.ndarray
    logp: np.ndarray
    value: np.ndarray
    placement: Placement | None
    policy_version: int

    @classmethod
    def of(
        cls, seat, rows: Rows, ran, obs, extras, first, policy, carry, output, policy_version,
        placement=None, written=None,
    ) -> StepRecord:  # fmt: skip
        """The record of a batch: `rows` its per-row fields (Rows; observations are not read
        from it), `obs`/`extras` what the policy saw, `output` the policy's
        (seedlike.policy.PolicyOutput: action, logp, value)."""
        return cls(
            seat, rows.reward, rows.terminated, rows.truncated, rows.acting, rows.game_over, ran,
            obs, extras, written, first, policy, carry, output.action, output.logp,
            output.value, placement, int(policy_version),
        )  # fmt: skip


def _flat(small: dict) -> dict:
    """Every small field [buffers, T+1, ...] as a view [buffers * (T+1), ...]."""
    return {name: a.reshape((-1, *a.shape[2:])) for name, a in small.items()}


class Stopped(Exception):
    """The batch queue was closed while the store waited for room."""


class LearnerBatch:
    """A full learner batch: B unrolls, their small fields copied out, their observations still
    in the pool's buffers until `unroll()` gathers them; `release()` gives the buffers back."""

    def __init__(self, pool: UnrollPool, size: int, carry_template):
        self.pool = pool
        self.buffers = np.zeros(size, np.int64)
        self.small = {
            name: np.zeros((size, pool.steps, *shape), d)
            for name, (d, shape) in small_fields(pool.spec).items()
        }
        self.carry = jax.tree.map(lambda c: np.zeros((size, *c.shape[1:]), c.dtype), carry_template)
        self.filled = 0
        self.identity = np.zeros(size, np.int64)  # per unroll: the identity that acted it

    def unroll(self, device=None) -> Unroll:
        """The batch as stacked unrolls [B, T+1, ...]. Observations are gathered from the pool
        into 64-byte aligned host arrays (which JAX takes without a copy on the CPU), or with a
        `device` (a jax.Device) stacked there: each buffer crosses once, straight from the pool,
        and the host copies nothing (an accelerator host's learn thread spent longer gathering
        a batch on the host than learning from it). Either way the buffers can be released once
        this returns."""
        t, b = self.pool.horizon, self.buffers
        spec = self.pool.spec

        def gathered(kind, key, s):
            name = f"{kind}/{key}"
            if device is not None:
                return jax.block_until_ready(
                    _stack(jax.device_put(self.pool.slabs(name, b), device))
                )
            out = aligned_empty((b.size, self.pool.steps, *s.shape), s.dtype)
            self.pool.gather(name, b, out)
            return out

        small = self.small
        return Unroll(
            obs={k: gathered("obs", k, s) for k, s in spec.observation.items()},
            extras={k: gathered("extras", k, s) for k, s in spec.extras.items()},
            action=small["action"],
            behaviour_logp=small["behaviour_logp"],
            behaviour_value=small["behaviour_value"],
            valid=small["valid"],
            first=small["first"],
            policy_version=small["policy_version"],
            reward=small["reward"][:, :t],
            terminated=small["terminated"][:, :t],
            truncated=small["truncated"][:, :t],
            carry=self.carry,
        )

    def release(self) -> None:
        self.pool.release(self.buffers)
        self.buffers = self.buffers[:0]


# One compiled stack per batch shape, on the device that holds its inputs.
_stack = jax.jit(jnp.stack)


class BatchQueue:
    """Learner batches between the recorder and the learner loop, with backpressure.

    The store `reserve`s a slot before it starts filling a batch, and reserves the next one as
    soon as a batch is full; it blocks while `slots` batches are filled and not yet taken by the
    learner: acting then waits instead of piling up stale data. With one slot, at most one batch
    is acted while the learner trains on the previous one.
    """

    def __init__(self, slots: int = 1):
        # C-level put and get (seedlike.server.handoff): queue.Queue and Semaphore wake through
        # a Python Condition.
        self._ready: queue.SimpleQueue = queue.SimpleQueue()
        self._slots = Counter(max(int(slots), 1))  # free slots
        self._closed = threading.Event()

    def reserve(self) -> None:
        while not self._slots.down(timeout=0.1):
            if self._closed.is_set():
                raise Stopped()

    def hand_over(self, batch: LearnerBatch) -> None:
        self._ready.put(batch)

    def next_batch(self, timeout: float) -> LearnerBatch | None:
        """The next full batch, or None after `timeout` seconds."""
        try:
            batch = self._ready.get(timeout=timeout)
        except queue.Empty:
            return None
        self._slots.up()
        return batch

    def qsize(self) -> int:
        return self._ready.qsize()

    def close(self) -> None:
        self._closed.set()


class TrajectoryStore:
    """Records steps into the pool's buffers and emits complete unrolls in learner batches.

    Args:
      pool: the seedlike.server.unrolls.UnrollPool that places every step.
      batch_unrolls: unrolls per learner batch.
      batches: where full batches go.
      carry_template: the recurrent state of one seat (a pytree of arrays [1, ...]; () if
        feed-forward): the shape and dtype of the stored carries.
      max_identity_share, fair_share_factor, fair_window_s: how many of a full batch's unrolls one
        identity (an actor identity) may have counted in the loss (seedlike.server.influence
        .loss_mask, over the batches of the last fair_window_s seconds); the rest stay in the
        batch with valid = False, counted in `unrolls_capped`.
      max_policy_lag: unrolls with a step acted more than this many policy versions before the
        newest are kept out of the loss (`unrolls_stale`; 0: no limit).
      reward_scale, reward_floor: each identity's rewards in a full batch are scaled by
        influence.reward_scales over the window (reward_scale 0: never), counted in
        `rewards_scaled`.
      mix_hold: complete unrolls the store may hold back, in batches, so that each batch mixes
        the identities delivering (influence.mixed_batch; 0: batches in arrival order).

    The bounds default to off (1.0 equals server.max_identity_share's default, and the
    others' config defaults are compared in tests/core/test_defaults.py); a learner takes them
    from its config (`from_config`).
    """

    @classmethod
    def from_config(cls, pool, batch_unrolls, batches, carry_template, server_config):
        """The store of a learner: the bounds of its config's `server` section."""
        s = server_config
        return cls(
            pool, batch_unrolls, batches, carry_template,
            max_identity_share=float(s.max_identity_share),
            fair_share_factor=float(s.fair_share_factor),
            fair_window_s=float(s.fair_window_s),
            max_policy_lag=int(s.max_policy_lag),
            reward_scale=float(s.reward_scale),
            reward_floor=float(s.reward_floor),
            mix_hold=float(s.mix_hold),
        )  # fmt: skip

    def __init__(
        self,
        pool: UnrollPool,
        batch_unrolls: int = 1,
        batches: BatchQueue | None = None,
        carry_template=(),
        max_identity_share: float = 1.0,
        fair_share_factor: float = 0.0,
        fair_window_s: float = 30.0,
        max_policy_lag: int = 0,
        reward_scale: float = 0.0,
        reward_floor: float = 1.0,
        mix_hold: float = 0.0,
    ):
        self.pool = pool
        self.spec = pool.spec
        self.horizon = pool.horizon
        self.batch_unrolls = int(batch_unrolls)
        self.batches = batches
        self._max_share = float(max_identity_share)
        self._fair_factor = float(fair_share_factor)
        self._window_s = float(fair_window_s)
        self._max_lag = int(max_policy_lag)
        self._version = 0  # the newest policy version the recorded steps were acted on
        # Per recent batch: time, unrolls offered and counted per identity.
        self._window: collections.deque = collections.deque()
        self._rewards = influence.WindowSums()  # each identity's sum |reward|, steps in the window
        self._offered: collections.Counter = collections.Counter()  # the window's totals
        self._counted: collections.Counter = collections.Counter()
        self._reward_scale = float(reward_scale)
        self._reward_floor = float(reward_floor)
        self._carry_template = jax.tree.map(np.asarray, carry_template)
        self._batch: LearnerBatch | None = None  # the next learner batch (its slot reserved)
        self._hold = int(round(float(mix_hold) * self.batch_unrolls))
        self._held = np.zeros(0, np.int64)  # complete unrolls waiting for a batch, oldest first
        self._held_identity = np.zeros(0, np.int64)
        # Per buffer: the small fields of its steps and the carry before its step 0.
        self._small = {
            name: np.zeros((0, pool.steps, *shape), d)
            for name, (d, shape) in small_fields(pool.spec).items()
        }
        self._flat = _flat(self._small)
        self._carry_start = jax.tree.map(lambda c: c[:0], self._carry_template)
        # With overlapping unrolls, the carry before each step T-overlap..T (a successor starts
        # at the first; its own steps up to `overlap` repeat the others).
        tail = pool.overlap + 1 if pool.overlap else 0
        self._carry_tail = jax.tree.map(
            lambda c: np.zeros((0, tail, *c.shape[1:]), c.dtype), self._carry_template
        )
        self._carry_leaves = (
            (lambda: jax.tree.leaves(self._carry_start))
            if jax.tree.leaves(carry_template)
            else None
        )
        self.identity = np.zeros(0, np.int64)  # per seat: who opened it
        self._open = np.zeros(0, np.bool_)  # per seat: open now
        self.unrolls_emitted = 0
        self.steps_written_in_place = 0  # by front ends (rows written once)
        self.steps_dropped = 0
        self.unrolls_capped = 0  # kept out of the loss by the share caps (total)
        self.rewards_scaled = 0  # nonzero rewards scaled down by the reward bound (total)
        self.reward_bounded: frozenset = frozenset()  # identities the last batch's bound scaled
        self.unrolls_stale = 0  # kept out of the loss: acted more than max_policy_lag versions ago
        self.last_batch_max_share = 0.0  # the largest identity's share of the last batch's loss

    # Seats ------------------------------------------------------------------------------------

    def open(self, seats: np.ndarray, identity: int = 0) -> None:
        """Starts recording `seats` (new ones, or released ones given to a new session) for
        `identity` (the actor identity: the unit of the share caps)."""
        if seats.size and seats.max() >= self.identity.shape[0]:
            size = max(int(seats.max()) + 1, 2 * self.identity.shape[0])
            grown = np.zeros(size - self.identity.size, np.int64)
            self.identity = np.concatenate([self.identity, grown])
            self._open = np.concatenate([self._open, np.zeros(size - self._open.size, np.bool_)])
        self.identity[seats] = identity
        self._open[seats] = True

    def connected_identities(self) -> np.ndarray:
        """The identities with open seats (also read by the learner thread: `open` replaces the
        two arrays, one after the other, when seats grow)."""
        identity, is_open = self.identity, self._open
        n = min(identity.size, is_open.size)
        return np.unique(identity[:n][is_open[:n]])

    def close(self, seats: np.ndarray, buffers: np.ndarray, recorded: np.ndarray) -> int:
        """Forgets closed seats: their partial unrolls (`buffers`, `recorded` steps in each, from
        UnrollPool.close) go back to the pool; returns how many recorded steps were lost."""
        if not seats.size:
            return 0
        self._open[seats] = False
        self.pool.release(buffers[buffers >= 0])
        dropped = int(recorded.sum())
        self.steps_dropped += dropped
        return dropped

    # Recording --------------------------------------------------------------------------------

    def write_steps(self, step: StepRecord, reward: np.ndarray | None = None) -> None:
        """Records one inference batch; `reward` [n] is what is learned from (shaped for teams;
        default the rows' own)."""
        place = step.placement
        reward = step.reward if reward is None else reward
        self._version = max(self._version, step.policy_version)
        self._fit(self.pool.capacity)
        f = self._flat  # every small field as [buffers * (T+1)]: flat step indices address it

        # 1. The outcome of each seat's pending step.
        at, terminated, truncated = place.pending, step.terminated, step.truncated
        if at.size and at.min() < 0:  # seats that have recorded nothing yet have none
            pending = at >= 0
            at, reward = at[pending], reward[pending]
            terminated, truncated = terminated[pending], truncated[pending]
        f["reward"][at] += reward
        f["terminated"][at] |= terminated
        f["truncated"][at] |= truncated

        # 2. New steps for the rows the policy ran on.
        at = place.target
        copy = np.ones(place.target.shape[0], np.bool_) if step.written is None else ~step.written
        self.steps_written_in_place += int(copy.size - copy.sum())
        if copy.any():
            flat = place.target[copy]
            for key, array in step.obs.items():
                self.pool.write(f"obs/{key}", flat, array)
            for key, array in step.extras.items():
                self.pool.write(
                    f"extras/{key}", flat, array if step.written is None else array[copy]
                )
        done = step.terminated | step.truncated
        acted = step.acting[step.ran] & ~done[step.ran]
        f["action"][at] = step.action
        f["behaviour_logp"][at] = step.logp
        f["behaviour_value"][at] = step.value
        # Only the learning policy's moves are trained on (opponents' seats keep their state).
        f["valid"][at] = acted & (step.policy == LEARNER)
        f["first"][at] = step.first
        f["policy_version"][at] = step.policy_version
        for key in OUTCOMES:
            f[key][at] = 0
        if self._carry_leaves:
            position = at % self.pool.steps
            starts = position == 0
            for start, before in zip(self._carry_leaves(), jax.tree.leaves(step.carry)):
                start[at[starts] // self.pool.steps] = before[starts]
            if self.pool.overlap:
                tail = position >= self.horizon - self.pool.overlap
                j = position[tail] - (self.horizon - self.pool.overlap)
                for kept, before in zip(
                    jax.tree.leaves(self._carry_tail), jax.tree.leaves(step.carry)
                ):
                    kept[at[tail] // self.pool.steps, j] = before[tail]

        # 3. Complete unrolls go to the learner; their last step is the next unroll's first.
        if place.done_old.size:
            self._complete(step, place, copy)

    def _complete(self, step: StepRecord, place: Placement, copied: np.ndarray) -> None:
        t, f, o, steps = self.horizon, self._small, self.pool.overlap, self.pool.steps
        old, new = place.done_old, place.done_new
        for key, field in f.items():
            field[new, :o] = field[old, t - o : t]  # complete steps: outcomes included
            field[new, o] = 0 if key in OUTCOMES else field[old, t]
        row = place.done_row  # the ran row that completed each unroll (its step T)
        if o:  # the new buffer starts at the old one's step T-o; of its repeated steps 0..o,
            # those at T-o or later keep their carries (old steps 2(T-o)..T, when 2o >= T)
            for start, kept in zip(
                jax.tree.leaves(self._carry_start), jax.tree.leaves(self._carry_tail)
            ):
                start[new] = kept[old, 0]
                if 2 * o >= t:
                    kept[new, : 2 * o - t + 1] = kept[old, t - o : o + 1]
        else:
            for start, before in zip(
                jax.tree.leaves(self._carry_start), jax.tree.leaves(step.carry)
            ):
                start[new] = before[row]
        if o:  # steps T-o..T-1 were written in earlier batches, by whoever: all are there
            shift = np.arange(o)
            self.pool.copy_step(
                (old[:, None] * steps + t - o + shift).reshape(-1),
                (new[:, None] * steps + shift).reshape(-1),
            )
        mine = copied[place.done_row]  # steps T this store wrote: it repeats them (front ends
        if mine.any():  # repeat theirs)
            self.pool.copy_step(old[mine] * steps + t, new[mine] * steps + o)
        keep = f["valid"][old, :t].any(axis=1)
        self.pool.release(old[~keep])
        self._emit(old[keep], self.identity[place.done_seat[keep]])

    def _emit(self, buffers: np.ndarray, identities: np.ndarray) -> None:
        """Adds complete unrolls to the ones waiting, and fills learner batches from them
        (references to their buffers) as influence.mixed_batch chooses."""
        if self._batch is None:
            self.batches.reserve()
            self._batch = LearnerBatch(self.pool, self.batch_unrolls, self._carry_template)
        self._held = np.concatenate([self._held, buffers])
        self._held_identity = np.concatenate([self._held_identity, identities])
        self.unrolls_emitted += buffers.size
        active = self._delivering()
        if active > 1:
            beyond = influence.beyond_hold(self._held_identity, self.batch_unrolls + self._hold)
            if beyond.any():
                self.pool.release(self._held[beyond])
                self.unrolls_capped += int(beyond.sum())
                self._held, self._held_identity = self._held[~beyond], self._held_identity[~beyond]
        while self._held.size >= self.batch_unrolls:
            take = influence.mixed_batch(
                self._held_identity, self.batch_unrolls, active, self._hold
            )
            if take is None:
                return
            b, here = self._batch, self._held[take]
            b.buffers[:] = here
            b.identity[:] = self._held_identity[take]
            for name, field in self._small.items():
                b.small[name][:] = field[here]
            for dst, src in zip(jax.tree.leaves(b.carry), jax.tree.leaves(self._carry_start)):
                dst[:] = src[here]
            b.filled = here.size
            left = np.ones(self._held.size, np.bool_)
            left[take] = False
            self._held, self._held_identity = self._held[left], self._held_identity[left]
            if self._bound(b):
                self.batches.hand_over(b)
                # The next batch's slot is taken now, not when its first unroll completes: with
                # every seat's unroll completing at once (lockstep actors), waiting until then
                # would let a whole extra round of steps be acted on the old policy while the
                # learner works, and those steps reach it a version later (staleness ~2).
                self.batches.reserve()
            else:  # nothing in it counts: no update from it (the slot stays reserved)
                b.release()
            self._batch = LearnerBatch(self.pool, self.batch_unrolls, self._carry_template)

    def _delivering(self) -> int:
        """How many identities a batch waits for: the connected ones whose unrolls in the
        window's batches and waiting come to at least 2 / B of the median identity's. A batch
        needs one of a slow identity's unrolls, so one that delivers more never loses data to
        the wait, and one that connects and trickles (or sends nothing) holds no one back."""
        connected = self.connected_identities() if self._hold > 0 else ()
        if len(connected) < 2:  # the usual run: nothing to count on the recorder's path
            return 1
        recent = self._offered + collections.Counter(self._held_identity.tolist())
        connected = set(connected.tolist())
        sizes = [n for who, n in recent.items() if who in connected]
        if len(sizes) < 2:
            return 1
        least = np.median(sizes) * 2.0 / self.batch_unrolls
        return sum(n >= least for n in sizes)

    @property
    def unrolls_held(self) -> int:
        """Complete unrolls waiting for a batch (the mix's hold, and a batch not yet full)."""
        return int(self._held.size)

    def _bound(self, batch: LearnerBatch) -> bool:
        """Applies the influence bounds to a full batch (seedlike.server.influence); False when
        none of its unrolls count."""
        now = time.monotonic()
        while self._window and self._window[0][0] < now - self._window_s:
            _, o, c = self._window.popleft()
            self._offered.subtract(o)
            self._counted.subtract(c)
        self._offered = +self._offered  # drops the identities with nothing left in the window
        self._counted = +self._counted
        self._rewards.expire(now - self._window_s)
        mine = collections.Counter(batch.identity.tolist())
        offered = self._offered + mine
        before = self._counted
        counted = influence.loss_mask(
            batch.identity,
            self.connected_identities().size,
            self._fair_factor,
            self._max_share,
            offered,
            before,
        )
        self.unrolls_capped += int(counted.size - counted.sum())  # the share caps' alone
        if self._max_lag > 0:
            # Unrolls acted on policies too far behind (a paced or slow actor's) teach nothing.
            versions = np.where(batch.small["valid"], batch.small["policy_version"], self._version)
            stale = self._version - versions.min(axis=1) > self._max_lag
            self.unrolls_stale += int((stale & counted).sum())
            counted &= ~stale
        batch.small["valid"][~counted] = False
        reward, t = batch.small["reward"], self.horizon
        steps = batch.small["valid"][counted, :t]
        here = influence.reward_sums(reward[counted, :t], steps, batch.identity[counted])
        kept = collections.Counter(batch.identity[counted].tolist())
        self._window.append((now, mine, kept))
        self._rewards.add(now, here)
        self._offered.update(mine)
        self._counted.update(kept)
        if not counted.any():
            return False
        shares = np.unique(batch.identity[counted], return_counts=True)[1]
        self.last_batch_max_share = float(shares.max() / counted.sum())
        # Over the window, not this batch alone: a batch one identity filled is bounded too.
        scales = influence.reward_scales(
            self._rewards.means(), self._reward_scale, self._reward_floor
        )
        self.reward_bounded = frozenset(scales)
        for who, factor in scales.items():
            rows = batch.identity == who
            if rows.any():
                self.rewards_scaled += int(np.count_nonzero(reward[rows]))
                reward[rows] *= np.float32(factor)
        return True

    def _fit(self, buffers: int) -> None:
        """Room for the small fields of `buffers` buffers (the pool may have grown)."""
        have = self._small["action"].shape[0]
        if buffers <= have:
            return
        self._small = {
            name: np.concatenate([a, np.zeros((buffers - have, *a.shape[1:]), a.dtype)])
            for name, a in self._small.items()
        }
        self._flat = _flat(self._small)

        def grow(a, c):
            return np.concatenate([a, np.zeros((buffers - have, *c.shape[1:]), c.dtype)])

        self._carry_start = jax.tree.map(grow, self._carry_start, self._carry_template)
        self._carry_tail = jax.tree.map(
            lambda a, c: np.concatenate([a, np.zeros((buffers - have, *a.shape[1:]), a.dtype)]),
            self._carry_tail,
            self._carry_template,
        )
