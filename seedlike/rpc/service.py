"""gRPC transport for the inference service: a thin shell that parses, validates and forwards.

Requests are received as raw bytes and parsed here (not by gRPC), so that garbage, unknown fields
and bad tensors all end the offending stream with INVALID_ARGUMENT and a message naming the field,
while every other actor's stream keeps going.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time

import grpc

from seedlike.rpc import codec
from seedlike.rpc import seedlike_pb2 as pb
from seedlike.server.inference import InferenceService, ServerStopping

SERVICE_NAME = "seedlike.Inference"
STREAM_METHOD = f"/{SERVICE_NAME}/Stream"
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]


class InferenceServicer:
    def __init__(self, service: InferenceService):
        self._service = service

    def stream(self, request_iterator, context):
        session_id = None
        try:
            first = next(request_iterator, None)
            if first is None:
                return
            hello = codec.parse_actor_message(first)
            if hello.WhichOneof("kind") != "hello":
                raise codec.ProtocolError(
                    "request.hello", "the first message of a stream must be a Hello"
                )
            service = self._service
            codec.check_hello(hello.hello, service.spec, service.max_envs_per_actor)
            num_envs = hello.hello.num_envs
            session_id = service.open_session(hello.hello.actor_id, num_envs)
            yield pb.ServerMessage(
                welcome=pb.Welcome(
                    protocol_version=codec.PROTOCOL_VERSION,
                    session_id=session_id,
                    policy_version=service.registry.version,
                )
            ).SerializeToString()
            for sequence, raw in enumerate(request_iterator):
                start = time.perf_counter()
                msg = codec.parse_actor_message(raw)
                if msg.WhichOneof("kind") != "step":
                    raise codec.ProtocolError(
                        "request.step", "expected a StepBatch after the Hello"
                    )
                if msg.step.sequence != sequence:
                    raise codec.ProtocolError(
                        "step.sequence", f"got {msg.step.sequence}, expected {sequence}"
                    )
                rows = codec.decode_step(msg.step, service.spec, num_envs)
                service.stats.add_busy("decode", time.perf_counter() - start)
                actions, version = service.result(service.submit(session_id, rows))
                yield pb.ServerMessage(
                    actions=pb.ActionBatch(
                        sequence=sequence, action=codec.encode(actions), policy_version=version
                    )
                ).SerializeToString()
        except codec.ProtocolError as e:
            logging.warning("rejecting session %s: %s", session_id, e)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        except ServerStopping as e:
            if not e.finished:
                context.abort(
                    grpc.StatusCode.UNAVAILABLE, "learner is stopping; reconnect when it is back"
                )
        finally:
            if session_id is not None:
                self._service.close_session(session_id)


def serve(
    service: InferenceService, bind: str, port: int, max_actors: int
) -> tuple[grpc.Server, int]:
    """Starts a gRPC server for `service`; returns it and the bound port (useful with port=0)."""
    server = grpc.server(
        concurrent.futures.ThreadPoolExecutor(max_workers=max_actors + 4, thread_name_prefix="rpc"),
        maximum_concurrent_rpcs=max_actors,
        options=CHANNEL_OPTIONS,
    )
    handler = grpc.method_handlers_generic_handler(
        SERVICE_NAME,
        {"Stream": grpc.stream_stream_rpc_method_handler(InferenceServicer(service).stream)},
    )
    server.add_generic_rpc_handlers((handler,))
    bound = server.add_insecure_port(f"{bind}:{port}")
    if bound == 0:
        raise OSError(f"could not bind the inference server to {bind}:{port}; is the port in use?")
    server.start()
    return server, bound
