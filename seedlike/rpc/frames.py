"""Stacked frames sent once: the actor sends a stacked observation's newest frame for the rows
whose stack continues, and the server's stream rebuilds the whole stack.

A stacked observation (envpool Atari's `obs`: uint8 [4, 84, 84], the last four frames, oldest
first) repeats three of its four frames from its seat's previous row. Sent whole, an Atari row is
28 KB on the wire; sent as its newest frame, 7 KB: a quarter of the bytes, and correspondingly
less time on the wire (RESULTS.md, "Stacked frames sent once").

Which keys: the Hello's `stacked_observation` lists them (the actor's choice, `actor.stack_once`);
each must be an observation key of at least two dimensions whose first is the stack (>= 2).

Layout of a StepBatch whose stream announced stacked keys (n rows, k of them continued):
  continued:           bool [n]  the row's stack is its seat's previous stack on this stream,
                                 shifted by one frame, with one new frame last
  observation[key]:    [n - k, *shape]      whole stacks of the rows that are not continued
  newest[key]:         [k, *shape[1:]]      the newest frame of each continued row
  (both in row order; one mask for every stacked key: a row continues only if all of them do;
  keys not listed travel whole, [n, *shape], as without stacking)

The actor decides by comparing bytes (`Deltas`), not by episode flags: a row continues if its
seat sent a row earlier on this stream and `obs[1:]` equals that row's `obs[:-1]`. So the rebuild
is exact whatever the env does at an episode's start (envpool fills a new stack; with
`episodic_life` a lost life ends a learning episode but not the stack), and a row that happens
to match is still rebuilt bit for bit. The server (`Stacks`) keeps the last stack of each seat,
[num_envs * num_players, *shape] per key: at most one full step of the stream, which the
receive limit already allows. A continued row from a seat without a stack is a protocol error.
"""

from __future__ import annotations

import math

import numpy as np

from seedlike.types import ArraySpec, EnvSpec, Rows, frame_stack

# The unit the actor compares frames in where a frame's bytes divide into it.
WORD = np.dtype(np.uint64)


def stackable(spec: ArraySpec) -> bool:
    """Whether a key can be sent as newest frames: a stack dimension first, of two or more."""
    return len(spec.shape) >= 2 and spec.shape[0] >= 2


def auto_keys(spec: EnvSpec) -> tuple[str, ...]:
    """`actor.stack_once = "auto"`: the keys shaped like a stack of frames (types.frame_stack)."""
    return tuple(key for key, s in spec.observation.items() if frame_stack(s.dtype, s.shape))


def keys_from_config(setting: str, spec: EnvSpec) -> tuple[str, ...]:
    """`actor.stack_once`: "auto", "" (off) or comma-separated observation keys."""
    setting = str(setting).strip()
    if setting == "auto":
        return auto_keys(spec)
    keys = tuple(k.strip() for k in setting.split(",") if k.strip())
    for key in keys:
        if key not in spec.observation:
            raise ValueError(
                f"actor.stack_once names {key!r}, not an observation key of {spec.name} "
                f"({sorted(spec.observation)}); use 'auto', '' or some of those"
            )
        if not stackable(spec.observation[key]):
            raise ValueError(
                f"actor.stack_once names {key!r} of shape {list(spec.observation[key].shape)}: "
                "a stacked key needs a stack dimension first, of at least 2"
            )
    return keys


