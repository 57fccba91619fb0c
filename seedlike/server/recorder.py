"""What the recorder thread does with every answered batch, in one place for the inference
pipeline, the tests and the benchmarks: episode statistics, team reward shaping, the unrolls."""

from __future__ import annotations

import numpy as np

from seedlike.server.episodes import Episodes, EpisodeStats
from seedlike.server.trajectory_store import StepRecord, TrajectoryStore


class Recorder:
    """Args:
    store: where unrolls go (None: episode statistics only, a frozen policy served).
    teams: shapes the rewards learned from (seedlike.teams.Teams: team spirit, zero-sum, time
      decay); None or no shaping configured: raw rewards. Episode returns are always raw.
    return_scale: divides the (shaped) rewards learned from by the running std of the discounted
      return (seedlike.server.return_scale.ReturnScale); None: off.
    """

    def __init__(self, store: TrajectoryStore | None, teams=None, return_scale=None):
        self.store = store
        self.teams = teams if teams is not None and teams.shapes else None
        self.return_scale = return_scale
        self.episodes = EpisodeStats()
        self.env_steps = 0  # rows recorded

    def open(self, seats: np.ndarray, identity: int) -> None:
        self.episodes.open(seats)
        if self.store is not None:
            self.store.open(seats, identity)

    def close(self, seats: np.ndarray, buffers=None, recorded=None) -> int:
        """Forgets closed seats; returns the recorded steps of partial unrolls lost with them."""
        if self.store is None:
            return 0
        return self.store.close(seats, buffers, recorded)

    def record_batch(self, step: StepRecord) -> Episodes:
        """Records one batch; returns the games that ended with it."""
        reward = None
        if self.store is not None and self.teams is not None:
            t = self.episodes.step_in_episode(step.seat)  # before this step counts
            reward = self.teams.shape(step.reward, step.seat, t, step.policy_version)
        if self.store is not None and self.return_scale is not None:
            reward = self.return_scale(
                step.reward if reward is None else reward,
                step.seat,
                step.terminated | step.truncated,
            )
        episodes = self.episodes.tally_batch(step)
        if self.store is not None:
            self.store.write_steps(step, reward)
        self.env_steps += step.seat.shape[0]
        return episodes
