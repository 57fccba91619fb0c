"""Actor side of the wire: one lockstep stream per connection, reconnecting with backoff.

Status handling: a stream that ends with OK means training is over. INVALID_ARGUMENT,
FAILED_PRECONDITION and UNIMPLEMENTED mean this actor is misconfigured (retrying cannot help), so
they raise `Rejected`. Everything else (server not up yet, restarted, overloaded, network) raises
`Disconnected`, which `Backoff` turns into an exponentially growing, jittered wait.
"""

from __future__ import annotations

import queue
import random
import time

import grpc
import numpy as np

from seedlike.rpc import codec
from seedlike.rpc import seedlike_pb2 as pb
from seedlike.rpc.service import CHANNEL_OPTIONS, STREAM_METHOD

FATAL_CODES = frozenset(
    [
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.UNIMPLEMENTED,
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
    if code in FATAL_CODES:
        return Rejected(f"{code.name}: {details}")
    return Disconnected(f"{code.name if code else 'error'}: {details}")


class Connection:
    """An open stream: `step(message) -> ActionBatch`, strictly one reply per request."""

    def __init__(self, address: str, hello: pb.Hello, connect_timeout: float = 5.0):
        self.address = address
        self._channel = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
        try:
            grpc.channel_ready_future(self._channel).result(timeout=connect_timeout)
        except grpc.FutureTimeoutError:
            self._channel.close()
            raise Disconnected(f"no server at {address} after {connect_timeout:.1f}s") from None
        method = self._channel.stream_stream(
            STREAM_METHOD,
            request_serializer=pb.ActorMessage.SerializeToString,
            response_deserializer=pb.ServerMessage.FromString,
        )
        self._requests: queue.Queue = queue.Queue()
        self._call = method(iter(self._requests.get, None))
        self._requests.put(pb.ActorMessage(hello=hello))
        reply = self._next()
        if reply.WhichOneof("kind") != "welcome":
            self.close()
            raise Disconnected("server did not answer the Hello with a Welcome")
        self.welcome = reply.welcome

    def _next(self) -> pb.ServerMessage:
        try:
            return next(self._call)
        except StopIteration:
            raise TrainingOver() from None
        except grpc.RpcError as e:
            raise _translate(e) from None

    def step(self, message: pb.ActorMessage) -> pb.ActionBatch:
        self._requests.put(message)
        reply = self._next()
        if reply.WhichOneof("kind") != "actions":
            raise Disconnected("server answered a StepBatch without actions")
        return reply.actions

    def close(self) -> None:
        self._requests.put(None)
        self._call.cancel()
        self._channel.close()


def decode_actions(batch: pb.ActionBatch, rows: int, num_actions: int) -> np.ndarray:
    actions = codec.decode(batch.action, "actions.action")
    if actions.dtype != np.int32 or actions.shape != (rows,):
        raise Disconnected(
            f"server sent actions {actions.dtype}{list(actions.shape)}, expected int32[{rows}]"
        )
    if rows and (actions.min() < 0 or actions.max() >= num_actions):
        raise Disconnected(f"server sent actions outside [0, {num_actions})")
    return actions


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
