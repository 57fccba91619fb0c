"""Episode statistics of every seat: returns and lengths of whole games, and who played them.

Kept apart from the unrolls (seedlike.server.trajectory_store): a frozen policy served for
evaluation has episodes and no unrolls, and the learner's team reward shaping needs each seat's
step within its episode. Only the recorder thread calls in.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from seedlike.league.players import LEARNER


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


class EpisodeStats:
    """Per seat: the raw return and length of the game being played, and its policy."""

    def __init__(self):
        self.in_episode = np.zeros(0, np.bool_)
        self.episode_return = np.zeros(0, np.float64)
        self.episode_length = np.zeros(0, np.int64)
        self.episode_policy = np.zeros(0, np.int64)

    def open(self, seats: np.ndarray) -> None:
        if seats.size and seats.max() >= self.in_episode.shape[0]:
            self._grow(int(seats.max()) + 1)
        self.in_episode[seats] = False
        self.episode_return[seats] = 0.0
        self.episode_length[seats] = 0
        self.episode_policy[seats] = LEARNER

    def step_in_episode(self, seat: np.ndarray) -> np.ndarray:
        """The index within its episode of each seat's pending action (for reward decay)."""
        return np.maximum(self.episode_length[seat] - 1, 0)

    def record(self, step) -> Episodes:
        """Adds one inference batch (seedlike.server.trajectory_store.StepRecord); returns the
        games that ended with it. A seat's first row starts its first game."""
        seat, over = step.seat, step.game_over
        live = self.in_episode[seat]
        self.episode_return[seat] += np.where(live, step.reward, 0.0)
        ran = seat[step.ran]
        self.episode_policy[ran[step.first]] = step.policy[step.first]
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

    def _grow(self, seats: int) -> None:
        capacity = max(seats, 2 * self.in_episode.shape[0])

        def grown(old):
            new = np.zeros(capacity, old.dtype)
            new[: old.shape[0]] = old
            return new

        self.in_episode = grown(self.in_episode)
        self.episode_return = grown(self.episode_return)
        self.episode_length = grown(self.episode_length)
        self.episode_policy = grown(self.episode_policy)
