"""gRPC transport for the inference service: a thin shell that parses, validates and forwards.

Requests are received as raw bytes and parsed here (not by gRPC), so that garbage, unknown fields
and bad tensors all end the offending stream with INVALID_ARGUMENT and a message naming the field,
while every other actor's stream keeps going.

The stream handler (`InferenceServicer`) talks to a backend that opens sessions and answers steps:
`LocalBackend`, the inference service of this process (server.front_ends = 0: the gRPC event loop
runs in the learner process), or a front end's link to the learner process
(seedlike.rpc.frontend: the same handler in processes of their own, `serve` starts them).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import os
import threading
import time

import grpc

from seedlike.rpc import codec, ports, security, wire
from seedlike.rpc import seedlike_pb2 as pb
from seedlike.rpc.security import Credentials
from seedlike.runtime.threadnames import named
from seedlike.server.errors import ServerStopping


class Refused(Exception):
    """A session the server will not open now (its slots are taken); `code` is the gRPC status
    the stream ends with, and the actor retries with backoff."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code


@dataclasses.dataclass(frozen=True)
class Opened:
    """A session the server opened: what the Welcome tells the actor."""

    session_id: int
    policy_version: int
    levels_version: int
    level_probs: list


@dataclasses.dataclass(frozen=True)
class Peer:
    """Who opens a session: the host it connects from (max_streams_per_peer counts these) and
    the identity the influence bounds count it as (seedlike.rpc.security.identity)."""

    host: str
    identity: str

    def encode(self) -> str:  # as a front end sends it to the learner process
        return f"{self.host}\n{self.identity}"

    @classmethod
    def decode(cls, text: str) -> Peer:
        host, _, identity = text.partition("\n")
        return cls(host, identity or host)


EVICTED = (
    "this stream sent nothing for {idle:.0f} s while the server was full and another actor "
    "asked in (server.evict_idle_s); reconnect"
)
OUTNUMBERED = (
    "this stream's identity held {held} of the {where} while an identity with {fewer} asked in "
    "(each holds at most its fair share when others wait: docs/security.md); reconnect"
)


