"""brax (github google/brax): rigid-body continuous control as JAX functions, stepped on the
accelerator inside one compiled program (seedlike.ondevice): `env.backend = "brax"`, `env.name` a
brax env ("inverted_pendulum", "inverted_double_pendulum", "halfcheetah", "ant", "humanoid",
"hopper", "walker2d", ...). `env.kwargs` go to brax's `get_environment` (`backend`:
"generalized", brax's default, "positional", "spring" or "mjx", MuJoCo's MJX through brax;
the env's own arguments, e.g. `ctrl_cost_weight`), except `episode_length` (1000 by default,
as brax's trainers run these tasks), the step at which an episode is truncated.

The observation is "obs" (float32 [brax's observation_size]); the action is continuous,
[-1, 1] in every dimension (brax's), through the Gaussian head the MuJoCo configs use. As the
SEED path's actors do (env.action_bounds), the env gets the policy's sample clipped to those
bounds ("clip" and "rescale" are the same map there), and the sample is what is learned from.
An episode that reaches `episode_length` is truncated (its last value bootstraps); brax's
`done` (a fallen hopper, an unhealthy ant) terminates it. brax's own wrappers (episode length,
auto-reset) are not used: `device.advance` resets the step after an episode ends.

`Adapter` steps the same functions from the host for what plays outside the program
(evaluate.py).
"""

from __future__ import annotations

import contextlib
import functools
import io

from seedlike.types import ArraySpec, EnvSpec

EPISODE_LENGTH = 1000  # env.kwargs.episode_length's default: brax's trainers' for these tasks


def _split_kwargs(env_config) -> tuple[int, tuple]:
    """(episode_length, brax's get_environment kwargs as a sorted tuple) from env.kwargs."""
    kwargs = env_config.get("kwargs") or {}
    kwargs = dict(kwargs.to_dict() if hasattr(kwargs, "to_dict") else kwargs)
    length = kwargs.pop("episode_length", EPISODE_LENGTH)
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise ValueError(f"env.kwargs.episode_length={length!r} must be an int >= 1")
    return length, tuple(sorted(kwargs.items()))


@functools.cache
def _made(name: str, kwargs: tuple):
    try:
        # mujoco's MJX prints that it has no warp (an optional GPU backend) on import.
        with contextlib.redirect_stdout(io.StringIO()):
            from brax import envs
    except ImportError:
        raise ValueError(
            "env.backend='brax' needs the brax package: scripts/train.sh installs it"
        ) from None
    known = sorted(envs._envs)  # brax's registry (no public list)
    if name not in known:
        raise ValueError(f"env.name={name!r} is not a brax env; brax has {known}")
    try:
        return envs.get_environment(name, **dict(kwargs))
    except (TypeError, ValueError, KeyError) as e:
        raise ValueError(f"env.kwargs {dict(kwargs)} do not fit brax's {name}: {e}") from None


def _make(env_config):
    length, kwargs = _split_kwargs(env_config)
    try:
        hash(kwargs)
    except TypeError:
        raise ValueError(f"env.kwargs {dict(kwargs)}: brax's arguments here are numbers, "
                         "strings or tuples") from None  # fmt: skip
    return _made(env_config.name, kwargs), length


def check_env(env_config) -> None:
    env, _ = _make(env_config)
    if not isinstance(env.observation_size, int):
        raise ValueError(
            f"env.name={env_config.name!r} gives a dict observation "
            f"({env.observation_size}); the brax backend takes brax's flat ones"
        )


def make_env_spec(env_config) -> EnvSpec:
    import numpy as np

    env, _ = _make(env_config)
    dims = int(env.action_size)
    return EnvSpec(
        name=env_config.name,
        observation={"obs": ArraySpec(np.dtype(np.float32), (int(env.observation_size),))},
        num_actions=0,
        action_low=(-1.0,) * dims,
        action_high=(1.0,) * dims,
    )


def takes_render_mode(name: str) -> bool:
    del name
    return False


def device_env(env_config, spec: EnvSpec):
    """The env's pure reset and step (seedlike.envs.device.DeviceEnv): brax's state and the
    episode's step count."""
    import jax.numpy as jnp

    from seedlike.envs.device import DeviceEnv

    del spec
    env, limit = _make(env_config)

    def reset(key):
        state = env.reset(key)
        return (state, jnp.int32(0)), {"obs": jnp.asarray(state.obs, jnp.float32)}

    def step(env_state, action, key):
        del key  # brax's dynamics are deterministic; its resets take the keys
        state, t = env_state
        state = env.step(state, jnp.clip(action, -1.0, 1.0))
        t = t + 1
        terminated = jnp.asarray(state.done) > 0.5
        truncated = (t >= limit) & ~terminated
        obs = {"obs": jnp.asarray(state.obs, jnp.float32)}
        return (state, t), obs, jnp.asarray(state.reward, jnp.float32), terminated, truncated

    return DeviceEnv(reset, step)


def Adapter(env_config, spec: EnvSpec, seed: int):  # noqa: N802 - the backend contract's name
    """The envs stepped from the host (seedlike.envs.device.HostAdapter): evaluate.py."""
    from seedlike.envs.device import HostAdapter

    return HostAdapter(env_config, spec, seed, device_env(env_config, spec))
