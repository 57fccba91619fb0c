"""League roles (AlphaStar's league; TLeague's learners sharing one model pool): several learning
policies, one learner process each, that play each other's frozen snapshots.

  main              the config's sampler over the snapshots of every role (and self-play, and
                    bots); never reset. The agent the league exists for.
  main_exploiter    learns only to beat the main agent: plays the newest main snapshot, or, while
                    it wins fewer than `EASIER_BELOW` of those games, main snapshots by PFSP's
                    "variance" weighting (the ones it beats about half of the time). When it wins
                    more than `league.exploit_win_rate` of at least `league.exploit_min_games`
                    (decayed) games against the newest main snapshot, or after
                    `league.reset_env_steps` env steps without, it is snapshotted into the league
                    (so the main agent must learn to beat the exploit) and reset.
  league_exploiter  PFSP ("hard") over the snapshots of every role, no self-play: hunts what the
                    whole league is weak against. Snapshotted on the same rule, with the pool's
                    PFSP-weighted win rate in place of the main agent's, and then reset with
                    probability `league.league_exploiter_reset_p` (AlphaStar's 25%).

A reset gives the role its initial params (the run's start: `init_from`'s params where set), or
with `league.exploiter_reset = "main"` those of the newest main snapshot it holds, and a fresh
optimizer, as a new policy version, so snapshot ids stay unique.

Layout. The roles' learner processes run in <league.role_dir>/<role>/ (seedlike.launch.league starts
them), each with its snapshots in <role>/league/snapshots/<version>/ as a single-role league has.
A role picks up the others' new snapshots from there (seedlike.league.league.PeerSnapshots, a
thread of its own) and knows them by policy id `snapshot_id(role, version)`: main's ids are its
versions, as in a single-role league; the other roles' lie above `STRIDE`. Each role keeps its own
payoff matrix of its own results; python -m seedlike.launch.league.report plays them against each
other.
"""

from __future__ import annotations

import os

import numpy as np

from seedlike.league.payoff import PayoffMatrix
from seedlike.league.players import LEARNER, ROLES, STRIDE
from seedlike.league.pool import OpponentPool

EXPLOITERS = ("main_exploiter", "league_exploiter")
EASIER_BELOW = 0.1  # a main exploiter that wins less than this against main's newest plays older
# Which roles' snapshots each role plays (and so loads).
OPPONENT_ROLES = {
    "main": ROLES,
    "main_exploiter": ("main",),
    "league_exploiter": ROLES,
}


def check_role(role: str) -> int:
    """The index of `role` in ROLES; a ValueError listing them otherwise."""
    if role not in ROLES:
        raise ValueError(f"unknown league.role {role!r}; choose from {', '.join(ROLES)}")
    return ROLES.index(role)


def snapshot_id(role: str, version: int) -> int:
    return check_role(role) * STRIDE + int(version)