class SessionGate:
    """Who may open a session: at most `max_actors` sessions, and at most `max_streams_per_peer`
    of them from one host, across every front end (the learner process holds the only gate).

    A slot is held from a valid Hello on, never before (InferenceServicer keeps streams without
    one apart). When every slot (or the host's share) is taken, the session that has left the
    server waiting longest gives its slot to the newcomer, if it has sent nothing for
    `evict_idle_s` (time the server takes to answer does not count): silent sessions cannot lock
    honest actors out, and an evicted actor that was only slow reconnects. Failing that, the
    identity holding the most of those slots gives its newest session's to a newcomer whose
    identity holds at least two fewer: one certificate's busy streams cannot lock another
    identity out, and every identity that knocks gets its share (max_actors over the identities
    that want slots) at once, however busy the others are. Thread-safe; `touch` is called for
    every step.

    `defer_close`: an evicted session keeps its seats and unroll buffers in the service until
    its stream ends (`close`), and `take_evicted` lists it for whoever must tell its stream. A
    front end writes a step into the session's unroll buffers before the learner process sees
    the step (seedlike.rpc.hub); released at eviction, they could already be another seat's.
    """

    def __init__(
        self,
        max_actors: int,
        max_streams_per_peer: int,
        evict_idle_s: float,
        defer_close: bool = False,
    ):
        self.max_actors = int(max_actors)
        self.max_per_peer = int(max_streams_per_peer)
        self.evict_idle_s = float(evict_idle_s)
        self.defer_close = bool(defer_close)
        self._lock = threading.Lock()
        self._peers: collections.Counter = collections.Counter()
        self._sessions: dict[int, str] = {}
        self._identities: dict[int, str] = {}  # session -> its identity, in the order opened
        # Per session: when the server last stopped waiting for it (inf while it waits for us).
        self._idle_since: dict[int, float] = {}
        self._evicted: dict[int, str] = {}  # session -> why it was evicted
        self._untold: list[int] = []  # evicted sessions not yet listed by take_evicted
        self.evictions = 0
        self.fair_evictions = 0  # of those, seats given to an identity with fewer

    def open(self, service, actor_id: int, num_envs: int, who: Peer) -> Opened:
        """Opens a session of `service` for the peer; raises Refused or ServerStopping."""
        peer = who.host
        with self._lock:
            if self._peers[peer] >= self.max_per_peer and not self._make_room(service, who, peer):
                raise Refused(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"{peer} has {self.max_per_peer} streams open already "
                    "(server.max_streams_per_peer); raise it for more actors on one host",
                )
            if len(self._sessions) >= self.max_actors and not self._make_room(service, who, None):
                raise Refused(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"{self.max_actors} actors are connected already (server.max_actors)",
                )
            session_id = service.open_session(actor_id, num_envs, who.identity)
            self._peers[peer] += 1
            self._sessions[session_id] = peer
            self._identities[session_id] = who.identity
            self._idle_since[session_id] = time.monotonic()
        levels_version, probs = service.level_probs()
        return Opened(session_id, service.registry.policy_version, levels_version, probs)

    def _make_room(self, service, who: Peer, peer: str | None) -> bool:
        """Frees a slot (of host `peer`, or any) for `who`: an idle session's, else a seat of the
        identity holding the most, where `who`'s holds at least two fewer."""
        sessions = [s for s, p in self._sessions.items() if peer is None or p == peer]
        if not sessions:
            return False
        victim = min(sessions, key=lambda s: self._idle_since[s])
        idle = time.monotonic() - self._idle_since[victim]
        if idle >= self.evict_idle_s:
            logging.warning(
                "session %d evicted: idle %.0f s while the server was full", victim, idle
            )
            self._evict(service, victim, EVICTED.format(idle=idle))
            return True
        held = collections.Counter(self._identities[s] for s in sessions)
        largest, most = max(held.items(), key=lambda item: item[1])
        mine = held.get(who.identity, 0)
        if most < mine + 2:
            return False
        newest = [s for s in sessions if self._identities[s] == largest][-1]
        where = f"streams of host {peer}" if peer else f"server's {self.max_actors} seats"
        logging.warning(
            "session %d evicted: its identity held %d of the %s, %s asking in held %d",
            newest, most, where, who.identity, mine,
        )  # fmt: skip
        why = OUTNUMBERED.format(held=most, where=where, fewer=mine)
        self._evict(service, newest, why)
        self.fair_evictions += 1
        return True

    def _evict(self, service, victim: int, why: str) -> None:
        self._forget(victim)
        self._evicted[victim] = why
        self.evictions += 1
        if self.defer_close:
            self._untold.append(victim)
        else:
            service.close_session(victim)

    def take_evicted(self) -> list[tuple[int, str]]:
        """(session, why) of the sessions evicted since the last call (with defer_close)."""
        with self._lock:
            untold, self._untold = self._untold, []
            return [(s, self._evicted[s]) for s in untold if s in self._evicted]

    def touch(self, session_id: int, waiting: bool) -> str | None:
        """A step arrived (waiting: the server now owes the actor an answer) or was answered.
        Returns why the session may not go on (it was evicted), else None."""
        why = self._evicted.get(session_id)
        if why is not None:
            return why
        if session_id in self._idle_since:
            self._idle_since[session_id] = float("inf") if waiting else time.monotonic()
        return None

    def _forget(self, session_id: int) -> None:
        peer = self._sessions.pop(session_id, None)
        self._identities.pop(session_id, None)
        self._idle_since.pop(session_id, None)
        if peer is not None:
            self._peers[peer] -= 1
            if not self._peers[peer]:
                del self._peers[peer]

    def close(self, service, session_id: int) -> None:
        with self._lock:
            if self._evicted.pop(session_id, None) is not None and not self.defer_close:
                return  # closed when it was evicted
            self._forget(session_id)
        service.close_session(session_id)


