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
    # int64: the actor identity that held the seat (seedlike.server.influence), set where the
    # episode is recorded: a seat may belong to another actor by the time episodes are read.
    identity: np.ndarray

    @classmethod
    def empty(cls) -> Episodes:
        return cls(*(np.zeros(0, d) for d in (np.int64, np.float64, np.int64, np.int64, np.int64)))

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

    def tally_batch(self, step) -> Episodes:
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
            np.zeros(ended.size, np.int64),
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


class EpisodeBoard:
    """The learning policy's recent episodes per actor identity, summarized twice: as the plain
    mean other frameworks report, and robustly, so that no minority of actors can steer what the
    run decides on (`stop_at_return`, PBT, sweeps).

    Each identity keeps its last `window` episodes, and both summaries read those episodes:
    * `return`, `length`: their plain mean (every episode one weight; each identity holds at
      most `window`, so identities that have played that many weigh alike);
    * `robust`: the median over identities of each one's mean return (the lower of the middle two
      for an even count), given only once more than half of the connected identities have
      finished an episode. One identity's fake episodes (any return, any number, the first ones
      of the run) are one vote: with the bad identities a minority, it lies between the smallest
      and largest honest identity's, and `reached` (stop_at_return) holds only when a majority
      of identities average the target. With one actor: its mean over its last `window`.
      With two identities, which a median cannot tell apart, one whose rewards the reward bound
      is scaling (`distrusted`: its returns are sums of rewards found out of scale) does not
      vote while the other does, so one of two flooding rewards does not write it either (with
      three or more the median already leaves it out).
    """

    def __init__(self, window: int = 20):
        self.window = int(window)
        self._recent: dict[int, np.ndarray] = {}  # identity -> [<= window, 2] (return, length)
        self._connected = 0

    def add(self, identity: np.ndarray, episode_return: np.ndarray, length: np.ndarray) -> None:
        """Episodes that ended, [k] each: who played them (identity), return and length."""
        for who in np.unique(identity).tolist():
            mine = identity == who
            new = np.stack([episode_return[mine], length[mine]], axis=1).astype(np.float64)
            old = self._recent.get(who, np.zeros((0, 2)))
            self._recent[who] = np.concatenate([old, new])[-self.window :]

    def keep(self, connected) -> None:
        """The identities connected now; the others are forgotten."""
        connected = set(np.asarray(connected).tolist())
        self._recent = {k: v for k, v in self._recent.items() if k in connected}
        self._connected = len(connected)

    def _quorum(self) -> bool:
        return 2 * len(self._recent) > max(self._connected, len(self._recent))

    def summary(self, threshold: float | None = None, distrusted=frozenset()) -> dict:
        """The plain mean return and length of the identities' recent episodes (None before any),
        the median identity's mean return (`robust`: None before a majority of the connected
        identities finished an episode), the median identity's success rate (returns above
        `threshold`), and how many identities voted."""
        out = {"return": None, "length": None, "robust": None, "success": None}
        out["identities"] = len(self._recent)
        if not self._recent:
            return out
        episodes = np.concatenate(list(self._recent.values()))
        out["return"], out["length"] = (float(x) for x in episodes.mean(axis=0))
        if not self._quorum():
            return out
        voters = list(self._recent.values())
        if len(voters) < 3:
            voters = [v for k, v in self._recent.items() if k not in distrusted] or voters
        per = np.stack([v.mean(axis=0) for v in voters])
        out["robust"] = _lower_median(per[:, 0])
        if threshold is not None:
            rates = [float(np.mean(v[:, 0] > threshold)) for v in voters]
            out["success"] = _lower_median(np.array(rates))
        return out

    def reached(self, target: float) -> bool:
        """Whether more than half of the connected identities average `target` or more."""
        above = sum(float(v[:, 0].mean()) >= target for v in self._recent.values())
        return 2 * above > max(self._connected, len(self._recent))


def _lower_median(values: np.ndarray) -> float:
    return float(np.sort(values)[(len(values) - 1) // 2])
