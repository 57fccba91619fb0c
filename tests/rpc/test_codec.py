"""Wire encoding and validation: every malformed message is rejected with the field named."""

import numpy as np
import pytest

from seedlike.rpc import codec, wire
from seedlike.rpc import seedlike_pb2 as pb
from seedlike.types import ArraySpec, EnvSpec, Rows

SPEC = EnvSpec("CartPole-v1", {"obs": ArraySpec(np.float32, (4,))}, num_actions=2)


def good_step(n=3, **overrides):
    fields = dict(
        sequence=0,
        obs={"obs": np.arange(n * 4, dtype=np.float32).reshape(n, 4)},
        reward=np.ones(n, np.float32),
        terminated=np.zeros(n, bool),
        truncated=np.zeros(n, bool),
        env_id=np.arange(n, dtype=np.int32),
        player_id=np.zeros(n, np.int32),
        acting=np.ones(n, bool),
    )
    fields.update(overrides)
    sequence = fields.pop("sequence")
    return codec.encode_step(sequence, Rows(extras={}, game_over=None, **fields))


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.array([True, False]),
        np.zeros((2, 84, 84), np.uint8),
        np.zeros((0, 5), np.int32),
        np.array(7, np.int64),
    ],
)
def test_roundtrip(array):
    msg = pb.Tensor.FromString(codec.encode(array).SerializeToString())
    out = codec.decode(msg, "x")
    assert out.dtype == array.dtype and out.shape == array.shape
    np.testing.assert_array_equal(out, array)


def test_big_endian_is_sent_little_endian():
    array = np.arange(3, dtype=">i4")
    out = codec.decode(codec.encode(array), "x")
    np.testing.assert_array_equal(out, [0, 1, 2])


def test_decode_checks_byte_count_and_dtype():
    with pytest.raises(
        codec.ProtocolError, match=r"x: shape \[3\] of float32 needs 12 bytes, got 8"
    ):
        codec.decode(pb.Tensor(dtype="float32", shape=[3], data=b"\0" * 8), "x")
    with pytest.raises(codec.ProtocolError, match="dtype 'object'"):
        codec.decode(pb.Tensor(dtype="object", shape=[1], data=b"\0" * 8), "x")
    with pytest.raises(codec.ProtocolError, match=r"dimension out of \[0, .*\] in shape \[-1\]"):
        codec.decode(pb.Tensor(dtype="uint8", shape=[-1], data=b""), "x")


def test_valid_step_decodes():
    msg = codec.parse_actor_message(good_step().SerializeToString())
    rows = codec.decode_step(msg.step, SPEC, num_envs=3)
    assert rows.obs["obs"].shape == (3, 4)
    np.testing.assert_array_equal(rows.env_id, [0, 1, 2])
    assert rows.acting.all()


@pytest.mark.parametrize(
    "overrides,field,message",
    [
        (
            {"obs": {"obs": np.zeros((3, 4), np.float64)}},
            "step.observation['obs']",
            "dtype float64",
        ),
        (
            {"obs": {"obs": np.zeros((3, 5), np.float32)}},
            "step.observation['obs']",
            r"shape \[3, 5\]",
        ),
        ({"obs": {"pixels": np.zeros((3, 4), np.float32)}}, "step.observation", "keys"),
        ({"reward": np.ones(2, np.float32)}, "step.reward", r"shape \[2\], expected \[3\]"),
        ({"reward": np.array([1, np.nan, 0], np.float32)}, "step.reward", "NaN"),
        ({"raw_terminated": np.zeros(3, np.int32)}, "step.terminated", "dtype int32"),
        ({"raw_env_id": np.zeros((3, 1), np.int32)}, "step.env_id", r"shape \[3, 1\]"),
        ({"env_id": np.array([0, 1, 7], np.int32)}, "step.env_id", r"\[0, 3\)"),
        ({"env_id": np.array([0, 1, 1], np.int32)}, "step.env_id", "twice"),
        ({"player_id": np.array([0, 1, 0], np.int32)}, "step.player_id", r"\[0, 1\)"),
        (
            {"obs": {"obs": np.full((3, 4), np.inf, np.float32)}},
            "step.observation['obs']",
            "NaN or inf",
        ),
        (
            {"obs": {"obs": np.full((3, 4), 2e6, np.float32)}},
            "step.observation['obs']",
            r"\|value\| > 1e\+06 \(server.max_abs_obs\)",
        ),
        (
            {"reward": np.array([0.0, -1e30, 0.0], np.float32)},
            "step.reward",
            r"\|value\| > 1e\+06 \(server.max_abs_reward\)",
        ),
    ],
)
def test_bad_steps_name_the_field(overrides, field, message):
    # raw_<name> replaces a tensor after encoding, bypassing encode_step's dtype casts.
    raw = {k[4:]: v for k, v in overrides.items() if k.startswith("raw_")}
    msg = good_step(**{k: v for k, v in overrides.items() if not k.startswith("raw_")})
    for name, array in raw.items():
        getattr(msg.step, name).CopyFrom(codec.encode(array))
    msg = codec.parse_actor_message(msg.SerializeToString())
    with pytest.raises(codec.ProtocolError, match=message) as info:
        codec.decode_step(msg.step, SPEC, num_envs=3)
    assert info.value.field == field