class LocalBackend:
    """The stream handler's backend when the gRPC event loop runs in the learner process."""

    def __init__(self, service, gate: SessionGate):
        self._service = service
        self._gate = gate
        self.spec = service.spec
        self.max_envs_per_actor = service.max_envs_per_actor

    async def open_session(self, actor_id: int, num_envs: int, peer: Peer) -> Opened:
        return self._gate.open(self._service, actor_id, num_envs, peer)

    def submit(self, session_id: int, rows, decode_s: float):
        why = self._gate.touch(session_id, waiting=True)
        if why is not None:
            raise Refused(grpc.StatusCode.RESOURCE_EXHAUSTED, why)
        self._service.stats.add_busy("decode", decode_s)
        future = asyncio.get_running_loop().create_future()
        # The event loop decodes one step after another, spreading a burst by as much.
        return self._service.submit(session_id, rows, future, spread_s=decode_s)

    def answered(self, session_id: int) -> None:
        self._gate.touch(session_id, waiting=False)

    def close_session(self, session_id: int) -> None:
        self._gate.close(self._service, session_id)

    def level_probs(self):
        return self._service.level_probs()


class InferenceServicer:
    """One actor stream: Hello, then StepBatch -> ActionBatch in lockstep, on the event loop.

    Admission comes before work. With credentials (mutual TLS already checked the client's
    certificate), a stream without the run token ends with UNAUTHENTICATED once its first message
    arrives (taken, never parsed). A stream holds no session slot until its Hello is valid; of the
    streams still waiting for theirs, at most `max_pending` are kept per process and the oldest
    gives way to a newcomer (an honest actor sends its Hello within milliseconds, so streams that
    open and stay silent cannot crowd it out). A stream without a Hello after `hello_timeout_s`, or
    one that leaves the server waiting for its next step longer than `idle_timeout_s`, ends with
    DEADLINE_EXCEEDED (time the server takes to answer does not count). A host with
    `max_streams_per_peer` sessions open already, or a server with every one of its `max_actors`
    slots taken, gives the slot of a session idle for `evict_idle_s` to the newcomer, else refuses
    its Hello with RESOURCE_EXHAUSTED (its actor retries with backoff); see SessionGate.

    Each session is counted as the identity its credentials prove (seedlike.rpc.security); an
    identity in the credentials' revocation list is refused at its Hello, and its open streams end
    at their next step, with PERMISSION_DENIED.
    """

    def __init__(
        self,
        backend,
        limits: codec.Limits,
        hello_timeout_s: float,
        idle_timeout_s: float,
        credentials: Credentials | None,
        max_pending: int,
        trust_actor_ids: bool = False,
    ):
        self._backend = backend
        self._trust_actor_ids = bool(trust_actor_ids)
        self._revoked = security.Revocations(credentials.directory if credentials else "")
        self._limits = limits
        self._hello_timeout_s = hello_timeout_s
        self._idle_timeout_s = idle_timeout_s
        self._credentials = credentials
        self._max_pending = max(int(max_pending), 1)
        # Streams waiting for their Hello, oldest first: a future set when one must give way.
        self._pending: collections.OrderedDict = collections.OrderedDict()
        self.pending_evicted = 0

    async def _hello(self, request_iterator, context):
        """The stream's first message, awaited among the pending streams: when more than
        max_pending wait, the oldest ends with RESOURCE_EXHAUSTED (it held nothing)."""
        loop = asyncio.get_running_loop()
        give_way = loop.create_future()
        key = object()
        self._pending[key] = give_way
        while len(self._pending) > self._max_pending:
            _, oldest = self._pending.popitem(last=False)
            self.pending_evicted += 1
            oldest.set_result(None)
        receive = asyncio.ensure_future(anext(request_iterator, None))
        try:
            done, _ = await asyncio.wait(
                (receive, give_way), timeout=self._hello_timeout_s, return_when="FIRST_COMPLETED"
            )
        finally:
            self._pending.pop(key, None)
        if receive in done:
            return receive.result()
        receive.cancel()
        if give_way in done:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "no Hello yet, and newer streams are waiting for theirs "
                "(server.max_pending_streams)",
            )
        logging.warning("closing a stream: no Hello within %g s", self._hello_timeout_s)
        await context.abort(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            f"no Hello within {self._hello_timeout_s:g} s (server.hello_timeout_s)",
        )

    async def stream(self, request_iterator, context):
        """One actor's stream: its Hello and session (`_open`), the Welcome, then a reply for
        every step (`_steps`). A bad message ends it with INVALID_ARGUMENT naming the field."""
        session_id = None
        try:
            session = await self._open(request_iterator, context)
            if session is None:
                return
            session_id = session.opened.session_id
            yield pb.ServerMessage(
                welcome=pb.Welcome(
                    protocol_version=codec.PROTOCOL_VERSION,
                    session_id=session_id,
                    policy_version=session.opened.policy_version,
                    level_probs=session.opened.level_probs,
                )
            ).SerializeToString()
            async for reply in self._steps(request_iterator, context, session):
                yield reply
        except codec.ProtocolError as e:
            logging.warning("rejecting session %s: %s", session_id, e)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        except ServerStopping as e:
            if not e.finished:
                await context.abort(
                    grpc.StatusCode.UNAVAILABLE, "learner is stopping; reconnect when it is back"
                )
        finally:
            if session_id is not None:
                self._backend.close_session(session_id)

    async def _open(self, request_iterator, context) -> _Stream | None:
        """The stream's token, Hello and identity checked, and its session opened (None: the
        stream ended before its Hello)."""
        backend = self._backend
        if self._credentials is not None and not self._credentials.accepts(
            context.invocation_metadata()
        ):
            # Its Hello is taken first (unread, bounded by the hello timeout and the message
            # size limit): refused while the actor still writes it, the call can end as
            # INTERNAL on the actor's side instead of the refusal it is.
            await self._hello(request_iterator, context)
            await context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                "missing or wrong run token: give the actor the learner's "
                "transport.credentials directory",
            )
        first = await self._hello(request_iterator, context)
        if first is None:
            return None
        hello = codec.parse_actor_message(first)
        if hello.WhichOneof("kind") != "hello":
            raise codec.ProtocolError(
                "request.hello", "the first message of a stream must be a Hello"
            )
        codec.check_hello(hello.hello, backend.spec, backend.max_envs_per_actor)
        host = peer_host(context.peer())
        auth = context.auth_context() if self._credentials is not None else {}
        who = Peer(host, security.identity(auth, host, hello.hello.actor_id, self._trust_actor_ids))
        name = security.certificate_name(auth)
        if name and name in self._revoked:
            await self._refuse_revoked(context, name)
        num_envs = hello.hello.num_envs
        try:
            opened = await backend.open_session(hello.hello.actor_id, num_envs, who)
        except Refused as e:
            await context.abort(e.code, str(e))
        return _Stream(opened, num_envs, codec.stacks_for(hello.hello, backend.spec), name)

    async def _steps(self, request_iterator, context, session: _Stream):
        """The replies to a session's steps, in order, until its actor ends the stream."""
        backend = self._backend
        session_id, name = session.opened.session_id, session.name
        levels_sent = session.opened.levels_version
        sequence = 0
        reader = wire.StepReader()
        while True:
            raw = await _receive(
                request_iterator, context, self._idle_timeout_s, "step", "idle_timeout_s"
            )
            if raw is None:
                return
            if name and name in self._revoked:
                await self._refuse_revoked(context, name)
            start = time.perf_counter()
            step = codec.parse_step(raw, reader)
            if step.sequence != sequence:
                raise codec.ProtocolError(
                    "step.sequence", f"got {step.sequence}, expected {sequence}"
                )
            rows = codec.decode_step(
                step, backend.spec, session.num_envs, self._limits, session.stacks
            )
            try:
                actions, version = await backend.submit(
                    session_id, rows, time.perf_counter() - start
                )
            except Refused as e:  # evicted while it was silent (SessionGate)
                await context.abort(e.code, str(e))
            backend.answered(session_id)
            reply = pb.ActionBatch(
                sequence=sequence, action=codec.encode(actions), policy_version=version
            )
            levels, probs = backend.level_probs()
            if levels != levels_sent:  # the curriculum moved: new episodes draw from these
                reply.level_probs.extend(probs)
                levels_sent = levels
            yield pb.ServerMessage(actions=reply).SerializeToString()
            sequence += 1

    async def _refuse_revoked(self, context, name: str) -> None:
        logging.warning("refusing actor %s: its certificate is revoked", name)
        await context.abort(
            grpc.StatusCode.PERMISSION_DENIED,
            f"the certificate of actor {name} is revoked (transport.credentials/revoked); "
            "this actor may not connect to this run",
        )


