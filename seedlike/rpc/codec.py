"""Tensor encoding and validation of every message that crosses the wire.

Decoding never trusts the sender: dtypes come from an allow-list, sizes are checked against the
byte count before any reshape, and every error names the offending field so the actor's author can
fix it. Errors are raised as ProtocolError; the service turns them into INVALID_ARGUMENT.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from google.protobuf import message as pb_message
from google.protobuf import unknown_fields

from seedlike.rpc import frames, wire
from seedlike.rpc import seedlike_pb2 as pb
from seedlike.types import ArraySpec, EnvSpec, Rows

# Bump when a message changes meaning; the handshake refuses other versions.
PROTOCOL_VERSION = 1
SERVICE_NAME = "seedlike.Inference"
STREAM_METHOD = f"/{SERVICE_NAME}/Stream"
# Every message is bounded; a bigger one ends its stream (RESOURCE_EXHAUSTED) before it is parsed.
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]
# Tensor dimensions beyond this are refused before any arithmetic on the shape: with a zero
# elsewhere, 2**62 x 2**62 x 0 claims zero bytes and would only fail inside numpy.
MAX_DIM = 2**31 - 1
# Protobuf framing of a StepBatch (tags, lengths, dtype names, shapes) and the Hello: generous.
FRAMING_BYTES = 64 * 1024

ALLOWED_DTYPES = frozenset(
    [
        "bool",
        "uint8",
        "int8",
        "uint16",
        "int16",
        "int32",
        "uint32",
        "int64",
        "float16",
        "float32",
        "float64",
    ]
)


_DTYPES = {name: np.dtype(name) for name in ALLOWED_DTYPES}


class ProtocolError(ValueError):
    """A message violates the protocol. `field` names the offending field, e.g. 'step.reward'."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}")
        self.field = field


def encode(array: np.ndarray) -> pb.Tensor:
    array = np.asarray(array, order="C")  # (ascontiguousarray would turn a 0-d array into 1-d)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return pb.Tensor(dtype=array.dtype.name, shape=array.shape, data=array.tobytes())


def decode(tensor: pb.Tensor, field: str) -> np.ndarray:
    """Decodes a Tensor into a read-only numpy view of its bytes."""
    dtype = _DTYPES.get(tensor.dtype)
    if dtype is None:
        raise ProtocolError(field, f"dtype {tensor.dtype!r} is not one of {sorted(ALLOWED_DTYPES)}")
    shape = tuple(tensor.shape)
    if shape and (min(shape) < 0 or max(shape) > MAX_DIM):
        raise ProtocolError(field, f"dimension out of [0, {MAX_DIM}] in shape {list(shape)}")
    data = tensor.data  # each access of a bytes field copies it
    expected = math.prod(shape) * dtype.itemsize
    if expected != len(data):
        raise ProtocolError(
            field, f"shape {list(shape)} of {dtype.name} needs {expected} bytes, got {len(data)}"
        )
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def max_step_bytes(spec: EnvSpec, max_envs: int) -> int:
    """The largest valid StepBatch: every row of `max_envs` envs x players with all its tensors.

    The server's receive limit, so a message that cannot be valid is refused before it is
    buffered (against a flat limit, a few concurrent huge messages multiply the learner's memory).
    """
    arrays = (*spec.observation.values(), *spec.extras.values())
    per_row = sum(math.prod(a.shape) * np.dtype(a.dtype).itemsize for a in arrays)
    per_row += 4 + 4 + 4 + 4  # reward f32, env_id i32, player_id i32, four bool flags
    rows = int(max_envs) * int(spec.num_players)
    return min(rows * per_row + FRAMING_BYTES, MAX_MESSAGE_BYTES)


def spec_to_proto(name: str, spec: ArraySpec) -> pb.TensorSpec:
    return pb.TensorSpec(name=name, dtype=spec.dtype.name, shape=spec.shape)


