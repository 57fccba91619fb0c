"""A zero-copy reader for the common shape of a step request, beside the protobuf parser, and the
actor's writer of the same.

Every request after a stream's Hello is an ActorMessage holding one StepBatch, and every request
passes through the one gRPC event loop, where they queue when many actors send at once. Parsing with
protobuf and reading a Tensor's `data` copies the observation bytes (226 KB for 8 Atari rows) with
the interpreter lock held, and an experiment that skipped parsing and checks altogether showed that
this work limited serving (RESULTS.md, "Serving capacity"). This reader walks the wire format
(protobuf encoding: a varint key `field << 3 | wire type`, then a varint, or a varint length and
that many bytes) and returns the tensors as views into the request's bytes; a stream's `StepReader`
reads later steps by matching them against the skeleton of the last one.

It accepts only messages whose meaning is unambiguous: each field at most once (protobuf merges
or overwrites repeated occurrences), map keys distinct, shapes packed, no field it does not know.
Anything else returns None, and the caller parses the request with protobuf, whose checks reject
what is wrong with the same errors as before. So this reader never decides whether a message is
valid; it only takes the common valid case off the protobuf path. Values are not checked here
either: the returned step goes through codec.decode_step like a parsed one.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np

from seedlike.rpc import seedlike_pb2 as pb

# Wire types (protobuf encoding).
VARINT, LENGTH = 0, 2


def _numbers(message) -> dict[str, int]:
    return {f.name: f.number for f in message.DESCRIPTOR.fields}


# Field numbers, from the descriptors so that they follow the .proto file.
ACTOR_STEP = _numbers(pb.ActorMessage)["step"]
_STEP = _numbers(pb.StepBatch)
SEQUENCE = _STEP["sequence"]
STEP_TENSORS = {  # number -> name of StepBatch's Tensor fields
    f.number: f.name
    for f in pb.StepBatch.DESCRIPTOR.fields
    if f.message_type is pb.Tensor.DESCRIPTOR
}
STEP_MAPS = ("observation", "extras", "newest")  # its map<string, Tensor> fields
MAP_FIELDS = {_STEP[name]: name for name in STEP_MAPS}
# (Every message field of a StepBatch is one of those: tests/rpc/test_wire.py checks it against the
# descriptor, since a field this reader does not know would send every step through protobuf.)
ENTRY_KEY, ENTRY_VALUE = 1, 2  # every protobuf map entry
_TENSOR = _numbers(pb.Tensor)
TENSOR_DTYPE, TENSOR_SHAPE, TENSOR_DATA = _TENSOR["dtype"], _TENSOR["shape"], _TENSOR["data"]


class Tensor(NamedTuple):
    """A seedlike.Tensor as codec.decode reads it; `data` is a view of the request's bytes."""

    dtype: str = ""
    shape: tuple[int, ...] = ()
    data: memoryview | bytes = b""


class Step:
    """The fields of a StepBatch that codec.decode_step reads; an absent tensor is empty, as in
    protobuf, and `HasField` says whether it was sent."""

    __slots__ = ("sequence", *STEP_MAPS, "_present", *STEP_TENSORS.values())

    def __init__(self):
        self.sequence = 0
        self.observation: dict[str, Tensor] = {}
        self.extras: dict[str, Tensor] = {}
        self.newest: dict[str, Tensor] = {}
        self._present: set[str] = set()
        for name in STEP_TENSORS.values():
            setattr(self, name, Tensor())

    def HasField(self, name: str) -> bool:  # noqa: N802 (protobuf's spelling)
        return name in self._present

    def set_tensor(self, name: str, tensor: Tensor) -> None:
        setattr(self, name, tensor)
        self._present.add(name)


class _Unusual(Exception):
    """Not the common case: leave the message to protobuf."""


def read_step(raw: bytes) -> Step | None:
    """The StepBatch of a request `ActorMessage{step: ...}`, or None if the request is anything
    else (a Hello, a malformed or unusual message: parse it with protobuf)."""
    return _read(raw)[0]


