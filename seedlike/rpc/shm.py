"""What stream front ends and the learner process share: each session's rows in shared memory,
and the small messages that say which rows are ready and which actions are.

A front end (seedlike.rpc.frontend, a process of its own) serves actor streams: TLS, token, limits,
parsing and every check of a step happen there. It hands the learner process (seedlike.rpc.hub)
rows, never requests, through shared memory (`memfd`, no names, so nothing outlives the two
processes; descriptors travel with the messages): one segment per session for the rows' small
fields and the reply, and an arena per front end for the rows' observations and extras, where
the front end writes each step's rows right after the previous step's, so that the steps of a
batch of requests lie side by side. Then, in lockstep with the actor:

  front end: writes a checked step's n rows: small fields into the session's segment,
             observations into the arena at [start, start + n); sends STEP(session, n, arena,
             start, its CPU seconds since its previous STEP: a batch waits that long for more)
  learner:   reads the rows in place, batches them with other requests' rows, runs the policy on
             the arena's rows themselves where a batch's rows lie side by side (JAX reads them
             without a copy on the CPU), writes the n actions into the segment, sends
             ACTIONS(sessions ...)
  front end: reads the actions and answers the actor; rows [start, start + n) may be reused

so the learner process sees batches of rows and no protocol buffers, and each side touches rows
only while the other waits for them. The learner is done with a request's rows once it answers.

Rows written once. When the learner records unrolls, the front end also writes each step's
observations straight into the learner's unroll buffers (seedlike.server.unrolls, chunks of shared
memory passed once with CHUNK messages): the learner tells each session, with every reply, where
each of its seats records its next step (`where`, a flat step index, -1 before the first reply),
and which steps to repeat as step 0 of a seat's next unroll (`moves`). The front end says which
rows it wrote and where (`written`, `wrote_at`); the learner checks the places and writes itself
whatever it finds missing.

Arena layout for R rows (arrays C-order, 64-byte aligned, in this order; `arena_layout`):

  obs/<key>     spec.observation[key].dtype [R, *shape]   in the spec's key order
  extras/<key>  spec.extras[key].dtype      [R, *shape]

Segment layout for a session of R = num_envs x num_players rows (the same rules; `SessionLayout`
computes the offsets from the EnvSpec and R alone, so both sides derive the same layout and
nothing about it travels):

  reward        float32 [R]
  terminated, truncated  bool [R]
  env_id, player_id      int32 [R]
  acting, game_over      bool [R]
  action        int32 [R]     written by the learner process, read by the front end
                              (float32 [R, K] with continuous dimensions: EnvSpec.action_spec)
  written       bool [R]      the front end wrote the row's step in place ...
  wrote_at      int64 [R]     ... at this flat step index
  where         int64 [R]     per seat (env_id x num_players + player_id): where its next step
                              goes (learner), -1 until the first reply
  moves         int64 [R, 2]  (src, dst) flat steps to repeat, the first `move_count` rows
  move_count    int64 [1]

Messages travel on one AF_UNIX SOCK_SEQPACKET socket pair per front end (message boundaries kept,
file descriptors passed with SCM_RIGHTS); each is a kind byte and a struct (`encode`/`decode`).
"""

from __future__ import annotations

import array as _array
import dataclasses
import mmap
import os
import socket
import struct

import numpy as np

from seedlike.types import EnvSpec, Rows

ALIGN = 64
# Rows fields after obs and extras, in segment order, with their dtypes.
ROW_FIELDS = (
    ("reward", np.float32),
    ("terminated", np.bool_),
    ("truncated", np.bool_),
    ("env_id", np.int32),
    ("player_id", np.int32),
    ("acting", np.bool_),
    ("game_over", np.bool_),
)
# After the rows: the reply and the places of steps written in place.
WRITER_FIELDS = (
    ("action", np.int32, ()),
    ("written", np.bool_, ()),
    ("wrote_at", np.int64, ()),
    ("where", np.int64, ()),
    ("moves", np.int64, (2,)),
    ("move_count", np.int64, ()),
)
MAX_MESSAGE = 1 << 16