def parse_actor_message(data: bytes) -> pb.ActorMessage:
    """Parses raw request bytes; garbage and unknown fields are protocol errors."""
    msg = pb.ActorMessage()
    try:
        msg.ParseFromString(data)
    except pb_message.DecodeError as e:
        raise ProtocolError(
            "request",
            f"not a seedlike.ActorMessage ({e}); is the client speaking protocol "
            f"version {PROTOCOL_VERSION}?",
        ) from None
    # A walk over the parsed messages. Comparing ByteSize() with the bytes received would be
    # simpler, but upb computes it by re-encoding the whole message with the interpreter lock
    # held, ten times the walk's cost (RESULTS.md, "Serving capacity").
    _reject_unknown_fields(msg, "request")
    return msg


def parse_step(data: bytes, reader: wire.StepReader | None = None):
    """The StepBatch of a step request (any request after the Hello). The common shape is read
    in place (seedlike.rpc.wire: observations stay views of `data`; `reader`: the stream's, which
    knows its previous step); anything else is parsed by protobuf, whose checks say what is
    wrong with it."""
    step = reader.read(data) if reader is not None else wire.read_step(data)
    if step is not None:
        return step
    msg = parse_actor_message(data)
    if msg.WhichOneof("kind") != "step":
        raise ProtocolError("request.step", "expected a StepBatch after the Hello")
    return msg.step


def _reject_unknown_fields(msg: pb_message.Message, path: str) -> None:
    unknown = unknown_fields.UnknownFieldSet(msg)
    if len(unknown):
        numbers = sorted({f.field_number for f in unknown})
        raise ProtocolError(
            path,
            f"unknown field number(s) {numbers}; client and server disagree on the protocol "
            f"(server speaks version {PROTOCOL_VERSION})",
        )
    for descriptor, value in msg.ListFields():
        if descriptor.message_type is None:
            continue
        name = f"{path}.{descriptor.name}"
        if descriptor.message_type.GetOptions().map_entry:
            for key, item in value.items():
                if isinstance(item, pb_message.Message):
                    _reject_unknown_fields(item, f"{name}[{key!r}]")
        elif descriptor.is_repeated:
            for i, item in enumerate(value):
                _reject_unknown_fields(item, f"{name}[{i}]")
        else:
            _reject_unknown_fields(value, name)


def make_hello(
    spec: EnvSpec, actor_id: int, num_envs: int, stacked: tuple[str, ...] = ()
) -> pb.Hello:
    """`stacked`: observation keys this stream may send as newest frames (seedlike.rpc.frames)."""
    return pb.Hello(
        protocol_version=PROTOCOL_VERSION,
        actor_id=actor_id,
        env_name=spec.name,
        observation=[spec_to_proto(k, v) for k, v in spec.observation.items()],
        num_actions=spec.num_actions,
        num_envs=num_envs,
        num_players=spec.num_players,
        extras=[spec_to_proto(k, v) for k, v in spec.extras.items()],
        action_heads=spec.action_heads,
        action_low=spec.action_low,
        action_high=spec.action_high,
        stacked_observation=stacked,
    )


