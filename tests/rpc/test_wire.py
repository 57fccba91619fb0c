"""The in-place step reader: the same tensors as protobuf on every step it reads, and None (so
protobuf decides) on everything else, including thousands of corrupted messages."""

import numpy as np
import pytest
from google.protobuf import message as pb_message

from seedlike.rpc import codec, frames, wire
from seedlike.rpc import seedlike_pb2 as pb
from seedlike.types import ArraySpec, EnvSpec, Rows

SPEC = EnvSpec(
    "Test-v0",
    {"obs": ArraySpec(np.uint8, (3, 50)), "pos": ArraySpec(np.float32, (2,))},
    num_actions=4,
    num_players=2,
    extras={"legal_action_mask": ArraySpec(np.bool_, (4,))},
)


def rows(n=4, game_over=True, seed=0):
    rng = np.random.default_rng(seed)
    return Rows(
        obs={
            "obs": rng.integers(0, 256, (n, 3, 50), dtype=np.uint8),
            "pos": rng.normal(size=(n, 2)).astype(np.float32),
        },
        extras={"legal_action_mask": rng.random((n, 4)) < 0.5},
        reward=rng.normal(size=n).astype(np.float32),
        terminated=rng.random(n) < 0.3,
        truncated=np.zeros(n, bool),
        env_id=np.arange(n, dtype=np.int32) // 2,
        player_id=np.arange(n, dtype=np.int32) % 2,
        acting=rng.random(n) < 0.7,
        game_over=(rng.random(n) < 0.5) if game_over else None,
    )


def tensors(step):
    """Every tensor of a step (protobuf's or the reader's) as comparable values."""
    out = {"sequence": step.sequence}
    for name in wire.STEP_TENSORS.values():
        out[f"{name}?"] = step.HasField(name)
        t = getattr(step, name)
        out[name] = (t.dtype, tuple(t.shape), bytes(t.data))
    for name in wire.STEP_MAPS:
        table = getattr(step, name)
        out[name] = {k: (t.dtype, tuple(t.shape), bytes(t.data)) for k, t in table.items()}
    return out


@pytest.mark.parametrize("sequence", [0, 1, 127, 128, 2**40])
@pytest.mark.parametrize("game_over", [True, False])
def test_reads_what_protobuf_reads(sequence, game_over):
    raw = codec.encode_step(sequence, rows(game_over=game_over)).SerializeToString()
    step = wire.read_step(raw)
    assert step is not None
    assert tensors(step) == tensors(codec.parse_actor_message(raw).step)
    ours, theirs = (
        codec.decode_step(s, SPEC, num_envs=2) for s in (step, codec.parse_actor_message(raw).step)
    )
    for a, b in zip(ours, theirs):
        if isinstance(a, dict):
            assert a.keys() == b.keys()
            for k in a:
                np.testing.assert_array_equal(a[k], b[k])
        else:
            np.testing.assert_array_equal(a, b)


def test_the_reader_knows_every_message_field_of_a_step():
    fields = {f.name for f in pb.StepBatch.DESCRIPTOR.fields if f.message_type is not None}
    assert fields == {*wire.STEP_TENSORS.values(), *wire.STEP_MAPS}


def test_observations_are_views_of_the_request():
    raw = codec.encode_step(3, rows(n=64)).SerializeToString()
    decoded = codec.decode_step(wire.read_step(raw), SPEC, num_envs=32)
    assert np.shares_memory(decoded.obs["obs"], np.frombuffer(raw, np.uint8))
    assert not decoded.obs["obs"].flags.writeable


def test_everything_else_is_left_to_protobuf():
    hello = pb.ActorMessage(hello=codec.make_hello(SPEC, 0, 2)).SerializeToString()
    assert wire.read_step(hello) is None
    good = codec.encode_step(5, rows()).SerializeToString()
    assert wire.read_step(good + bytes([0x98, 0x06, 0x05])) is None  # unknown field 99
    with pytest.raises(codec.ProtocolError, match=r"unknown field number\(s\) \[99\]"):
        codec.parse_step(good + bytes([0x98, 0x06, 0x05]))
    assert wire.read_step(good + good) is None  # protobuf merges two steps; we do not guess
    unpacked = pb.ActorMessage()
    unpacked.ParseFromString(good)
    inner = unpacked.step.reward.SerializeToString() + bytes([0x10, 0x04])  # shape 4, unpacked
    assert wire.read_step(_with_reward(good, inner)) is None
    assert wire.read_step(b"") is None
    assert wire.read_step(b"\xff\xff\xff") is None
    with pytest.raises(codec.ProtocolError, match="expected a StepBatch after the Hello"):
        codec.parse_step(hello)