def test_garbage_bytes_are_rejected():
    with pytest.raises(codec.ProtocolError, match="not a seedlike.ActorMessage"):
        codec.parse_actor_message(b"\xff\xff\xff\xff garbage")


def test_unknown_fields_are_rejected_at_any_depth():
    data = good_step().SerializeToString()
    # Field 99, varint 5: a field this protocol version does not have.
    with pytest.raises(codec.ProtocolError, match=r"unknown field number\(s\) \[99\]") as info:
        codec.parse_actor_message(data + bytes([0x98, 0x06, 0x05]))
    assert info.value.field == "request"

    step = good_step()
    reward = step.step.reward.SerializeToString() + bytes([0x98, 0x06, 0x05])
    step.step.reward.ParseFromString(reward)
    with pytest.raises(codec.ProtocolError) as info:
        codec.parse_actor_message(step.SerializeToString())
    assert info.value.field == "request.step.reward"


def test_hello_checks():
    hello = codec.make_hello(SPEC, actor_id=3, num_envs=8)
    codec.check_hello(hello, SPEC, max_envs=64)

    bad = pb.Hello()
    bad.CopyFrom(hello)
    bad.protocol_version = codec.PROTOCOL_VERSION + 1
    with pytest.raises(codec.ProtocolError, match="hello.protocol_version"):
        codec.check_hello(bad, SPEC, 64)

    other = EnvSpec("CartPole-v1", {"obs": ArraySpec(np.float32, (5,))}, num_actions=2)
    with pytest.raises(codec.ProtocolError, match=r"hello.observation.*float32\[5\]"):
        codec.check_hello(hello, other, 64)

    with pytest.raises(codec.ProtocolError, match="hello.env_name"):
        codec.check_hello(hello, EnvSpec("Pong-v5", SPEC.observation, 2), 64)

    with pytest.raises(codec.ProtocolError, match="hello.num_envs"):
        codec.check_hello(hello, SPEC, max_envs=4)


def test_value_limits_come_from_the_config():
    msg = codec.parse_actor_message(
        good_step(reward=np.array([0.0, 5e6, 0.0], np.float32)).SerializeToString()
    )
    with pytest.raises(codec.ProtocolError, match="max_abs_reward"):
        codec.decode_step(msg.step, SPEC, num_envs=3)
    rows = codec.decode_step(msg.step, SPEC, num_envs=3, limits=codec.Limits(reward=1e7))
    assert rows.reward[1] == 5e6


def test_shapes_with_huge_dimensions_are_refused_before_any_arithmetic():
    tensor = pb.Tensor(dtype="float32", shape=[0, 2**62, 2**62], data=b"")
    with pytest.raises(codec.ProtocolError, match=r"dimension out of \[0, 2147483647\]"):
        codec.decode(tensor, "step.reward")