class StepReader:
    """`read_step` for the requests of one stream, faster from the second step on.

    An actor's steps differ in their sequence number and in their tensors' bytes; every tag,
    length, dtype, shape and key is the same from one step to the next. After reading a step in
    full, the reader keeps those bytes (the step's skeleton, everything after the sequence number
    but the tensors' data) and where the data lie. A request whose skeleton matches them byte for
    byte has the same fields at the same places, so its tensors are views there, without walking
    the message again. Anything else is read in full (and becomes the next template).
    """

    def __init__(self):
        self._template: _Template | None = None

    def read(self, raw: bytes) -> Step | None:
        if self._template is not None:
            step = self._template.match(raw)
            if step is not None:
                return step
        step, self._template = _read(raw)
        return step


_STEP_KEY = ACTOR_STEP << 3 | LENGTH  # the one-byte key of ActorMessage.step
_SEQUENCE_KEY = SEQUENCE << 3 | VARINT


class _Template:
    """A step's skeleton after its sequence number: `gaps` (offset, end, bytes) cover every byte
    of that part but the tensors' data; `tensors` (table, name, dtype, shape, offset, end) say
    where each tensor's data lies. Offsets count from the end of the sequence number."""

    def __init__(self, gaps: list, tensors: list):
        self.gaps, self.tensors = gaps, tensors
        self.length = gaps[-1][1]  # the last gap ends where the step does

    def match(self, raw: bytes) -> Step | None:
        """The step of `raw` if it is `ActorMessage{step: {sequence, <this skeleton>}}`."""
        end = len(raw)
        try:
            if end < 3 or raw[0] != _STEP_KEY:
                return None
            length, i = _varint(raw, 1, end)
            if i + length != end or i == end or raw[i] != _SEQUENCE_KEY:
                return None
            sequence, base = _varint(raw, i + 1, end)
        except _Unusual:
            return None
        if end - base != self.length:
            return None
        for a, b, chunk in self.gaps:
            if raw[base + a : base + b] != chunk:
                return None
        step = Step()
        step.sequence = sequence
        view = memoryview(raw)
        for table, name, dtype, shape, a, b in self.tensors:
            tensor = Tensor(dtype, shape, view[base + a : base + b])
            if table is None:
                step.set_tensor(name, tensor)
            else:
                getattr(step, table)[name] = tensor
        return step


def _read(raw: bytes) -> tuple[Step | None, _Template | None]:
    """The step of `raw` (None: not the common case) and its template (None: the step does not
    start with its sequence number, as a step numbered 0, which protobuf leaves out, does not)."""
    try:
        fields = _fields(raw, 0, len(raw))
        if len(fields) != 1 or fields[0][0] != ACTOR_STEP or fields[0][1] != LENGTH:
            return None, None
        _, _, start, end = fields[0]
        spans: list = []
        step = _step(raw, start, end, spans)
    except _Unusual:
        return None, None
    return step, _template(raw, start, end, spans)


def _template(raw: bytes, start: int, end: int, spans: list) -> _Template | None:
    if start == end or raw[start] != _SEQUENCE_KEY:  # an empty step has nothing to template
        return None
    _, base = _varint(raw, start + 1, end)
    gaps, tensors, at = [], [], base
    for table, name, tensor, (a, b) in sorted(spans, key=lambda s: s[3]):
        gaps.append((at - base, a - base, raw[at:a]))
        tensors.append((table, name, tensor.dtype, tensor.shape, a - base, b - base))
        at = b
    gaps.append((at - base, end - base, raw[at:end]))
    return _Template(gaps, tensors)


