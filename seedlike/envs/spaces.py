"""EnvSpecs from gymnasium spaces, for every backend (envpool, PettingZoo)."""

from __future__ import annotations

import numpy as np

from seedlike.types import LEGAL_ACTION_MASK, ArraySpec, EnvSpec


def spec_from_spaces(
    name: str, observation_space, action_space, num_players: int, turn_based: bool = True
) -> EnvSpec:
    heads, low, high = action_parts(name, action_space)
    if isinstance(observation_space, _spaces().Dict):
        observation = {k: _array_spec(f"{name}[{k!r}]", s) for k, s in observation_space.items()}
    else:
        observation = {"obs": _array_spec(name, observation_space)}
    num_actions = int(np.prod(heads, dtype=np.int64)) if heads else 0
    extras = {}
    if num_players > 1 and turn_based:
        if low:
            raise ValueError(f"{name}: a turn-based game with continuous actions is not supported")
        extras[LEGAL_ACTION_MASK] = ArraySpec(np.bool_, (sum(heads),))
    # One categorical is EnvSpec's default layout (action_heads ()); several are a factorized one.
    factorized = heads if len(heads) > 1 or low or _is_multi(action_space) else ()
    return EnvSpec(name, observation, num_actions, num_players, extras, factorized, low, high)


def _spaces():
    import gymnasium

    return gymnasium.spaces


def _is_multi(space) -> bool:
    return isinstance(space, _spaces().MultiDiscrete)


def _components(space) -> list:
    """The leaf spaces of an action space, in gymnasium's order (a Dict's keys sorted as it
    keeps them, a Tuple's in order)."""
    spaces = _spaces()
    if isinstance(space, spaces.Dict):
        return [leaf for s in space.values() for leaf in _components(s)]
    if isinstance(space, spaces.Tuple):
        return [leaf for s in space.spaces for leaf in _components(s)]
    return [space]


def action_parts(name: str, action_space) -> tuple[tuple[int, ...], tuple, tuple]:
    """(discrete argument sizes, continuous lows, continuous highs) of an action space: Discrete,
    1-d MultiDiscrete, Box, or a Dict/Tuple of those. The discrete arguments come first (in the
    space's order), then every Box's flattened dimensions."""
    spaces = _spaces()
    heads, low, high = [], [], []
    supported = "Discrete, 1-d MultiDiscrete, Box, or a Dict/Tuple of those"
    for leaf in _components(action_space):
        if isinstance(leaf, spaces.Discrete):
            if int(leaf.start) != 0:
                raise ValueError(f"{name}: a Discrete action space must start at 0, not {leaf}")
            heads.append(int(leaf.n))
        elif isinstance(leaf, spaces.MultiDiscrete) and leaf.nvec.ndim == 1:
            if np.any(leaf.start != 0):
                raise ValueError(f"{name}: a MultiDiscrete action space must start at 0")
            heads.extend(int(n) for n in leaf.nvec)
        elif isinstance(leaf, spaces.Box) and np.issubdtype(leaf.dtype, np.floating):
            low.extend(float(x) for x in np.ravel(leaf.low))
            high.extend(float(x) for x in np.ravel(leaf.high))
        else:
            raise ValueError(
                f"{name} has action space {action_space}; seedlike supports {supported}, not {leaf}"
            )
    return tuple(heads), tuple(low), tuple(high)


def env_actions(action_space, actions: np.ndarray, spec: EnvSpec):
    """A batch of actions [n] (int32) or [n, K] (float32, EnvSpec.action_spec) in the structure a
    gymnasium vector env of `action_space` takes: [n] ints for Discrete, [n, H] for MultiDiscrete,
    [n, *shape] floats for Box, dicts and tuples of those."""
    spaces = _spaces()
    if not spec.continuous:
        if spec.action_heads:
            return np.stack(np.unravel_index(actions, spec.action_heads), axis=-1)
        return actions.astype(np.int64)
    discrete = np.rint(actions[:, : len(spec.head_sizes)]).astype(np.int64)
    values = actions[:, len(spec.head_sizes) :]
    used = {"d": 0, "c": 0}

    def build(space):
        if isinstance(space, spaces.Dict):
            return {k: build(s) for k, s in space.items()}
        if isinstance(space, spaces.Tuple):
            return tuple(build(s) for s in space.spaces)
        if isinstance(space, spaces.Box):
            size = int(np.prod(space.shape, dtype=np.int64))
            part = values[:, used["c"] : used["c"] + size]
            used["c"] += size
            return part.reshape((-1, *space.shape)).astype(space.dtype)
        width = 1 if isinstance(space, spaces.Discrete) else int(space.nvec.shape[0])
        part = discrete[:, used["d"] : used["d"] + width]
        used["d"] += width
        return part[:, 0] if isinstance(space, spaces.Discrete) else part

    return build(action_space)


def _array_spec(name: str, space) -> ArraySpec:
    if isinstance(space, _spaces().Discrete):
        return ArraySpec(np.int32, ())
    if space.dtype is None or space.shape is None:
        raise ValueError(f"{name}: observation space {space} is not an array")
    dtype = np.dtype(space.dtype)
    if dtype == np.float64:
        dtype = np.dtype(np.float32)
    return ArraySpec(dtype, space.shape)


class EnvActions:
    """What the env gets from the policy's actions (EnvSpec.action_spec): discrete ones as they
    are; continuous values clipped to the env's bounds ("clip"), or taken as [-1, 1] and mapped
    linearly onto them ("rescale"), after a tanh when the policy is squashed."""

    def __init__(self, spec: EnvSpec, bounds: str = "clip", squash: bool = False):
        self.spec, self.bounds, self.squash = spec, bounds, bool(squash)
        self.low = np.asarray(spec.action_low, np.float32)
        self.high = np.asarray(spec.action_high, np.float32)
        if spec.continuous and (bounds == "rescale" or squash):
            if not (np.all(np.isfinite(self.low)) and np.all(np.isfinite(self.high))):
                how = "network.action_squash" if squash else "env.action_bounds='rescale'"
                raise ValueError(
                    f"{how} maps onto {spec.name}'s action bounds, which are not finite "
                    f"({spec.action_low} .. {spec.action_high}); use env.action_bounds='clip' "
                    "and network.action_squash=False"
                )

    def __call__(self, actions: np.ndarray) -> np.ndarray:
        if not self.spec.continuous:
            return actions
        h = len(self.spec.head_sizes)
        u = actions[:, h:]
        if self.squash:
            u = np.tanh(u)
        if self.squash or self.bounds == "rescale":
            u = self.low + 0.5 * (np.clip(u, -1.0, 1.0) + 1.0) * (self.high - self.low)
        out = actions.copy()
        out[:, h:] = np.clip(u, self.low, self.high)
        return out