@dataclasses.dataclass(frozen=True)
class _Stream:
    """An opened stream: its session, envs, frame stacks and certificate name ("" without)."""

    opened: object  # the backend's Opened
    num_envs: int
    stacks: object
    name: str


def peer_host(peer: str) -> str:
    """The host of a gRPC peer string: 'ipv4:10.0.0.5:4242' -> '10.0.0.5', 'ipv6:[::1]:80' ->
    '[::1]', 'unix:/tmp/s' -> 'unix:/tmp/s'."""
    kind, _, address = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        return address.rpartition(":")[0]
    return peer


# Keepalive, both ways (the actor's half is seedlike.rpc.client.KEEPALIVE_OPTIONS). The server
# pings a connection after 30 s without a frame from it and drops it when no answer comes within
# 20 s: a vanished actor host (power loss, partition) frees its seats within 50 s of its last
# frame (a stream waited on ends at idle_timeout_s anyway). It accepts the actors' pings every
# 5 s or slower, with or without streams open: a learner busy compiling for minutes still answers
# them (gRPC's core does, not our event loop) and never ends a connection with GOAWAY for
# pinging. It closes connections left without streams for 5 minutes.
KEEPALIVE_OPTIONS = [
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 5_000),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.http2.max_ping_strikes", 0),
    ("grpc.max_connection_idle_ms", 300_000),
]


