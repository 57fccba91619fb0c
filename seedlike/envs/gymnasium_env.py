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

Spaces: observations Box and MultiBinary (as their dtype, float64 as float32), Discrete (as a
one-hot float32 vector: an index means nothing to an MLP), and Dict and Tuple of those, nested or
not, flattened into one named array each (a Dict's keys; a Tuple's parts `obs_0`, `obs_1`, ...; a
nested part `outer_inner`). Text (MiniGrid's MissionSpace) becomes word ids with
`env.mission_tokens = L` (seedlike.envs.text, as envpool's BabyAI missions) and is otherwise left
out with a one-line note. `env.obs_keys` keeps only the named arrays, before anything else is
checked. Actions: Discrete, MultiDiscrete, Box, and Dict/Tuple of those (seedlike.envs.spaces).
Anything else is refused in one line naming the space and the fix.

Imports only numpy and gymnasium: actors may run without jax.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import logging

import numpy as np

from seedlike.envs import text
from seedlike.envs.spaces import env_actions, spec_from_spaces
from seedlike.types import MISSION_VOCAB_SIZE, ArraySpec, EnvSpec, Rows

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
    except gymnasium.error.NameNotFound as e:
        raise ValueError(
            f"env.name={name!r} (env.backend=gymnasium): {e} {_unregistered_hint(name)}"
        ) from None
    except gymnasium.error.Error as e:
        raise ValueError(f"env.name={name!r} (env.backend=gymnasium): {e}") from None


def _unregistered_hint(name: str) -> str:
    """What to write for an id nothing registered: a package that registers its ids on import
    is named with it, gymnasium's `package:Id` (MiniGrid-Empty-5x5-v0 -> minigrid:...)."""
    package = name.split("-", 1)[0].split("/", 1)[0].lower()
    if package.isidentifier() and importlib.util.find_spec(package) is not None:
        return f"If the package {package} registers it, write env.name='{package}:{name}'."
    return (
        "Name a registered id, package:Id for an id a package registers when imported, or an "
        "entry point module:Class"
    )


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


@dataclasses.dataclass(frozen=True)
class Part:
    """One named array of the observation: where it is in gymnasium's (batched) observation and
    how it is read ("array" as it is, "one_hot" a Discrete, "tokens" a Text as word ids)."""

    key: str
    path: tuple
    kind: str
    space: object


def _parts(space, path: tuple = (), key: str = "obs") -> list[Part]:
    import gymnasium

    spaces = gymnasium.spaces
    if isinstance(space, spaces.Dict):
        named = [(k, s, k if not path else f"{key}_{k}") for k, s in space.items()]
        return [q for k, s, name in named for q in _parts(s, (*path, k), name)]
    if isinstance(space, spaces.Tuple):
        return [q for i, s in enumerate(space.spaces) for q in _parts(s, (*path, i), f"{key}_{i}")]
    if isinstance(space, spaces.Discrete):
        return [Part(key, path, "one_hot", space)]
    if isinstance(space, spaces.Text) or _is_str(space):  # MiniGrid's MissionSpace: str dtype
        return [Part(key, path, "tokens", space)]
    return [Part(key, path, "array", space)]


def _is_str(space) -> bool:
    try:
        return space.dtype is not None and np.dtype(space.dtype).kind in "US"
    except TypeError:
        return False


def observation_parts(name: str, space, env_config) -> list[Part]:
    """The arrays seedlike reads of an observation space: env.obs_keys applied first, Text parts
    tokenized (env.mission_tokens) or left out with a note, anything else not an array refused
    in one line that names the obs_keys to set."""
    parts = _parts(space)
    names = [p.key for p in parts]
    twice = sorted({k for k in names if names.count(k) > 1})
    if twice:
        raise ValueError(
            f"{name}: the observation's parts {twice} flatten to the same name (a Dict key "
            "'a_b' beside a nested 'a' holding 'b'); rename one in a wrapper"
        )
    keys = tuple(env_config.obs_keys)
    if keys:
        missing = sorted(set(keys) - {p.key for p in parts})
        if missing:
            raise ValueError(
                f"env.obs_keys={keys}: {name} has no observation {missing}; it has "
                f"{[p.key for p in parts]}"
            )
        parts = [p for p in parts if p.key in keys]
    kept = []
    for part in parts:
        if part.kind == "tokens" and not int(env_config.mission_tokens):
            _warn_once(
                f"{name}: observation {part.key!r} ({type(part.space).__name__}) is text and is "
                "left out; --config.env.mission_tokens=L reads it as L word ids"
            )
            continue
        if part.kind == "array" and (part.space.dtype is None or part.space.shape is None):
            others = tuple(p.key for p in parts if p is not part)
            raise ValueError(
                f"{name}[{part.key!r}]: observation space {part.space} is not an array; leave it "
                f'out with --config.env.obs_keys="{others}" (or wrap the env)'
            )
        kept.append(part)
    if not kept:
        raise ValueError(f"{name}: no observation left to read (env.obs_keys={keys})")
    return kept


def _array_spec(part: Part, env_config) -> ArraySpec:
    if part.kind == "one_hot":
        return ArraySpec(np.float32, (int(part.space.n),))
    if part.kind == "tokens":
        return ArraySpec(np.int32, (int(env_config.mission_tokens),), high=MISSION_VOCAB_SIZE)
    dtype = np.dtype(part.space.dtype)
    return ArraySpec(np.float32 if dtype == np.float64 else dtype, tuple(part.space.shape))


def spec_of(name: str, env, env_config) -> EnvSpec:
    import gymnasium

    spec = spec_from_spaces(name, gymnasium.spaces.Dict({}), env.action_space, 1, turn_based=False)
    parts = observation_parts(name, env.observation_space, env_config)
    spec.observation.clear()
    spec.observation.update({p.key: _array_spec(p, env_config) for p in parts})
    return spec


def check_env(env_config) -> None:
    """The backend contract (seedlike/envs/__init__.py): ValueError unless env.name makes an env
    whose spaces seedlike reads (one env is made and closed)."""
    make_env_spec(env_config)


def make_env_spec(env_config) -> EnvSpec:
    env = make_one(env_config.name, dict(env_config.kwargs))
    try:
        return spec_of(env_config.name, env, env_config)
    finally:
        env.close()


class GymnasiumAdapter:
    """Steps `env.num_envs` envs of a Gymnasium env in a SyncVectorEnv and reports their rows."""

    def __init__(self, env_config, spec: EnvSpec, seed: int):
        from gymnasium.vector import AutoresetMode, SyncVectorEnv

        self.spec = spec
        self.num_envs = int(env_config.num_envs)
        name, kwargs = env_config.name, dict(env_config.kwargs)
        # One env first, to read its spaces; the vector env makes the others.
        first = make_one(name, kwargs)
        self._parts = observation_parts(name, first.observation_space, env_config)
        self._blank = bool(env_config.blank_mission)
        self._tokens: dict[str, np.ndarray] = {}  # each distinct text's word ids, made once
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
        arrays = {}
        for part in self._parts:
            value = obs
            for step in part.path:
                value = value[step]
            if part.kind == "one_hot":
                index = np.asarray(value, np.int64) - int(part.space.start)
                value = np.eye(int(part.space.n), dtype=np.float32)[index]
            elif part.kind == "tokens":
                value = np.stack([self._token_ids(str(t), part) for t in value])
            arrays[part.key] = np.asarray(value, self.spec.observation[part.key].dtype)
        return arrays

    def _token_ids(self, mission: str, part: Part) -> np.ndarray:
        length = self.spec.observation[part.key].shape[0]
        if self._blank:
            return np.zeros(length, np.int32)
        ids = self._tokens.get(mission)
        if ids is None:
            ids = self._tokens[mission] = text.tokenize(mission, length)
        return ids

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


@functools.cache
def _warn_once(message: str) -> None:
    """A warning about the env's spaces, once per process (the spec is read more than once)."""
    logging.getLogger(__name__).warning("%s", message)
