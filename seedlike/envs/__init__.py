"""Environment backends: the config's `env.backend` picks the adapter an actor steps.

  envpool     (default) single-agent tasks, board games, envpool's simultaneous multi-agent tasks
  pettingzoo  any PettingZoo parallel env, named by module (`env.name`, e.g.
              "magent2.environments.battle_v4" or "seedlike.envs.coins")
  gymnasium   any single-agent Gymnasium env, by registered id ("Taxi-v3") or entry point
              ("examples.corridor:Corridor")

Both turn an env batch into seedlike.types.Rows of (env, player) seats with the same methods:
reset(), recv() -> Rows, send(actions, rows), render(), close(). With `env.teammates = K` every row
also carries its teammates' observations (seedlike/envs/teammates.py), whatever the backend; with
`env.levels` an actor plays several tasks of one curriculum (seedlike/envs/levels.py).
"""

from __future__ import annotations

import dataclasses

import ml_collections
import numpy as np

from seedlike.envs import levels, teammates
from seedlike.types import LEVEL, Rows

BACKENDS = ("envpool", "pettingzoo", "gymnasium")


class UnknownEnv(ValueError):
    """env.backend or env.name names nothing that can be made (the message says what can)."""


def _backend(env_config) -> str:
    backend = env_config.backend or "envpool"
    if backend not in BACKENDS:
        raise UnknownEnv(f"env.backend={backend!r} is not one of {list(BACKENDS)}")
    return backend


def check_env(env_config) -> None:
    """Raises UnknownEnv unless `env.name` can be made by `env.backend` here."""
    if _backend(env_config) == "envpool":
        from seedlike.envs.envpool_env import UnknownTask, check_task_id

        try:
            check_task_id(env_config.name)
        except UnknownTask as e:
            raise UnknownEnv(str(e)) from None
        return
    if _backend(env_config) == "gymnasium":
        from seedlike.envs.gymnasium_env import make_env_spec as gymnasium_spec

        try:
            gymnasium_spec(env_config)
        except ValueError as e:
            raise UnknownEnv(str(e)) from None
        return
    from seedlike.envs.pettingzoo_env import load_factory

    try:
        load_factory(env_config.name)
    except ValueError as e:
        raise UnknownEnv(str(e)) from None


def make_env_spec(env_config):
    """The EnvSpec of the configured env (identical on actors and server)."""
    if _backend(env_config) == "envpool":
        from seedlike.envs.envpool_env import make_env_spec as spec_fn
    elif _backend(env_config) == "gymnasium":
        from seedlike.envs.gymnasium_env import make_env_spec as spec_fn
    else:
        from seedlike.envs.pettingzoo_env import make_env_spec as spec_fn
    spec = spec_fn(env_config)
    level_names = tuple(env_config.levels or ())
    if level_names:
        others = {name: spec_fn(_level_config(env_config, name, 1)) for name in level_names}
        spec = levels.level_spec(spec, others)
    team_size = int(env_config.teammates or 0)
    if team_size:
        spec = teammates.with_teammates(spec, team_size)
    return spec


def _level_config(env_config, name: str, num_envs: int):
    """env_config for `num_envs` envs of level `name` (synchronous, one envpool thread each)."""
    config = ml_collections.ConfigDict(env_config.to_dict())
    config.name, config.num_envs, config.levels = name, num_envs, ()
    if "batch_size" in config:
        config.batch_size = 0
    config.num_threads = 1
    return config


def make_env(env_config, spec, seed: int):
    """The adapter an actor steps: `env.num_envs` envs of the configured task."""
    if _backend(env_config) == "envpool":
        from seedlike.envs.envpool_env import EnvpoolAdapter as adapter
    elif _backend(env_config) == "gymnasium":
        from seedlike.envs.gymnasium_env import GymnasiumAdapter as adapter
    else:
        from seedlike.envs.pettingzoo_env import PettingZooAdapter as adapter
    level_names = tuple(env_config.levels or ())
    if level_names:
        extras = {k: v for k, v in spec.extras.items() if k != LEVEL}
        one = dataclasses.replace(spec, extras=extras)

        def make(level: int, slot: int, env_seed: int):
            return adapter(_level_config(env_config, level_names[level], 1), one, env_seed)

        return levels.LevelsAdapter(make, len(level_names), int(env_config.num_envs), seed)
    team_size = int(env_config.teammates or 0)
    if not team_size:
        return adapter(env_config, spec, seed)
    own = {k: spec.observation[k] for k in teammates.own_keys(spec.observation)}
    env = adapter(env_config, dataclasses.replace(spec, observation=own), seed)
    return teammates.TeammatesAdapter(env, spec, team_size)


def in_env_order(rows: Rows) -> Rows:
    """The rows sorted by (env, player). envpool hands them back in the order its threads
    finished, which changes from run to run; evaluations sort them, so that their random draws
    and the episodes that count are the same for the same seed. Actors do not: the learner does
    not depend on the order, and sorting would copy every observation."""
    order = np.lexsort((rows.player_id, rows.env_id))
    return Rows(
        *({k: v[order] for k, v in f.items()} if isinstance(f, dict) else f[order] for f in rows)
    )
