"""Who plays each episode, and in which world: the one place where league sampling, built-in
bots, teams, annealing and the curriculum meet the server.

When episodes start, the gather thread asks `draw_players`: in a league, the seats of every team but
team 0 get an opponent (the learning policy, a frozen snapshot or a bot; the learning policy always
plays team 0), drawn once per env for all of that env's seats starting together; every other seat
gets the learning policy. In a two-player board game the teams are the two players. Every starting
episode also draws whether it has the environment change being annealed in (OpenAI Five App. B).
The recorder `report`s every recorded batch; each game that ends (every seat of its env done) goes
to the league as a result (payoff matrix, quality scores, win rates against bots), and each
episode that ends goes to the curriculum with its level and whether it succeeded. Nothing here
calls back into the server.
"""

from __future__ import annotations

import time

import numpy as np

from seedlike.league import players
from seedlike.league.players import LEARNER
from seedlike.server.influence import ResultQuota
from seedlike.teams import GameTracker, Teams
from seedlike.types import LEVEL


class Matchmaker:
    """Args:
    spec: the EnvSpec the server serves.
    league: a seedlike.league.league.League (games of two or more teams), or None.
    annealing: a seedlike.server.anneal.Annealing, or None (every episode has every change).
    seed: seeds the annealing draws and the bots' moves.
    teams: the seats' teams (seedlike.teams.Teams); None: from the spec's defaults.
    curriculum: a seedlike.server.curriculum.Curriculum over env.levels, or None.
    success_threshold: an episode succeeded if its return exceeds this (read with a curriculum,
      which config.validate gives one).
    result_quota: what one identity's league results may weigh (seedlike.server.influence);
      None: every result counts.
    """

    def __init__(
        self,
        spec,
        league=None,
        annealing=None,
        seed=0,
        teams: Teams | None = None,
        curriculum=None,
        success_threshold: float | None = None,
        result_quota: ResultQuota | None = None,
    ):
        self.num_players = spec.num_players
        self.teams = teams or Teams.of_env(spec)
        self.league = league
        self.annealing = annealing
        self.curriculum = curriculum
        self.success_threshold = success_threshold
        self._rng = np.random.default_rng(seed + 1)
        self.bot_rng = np.random.default_rng(seed + 3)
        names = league.bot_names if league is not None else ()
        self.bots = {players.bot_id(name): players.make_bot(name, spec) for name in names}
        self._games = GameTracker(self.teams, players.UNSEEN) if league is not None else None
        self.result_quota = result_quota

    def draw_players(self, seat: np.ndarray, version: int) -> tuple[np.ndarray, np.ndarray]:
        """Policy ids int64 [k] and annealed-change flags bool [k] for k starting episodes at
        global seats `seat` [k] (seedlike.server.seats), at learner policy `version`."""
        k = seat.shape[0]
        policy = np.full(k, LEARNER, np.int64)
        if self.league is not None:
            team = self.teams.team_of[seat % self.num_players]
            others = np.flatnonzero(team > 0)
            if others.size:
                # One opponent per env (and team) for the seats starting there together.
                group = (seat[others] // self.num_players) * self.teams.num_teams + team[others]
                groups, which = np.unique(group, return_inverse=True)
                policy[others] = self.league.opponents(groups.size)[which]
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

    def opened(self, seats: np.ndarray) -> None:
        """Seats given to a new session: games left unfinished there are forgotten."""
        if self._games is not None and seats.size:
            self._games.forget(seats)

    def report(self, step, episodes, identity: np.ndarray | None = None) -> None:
        """One recorded batch (seedlike.server.trajectory_store.StepRecord) and the episodes that
        ended with it: the result of every game it ends, from team 0's side, goes to the league
        (with `identity`, each seat's actor identity, only as many per identity as
        seedlike.server.influence.ResultQuota admits), and every episode that ended, with its
        level, to the curriculum."""
        if self.curriculum is not None and episodes.seat.size:
            # The level of an episode is in the extras of its last row (one row per seat here).
            ran = step.seat[step.ran]
            order = np.argsort(ran)
            row = order[np.searchsorted(ran, episodes.seat, sorter=order)]
            level = step.extras[LEVEL][row]
            self.curriculum.report(level, episodes.episode_return > self.success_threshold)
        if self._games is None:
            return
        ran = step.seat[step.ran]
        results = self._games.update(
            ran[step.first], step.policy[step.first], episodes.seat, episodes.episode_return
        )
        if identity is not None and results and self.result_quota is not None:
            seats = np.array([seat for _, _, seat in results], np.int64)
            admitted = self.result_quota.admit(identity[seats], time.monotonic())
            results = [r for r, ok in zip(results, admitted) if ok]
        for opponent, outcome, _ in results:
            self.league.record(opponent, outcome)
