"""Envs written as JAX functions, stepped inside the compiled program of seedlike.ondevice
(Podracer's Anakin) instead of by actors: what an on-device backend's `device_env` returns, and
the auto-reset every runtime step goes through.

An on-device backend's module defines, beside check_env and make_env_spec (seedlike.envs):

    device_env(env_config, spec) -> DeviceEnv   pure functions of one env (the runtime vmaps
                                                them over its envs); a two-player turn-based
                                                game's is a TurnEnv, which the runtime plays
                                                as a DeviceEnv of the learner's seat, the other
                                                seat's moves inside its step
                                                (seedlike.ondevice.selfplay)

`advance` resets an env the step after its episode ends, as envpool does: the terminal
observation is seen (its value bootstraps a truncated episode) and the action chosen for it is
ignored (valid=False in the Unroll, seedlike.types). So an on-device run's unrolls mean what a
SEED run's do, and the algorithms read them through the same code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from seedlike.types import LEGAL_ACTION_MASK, Rows


class DeviceEnv(NamedTuple):
    """One env as pure functions (no auto-reset: `advance` does it).

    reset(key) -> (env_state, obs: dict key -> [*spec.shape])
    step(env_state, action, key) -> (env_state, obs, reward float32 [], terminated bool [],
        truncated bool [])  (action: int32 [], or float32 [K] where the spec is continuous)

    An observation dict holds the spec's observation keys and, where the spec has it, its
    legal_action_mask (the policy's input; seedlike.ondevice.rollout splits them). `label(state)`
    int32 [] in [0, labels): what the episode is played against (an on-device league's
    opponent), reported with each episode's outcome; None: one kind of episode. `resets`: the
    env's step begins a new episode itself where the last one ended (its state knows: the
    action is ignored, reward 0), so `advance` need not reset it beside every step.
    """

    reset: Callable[[jax.Array], tuple[Any, dict]]
    step: Callable[..., tuple[Any, dict, jax.Array, jax.Array, jax.Array]]
    label: Callable[[Any], jax.Array] | None = None
    labels: int = 0
    resets: bool = False


class Turn(NamedTuple):
    """A turn-based game between moves: its state, the view of the player to move (observation
    keys and legal_action_mask), who that is (int32 []), what the last move gave each player
    (float32 [players]), and whether the game has ended."""

    state: Any
    obs: dict
    mover: jax.Array
    rewards: jax.Array
    terminated: jax.Array
    truncated: jax.Array


class TurnEnv(NamedTuple):
    """One two-player turn-based game as pure functions (pgx's shape). The first mover is the
    reset's to choose (at random, so a seat plays both colours).

    reset(key) -> Turn;  step(turn, action int32 [], key) -> Turn (the mover's move);
    observe(turn, player int32 []) -> that player's view (the observation keys alone)
    """

    reset: Callable[[jax.Array], Turn]
    step: Callable[[Turn, jax.Array, jax.Array], Turn]
    observe: Callable[[Turn, jax.Array], dict]


class Lanes(NamedTuple):
    """Envs in G lanes of equal size, each lane's DeviceEnv made from its row of `data` (stacked
    [G, ...]): what a lane's envs share (an on-device league's opponent for the call,
    seedlike.ondevice.selfplay) is mapped over the lanes, not gathered per env. Env i of a batch
    is in lane i // (batch / G). `labels`: as DeviceEnv's, over every lane."""

    make: Callable[[Any], DeviceEnv]
    data: Any
    labels: int


def start_all(env: DeviceEnv | Lanes, keys: jax.Array) -> Slot:
    """A batch of slots [B] (`start` of each env)."""
    return _over_lanes(env, lambda e, k: start(e, k), keys)


def advance_all(env: DeviceEnv | Lanes, slots: Slot, actions, keys) -> tuple[Slot, Outcome]:
    """`advance` of each env of a batch [B]."""
    return _over_lanes(env, lambda e, s, a, k: advance(e, s, a, k), slots, actions, keys)


