"""Stacked frames sent once (seedlike.rpc.frames): what the server rebuilds is, bit for bit, what
the actor stepped, through stack restarts, lives lost without a restart, seats that skip steps,
reconnections and front ends; the wire carries about a quarter of the bytes; hostile parts are
refused with the field named."""

import dataclasses

import jax
import numpy as np
import pytest

from seedlike.config import base_config
from seedlike.rpc import client, codec, frames
from seedlike.rpc.listen import listen
from seedlike.server.trajectory_store import BatchQueue, TrajectoryStore
from seedlike.server.unrolls import UnrollPool
from seedlike.types import ArraySpec, EnvSpec, Rows
from tests.helpers import service_of

# A frame stack of 4 frames of 6 x 7 (Atari's layout, small), a vector that is not stacked, and
# two players, so that seats are (env, player) pairs.
SPEC = EnvSpec(
    "Frames-v0",
    {"obs": ArraySpec(np.uint8, (4, 6, 7)), "pos": ArraySpec(np.float32, (2,))},
    num_actions=3,
    num_players=2,
)
ENVS = 3


class StackedEnvs:
    """Envs whose `obs` is a stack of the last four frames, as envpool's Atari keeps it: a new
    stack (the first frame repeated) at a restart; a lost life continues the stack. Each step only
    some seats report (an async env)."""

    def __init__(self, seed: int, envs: int = ENVS, frame=(6, 7), halves: bool = False):
        self.rng = np.random.default_rng(seed)
        self.envs, self.frame, self.halves = envs, frame, halves
        self.stacks = self.rng.integers(0, 256, (envs * 2, 4, *frame), dtype=np.uint8)

    def step(self) -> Rows:
        rng, seats = self.rng, self.envs * 2
        report = np.flatnonzero(rng.random(seats) < 0.7) if rng.random() < 0.8 else np.arange(seats)
        if self.halves:  # one run of seats, the first or second half (envpool's async halves)
            report = np.arange(seats // 2) + seats // 2 * int(rng.random() < 0.5)
        new = rng.integers(0, 256, (report.size, *self.frame), dtype=np.uint8)
        restart = rng.random(report.size) < 0.15
        old = self.stacks[report]
        stacks = np.concatenate([old[:, 1:], new[:, None]], axis=1)
        stacks[restart] = np.repeat(new[restart, None], 4, axis=1)
        self.stacks[report] = stacks
        lost_life = ~restart & (rng.random(report.size) < 0.1)  # ends a learning episode only
        done = restart | lost_life
        return Rows(
            obs={"obs": stacks, "pos": rng.normal(size=(report.size, 2)).astype(np.float32)},
            extras={},
            reward=rng.normal(size=report.size).astype(np.float32),
            terminated=done,
            truncated=np.zeros(report.size, bool),
            env_id=(report // 2).astype(np.int32),
            player_id=(report % 2).astype(np.int32),
            acting=np.ones(report.size, bool),
            game_over=restart,
        )


def decode(raw: bytes, stacks, reader=None) -> Rows:
    return codec.decode_step(codec.parse_step(raw, reader), SPEC, ENVS, stacks=stacks)


@pytest.mark.parametrize(
    "frame, halves, encoder",
    [
        ((6, 7), False, "protobuf"),
        ((6, 7), False, "wire"),  # the actor's encoder
        ((8, 8), True, "wire"),  # frames compared as 8-byte words, seats in runs (slices)
        ((8, 8), False, "wire"),
    ],
)
def test_the_server_rebuilds_every_stack_and_a_continued_row_sends_a_quarter(
    frame, halves, encoder
):
    spec = dataclasses.replace(
        SPEC, observation={**SPEC.observation, "obs": ArraySpec(np.uint8, (4, *frame))}
    )
    env = StackedEnvs(seed=1, frame=frame, halves=halves)
    deltas = frames.Deltas(spec, ("obs",), ENVS)
    stacks = frames.Stacks(spec, ("obs",), ENVS)
    reader = codec.wire.StepReader()
    sent = whole = continued_rows = rows_total = 0
    for t in range(300):
        rows = env.step()
        if encoder == "wire":
            raw = codec.step_bytes(t, rows, deltas)
        else:
            raw = codec.encode_step(t, rows, deltas).SerializeToString()
        got = codec.decode_step(codec.parse_step(raw, reader), spec, ENVS, stacks=stacks)
        for key in rows.obs:
            np.testing.assert_array_equal(got.obs[key], rows.obs[key], err_msg=f"{key} at {t}")
        np.testing.assert_array_equal(got.env_id, rows.env_id)
        step = codec.parse_actor_message(raw).step
        continued = codec.decode(step.continued, "continued")
        continued_rows += continued.sum()
        rows_total += continued.size
        sent += len(step.observation["obs"].data) + len(step.newest["obs"].data)
        whole += rows.obs["obs"].nbytes
    # Rows continue unless they restart (15%) or their seat has not reported yet on the stream.
    fraction = continued_rows / rows_total
    assert 0.75 < fraction < 0.9, fraction
    # A continued row's frame is a quarter of its stack.
    assert sent == whole * (1 - fraction) + whole * fraction / 4


def test_a_row_whose_stack_matches_by_chance_is_still_exact():
    deltas = frames.Deltas(SPEC, ("obs",), ENVS)
    stacks = frames.Stacks(SPEC, ("obs",), ENVS)
    zeros = np.zeros((1, 4, 6, 7), np.uint8)
    one = Rows({"obs": zeros, "pos": np.zeros((1, 2), np.float32)}, {}, np.zeros(1, np.float32),
               *(np.zeros(1, bool),) * 2, np.zeros(1, np.int32), np.zeros(1, np.int32),
               np.ones(1, bool), np.zeros(1, bool))  # fmt: skip
    for t, stack in enumerate([zeros, zeros, zeros + 1, zeros]):
        rows = one._replace(obs={**one.obs, "obs": stack})
        raw = codec.encode_step(t, rows, deltas).SerializeToString()
        np.testing.assert_array_equal(decode(raw, stacks).obs["obs"], stack)
        continued = codec.decode(codec.parse_actor_message(raw).step.continued, "c")
        assert continued.tolist() == [t == 1]  # all zeros after all zeros: a shift of itself


@pytest.mark.parametrize("frame", [(6, 7), (8, 8)])
def test_a_stack_one_byte_off_its_shift_is_sent_whole(frame):
    spec = dataclasses.replace(
        SPEC, observation={**SPEC.observation, "obs": ArraySpec(np.uint8, (4, *frame))}
    )
    deltas, stacks = frames.Deltas(spec, ("obs",), ENVS), frames.Stacks(spec, ("obs",), ENVS)
    rng = np.random.default_rng(0)
    stack = rng.integers(0, 256, (1, 4, *frame), dtype=np.uint8)
    for t in range(1, 60):
        new = rng.integers(0, 256, (1, 1, *frame), dtype=np.uint8)
        stack = np.concatenate([stack[:, 1:], new], axis=1)
        off = t % 2 == 0
        if off:  # one byte of an older frame, anywhere in it
            flat = stack.reshape(-1)
            flat[rng.integers(0, flat.size - new.size)] ^= 1 << int(rng.integers(0, 8))
        rows = Rows({"obs": stack, "pos": np.zeros((1, 2), np.float32)}, {},
                    np.zeros(1, np.float32), *(np.zeros(1, bool),) * 2, np.zeros(1, np.int32),
                    np.zeros(1, np.int32), np.ones(1, bool), np.zeros(1, bool))  # fmt: skip
        raw = codec.step_bytes(t, rows, deltas)
        got = codec.decode_step(codec.parse_step(raw), spec, ENVS, stacks=stacks)
        np.testing.assert_array_equal(got.obs["obs"], stack)
        continued = codec.decode(codec.parse_actor_message(raw).step.continued, "c")
        assert continued.tolist() == [t > 1 and not off], t


def test_a_step_without_rows_splits_into_nothing():
    """(The server refuses a step without rows; the actor's encoder still must not fail.)"""
    deltas = frames.Deltas(SPEC, ("obs",), ENVS)
    for n in (2, 0):
        rows = jax.tree.map(lambda a, n=n: a[:n], every_seat(0, envs=1))
        raw = codec.step_bytes(1, rows, deltas)
        step = codec.parse_actor_message(raw).step
        assert codec.decode(step.continued, "c").shape == (n,)


def step_of(t: int, deltas, rows) -> "codec.pb.StepBatch":
    return codec.encode_step(t, rows, deltas).step


def every_seat(t: int, envs: int = 2) -> Rows:
    """All seats, stacks that shift by one frame each step (frame value = step + seat)."""
    seats = np.arange(envs * 2)
    stack = (t + np.arange(4)[None, :] + seats[:, None]).astype(np.uint8)
    stack = np.broadcast_to(stack[:, :, None, None], (seats.size, 4, 6, 7)).copy()
    return Rows({"obs": stack, "pos": np.zeros((seats.size, 2), np.float32)}, {},
                np.zeros(seats.size, np.float32), *(np.zeros(seats.size, bool),) * 2,
                (seats // 2).astype(np.int32), (seats % 2).astype(np.int32),
                np.ones(seats.size, bool), np.zeros(seats.size, bool))  # fmt: skip


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda s: s.newest["obs"].CopyFrom(codec.encode(np.zeros((3, 6, 7), np.uint8))),
         "step.newest['obs']"),
        (lambda s: s.newest["obs"].CopyFrom(codec.encode(np.zeros((4, 6, 8), np.uint8))),
         "step.newest['obs']"),
        (lambda s: s.ClearField("newest"), "step.newest"),
        (lambda s: s.newest["pos"].CopyFrom(codec.encode(np.zeros((4, 2), np.float32))),
         "step.newest"),
        (lambda s: s.observation["obs"].CopyFrom(codec.encode(np.zeros((4, 4, 6, 7), np.uint8))),
         "step.observation['obs']"),
        (lambda s: s.continued.CopyFrom(codec.encode(np.ones(3, bool))), "step.continued"),
        (lambda s: s.ClearField("continued"), "step.continued"),
    ],
)  # fmt: skip
def test_malformed_parts_are_refused_with_the_field_named(mutate, field):
    deltas = frames.Deltas(SPEC, ("obs",), 2)
    stacks = frames.Stacks(SPEC, ("obs",), 2)
    for t in range(2):
        codec.decode_step(step_of(t, deltas, every_seat(t)), SPEC, 2, stacks=stacks)
    step = step_of(2, deltas, every_seat(2))
    assert codec.decode(step.continued, "c").all()
    mutate(step)
    with pytest.raises(codec.ProtocolError) as e:
        codec.decode_step(step, SPEC, 2, stacks=stacks)
    assert e.value.field == field, e.value


