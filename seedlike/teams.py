"""Teams of a multi-agent env: which team each seat plays for, how learning rewards are shaped
from the team's (config section `teams`, read once here), and who won each game.

A seat's player id p (seedlike.server.seats) names its agent; `team_of[p]` its team. Team 0 is
always the learning policy's; in a league every other team is played by the episode's opponent
(seedlike.server.matchmaking). In a population of N independent learners sharing one world (Neural
MMO's N_pop; docs/teams.md, "Populations"), actors send team k's rows to member k mod N.

Imported by actors too: numpy only.
"""

from __future__ import annotations

import numpy as np

from seedlike.algos.shaping import team_rewards, time_decay
from seedlike.types import LEGAL_ACTION_MASK, EnvSpec


class Teams:
    """Args:
    team_of: int64 [num_players], the team of each player id.
    spirit, spirit_final, spirit_updates: team spirit tau, moving linearly from `spirit` to
      `spirit_final` (None: constant) over `spirit_updates` policy versions.
    zero_sum: subtract the opposing teams' mean reward.
    decay, decay_horizon: rewards scaled by decay ** (t / decay_horizon); horizon 0: off.
    result: "return" (larger summed team return wins) or "survivors" (more agents alive at the end).
    """

    def __init__(
        self,
        team_of,
        spirit: float = 0.0,
        spirit_final: float | None = None,
        spirit_updates: int = 0,
        zero_sum: bool = False,
        decay: float = 0.6,
        decay_horizon: float = 0.0,
        result: str = "return",
    ):
        self.team_of = np.asarray(team_of, np.int64)
        self.num_players = self.team_of.shape[0]
        self.num_teams = int(self.team_of.max()) + 1
        self.spirit, self.spirit_updates = float(spirit), int(spirit_updates)
        self.spirit_final = self.spirit if spirit_final is None else float(spirit_final)
        self.zero_sum = bool(zero_sum)
        self.decay, self.decay_horizon = float(decay), float(decay_horizon)
        self.result = result
        self.shapes = bool(
            self.spirit or self.spirit_final or self.zero_sum or self.decay_horizon > 0
        )

    @classmethod
    def of_env(cls, spec: EnvSpec) -> Teams:
        """The env's own sides, rewards unshaped: a two-player board game's two seats, else
        every agent on one side."""
        if spec.num_players == 2 and LEGAL_ACTION_MASK in spec.extras:
            return cls(np.array([0, 1]))
        return cls(np.zeros(spec.num_players, np.int64))

    @classmethod
    def from_config(cls, teams_config, spec: EnvSpec) -> Teams:
        sizes = tuple(int(n) for n in teams_config.sizes)
        if sizes:
            if sum(sizes) != spec.num_players:
                raise ValueError(
                    f"teams.sizes={sizes} covers {sum(sizes)} agents; {spec.name} has "
                    f"{spec.num_players} (list every agent's team, in player-id order)"
                )
            team_of = np.repeat(np.arange(len(sizes)), sizes)
        else:
            team_of = cls.of_env(spec).team_of
        return cls(
            team_of,
            spirit=teams_config.spirit,
            spirit_final=teams_config.spirit_final,
            spirit_updates=teams_config.spirit_updates,
            zero_sum=teams_config.zero_sum,
            decay=teams_config.reward_decay,
            decay_horizon=teams_config.reward_decay_horizon,
            result=teams_config.result,
        )

    def member_of(self, members: int) -> np.ndarray:
        """The population member (learner) of each player id, int64 [num_players]."""
        return self.team_of % int(members)

    def spirit_at(self, version: int) -> float:
        if self.spirit_updates <= 0:
            return self.spirit_final
        frac = min(max(version / self.spirit_updates, 0.0), 1.0)
        return self.spirit + frac * (self.spirit_final - self.spirit)

    def shape(self, reward: np.ndarray, seat: np.ndarray, t: np.ndarray, version: int):
        """The learning rewards of one step's rows, float32 [n] (seats as in SeatTable: an env's
        seats are `slot * num_players + p`; t: each row's step in its episode)."""
        env, team = seat // self.num_players, self.team_of[seat % self.num_players]
        shaped = team_rewards(
            reward, env, team, self.num_teams, self.spirit_at(version), self.zero_sum
        )
        return time_decay(shaped, t, self.decay, self.decay_horizon)


def game_outcome(score) -> int:
    """Team 0's result from per-team scores [num_teams]: +1 best alone, 0 tied best, -1 beaten."""
    best = max(score[1:], default=-np.inf)
    return 1 if score[0] > best else (0 if score[0] == best else -1)


class GameTracker:
    """Follows every env's game through its seats' episodes and reports each game's result.

    A game starts with the first seat that starts an episode in an env and is over when every seat
    that started in it has ended (agents that die early end early; ones that appear late join).
    A game where no seat of another team started was played against a policy this server does
    not see (a shared game of league roles: the actor sends the other side's rows to another
    learner); its opponent is `unseen` and its result team 0's return alone. Called from the
    recorder thread only.
    """

    def __init__(self, teams: Teams, unseen: int):
        self.teams = teams
        self.unseen = int(unseen)
        self._live = np.zeros(0, np.int64)  # per env slot: seats in an episode
        self._score = np.zeros((0, teams.num_teams))  # per env slot and team: summed return
        self._opponent = np.zeros(0, np.int64)  # per env slot: who played the other teams

    def forget(self, seats: np.ndarray) -> None:
        """Drops the games of `seats`' envs (their session closed or the slots were reused)."""
        slots = np.unique(seats // self.teams.num_players)
        self._grow(slots)
        self._live[slots] = 0
        self._score[slots] = 0.0

    def update(self, started_seat, started_policy, ended_seat, ended_return) -> list:
        """Seats whose episode started (with who plays them) and ended (with their returns) in
        one recorded batch; returns (opponent policy, outcome for team 0, the env's first seat)
        of every game it ends."""
        if not started_seat.size and not ended_seat.size:
            return []
        p = self.teams.num_players
        start_slot = started_seat // p
        end_slot = ended_seat // p
        self._grow(np.concatenate([start_slot, end_slot]))
        # A game's opponent is unseen until a seat of another team starts in it.
        self._opponent[start_slot[self._live[start_slot] == 0]] = self.unseen
        np.add.at(self._live, start_slot, 1)
        other = self.teams.team_of[started_seat % p] > 0
        self._opponent[start_slot[other]] = started_policy[other]
        end_team = self.teams.team_of[ended_seat % p]
        np.add.at(self._score, (end_slot, end_team), ended_return)
        np.subtract.at(self._live, end_slot, 1)
        over = np.unique(end_slot[self._live[end_slot] <= 0])
        results = []
        for slot in over.tolist():
            if self.teams.result == "survivors":  # the seats still in the game when it ended
                score = np.bincount(end_team[end_slot == slot], minlength=self.teams.num_teams)
            else:
                score = self._score[slot]
            results.append((int(self._opponent[slot]), game_outcome(score), slot * p))
        self._live[over] = 0
        self._score[over] = 0.0
        return results

    def _grow(self, slots: np.ndarray) -> None:
        need = int(slots.max()) + 1 if slots.size else 0
        if need <= self._live.shape[0]:
            return
        size = max(need, 2 * self._live.shape[0])
        extra = size - self._live.shape[0]
        self._live = np.concatenate([self._live, np.zeros(extra, np.int64)])
        self._score = np.concatenate([self._score, np.zeros((extra, self.teams.num_teams))])
        self._opponent = np.concatenate([self._opponent, np.full(extra, self.unseen, np.int64)])
