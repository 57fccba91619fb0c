"""What stream front ends and the learner process share: each session's rows in shared memory,
and the small messages that say which rows are ready and which actions are.

A front end (seedlike.rpc.frontend, a process of its own) serves actor streams: TLS, token, limits,
parsing and every check of a step happen there. It hands the learner process (seedlike.rpc.hub)
rows, never requests: for each session it creates one shared-memory segment (`memfd`, no name, so
nothing outlives the two processes) and passes its file descriptor with the session's OPEN
message. Then, in lockstep with the actor:

  front end: writes a checked step's n rows into the segment, sends STEP(session, n)
  learner:   reads rows [0, n) in place, batches them with other sessions' rows, runs the policy,
             writes the n actions into the segment, sends ACTIONS(sessions ...)
  front end: reads the actions and answers the actor, whose next step may overwrite the rows

so the learner process sees batches of rows and no protocol buffers, and each side touches a
segment's rows only while the other waits for it. The learner copies a request's rows into its
policy batch before it answers; nothing of a segment is read after the actions are written.

Segment layout for a session of R = num_envs x num_players rows (every array C-order, each
starting on a 64-byte boundary, in this order; `SessionLayout` computes the offsets from the
EnvSpec and R alone, so both sides derive the same layout and nothing about it travels):

  obs/<key>     spec.observation[key].dtype [R, *shape]   in the spec's key order
  extras/<key>  spec.extras[key].dtype      [R, *shape]
  reward        float32 [R]
  terminated, truncated  bool [R]
  env_id, player_id      int32 [R]
  acting, game_over      bool [R]
  action        int32 [R]     written by the learner process, read by the front end

Messages travel on one AF_UNIX SOCK_SEQPACKET socket pair per front end (message boundaries kept,
file descriptors passed with SCM_RIGHTS); each is a kind byte and a struct (`encode`/`decode`).
"""

from __future__ import annotations

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
MAX_MESSAGE = 1 << 16


@dataclasses.dataclass(frozen=True)
class SessionLayout:
    """Where each array of a session's segment lies: name -> (offset, dtype, shape)."""

    rows: int
    arrays: dict
    size: int

    @classmethod
    def of(cls, spec: EnvSpec, rows: int) -> SessionLayout:
        entries = [(f"obs/{k}", s.dtype, s.shape) for k, s in spec.observation.items()]
        entries += [(f"extras/{k}", s.dtype, s.shape) for k, s in spec.extras.items()]
        entries += [(name, np.dtype(dtype), ()) for name, dtype in ROW_FIELDS]
        entries.append(("action", np.dtype(np.int32), ()))
        arrays, offset = {}, 0
        for name, dtype, shape in entries:
            offset = -(-offset // ALIGN) * ALIGN
            shape = (rows, *shape)
            arrays[name] = (offset, np.dtype(dtype), shape)
            offset += int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return cls(rows, arrays, max(offset, 1))


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
        self._obs = [(k, self.arrays[f"obs/{k}"]) for k in spec.observation]
        self._extras = [(k, self.arrays[f"extras/{k}"]) for k in spec.extras]
        self._fields = [self.arrays[name] for name, _ in ROW_FIELDS]
        self.action = self.arrays["action"]

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
        return cls(layout, buffer, spec), fd

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
        """Copies a checked step's rows into the segment; returns their number."""
        n = rows.reward.shape[0]
        for key, array in self._obs:
            array[:n] = rows.obs[key]
        for key, array in self._extras:
            array[:n] = rows.extras[key]
        for array, values in zip(self._fields, rows[2:]):
            array[:n] = values
        return n

    def rows(self, n: int) -> Rows:
        """The first n rows, as views of the segment."""
        return Rows(
            {k: a[:n] for k, a in self._obs},
            {k: a[:n] for k, a in self._extras},
            *(a[:n] for a in self._fields),
        )


# Messages ---------------------------------------------------------------------------------------
# front end -> learner process
OPEN = 1  # token, actor_id, num_envs, peer (utf-8); the segment's fd passed alongside
STEP = 2  # session, rows, arrived (perf_counter), decode seconds
CLOSE = 3  # session
READY = 4  # port: the front end listens
# learner process -> front end
WELCOME = 11  # token, session, policy version, levels version, level probabilities
REFUSE = 12  # token, gRPC status code, message (utf-8)
ACTIONS = 13  # policy version, levels version, sessions [k], level probabilities (when changed)
FAIL = 14  # finished, sessions [k]: the server stopped before answering them
STOP = 15  # finished: end every stream and exit

_HEADERS = {
    OPEN: struct.Struct("<BQii"),
    STEP: struct.Struct("<BQIdd"),
    CLOSE: struct.Struct("<BQ"),
    READY: struct.Struct("<BI"),
    WELCOME: struct.Struct("<BQQqq"),
    REFUSE: struct.Struct("<BQB"),
    ACTIONS: struct.Struct("<BqqII"),
    FAIL: struct.Struct("<B?I"),
    STOP: struct.Struct("<B?"),
}


class MessageError(ValueError):
    """A message that does not decode (a peer that does not speak this module's protocol)."""


def encode(kind: int, *fields, text: str = "", sessions=(), floats=()) -> bytes:
    """A message: the kind's header fields, then for ACTIONS and FAIL the session ids (uint64),
    for WELCOME and ACTIONS the level probabilities (float32), for OPEN and REFUSE the text."""
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
    elif kind in (OPEN, REFUSE):
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


def receive(sock: socket.socket) -> tuple[bytes, list[int]]:
    """One message and the file descriptors passed with it (b"" when the peer has gone)."""
    message, fds, flags, _ = socket.recv_fds(sock, MAX_MESSAGE, 1)
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        for fd in fds:
            os.close(fd)
        raise MessageError(f"a message longer than {MAX_MESSAGE} bytes")
    return message, fds
