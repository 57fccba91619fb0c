"""A stream front end: a process of its own that serves actor streams for the learner process.

  python -m seedlike.rpc.frontend FD     (started by seedlike.rpc.hub, never by hand)

Everything per request happens here, on this process's gRPC event loop: TLS, the run token, the
Hello deadline and idle deadline, parsing and every check of a step (seedlike.rpc.streams's
`InferenceServicer`, the same code as in the learner process). The learner process sees only
checked rows, written into each session's shared memory (seedlike.rpc.shm), and answers with
actions there. What this process may touch: its own gRPC server and event loop, the sessions'
segments (rows while the learner process waits for them; actions once it has written them) and
its end of the channel. It imports no JAX.

Its lifetime is the learner process's: it serves until a STOP message, and exits when the channel
closes (the learner process ended, whatever the way).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import os
import pickle
import socket
import sys
import threading
import time

import grpc

from seedlike.rpc import shm
from seedlike.rpc.streams import Opened, Peer, Refused, RpcServer, Transport
from seedlike.server.errors import ServerStopping
from seedlike.server.unrolls import Geometry, PoolView
from seedlike.types import EnvSpec

_STATUS = {code.value[0]: code for code in grpc.StatusCode}


@dataclasses.dataclass(frozen=True)
class Setup:
    """What the learner process tells a new front end (pickled, over the private channel)."""

    index: int
    spec: EnvSpec
    max_envs_per_actor: int
    transport: Transport
    credentials: object  # seedlike.rpc.security.Credentials or None
    address: str  # host:port, claimed by the learner process
    receive_limit: int
    geometry: Geometry | None  # of the learner's unroll buffers, when steps are written in place


@dataclasses.dataclass
class _Session:
    segment: shm.Segment
    pending: tuple | None = None  # (future, rows) of the step waiting for actions
    evicted: str | None = None  # why, once the learner process gave the session's slot away


MIN_ARENA_ROWS = 64
# An arena holds about this many times the rows waiting for actions, so that a batch seldom
# spans its wrap (a batch that does is copied by the learner process) ...
ARENA_ROUNDS = 8
# ... unless that would take more than this much memory; then it only has to fit them.
MAX_ARENA_BYTES = 512 << 20


class Arenas:
    """This front end's arenas (seedlike.rpc.shm.Arena): each step's rows go right after the
    previous step's, so the requests the learner process batches together lie side by side; at
    the end of the arena they wrap to its start. The rows of a step still waiting for its actions
    are never overwritten: a step that would land on them goes to a new arena, twice as large at
    least (told to the learner process with `announce(index, rows, fd)`), which is kept from then
    on; so does one when the arena holds fewer than ARENA_ROUNDS / 2 rounds of the rows waiting.
    Each arena has half its rows again beyond its end, where the learner pads a batch's rows."""

    def __init__(self, spec: EnvSpec, announce):
        self.spec = spec
        self._row_bytes = shm.arena_layout(spec, 1)[1]
        self._announce = announce
        self.arenas: list[shm.Arena] = []
        self._capacity = 0
        self._head = 0
        self._in_flight: dict[int, tuple[int, int, int]] = {}  # session -> (arena, start, end)

    def place(self, session_id: int, n: int) -> tuple[int, int]:
        """(arena index, start row) for a step of n rows of the session."""
        start = self._head if self._head + n <= self._capacity else 0
        waiting = n + sum(b - a for _, a, b in self._in_flight.values())
        rounds = ARENA_ROUNDS * waiting
        if rounds * self._row_bytes > MAX_ARENA_BYTES:
            rounds = max(2 * waiting, MAX_ARENA_BYTES // self._row_bytes)
        if self._taken(start, start + n) or self._capacity < rounds // 2:
            self._grow(max(2 * self._capacity, rounds, MIN_ARENA_ROWS))
            start = 0
        index = len(self.arenas) - 1
        self._head = start + n
        self._in_flight[session_id] = (index, start, start + n)
        return index, start

    def done(self, session_id: int) -> None:
        """The session's step got its actions: its rows may be reused."""
        self._in_flight.pop(session_id, None)

    def _taken(self, start: int, end: int) -> bool:
        current = len(self.arenas) - 1
        return any(
            index == current and a < end and start < b for index, a, b in self._in_flight.values()
        )

    def _grow(self, capacity: int) -> None:
        arena, fd = shm.Arena.create(self.spec, capacity + capacity // 2 + 8)
        try:
            self._announce(len(self.arenas), arena.rows, fd)
        finally:
            os.close(fd)
        self.arenas.append(arena)
        self._capacity = capacity


class CentralLink:
    """The stream handler's backend in a front end: sessions and steps go to the learner process
    over the channel, rows and actions through each session's segment. Runs on the event loop."""

    def __init__(
        self,
        sock: socket.socket,
        spec: EnvSpec,
        max_envs_per_actor: int,
        loop,
        geometry: Geometry | None = None,
    ):
        self.spec = spec
        self.max_envs_per_actor = max_envs_per_actor
        self._pool = PoolView(geometry) if geometry is not None else None
        self._arenas = Arenas(spec, self._announce_arena)
        self._sock = sock
        self._loop = loop
        self._tokens = itertools.count(1)
        self._opening: dict[int, tuple[asyncio.Future, shm.Segment]] = {}
        self._sessions: dict[int, _Session] = {}
        self._levels: tuple[int, list] = (0, [])
        self._stopped: bool | None = None  # `finished` once the learner process said STOP
        self.done = threading.Event()  # set when this front end should stop serving
        self._cpu_at_step = time.process_time()

    def start(self) -> None:
        self._loop.add_reader(self._sock.fileno(), self._on_readable)

    # The backend interface (seedlike.rpc.streams.InferenceServicer) -----------------------------

    async def open_session(self, actor_id: int, num_envs: int, peer: Peer) -> Opened:
        if self._stopped is not None:
            raise ServerStopping(self._stopped)
        segment, fd = shm.Segment.create(self.spec, num_envs * self.spec.num_players)
        token = next(self._tokens)
        future = self._loop.create_future()
        self._opening[token] = (future, segment)
        try:
            self._send(shm.encode(shm.OPEN, token, actor_id, num_envs, text=peer.encode()), fd)
        finally:
            os.close(fd)  # the learner process holds its own descriptor now
        return await future

    def submit(self, session_id: int, rows, decode_s: float) -> asyncio.Future:
        future = self._loop.create_future()
        session = self._sessions.get(session_id)
        if self._stopped is not None or session is None:
            future.set_exception(ServerStopping(bool(self._stopped)))
            return future
        if session.evicted is not None:  # its unroll buffers are not its own for long
            future.set_exception(Refused(grpc.StatusCode.RESOURCE_EXHAUSTED, session.evicted))
            return future
        segment = session.segment
        n = segment.write(rows)
        arena, start = self._arenas.place(session_id, n)
        self._arenas.arenas[arena].write(start, rows)
        written = segment.written[:n]
        written[:] = False
        if self._pool is not None:
            # Steps go straight to where the learner records them (rows written once).
            ran = rows.acting | rows.terminated | rows.truncated
            at = segment.where[segment.local_seats(n, self.spec.num_players)]
            write = ran & (at >= 0)
            if write.all():  # the common case: no copies of the rows to pick some
                self._pool.write_rows(at, rows.obs, rows.extras)
                written[:] = True
                segment.wrote_at[:n] = at
            elif write.any():
                flat = at[write]
                self._pool.write_rows(
                    flat,
                    {k: v[write] for k, v in rows.obs.items()},
                    {k: v[write] for k, v in rows.extras.items()},
                )
                written[write] = True
                segment.wrote_at[:n][write] = flat
        session.pending = (future, n)
        # This process's CPU time since its previous step (receiving, parsing, checking and
        # answering every stream it serves): its work per step, which spaces out a burst of
        # steps on their way to the batcher (seedlike.server.batcher, SPREAD).
        cpu = time.process_time()
        spread_s, self._cpu_at_step = cpu - self._cpu_at_step, cpu
        now = time.perf_counter()
        message = shm.encode(shm.STEP, session_id, n, arena, start, now, decode_s, spread_s)
        self._send(message)
        return future

    def answered(self, session_id: int) -> None:
        """The learner process's gate keeps the time (seedlike.rpc.hub)."""

    def close_session(self, session_id: int) -> None:
        self._arenas.done(session_id)
        if self._sessions.pop(session_id, None) is not None and self._stopped is None:
            self._send(shm.encode(shm.CLOSE, session_id))

    def level_probs(self) -> tuple[int, list]:
        return self._levels

    # Messages from the learner process ----------------------------------------------------------

    def _announce_arena(self, index: int, rows: int, fd: int) -> None:
        self._send(shm.encode(shm.ARENA, index, rows), fd)

    def _send(self, message: bytes, fd: int | None = None) -> None:
        try:
            # Blocking for the rare full buffer: the learner process reads all the time.
            shm.send(self._sock, message, fd)
        except OSError:
            self._stop(False)  # the learner process is gone

    def _on_readable(self) -> None:
        while True:
            try:
                message, fds = shm.receive(self._sock, wait=False)
            except BlockingIOError:
                return
            except OSError:
                message, fds = b"", []
            if not message:  # the learner process has gone: nothing left to serve
                self._stop(False)
                return
            self._handle(*shm.decode(message), fds)

    def _handle(self, kind: int, fields: tuple, extra: dict, fds: list[int]) -> None:
        if kind == shm.ACTIONS:
            version, levels_version = fields
            if extra["floats"]:
                self._levels = (levels_version, extra["floats"])
            for session_id in extra["sessions"]:
                session = self._sessions.get(session_id)
                if session is not None and session.pending is not None:
                    (future, n), session.pending = session.pending, None
                    self._arenas.done(session_id)
                    segment = session.segment
                    moves = int(segment.move_count[0])
                    if moves:  # step T of an unroll this front end wrote is the next one's step 0
                        src, dst = segment.moves[:moves, 0], segment.moves[:moves, 1]
                        self._pool.copy_step(src.copy(), dst.copy())
                    if not future.done():
                        future.set_result((segment.action[:n].copy(), version))
        elif kind == shm.WELCOME:
            token, session_id, version, levels_version = fields
            future, segment = self._opening.pop(token)
            self._sessions[session_id] = _Session(segment)
            if levels_version > self._levels[0] or not self._levels[1]:
                self._levels = (levels_version, extra["floats"])
            if not future.done():
                future.set_result(Opened(session_id, version, levels_version, extra["floats"]))
            else:  # the stream ended while the learner process opened its session
                self.close_session(session_id)
        elif kind == shm.REFUSE:
            token, code = fields
            future, _ = self._opening.pop(token)
            if not future.done():
                future.set_exception(_refusal(code, extra["text"]))
        elif kind == shm.FAIL:
            (finished,) = fields
            for session_id in extra["sessions"]:
                session = self._sessions.get(session_id)
                if session is not None and session.pending is not None:
                    (future, _), session.pending = session.pending, None
                    self._arenas.done(session_id)
                    if not future.done():
                        future.set_exception(ServerStopping(finished))
        elif kind == shm.EVICT:
            (session_id,) = fields
            session = self._sessions.get(session_id)
            if session is not None:
                session.evicted = extra["text"]
            if session is not None and session.pending is not None:
                (future, _), session.pending = session.pending, None
                self._arenas.done(session_id)
                if not future.done():
                    future.set_exception(Refused(grpc.StatusCode.RESOURCE_EXHAUSTED, extra["text"]))
        elif kind == shm.STOP:
            self._stop(fields[0])
        elif kind == shm.CHUNK:
            (index,) = fields
            (fd,) = fds
            self._pool.attach(index, fd)
        else:
            raise shm.MessageError(f"message kind {kind} is not for a front end")
        if kind != shm.CHUNK:
            for fd in fds:  # only chunks come with a descriptor
                os.close(fd)

    def _stop(self, finished: bool) -> None:
        if self._stopped is None:
            self._stopped = finished
        error = ServerStopping(self._stopped)
        waiting = [f for f, _ in self._opening.values()]
        waiting += [s.pending[0] for s in self._sessions.values() if s.pending is not None]
        for future in waiting:
            if not future.done():
                future.set_exception(error)
        self._opening.clear()
        self.done.set()


def _refusal(code: int, text: str) -> Exception:
    """REFUSE's status: OK means training is over, UNAVAILABLE the learner is stopping (both end
    the stream as a stopping server does); any other is a refusal the actor retries."""
    if code == grpc.StatusCode.OK.value[0]:
        return ServerStopping(True)
    if code == grpc.StatusCode.UNAVAILABLE.value[0]:
        return ServerStopping(False)
    return Refused(_STATUS.get(code, grpc.StatusCode.UNKNOWN), text)


def serve(sock: socket.socket, setup: Setup, grace_s: float = 2.0) -> None:
    """Serves actor streams on the claimed port until the learner process says STOP or ends."""
    rpc = None
    loop = asyncio.new_event_loop()
    try:
        link = CentralLink(sock, setup.spec, setup.max_envs_per_actor, loop, setup.geometry)
        servicer = setup.transport.servicer(link, setup.credentials)
        rpc = RpcServer(
            servicer,
            setup.address,
            setup.receive_limit,
            setup.credentials,
            loop=loop,
        )
        rpc.loop.call_soon_threadsafe(link.start)
        shm.send(sock, shm.encode(shm.READY, rpc.port))
        link.done.wait()
    finally:
        if rpc is not None:
            rpc.stop(grace_s)


def main(argv: list[str]) -> int:
    sock = socket.socket(fileno=int(argv[1]))
    message, _ = shm.receive(sock)
    # From the learner process that started this one, over a socket pair no one else holds.
    setup: Setup = pickle.loads(message)
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(levelname).1s%(asctime)s front end {setup.index}] %(message)s",
        datefmt="%m%d %H:%M:%S",
    )
    try:
        serve(sock, setup)
    except Exception:  # the learner process sees the exit and starts this front end again
        logging.exception("front end %d crashed", setup.index)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
