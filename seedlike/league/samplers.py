"""Opponent samplers: which policy plays the other seat of a learning episode.

At every episode start the server asks `sample(rng)` for the opponent of a learning seat: `LEARNER`
(the learning policy itself, pure self-play) or the id of a frozen snapshot in the pool. After the
game it reports `update(opponent, outcome)` with the outcome from the learner's side (+1 win,
0 draw, -1 loss); the payoff matrix is updated by the server, not by the samplers.

Samplers keep no state of their own: OpenAI Five's quality scores live in the pool and PFSP reads
the payoff matrix, so saving the pool and the matrix saves everything. With an empty pool every
sampler returns `LEARNER`.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from seedlike.league.payoff import WIN, PayoffMatrix
from seedlike.league.players import LEARNER, policy_id
from seedlike.league.pool import OpponentPool


class OpponentSampler(Protocol):
    """What the server needs from a sampler."""

    def update(self, opponent: int, outcome: int, drawn: float | None = None) -> None:
        """Reports a finished game against `opponent`; outcome +1/0/-1 for the learner. `drawn`:
        the past-mixture probability the opponent was drawn with, where the draws stood still
        while the games were played (an on-device run's snapshot period); None: the present
        one (the SEED path: each game is reported as it ends)."""

    def probabilities(self) -> dict[int, float]:
        """The current distribution over opponents (`LEARNER` or a snapshot id), summing to 1."""


def sample(sampler: OpponentSampler, rng: np.random.Generator, n: int) -> np.ndarray:
    """Opponents of n new episodes, int64 [n]: one draw of `sampler.probabilities()` for all n
    (PFSP's weights read the whole payoff matrix; a batch of episode starts reads it once)."""
    probs = sampler.probabilities()
    ids = np.fromiter(probs.keys(), np.int64, len(probs))
    p = np.fromiter(probs.values(), np.float64, len(probs))
    return ids[rng.choice(len(ids), size=n, p=p / p.sum())]


class LatestSampler:
    """Pure self-play: the learner always plays itself."""

    def __init__(self, pool: OpponentPool | None = None, payoff: PayoffMatrix | None = None):
        del pool, payoff  # uniform constructor for make_sampler; nothing to read

    def update(self, opponent: int, outcome: int, drawn: float | None = None) -> None:
        pass

    def probabilities(self) -> dict[int, float]:
        return {LEARNER: 1.0}


class _PastMixtureSampler:
    """`LEARNER` with probability p_latest, otherwise a snapshot by `past_probabilities()`."""

    def __init__(self, pool: OpponentPool, payoff: PayoffMatrix | None, p_latest: float):
        if not 0.0 <= p_latest <= 1.0:
            raise ValueError(f"p_latest must be in [0, 1], got {p_latest}")
        self.pool = pool
        self.payoff = payoff
        self.p_latest = p_latest

    def past_probabilities(self) -> np.ndarray:
        """Probabilities of the snapshots given a past opponent is played, float64 [N], in the
        order of `pool.ids`; sums to 1 (N > 0)."""
        raise NotImplementedError

    def update(self, opponent: int, outcome: int, drawn: float | None = None) -> None:
        pass

    def probabilities(self) -> dict[int, float]:
        if not len(self.pool):
            return {LEARNER: 1.0}
        past = (1.0 - self.p_latest) * self.past_probabilities()
        return {LEARNER: self.p_latest, **dict(zip(self.pool.ids, past.tolist()))}


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())  # shifted: qualities only ever decrease, exp(q) would underflow
    return e / e.sum()


class OpenAIFiveSampler(_PastMixtureSampler):
    """OpenAI Five's self-play (seed 000, App. N).

    80% of games against the latest policy, 20% against a past snapshot i drawn with
    p_i = softmax(q)_i. When the learner beats snapshot i, q_i <- q_i - eta / (N p_i), N the
    number of snapshots; a loss or a draw changes nothing. Dividing by p_i makes the expected
    decrease per game the same for every snapshot, however rarely it is drawn. New snapshots enter
    at the pool's maximum quality (`OpponentPool.add`).

    Args:
      pool: the snapshots; their `quality` fields are the scores q and are updated in place.
      payoff: unused.
      p_latest: probability of playing the latest policy.
      eta: quality learning rate.
    """

    def __init__(
        self,
        pool: OpponentPool,
        payoff: PayoffMatrix | None = None,
        p_latest: float = 0.8,
        eta: float = 0.01,
    ):
        super().__init__(pool, payoff, p_latest)
        self.eta = eta

    def past_probabilities(self) -> np.ndarray:
        return _softmax(self.pool.qualities())

    def update(self, opponent: int, outcome: int, drawn: float | None = None) -> None:
        opponent = policy_id(opponent)
        # A snapshot may have left the pool (max_size) while the game was running.
        if outcome != WIN or opponent == LEARNER or opponent not in self.pool:
            return
        # The games' own draw probability: a period's wins reported together at the probability
        # of the period's last one would drive q_i to -inf (p_i underflows) within it.
        p = drawn if drawn is not None else self.past_probabilities()[self.pool.ids.index(opponent)]
        quality = self.pool[opponent].quality - self.eta / (len(self.pool) * p)
        self.pool.set_quality(opponent, quality)


class PFSPSampler(_PastMixtureSampler):
    """Prioritized fictitious self-play (AlphaStar; TLeague, seed 002 sec. 3.1).

    Snapshot i is drawn with probability proportional to f(x_i), x_i = P[latest beats i] from the
    payoff matrix: "hard" f(x) = (1 - x)^p focuses on the snapshots the learner still loses to,
    "variance" f(x) = x (1 - x) on the ones it beats half of the time. If every weight is 0 (the
    learner beats everything) the draw is uniform.

    Args:
      pool: the snapshots.
      payoff: results of `LEARNER` against snapshot ids.
      weighting: "hard" or "variance".
      p: exponent of "hard".
      p_latest: probability of pure self-play instead (TLeague's Pommerman mixes 35% of it).
    """

    WEIGHTINGS = ("hard", "variance")

    def __init__(
        self,
        pool: OpponentPool,
        payoff: PayoffMatrix,
        weighting: str = "hard",
        p: float = 2.0,
        p_latest: float = 0.0,
    ):
        if payoff is None:
            raise ValueError("pfsp needs the payoff matrix")
        if weighting not in self.WEIGHTINGS:
            raise ValueError(f"unknown pfsp weighting {weighting!r}; valid: {self.WEIGHTINGS}")
        super().__init__(pool, payoff, p_latest)
        self.weighting = weighting
        self.p = p

    def weights(self) -> np.ndarray:
        """Unnormalized f(x_i), float64 [N], in the order of `pool.ids`."""
        x = self.payoff.win_rates(LEARNER, self.pool.ids)
        if self.weighting == "hard":
            return (1.0 - x) ** self.p
        return x * (1.0 - x)

    def past_probabilities(self) -> np.ndarray:
        w = self.weights()
        total = w.sum()
        if total <= 0.0:
            return np.full(len(w), 1.0 / len(w))
        return w / total


class UniformRecentSampler(_PastMixtureSampler):
    """Uniform over the K most recent snapshots (TLeague's ViZDoom league uses K = 50).

    Args:
      pool: the snapshots.
      payoff: unused.
      k: how many of the newest snapshots to draw from.
      p_latest: probability of pure self-play instead.
    """

    def __init__(
        self,
        pool: OpponentPool,
        payoff: PayoffMatrix | None = None,
        k: int = 50,
        p_latest: float = 0.0,
    ):
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        super().__init__(pool, payoff, p_latest)
        self.k = k

    def past_probabilities(self) -> np.ndarray:
        n = len(self.pool)
        recent = min(self.k, n)
        p = np.zeros(n, np.float64)
        p[n - recent :] = 1.0 / recent
        return p


SAMPLERS = {
    "latest": LatestSampler,
    "openai_five": OpenAIFiveSampler,
    "pfsp": PFSPSampler,
    "uniform_recent": UniformRecentSampler,
}


def make_sampler(name: str, **kwargs) -> OpponentSampler:
    """The sampler called `name`, built with `kwargs` (pool=, payoff=, and its own options).

    Raises:
      ValueError: for an unknown name, listing the valid ones.
      TypeError: for an option the sampler does not take.
    """
    if name not in SAMPLERS:
        raise ValueError(f"unknown opponent sampler {name!r}; valid: {sorted(SAMPLERS)}")
    return SAMPLERS[name](**kwargs)