def _step(buf: bytes, start: int, end: int, spans: list) -> Step:
    """Appends (table, name, tensor, data span) of every tensor to `spans` (table None for
    StepBatch's own Tensor fields, else the name of its map: one of STEP_MAPS)."""
    step = Step()
    seen = set()
    for number, wire, a, b in _fields(buf, start, end):
        if number in MAP_FIELDS:
            if wire != LENGTH:
                raise _Unusual
            key, tensor, span = _entry(buf, a, b)
            name = MAP_FIELDS[number]
            table = getattr(step, name)
            if key in table:
                raise _Unusual
            table[key] = tensor
            spans.append((name, key, tensor, span))
            continue
        if number in seen:
            raise _Unusual
        seen.add(number)
        if number == SEQUENCE and wire == VARINT:
            step.sequence = a
        elif number in STEP_TENSORS and wire == LENGTH:
            tensor, span = _tensor(buf, a, b)
            step.set_tensor(STEP_TENSORS[number], tensor)
            spans.append((None, STEP_TENSORS[number], tensor, span))
        else:
            raise _Unusual
    return step


def _entry(buf: bytes, start: int, end: int) -> tuple[str, Tensor, tuple[int, int]]:
    fields = _fields(buf, start, end)
    if len(fields) != 2:
        raise _Unusual
    (k, k_wire, ka, kb), (v, v_wire, va, vb) = fields
    if (k, k_wire, v, v_wire) != (ENTRY_KEY, LENGTH, ENTRY_VALUE, LENGTH):
        raise _Unusual
    return _text(buf, ka, kb), *_tensor(buf, va, vb)


def _tensor(buf: bytes, start: int, end: int) -> tuple[Tensor, tuple[int, int]]:
    """The tensor and where its data lies (an empty span at its end if it has none)."""
    parts = {}
    for number, wire, a, b in _fields(buf, start, end):
        if number in parts or wire != LENGTH:
            raise _Unusual
        parts[number] = (a, b)
    dtype, shape, span = "", (), (end, end)
    if TENSOR_DTYPE in parts:
        dtype = _text(buf, *parts.pop(TENSOR_DTYPE))
    if TENSOR_SHAPE in parts:
        shape = _packed_int64(buf, *parts.pop(TENSOR_SHAPE))
    if TENSOR_DATA in parts:
        span = parts.pop(TENSOR_DATA)
    if parts:
        raise _Unusual
    return Tensor(dtype, shape, memoryview(buf)[span[0] : span[1]]), span


