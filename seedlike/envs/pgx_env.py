"""pgx (github sotetsuk/pgx): board games as JAX functions, stepped on the accelerator inside one
compiled program (seedlike.ondevice): `env.backend = "pgx"`, `env.name` a pgx id
("tic_tac_toe", "connect_four": tested; "othello", "go_9x9", "hex", ...: untried). Two-player
games only.

Every (env, player) is a seat, as with envpool's board games: the observation "obs" is a
player's own view (pgx's `observe`), the legal-action mask travels with it, and the first mover
is chosen at random each game. pgx's connect_four gives the planes of envpool's ConnectFour-v1
(bool [6, 7, 2], the player's own stones first, row 0 at the top), so the scripted agent and
search play it too (tests/ondevice/test_selfplay.py pins that down).

On the device (`device_env`, a seedlike.envs.device.TurnEnv) the learning policy plays player 0
and the league's opponent player 1, inside the program (seedlike.ondevice.selfplay). `Adapter`
steps the same games from the host, two rows per env as envpool's board games give them, for
evaluate.py, play.py and the league's evaluation games.
"""

from __future__ import annotations

import functools
import warnings

from seedlike.types import LEGAL_ACTION_MASK, ArraySpec, EnvSpec


@functools.cache
def _made(name: str):
    try:
        import pgx
    except ImportError:
        raise ValueError(
            "env.backend='pgx' needs the pgx package: scripts/train.sh installs it"
        ) from None
    if name not in pgx.available_envs():
        raise ValueError(
            f"env.name={name!r} is not a pgx game; pgx has {list(pgx.available_envs())}"
        )
    env = pgx.make(name)
    if env.num_players != 2:
        raise ValueError(
            f"env.name={name!r} is a pgx game of {env.num_players} player(s); the pgx backend "
            "plays two-player games (gymnax has MinAtar for one)"
        )
    return env


def check_env(env_config) -> None:
    if env_config.get("kwargs"):
        raise ValueError(
            f"env.kwargs={dict(env_config.kwargs)}: pgx games take none; leave it {{}}"
        )
    _made(env_config.name)


def make_env_spec(env_config) -> EnvSpec:
    import jax
    import numpy as np

    env = _made(env_config.name)
    state = jax.eval_shape(env.init, jax.random.key(0))
    return EnvSpec(
        name=env_config.name,
        observation={"obs": ArraySpec(np.dtype(state.observation.dtype), state.observation.shape)},
        num_actions=int(env.num_actions),
        num_players=2,
        extras={LEGAL_ACTION_MASK: ArraySpec(np.dtype(bool), (int(env.num_actions),))},
    )


def takes_render_mode(name: str) -> bool:
    del name
    return False


def device_env(env_config, spec: EnvSpec):
    """The game's pure functions (seedlike.envs.device.TurnEnv)."""
    import jax.numpy as jnp

    from seedlike.envs.device import Turn, TurnEnv

    del spec
    env = _made(env_config.name)

    def turn(state) -> Turn:
        obs = {"obs": state.observation, LEGAL_ACTION_MASK: state.legal_action_mask}
        return Turn(
            state, obs, state.current_player.astype(jnp.int32),
            state.rewards.astype(jnp.float32), state.terminated, state.truncated,
        )  # fmt: skip

    def reset(key):
        return turn(env.init(key))

    def step(t: Turn, action, key):
        return turn(env.step(t.state, action, key))

    def observe(t: Turn, player):
        # pgx 2.6 warns that observe's player_id will go; the pin keeps it (setup.py), and the
        # non-mover's view is what the host's rows need.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return {"obs": env.observe(t.state, player)}

    return TurnEnv(reset, step, observe)


def Adapter(env_config, spec: EnvSpec, seed: int):  # noqa: N802 - the backend contract's name
    """The games stepped from the host (seedlike.envs.device.TurnAdapter)."""
    from seedlike.envs.device import TurnAdapter

    return TurnAdapter(env_config, spec, seed, device_env(env_config, spec))
