"""The learner process's side of the stream front ends (server.front_ends > 0).

`FrontEnds` starts N front-end processes (seedlike.rpc.frontend) that listen on the port this
process claimed (SO_REUSEPORT: the kernel spreads connections among them), and one thread here,
"front-ends", that turns their messages into the inference service's calls:

  OPEN  -> SessionGate.open (max_actors and max_streams_per_peer, counted over every front end),
           the session's segment mapped; WELCOME or REFUSE back
  STEP  -> InferenceService.submit with the segment's rows (views: no copy here; the gather
           thread copies them into its policy batch), their seat ids copied and checked first;
           EVICT back if the gate gave the session's slot away
  CLOSE -> the session closed

The reply thread of the inference service writes each batch's actions into the segments and
sends one ACTIONS message per front end (`_FrontEnd.deliver`). What this process may touch of a
segment: its rows from STEP until the actions are written, and the actions until then; the front
end writes nothing in between. A front end that dies (or sends what it should not) loses its
streams, whose actors reconnect, and is started again; the run goes on.

A front end writes each step into the session's unroll buffers before it sends STEP, so a
session's buffers are released only once its front end can write no more: at its CLOSE, or once
the process has exited. A session the gate evicts (to give its slot to a newcomer) is told so at
once (EVICT) and closed at its CLOSE.
"""

from __future__ import annotations

import logging
import os
import pickle
import selectors
import socket
import subprocess
import sys
import threading
import time

import grpc
import numpy as np

from seedlike.rpc import codec, shm
from seedlike.rpc.frontend import Setup
from seedlike.rpc.streams import Peer, Refused
from seedlike.runtime.threadnames import named
from seedlike.server.errors import ServerStopping

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
START_TIMEOUT_S = 60.0  # for a front end to listen (imports, TLS setup, bind)
SEND_TIMEOUT_S = 5.0  # a front end that does not read its channel for this long is stuck
RESTART_DELAY_S = 1.0
SOCKET_BUFFER = 4 << 20


class _Reply:
    """A front end's request as the inference service sees it: its reply goes to `sink`."""

    __slots__ = ("sink", "session_id")

    def __init__(self, sink: _FrontEnd, session_id: int):
        self.sink, self.session_id = sink, session_id

    def done(self) -> bool:
        return False


class _FrontEnd:
    """One front-end process, its channel and its sessions' segments."""

    def __init__(self, index: int, setup: Setup, hub: FrontEnds):
        self.index = index
        self.hub = hub
        self.sessions: dict[int, shm.Segment] = {}
        self.seats: dict[int, np.ndarray] = {}  # per session: its pending step's rows' seats
        self.arenas: list[shm.Arena] = []
        self.ready = False
        self.levels_sent = -1
        self._send_lock = threading.Lock()
        parent, child = shm.channel_pair()
        for sock in (parent, child):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "seedlike.rpc.frontend", str(child.fileno())],
                pass_fds=[child.fileno()],
                env=env,
            )
        finally:
            child.close()
        parent.settimeout(SEND_TIMEOUT_S)
        self.sock = parent
        self.send(pickle.dumps(setup))

    def send(self, message: bytes, fd: int | None = None) -> bool:
        """Sends a message; False if the front end is gone or stuck (it is then killed)."""
        try:
            with self._send_lock:
                shm.send(self.sock, message, fd)
            return True
        except OSError as e:
            if self.process.poll() is None:
                logging.error(
                    "front end %d does not read its channel (%s); killing it", self.index, e
                )
                self.process.kill()
            return False

    def deliver(self, replies) -> None:
        """The replies of one batch to this front end's requests (the inference service's reply
        thread): actions into the segments, then one message."""
        answered, failed = [], []
        finished = False
        for reply, outcome in replies:
            if isinstance(outcome, ServerStopping):
                failed.append(reply.session_id)
                finished = outcome.finished
                continue
            segment = self.sessions.get(reply.session_id)
            seats = self.seats.get(reply.session_id)
            if segment is None or seats is None:  # the stream ended while its step was answered
                continue
            actions, version = outcome.actions, outcome.policy_version
            n = actions.shape[0]
            segment.action[:n] = actions
            if outcome.next is not None:
                segment.where[seats] = outcome.next
            src_dst = outcome.moves
            segment.move_count[0] = 0 if src_dst is None else src_dst[0].size
            if src_dst is not None:
                segment.moves[: src_dst[0].size, 0] = src_dst[0]
                segment.moves[: src_dst[0].size, 1] = src_dst[1]
            answered.append(reply.session_id)
            self.hub.gate.touch(reply.session_id, waiting=False)
        if answered:
            levels_version, probs = self.hub.service.level_probs()
            if levels_version == self.levels_sent:
                probs = []
            self.levels_sent = levels_version
            self.send(
                shm.encode(shm.ACTIONS, version, levels_version, sessions=answered, floats=probs)
            )
        if failed:
            self.send(shm.encode(shm.FAIL, finished, sessions=failed))


