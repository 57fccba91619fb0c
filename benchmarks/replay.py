"""The learner host's replay (seedlike/learning/replay.py) at Atari and CartPole sizes: bytes per
stored step (the arrays, and the process's resident memory once every slot is written), inserts/s
and samples/s (transitions gathered with their bootstrap observations, as the learner takes them).

    python -m benchmarks.replay [--capacity=1000000] [--sizes=atari,cartpole]

Atari steps are uint8 [4, 84, 84] frame stacks built as envpool builds them (each continues the
one before; a new episode's is its first frame repeated, about one step in 400 here), stored one
frame per step; CartPole's are float32 [4]. Unrolls of T = 32 arrive 32 at a time (a learner
batch); samples are drawn 8 sgd steps of 128 at a time, prioritized. Writes JSON (--out or
benchmarks/results/).
"""

import time

import numpy as np
from absl import app, flags

from benchmarks import results_io
from seedlike.learning.replay import Replay
from seedlike.runtime import procstats
from seedlike.types import Unroll

_CAPACITY = flags.DEFINE_integer("capacity", 1_000_000, "Env steps the replay holds.")
_SIZES = flags.DEFINE_list("sizes", ["atari", "cartpole"], "atari and/or cartpole.")
_OUT = flags.DEFINE_string("out", None, "JSON path (default benchmarks/results/).")

HORIZON, BATCH, SGD_STEPS, SAMPLE = 32, 32, 8, 128
OBS = {"atari": ((4, 84, 84), np.uint8), "cartpole": ((4,), np.float32)}


def make_batch(size: str, rng) -> Unroll:
    """A learner batch [B, T+1] of unrolls whose observations look like the size's."""
    shape, dtype = OBS[size]
    t1 = HORIZON + 1
    if size == "atari":
        frames = rng.integers(0, 255, (BATCH, t1 + 3, 84, 84), np.uint8)
        obs = np.stack([frames[:, t : t + 4] for t in range(t1)], axis=1)
        b, start = 3, 17  # one new episode in this batch: its stack is its first frame, x4
        obs[b, start] = np.repeat(obs[b, start][-1:], 4, 0)
        for t in range(start + 1, t1):  # and the stacks after it continue from there
            obs[b, t, :3] = obs[b, t - 1, 1:]
    else:
        obs = rng.normal(size=(BATCH, t1, *shape)).astype(dtype)
    terminated = rng.random((BATCH, HORIZON)) < 0.01
    return Unroll(
        obs={"obs": obs},
        extras={},
        action=rng.integers(0, 4, (BATCH, t1)).astype(np.int32),
        behaviour_logp=np.zeros((BATCH, t1), np.float32),
        behaviour_value=np.zeros((BATCH, t1), np.float32),
        valid=np.ones((BATCH, t1), bool),
        first=np.zeros((BATCH, t1), bool),
        policy_version=np.zeros((BATCH, t1), np.int32),
        reward=rng.normal(size=(BATCH, HORIZON)).astype(np.float32),
        terminated=terminated,
        truncated=np.zeros((BATCH, HORIZON), bool),
        carry=(),
    )


def measure(size: str, capacity: int) -> dict:
    rng = np.random.default_rng(0)
    batches = [make_batch(size, rng) for _ in range(4)]
    before = procstats.usage().rss_mb
    replay = Replay(batches[0], capacity, 3, 0.99)
    inserts = -(-replay.slots // BATCH)  # every slot written once
    whole = 0
    start = time.perf_counter()
    for i in range(inserts):
        replay.insert(batches[i % len(batches)])
        whole += sum(len(s.whole) for s in replay.stacks.values())
    insert_s = time.perf_counter() - start
    resident = (procstats.usage().rss_mb - before) * 2**20
    stored = replay.slots * HORIZON
    count = SGD_STEPS * SAMPLE
    rounds = max(20, 2000 // SGD_STEPS)
    start = time.perf_counter()
    for _ in range(rounds):
        idx, weight = replay.sample(count, 0.5)
        batch = replay.transitions(idx.reshape(SGD_STEPS, SAMPLE), weight.reshape(SGD_STEPS, -1))
        replay.update(idx, np.abs(batch.reward).reshape(-1))
    sample_s = time.perf_counter() - start
    shape, dtype = OBS[size]
    stack_bytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return {
        "observation": f"{np.dtype(dtype).name}{list(shape)}",
        "capacity_steps": stored,
        "array_bytes_per_step": replay.nbytes / stored,
        "resident_bytes_per_step": resident / stored,
        "resident_over_arrays": resident / replay.nbytes,
        "observation_bytes_whole": stack_bytes,
        "slots_kept_whole": whole,  # stacks that follow neither rule (none expected)
        "gb_per_million_steps": replay.nbytes / stored * 1e6 / 1e9,
        "inserts_per_s": inserts * BATCH * HORIZON / insert_s,
        "samples_per_s": rounds * count / sample_s,
    }


def main(argv):
    del argv
    result = {s: measure(s, _CAPACITY.value) for s in _SIZES.value}
    results_io.write("replay", {"capacity": _CAPACITY.value, "sizes": result}, _OUT.value)


if __name__ == "__main__":
    app.run(main)
