"""gymnax (github RobertTLange/gymnax): classic control, MinAtar, bsuite and more as JAX functions,
stepped on the accelerator inside one compiled program (seedlike.ondevice): `env.backend =
"gymnax"`, `env.name` a gymnax id ("CartPole-v1", "Acrobot-v1", "Breakout-MinAtar",
"SpaceInvaders-MinAtar", ...). Discrete action spaces only; the observation is "obs".

An on-device backend (seedlike.envs.Backend.on_device): no actors step it, the learner's program
does, through `device_env` (seedlike.envs.device); `Adapter` steps the same functions from the
host for what plays outside that program (evaluate.py, play.py). gymnax's own auto-reset is not
used: `device.advance` resets the step after an episode ends, as envpool does, and an episode
that reaches the env's step limit is truncated rather than terminated.
"""

from __future__ import annotations

import functools

from seedlike.types import ArraySpec, EnvSpec


def _make(env_config):
    """gymnax's (env, params) for the config's env.name, with env.kwargs given to gymnax.make."""
    kwargs = env_config.get("kwargs") or {}
    kwargs = kwargs.to_dict() if hasattr(kwargs, "to_dict") else dict(kwargs)
    return _made(env_config.name, tuple(sorted(kwargs.items())))


@functools.cache
def _made(name: str, kwargs: tuple):
    try:
        import gymnax
    except ImportError:
        raise ValueError(
            "env.backend='gymnax' needs the gymnax package: scripts/train.sh installs it"
        ) from None
    if name not in gymnax.registered_envs:
        raise ValueError(
            f"env.name={name!r} is not a gymnax env; gymnax has {list(gymnax.registered_envs)}"
        )
    try:
        return gymnax.make(name, **dict(kwargs))
    except TypeError as e:
        raise ValueError(f"env.kwargs {dict(kwargs)} do not fit gymnax's {name}: {e}") from None


def check_env(env_config) -> None:
    env, params = _make(env_config)
    space = env.action_space(params)
    if not hasattr(space, "n"):
        raise ValueError(
            f"env.name={env_config.name!r} has continuous actions ({type(space).__name__}); "
            "the gymnax backend takes discrete ones"
        )


def make_env_spec(env_config) -> EnvSpec:
    import jax

    check_env(env_config)
    env, params = _make(env_config)
    obs, _ = jax.eval_shape(env.reset, jax.random.key(0), params)
    return EnvSpec(
        name=env_config.name,
        observation={"obs": ArraySpec(obs.dtype, obs.shape)},
        num_actions=int(env.action_space(params).n),
    )


def takes_render_mode(name: str) -> bool:
    del name
    return False


def _time_limited(name: str) -> bool:
    """Classic control and MinAtar: gymnax's step limit is Gymnasium's TimeLimit there."""
    return name.endswith("-MinAtar") or name.split("-")[0] in CLASSIC_CONTROL


CLASSIC_CONTROL = ("CartPole", "Acrobot", "MountainCar", "MountainCarContinuous", "Pendulum")


def device_env(env_config, spec: EnvSpec):
    """The env's pure reset and step (seedlike.envs.device.DeviceEnv), without gymnax's reset."""
    import jax.numpy as jnp

    from seedlike.envs.device import DeviceEnv

    env, params = _make(env_config)
    dtype = spec.observation["obs"].dtype
    # Where the step limit is a time limit put on a longer task, an episode that reaches it is
    # truncated (its last value bootstraps); elsewhere (bsuite's chains, the bandits) it is the
    # task's own end.
    limit = int(params.max_steps_in_episode) if _time_limited(env_config.name) else None

    def reset(key):
        obs, state = env.reset_env(key, params)
        return state, {"obs": jnp.asarray(obs, dtype)}

    def step(state, action, key):
        obs, state, reward, done, _ = env.step_env(key, state, action, params)
        # gymnax ends an episode at its step limit with done as well: that end is a truncation.
        truncated = done & (state.time >= limit) if limit is not None else jnp.zeros((), bool)
        return state, {"obs": jnp.asarray(obs, dtype)}, reward, done & ~truncated, truncated

    return DeviceEnv(reset, step)


def Adapter(env_config, spec: EnvSpec, seed: int):  # noqa: N802 - the backend contract's name
    """The envs stepped from the host (seedlike.envs.device.HostAdapter): evaluate.py, play.py."""
    from seedlike.envs.device import HostAdapter

    return HostAdapter(env_config, spec, seed, device_env(env_config, spec))
