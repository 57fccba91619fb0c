"""Who plays each episode, and in which world: the one place where league sampling, built-in
bots and annealing meet the server.

When episodes start, the inference thread asks `start`: in a league, player 1 of a two-player
game gets an opponent (the learning policy, a frozen snapshot or a bot; the learning policy always
plays player 0), every other seat the learning policy; and every starting episode draws whether it
has the environment change being annealed in (OpenAI Five App. B). When episodes end, the recorder
`report`s them and the games' results go to the league (payoff matrix, quality scores, win rates
against bots). Nothing here calls back into the server.
"""

from __future__ import annotations

import numpy as np

from seedlike.league import players
from seedlike.league.players import LEARNER


class Matchmaker:
    """Args:
    spec: the EnvSpec the server serves.
    league: a seedlike.league.league.League (two-player games), or None.
    annealing: a seedlike.server.anneal.Annealing, or None (every episode has every change).
    seed: seeds the annealing draws and the bots' moves.
    """

    def __init__(self, spec, league=None, annealing=None, seed: int = 0):
        self.num_players = spec.num_players
        self.league = league
        self.annealing = annealing
        self._rng = np.random.default_rng(seed + 1)
        self.bot_rng = np.random.default_rng(seed + 3)
        names = league.bot_names if league is not None else ()
        self.bots = {players.bot_id(name): players.make_bot(name, spec) for name in names}

    def start(self, player: np.ndarray, version: int) -> tuple[np.ndarray, np.ndarray]:
        """Policy ids int64 [k] and annealed-change flags bool [k] for k starting episodes whose
        seats are `player` [k], at learner policy `version`."""
        k = player.shape[0]
        policy = np.full(k, LEARNER, np.int64)
        if self.league is not None:
            second = np.flatnonzero(player == 1)
            if second.size:
                policy[second] = self.league.opponents(second.size)
        if self.annealing is None:
            return policy, np.ones(k, np.bool_)
        return policy, self._rng.random(k) < self.annealing.fraction(version)

    def params(self, policy: int, latest):
        """The policy params a snapshot plays with; the latest ones for the learning policy, and
        for a snapshot that left the pool in the middle of its episode."""
        if policy == LEARNER or self.league is None:
            return latest
        params = self.league.params(policy)
        return latest if params is None else params

    def report(self, episodes) -> None:
        """Ended episodes (seedlike.server.trajectory_store.Episodes): the result of every game in
        which both seats ended, from the learning policy's side (player 0)."""
        if self.league is None or self.num_players != 2 or not len(episodes.seat):
            return
        ended = dict(zip(episodes.seat.tolist(), range(len(episodes.seat))))
        for seat, i in ended.items():
            j = ended.get(seat + 1)
            if seat % 2 == 0 and j is not None:
                outcome = int(np.sign(episodes.episode_return[i]))
                self.league.record(int(episodes.policy[j]), outcome)