async def _receive(requests, context, timeout_s: float, what: str, setting: str):
    """The stream's next message (None at its end); DEADLINE_EXCEEDED if the client sends
    nothing for `timeout_s`. (asyncio.timeout: no task per message, unlike wait_for.)"""
    try:
        async with asyncio.timeout(timeout_s):
            return await anext(requests, None)
    except TimeoutError:
        logging.warning("closing a stream: no %s within %g s", what, timeout_s)
        await context.abort(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            f"no {what} within {timeout_s:g} s (server.{setting})",
        )


@dataclasses.dataclass(frozen=True)
class Transport:
    """The `server` section's transport settings, read once: what every stream handler needs."""

    limits: codec.Limits
    hello_timeout_s: float
    idle_timeout_s: float
    max_actors: int
    max_streams_per_peer: int
    front_ends: int
    evict_idle_s: float
    max_pending_streams: int
    trust_actor_ids: bool = False

    @classmethod
    def from_config(cls, server_config) -> Transport:
        return cls(
            codec.Limits(
                float(server_config.max_abs_reward),
                float(server_config.max_abs_obs),
            ),
            float(server_config.hello_timeout_s),
            float(server_config.idle_timeout_s),
            int(server_config.max_actors),
            int(server_config.max_streams_per_peer),
            front_ends(int(server_config.front_ends)),
            float(server_config.evict_idle_s),
            int(server_config.max_pending_streams),
            bool(server_config.trust_actor_ids),
        )

    def servicer(self, backend, credentials: Credentials | None) -> InferenceServicer:
        return InferenceServicer(
            backend, self.limits, self.hello_timeout_s, self.idle_timeout_s, credentials,
            self.max_pending_streams, self.trust_actor_ids,
        )  # fmt: skip

    def gate(self, defer_close: bool = False) -> SessionGate:
        return SessionGate(
            self.max_actors, self.max_streams_per_peer, self.evict_idle_s, defer_close
        )