def test_a_continued_row_without_a_stack_and_stacking_not_announced_are_refused():
    deltas = frames.Deltas(SPEC, ("obs",), 2)
    step_of(0, deltas, every_seat(0))  # the actor has sent a stack; this server never got it
    continued = step_of(1, deltas, every_seat(1))
    with pytest.raises(codec.ProtocolError, match="no whole stack") as e:
        codec.decode_step(continued, SPEC, 2, stacks=frames.Stacks(SPEC, ("obs",), 2))
    assert e.value.field == "step.continued"
    with pytest.raises(codec.ProtocolError, match="listed no stacked_observation"):
        codec.decode_step(continued, SPEC, 2)


@pytest.mark.parametrize(
    "keys, problem",
    [(("pos",), "stack dimension"), (("map",), "stack dimension"), (("obs", "obs"), "twice")],
)
def test_a_hello_with_keys_that_cannot_stack_is_refused(keys, problem):
    hello = codec.make_hello(SPEC, 0, 2, stacked=keys)
    with pytest.raises(codec.ProtocolError, match=problem) as e:
        codec.check_hello(hello, SPEC, 8)
    assert e.value.field == "hello.stacked_observation"
    codec.check_hello(codec.make_hello(SPEC, 0, 2, stacked=("obs",)), SPEC, 8)