def _over_lanes(env, fn, *batch):
    if isinstance(env, DeviceEnv):
        return jax.vmap(lambda *xs: fn(env, *xs))(*batch)
    lanes = jax.tree.leaves(env.data)[0].shape[0]
    split = lambda x: x.reshape((lanes, x.shape[0] // lanes) + x.shape[1:])  # noqa: E731
    inner = lambda data, *xs: jax.vmap(lambda *ys: fn(env.make(data), *ys))(*xs)  # noqa: E731
    out = jax.vmap(inner)(env.data, *jax.tree.map(split, batch))
    return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), out)


class Slot(NamedTuple):
    """One env between steps: its state, the observation the policy sees next, whether that
    observation starts an episode (`first`) or ends one (`done`: the next step resets), and the
    episode's return and length so far."""

    env_state: Any
    obs: dict
    first: jax.Array
    done: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array


class Outcome(NamedTuple):
    """What one step of a slot gave: reward, terminated, truncated (of the action taken), and
    where an episode ended with it, its return, length and label (ended False: zeros)."""

    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    ended: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array
    label: jax.Array


def start(env: DeviceEnv, key: jax.Array) -> Slot:
    """A slot at the first observation of an episode."""
    state, obs = _strong(env.reset(key))
    zero = jnp.zeros((), jnp.float32)
    return Slot(state, obs, jnp.ones((), bool), jnp.zeros((), bool), zero, jnp.zeros((), jnp.int32))


def advance(env: DeviceEnv, slot: Slot, action: jax.Array, key: jax.Array) -> tuple[Slot, Outcome]:
    """The slot after one step: the env's step, or its reset where the last step ended the
    episode (the action ignored, reward 0)."""
    reset_key, step_key = jax.random.split(key)
    state, obs, reward, terminated, truncated = env.step(slot.env_state, action, step_key)
    state, obs = conform((slot.env_state, slot.obs), (state, obs))
    if env.resets:  # the step began the next episode itself
        zero = jnp.zeros((), jnp.float32)
        fresh = Slot(state, obs, jnp.ones((), bool), jnp.zeros((), bool), zero, jnp.int32(0))
    else:
        fresh = start(env, reset_key)
    reward = jnp.asarray(reward, jnp.float32)
    terminated, truncated = jnp.asarray(terminated, bool), jnp.asarray(truncated, bool)
    ret = slot.episode_return + reward
    length = slot.episode_length + 1
    done = terminated | truncated
    stepped = Slot(state, obs, jnp.zeros((), bool), done, ret, length)
    label = env.label(state) if env.label is not None else jnp.zeros((), jnp.int32)
    outcome = Outcome(
        reward, terminated, truncated, done, jnp.where(done, ret, 0.0), jnp.where(done, length, 0),
        jnp.where(done, label, 0),
    )  # fmt: skip
    nothing = Outcome(*(jnp.zeros_like(x) for x in outcome))
    pick = lambda a, b: jax.tree.map(lambda x, y: jnp.where(slot.done, x, y), a, b)  # noqa: E731
    return pick(fresh, stepped), pick(nothing, outcome)


class _FromHost:
    """What the host adapters of on-device envs share: `env.num_envs` envs, a key split for
    each batched call, no frames."""

    def __init__(self, env_config, seed: int):
        self.n = int(env_config.num_envs)
        self._key = jax.random.key(int(seed))

    def _keys(self):
        self._key, key = jax.random.split(self._key)
        return jax.random.split(key, self.n)

    def render(self) -> np.ndarray:
        # The backend's takes_render_mode is False, so watch.py says so before it would call this.
        raise ValueError("an on-device env gives no frames; score it with evaluate.py instead")

    def close(self) -> None:
        pass


