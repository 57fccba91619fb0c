"""Epsilon-greedy exploration rates for a Q head (Ape-X, Horgan et al. 2018), as pure functions:
the inference server assigns them to actor identities (seedlike.server.exploration), the
on-device runtime to its envs (seedlike.ondevice.program). Both read `exploration_settings`
(seedlike.algos)."""

from __future__ import annotations

import numpy as np


def apex_epsilons(eps: float, alpha: float, slots: int) -> np.ndarray:
    """float32 [slots]: eps ** (1 + alpha * i / (slots - 1)); one slot: eps."""
    i = np.arange(slots, dtype=np.float64)
    power = 1.0 + alpha * i / max(slots - 1, 1)
    return (float(eps) ** power).astype(np.float32)


def annealed(rates, left):
    """Each rate raised towards 1 by `left`, the share of the annealing still ahead (1 at the
    start, 0 once over): rates + (1 - rates) * left, for numpy or jax arrays alike."""
    return rates + (1.0 - rates) * left