@dataclasses.dataclass(frozen=True)
class SessionLayout:
    """Where each array of a session's segment lies: name -> (offset, dtype, shape)."""

    rows: int
    arrays: dict
    size: int

    @classmethod
    def of(cls, spec: EnvSpec, rows: int) -> SessionLayout:
        entries = [(name, np.dtype(dtype), ()) for name, dtype in ROW_FIELDS]
        entries += [(name, np.dtype(dtype), shape) for name, dtype, shape in WRITER_FIELDS]
        act = spec.action_spec  # int32 [] unless the action has continuous dimensions
        entries = [("action", act.dtype, act.shape) if e[0] == "action" else e for e in entries]
        arrays, offset = {}, 0
        for name, dtype, shape in entries:
            offset = -(-offset // ALIGN) * ALIGN
            shape = (1,) if name == "move_count" else (rows, *shape)
            arrays[name] = (offset, np.dtype(dtype), shape)
            offset += int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return cls(rows, arrays, max(offset, 1))


def arena_layout(spec: EnvSpec, rows: int) -> tuple[dict, int]:
    """name -> (offset, dtype, shape) of an arena of `rows` rows, and its size in bytes."""
    entries = [(f"obs/{k}", s.dtype, s.shape) for k, s in spec.observation.items()]
    entries += [(f"extras/{k}", s.dtype, s.shape) for k, s in spec.extras.items()]
    arrays, offset = {}, 0
    for name, dtype, shape in entries:
        offset = -(-offset // ALIGN) * ALIGN
        arrays[name] = (offset, dtype, (rows, *shape))
        offset += rows * int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    return arrays, max(offset, 1)


class Arena:
    """A front end's rows of observations and extras, over one shared-memory mapping (`create`
    on the front end, `attach` in the learner process)."""

    def __init__(self, spec: EnvSpec, rows: int, buffer: mmap.mmap):
        layout, _ = arena_layout(spec, rows)
        self.rows = rows
        arrays = {
            name: np.ndarray(shape, dtype, buffer, offset)
            for name, (offset, dtype, shape) in layout.items()
        }
        self.obs = {k: arrays[f"obs/{k}"] for k in spec.observation}
        self.extras = {k: arrays[f"extras/{k}"] for k in spec.extras}

    @classmethod
    def create(cls, spec: EnvSpec, rows: int) -> tuple[Arena, int]:
        """A new anonymous arena and its file descriptor (to pass to the learner process)."""
        _, size = arena_layout(spec, rows)
        fd = os.memfd_create("seedlike-arena", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            buffer = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        return cls(spec, rows, buffer), fd

    @classmethod
    def attach(cls, spec: EnvSpec, rows: int, fd: int) -> Arena:
        """Maps an arena a front end created; closes `fd`. ValueError if its size does not fit."""
        _, size = arena_layout(spec, rows)
        try:
            if os.fstat(fd).st_size != size:
                raise ValueError(f"arena of {os.fstat(fd).st_size} bytes, expected {size}")
            buffer = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        return cls(spec, rows, buffer)

    def write(self, start: int, rows: Rows) -> None:
        n = rows.reward.shape[0]
        for key, array in self.obs.items():
            array[start : start + n] = rows.obs[key]
        for key, array in self.extras.items():
            array[start : start + n] = rows.extras[key]


class Segment:
    """A session's arrays over one shared-memory mapping (`create` on the front end, `attach` in
    the learner process). Views stay valid as long as anyone holds them: the mapping is released
    with its last view."""

    def __init__(self, layout: SessionLayout, buffer: mmap.mmap, spec: EnvSpec):
        self.layout = layout
        self.arrays = {
            name: np.ndarray(shape, dtype, buffer, offset)
            for name, (offset, dtype, shape) in layout.arrays.items()
        }
        self._fields = [self.arrays[name] for name, _ in ROW_FIELDS]
        self.action = self.arrays["action"]
        self.written, self.wrote_at = self.arrays["written"], self.arrays["wrote_at"]
        self.where, self.moves = self.arrays["where"], self.arrays["moves"]
        self.move_count = self.arrays["move_count"]

    @classmethod
    def create(cls, spec: EnvSpec, rows: int) -> tuple[Segment, int]:
        """A new anonymous segment and its file descriptor (to pass to the learner process)."""
        layout = SessionLayout.of(spec, rows)
        fd = os.memfd_create("seedlike-session", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, layout.size)
            buffer = mmap.mmap(fd, layout.size)
        except BaseException:
            os.close(fd)
            raise
        segment = cls(layout, buffer, spec)
        segment.where[:] = -1
        return segment, fd

    @classmethod
    def attach(cls, spec: EnvSpec, rows: int, fd: int) -> Segment:
        """Maps a segment a front end created; closes `fd`. Raises ValueError if its size is not
        the layout's (a front end that does not agree on the spec)."""
        layout = SessionLayout.of(spec, rows)
        try:
            if os.fstat(fd).st_size != layout.size:
                raise ValueError(f"segment of {os.fstat(fd).st_size} bytes, expected {layout.size}")
            buffer = mmap.mmap(fd, layout.size)
        finally:
            os.close(fd)
        return cls(layout, buffer, spec)

    def write(self, rows: Rows) -> int:
        """Copies a checked step's small fields into the segment; returns its number of rows."""
        n = rows.reward.shape[0]
        for array, values in zip(self._fields, rows[2:]):
            array[:n] = values
        return n

    def local_seats(self, n: int, num_players: int) -> np.ndarray:
        """The session's seat index (env_id x num_players + player_id) of each of the n rows."""
        return (
            self.arrays["env_id"][:n].astype(np.int64) * num_players + self.arrays["player_id"][:n]
        )

    def rows(self, n: int, arena: Arena, start: int) -> Rows:
        """The first n rows, as views of the segment and of the arena's rows [start, start + n)."""
        end = start + n
        return Rows(
            {k: a[start:end] for k, a in arena.obs.items()},
            {k: a[start:end] for k, a in arena.extras.items()},
            *(a[:n] for a in self._fields),
        )


# Messages ---------------------------------------------------------------------------------------
# front end -> learner process
OPEN = 1  # token, actor_id, num_envs, peer (utf-8); the segment's fd passed alongside
STEP = 2  # session, rows, arena, start row there, arrived (perf_counter), decode seconds,
#   the front end's CPU seconds since its previous STEP
CLOSE = 3  # session
READY = 4  # port: the front end listens
ARENA = 5  # index, rows: a new arena of the front end's, its fd passed alongside
# learner process -> front end
WELCOME = 11  # token, session, policy version, levels version, level probabilities
REFUSE = 12  # token, gRPC status code, message (utf-8)
ACTIONS = 13  # policy version, levels version, sessions [k], level probabilities (when changed)
FAIL = 14  # finished, sessions [k]: the server stopped before answering them
STOP = 15  # finished: end every stream and exit
CHUNK = 16  # index: a chunk of unroll buffers, its fd passed alongside (seedlike.server.unrolls)
EVICT = 17  # session, why (utf-8): its slot went to another actor; end its stream

_HEADERS = {
    OPEN: struct.Struct("<BQii"),
    STEP: struct.Struct("<BQIIQddd"),
    CLOSE: struct.Struct("<BQ"),
    READY: struct.Struct("<BI"),
    ARENA: struct.Struct("<BIQ"),
    WELCOME: struct.Struct("<BQQqq"),
    REFUSE: struct.Struct("<BQB"),
    ACTIONS: struct.Struct("<BqqII"),
    FAIL: struct.Struct("<B?I"),
    STOP: struct.Struct("<B?"),
    CHUNK: struct.Struct("<BI"),
    EVICT: struct.Struct("<BQ"),
}


class MessageError(ValueError):
    """A message that does not decode (a peer that does not speak this module's protocol)."""


def encode(kind: int, *fields, text: str = "", sessions=(), floats=()) -> bytes:
    """A message: the kind's header fields, then for ACTIONS and FAIL the session ids (uint64),
    for WELCOME and ACTIONS the level probabilities (float32), for OPEN, REFUSE and EVICT the
    text."""
    header = _HEADERS[kind]
    if kind == ACTIONS:
        fields = (*fields, len(sessions), len(floats))
    elif kind == FAIL:
        fields = (*fields, len(sessions))
    out = header.pack(kind, *fields)
    if sessions:
        out += np.asarray(sessions, np.uint64).tobytes()
    if floats:
        out += np.asarray(floats, np.float32).tobytes()
    return out + text.encode()


def decode(data: bytes) -> tuple[int, tuple, dict]:
    """(kind, header fields, {"sessions", "floats", "text"} as present)."""
    if not data or data[0] not in _HEADERS:
        raise MessageError(f"unknown message kind {data[:1]!r}")
    kind = data[0]
    header = _HEADERS[kind]
    if len(data) < header.size:
        raise MessageError(f"message {kind} of {len(data)} bytes is shorter than its header")
    fields = header.unpack_from(data)[1:]
    rest = memoryview(data)[header.size :]
    extra: dict = {}
    if kind in (ACTIONS, FAIL):
        sessions = fields[-2] if kind == ACTIONS else fields[-1]
        floats = fields[-1] if kind == ACTIONS else 0
        fields = fields[:-2] if kind == ACTIONS else fields[:-1]
        if len(rest) != 8 * sessions + 4 * floats:
            raise MessageError(f"message {kind}: {len(rest)} bytes after its header")
        extra["sessions"] = np.frombuffer(rest[: 8 * sessions], np.uint64).tolist()
        extra["floats"] = np.frombuffer(rest[8 * sessions :], np.float32).tolist()
    elif kind == WELCOME:
        if len(rest) % 4:
            raise MessageError("WELCOME: level probabilities are not float32")
        extra["floats"] = np.frombuffer(rest, np.float32).tolist()
    elif kind in (OPEN, REFUSE, EVICT):
        try:
            extra["text"] = bytes(rest).decode()
        except UnicodeDecodeError:
            raise MessageError(f"message {kind}: text is not UTF-8") from None
    elif len(rest):
        raise MessageError(f"message {kind}: {len(rest)} bytes after its header")
    return kind, fields, extra


def channel_pair() -> tuple[socket.socket, socket.socket]:
    """The two ends of one front end's channel (message boundaries kept)."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


def send(sock: socket.socket, message: bytes, fd: int | None = None) -> None:
    """Sends one message (whole: a SOCK_SEQPACKET send never splits one)."""
    if fd is None:
        sock.send(message)
    else:
        socket.send_fds(sock, [message], [fd])


# socket's flags as plain ints: its MsgFlag enum computes `|` and `&` in Python, a few us a call
# on every message.
_DONTWAIT = int(socket.MSG_DONTWAIT)
_TRUNCATED = int(socket.MSG_TRUNC) | int(socket.MSG_CTRUNC)
_ANCILLARY = socket.CMSG_LEN(_array.array("i").itemsize)  # room for one file descriptor


def receive(sock: socket.socket, wait: bool = True) -> tuple[bytes, list[int]]:
    """One message and the file descriptors passed with it (b"" when the peer has gone);
    without `wait`, BlockingIOError when none is there. (socket.recv_fds ignores its flags.)"""
    fds = _array.array("i")
    message, ancillary, flags, _ = sock.recvmsg(MAX_MESSAGE, _ANCILLARY, 0 if wait else _DONTWAIT)
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    if flags & _TRUNCATED:
        for fd in fds:
            os.close(fd)
        raise MessageError(f"a message longer than {MAX_MESSAGE} bytes")
    return message, list(fds)