def _agrees(raw: bytes) -> bool:
    """Whether the reader read `raw`; if it did, protobuf accepts it and reads the same."""
    step = wire.read_step(raw)
    if step is None:
        return False
    parsed = codec.parse_actor_message(raw)  # raises if protobuf rejects what was read
    assert parsed.WhichOneof("kind") == "step"
    assert tensors(step) == tensors(parsed.step)
    return True


def _step_bytes(raw: bytes) -> bytes:
    msg = pb.ActorMessage()
    msg.ParseFromString(raw)
    return msg.step.SerializeToString()


def _request(step: bytes) -> bytes:
    return bytes([0x12]) + _varint(len(step)) + step


def test_fields_that_protobuf_would_merge_or_overwrite_are_left_to_it():
    good = codec.encode_step(5, rows()).SerializeToString()
    step = _step_bytes(good)
    reward = pb.StepBatch.FromString(step).reward.SerializeToString()
    twice = step + bytes([0x1A]) + _varint(len(reward)) + reward  # protobuf merges the two
    assert not _agrees(_request(twice))
    assert not _agrees(_request(step + bytes([0x08, 0x09])))  # a second sequence
    entry = pb.StepBatch()
    entry.extras["legal_action_mask"].CopyFrom(codec.encode(np.zeros((4, 4), bool)))
    assert not _agrees(_request(step + entry.SerializeToString()))  # the same key again
    too_big = bytes([0x08]) + bytes([0xFF] * 9) + bytes([0x7F])  # a varint beyond 64 bits
    assert not _agrees(_request(too_big + step[2:]))
    assert _agrees(_request(step[2:] + bytes([0x08, 0x05])))  # fields in another order: read


def _with_reward(raw: bytes, reward: bytes) -> bytes:
    msg = pb.ActorMessage()
    msg.ParseFromString(raw)
    msg.step.ClearField("reward")
    step = msg.step.SerializeToString() + bytes([0x1A, len(reward)]) + reward
    return bytes([0x12]) + _varint(len(step)) + step


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def test_corrupted_messages_are_read_as_protobuf_reads_them_or_not_at_all():
    """Byte flips, truncations and insertions: whenever the reader returns a step, protobuf
    accepts the message too (parsing, unknown fields) and reads the same tensors."""
    rng = np.random.default_rng(0)
    originals = [
        codec.encode_step(s, rows(n=n, game_over=g, seed=s)).SerializeToString()
        for s, n, g in ((0, 2, True), (300, 4, False), (7, 1, True))
    ] + [stacked_steps()[1]]
    read = 0
    for trial in range(3000):
        raw = bytearray(originals[trial % len(originals)])
        for _ in range(rng.integers(1, 4)):
            kind = rng.integers(3)
            at = int(rng.integers(len(raw)))
            if kind == 0:
                raw[at] = int(rng.integers(256))
            elif kind == 1:
                del raw[at:]
            else:
                raw[at:at] = bytes(rng.integers(0, 256, int(rng.integers(1, 4)), dtype=np.uint8))
            if not raw:
                break
        raw = bytes(raw)
        step = wire.read_step(raw)
        if step is None:
            continue
        read += 1
        try:
            parsed = codec.parse_actor_message(raw)
        except (codec.ProtocolError, pb_message.DecodeError) as e:
            pytest.fail(f"read a message protobuf rejects ({e}): {raw!r}")
        assert parsed.WhichOneof("kind") == "step"
        assert tensors(step) == tensors(parsed.step), raw
    assert read > 100  # the corruptions that keep a message well-formed were read, not skipped


