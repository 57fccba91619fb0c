"""Gymnasium adapter: any single-agent Gymnasium env, by registered id or by entry point, as rows.

`env.name` is a registered id (`"Taxi-v4"`, `"FrozenLake-v1"`, an id a package of yours registers)
or an entry point `"module:attribute"` naming a `gymnasium.Env` subclass or a function returning
one (`"examples.corridor:Corridor"`); `env.kwargs` go to gymnasium.make or to that attribute.
An actor steps `env.num_envs` of them in a gymnasium.vector.SyncVectorEnv (in its own process,
one after another: an actor is one core's worth of envs, and more actors use more cores).

Rows follow envpool's conventions: env e is the row (env_id=e, player_id=0) of every step; the row
of an episode's last step has terminated or truncated set and does not act; the vector env resets
that env at the next step (its action ignored) and reports the new episode's first observation
with reward 0 (gymnasium's NEXT_STEP autoreset).

Spaces: observations Box (as their dtype, float64 as float32), Discrete (as a one-hot float32
vector: an index means nothing to an MLP) and Dict of those; actions Discrete, MultiDiscrete,
Box, and Dict/Tuple of those (seedlike.envs.spaces). Anything else is refused in one line naming
the space.

Imports only numpy and gymnasium: actors may run without jax.
"""

from __future__ import annotations

import importlib

import numpy as np

from seedlike.envs.spaces import env_actions, spec_from_spaces
from seedlike.types import ArraySpec, EnvSpec, Rows

# Packages that register their ids only when asked: an id with the prefix has the function called
# first (PyPI minatar registers MinAtar/<Game>-v1, sticky actions 0.1, in register_envs()).
REGISTRARS = {"MinAtar/": ("minatar.gym", "register_envs", "pip install minatar==1.0.15")}


def _register(name: str) -> None:
    for prefix, (module_name, function, install) in REGISTRARS.items():
        if not name.startswith(prefix):
            continue
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise ValueError(
                f"env.name={name!r} (env.backend=gymnasium) needs {module_name} ({e}): {install}"
            ) from None
        import gymnasium

        if name not in gymnasium.registry:
            getattr(module, function)()


def make_one(name: str, kwargs: dict):
    """One env of `name`: a registered id or a module:attribute entry point."""
    import gymnasium

    _register(name)

    module_name, sep, attr = name.partition(":")
    if sep and attr.isidentifier():  # "module:Attribute" (gymnasium's own "module:Id-v0" below)
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise ValueError(
                f"env.name={name!r} (env.backend=gymnasium): cannot import {module_name!r} ({e}); "
                "the module must be importable where the learner and the actors run"
            ) from None
        make = getattr(module, attr, None)
        if not callable(make):
            raise ValueError(
                f"env.name={name!r} (env.backend=gymnasium): {module_name} has no env class or "
                f"function {attr!r}"
            )
        env = make(**kwargs)
        if not isinstance(env, gymnasium.Env):
            raise ValueError(
                f"env.name={name!r} (env.backend=gymnasium): {attr}() returned a "
                f"{type(env).__name__}, not a gymnasium.Env"
            )
        return env
    try:
        return gymnasium.make(name, **kwargs)
    except gymnasium.error.Error as e:
        raise ValueError(
            f"env.name={name!r} (env.backend=gymnasium): {e} Name a registered id or an entry "
            "point module:Class"
        ) from None


def takes_render_mode(name: str) -> bool:
    """Whether the env can be asked for frames: a registered id always can (gymnasium.make takes
    render_mode), an entry point if its signature takes render_mode."""
    import inspect

    module_name, sep, attr = name.partition(":")
    if not (sep and attr.isidentifier()):
        return True
    try:
        make = getattr(importlib.import_module(module_name), attr)
        parameters = inspect.signature(make).parameters
    except (ImportError, AttributeError, TypeError, ValueError):
        return True  # making it says what is wrong
    return "render_mode" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


def _one_hot_keys(space) -> list:
    """Keys (None: the whole observation) whose Discrete values become one-hot vectors."""
    import gymnasium

    if isinstance(space, gymnasium.spaces.Discrete):
        return [None]
    if isinstance(space, gymnasium.spaces.Dict):
        return [k for k, s in space.items() if isinstance(s, gymnasium.spaces.Discrete)]
    return []