def test_auto_picks_frame_stacks_only():
    atari = EnvSpec("Breakout-v5", {"obs": ArraySpec(np.uint8, (4, 84, 84))}, 4)
    assert frames.keys_from_config("auto", atari) == ("obs",)
    for shape in [(7, 7, 3), (64, 64, 3), (2, 6, 7), (4, 84)]:  # MiniGrid, Procgen, boards
        assert (
            frames.keys_from_config("auto", EnvSpec("x", {"obs": ArraySpec(np.uint8, shape)}, 4))
            == ()
        )
    assert (
        frames.keys_from_config(
            "auto", EnvSpec("x", {"obs": ArraySpec(np.float32, (4, 84, 84))}, 4)
        )
        == ()
    )
    assert frames.keys_from_config("", atari) == ()
    assert frames.keys_from_config("obs", SPEC) == ("obs",)
    with pytest.raises(ValueError, match="not an observation key"):
        frames.keys_from_config("frames", SPEC)
    with pytest.raises(ValueError, match="stack dimension first"):
        frames.keys_from_config("pos", SPEC)


def run_stream(front_ends: int, overlap: int = 0) -> tuple[dict, list]:
    """Two actors (the second reconnects halfway, starting a new stream) through a real server:
    where each stack came from (stream, seat, its index among the seat's rows) and the learner's
    unrolls (of 3 steps + 1, consecutive ones sharing `overlap` steps besides the boundary)."""
    config = base_config().server
    config.front_ends = front_ends
    batches = BatchQueue(slots=1000)
    pool = UnrollPool(SPEC, 3, shared=front_ends > 0, overlap=overlap)
    store = TrajectoryStore(pool, 1, batches)
    service = service_of(store, spec=SPEC, batch_timeout_ms=20.0)
    server, port = listen(service, "127.0.0.1", 0, config)
    address = f"127.0.0.1:{port}"
    produced, stream = {}, 0
    try:
        for actor in range(2):
            env = StackedEnvs(seed=10 + actor, envs=ENVS)
            for _ in range(1 + actor):
                hello = codec.make_hello(SPEC, actor, ENVS, stacked=("obs",))
                connection = client.Connection(address, hello)
                deltas = frames.Deltas(SPEC, ("obs",), ENVS)
                count = np.zeros(ENVS * 2, int)
                for t in range(12):
                    rows = env.step()
                    for seat, stack in zip(rows.env_id * 2 + rows.player_id, rows.obs["obs"]):
                        produced[stack.tobytes()] = (stream, seat, count[seat])
                        count[seat] += 1
                    connection.step(codec.encode_step(t, rows, deltas))
                connection.close()
                stream += 1
        service.flush()
    finally:
        service.stop(finished=True)
        server.stop()
    unrolls = []
    for batch in iter(lambda: batches.next_batch(timeout=0), None):
        u = batch.unroll()
        batch.release()
        unrolls.append(u.obs["obs"][0].copy())
    return produced, unrolls