def stacked_steps(n: int = 4, writer: bool = False) -> list[bytes]:
    """Two steps of a stream that sends `obs` as newest frames: whole, then every row continued
    (serialized by protobuf, or by the actor's writer)."""
    deltas = frames.Deltas(SPEC, ("obs",), n // 2)
    first = rows(n, seed=5)
    new = np.full((n, 1, 50), 7, np.uint8)
    second = first._replace(
        obs={**first.obs, "obs": np.concatenate([first.obs["obs"][:, 1:], new], axis=1)}
    )
    steps = enumerate((first, second))
    if writer:
        return [codec.step_bytes(s, r, deltas) for s, r in steps]
    return [codec.encode_step(s, r, deltas).SerializeToString(deterministic=True) for s, r in steps]


def test_a_stacked_step_reads_as_protobuf_reads_it():
    for raw in stacked_steps():
        assert tensors(wire.read_step(raw)) == tensors(codec.parse_actor_message(raw).step)
    step = wire.read_step(raw)
    assert step.HasField("continued") and step.newest["obs"].shape == (4, 50)


@pytest.mark.parametrize("sequence", [0, 1, 127, 128, 2**40])
@pytest.mark.parametrize("n, game_over", [(4, True), (4, False), (0, True), (300, True)])
def test_the_writer_writes_what_protobuf_writes(sequence, n, game_over):
    """codec.step_bytes (the actor's encoder) against protobuf's serializer: the bytes of its
    deterministic form (map keys sorted), a message that parses equal, and one the stream
    reader takes in place (shapes above 127 and lengths of several varint bytes included)."""
    sent = rows(n, game_over, seed=n + sequence)
    raw = codec.step_bytes(sequence, sent)
    reference = codec.encode_step(sequence, sent)
    assert raw == reference.SerializeToString(deterministic=True)
    assert pb.ActorMessage.FromString(raw) == reference
    assert tensors(wire.read_step(raw)) == tensors(reference.step)


def test_the_writer_writes_stacked_steps_and_any_byte_order_as_protobuf_does():
    assert stacked_steps(writer=True) == stacked_steps()
    big = rows(3)._replace(reward=rows(3).reward.astype(">f4"))
    reference = codec.encode_step(5, big)
    assert codec.step_bytes(5, big) == reference.SerializeToString(deterministic=True)
    assert codec.decode(reference.step.reward, "r").tolist() == big.reward.tolist()


@pytest.mark.parametrize("writer", [False, True])
def test_a_stream_reader_reads_later_steps_through_the_skeleton_of_the_last(writer):
    """(`writer`: the actor's own encoder, whose steps must take the same fast path.)"""
    reader = wire.StepReader()
    shapes = [(4, True)] * 140 + [(4, False)] * 3 + [(2, False)] * 3 + [(4, True)] * 3
    templated = 0
    for sequence, (n, game_over) in enumerate(shapes):
        sent = rows(n, game_over, seed=sequence)
        if writer:
            raw = codec.step_bytes(sequence, sent)
        else:
            raw = codec.encode_step(sequence, sent).SerializeToString()
        before = reader._template
        step = reader.read(raw)
        assert tensors(step) == tensors(codec.parse_actor_message(raw).step), sequence
        templated += before is not None and reader._template is before
    # Full reads: step 0 (no sequence field, so no template), 1, and the first step of each new
    # shape; the other 144 of 149 went through the template (128 too: its sequence number takes
    # two bytes, and the skeleton starts after it).
    assert templated == len(shapes) - 5, templated


def test_the_skeleton_refuses_every_change_outside_the_data():
    first = codec.encode_step(1, rows(seed=1)).SerializeToString()
    reader = wire.StepReader()
    reader.read(first)
    template = reader._template
    second = codec.encode_step(2, rows(seed=2)).SerializeToString()
    assert template.match(second) is not None
    rng = np.random.default_rng(1)
    data = set()
    for a, b in ((t[4], t[5]) for t in template.tensors):
        data.update(range(len(second) - template.length + a, len(second) - template.length + b))
    for at in range(len(second)):
        raw = bytearray(second)
        raw[at] = (raw[at] + int(rng.integers(1, 256))) % 256
        raw = bytes(raw)
        step = template.match(raw)
        if at in data:  # new values in the tensors: read, as protobuf reads them
            assert step is not None and _agrees(raw), at
        elif step is not None:  # only the sequence number may change the rest: still agrees
            assert _agrees(raw) and tensors(step) == tensors(wire.read_step(raw)), at
    for corrupt in (second[:-1], second + b"\x00", b"\x12\x00", b"\x12\x01\x08"):
        assert template.match(corrupt) is None
    # The skeleton matches up to its end, but the step goes on (field 99): not this skeleton.
    assert template.match(_request(_step_bytes(second) + bytes([0x98, 0x06, 0x05]))) is None