def _fields(buf: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """(field number, wire type, a, b) of each field in buf[start:end]: for a varint, a is its
    value (b unused); for a length-delimited field, buf[a:b] is its payload."""
    out = []
    i = start
    while i < end:
        key = buf[i]  # keys and lengths under 128 take one byte: read those without a call
        key, i = (key, i + 1) if key < 0x80 else _varint(buf, i, end)
        number, wire = key >> 3, key & 7
        if number == 0 or i >= end:
            raise _Unusual
        value = buf[i]
        value, i = (value, i + 1) if value < 0x80 else _varint(buf, i, end)
        if wire == VARINT:
            out.append((number, wire, value, i))
        elif wire == LENGTH:
            if value > end - i:
                raise _Unusual
            out.append((number, wire, i, i + value))
            i += value
        else:  # fixed-width and group fields: none in a StepBatch
            raise _Unusual
    return out


def _varint(buf: bytes, i: int, end: int) -> tuple[int, int]:
    """The unsigned varint at buf[i] (at most 10 bytes, within `end`) and the index after it."""
    value, shift = 0, 0
    while i < end and shift < 64:
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if value >> 64:  # a tenth byte above 1: protobuf would truncate it
                raise _Unusual
            return value, i
        shift += 7
    raise _Unusual


def _packed_int64(buf: bytes, start: int, end: int) -> tuple[int, ...]:
    chunk = buf[start:end]
    if chunk.isascii():  # every byte below 128: one-byte varints, the values are the bytes
        return tuple(chunk)
    values = []
    i = start
    while i < end:
        value, i = _varint(buf, i, end)
        values.append(value - (1 << 64) if value >= 1 << 63 else value)  # two's complement
    return tuple(values)


def _text(buf: bytes, start: int, end: int) -> str:
    try:
        return buf[start:end].decode()
    except UnicodeDecodeError:
        raise _Unusual from None


# The writer ----------------------------------------------------------------------------------
#
# The actor's side: a StepBatch's bytes as protobuf serializes them deterministically (fields in
# number order, map keys sorted, defaults left out), written straight from the arrays. Building
# the message with protobuf copies each array's bytes three times (tobytes, the Tensor, CopyFrom
# into the step) and builds a dozen message objects per step; here each array is copied once,
# into the result (benchmarks/actor_overhead.py). tests/rpc/test_wire.py checks the bytes
# against protobuf's.

_NUMBERS = {name: number for number, name in STEP_TENSORS.items()}
_MAP_NUMBERS = {name: number for number, name in MAP_FIELDS.items()}


_SMALL = [bytes([value]) for value in range(0x80)]


def _varint_bytes(value: int) -> bytes:
    if value < 0x80:
        return _SMALL[value]
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length_field(number: int, parts: list, size: int) -> list:
    return [_varint_bytes(number << 3 | LENGTH), _varint_bytes(size), *parts]


def _tensor_parts(array: np.ndarray) -> tuple[list, int]:
    """A Tensor's encoding as pieces for bytes.join (the data a view of the array), and its size."""
    array = np.asarray(array, order="C")
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    header = _tensor_header(array.dtype, array.shape)
    if not array.nbytes:
        return [header], len(header)
    return [header, memoryview(array.reshape(-1).view(np.uint8))], len(header) + array.nbytes


@functools.lru_cache(maxsize=1024)
def _tensor_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """A Tensor's bytes before its data: the same for every step of a stream but a few."""
    name = dtype.name.encode()
    parts = [_varint_bytes(TENSOR_DTYPE << 3 | LENGTH), _varint_bytes(len(name)), name]
    if shape:
        # int64 varints; a dimension is never negative
        packed = b"".join(_varint_bytes(d) for d in shape)
        parts += _length_field(TENSOR_SHAPE, [packed], len(packed))
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes:
        parts += [_varint_bytes(TENSOR_DATA << 3 | LENGTH), _varint_bytes(nbytes)]
    return b"".join(parts)


def write_step(sequence: int, tensors: dict, maps: dict) -> bytes:
    """The bytes of ActorMessage{step: StepBatch{sequence, tensors, maps}}: `tensors` {StepBatch
    Tensor field: array}, `maps` {"observation" | "extras" | "newest": {key: array}}."""
    fields = []  # (number, pieces of the whole field)
    for name, array in tensors.items():
        parts, size = _tensor_parts(array)
        fields.append((_NUMBERS[name], _length_field(_NUMBERS[name], parts, size)))
    for name, table in maps.items():
        for key, array in sorted(table.items()):  # as protobuf's deterministic form
            value, size = _tensor_parts(array)
            text = key.encode()
            entry = [_varint_bytes(ENTRY_KEY << 3 | LENGTH), _varint_bytes(len(text)), text,
                     *_length_field(ENTRY_VALUE, value, size)]  # fmt: skip
            number = _MAP_NUMBERS[name]
            fields.append((number, _length_field(number, entry, _size(entry))))
    if not 0 <= sequence < 1 << 64:
        raise ValueError(f"sequence {sequence} is not a uint64")
    body = [_varint_bytes(_SEQUENCE_KEY), _varint_bytes(sequence)] if sequence else []
    for _, parts in sorted(fields, key=lambda f: f[0]):  # stable: map keys stay sorted
        body += parts
    return b"".join(_length_field(ACTOR_STEP, body, _size(body)))


def _size(parts: list) -> int:
    return sum(len(p) for p in parts)  # bytes, and 1-d uint8 views
