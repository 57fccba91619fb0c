"""Per-seat unroll buffers and recurrent state: rows in, complete unrolls of T+1 steps out.

Alignment (see seedlike.types.Unroll): a row carries the observation after the seat's previous
action and that action's outcome. On arrival the outcome is added to the seat's pending step, then
a new step is recorded if the row acts (or ends the episode, to keep the final observation's value
for bootstrapping truncated episodes). In turn-based games the rows of a player who does not move
only add their reward to the player's pending step.

The store also keeps each seat's recurrent carry (SEED RL: actors hold no state). A seat's first
row and the row after an episode end are marked `first`; the network resets the carry before such a
step. The carry before step 0 of every unroll is kept so the learner can replay it exactly.

All bookkeeping is vectorized over the rows of a batch; only complete unrolls are copied out. A
session (one actor stream) that closes takes its partial unrolls with it: nothing incomplete is
ever emitted. Only the inference thread calls into the store, so it needs no locking.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import jax
import numpy as np

from seedlike.rpc.codec import StepRows
from seedlike.types import EnvSpec, Unroll


class PolicyInputs(NamedTuple):
    first: np.ndarray  # bool [m]: the step starts an episode (the core resets)
    carry: object  # [m, ...] recurrent state before the step
    policy: np.ndarray  # int64 [m]: -1 the learning policy, a snapshot version, or a bot (< -1)
    changed: np.ndarray  # bool [m]: the episode has the change being annealed in


@dataclasses.dataclass
class Episode:
    session_id: int
    seat: int  # env * num_players + player
    episode_return: float
    length: int
    policy: int = -1  # who played the seat: -1 the learning policy, a snapshot version or a bot


class _SessionBuffers:
    def __init__(self, spec: EnvSpec, num_seats: int, horizon: int, carry):
        steps = horizon + 1

        def zeros(shape, dtype):
            return np.zeros((num_seats, steps, *shape), dtype)

        self.obs = {k: zeros(s.shape, s.dtype) for k, s in spec.observation.items()}
        self.extras = {k: zeros(s.shape, s.dtype) for k, s in spec.extras.items()}
        self.action = zeros((), np.int32)
        self.logp = zeros((), np.float32)
        self.value = zeros((), np.float32)
        self.valid = zeros((), np.bool_)
        self.first = zeros((), np.bool_)
        self.version = zeros((), np.int32)
        self.reward = zeros((), np.float32)
        self.terminated = zeros((), np.bool_)
        self.truncated = zeros((), np.bool_)
        self.pos = np.zeros(num_seats, np.int64)  # steps recorded in the current unroll
        self.in_episode = np.zeros(num_seats, np.bool_)
        self.episode_return = np.zeros(num_seats, np.float64)
        self.episode_length = np.zeros(num_seats, np.int64)
        self.next_first = np.ones(num_seats, np.bool_)  # the seat's next step starts an episode
        self.policy = np.full(num_seats, -1, np.int64)  # -1: learning policy; else an opponent
        self.changed = np.ones(num_seats, np.bool_)  # the episode has an annealed-in change
        self.carry = carry  # before the seat's next step
        self.carry_start = jax.tree.map(np.copy, carry)  # before step 0 of the current unroll

    def step_fields(self):
        return (self.action, self.logp, self.value, self.valid, self.first, self.version)

    def outcome_fields(self):
        return (self.reward, self.terminated, self.truncated)


class TrajectoryStore:
    """Builds unrolls of `horizon` steps for every seat of every open session.

    Args:
      spec: the environment spec.
      horizon: T, the number of learning steps per unroll.
      emit: called with every complete Unroll (may block: that is the learner's backpressure).
      initial_carry: n -> zero carries for n seats (a pytree of [n, ...] arrays); None for
        feed-forward policies.
      opponents: n -> policy ids for n seats of player 1 starting an episode (two-player games
        with a league); None means the learning policy plays every seat.
      changes: n -> bool [n], whether n starting episodes have an environment change that is
        being annealed in (seedlike.server.anneal); None means always.
    """

    def __init__(
        self,
        spec: EnvSpec,
        horizon: int,
        emit: Callable[[Unroll], None],
        initial_carry: Callable[[int], object] | None = None,
        opponents: Callable[[int], np.ndarray] | None = None,
        changes: Callable[[int], np.ndarray] | None = None,
    ):
        self.spec = spec
        self._opponents = opponents
        self._changes = changes
        self.horizon = horizon
        self._emit = emit
        self._initial_carry = initial_carry or (lambda n: ())
        self._sessions: dict[int, _SessionBuffers] = {}
        self.rows_received = 0
        self.unrolls_emitted = 0
        self.steps_dropped = 0

    def open_session(self, session_id: int, num_envs: int) -> None:
        seats = num_envs * self.spec.num_players
        carry = jax.tree.map(np.array, self._initial_carry(seats))
        self._sessions[session_id] = _SessionBuffers(self.spec, seats, self.horizon, carry)

    def close_session(self, session_id: int) -> int:
        """Forgets a session and its partial unrolls; returns how many recorded steps were lost."""
        buffers = self._sessions.pop(session_id, None)
        if buffers is None:
            return 0
        dropped = int(buffers.pos.sum())
        self.steps_dropped += dropped
        return dropped

    def has_session(self, session_id: int) -> bool:
        return session_id in self._sessions

    @property
    def num_sessions(self) -> int:
        return len(self._sessions)

    def _seats(self, rows: StepRows) -> np.ndarray:
        return rows.env_id.astype(np.int64) * self.spec.num_players + rows.player_id

    def policy_inputs(self, session_id: int, rows: StepRows, mask: np.ndarray) -> PolicyInputs:
        """What the policy step needs for the m rows selected by `mask`.

        Seats whose episode starts here get their opponent (player 1 in a league) and draw
        whether the episode has the change being annealed in.
        """
        b = self._sessions[session_id]
        seat = self._seats(rows)[mask]
        first = b.next_first[seat]
        if self._opponents is not None:
            starting = seat[first & (rows.player_id[mask] == 1)]
            if starting.size:
                b.policy[starting] = self._opponents(starting.size)
        if self._changes is not None and first.any():
            b.changed[seat[first]] = self._changes(int(first.sum()))
        carry = jax.tree.map(lambda c: c[seat], b.carry)
        return PolicyInputs(first, carry, b.policy[seat], b.changed[seat])

    def record(
        self,
        session_id: int,
        rows: StepRows,
        action: np.ndarray,
        logp: np.ndarray,
        value: np.ndarray,
        version: np.ndarray | int,
        carry=(),
    ) -> list[Episode]:
        """Records one batch of rows and the policy outputs for them.

        Args:
          session_id: the sending actor's session.
          rows: the validated rows [n].
          action, logp, value: policy outputs [n] (rows that neither act nor end an episode are
            ignored).
          version: policy version(s) that chose the actions.
          carry: the new carries [m, ...] of the rows that act or end an episode, in row order
            (() for feed-forward policies).

        Returns the episodes that ended with this batch.
        """
        b = self._sessions[session_id]
        n = rows.reward.shape[0]
        self.rows_received += n
        seat = self._seats(rows)
        done = rows.terminated | rows.truncated

        # 1. The outcome of each seat's pending step.
        pending = b.pos[seat] > 0
        s, idx = seat[pending], b.pos[seat[pending]] - 1
        b.reward[s, idx] += rows.reward[pending]
        b.terminated[s, idx] |= rows.terminated[pending]
        b.truncated[s, idx] |= rows.truncated[pending]

        # 2. Episode statistics over whole games (a lost life that ends a learning episode does
        # not end the game); a seat's first row starts its first game.
        over = rows.game_over
        live = b.in_episode[seat]
        b.episode_return[seat] += np.where(live, rows.reward, 0.0)
        ended = seat[over & live]
        episodes = [
            Episode(
                session_id,
                int(k),
                float(b.episode_return[k]),
                int(b.episode_length[k]),
                int(b.policy[k]),
            )
            for k in ended
        ]
        b.episode_return[seat[over]] = 0.0
        b.episode_length[seat[over]] = 0
        b.in_episode[seat] = ~over

        # 3. New steps for rows that act or end an episode.
        record = rows.acting | done
        s = seat[record]
        p = b.pos[s]
        for key, array in rows.obs.items():
            b.obs[key][s, p] = array[record]
        for key, array in rows.extras.items():
            b.extras[key][s, p] = array[record]
        acted = rows.acting[record] & ~done[record]
        # Only the learning policy's steps are trained on (snapshots' seats are recorded for state).
        valid = acted & (b.policy[s] == -1)
        version = np.broadcast_to(np.asarray(version, np.int32), (n,))
        values = (
            action[record],
            logp[record],
            value[record],
            valid,
            b.next_first[s],
            version[record],
        )
        for field, v in zip(b.step_fields(), values):
            field[s, p] = v
        for field in b.outcome_fields():
            field[s, p] = 0
        b.episode_length[s[acted]] += 1
        b.pos[s] += 1
        b.next_first[s] = done[record]
        carry_before = jax.tree.map(lambda c: c[s], b.carry)
        starts = p == 0
        for start, before in zip(jax.tree.leaves(b.carry_start), jax.tree.leaves(carry_before)):
            start[s[starts]] = before[starts]
        for current, new in zip(jax.tree.leaves(b.carry), jax.tree.leaves(carry)):
            current[s] = new

        # 4. Emit complete unrolls; their last step becomes the first step of the next one.
        for i in np.flatnonzero(b.pos[s] == self.horizon + 1):
            k = s[i]
            if b.valid[k, : self.horizon].any():
                self._emit(self._copy_unroll(b, k))
                self.unrolls_emitted += 1
            for field in self._all_fields(b):
                field[k, 0] = field[k, self.horizon]
            for field in b.outcome_fields():
                field[k, 0] = 0
            for start, before in zip(jax.tree.leaves(b.carry_start), jax.tree.leaves(carry_before)):
                start[k] = before[i]
            b.pos[k] = 1
        return episodes

    def _all_fields(self, b: _SessionBuffers):
        return [*b.obs.values(), *b.extras.values(), *b.step_fields()]

    def _copy_unroll(self, b: _SessionBuffers, k: int) -> Unroll:
        t = self.horizon
        return Unroll(
            obs={key: v[k].copy() for key, v in b.obs.items()},
            extras={key: v[k].copy() for key, v in b.extras.items()},
            action=b.action[k].copy(),
            behaviour_logp=b.logp[k].copy(),
            behaviour_value=b.value[k].copy(),
            valid=b.valid[k].copy(),
            first=b.first[k].copy(),
            policy_version=b.version[k].copy(),
            reward=b.reward[k, :t].copy(),
            terminated=b.terminated[k, :t].copy(),
            truncated=b.truncated[k, :t].copy(),
            carry=jax.tree.map(lambda c: c[k].copy(), b.carry_start),
        )
