"""Two-player games inside the compiled program: the learning policy's seat as a one-seat env
(seedlike.envs.device.DeviceEnv), the other seat played inside its step by the opponent the
league chose for the episode.

At every episode start the env draws its opponent from the table's probabilities (what the
host's league sampler gives, seedlike.ondevice.opponents): choice 0 is the learning policy
itself (the params of this update), 1..P the league's snapshots stacked on the device, then the
bots (`BOTS`, JAX functions of the mover's view). The envs are in lanes (`seat_env`), each
meeting one snapshot per update, so a reply costs two network applies, not a copy of the
params per env. The learner plays player 0, the reset picks the
first mover at random, and after each of the learner's moves the opponent moves until it is the
learner's turn again or the game is over: the learner's reward is what its move and the replies
gave player 0. Only the learner's moves are recorded and learned from, as on the SEED path; the
episode's label is its choice, so the program counts outcomes per opponent for the payoff.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from seedlike.envs.device import DeviceEnv, Lanes, Turn, TurnEnv, conform
from seedlike.types import LEGAL_ACTION_MASK

LEARNER_SEAT = 0


class Table(NamedTuple):
    """Who can play the other seat: `players` ({"params", "obs_norm"} stacked [1 + P, ...]: the
    learning policy's, then the pool's P slots) and `logits` [1 + P + bots], the log-probability
    of each choice at an episode start (-inf: never; `seat_env` draws them in two steps)."""

    players: Any
    logits: jax.Array


def random_move(turn: Turn, key: jax.Array) -> jax.Array:
    """A uniformly random legal move."""
    mask = turn.obs[LEGAL_ACTION_MASK]
    return jax.random.categorical(key, jnp.where(mask, 0.0, -jnp.inf)).astype(jnp.int32)


def _has_four(b: jax.Array) -> jax.Array:
    """Whether bool [6, 7] holds four in a row, a column or a diagonal."""
    lines = (
        b[:, 0:4] & b[:, 1:5] & b[:, 2:6] & b[:, 3:7],
        b[0:3] & b[1:4] & b[2:5] & b[3:6],
        b[0:3, 0:4] & b[1:4, 1:5] & b[2:5, 2:6] & b[3:6, 3:7],
        b[0:3, 3:7] & b[1:4, 2:6] & b[2:5, 1:5] & b[3:6, 0:4],
    )
    return jnp.any(jnp.stack([jnp.any(x) for x in lines]))


def connect_four_wins(stones: jax.Array, occupied: jax.Array, legal: jax.Array) -> jax.Array:
    """bool [7]: the legal columns where a stone (falling to the lowest free row, row 5 the
    bottom) gives `stones` (bool [6, 7]) four in a line."""
    landing = 5 - jnp.sum(occupied, axis=0)  # [7]; -1 where full (then not legal)
    rows = jnp.arange(6)[:, None]

    def after(c):
        return stones | ((rows == landing[c]) & (jnp.arange(7)[None] == c))

    return legal & jax.vmap(lambda c: _has_four(after(c)))(jnp.arange(7))


def scripted_connect_four(turn: Turn, key: jax.Array) -> jax.Array:
    """seedlike.league.connect_four's scripted agent: win if you can, block if you must, else a
    random legal column (ties at random)."""
    board, legal = turn.obs["obs"].astype(bool), turn.obs[LEGAL_ACTION_MASK]
    mine, theirs = board[..., 0], board[..., 1]
    win = connect_four_wins(mine, mine | theirs, legal)
    block = connect_four_wins(theirs, mine | theirs, legal)
    pick = jnp.where(win.any(), win, jnp.where(block.any(), block, legal))
    return jax.random.categorical(key, jnp.where(pick, 0.0, -jnp.inf)).astype(jnp.int32)


class DeviceBot(NamedTuple):
    """A bot the program plays: move(turn, key) -> int32 [], and the games it plays (() any)."""

    move: Callable[[Turn, jax.Array], jax.Array]
    envs: tuple[str, ...] = ()


# The league's bots (seedlike.league.players.BOTS), as JAX functions; the names match.
BOTS = {
    "random": DeviceBot(random_move),
    "scripted": DeviceBot(scripted_connect_four, ("connect_four",)),
}


def _policy_move(network, policy, turn: Turn, key) -> jax.Array:
    """The move a network policy ({"params", "obs_norm"}) samples for the mover of one env."""
    one = lambda x: jnp.asarray(x)[None]  # noqa: E731 - a batch of one
    obs = {k: one(v) for k, v in turn.obs.items() if k != LEGAL_ACTION_MASK}
    extras = {LEGAL_ACTION_MASK: one(turn.obs[LEGAL_ACTION_MASK])}
    action, _, _, _ = network.act(
        policy["params"], policy["obs_norm"], obs, extras, network.initial_carry(1),
        jnp.ones(1, bool), key,
    )  # fmt: skip
    return action[0]


def seat_env(
    env: TurnEnv, network, table: Table, lanes: int, key: jax.Array, period: jax.Array,
    bots: tuple[str, ...] = (),
) -> Lanes:  # fmt: skip
    """The learner's seat of `env` against the table's players and `bots` (names in BOTS).

    Its envs are in `lanes` lanes: each lane draws (with `key`, the same for the whole of
    `period`, the table's time between two snapshots) one snapshot from the table's snapshot
    probabilities, and an episode start draws the learner itself, its lane's snapshot or a bot,
    so each snapshot is met as often as the table says, while a reply runs two networks (the
    learner's, the lane's) rather than one per env. An episode's label is its choice in the
    table (0 the learner, 1 + slot, 1 + P + bot), and 1 + P + bots for a game against a lane's
    snapshot that began in an earlier period (its opponent changed with the period: the host
    leaves it out of the payoff)."""
    count = jax.tree.leaves(table.players)[0].shape[0]  # 1 + P
    moves = [BOTS[name].move for name in bots]
    logp = jax.nn.log_softmax(table.logits)
    snapshots = logp[1:count]
    # An episode's kind: the learner, its lane's snapshot, or a bot.
    kinds = jnp.concatenate([logp[:1], jax.nn.logsumexp(snapshots)[None], logp[count:]])
    drawn = jnp.where(jnp.isfinite(snapshots).any(), snapshots, 0.0)
    slots = 1 + jax.random.categorical(key, drawn, shape=(lanes,)).astype(jnp.int32)
    own = jax.tree.map(lambda x: x[0], table.players)
    at = jax.tree.map(lambda x: x[slots], table.players)  # [lanes, ...]: one copy per lane
    period = jnp.asarray(period, jnp.int32)
    mixed = count + len(bots)

    def make(data) -> DeviceEnv:
        lane, slot = data

        def opponent_move(turn: Turn, kind, key):
            own_key, lane_key, bot_key = jax.random.split(key, 3)
            action = jnp.where(
                kind == 1,
                _policy_move(network, lane, turn, lane_key),
                _policy_move(network, own, turn, own_key),
            )
            for i, move in enumerate(moves):
                action = jnp.where(kind == 2 + i, move(turn, bot_key), action)
            return action

        def reply(turn: Turn, kind, key):
            return _reply(env, lambda t, k: opponent_move(t, kind, k), turn, key)

        def begin(turn: Turn, key):
            """A new game's episode: (its opponent's kind, the period it began in)."""
            kind = jax.random.categorical(key, kinds).astype(jnp.int32)
            return turn, kind, period

        def reset(key):
            game_key, kind_key, reply_key = jax.random.split(key, 3)
            turn, kind, began = begin(env.reset(game_key), kind_key)
            turn, _, view = reply(turn, kind, reply_key)
            return (turn, kind, began), view

        def step(state, action, key):
            """The learner's move and the replies, or where the game is over a new one (and
            its opponent): one reply loop either way, as resetting beside each step would
            run the replies' networks twice."""
            turn, kind, began = state
            game_key, kind_key, step_key, reply_key = jax.random.split(key, 4)
            over = turn.terminated | turn.truncated
            moved = conform(turn, env.step(turn, action, step_key))
            fresh = begin(conform(turn, env.reset(game_key)), kind_key)
            turn, kind, began = jax.tree.map(
                lambda a, b: jnp.where(over, a, b), fresh, (moved, kind, began)
            )
            reward = jnp.where(over, 0.0, turn.rewards[LEARNER_SEAT])
            turn, replied, view = reply(turn, kind, reply_key)
            truncated = turn.truncated & ~turn.terminated
            return (turn, kind, began), view, reward + replied, turn.terminated, truncated

        def label(state):
            _, kind, began = state
            snapshot = jnp.where(began == period, slot, mixed)
            return jnp.where(kind == 0, 0, jnp.where(kind == 1, snapshot, count + kind - 2))

        return DeviceEnv(reset, step, label=label, resets=True)

    return Lanes(make, (at, slots), mixed + 1)


def _reply(env: TurnEnv, opponent_move, turn: Turn, key):
    """The opponent's moves (opponent_move(turn, key)) until the learner's turn or the end: the
    turn then, what the moves gave player 0, and the learner's view (its own, also where a
    truncated game bootstraps)."""

    def waiting(carry):
        t = carry[0]
        return ~(t.terminated | t.truncated) & (t.mover != LEARNER_SEAT)

    def move(carry):
        t, reward, key = carry
        key, move_key, step_key = jax.random.split(key, 3)
        t = conform(t, env.step(t, opponent_move(t, move_key), step_key))
        return t, reward + t.rewards[LEARNER_SEAT], key

    turn, reward, _ = jax.lax.while_loop(waiting, move, (turn, jnp.float32(0), key))
    view = env.observe(turn, jnp.int32(LEARNER_SEAT))
    return turn, reward, {**view, LEGAL_ACTION_MASK: turn.obs[LEGAL_ACTION_MASK]}
