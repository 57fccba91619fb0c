"""MazeBase's threshold curriculum (seed 004, sec. 4.1), run by the server inside one job.

Levels 0..L-1 are tasks of rising difficulty (`env.levels`, easiest first; the actors hold them,
seedlike/envs/levels.py). Each episode's level is drawn uniformly from [0, bound]: the lower limit
never moves, so the easiest game stays in the mix. When the success rate of the episodes ended since
the bound last moved leaves [T_l, T_u], the bound moves:

    bound <- min(bound + 1, L - 1)   if success > T_u
    bound <- max(bound - 1, 0)       if success < T_l

measured over `window` episodes at levels <= bound (MazeBase: the model's success on the games it
is given), or at the bound alone (`measure="bound"`: a level is added only once the hardest one
in play is mastered, and taken away while it is failed). For the last part of training (MazeBase:
the last third) every level is played whatever the bound. The server sends the level
probabilities to the actors with their actions whenever they change (seedlike/rpc/seedlike.proto,
`level_probs`).
"""

from __future__ import annotations

import threading

import numpy as np

MEASURES = ("all", "bound")


def threshold_rule(bound: int, success_rate: float, lower: float, upper: float, top: int) -> int:
    """The next upper bound of the level range (MazeBase's T_l / T_u rule), in [0, top]."""
    if success_rate > upper:
        return min(bound + 1, top)
    if success_rate < lower:
        return max(bound - 1, 0)
    return bound


def uniform_up_to(bound: int, num_levels: int) -> np.ndarray:
    """float64 [num_levels]: uniform over levels 0..bound."""
    probs = np.zeros(num_levels)
    probs[: bound + 1] = 1.0 / (bound + 1)
    return probs


class Curriculum:
    """The bound, its window of episodes, and per-level interval statistics (thread-safe: the
    recorder reports episodes, the gRPC loop reads the probabilities, the learner loop takes the
    metrics and reports progress).

    Args:
      num_levels: L.
      lower, upper: T_l and T_u.
      window: episodes (at levels <= bound, since the bound last moved) per decision.
      start: the first bound.
      full_range_steps: env steps from which every level is played (None: never).
      measure: "all" (episodes at levels <= bound) or "bound" (at the bound level only).
    """

    def __init__(
        self,
        num_levels: int,
        lower: float,
        upper: float,
        window: int,
        start: int = 0,
        full_range_steps: int | None = None,
        measure: str = "all",
    ):
        if measure not in MEASURES:
            raise ValueError(f"curriculum.measure={measure!r} is not one of {list(MEASURES)}")
        self.measure = measure
        self.num_levels = int(num_levels)
        self.lower, self.upper, self.window = float(lower), float(upper), int(window)
        self.full_range_steps = full_range_steps
        self._lock = threading.Lock()
        self.bound = int(start)
        self.full_range = False
        self.version = 0  # changes whenever the probabilities do
        self._probs = uniform_up_to(self.bound, self.num_levels)
        self._window_ended = self._window_successes = 0
        self._ended = np.zeros(self.num_levels, np.int64)  # in the metrics interval
        self._successes = np.zeros(self.num_levels, np.int64)
        self.moves = 0

    @classmethod
    def from_config(cls, config) -> Curriculum | None:
        levels = tuple(config.env.levels)
        if not levels:
            return None
        c = config.curriculum
        full = float(c.full_range_from)
        return cls(
            len(levels),
            c.lower,
            c.upper,
            c.window,
            c.start,
            int(full * config.total_env_steps) if full <= 1.0 else None,
            c.measure,
        )

    def probs(self) -> tuple[int, np.ndarray]:
        """(version, level probabilities float64 [L]) for the actors."""
        with self._lock:
            return self.version, self._probs

    def report(self, level: np.ndarray, success: np.ndarray) -> None:
        """Episodes that ended: their levels int [k] and whether each succeeded bool [k]."""
        if not level.size:
            return
        level = np.clip(np.asarray(level, np.int64), 0, self.num_levels - 1)
        with self._lock:
            np.add.at(self._ended, level, 1)
            np.add.at(self._successes, level, success.astype(np.int64))
            counted = level <= self.bound if self.measure == "all" else level == self.bound
            self._window_ended += int(counted.sum())
            self._window_successes += int(success[counted].sum())
            if self._window_ended < self.window:
                return
            rate = self._window_successes / self._window_ended
            self._window_ended = self._window_successes = 0
            bound = threshold_rule(self.bound, rate, self.lower, self.upper, self.num_levels - 1)
            if bound != self.bound:
                self.bound = bound
                self.moves += 1
                self._publish()

    def progress(self, env_steps: int) -> None:
        """The run's env steps: from full_range_steps on, every level is played."""
        if self.full_range_steps is None or self.full_range or env_steps < self.full_range_steps:
            return
        with self._lock:
            self.full_range = True
            self._publish()

    def _publish(self) -> None:
        bound = self.num_levels - 1 if self.full_range else self.bound
        probs = uniform_up_to(bound, self.num_levels)
        if not np.array_equal(probs, self._probs):
            self._probs = probs
            self.version += 1

    def take_metrics(self) -> dict:
        """curriculum/bound, and per level i its success rate and share of the episodes that
        ended in the interval (None where no episode of that level ended)."""
        with self._lock:
            ended, successes = self._ended.copy(), self._successes.copy()
            self._ended[:] = 0
            self._successes[:] = 0
            row = {"curriculum/bound": self.bound, "curriculum/full_range": int(self.full_range)}
        total = ended.sum()
        for i in range(self.num_levels):
            row[f"curriculum/success_{i}"] = successes[i] / ended[i] if ended[i] else None
            row[f"curriculum/share_{i}"] = ended[i] / total if total else None
        return row

    def state_dict(self) -> dict:
        with self._lock:
            return {"bound": self.bound, "moves": self.moves}

    def load_state_dict(self, state: dict) -> None:
        with self._lock:
            self.bound = min(int(state.get("bound", self.bound)), self.num_levels - 1)
            self.moves = int(state.get("moves", 0))
            self._publish()
