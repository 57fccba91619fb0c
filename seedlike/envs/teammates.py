"""Teammates' observations in every row (`env.teammates = K`), for OpenAI Five's cross-agent
max-pool (networks.actor_critic, `network.team_pool`).

Pooling learned features across a team needs every teammate's input in the same forward pass, at
acting and at learning time. Unrolls are per seat, so each row carries its teammates' observations
of the same step: the policy of one agent is then a function of its own row alone, and the server,
the trajectory store and the learner need nothing new.

Teams are consecutive blocks of K player ids (`teams.sizes = (K, K, ...)`). The row of player p
gets, for each other player q of its block in id order (slot j = the j-th of them):

  teammates/<key>    [K-1, *spec.observation[key].shape]  q's observation of this step (0 if absent)
  teammates/present  bool [K-1]                            q sent a row this step (is in the game)

Costs grow with K: K-1 more observations per row on the wire and K torso passes per row in the
network; fine for teams of a handful of agents (OpenAI Five's five heroes), not for 81.

Imports only numpy (actors may run without jax).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from seedlike.types import TEAMMATES as PREFIX
from seedlike.types import TEAMMATES_PRESENT as PRESENT
from seedlike.types import ArraySpec, EnvSpec, Rows


def mates_table(num_players: int, team_size: int) -> np.ndarray:
    """int64 [num_players, K-1]: the player ids of each player's teammates, in id order."""
    if team_size < 2 or num_players % team_size:
        raise ValueError(
            f"env.teammates={team_size}: the env's {num_players} agents do not form teams of "
            f"{team_size} consecutive player ids; set env.teammates to the team size (>= 2) or 0"
        )
    p = np.arange(num_players)
    block = (p // team_size)[:, None] * team_size + np.arange(team_size)[None, :]
    return block[block != p[:, None]].reshape(num_players, team_size - 1)


def with_teammates(spec: EnvSpec, team_size: int) -> EnvSpec:
    """`spec` with the teammates' observation keys added."""
    mates_table(spec.num_players, team_size)  # checks that the players form teams
    k = team_size - 1
    observation = dict(spec.observation)
    for key, s in spec.observation.items():
        observation[PREFIX + key] = dataclasses.replace(s, shape=(k, *s.shape))
    observation[PRESENT] = ArraySpec(np.bool_, (k,))
    return dataclasses.replace(spec, observation=observation)


def own_keys(observation: dict) -> list[str]:
    """The keys of the agent's own observation (not its teammates')."""
    return [k for k in observation if not k.startswith(PREFIX)]


def add_teammates(rows: Rows, mates: np.ndarray, num_envs: int) -> Rows:
    """Rows of one step with every row's teammates' observations added (layout above).

    Args:
      rows: one step's rows of `num_envs` envs, at most one row per (env, player).
      mates: mates_table(...), int [num_players, K-1].
    """
    n = rows.reward.shape[0]
    index = np.full((num_envs, mates.shape[0]), -1, np.int64)
    index[rows.env_id, rows.player_id] = np.arange(n)
    source = index[rows.env_id[:, None], mates[rows.player_id]]  # [n, K-1]; -1: absent
    present = source >= 0
    take = np.where(present, source, 0)
    obs = dict(rows.obs)
    for key, value in rows.obs.items():
        mate_obs = value[take]  # [n, K-1, *shape]
        mate_obs[~present] = 0
        obs[PREFIX + key] = mate_obs
    obs[PRESENT] = present
    return rows._replace(obs=obs)


class TeammatesAdapter:
    """Wraps an env adapter (seedlike.envs) so that its rows carry their teammates' observations."""

    def __init__(self, env, spec: EnvSpec, team_size: int):
        self._env = env
        self._mates = mates_table(spec.num_players, team_size)
        self.num_envs = env.num_envs

    def reset(self) -> None:
        self._env.reset()

    def recv(self) -> Rows:
        return add_teammates(self._env.recv(), self._mates, self.num_envs)

    def send(self, action: np.ndarray, rows: Rows) -> None:
        self._env.send(action, rows)

    def render(self) -> np.ndarray:
        return self._env.render()

    def close(self) -> None:
        self._env.close()
