"""Environment backends: the config's `env.backend` picks the adapter an actor steps.

  envpool     (default) single-agent tasks, board games, envpool's simultaneous multi-agent tasks
  pettingzoo  any PettingZoo parallel env, named by module (`env.name`, e.g.
              "magent2.environments.battle_v4" or "seedlike.envs.coins")

Both turn an env batch into seedlike.types.Rows of (env, player) seats with the same methods:
reset(), recv() -> Rows, send(actions, rows), render(), close(). With `env.teammates = K` every row
also carries its teammates' observations (seedlike/envs/teammates.py), whatever the backend.
"""

from __future__ import annotations

import dataclasses

from seedlike.envs import teammates

BACKENDS = ("envpool", "pettingzoo")


class UnknownEnv(ValueError):
    """env.backend or env.name names nothing that can be made (the message says what can)."""


def _backend(env_config) -> str:
    backend = env_config.get("backend", "envpool") or "envpool"
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
    from seedlike.envs.pettingzoo_env import load_factory

    try:
        load_factory(env_config.name)
    except ValueError as e:
        raise UnknownEnv(str(e)) from None


def make_env_spec(env_config):
    """The EnvSpec of the configured env (identical on actors and server)."""
    if _backend(env_config) == "envpool":
        from seedlike.envs.envpool_env import make_env_spec as spec_fn
    else:
        from seedlike.envs.pettingzoo_env import make_env_spec as spec_fn
    spec = spec_fn(env_config)
    team_size = int(env_config.get("teammates", 0) or 0)
    if team_size:
        spec = teammates.with_teammates(spec, team_size)
    return spec


def make_env(env_config, spec, seed: int):
    """The adapter an actor steps: `env.num_envs` envs of the configured task."""
    if _backend(env_config) == "envpool":
        from seedlike.envs.envpool_env import EnvpoolAdapter as adapter
    else:
        from seedlike.envs.pettingzoo_env import PettingZooAdapter as adapter
    team_size = int(env_config.get("teammates", 0) or 0)
    if not team_size:
        return adapter(env_config, spec, seed)
    own = {k: spec.observation[k] for k in teammates.own_keys(spec.observation)}
    env = adapter(env_config, dataclasses.replace(spec, observation=own), seed)
    return teammates.TeammatesAdapter(env, spec, team_size)