def check_hello(hello: pb.Hello, spec: EnvSpec, max_envs: int) -> None:
    """Raises ProtocolError unless the actor runs the environment the server was configured for."""
    if hello.protocol_version != PROTOCOL_VERSION:
        raise ProtocolError(
            "hello.protocol_version",
            f"actor speaks version {hello.protocol_version}, server speaks {PROTOCOL_VERSION}; "
            "run actor and learner from the same seedlike release",
        )
    hint = "start the actor with the same --config as the learner"
    if hello.env_name != spec.name:
        raise ProtocolError(
            "hello.env_name", f"actor runs {hello.env_name!r}, server trains {spec.name!r}; {hint}"
        )
    _check_specs("hello.observation", hello.observation, spec.observation, hint)
    _check_specs("hello.extras", hello.extras, spec.extras, hint)
    if hello.num_actions != spec.num_actions:
        raise ProtocolError(
            "hello.num_actions", f"actor has {hello.num_actions}, server {spec.num_actions}; {hint}"
        )
    if tuple(hello.action_heads) != spec.action_heads:
        raise ProtocolError(
            "hello.action_heads",
            f"actor has {tuple(hello.action_heads)}, server {spec.action_heads}; {hint}",
        )
    # float32 on the wire: compared as float32, so an infinite bound matches itself.
    for name, got, want in (
        ("hello.action_low", hello.action_low, spec.action_low),
        ("hello.action_high", hello.action_high, spec.action_high),
    ):
        if not np.array_equal(np.float32(list(got)), np.float32(list(want))):
            raise ProtocolError(name, f"actor has {list(got)}, server {list(want)}; {hint}")
    if hello.num_players != spec.num_players:
        raise ProtocolError(
            "hello.num_players", f"actor has {hello.num_players}, server {spec.num_players}; {hint}"
        )
    if not 0 < hello.num_envs <= max_envs:
        raise ProtocolError(
            "hello.num_envs",
            f"{hello.num_envs} is outside [1, {max_envs}]; raise server.max_envs_per_actor",
        )
    stacked = list(hello.stacked_observation)
    for key in stacked:
        if key not in spec.observation or not frames.stackable(spec.observation[key]):
            raise ProtocolError(
                "hello.stacked_observation",
                f"{key!r} is not an observation key with a stack dimension first "
                f"(keys: {sorted(spec.observation)}); set actor.stack_once to 'auto' or ''",
            )
    if len(set(stacked)) != len(stacked):
        raise ProtocolError("hello.stacked_observation", f"a key appears twice in {stacked}")


def stacks_for(hello: pb.Hello, spec: EnvSpec) -> frames.Stacks | None:
    """The stream's frame stacks if its (checked) Hello listed stacked keys."""
    keys = tuple(hello.stacked_observation)
    return frames.Stacks(spec, keys, hello.num_envs) if keys else None


def _check_specs(field: str, got, expected: dict[str, ArraySpec], hint: str) -> None:
    got_specs = {}
    for s in got:
        # Looked up, not parsed: numpy reads any string as a dtype, and some raise ValueError.
        if s.dtype not in _DTYPES:
            raise ProtocolError(
                f"{field}[{s.name!r}].dtype",
                f"unknown dtype {s.dtype!r}, expected one of {sorted(ALLOWED_DTYPES)}",
            )
        got_specs[s.name] = ArraySpec(_DTYPES[s.dtype], tuple(s.shape))
    if got_specs != expected:
        fmt = lambda d: {k: str(v) for k, v in sorted(d.items())}  # noqa: E731
        raise ProtocolError(
            field, f"actor sends {fmt(got_specs)}, server expects {fmt(expected)}; {hint}"
        )


@dataclasses.dataclass(frozen=True)
class Limits:
    """Largest |value| accepted in rewards and float observations (config server.max_abs_*).

    Finite but huge values are as harmful as NaN: an observation of 1e20 overflows the running
    variance of the observation normalizer, a reward of 1e30 every loss. Integer observations are
    bounded by their dtype.
    """

    reward: float = 1e6
    obs: float = 1e6