def spec_of(name: str, env) -> EnvSpec:
    import gymnasium

    obs_space = env.observation_space
    if not isinstance(obs_space, (gymnasium.spaces.Box, gymnasium.spaces.Discrete,
                                  gymnasium.spaces.Dict)):  # fmt: skip
        raise ValueError(
            f"{name} has observation space {obs_space}; the gymnasium backend reads Box, "
            "Discrete and Dict of those"
        )
    spec = spec_from_spaces(name, obs_space, env.action_space, 1, turn_based=False)
    for key in _one_hot_keys(obs_space):
        sub = obs_space if key is None else obs_space[key]
        spec.observation["obs" if key is None else key] = ArraySpec(np.float32, (int(sub.n),))
    return spec


def check_env(env_config) -> None:
    """The backend contract (seedlike/envs/__init__.py): ValueError unless env.name makes an env
    whose spaces seedlike reads (one env is made and closed)."""
    make_env_spec(env_config)


def make_env_spec(env_config) -> EnvSpec:
    env = make_one(env_config.name, dict(env_config.kwargs))
    try:
        return spec_of(env_config.name, env)
    finally:
        env.close()


class GymnasiumAdapter:
    """Steps `env.num_envs` envs of a Gymnasium env in a SyncVectorEnv and reports their rows."""

    def __init__(self, env_config, spec: EnvSpec, seed: int):
        import gymnasium
        from gymnasium.vector import AutoresetMode, SyncVectorEnv

        self.spec = spec
        self.num_envs = int(env_config.num_envs)
        name, kwargs = env_config.name, dict(env_config.kwargs)
        # One env first, to read its spaces; the vector env makes the others.
        first = make_one(name, kwargs)
        self._one_hot = _one_hot_keys(first.observation_space)
        self._sizes = {
            k: int((first.observation_space if k is None else first.observation_space[k]).n)
            for k in self._one_hot
        }
        self._dict = isinstance(first.observation_space, gymnasium.spaces.Dict)
        others = [lambda: make_one(name, kwargs)] * (self.num_envs - 1)
        self._envs = SyncVectorEnv([lambda: first, *others], autoreset_mode=AutoresetMode.NEXT_STEP)
        self._seed = int(seed)
        self._env_id = np.arange(self.num_envs, dtype=np.int32)
        self._last = None

    def reset(self) -> None:
        obs, _ = self._envs.reset(seed=self._seed)
        zeros = np.zeros(self.num_envs, np.bool_)
        self._last = (obs, np.zeros(self.num_envs, np.float32), zeros, zeros)

    def recv(self) -> Rows:
        obs, reward, terminated, truncated = self._last
        done = terminated | truncated
        return Rows(
            obs=self._observation(obs),
            extras={},
            reward=np.asarray(reward, np.float32),
            terminated=np.asarray(terminated, np.bool_),
            truncated=np.asarray(truncated, np.bool_),
            env_id=self._env_id,
            player_id=np.zeros(self.num_envs, np.int32),
            acting=~done,
            game_over=done,
        )

    def _observation(self, obs) -> dict:
        arrays = dict(obs) if self._dict else {"obs": obs}
        for key in self._one_hot:
            k = "obs" if key is None else key
            arrays[k] = np.eye(self._sizes[key], dtype=np.float32)[np.asarray(arrays[k])]
        return {k: np.asarray(v, self.spec.observation[k].dtype) for k, v in arrays.items()}

    def send(self, action: np.ndarray, rows: Rows) -> None:
        """Steps every env; an env whose episode ended resets (its action is ignored)."""
        act = self.spec.action_spec
        actions = np.zeros((self.num_envs, *act.shape), act.dtype)
        actions[rows.env_id] = action
        actions = env_actions(self._envs.single_action_space, actions, self.spec)
        obs, reward, terminated, truncated, _ = self._envs.step(actions)
        self._last = (obs, reward, terminated, truncated)

    def render(self) -> np.ndarray:
        return np.asarray(self._envs.envs[0].render())

    def close(self) -> None:
        self._envs.close()


Adapter = GymnasiumAdapter  # the backend contract's name for it (seedlike/envs/__init__.py)
