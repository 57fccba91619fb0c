"""Data types shared by actors, server and learner, with their array layouts written down."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import numpy as np

# A stack of frames: uint8 [S, H, W] with 2 <= S <= 16 and H, W >= 32 (Atari's [4, 84, 84]), not an
# image's [H, W, C] or a board's planes. Actors send such keys' newest frame only
# (seedlike/rpc/frames.py) and the replay stores each frame once (seedlike.learning.replay).
MAX_STACK, MIN_FRAME = 16, 32


def frame_stack(dtype, shape) -> bool:
    """Whether an observation of this dtype and shape is a stack of frames, oldest first."""
    return (
        np.dtype(dtype) == np.uint8
        and len(shape) == 3
        and 2 <= shape[0] <= MAX_STACK
        and min(shape[1:]) >= MIN_FRAME
    )


# The extras key of a row's legal actions, bool [logits_size]: a two-player game's legal moves, or
# one mask per argument of a factorized action, side by side (EnvSpec.action_heads).
LEGAL_ACTION_MASK = "legal_action_mask"
# Observation keys of a row's teammates (env.teammates, seedlike/envs/teammates.py): TEAMMATES + key
# holds the other agents' `key` [K-1, ...] and TEAMMATES_PRESENT bool [K-1] which of them are there.
TEAMMATES = "teammates/"
TEAMMATES_PRESENT = TEAMMATES + "present"
# The extras key of a row's curriculum level (env.levels, seedlike/envs/levels.py), int32 [].
LEVEL = "level"
# Word ids of a mission given as text (env.mission_tokens, seedlike/envs/text.py): 0 pads, 1 is a
# word outside the vocabulary, 2.. are these words, every word of envpool's BabyAI missions.
MISSION_WORDS = (
    ",", "a", "after", "and", "ball", "behind", "blue", "box", "door", "front", "go", "green",
    "grey", "in", "key", "left", "next", "object", "of", "on", "open", "pick", "purple", "put",
    "red", "right", "the", "then", "to", "up", "yellow", "you", "your",
)  # fmt: skip
MISSION_VOCAB_SIZE = len(MISSION_WORDS) + 2


@dataclasses.dataclass(frozen=True)
class ArraySpec:
    """Dtype and per-row shape of one named array (no batch dimension).

    `high` > 0: the values are ids in [0, high), e.g. word ids that index an embedding table,
    where an id out of range reads NaN. The server's codec checks it on every step; it is not
    part of what actor and server compare (both derive it from the config), so it is not sent.
    """

    dtype: np.dtype
    shape: tuple[int, ...]
    high: int = dataclasses.field(default=0, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    def __str__(self) -> str:
        return f"{self.dtype.name}{list(self.shape)}"


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What a policy needs to know about an environment, identical on actors and server.

    Attributes:
      name: envpool task id.
      observation: observation key -> per-row spec. Array observations use the key "obs".
      num_actions: size of the discrete action space.
      num_players: rows per env per step (1 for single-player games).
      extras: per-row side information: inputs to the policy ("legal_action_mask"
        bool[logits_size]) or bookkeeping for the server ("level" int32[], the curriculum level).
      action_heads: a factorized action (gymnasium MultiDiscrete): the sizes (n_1, ..., n_H) of its
        H arguments, e.g. Neural MMO's (move direction, attack style, attack target). () is one
        categorical. An action still travels and is stored as one int32, its arguments' digits in
        mixed radix: a = ((d_1 * n_2 + d_2) * n_3 + d_3) ..., so num_actions = n_1 * ... * n_H
        (np.ravel_multi_index order). The policy's logits are the heads' logits side by side,
        [logits_size] = [n_1 + ... + n_H], and so is the legal-action mask (one mask per argument).
      action_low, action_high: the bounds of a continuous (gymnasium Box, flattened) action of
        D = len(action_low) dimensions; () for none. With continuous dimensions an action
        travels and is stored as float32 [K] (`action_spec`): the discrete arguments' digits as
        floats (exact below 2**24), then the D continuous values as the policy sampled them
        (before clipping or squashing, which the actor applies). num_actions = 0: no discrete
        part.
    """

    name: str
    observation: dict[str, ArraySpec]
    num_actions: int
    num_players: int = 1
    extras: dict[str, ArraySpec] = dataclasses.field(default_factory=dict)
    action_heads: tuple[int, ...] = ()
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()

    def __post_init__(self):
        heads = tuple(int(n) for n in self.action_heads)
        object.__setattr__(self, "action_heads", heads)
        if heads and (min(heads) < 1 or int(np.prod(heads, dtype=np.int64)) != self.num_actions):
            raise ValueError(
                f"{self.name}: action heads {heads} need num_actions = their product, "
                f"not {self.num_actions}"
            )
        low = tuple(float(x) for x in self.action_low)
        high = tuple(float(x) for x in self.action_high)
        object.__setattr__(self, "action_low", low)
        object.__setattr__(self, "action_high", high)
        if len(low) != len(high) or any(not lo <= hi for lo, hi in zip(low, high)):
            raise ValueError(
                f"{self.name}: continuous action bounds need low <= high, one pair per "
                f"dimension, not low {low}, high {high}"
            )
        if not low and self.num_actions < 1:
            raise ValueError(f"{self.name}: an action needs num_actions >= 1 or a continuous part")
        if low and max(self.head_sizes, default=0) >= 2**24:
            raise ValueError(
                f"{self.name}: a discrete argument of {max(self.head_sizes)} choices beside "
                "continuous ones does not fit the float32 it travels as; split it"
            )
        if self.num_actions >= 2**31:
            raise ValueError(
                f"{self.name}: {self.num_actions} actions do not fit the int32 an action travels "
                "as; drop or merge action arguments in the env's wrapper"
            )

    @property
    def head_sizes(self) -> tuple[int, ...]:
        """The sizes of the discrete arguments: action_heads, or (num_actions,) for one head, ()
        for a purely continuous action."""
        return self.action_heads or ((self.num_actions,) if self.num_actions else ())

    @property
    def continuous(self) -> int:
        """D, the continuous action dimensions (0: a discrete action)."""
        return len(self.action_low)

    @functools.cached_property
    def action_spec(self) -> ArraySpec:
        """How one row's action travels and is stored: int32 [] for a discrete action, float32
        [H + D] with continuous dimensions (H discrete arguments' digits, then D values)."""
        if not self.continuous:
            return ArraySpec(np.int32, ())
        return ArraySpec(np.float32, (len(self.head_sizes) + self.continuous,))

    @property
    def logits_size(self) -> int:
        """Width of the policy's logits and of the legal-action mask."""
        return sum(self.head_sizes)


