"""Each actor identity's exploration rate, where inference runs (Ape-X, Horgan et al. 2018).

Identity i of N explores with eps_i = eps ** (1 + alpha * i / (N - 1)): a few identities explore
much, most a little, and the replay holds both. i is a slot in [0, N): an identity takes the
lowest slot no connected identity holds when its first session opens and keeps it while any of
its sessions stays open; its slot is freed with its last session (identities are forgotten then,
seedlike.server.inference). With more than N identities connected, a newcomer shares slot
(label mod N). An identity keeps its rate while it stays; a freed slot goes to the next one to
connect, so the most exploring slots are the first filled.

With `anneal_steps`, every identity's rate starts at 1 and falls linearly to its eps_i over the
first anneal_steps env steps of the run (one actor's DQN schedule, e.g. CartPole).
"""

from __future__ import annotations

import threading

import numpy as np

from seedlike.algos.exploration import annealed, apex_epsilons


class Exploration:
    """Slots for identities, and each row's epsilon from its identity's slot (thread-safe:
    sessions open on handler threads, the gather thread reads rates)."""

    def __init__(self, eps: float, alpha: float, slots: int, anneal_steps: int = 0):
        self.rates = apex_epsilons(eps, alpha, slots)
        self.anneal_steps = int(anneal_steps)
        self._slots = int(slots)
        self._lock = threading.Lock()
        self._slot_of: dict[int, int] = {}  # identity label -> slot
        self._rows_slot = np.zeros(0, np.int32)  # label -> slot, for vectorized lookups
        self.steps_before = 0  # env steps of the run before this process (a resumed run)

    @classmethod
    def from_config(cls, section) -> Exploration | None:
        """The exploration of an algorithm section with Ape-X settings (None without them)."""
        if "epsilon" not in section:
            return None
        return cls(
            section.epsilon, section.epsilon_alpha, section.epsilon_slots, section.anneal_steps
        )

    def join(self, identity: int) -> int:
        """The slot of identity label `identity` (taken if it has none)."""
        with self._lock:
            if identity in self._slot_of:
                return self._slot_of[identity]
            held = set(self._slot_of.values())
            free = [s for s in range(self._slots) if s not in held]
            slot = free[0] if free else identity % self._slots
            self._slot_of[identity] = slot
            if identity >= self._rows_slot.size:
                grown = np.zeros(max(identity + 1, 2 * self._rows_slot.size), np.int32)
                grown[: self._rows_slot.size] = self._rows_slot
                self._rows_slot = grown
            self._rows_slot[identity] = slot
            return slot

    def leave(self, identity: int) -> None:
        """Frees the slot of an identity whose last session closed."""
        with self._lock:
            self._slot_of.pop(identity, None)

    def epsilon(self, identity: np.ndarray, env_steps: int) -> np.ndarray:
        """float32 [n]: the rate of each row's identity label at `env_steps` of the run."""
        with self._lock:
            table = self._rows_slot
        rates = self.rates[table[np.asarray(identity, np.int64)]]
        left = self._left(env_steps)
        if left:
            rates = annealed(rates, np.float32(left))
        return rates.astype(np.float32)

    def _left(self, env_steps: int) -> float:
        """The share of the annealing still ahead at this process's env_steps."""
        if self.anneal_steps <= 0:
            return 0.0
        return max(0.0, 1.0 - (env_steps + self.steps_before) / self.anneal_steps)

    def held(self, env_steps: int) -> dict[int, float]:
        """slot -> its current rate, for the slots connected identities hold (metrics)."""
        with self._lock:
            slots = sorted(set(self._slot_of.values()))
        left = self._left(env_steps)
        return {s: float(annealed(self.rates[s], left)) for s in slots}