class FrontEnds:
    """N stream front-end processes on one claimed port, feeding one InferenceService.

    Args:
      service: the seedlike.server.inference.InferenceService to serve.
      claim: the port (seedlike.rpc.ports.Claim), released by `stop`.
      transport: the server section's settings (seedlike.rpc.streams.Transport); front_ends > 0.
      credentials: mutual TLS and the run token, or None (loopback only).
    """

    def __init__(self, service, claim, transport, credentials=None):
        self.service = service
        self.port = claim.port
        self._claim = claim
        self.gate = transport.gate(defer_close=True)
        receive = codec.max_step_bytes(service.spec, service.max_envs_per_actor)
        pool = service.pool if service.pool is not None and service.pool.shared else None
        self._pool = pool
        self._setup = lambda index: Setup(
            index, service.spec, service.max_envs_per_actor, transport, credentials,
            f"{claim.bind}:{claim.port}", receive, pool.geometry if pool is not None else None,
        )  # fmt: skip
        self._selector = selectors.DefaultSelector()
        self._front_ends: list[_FrontEnd] = []
        self._restarts: list[tuple[float, int]] = []  # (when, index) of front ends to start again
        self._stopping = False
        self._lock = threading.Lock()  # the front-end list, against stop()
        try:
            if pool is not None:
                pool.on_chunk = self._chunk_added
            for index in range(transport.front_ends):
                self._start(index)
            self._wait_ready()
        except BaseException:
            self._kill_all()
            raise
        self._thread = threading.Thread(
            target=named("front-ends", self._serve), name="front-ends", daemon=True
        )
        self._thread.start()
        logging.info(
            "%d stream front end(s) listening on port %d", len(self._front_ends), self.port
        )

    @property
    def pids(self) -> list[int]:
        return [fe.process.pid for fe in self._front_ends]

    def _start(self, index: int) -> None:
        fe = _FrontEnd(index, self._setup(index), self)
        if self._pool is not None:
            for i, chunk in enumerate(list(self._pool.chunks)):
                fe.send(shm.encode(shm.CHUNK, i), chunk.fd)
        with self._lock:
            if index < len(self._front_ends):
                self._front_ends[index] = fe
            else:
                self._front_ends.append(fe)
        self._selector.register(fe.sock, selectors.EVENT_READ, fe)

    def _chunk_added(self, index: int, chunk) -> None:
        """The pool grew (on the gather thread, under its lock): every front end maps the chunk
        before any reply names a step in it."""
        with self._lock:
            front_ends = list(self._front_ends)
        for fe in front_ends:
            fe.send(shm.encode(shm.CHUNK, index), chunk.fd)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not all(fe.ready for fe in self._front_ends):
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"stream front ends did not listen within {START_TIMEOUT_S:g} s")
            for key, _ in self._selector.select(timeout=min(left, 0.5)):
                fe = key.data
                message, fds = self._receive(fe)
                if not message:
                    code = fe.process.wait()
                    raise RuntimeError(
                        f"stream front end {fe.index} exited with status {code} before listening "
                        "(its error is in the log above)"
                    )
                self._handle(fe, message, fds)

    # The front-ends thread ----------------------------------------------------------------------

    def _serve(self) -> None:
        while not self._stopping:
            if self._restarts:
                self._restart_due()
            for key, _ in self._selector.select(timeout=0.2):
                fe = key.data
                try:
                    message, fds = self._receive(fe)
                    if not message:
                        self._lost(fe)
                        continue
                    self._handle(fe, message, fds)
                except Exception:  # a bug on either side: that front end's streams end, not the run
                    logging.exception("front end %d: message not handled; restarting it", fe.index)
                    fe.process.kill()
                    self._lost(fe)

    def _receive(self, fe: _FrontEnd) -> tuple[bytes, list[int]]:
        try:
            return shm.receive(fe.sock)
        except (ConnectionError, TimeoutError):
            return b"", []

    def _handle(self, fe: _FrontEnd, message: bytes, fds: list[int]) -> None:
        kind, fields, extra = shm.decode(message)
        if kind == shm.STEP:
            session_id, n, index, start, arrived, decode_s, spread_s = fields
            segment, arena = fe.sessions[session_id], fe.arenas[index]
            if not 0 < n <= segment.layout.rows or start + n > arena.rows:
                raise ValueError(f"a step of {n} rows at {start} of arena {index}")
            why = self.gate.touch(session_id, waiting=True)
            if why is not None:
                fe.send(shm.encode(shm.EVICT, session_id, text=why))
                return
            rows = segment.rows(n, arena, start)
            rows, fe.seats[session_id] = self._checked_seats(rows, segment.layout.rows)
            self.service.stats.add_busy("decode", decode_s)
            written = (segment.written[:n], segment.wrote_at[:n]) if self._pool else None
            self.service.submit(
                session_id, rows, _Reply(fe, session_id), arrived, written, (arena, start),
                spread_s,
            )  # fmt: skip
        elif kind == shm.ARENA:
            index, rows = fields
            if index != len(fe.arenas) or len(fds) != 1:
                raise ValueError(f"arena {index} after {len(fe.arenas)}, {len(fds)} descriptors")
            fe.arenas.append(shm.Arena.attach(self.service.spec, rows, fds[0]))
        elif kind == shm.OPEN:
            self._open(fe, fields, extra["text"], fds)
        elif kind == shm.CLOSE:
            (session_id,) = fields
            fe.seats.pop(session_id, None)
            if fe.sessions.pop(session_id, None) is not None:
                self.gate.close(self.service, session_id)
        elif kind == shm.READY:
            fe.ready = True
        else:
            raise shm.MessageError(f"message kind {kind} is not for the learner process")

    def _checked_seats(self, rows, seats: int) -> tuple:
        """The rows with their env and player ids copied out of the segment, and their seats in
        the session int64 [n]. The front end has checked every value already; these index the
        service's arrays, where a wrong one would end the run, not the stream: checked again."""
        players = self.service.spec.num_players
        env_id, player_id = rows.env_id.copy(), rows.player_id.copy()
        # As unsigned, a negative id is huge: one comparison checks both ends of the range.
        if not (
            (env_id.view(np.uint32) < seats // players).all()
            and (player_id.view(np.uint32) < players).all()
        ):
            raise ValueError("a step's env_id or player_id is outside its session")
        local = env_id.astype(np.int64) * players + player_id
        if np.bincount(local, minlength=seats).max() > 1:
            raise ValueError("a step names one seat twice")
        return rows._replace(env_id=env_id, player_id=player_id), local

    def _open(self, fe: _FrontEnd, fields: tuple, peer: str, fds: list[int]) -> None:
        token, actor_id, num_envs = fields
        if len(fds) != 1 or not 0 < num_envs <= self.service.max_envs_per_actor:
            for fd in fds:
                os.close(fd)
            raise ValueError(f"OPEN with {len(fds)} descriptors for {num_envs} envs")
        segment = shm.Segment.attach(
            self.service.spec, num_envs * self.service.spec.num_players, fds[0]
        )
        try:
            opened = self.gate.open(self.service, actor_id, num_envs, Peer.decode(peer))
        except Refused as e:
            fe.send(shm.encode(shm.REFUSE, token, e.code.value[0], text=str(e)))
            return
        except ServerStopping as e:
            code = grpc.StatusCode.OK if e.finished else grpc.StatusCode.UNAVAILABLE
            fe.send(shm.encode(shm.REFUSE, token, code.value[0], text=str(e)))
            return
        finally:
            self._tell_evicted()
        fe.sessions[opened.session_id] = segment
        fe.send(
            shm.encode(
                shm.WELCOME, token, opened.session_id, opened.policy_version,
                opened.levels_version, floats=opened.level_probs,
            )
        )  # fmt: skip

    def _tell_evicted(self) -> None:
        """The front ends of sessions the gate evicted end their streams now, writing nothing
        more; each session closes at its front end's CLOSE."""
        for session_id, why in self.gate.take_evicted():
            for fe in list(self._front_ends):
                if session_id in fe.sessions:
                    fe.send(shm.encode(shm.EVICT, session_id, text=why))

    def _lost(self, fe: _FrontEnd) -> None:
        """A front end ended: once it has exited (it wrote into its sessions' unroll buffers),
        its sessions close (their actors reconnect); it starts again."""
        self._selector.unregister(fe.sock)
        fe.sock.close()
        try:
            code = fe.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            fe.process.kill()
            code = fe.process.wait()
        fe.seats.clear()
        for session_id in list(fe.sessions):
            fe.sessions.pop(session_id, None)
            self.gate.close(self.service, session_id)
        if self._stopping:
            return
        logging.error(
            "stream front end %d exited (status %s); its actors reconnect; starting it again",
            fe.index,
            code,
        )
        self._restarts.append((time.monotonic() + RESTART_DELAY_S, fe.index))

    def _restart_due(self) -> None:
        now = time.monotonic()
        for when, index in [r for r in self._restarts if r[0] <= now]:
            self._restarts.remove((when, index))
            try:
                self._start(index)
            except OSError as e:
                logging.error("could not start front end %d again (%s); retrying", index, e)
                self._restarts.append((now + RESTART_DELAY_S, index))

    # Lifecycle ----------------------------------------------------------------------------------

    def stop(self, grace_s: float = 0.0) -> None:
        """Ends every stream (OK if training is over, else UNAVAILABLE: actors reconnect) and
        every front end, waiting `grace_s` for streams still running; releases the port."""
        self._stopping = True
        finished = self.service.finished
        with self._lock:
            front_ends = list(self._front_ends)
        for fe in front_ends:
            fe.send(shm.encode(shm.STOP, finished))
        for fe in front_ends:
            try:
                fe.process.wait(timeout=grace_s + 10.0)
            except subprocess.TimeoutExpired:
                logging.warning("front end %d did not stop; killing it", fe.index)
                fe.process.kill()
                fe.process.wait()
        if getattr(self, "_thread", None) is not None:
            self._thread.join(timeout=10)
        for fe in front_ends:
            fe.sock.close()
        self._selector.close()
        self._claim.release()

    def _kill_all(self) -> None:
        self._stopping = True
        for fe in self._front_ends:
            fe.process.kill()
            fe.process.wait()
            fe.sock.close()
        self._selector.close()