class Rows(NamedTuple):
    """One batch of n rows from an actor: each row is one (env, player) seat of that actor.

    A row's observation is the state after the seat's previous action; reward, terminated and
    truncated are the outcome of that action. The env executes the row's next action only if
    `acting` (in a turn-based game only the player to move acts; the other rows report rewards
    and episode ends).

    Layout:
      obs:        dict key -> [n, *spec.shape]
      extras:     dict key -> [n, *spec.shape], e.g. LEGAL_ACTION_MASK bool [n, logits_size]
      reward:     float32 [n]
      terminated: bool    [n]
      truncated:  bool    [n]
      env_id:     int32   [n]  in [0, num_envs) of the sending actor
      player_id:  int32   [n]  in [0, spec.num_players)
      acting:     bool    [n]  the env executes this row's action
      game_over:  bool    [n]  the whole game ended (Atari: the last life), for statistics
    """

    obs: dict[str, np.ndarray]
    extras: dict[str, np.ndarray]
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    env_id: np.ndarray
    player_id: np.ndarray
    acting: np.ndarray
    game_over: np.ndarray


def take_rows(rows: Rows, idx: np.ndarray) -> Rows:
    """The rows at `idx` (int [k] or bool [n]) of a batch."""
    return Rows(
        {k: v[idx] for k, v in rows.obs.items()},
        {k: v[idx] for k, v in rows.extras.items()},
        *(getattr(rows, f)[idx] for f in Rows._fields[2:]),
    )


class Unroll(NamedTuple):
    """T+1 consecutive steps of one seat, recorded by the server's trajectory store.

    Step t holds the observation the policy saw and what it did; reward/terminated/truncated at t
    are the outcome of action t (they arrive with observation t+1). The last step (index T) is only
    there for its value (bootstrap) and is the first step of the seat's next unroll.

    A step whose observation was terminal (the env auto-resets and ignores the action) has
    valid=False: it contributes no loss, but its value bootstraps a truncated episode.

    Layout, with a leading batch dimension [B] when unrolls are stacked:
      obs:            dict key -> [T+1, *spec.shape]
      extras:         dict key -> [T+1, *spec.shape]
      action:         int32   [T+1]  (float32 [T+1, K] with continuous dimensions: action_spec)
      behaviour_logp: float32 [T+1]  log pi_behaviour(action | obs)
      behaviour_value:float32 [T+1]
      valid:          bool    [T+1]  the action was executed by the env
      first:          bool    [T+1]  first step of an episode (a recurrent core resets before it)
      policy_version: int32   [T+1]  version of the params that chose the action
      reward:         float32 [T]
      terminated:     bool    [T]
      truncated:      bool    [T]
      carry:          recurrent state before step 0, before its reset (() if feed-forward)
    """

    obs: dict[str, np.ndarray]
    extras: dict[str, np.ndarray]
    action: np.ndarray
    behaviour_logp: np.ndarray
    behaviour_value: np.ndarray
    valid: np.ndarray
    first: np.ndarray
    policy_version: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    carry: Any = ()


def concat_rows(parts: list[Rows]) -> Rows:
    """Several batches' rows, one after another."""
    return Rows(
        {k: np.concatenate([p.obs[k] for p in parts]) for k in parts[0].obs},
        {k: np.concatenate([p.extras[k] for p in parts]) for k in parts[0].extras},
        *(np.concatenate([getattr(p, f) for p in parts]) for f in Rows._fields[2:]),
    )


def stack_unrolls(unrolls: list[Unroll]) -> Unroll:
    """Stacks unrolls along a new leading batch axis."""
    import jax

    return jax.tree.map(lambda *xs: np.stack(xs), *unrolls)