def role_of(policy: int) -> str:
    """The role whose snapshot `policy` (>= 0) is."""
    return ROLES[int(policy) // STRIDE]


def version_of(policy: int) -> int:
    return int(policy) % STRIDE


def league_dir(logdir: str, role: str = "") -> str:
    """A learner process's league files: <logdir>/league, and in a league of roles (`logdir` the
    directory the roles share) <logdir>/<role>/league."""
    return os.path.join(logdir, role, "league")


def snapshot_dir(logdir: str, role: str = "") -> str:
    """Where a learner process keeps its snapshots (`league_dir`'s "snapshots")."""
    return os.path.join(league_dir(logdir, role), "snapshots")


def of_role(pool: OpponentPool, role: str) -> list[int]:
    """Ids of `role`'s snapshots in the pool, oldest first."""
    return [i for i in pool.ids if role_of(i) == role]


def newest(pool: OpponentPool, role: str) -> int | None:
    """The id of `role`'s newest snapshot in the pool; None while it holds none."""
    ids = of_role(pool, role)
    return ids[-1] if ids else None


class MainExploiterSampler:
    """The main exploiter's opponents: the newest main snapshot, or while it wins fewer than
    EASIER_BELOW of its games against it, main snapshots by PFSP "variance" weights x (1 - x)
    (AlphaStar: an exploiter that cannot yet beat the main agent learns from the versions it can
    half beat). Self-play (`LEARNER`) only while the pool holds no main snapshot.
    """

    def __init__(self, pool: OpponentPool, payoff: PayoffMatrix):
        self.pool = pool
        self.payoff = payoff

    def target(self) -> int | None:
        """The newest main snapshot: the main agent as this role knows it now."""
        return newest(self.pool, "main")

    def probabilities(self) -> dict[int, float]:
        mains = of_role(self.pool, "main")
        if not mains:
            return {LEARNER: 1.0}
        if self.payoff.win_rate(LEARNER, mains[-1]) >= EASIER_BELOW or len(mains) == 1:
            return {mains[-1]: 1.0}
        x = self.payoff.win_rates(LEARNER, mains)
        w = x * (1.0 - x)
        w = w / w.sum() if w.sum() > 0 else np.full(len(mains), 1.0 / len(mains))
        return dict(zip(mains, w.tolist()))

    def update(self, opponent: int, outcome: int, drawn: float | None = None) -> None:
        pass


class ResetRule:
    """When an exploiter is snapshotted and reset (learner thread; see the module docstring).

    Args:
      role: an entry of EXPLOITERS.
      win_rate: the success threshold on the win rate against its target.
      min_games: the decayed games against the target that must stand behind that win rate.
      reset_env_steps: reset after this many of the role's env steps without success (0: never).
      reset_p: the probability that a success resets (1 for main exploiters).
      seed: seeds the league exploiter's reset draws.
    """

    def __init__(self, role: str, win_rate: float, min_games: float, reset_env_steps: int,
                 reset_p: float, seed: int = 0):  # fmt: skip
        if role not in EXPLOITERS:
            raise ValueError(f"only exploiters reset; {role!r} is not one of {EXPLOITERS}")
        self.role = role
        self.win_rate, self.min_games = float(win_rate), float(min_games)
        self.reset_env_steps, self.reset_p = int(reset_env_steps), float(reset_p)
        self._rng = np.random.default_rng(seed + 11)
        self.since_env_steps = 0  # the role's env steps at its last reset (or its start)
        self.resets = 0
        self.successes = 0

    def success(self, sampler, pool: OpponentPool, payoff: PayoffMatrix) -> tuple[bool, float]:
        """(succeeded, the win rate judged): the main exploiter against the newest main snapshot;
        the league exploiter against its PFSP distribution over the pool (games weighted as it
        draws them)."""
        if self.role == "main_exploiter":
            target = sampler.target()
            if target is None:
                return False, float("nan")
            rate = payoff.win_rate(LEARNER, target)
            return payoff.games(LEARNER, target) >= self.min_games and rate > self.win_rate, rate
        if not len(pool):
            return False, float("nan")
        ids = pool.ids
        p = sampler.past_probabilities()
        rate = float(np.dot(p, payoff.win_rates(LEARNER, ids)))
        games = float(np.dot(p, [payoff.games(LEARNER, i) for i in ids]))
        return games >= self.min_games and rate > self.win_rate, rate

    def decide(self, succeeded: bool, env_steps: int) -> tuple[bool, bool]:
        """(snapshot into the league now, reset now), at the role's `env_steps`: a success or
        `reset_env_steps` without one adds the exploiter to the league (AlphaStar), which then
        resets with probability `reset_p`."""
        timed_out = self.reset_env_steps > 0 and (
            env_steps - self.since_env_steps >= self.reset_env_steps
        )
        if not (succeeded or timed_out):
            return False, False
        self.successes += int(succeeded)
        self.since_env_steps = env_steps
        reset = self.reset_p >= 1.0 or self._rng.random() < self.reset_p
        self.resets += int(reset)
        return True, reset

    def state_dict(self) -> dict:
        return {"since_env_steps": self.since_env_steps, "resets": self.resets,
                "successes": self.successes, "rng": self._rng.bit_generator.state}  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        self.since_env_steps = int(state.get("since_env_steps", 0))
        self.resets = int(state.get("resets", 0))
        self.successes = int(state.get("successes", 0))
        if "rng" in state:  # a restart would otherwise replay the first reset draws
            self._rng.bit_generator.state = state["rng"]