def test_float_extras_must_be_finite_but_are_not_bounded_by_max_abs_obs():
    spec = {"weight": ArraySpec(np.float32, ())}
    tensors = {"weight": codec.encode(np.array([1e30, -1e30], np.float32))}
    assert codec._decode_dict(tensors, "step.extras", spec, 2)["weight"][0] == np.float32(1e30)
    tensors = {"weight": codec.encode(np.array([0.0, np.inf], np.float32))}
    with pytest.raises(codec.ProtocolError, match=r"NaN or infinity$") as info:
        codec._decode_dict(tensors, "step.extras", spec, 2)
    assert info.value.field == "step.extras['weight']"


def test_ids_outside_their_range_are_refused_naming_the_field():
    # Word ids index an embedding table, where an id out of range reads NaN (jnp.take's fill).
    spec = EnvSpec("BabyAI", {"mission": ArraySpec(np.int32, (3,), high=5)}, num_actions=2)
    actor_side = EnvSpec("BabyAI", {"mission": ArraySpec(np.int32, (3,))}, num_actions=2)
    codec.check_hello(codec.make_hello(actor_side, 0, 2), spec, 64)  # the range is not sent

    def step(ids):
        ids = np.asarray(ids, np.int32)
        msg = good_step(n=2, obs={"mission": ids})
        return codec.parse_actor_message(msg.SerializeToString()).step

    rows = codec.decode_step(step([[0, 1, 4], [4, 4, 0]]), spec, num_envs=2)
    assert rows.obs["mission"].tolist() == [[0, 1, 4], [4, 4, 0]]
    for bad in (5, -1, 2**31 - 1, -(2**31)):
        with pytest.raises(codec.ProtocolError, match=r"ids must lie in \[0, 5\)") as info:
            codec.decode_step(step([[0, 1, 4], [4, bad, 0]]), spec, num_envs=2)
        assert info.value.field == "step.observation['mission']"


def test_the_babyai_mission_carries_its_vocabulary_as_its_range():
    from seedlike.config import load_config_file
    from seedlike.envs import make_env_spec
    from seedlike.types import MISSION_VOCAB_SIZE

    config = load_config_file("configs/babyai_gotolocal.py")
    assert make_env_spec(config.env).observation["mission"].high == MISSION_VOCAB_SIZE


@pytest.mark.parametrize("dtype", ["i4,(-1)u1", "(99999999999)u1", "O", "", "float128"])
def test_a_hello_with_an_unknown_dtype_names_it(dtype):
    hello = codec.make_hello(SPEC, actor_id=0, num_envs=1)
    hello.observation[0].dtype = dtype
    with pytest.raises(codec.ProtocolError, match="unknown dtype") as info:
        codec.check_hello(hello, SPEC, 64)
    assert info.value.field == "hello.observation['obs'].dtype"


def test_short_and_damaged_steps_are_refused_with_a_protocol_error_only():
    """Every byte string of up to two bytes, and every truncation and one-byte change of a valid
    step, read as a stream reads it (a reader that has seen a valid step, and a new one): either
    the step decodes or a ProtocolError says why; nothing else escapes."""
    valid = good_step(sequence=7).SerializeToString()
    candidates = [bytes([a]) for a in range(256)]
    candidates += [bytes([a, b]) for a in range(256) for b in range(256)]
    candidates += [b"\x12\x01" + bytes([b]) for b in range(256)]
    candidates += [valid[:k] for k in range(len(valid))]
    rng = np.random.default_rng(0)
    for at in range(len(valid)):
        raw = bytearray(valid)
        raw[at] = (raw[at] + int(rng.integers(1, 256))) % 256
        candidates.append(bytes(raw))
    primed = wire.StepReader()
    primed.read(good_step(sequence=6).SerializeToString())
    decoded = 0
    for raw in candidates:
        for reader in (primed, wire.StepReader(), None):
            try:
                codec.decode_step(codec.parse_step(raw, reader), SPEC, num_envs=3)
                decoded += 1
            except codec.ProtocolError:
                pass
    assert decoded > 0  # the changed values inside tensors still decode
