"""gRPC transport for the inference service: a thin shell that parses, validates and forwards.

Requests are received as raw bytes and parsed here (not by gRPC), so that garbage, unknown fields
and bad tensors all end the offending stream with INVALID_ARGUMENT and a message naming the field,
while every other actor's stream keeps going.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time

import grpc

from seedlike.rpc import codec, wire
from seedlike.rpc import seedlike_pb2 as pb
from seedlike.rpc.security import Credentials, check_bind
from seedlike.server.inference import InferenceService, ServerStopping


class InferenceServicer:
    """One actor stream: Hello, then StepBatch -> ActionBatch in lockstep, on the event loop.

    With credentials (mutual TLS already checked the client's certificate), a stream without the
    run token ends with UNAUTHENTICATED before its Hello is parsed. A stream without a Hello after
    `hello_timeout_s`, or one that leaves the server waiting for its next step longer than
    `idle_timeout_s`, ends with DEADLINE_EXCEEDED (time the server takes to answer does not count).
    A host with `max_streams_per_peer` streams open already has its next one refused with
    RESOURCE_EXHAUSTED once that stream's first message arrives (its actor retries with backoff),
    so one machine cannot take every slot of `server.max_actors`.
    """

    def __init__(
        self,
        service: InferenceService,
        limits: codec.Limits,
        hello_timeout_s: float,
        idle_timeout_s: float,
        max_streams_per_peer: int,
        credentials: Credentials | None = None,
    ):
        self._service = service
        self._limits = limits
        self._hello_timeout_s = hello_timeout_s
        self._idle_timeout_s = idle_timeout_s
        self._max_per_peer = max_streams_per_peer
        self._credentials = credentials
        self._streams_per_peer: collections.Counter = collections.Counter()  # on the event loop

    async def stream(self, request_iterator, context):
        service = self._service
        session_id = None
        peer = peer_host(context.peer())
        self._streams_per_peer[peer] += 1
        try:
            first = await _receive(
                request_iterator, context, self._hello_timeout_s, "Hello", "hello_timeout_s"
            )
            if first is None:
                return
            if self._streams_per_peer[peer] > self._max_per_peer:
                await context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"{peer} has {self._max_per_peer} streams open already "
                    "(server.max_streams_per_peer); raise it for more actors on one host",
                )
            # Checked once the Hello has arrived, not before: an abort that races the client's
            # first write reaches it as a bare INTERNAL error instead of this status.
            if self._credentials is not None and not self._credentials.accepts(
                context.invocation_metadata()
            ):
                await context.abort(
                    grpc.StatusCode.UNAUTHENTICATED,
                    "missing or wrong run token: give the actor the learner's "
                    "transport.credentials directory",
                )
            hello = codec.parse_actor_message(first)
            if hello.WhichOneof("kind") != "hello":
                raise codec.ProtocolError(
                    "request.hello", "the first message of a stream must be a Hello"
                )
            codec.check_hello(hello.hello, service.spec, service.max_envs_per_actor)
            num_envs = hello.hello.num_envs
            session_id = service.open_session(hello.hello.actor_id, num_envs)
            levels_sent, probs = service.level_probs()
            yield pb.ServerMessage(
                welcome=pb.Welcome(
                    protocol_version=codec.PROTOCOL_VERSION,
                    session_id=session_id,
                    policy_version=service.registry.version,
                    level_probs=probs,
                )
            ).SerializeToString()
            sequence = 0
            reader = wire.StepReader()
            while True:
                raw = await _receive(
                    request_iterator, context, self._idle_timeout_s, "step", "idle_timeout_s"
                )
                if raw is None:
                    break
                start = time.perf_counter()
                step = codec.parse_step(raw, reader)
                if step.sequence != sequence:
                    raise codec.ProtocolError(
                        "step.sequence", f"got {step.sequence}, expected {sequence}"
                    )
                rows = codec.decode_step(step, service.spec, num_envs, self._limits)
                service.stats.add_busy("decode", time.perf_counter() - start)
                future = asyncio.get_running_loop().create_future()
                actions, version = await service.submit(session_id, rows, future)
                reply = pb.ActionBatch(
                    sequence=sequence, action=codec.encode(actions), policy_version=version
                )
                levels, probs = service.level_probs()
                if levels != levels_sent:  # the curriculum moved: new episodes draw from these
                    reply.level_probs.extend(probs)
                    levels_sent = levels
                yield pb.ServerMessage(actions=reply).SerializeToString()
                sequence += 1
        except codec.ProtocolError as e:
            logging.warning("rejecting session %s: %s", session_id, e)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        except ServerStopping as e:
            if not e.finished:
                await context.abort(
                    grpc.StatusCode.UNAVAILABLE, "learner is stopping; reconnect when it is back"
                )
        finally:
            self._streams_per_peer[peer] -= 1
            if not self._streams_per_peer[peer]:
                del self._streams_per_peer[peer]
            if session_id is not None:
                service.close_session(session_id)


def peer_host(peer: str) -> str:
    """The host of a gRPC peer string: 'ipv4:10.0.0.5:4242' -> '10.0.0.5', 'ipv6:[::1]:80' ->
    '[::1]', 'unix:/tmp/s' -> 'unix:/tmp/s'."""
    kind, _, address = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        return address.rpartition(":")[0]
    return peer


# Pings every connection after a minute without traffic and drops it if no answer comes in 20 s
# (a vanished actor host), and closes connections left without streams for 5 minutes.
KEEPALIVE_OPTIONS = [
    ("grpc.keepalive_time_ms", 60_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.max_connection_idle_ms", 300_000),
]


async def _receive(requests, context, timeout_s: float, what: str, setting: str):
    """The stream's next message (None at its end); DEADLINE_EXCEEDED if the client sends
    nothing for `timeout_s`. (asyncio.timeout costs ~6 us a message; wait_for ~19.)"""
    try:
        async with asyncio.timeout(timeout_s):
            return await anext(requests, None)
    except TimeoutError:
        logging.warning("closing a stream: no %s within %g s", what, timeout_s)
        await context.abort(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            f"no {what} within {timeout_s:g} s (server.{setting})",
        )


class RpcServer:
    """A grpc.aio server on an event loop of its own thread: every actor stream is a coroutine
    there, so messages do not hop between a thread per stream and the gRPC poller.

    Reads the transport settings of the config's `server` section once: max_actors (concurrent
    streams), max_streams_per_peer, max_abs_reward / max_abs_obs (value bounds), hello_timeout_s
    and idle_timeout_s.
    """

    def __init__(
        self,
        service: InferenceService,
        bind: str,
        port: int,
        server_config,
        credentials: Credentials | None = None,
    ):
        check_bind(bind, credentials)
        self._servicer = InferenceServicer(
            service,
            codec.Limits(
                float(server_config.get("max_abs_reward", 1e6)),
                float(server_config.get("max_abs_obs", 1e6)),
            ),
            float(server_config.get("hello_timeout_s", 10.0)),
            float(server_config.get("idle_timeout_s", 60.0)),
            int(server_config.get("max_streams_per_peer", 32)),
            credentials,
        )
        self._credentials = credentials
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rpc", daemon=True)
        self._thread.start()
        self._server = None
        try:
            self.port = self._run(
                self._start(service, f"{bind}:{port}", int(server_config.max_actors))
            )
        except BaseException:
            self.stop()  # no event loop thread left behind by a port that cannot be bound
            raise

    def _run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def _start(self, service, address: str, max_actors: int) -> int:
        # Receive no more than the largest valid step (codec.max_step_bytes).
        receive = codec.max_step_bytes(service.spec, service.max_envs_per_actor)
        server = grpc.aio.server(
            maximum_concurrent_rpcs=max_actors,
            options=[
                ("grpc.max_send_message_length", codec.MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", receive),
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


def serve(
    service: InferenceService,
    bind: str,
    port: int,
    server_config,
    credentials: Credentials | None = None,
) -> tuple[RpcServer, int]:
    """Starts a gRPC server for `service` with the transport settings of `server_config` (the
    config's `server` section); returns it and the bound port (useful with port=0).

    Plaintext without credentials, which only a loopback `bind` allows (seedlike.rpc.security).
    """
    server = RpcServer(service, bind, port, server_config, credentials)
    return server, server.port