class HostAdapter(_FromHost):
    """An on-device env stepped from the host through the adapter contract (seedlike.envs), for
    what plays outside the learner's program: evaluate.py, play.py, a league's evaluation games.
    `env.num_envs` envs, advanced by the same `advance`, jitted over the batch."""

    def __init__(self, env_config, spec, seed: int, env: DeviceEnv):
        del spec
        super().__init__(env_config, seed)
        self._start = jax.jit(jax.vmap(lambda k: start(env, k)))
        self._advance = jax.jit(jax.vmap(lambda s, a, k: advance(env, s, a, k)))

    def reset(self) -> None:
        self._slots = self._start(self._keys())
        self._outcome = None

    def recv(self) -> Rows:
        slots = jax.device_get(self._slots)
        zeros = np.zeros(self.n, bool)
        if self._outcome is None:
            reward, terminated, truncated = np.zeros(self.n, np.float32), zeros, zeros
        else:
            out = jax.device_get(self._outcome)
            reward, terminated, truncated = out.reward, out.terminated, out.truncated
        ended = np.asarray(terminated) | np.asarray(truncated)
        return Rows(
            {k: np.asarray(v) for k, v in slots.obs.items()}, {}, np.asarray(reward, np.float32),
            np.asarray(terminated), np.asarray(truncated), np.arange(self.n, dtype=np.int32),
            np.zeros(self.n, np.int32), ~np.asarray(slots.done), ended,
        )  # fmt: skip

    def send(self, action: np.ndarray, rows: Rows) -> None:
        action = np.asarray(action)  # int32 [rows], or float32 [rows, K] (continuous)
        acted = np.zeros((self.n, *action.shape[1:]), action.dtype)
        acted[rows.env_id] = action
        self._slots, self._outcome = self._advance(self._slots, acted, self._keys())


class TurnAdapter(_FromHost):
    """A two-player on-device game stepped from the host through the adapter contract, two rows
    per env (one per player) as envpool's board games give them: each player's own view, the
    legal-action mask on the mover's row (all False on the other), `acting` for the mover alone.
    The step after a game ends resets it (its actions ignored). For evaluate.py, play.py and the
    league's evaluation games."""

    def __init__(self, env_config, spec, seed: int, env: TurnEnv):
        del spec
        super().__init__(env_config, seed)
        players = jnp.arange(2, dtype=jnp.int32)

        def view(turn: Turn):  # [2, ...] per env: both players' observations and masks
            obs = jax.vmap(lambda p: env.observe(turn, p))(players)
            mask = turn.obs[LEGAL_ACTION_MASK][None] & (players == turn.mover)[:, None]
            return obs, mask

        def advance(turn: Turn, action, key):
            reset_key, step_key = jax.random.split(key)
            fresh, stepped = env.reset(reset_key), env.step(turn, action, step_key)
            stepped = conform(fresh, stepped)
            ended = turn.terminated | turn.truncated
            return jax.tree.map(lambda a, b: jnp.where(ended, a, b), fresh, stepped)

        self._reset = jax.jit(jax.vmap(env.reset))
        self._advance = jax.jit(jax.vmap(advance))
        self._view = jax.jit(jax.vmap(view))

    def reset(self) -> None:
        self._turn = self._reset(self._keys())

    def recv(self) -> Rows:
        obs, mask = jax.device_get(self._view(self._turn))
        turn = jax.device_get(self._turn._replace(state=None, obs=None))
        done = np.asarray(turn.terminated) | np.asarray(turn.truncated)
        mover = np.asarray(turn.mover)
        both = lambda x: np.repeat(np.asarray(x), 2)  # noqa: E731 - [n] -> [2n], env-major
        player = np.tile(np.arange(2, dtype=np.int32), self.n)
        return Rows(
            {k: np.asarray(v).reshape((2 * self.n,) + v.shape[2:]) for k, v in obs.items()},
            {LEGAL_ACTION_MASK: np.asarray(mask).reshape(2 * self.n, -1)},
            np.asarray(turn.rewards, np.float32).reshape(-1), both(turn.terminated),
            both(turn.truncated), both(np.arange(self.n, dtype=np.int32)), player,
            (player == both(mover)) & ~both(done), both(done),
        )  # fmt: skip

    def send(self, action: np.ndarray, rows: Rows) -> None:
        acted = np.zeros(self.n, np.int32)
        acted[rows.env_id[rows.acting]] = np.asarray(action)[rows.acting]
        self._turn = self._advance(self._turn, acted, self._keys())


def conform(like, tree):
    """`tree` with the dtypes of `like`'s leaves: an env's step may give a field another type (a
    weak float32 for an int), and a loop carries one type."""
    return jax.tree.map(lambda a, b: jnp.asarray(b, jnp.asarray(a).dtype), like, tree)


def _strong(tree):
    """Every leaf as a strongly typed array of its dtype (gymnax returns Python scalars and weakly
    typed values, which a loop's carry would change the type of)."""
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.asarray(x).dtype), tree)
