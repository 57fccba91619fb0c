"""Difficulty levels inside one job (`env.levels`): an actor plays every level of a curriculum and
picks each episode's level from the probabilities the server sends (MazeBase's curriculum: the
server moves the upper bound, seedlike.server.curriculum).

Levels are tasks with identical observation and action spaces, e.g. MiniGrid-DoorKey 5x5, 6x6,
8x8 and 16x16 (all see the same 7x7 view). An env's task is fixed when it is made, so the actor
holds one single-env adapter per (level, slot) and a slot moves between them at episode ends:

* A slot is one of the actor's `env.num_envs` seats (`env_id`). It plays one level per episode.
* When a slot's episode ends, it draws the level of its next episode. Its old env stays parked
  at its terminal step; the new level's env either starts (made on first use) or is parked at a
  terminal step too, so the step it is sent is the auto-reset (envpool ignores that action) and
  the slot's next row is the new episode's first, exactly as within one task.
* Every row names its episode's level in extras "level" (int32), for the server's per-level
  success rates.

Single-player tasks only. Imports only numpy (actors may run without jax).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from seedlike.types import LEVEL, ArraySpec, EnvSpec, Rows, concat_rows, take_rows


def level_spec(spec: EnvSpec, level_specs: dict[str, EnvSpec]) -> EnvSpec:
    """The spec of a job over several levels: `spec` (env.name's) plus the level of each row, after
    checking that every level has its observations and actions."""
    for name, other in level_specs.items():
        if (other.observation, other.num_actions, other.num_players) != (
            spec.observation,
            spec.num_actions,
            spec.num_players,
        ):
            raise ValueError(
                f"env.levels: {name} has observations {_shapes(other)} and {other.num_actions} "
                f"actions, {spec.name} has {_shapes(spec)} and {spec.num_actions}; every level "
                "needs the same spaces (env.obs_keys can drop the keys that differ)"
            )
    if spec.num_players != 1:
        raise ValueError(f"env.levels: {spec.name} has {spec.num_players} players; levels are for "
                         "single-player tasks")  # fmt: skip
    return dataclasses.replace(spec, extras={**spec.extras, LEVEL: ArraySpec(np.int32, ())})


def _shapes(spec: EnvSpec) -> dict:
    return {k: str(v) for k, v in spec.observation.items()}


def check_probs(probs, num_levels: int) -> np.ndarray:
    """Level probabilities float64 [num_levels] from the server, or ValueError."""
    p = np.asarray(probs, np.float64)
    if p.shape != (num_levels,) or not np.all(np.isfinite(p)) or p.min() < 0 or p.sum() <= 0:
        raise ValueError(
            f"level probabilities {list(p)} are not a distribution over {num_levels} levels"
        )
    return p / p.sum()


class LevelsAdapter:
    """`num_envs` slots, each playing one of `levels` per episode.

    Args:
      make: (level index, slot, seed) -> a single-env adapter (seedlike.envs) of that level.
      num_levels: L.
      num_envs: slots.
      seed: seeds the level draws and the envs.
    """

    def __init__(self, make, num_levels: int, num_envs: int, seed: int):
        self._make = make
        self.num_levels = int(num_levels)
        self.num_envs = int(num_envs)
        self._seed = int(seed)
        self._rng = np.random.default_rng([self._seed, 17])
        self._probs = np.eye(self.num_levels)[0]  # level 0 until the server says otherwise
        self._envs: dict[tuple[int, int], object] = {}  # (level, slot) -> adapter
        self.level = np.zeros(self.num_envs, np.int32)  # each slot's current level

    def set_level_probs(self, probs) -> None:
        """The distribution later episodes draw their level from."""
        self._probs = check_probs(probs, self.num_levels)

    def _env(self, level: int, slot: int):
        """The (level, slot) env; a new one is made and reset (its next row is a first one)."""
        env = self._envs.get((level, slot))
        if env is None:
            seed = int(np.random.SeedSequence([self._seed, level, slot]).generate_state(1)[0] >> 1)
            env = self._envs[(level, slot)] = self._make(level, slot, seed)
            env.reset()
            return env, True
        return env, False

    def reset(self) -> None:
        self.level = self._rng.choice(self.num_levels, self.num_envs, p=self._probs).astype(
            np.int32
        )
        for slot, level in enumerate(self.level.tolist()):
            self._env(level, slot)

    def recv(self) -> Rows:
        parts = [self._envs[(level, slot)].recv() for slot, level in enumerate(self.level.tolist())]
        rows = concat_rows(parts)
        slots = np.repeat(np.arange(self.num_envs, dtype=np.int32), [len(p.reward) for p in parts])
        return rows._replace(env_id=slots, extras={**rows.extras, LEVEL: self.level[slots]})

    def send(self, action: np.ndarray, rows: Rows) -> None:
        """Steps every slot's env; a slot whose episode ended moves to the level it draws."""
        ended = np.unique(rows.env_id[rows.terminated | rows.truncated])
        if ended.size:
            self.level[ended] = self._rng.choice(self.num_levels, ended.size, p=self._probs)
        for slot, level in enumerate(self.level.tolist()):
            env, fresh = self._env(level, slot)
            if fresh:
                continue  # just reset: its first row is waiting
            mine = np.flatnonzero(rows.env_id == slot)
            part = take_rows(rows, mine)
            env.send(action[mine], part._replace(env_id=np.zeros_like(part.env_id)))

    def render(self) -> np.ndarray:
        return self._envs[(int(self.level[0]), 0)].render()

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
