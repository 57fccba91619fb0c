"""Payoff matrix: win/draw/loss counts between players (TLeague's GameMgr, seed 002 sec. 3).

Players are policy ids (seedlike.league.players: the learner `LEARNER`, snapshot versions, bots).
Every result is stored from both sides, so row `a` of the matrix reads as "how `a` fares against".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from seedlike.league.players import LEARNER, policy_id

# Outcomes from the first player's point of view.
WIN, DRAW, LOSS = 1, 0, -1


class PayoffMatrix:
    """Win/draw/loss counts per ordered pair of players.

    Args:
      prior: win rate assumed for a pair that has not played.
      prior_games: weight of the prior in pseudo-games. With 1, a single won game gives a win rate
        of 0.75 rather than 1, so one lucky result does not remove an opponent from prioritized
        sampling for good; 0 gives raw frequencies (and `prior` only for pairs without games).
      decay: counts of a pair are multiplied by this before each new result of that pair. The
        learner keeps changing, so old results against it go stale; TLeague discounts
        them the same way. 1.0 keeps every result at full weight.
    """

    def __init__(self, prior: float = 0.5, prior_games: float = 1.0, decay: float = 1.0):
        if not 0.0 <= prior <= 1.0:
            raise ValueError(f"prior must be in [0, 1], got {prior}")
        if prior_games < 0:
            raise ValueError(f"prior_games must be >= 0, got {prior_games}")
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        self.prior = prior
        self.prior_games = prior_games
        self.decay = decay
        # (a, b) -> [wins, draws, losses] of a against b (floats: decay makes them fractional).
        self._counts: dict[tuple[int, int], np.ndarray] = {}

    def _pair(self, a: int, b: int) -> np.ndarray:
        counts = self._counts.get((a, b))
        if counts is None:
            counts = self._counts[(a, b)] = np.zeros(3, np.float64)
        return counts

    def record(self, a: int, b: int, outcome: int) -> None:
        """Records one game: outcome +1 if `a` won, 0 for a draw, -1 if `b` won.

        A game of a player against itself (self-play) is counted from both seats.
        """
        if outcome not in (WIN, DRAW, LOSS):
            raise ValueError(f"outcome must be +1 (win), 0 (draw) or -1 (loss), got {outcome}")
        outcome, a, b = int(outcome), policy_id(a), policy_id(b)
        ab, ba = self._pair(a, b), self._pair(b, a)
        if self.decay < 1.0:
            ab *= self.decay
            if ba is not ab:
                ba *= self.decay
        # Column 0 counts wins, 1 draws, 2 losses: outcome +1 -> 0, 0 -> 1, -1 -> 2.
        ab[1 - outcome] += 1.0
        ba[1 + outcome] += 1.0

    def counts(self, a: int, b: int) -> tuple[float, float, float]:
        """(wins, draws, losses) of `a` against `b`, after decay."""
        c = self._counts.get((policy_id(a), policy_id(b)), np.zeros(3))
        return float(c[0]), float(c[1]), float(c[2])

    def games(self, a: int, b: int) -> float:
        return sum(self.counts(a, b))

    def win_rate(self, a: int, b: int) -> float:
        """P[a beats b], a draw counting half, smoothed towards `prior`.

            (wins + draws / 2 + prior * prior_games) / (games + prior_games)

        and `prior` for a pair without games.
        """
        wins, draws, losses = self.counts(a, b)
        games = wins + draws + losses + self.prior_games
        if games == 0.0:
            return self.prior
        return (wins + 0.5 * draws + self.prior * self.prior_games) / games

    def win_rates(self, a: int, opponents: Sequence[int]) -> np.ndarray:
        """P[a beats b] for every b in `opponents`, float64 [len(opponents)]."""
        return np.array([self.win_rate(a, b) for b in opponents], np.float64)

    def matrix(self, players: Sequence[int]) -> np.ndarray:
        """Win rates of row player against column player, float64 [P, P]."""
        return np.array([self.win_rates(a, players) for a in players], np.float64)

    def players(self) -> list[int]:
        """Every player with a recorded game, in order of first appearance."""
        return list(dict.fromkeys(a for a, _ in self._counts))

    def remove(self, player: int) -> None:
        """Forgets every result of `player` (e.g. a snapshot dropped from the pool)."""
        player = policy_id(player)
        for pair in [p for p in self._counts if player in p]:
            del self._counts[pair]

    def state_dict(self) -> dict[str, Any]:
        """JSON-serializable state (policy ids are ints)."""
        return {
            "prior": self.prior,
            "prior_games": self.prior_games,
            "decay": self.decay,
            "counts": [[a, b, *c.tolist()] for (a, b), c in self._counts.items()],
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> PayoffMatrix:
        payoff = cls(state["prior"], state["prior_games"], state["decay"])
        # Older checkpoints spelled the learner "latest" and bots by name ("random").
        read = lambda p: LEARNER if p == "latest" else policy_id(p)  # noqa: E731
        for a, b, *c in state["counts"]:
            payoff._counts[(read(a), read(b))] = np.array(c, np.float64)
        return payoff
