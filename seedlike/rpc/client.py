"""Actor side of the wire: one lockstep stream per connection, reconnecting with backoff.

Status handling: a stream that ends with OK means training is over. INVALID_ARGUMENT,
FAILED_PRECONDITION, UNIMPLEMENTED, UNAUTHENTICATED and PERMISSION_DENIED (FATAL_CODES) mean this
actor is misconfigured or revoked (retrying cannot help), so they raise `Rejected`. Everything else
(server not up yet, restarted, overloaded, network) raises `Disconnected`, which `Backoff` turns
into an exponentially growing, jittered wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import threading
import time

import grpc
import numpy as np

from seedlike.rpc import codec, security
from seedlike.rpc import seedlike_pb2 as pb
from seedlike.rpc.security import TOKEN_METADATA, Credentials

FATAL_CODES = frozenset(
    [
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,  # a revoked certificate
    ]
)


class TrainingOver(Exception):
    """The server closed the stream normally."""


class Disconnected(Exception):
    """The connection failed or broke; reconnecting may help."""


class Rejected(Exception):
    """The server refused this actor's messages; the message says why."""


def _translate(error: grpc.RpcError) -> Exception:
    code = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else str(error)
    return _translate_status(code, details)


def _translate_status(code, details) -> Exception:
    if code in FATAL_CODES:
        return Rejected(f"{code.name}: {details}")
    return Disconnected(f"{code.name if code else 'error'}: {details}")


class Connection:
    """An open stream: `step(message) -> ActionBatch`, strictly one reply per request.

    A grpc.aio stream on the calling thread's event loop (one per thread, reused by every
    connection: grpc.aio keeps state on its loop, and a loop closed under it logs tracebacks),
    which this thread drives for each call: a step is one write and one read, with no thread of
    its own to hand messages through.

    Connecting fails fast and says why: a host name that does not resolve, nothing accepting
    connections at the address (or a failed TLS handshake), or no answer within `connect_timeout`.
    """

    def __init__(
        self,
        address: str,
        hello: pb.Hello,
        connect_timeout: float = 5.0,
        credentials: Credentials | None = None,
    ):
        self.address = address
        self._credentials = credentials
        self._loop = _thread_loop()
        self._channel = None
        try:
            self.welcome = self._loop.run_until_complete(self._open(hello, connect_timeout))
        except BaseException:
            self.close()
            raise

    async def _open(self, hello: pb.Hello, connect_timeout: float) -> pb.Welcome:
        _resolve_host(self.address)
        metadata = None
        if self._credentials is None:
            self._channel = grpc.aio.insecure_channel(self.address, options=CHANNEL_OPTIONS)
        else:
            self._channel = grpc.aio.secure_channel(
                self.address, self._credentials.channel_credentials(), options=CHANNEL_OPTIONS
            )
            metadata = ((TOKEN_METADATA, self._credentials.token.decode()),)
        try:
            async with asyncio.timeout(connect_timeout):
                await self._ready()
        except TimeoutError:
            raise Disconnected(
                f"no answer from {self.address} within {connect_timeout:g} s"
            ) from None
        self._call = self._channel.stream_stream(
            codec.STREAM_METHOD, response_deserializer=pb.ServerMessage.FromString
        )(metadata=metadata)
        reply = await self.exchange(pb.ActorMessage(hello=hello).SerializeToString())
        if reply.WhichOneof("kind") != "welcome":
            raise Disconnected("server did not answer the Hello with a Welcome")
        return reply.welcome

    async def _ready(self) -> None:
        """Waits until the channel is connected; a failed attempt is a Disconnected at once
        (gRPC itself would keep retrying it until the timeout)."""
        state = self._channel.get_state(try_to_connect=True)
        while state != grpc.ChannelConnectivity.READY:
            if state == grpc.ChannelConnectivity.TRANSIENT_FAILURE:
                host, port = _host_port(self.address)
                if self._credentials is None:
                    tls = await asyncio.get_running_loop().run_in_executor(
                        None, security.speaks_tls, host, int(port)
                    )
                    if tls:
                        raise Rejected(
                            f"the learner at {self.address} speaks TLS only: give this actor the "
                            "run's credentials (--config.transport.credentials=DIR, from "
                            "scripts/make_credentials.sh)"
                        )
                    raise Disconnected(f"nothing accepts connections at {self.address}")
                tls = await asyncio.get_running_loop().run_in_executor(
                    None, security.tls_failure, host, int(port), self._credentials
                )
                if tls is not None:
                    raise Rejected(
                        f"TLS with {self.address} failed, {tls}: the learner and its actors need "
                        "credentials from one scripts/make_credentials.sh directory, made for "
                        "the host name the actors connect to"
                    )
                raise Disconnected(f"nothing accepts connections at {self.address}")
            await self._channel.wait_for_state_change(state)
            state = self._channel.get_state(try_to_connect=True)

    async def exchange(self, data: bytes) -> pb.ServerMessage:
        """One request and its reply, from a coroutine on this thread's loop."""
        try:
            await self._call.write(data)
            reply = await self._call.read()
        except grpc.RpcError as e:
            raise _translate(e) from None
        except asyncio.InvalidStateError:  # the server ended the stream: its status says why
            reply = grpc.aio.EOF
        if reply is grpc.aio.EOF:
            code = await self._call.code()
            if code == grpc.StatusCode.OK:
                raise TrainingOver()
            raise _translate_status(code, await self._call.details())
        return reply

    def step(self, message: pb.ActorMessage | bytes) -> pb.ActionBatch:
        return step_all([self], [message])[0]

    def close(self) -> None:
        if self._channel is not None:
            channel, self._channel = self._channel, None
            self._loop.run_until_complete(channel.close())