@pytest.mark.parametrize("front_ends, overlap", [(0, 0), (1, 0), (0, 2), (1, 2)])
def test_unrolls_hold_the_stacks_the_envs_produced_in_order(front_ends, overlap):
    """With front ends, each writes its rows in place and repeats step T itself; with overlap
    (R2D2's overlapping sequences), a seat's unrolls start 3 - overlap steps apart."""
    produced, unrolls = run_stream(front_ends, overlap)
    assert len(unrolls) >= 2 * 3 * ENVS  # every seat of every stream fills two unrolls
    starts: dict = {}
    for unroll in unrolls:
        # Random frames: a stack made up or taken from the wrong step has no origin, or not the
        # one after its predecessor's.
        origins = [produced.get(stack.tobytes()) for stack in unroll]
        assert None not in origins
        (stream, seat, first), *_ = origins
        assert origins == [(stream, seat, first + i) for i in range(len(origins))]
        starts.setdefault((stream, seat), []).append(first)
    apart = 3 - overlap  # (an unroll with no step to learn from is not emitted: gaps)
    for firsts in starts.values():
        assert firsts == sorted(set(firsts)) and all(f % apart == 0 for f in firsts), firsts
    # About 10 rows per seat and stream: 2 unrolls 3 apart, 6 or 7 one apart.
    assert sum(len(f) for f in starts.values()) >= len(starts) * (5 if overlap else 2)
