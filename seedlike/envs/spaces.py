"""EnvSpecs from gymnasium spaces, for every backend (envpool, PettingZoo)."""

from __future__ import annotations

import numpy as np

from seedlike.types import LEGAL_ACTION_MASK, ArraySpec, EnvSpec


def spec_from_spaces(
    name: str, observation_space, action_space, num_players: int, turn_based: bool = True
) -> EnvSpec:
    import gymnasium

    heads = ()
    if isinstance(action_space, gymnasium.spaces.MultiDiscrete) and action_space.nvec.ndim == 1:
        heads = tuple(int(n) for n in action_space.nvec)  # a factorized action (EnvSpec)
        if np.any(action_space.start != 0):
            raise ValueError(f"{name}: a MultiDiscrete action space must start at 0")
    elif not isinstance(action_space, gymnasium.spaces.Discrete):
        raise ValueError(
            f"{name} has action space {action_space}; seedlike supports Discrete and 1-d "
            "MultiDiscrete actions only"
        )
    if isinstance(observation_space, gymnasium.spaces.Dict):
        observation = {k: _array_spec(f"{name}[{k!r}]", s) for k, s in observation_space.items()}
    else:
        observation = {"obs": _array_spec(name, observation_space)}
    num_actions = int(np.prod(heads, dtype=np.int64)) if heads else int(action_space.n)
    extras = {}
    if num_players > 1 and turn_based:
        extras[LEGAL_ACTION_MASK] = ArraySpec(np.bool_, (sum(heads) or num_actions,))
    return EnvSpec(name, observation, num_actions, num_players, extras, heads)


def _array_spec(name: str, space) -> ArraySpec:
    import gymnasium

    if isinstance(space, gymnasium.spaces.Discrete):
        return ArraySpec(np.int32, ())
    if space.dtype is None or space.shape is None:
        raise ValueError(f"{name}: observation space {space} is not an array")
    dtype = np.dtype(space.dtype)
    if dtype == np.float64:
        dtype = np.dtype(np.float32)
    return ArraySpec(dtype, space.shape)