def run(coroutine):
    """Runs a coroutine that exchanges on this thread's connections, on their one event loop. An
    exception that ends the wait (a second Ctrl-C's SystemExit) cancels it: left pending, it
    would resume at the loop's next use (closing the connections) with its env closed."""
    loop = _thread_loop()
    task = loop.create_task(coroutine)
    try:
        return loop.run_until_complete(task)
    except BaseException:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                loop.run_until_complete(task)
        raise


def step_all(connections: list[Connection], messages: list) -> list[pb.ActionBatch]:
    """One step on each of several streams (a population's actor, one stream per learner), from
    outside their event loop (every connection of a thread runs on the thread's one loop)."""
    return connections[0]._loop.run_until_complete(exchange_all(connections, messages))


async def exchange_all(connections: list[Connection], messages: list) -> list[pb.ActionBatch]:
    """step_all from a coroutine on the connections' loop: an actor runs its whole loop as one
    coroutine, which saves starting the loop for every step (about 45 us of CPU a step;
    benchmarks/actor_overhead.py). Every request is written before any reply is awaited, so the
    learners work on them together and the step lasts the slowest round trip rather than their
    sum. The first failure, if any, is raised once every stream has answered or failed."""
    data = [m if isinstance(m, bytes) else m.SerializeToString() for m in messages]
    if len(connections) == 1:  # every actor's step: no gather around it
        replies = [await connections[0].exchange(data[0])]
    else:
        exchanges = [c.exchange(d) for c, d in zip(connections, data)]
        replies = await asyncio.gather(*exchanges, return_exceptions=True)
    for reply in replies:
        if isinstance(reply, BaseException):
            raise reply
        if reply.WhichOneof("kind") != "actions":
            raise Disconnected("server answered a StepBatch without actions")
    return [reply.actions for reply in replies]


# The actor's half of keepalive (the server's: seedlike.rpc.streams.KEEPALIVE_OPTIONS): a ping
# every 10 s, with or without data in between, and the connection declared dead when one is not
# answered within 10 s. A learner host that vanishes (power loss, partition: no reset ever
# arrives) fails the step in flight within 20 s of the last frame, and the actor reconnects with
# backoff or, after actor.give_up_s, exits saying so. A learner that computes for minutes (a
# first compile) still answers pings: gRPC's core does, not the code that computes.
KEEPALIVE_OPTIONS = [
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]
# A channel of its own per connection: gRPC would otherwise share one connection among the
# channels of a process with the same target (a population's actor, tests with many actors).
# No retries: gRPC keeps a copy of every message of a call it may retry, and a broken stream is
# the actor's to reconnect anyway (about 10% of a step's gRPC CPU; benchmarks/actor_overhead.py).
CHANNEL_OPTIONS = [
    *codec.CHANNEL_OPTIONS,
    *KEEPALIVE_OPTIONS,
    ("grpc.enable_retries", 0),
    ("grpc.use_local_subchannel_pool", 1),
]
_LOOPS = threading.local()


