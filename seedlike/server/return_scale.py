"""Return-based reward scaling (gymnasium's NormalizeReward, the PPO implementation detail that
MuJoCo tasks need): rewards learned from are divided by the running standard deviation of the
discounted return, so that value targets stay O(1) whatever the task's reward scale.

Per seat s, with G reset to 0 after a step that ends the seat's episode:

  G_s <- gamma G_s + r          (every reward that arrives)
  r'  =  clip(r / sqrt(Var[G] + eps), -clip, clip)

Var[G] is one running variance over every seat's G (Chan et al.'s parallel update per batch).
Episode returns and their statistics stay raw: this scales only what the learner sees.
"""

from __future__ import annotations

import numpy as np


class ReturnScale:
    """Scales one batch of rows' rewards at a time; the recorder thread owns it.

    Args:
      gamma: the algorithm's discount.
      clip: bound of the scaled reward (0: none).
      eps: added to the variance.
    """

    def __init__(self, gamma: float, clip: float, eps: float = 1e-8):
        self.gamma, self.clip, self.eps = float(gamma), float(clip), float(eps)
        self._g = np.zeros(0, np.float64)
        self.count, self.mean, self.var = 0.0, 0.0, 1.0

    def __call__(self, reward: np.ndarray, seat: np.ndarray, done: np.ndarray) -> np.ndarray:
        """float32 [n] scaled rewards of rows `seat` int [n] (one row per seat) whose step `done`
        bool [n] ended the episode."""
        if reward.size == 0:
            return np.asarray(reward, np.float32)
        if seat.max() >= self._g.shape[0]:
            grown = np.zeros(max(int(seat.max()) + 1, 2 * self._g.shape[0]), np.float64)
            grown[: self._g.shape[0]] = self._g
            self._g = grown
        g = self.gamma * self._g[seat] + reward
        self._update(g)
        self._g[seat] = np.where(done, 0.0, g)
        scaled = reward / np.sqrt(self.var + self.eps)
        if self.clip:
            scaled = np.clip(scaled, -self.clip, self.clip)
        return scaled.astype(np.float32)

    def state_dict(self) -> dict:
        """The running statistics (checkpointed: a resumed run scales as the old one did; the
        per-seat returns restart with the actors' new episodes)."""
        count, mean, var = self.count, self.mean, self.var
        return {"count": count, "mean": mean, "var": var}

    def load_state_dict(self, state: dict) -> None:
        self.count, self.mean, self.var = (float(state[k]) for k in ("count", "mean", "var"))

    def _update(self, x: np.ndarray) -> None:
        n, mean, var = float(x.size), float(x.mean()), float(x.var())
        total = self.count + n
        delta = mean - self.mean
        m2 = self.var * self.count + var * n + delta * delta * self.count * n / total
        self.mean += delta * n / total
        self.var, self.count = m2 / total, total