def decode_step(
    step: pb.StepBatch,
    spec: EnvSpec,
    num_envs: int,
    limits: Limits = Limits(),
    stacks: frames.Stacks | None = None,
) -> Rows:
    """Decodes and validates a StepBatch for a session that announced `num_envs` envs; with
    `stacks` (the stream's, codec.stacks_for), rebuilds the whole stacks of its stacked keys."""
    env_id = _decode_as(step.env_id, "step.env_id", _INT32, None)
    n = env_id.shape[0]
    player_id = _decode_as(step.player_id, "step.player_id", _INT32, n)
    reward = _decode_as(step.reward, "step.reward", _FLOAT32, n)
    terminated = _decode_as(step.terminated, "step.terminated", _BOOL, n)
    truncated = _decode_as(step.truncated, "step.truncated", _BOOL, n)
    acting = _decode_as(step.acting, "step.acting", _BOOL, n)
    if step.HasField("game_over"):
        game_over = _decode_as(step.game_over, "step.game_over", _BOOL, n)
    else:
        game_over = terminated | truncated
    if n == 0:
        raise ProtocolError("step.env_id", "a step must carry at least one row")
    # As unsigned, a negative id is huge: one comparison checks both ends of the range.
    if not (env_id.view(np.uint32) < num_envs).all():
        raise ProtocolError(
            "step.env_id", f"values must lie in [0, {num_envs}) as announced in hello"
        )
    if not (player_id.view(np.uint32) < spec.num_players).all():
        raise ProtocolError("step.player_id", f"values must lie in [0, {spec.num_players})")
    seats = env_id.astype(np.int64) * spec.num_players + player_id
    if np.bincount(seats).max() > 1:
        raise ProtocolError("step.env_id", "an (env_id, player_id) pair appears twice in one step")
    if not np.abs(reward).max() <= limits.reward:  # False for NaN too
        raise ProtocolError(
            "step.reward",
            f"contains NaN or infinity, or |value| > {limits.reward:g} (server.max_abs_reward); "
            "fix or scale the environment's reward",
        )
    if stacks is None:
        if step.HasField("continued") or len(step.newest):
            raise ProtocolError(
                "step.continued", "sent on a stream whose Hello listed no stacked_observation"
            )
        obs = _decode_dict(step.observation, "step.observation", spec.observation, n, limits.obs)
    else:
        obs = _decode_stacked(step, spec, stacks, seats, n, limits.obs)
    extras = _decode_dict(step.extras, "step.extras", spec.extras, n)
    return Rows(obs, extras, reward, terminated, truncated, env_id, player_id, acting, game_over)


_INT32, _FLOAT32, _BOOL = np.dtype(np.int32), np.dtype(np.float32), np.dtype(np.bool_)