def _thread_loop() -> asyncio.AbstractEventLoop:
    loop = getattr(_LOOPS, "loop", None)
    if loop is None or loop.is_closed():
        loop = _LOOPS.loop = asyncio.new_event_loop()
    return loop


def _host_port(address: str) -> tuple[str, str]:
    """ "host:port" or "[v6]:port" -> (host, port)."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), port


def _resolve_host(address: str) -> None:
    """Raises Disconnected naming a host name that does not resolve (gRPC would only time out)."""
    host, port = _host_port(address)
    try:
        socket.getaddrinfo(host, int(port) if port.isdigit() else None, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise Disconnected(f"cannot resolve host {host!r} ({e.strerror})") from None


def decode_actions(batch: pb.ActionBatch, rows: int, spec) -> np.ndarray:
    """The actions of a reply, checked against the EnvSpec: int32 [rows] in [0, num_actions), or
    float32 [rows, K] (EnvSpec.action_spec) with finite values and in-range discrete digits. A
    reply that fails is refused (Disconnected): nothing of it reaches an env."""
    actions = codec.decode(batch.action, "actions.action")
    want = spec.action_spec
    if actions.dtype != want.dtype or actions.shape != (rows, *want.shape):
        raise Disconnected(
            f"server sent actions {actions.dtype}{list(actions.shape)}, expected "
            f"{want.dtype.name}{[rows, *want.shape]}"
        )
    if not rows:
        return actions
    if not spec.continuous:
        if actions.min() < 0 or actions.max() >= spec.num_actions:
            raise Disconnected(f"server sent actions outside [0, {spec.num_actions})")
        return actions
    if not np.isfinite(actions).all():
        raise Disconnected("server sent NaN or infinite actions; refused before any env step")
    digits = actions[:, : len(spec.head_sizes)]
    sizes = np.asarray(spec.head_sizes, np.float32)
    if digits.size and (
        (digits < 0).any() or (digits >= sizes).any() or (digits != np.rint(digits)).any()
    ):
        raise Disconnected(f"server sent discrete arguments outside {list(spec.head_sizes)}")
    return actions


def decode_level_probs(message, num_levels: int):
    """The level probabilities a Welcome or ActionBatch carries (None when it has none)."""
    if not message.level_probs:
        return None
    p = np.asarray(message.level_probs, np.float64)
    if p.shape != (num_levels,):  # the two sides' configs differ: reconnecting cannot help
        raise Rejected(
            f"server sent probabilities of {p.size} levels, this actor has {num_levels} "
            "env.levels; start the actor with the same --config as the learner"
        )
    if not np.all(np.isfinite(p)) or p.min() < 0 or p.sum() <= 0:
        raise Disconnected(
            f"server sent level probabilities {p.tolist()}, not a distribution over this "
            f"actor's {num_levels} env.levels"
        )
    return p / p.sum()


class Backoff:
    """Exponential backoff with full jitter; gives up after `give_up_s` without success."""

    def __init__(
        self,
        initial_s: float,
        max_s: float,
        give_up_s: float,
        seed=None,
        sleep=None,
    ):
        """`sleep(seconds)`: how to wait (e.g. a stop event's wait, so that a stop ends it);
        default time.sleep."""
        self.initial_s, self.max_s, self.give_up_s = initial_s, max_s, give_up_s
        self._rng = random.Random(seed)
        self._sleep = sleep
        self.reset()

    def reset(self) -> None:
        self._delay = self.initial_s
        self._failing_since = None

    def wait(self) -> bool:
        """Sleeps before the next attempt (never past the deadline); False when it is time to
        give up."""
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = now
        left = self._failing_since + self.give_up_s - now
        if left <= 0:
            return False
        (self._sleep or time.sleep)(min(self._rng.uniform(0.5, 1.0) * self._delay, left))
        self._delay = min(self._delay * 2.0, self.max_s)
        return True