def front_ends(setting: int, cores: int | None = None) -> int:
    """Stream front-end processes for the setting server.front_ends: itself when >= 0 (0: the
    gRPC event loop runs in the learner process), else one per four cores (none below four)."""
    if setting >= 0:
        return setting
    cores = cores or len(os.sched_getaffinity(0)) or 1
    return cores // 4


class RpcServer:
    """A grpc.aio server on an event loop of its own thread: every actor stream is a coroutine
    there, so messages do not hop between a thread per stream and the gRPC poller. It listens on
    a port claimed already (seedlike.rpc.ports), with SO_REUSEPORT."""

    def __init__(
        self,
        servicer: InferenceServicer,
        address: str,
        receive_limit: int,
        credentials: Credentials | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ):
        self._servicer = servicer
        self._credentials = credentials
        self._loop = loop or asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=named("rpc", self._loop.run_forever), name="rpc", daemon=True
        )
        self._thread.start()
        self._server = None
        try:
            self.port = self._run(self._start(address, receive_limit))
        except BaseException:
            self.stop()  # no event loop thread left behind by a port that cannot be bound
            raise

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def _run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def _start(self, address: str, receive_limit: int) -> int:
        # No gRPC limit on concurrent streams: it would count silent and departing ones and turn
        # honest actors away; InferenceServicer and SessionGate bound what streams may hold.
        server = grpc.aio.server(
            options=[
                ("grpc.max_send_message_length", codec.MAX_MESSAGE_BYTES),
                # No more than the largest valid step (codec.max_step_bytes).
                ("grpc.max_receive_message_length", receive_limit),
                ("grpc.so_reuseport", 1),
                *KEEPALIVE_OPTIONS,
            ],
        )
        handler = grpc.method_handlers_generic_handler(
            codec.SERVICE_NAME,
            {"Stream": grpc.stream_stream_rpc_method_handler(self._servicer.stream)},
        )
        server.add_generic_rpc_handlers((handler,))
        if self._credentials is None:
            bound = server.add_insecure_port(address)
        else:
            bound = server.add_secure_port(address, self._credentials.server_credentials())
        if bound == 0:
            raise OSError(f"could not bind the inference server to {address}; is the port in use?")
        await server.start()
        self._server = server
        return bound

    def stop(self, grace_s: float = 0.0) -> None:
        """Ends every stream (after `grace_s` for those still running) and the event loop."""
        if self._server is not None:
            self._run(self._server.stop(grace_s))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)


class LocalServer:
    """server.front_ends = 0: the stream handlers run on an event loop of the learner process."""

    def __init__(self, service, claim: ports.Claim, transport: Transport, credentials):
        self._claim = claim
        self.gate = transport.gate()
        servicer = transport.servicer(LocalBackend(service, self.gate), credentials)
        receive = codec.max_step_bytes(service.spec, service.max_envs_per_actor)
        address = f"{claim.bind}:{claim.port}"
        self._rpc = RpcServer(servicer, address, receive, credentials)
        self.port = claim.port

    def stop(self, grace_s: float = 0.0) -> None:
        try:
            self._rpc.stop(grace_s)
        finally:
            self._claim.release()