def _exactly(tensor: pb.Tensor, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray | None:
    """The tensor if it is a well-formed `dtype` array of `shape`, else None.

    The common case of every step, in a few attribute reads; a None sends the caller through
    `decode` and the checks that name what is wrong.
    """
    # (numpy computes dtype.name in Python: compare dtypes, not names)
    if _DTYPES.get(tensor.dtype) != dtype or tuple(tensor.shape) != shape:
        return None
    data = tensor.data
    if len(data) != math.prod(shape) * dtype.itemsize:
        return None
    return np.frombuffer(data, dtype).reshape(shape)


def _decode_as(tensor: pb.Tensor, field: str, dtype: np.dtype, rows: int | None) -> np.ndarray:
    if rows is None:  # the first field of a step says how many rows it has
        rows = tensor.shape[0] if len(tensor.shape) == 1 else -1
    array = _exactly(tensor, dtype, (rows,))
    if array is not None:
        return array
    array = decode(tensor, field)
    if array.dtype != dtype:
        raise ProtocolError(field, f"dtype {array.dtype.name}, expected {dtype.name}")
    want = f"[{rows}]" if rows >= 0 else "[rows]"
    raise ProtocolError(field, f"shape {list(array.shape)}, expected {want}")


def _decode_stacked(step, spec, stacks, seats, n: int, bound: float) -> dict:
    continued = _decode_as(step.continued, "step.continued", _BOOL, n)
    k = int(np.count_nonzero(continued))
    rows = {key: n - k if key in stacks.specs else n for key in spec.observation}
    obs = _decode_dict(step.observation, "step.observation", spec.observation, rows, bound)
    newest = _decode_dict(step.newest, "step.newest", stacks.frame_specs, k, bound)
    parts = {key: (obs[key], newest[key]) for key in stacks.specs}
    try:
        obs.update(stacks.rebuild(seats, continued, parts))
    except ValueError as e:
        raise ProtocolError("step.continued", str(e)) from None
    return obs


def _decode_dict(
    tensors,
    field: str,
    specs: dict[str, ArraySpec],
    rows: int | dict[str, int],
    bound: float | None = None,
) -> dict:
    """Float arrays must be finite; with `bound` (server.max_abs_obs), at most that in |value|.
    Ids (ArraySpec.high) must lie in [0, high). `rows`: each array's leading dimension, or per
    key."""
    if len(tensors) != len(specs) or any(key not in tensors for key in specs):
        raise ProtocolError(field, f"keys {sorted(tensors.keys())}, expected {sorted(specs)}")
    out = {}
    for key, spec in specs.items():
        name = f"{field}[{key!r}]"
        n = rows[key] if isinstance(rows, dict) else rows
        array = _exactly(tensors[key], spec.dtype, (n, *spec.shape))
        if array is None:
            array = decode(tensors[key], name)
            if array.dtype != spec.dtype:
                raise ProtocolError(name, f"dtype {array.dtype.name}, expected {spec.dtype.name}")
            raise ProtocolError(name, f"shape {list(array.shape)}, expected {[n, *spec.shape]}")
        if array.dtype.kind == "f" and array.size:
            # One pass: the comparison is False for NaN, and for infinity below a finite limit.
            limit = np.finfo(array.dtype).max if bound is None else bound
            if not np.abs(array).max() <= limit:
                problem = "contains NaN or infinity"
                if bound is not None:
                    problem += f", or |value| > {bound:g} (server.max_abs_obs)"
                raise ProtocolError(name, problem)
        # As unsigned, a negative id is huge: one comparison checks both ends of the range.
        if spec.high and array.size and not array.view(f"u{array.itemsize}").max() < spec.high:
            raise ProtocolError(name, f"ids must lie in [0, {spec.high})")
        out[key] = array
    return out


def step_fields(rows: Rows, deltas: frames.Deltas | None = None) -> tuple[dict, dict]:
    """A StepBatch's contents as arrays: ({Tensor field: array}, {map field: {key: array}}); with
    `deltas` (the stream's, for the keys its Hello listed), continued rows carry only their newest
    frame (and `deltas` remembers these rows)."""
    tensors = {
        "reward": np.asarray(rows.reward, np.float32),
        "terminated": np.asarray(rows.terminated, np.bool_),
        "truncated": np.asarray(rows.truncated, np.bool_),
        "env_id": np.asarray(rows.env_id, np.int32),
        "player_id": np.asarray(rows.player_id, np.int32),
        "acting": np.asarray(rows.acting, np.bool_),
    }
    if rows.game_over is not None:
        tensors["game_over"] = np.asarray(rows.game_over, np.bool_)
    maps = {"observation": rows.obs, "extras": rows.extras}
    if deltas is not None:
        tensors["continued"], maps["observation"], maps["newest"] = deltas.split(rows)
    return tensors, maps


def encode_step(sequence: int, rows: Rows, deltas: frames.Deltas | None = None) -> pb.ActorMessage:
    """The StepBatch message of one batch of rows (step_fields)."""
    tensors, maps = step_fields(rows, deltas)
    step = pb.StepBatch(sequence=sequence, **{k: encode(v) for k, v in tensors.items()})
    for name, table in maps.items():
        for key, value in table.items():
            getattr(step, name)[key].CopyFrom(encode(value))
    return pb.ActorMessage(step=step)


def step_bytes(sequence: int, rows: Rows, deltas: frames.Deltas | None = None) -> bytes:
    """encode_step(...).SerializeToString(), written straight from the arrays (wire.write_step):
    what an actor sends."""
    return wire.write_step(sequence, *step_fields(rows, deltas))
