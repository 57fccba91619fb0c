"""Environment backends: the config's `env.backend` names the record in `BACKENDS` that makes the
envs an actor steps.

  envpool     (default) single-agent tasks, board games, envpool's simultaneous multi-agent tasks
  pettingzoo  any PettingZoo parallel env, named by module (`env.name`, e.g.
              "magent2.environments.battle_v4" or "seedlike.envs.coins")
  gymnasium   any single-agent Gymnasium env, by registered id ("CartPole-v1") or entry point
              ("examples.corridor:Corridor")
  gymnax      gymnax's JAX envs (classic control, MinAtar), on-device: stepped inside the
              learner's compiled program (seedlike.ondevice), no actors
  pgx         pgx's two-player board games (tic_tac_toe, connect_four, othello, go_9x9, ...),
              on-device, the league's opponents played inside the program
  brax        brax's continuous control (inverted_double_pendulum, halfcheetah, ant, humanoid,
              ...; MJX through brax's backend="mjx"), on-device

Every backend turns a batch of envs into seedlike.types.Rows of (env, player) seats, with the same
adapter methods: reset(), recv() -> Rows, send(actions, rows), render(), close(). With
`env.teammates = K` every row also carries its teammates' observations (seedlike/envs/teammates.py),
whatever the backend; with `env.levels` an actor plays several tasks of one curriculum
(seedlike/envs/levels.py).

A new backend is a module and one line in `BACKENDS`. The module defines

    check_env(env_config) -> None          raises ValueError, in one line, unless env.name can be
                                           made here (cheaply: the learner checks every config)
    make_env_spec(env_config) -> EnvSpec   the spaces, identical on actors and learner
    Adapter(env_config, spec, seed)        the adapter an actor steps (env.num_envs envs)
    takes_render_mode(name) -> bool        whether render_mode="rgb_array" gives frames (watch.py)

and imports no jax (actors run without it). seedlike/envs/gymnasium_env.py is the shortest.
An on-device backend (`Backend.on_device`) has no Adapter: its `device_env(env_config, spec)`
gives the env's pure JAX functions (seedlike/envs/device.py), which the on-device runtime steps.
"""

from __future__ import annotations

import dataclasses
import importlib
from types import ModuleType

import ml_collections
import numpy as np

from seedlike.envs import levels, teammates
from seedlike.types import LEVEL, Rows


@dataclasses.dataclass(frozen=True)
class Backend:
    """An env backend: the module that makes its envs, and what the rest of seedlike asks of it.

    Attributes:
      name: its `env.backend` value.
      module: the module of its functions (the module docstring above), imported when the backend
        is first used: its env package need only be installed where it runs.
      async_steps: its adapter steps part of its envs while the rest wait for their actions
        (env.batch_envs < env.num_envs; seedlike.config.actor_sizing sends halves).
      levels: it can play curriculum levels inside one job (env.levels).
      on_device: its envs are JAX functions the learner's program steps (seedlike.ondevice),
        not adapters that actors step.
    """

    name: str
    module: str
    async_steps: bool = False
    levels: bool = False
    on_device: bool = False

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)


BACKENDS = {
    "envpool": Backend("envpool", "seedlike.envs.envpool_env", async_steps=True, levels=True),
    "pettingzoo": Backend("pettingzoo", "seedlike.envs.pettingzoo_env"),
    "gymnasium": Backend("gymnasium", "seedlike.envs.gymnasium_env"),
    "gymnax": Backend("gymnax", "seedlike.envs.gymnax_env", on_device=True),
    "pgx": Backend("pgx", "seedlike.envs.pgx_env", on_device=True),
    "brax": Backend("brax", "seedlike.envs.brax_env", on_device=True),
}


class UnknownEnv(ValueError):
    """env.backend or env.name names nothing that can be made (the message says what can)."""


def backend(env_config) -> Backend:
    """The record of the config's env.backend (UnknownEnv for a name with none)."""
    found = BACKENDS.get(env_config.backend)
    if found is None:
        raise UnknownEnv(f"env.backend={env_config.backend!r} is not one of {list(BACKENDS)}")
    return found


def check_env(env_config) -> None:
    """Raises UnknownEnv unless `env.name` can be made by `env.backend` here."""
    try:
        backend(env_config).load().check_env(env_config)
    except UnknownEnv:
        raise
    except ValueError as e:
        raise UnknownEnv(str(e)) from None


def make_env_spec(env_config):
    """The EnvSpec of the configured env (identical on actors and server)."""
    spec_fn = backend(env_config).load().make_env_spec
    spec = spec_fn(env_config)
    level_names = tuple(env_config.levels)
    if level_names:
        others = {name: spec_fn(_level_config(env_config, name, 1)) for name in level_names}
        spec = levels.level_spec(spec, others)
    if env_config.teammates:
        spec = teammates.with_teammates(spec, int(env_config.teammates))
    return spec


def _level_config(env_config, name: str, num_envs: int):
    """env_config for `num_envs` envs of level `name` (synchronous, one envpool thread each)."""
    config = ml_collections.ConfigDict(env_config.to_dict())
    config.name, config.num_envs, config.levels = name, num_envs, ()
    config.batch_envs, config.num_threads = 0, 1
    return config


def on_device(env_config) -> bool:
    """Whether the configured env is stepped inside the learner's program (no actors)."""
    return backend(env_config).on_device


def device_env(env_config, spec):
    """The configured on-device env's pure functions (seedlike.envs.device.DeviceEnv)."""
    return backend(env_config).load().device_env(env_config, spec)


def make_env(env_config, spec, seed: int):
    """The adapter an actor steps: `env.num_envs` envs of the configured task."""
    adapter = backend(env_config).load().Adapter
    level_names = tuple(env_config.levels)
    if level_names:
        extras = {k: v for k, v in spec.extras.items() if k != LEVEL}
        one = dataclasses.replace(spec, extras=extras)

        def make(level: int, slot: int, env_seed: int):
            return adapter(_level_config(env_config, level_names[level], 1), one, env_seed)

        return levels.LevelsAdapter(make, len(level_names), int(env_config.num_envs), seed)
    team_size = int(env_config.teammates)
    if not team_size:
        return adapter(env_config, spec, seed)
    own = {k: spec.observation[k] for k in teammates.own_keys(spec.observation)}
    env = adapter(env_config, dataclasses.replace(spec, observation=own), seed)
    return teammates.TeammatesAdapter(env, spec, team_size)


def takes_render_mode(env_config) -> bool:
    """Whether the configured env gives frames when made with render_mode="rgb_array"."""
    return backend(env_config).load().takes_render_mode(env_config.name)


def in_env_order(rows: Rows) -> Rows:
    """The rows sorted by (env, player). envpool hands them back in the order its threads
    finished, which changes from run to run; evaluations sort them, so that their random draws
    and the episodes that count are the same for the same seed. Actors do not: the learner does
    not depend on the order, and sorting would copy every observation."""
    order = np.lexsort((rows.player_id, rows.env_id))
    return Rows(
        *({k: v[order] for k, v in f.items()} if isinstance(f, dict) else f[order] for f in rows)
    )