class Deltas:
    """The actor's side, one per stream: which rows continue, and the message's arrays.

    Per seat it keeps the frames after the first of the last stack it sent (`_tails`), which the
    next stack's frames before the last must equal, byte for byte. Rows are compared as 8-byte words
    where a frame's bytes allow it (Atari's 7,056 do): the same test, an eighth of the elements."""

    def __init__(self, spec: EnvSpec, keys: tuple[str, ...], num_envs: int):
        self.keys = keys
        self.num_players = spec.num_players
        seats = num_envs * spec.num_players
        self._frame_words = {}
        self._tails = {}
        for key in keys:
            s = spec.observation[key]
            frame_bytes = math.prod(s.shape[1:]) * s.dtype.itemsize
            word = WORD if frame_bytes % WORD.itemsize == 0 else np.dtype(np.uint8)
            words = frame_bytes // word.itemsize
            self._frame_words[key] = words
            self._tails[key] = np.zeros((seats, (s.shape[0] - 1) * words), word)
        self._seen = np.zeros(seats, bool)

    def split(self, rows: Rows) -> tuple[np.ndarray, dict, dict]:
        """(continued bool [n], observation for the wire, newest frames), remembering the rows."""
        seats = rows.env_id.astype(np.int64) * self.num_players + rows.player_id
        at = _run(seats)
        continued = self._seen[at].copy()
        observation, newest = dict(rows.obs), {}
        for key in self.keys:
            tails = self._tails[key]
            obs = np.ascontiguousarray(rows.obs[key])
            words = obs.reshape(obs.shape[0], math.prod(obs.shape[1:])).view(tails.dtype)
            width = tails.shape[1]  # the frames before the last
            if continued.all():
                continued = (words[:, :width] == tails[at]).all(axis=1)
            elif continued.any():
                idx = np.flatnonzero(continued)
                continued[idx] = (words[idx, :width] == tails[seats[idx]]).all(axis=1)
            tails[at] = words[:, self._frame_words[key] :]
        for key in self.keys:
            obs = rows.obs[key]
            newest[key] = obs[continued, -1]
            observation[key] = obs[~continued]
        self._seen[at] = True
        return continued, observation, newest


def _run(seats: np.ndarray) -> slice | np.ndarray:
    """A slice where the seats are one ascending run (an envpool actor's usual batch: views, not
    copies, of the per-seat arrays), else the seats themselves."""
    if seats.size and seats[-1] - seats[0] == seats.size - 1 and (np.diff(seats) == 1).all():
        return slice(int(seats[0]), int(seats[-1]) + 1)
    return seats


class Stacks:
    """The server's side, one per stream: whole stacks from the wire's parts.

    Each seat's last stack is kept as a ring of its frames (`heads`: where its newest lies), so
    that a continued row writes one frame, and a step's whole stacks are one gather."""

    def __init__(self, spec: EnvSpec, keys: tuple[str, ...], num_envs: int):
        self.specs = {k: spec.observation[k] for k in keys}
        self.frame_specs = {k: ArraySpec(s.dtype, s.shape[1:]) for k, s in self.specs.items()}
        seats = num_envs * spec.num_players
        self._rings = {k: np.zeros((seats, *s.shape), s.dtype) for k, s in self.specs.items()}
        self._heads = {k: np.zeros(seats, np.int64) for k in keys}
        self._seen = np.zeros(seats, bool)

    def rebuild(self, seats: np.ndarray, continued: np.ndarray, parts: dict) -> dict:
        """{key: whole stacks [n, *shape]} from the rows' seats (env_id x num_players +
        player_id, distinct) and {key: (observation, newest)} of checked shapes. ValueError if a
        continued row's seat has no stack yet."""
        on, fresh = seats[continued], seats[~continued]
        if not self._seen[on].all():
            raise ValueError(
                "a continued row of a seat that has sent no whole stack on this stream"
            )
        out = {}
        for key, (sent, newest) in parts.items():
            ring, head, depth = self._rings[key], self._heads[key], self.specs[key].shape[0]
            head[on] = (head[on] + 1) % depth
            head[fresh] = depth - 1
            ring[on, head[on]] = newest
            ring[fresh] = sent
            # Frame j of a row (oldest first) lies at (head + 1 + j) % depth of its seat's ring.
            out[key] = ring[seats[:, None], (head[seats, None] + 1 + np.arange(depth)) % depth]
        self._seen[seats] = True
        return out
