"""Actor side of the wire: one lockstep stream per connection, reconnecting with backoff.

Status handling: a stream that ends with OK means training is over. INVALID_ARGUMENT,
FAILED_PRECONDITION and UNIMPLEMENTED mean this actor is misconfigured (retrying cannot help), so
they raise `Rejected`. Everything else (server not up yet, restarted, overloaded, network) raises
`Disconnected`, which `Backoff` turns into an exponentially growing, jittered wait.
"""

from __future__ import annotations

import asyncio
import random
import time

import grpc
import numpy as np

from seedlike.rpc import codec
from seedlike.rpc import seedlike_pb2 as pb
from seedlike.rpc.security import TOKEN_METADATA, Credentials

FATAL_CODES = frozenset(
    [
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.UNAUTHENTICATED,
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

    A grpc.aio stream on an event loop that this (the actor's) thread drives for each call: a step
    is one write and one read, with no thread of its own to hand messages through.
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
        self._loop = asyncio.new_event_loop()
        self._channel = None
        try:
            self.welcome = self._loop.run_until_complete(self._open(hello, connect_timeout))
        except BaseException:
            self.close()
            raise

    async def _open(self, hello: pb.Hello, connect_timeout: float) -> pb.Welcome:
        metadata = None
        if self._credentials is None:
            self._channel = grpc.aio.insecure_channel(self.address, options=codec.CHANNEL_OPTIONS)
        else:
            self._channel = grpc.aio.secure_channel(
                self.address, self._credentials.channel_credentials(), options=codec.CHANNEL_OPTIONS
            )
            metadata = ((TOKEN_METADATA, self._credentials.token.decode()),)
        try:
            await asyncio.wait_for(self._channel.channel_ready(), connect_timeout)
        except TimeoutError:
            tls = " (or its TLS handshake failed)" if self._credentials is not None else ""
            raise Disconnected(
                f"no server at {self.address} after {connect_timeout:.1f}s{tls}"
            ) from None
        self._call = self._channel.stream_stream(
            codec.STREAM_METHOD, response_deserializer=pb.ServerMessage.FromString
        )(metadata=metadata)
        reply = await self._exchange(pb.ActorMessage(hello=hello).SerializeToString())
        if reply.WhichOneof("kind") != "welcome":
            raise Disconnected("server did not answer the Hello with a Welcome")
        return reply.welcome

    async def _exchange(self, data: bytes) -> pb.ServerMessage:
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
        data = message if isinstance(message, bytes) else message.SerializeToString()
        reply = self._loop.run_until_complete(self._exchange(data))
        if reply.WhichOneof("kind") != "actions":
            raise Disconnected("server answered a StepBatch without actions")
        return reply.actions

    def close(self) -> None:
        if self._loop.is_closed():
            return
        if self._channel is not None:
            self._loop.run_until_complete(self._channel.close())
        self._loop.close()


def decode_actions(batch: pb.ActionBatch, rows: int, num_actions: int) -> np.ndarray:
    actions = codec.decode(batch.action, "actions.action")
    if actions.dtype != np.int32 or actions.shape != (rows,):
        raise Disconnected(
            f"server sent actions {actions.dtype}{list(actions.shape)}, expected int32[{rows}]"
        )
    if rows and (actions.min() < 0 or actions.max() >= num_actions):
        raise Disconnected(f"server sent actions outside [0, {num_actions})")
    return actions


def decode_level_probs(message, num_levels: int):
    """The level probabilities a Welcome or ActionBatch carries (None when it has none)."""
    if not message.level_probs:
        return None
    p = np.asarray(message.level_probs, np.float64)
    if p.shape != (num_levels,) or not np.all(np.isfinite(p)) or p.min() < 0 or p.sum() <= 0:
        raise Disconnected(
            f"server sent level probabilities {p.tolist()}, not a distribution over this "
            f"actor's {num_levels} env.levels"
        )
    return p / p.sum()


class Backoff:
    """Exponential backoff with full jitter; gives up after `give_up_s` without success."""

    def __init__(
        self, initial_s: float = 0.1, max_s: float = 5.0, give_up_s: float = 300.0, seed=None
    ):
        self.initial_s, self.max_s, self.give_up_s = initial_s, max_s, give_up_s
        self._rng = random.Random(seed)
        self.reset()

    def reset(self) -> None:
        self._delay = self.initial_s
        self._failing_since = None

    def wait(self) -> bool:
        """Sleeps before the next attempt; False when it is time to give up."""
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = now
        if now - self._failing_since > self.give_up_s:
            return False
        time.sleep(self._rng.uniform(0.5, 1.0) * self._delay)
        self._delay = min(self._delay * 2.0, self.max_s)
        return True
