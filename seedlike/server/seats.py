"""Seats of every open session, and what the policy must know about each seat between steps.

A seat is one (actor session, env, player). Sessions get env slots from one table, so every seat
of every actor has a global index and a whole inference batch is looked up and updated with a few
vectorized operations: env `e` of a session is slot `slots[e]`, and its player `p` is seat
`slot * num_players + p` (the two seats of a game are neighbours).

Per seat the table keeps what the next policy step needs (SEED RL: actors hold no state):
  first:   the seat's next step starts an episode (the recurrent core resets before it);
  carry:   the recurrent state before the seat's next step;
  policy:  who plays the seat in its current episode (seedlike.league.players policy ids);
  changed: the episode has the environment change being annealed in (seedlike.server.anneal).

The gathering thread reads inputs and opens/closes sessions; the replying thread advances seats
after a step. A lock makes those exclusive (the arrays may be reallocated when sessions open).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import jax
import numpy as np

from seedlike.league.players import LEARNER


class SeatTable:
    """Args:
    num_players: seats per env.
    initial_carry: n -> zero carries for n seats (a pytree of [n, ...] arrays; () feed-forward).
    """

    def __init__(self, num_players: int, initial_carry: Callable[[int], object]):
        self.num_players = int(num_players)
        self._initial_carry = initial_carry
        self._lock = threading.Lock()
        self._slots: dict[int, np.ndarray] = {}  # session id -> env slots [num_envs]
        self._free: list[int] = []  # released env slots, reused first
        self._used = 0  # env slots ever handed out (slots beyond are never used yet)
        self._capacity = 0  # env slots the arrays have room for
        self.first = np.zeros(0, np.bool_)
        self.policy = np.zeros(0, np.int64)
        self.changed = np.zeros(0, np.bool_)
        self.carry = jax.tree.map(np.asarray, initial_carry(0))
        self._recurrent = bool(jax.tree.leaves(self.carry))

    # Sessions ---------------------------------------------------------------------------------

    def open(self, session_id: int, num_envs: int) -> np.ndarray:
        """Gives a session `num_envs` env slots; returns the global seats of all its rows."""
        with self._lock:
            reused = [self._free.pop() for _ in range(min(num_envs, len(self._free)))]
            fresh = np.arange(self._used, self._used + num_envs - len(reused))
            self._used += fresh.size
            if self._used > self._capacity:
                self._grow(self._used)
            slots = np.concatenate([np.asarray(reused, np.int64), fresh]).astype(np.int64)
            self._slots[session_id] = slots
            seats = self._seats_of(slots)
            self.first[seats] = True
            self.policy[seats] = LEARNER
            self.changed[seats] = True
            for leaf, zero in zip(jax.tree.leaves(self.carry), jax.tree.leaves(self._zeros(seats))):
                leaf[seats] = zero
            return seats

    def close(self, session_id: int) -> np.ndarray:
        """Releases a session's slots; returns the seats it held (empty if unknown)."""
        with self._lock:
            slots = self._slots.pop(session_id, None)
            if slots is None:
                return np.zeros(0, np.int64)
            self._free.extend(slots.tolist())
            return self._seats_of(slots)

    def seats(self, session_id: int, env_id: np.ndarray, player_id: np.ndarray) -> np.ndarray:
        """Global seats of a request's rows, int64 [n]."""
        slots = self._slots[session_id]
        if self.num_players == 1:  # player_id is 0 (the codec checks it): one op, not three
            return slots[env_id]
        return slots[env_id] * self.num_players + player_id

    def __contains__(self, session_id: int) -> bool:
        return session_id in self._slots

    @property
    def num_sessions(self) -> int:
        return len(self._slots)

    # Steps ------------------------------------------------------------------------------------

    def inputs(self, seats: np.ndarray):
        """(first bool [m], carry [m, ...], policy int64 [m], changed bool [m]) of m seats."""
        with self._lock:
            carry = jax.tree.map(lambda c: c[seats], self.carry) if self._recurrent else ()
            return self.first[seats], carry, self.policy[seats], self.changed[seats]

    def begin_episodes(self, seats: np.ndarray, policy: np.ndarray, changed: np.ndarray) -> None:
        """Records who plays, and with which environment, the episodes starting at `seats`."""
        with self._lock:
            self.policy[seats] = policy
            self.changed[seats] = changed

    def advance(self, seats: np.ndarray, done: np.ndarray, carry) -> None:
        """After a step of `seats`: their new carry, and whether their next step starts an episode
        (`done`: the step's observation ended the episode; the env resets)."""
        with self._lock:
            self.first[seats] = done
            for leaf, new in zip(jax.tree.leaves(self.carry), jax.tree.leaves(carry)):
                leaf[seats] = new

    # Internals --------------------------------------------------------------------------------

    def _seats_of(self, slots: np.ndarray) -> np.ndarray:
        return (slots[:, None] * self.num_players + np.arange(self.num_players)).reshape(-1)

    def _zeros(self, seats: np.ndarray):
        return jax.tree.map(np.asarray, self._initial_carry(seats.shape[0]))

    def _grow(self, slots: int) -> None:
        capacity = max(slots, 2 * self._capacity)
        seats = capacity * self.num_players

        def grown(old, fill=0):
            new = np.full((seats, *old.shape[1:]), fill, old.dtype)
            new[: old.shape[0]] = old
            return new

        self.first = grown(self.first, True)
        self.policy = grown(self.policy, LEARNER)
        self.changed = grown(self.changed, True)
        template = self._zeros(np.zeros(seats, np.int64))
        self.carry = jax.tree.map(
            lambda old, zero: np.concatenate([old, zero[old.shape[0] :]]), self.carry, template
        )
        self._capacity = capacity
