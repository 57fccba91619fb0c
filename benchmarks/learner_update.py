"""How fast the learner turns a full batch into a policy version, and where that time goes.

  python3 -m benchmarks.learner_update --config=configs/atari_ppo.py \
      --config.batch_unrolls=64 --out=benchmarks/results/learner_update.json

Builds the learner batch as the server does (a TrajectoryStore recording into an UnrollPool:
observations in the pool's buffers, random frames), then times, each --repeats times after
--warmup calls, on the first of this host's devices:

* `gather`: `LearnerBatch.unroll(learner.batch_device)` as the learn thread calls it before every
  update: the observations out of the pool, stacked on the device where the learner has one
  local device (a host copy before that change; older trees are timed as they are);
* `update`: `Learner.update`, everything the learn thread waits for: the transfer of what is still
  on the host, prepare, the epochs' sgd steps, the metrics read back;
* its parts, each alone and waited for: `transfer` (what update moves to the device), `prepare`
  (advantages; on a device-resident batch), `sgd_steps` (all the epochs' sgd steps on a
  device-resident batch), and `rest` = update - the three (host work between them).

`learn_sps` = env steps per update / (gather + update): what one learner host learns at most, the
`--learn_sps` of scale_model.py. The parts call the learner's own compiled functions (its private
`_replicate`, `_prepare`, `_sgd_epoch`): a diagnostic of this tree, not an API.
Writes JSON (benchmarks/results_io.py) and prints one line.
"""

from __future__ import annotations

import os
import time

import numpy as np
from absl import app, flags
from ml_collections import config_flags

from benchmarks import results_io

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CONFIG = config_flags.DEFINE_config_file(
    "config", os.path.join(ROOT, "configs", "atari_ppo.py"), "Experiment config."
)
_REPEATS = flags.DEFINE_integer("repeats", 5, "Timed calls of each stage (medians reported).")
_WARMUP = flags.DEFINE_integer("warmup", 2, "Untimed calls first (compilation).")
_OUT = flags.DEFINE_string("out", "", "JSON file to write (none: print only).")
_LABEL = flags.DEFINE_string("label", "", "A name for this row in the JSON and the printed line.")


def _median(fn, repeats: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def _full_batch(config, spec):
    """One LearnerBatch filled the way the server fills it, random observations."""
    from seedlike.policy import PolicyOutput
    from seedlike.server.trajectory_store import BatchQueue, StepRecord, TrajectoryStore
    from seedlike.server.unrolls import UnrollPool
    from seedlike.types import Rows

    n = int(config.batch_unrolls)
    rng = np.random.default_rng(0)
    batches = BatchQueue(slots=2)
    pool = UnrollPool(spec, config.unroll_length)
    store = TrajectoryStore(pool, n, batches)
    seats = np.arange(n)
    pool.open(seats)
    store.open(seats)
    zeros, ones = np.zeros(n, np.float32), np.ones(n, bool)
    output = PolicyOutput(zeros.astype(np.int32), zeros, zeros, ())
    obs = {
        k: rng.integers(0, 255, (n, *s.shape)).astype(s.dtype) for k, s in spec.observation.items()
    }
    rows = Rows(
        obs=obs, extras={}, reward=zeros, terminated=~ones, truncated=~ones,
        env_id=seats.astype(np.int32), player_id=np.zeros(n, np.int32), acting=ones,
        game_over=~ones,
    )  # fmt: skip
    while True:
        step = StepRecord.of(
            seats, rows, ones, obs, {}, ~ones, np.full(n, -1), (), output, 0,
            pool.place(seats, ones),
        )  # fmt: skip
        store.write_steps(step)
        batch = batches.next_batch(timeout=0)
        if batch is not None:
            return batch


def measure(config) -> dict:
    import jax

    from networks import make_network
    from seedlike.algos import batches
    from seedlike.envs.envpool_env import make_env_spec
    from seedlike.learning import update as learner_lib

    spec = make_env_spec(config.env)
    network = make_network(config.network, spec)
    batch = _full_batch(config, spec)
    device = jax.local_devices()[0]
    learner = learner_lib.Learner(
        config, network, window_s=config.server.fair_window_s, devices=[device]
    )
    learner.set_state(learner.init_state(jax.random.key(0)))
    repeats, warmup = _REPEATS.value, _WARMUP.value

    # Where the learn thread stacks the batch (older trees: always on the host).
    device_arg = getattr(learner, "batch_device", None)
    gather = batch.unroll if device_arg is None else (lambda: batch.unroll(device_arg))
    unrolls = gather()
    times = {
        "gather": _median(gather, repeats, warmup),
        "update": _median(lambda: learner.update(unrolls), repeats, warmup),
    }
    # The parts, on the tree this update uses (one device: the whole batch on it).
    state = learner._state
    identity = np.zeros((1, unrolls.action.shape[0]), np.int32)
    times["transfer"] = _median(
        lambda: jax.block_until_ready(learner._replicate(unrolls)), repeats, warmup
    )
    resident = jax.block_until_ready(learner._replicate(unrolls))
    prepare = lambda: learner._prepare(state, resident, identity, {})  # noqa: E731
    times["prepare"] = _median(lambda: jax.block_until_ready(prepare()), repeats, warmup)
    advantage, value_target, _ = prepare()
    if learner.sequences:
        from seedlike.algos.batches import SequenceBatch

        items, num_items = SequenceBatch(resident, advantage, value_target), unrolls.action.shape[0]
    else:
        items = batches.step_source(resident, advantage, value_target)
        num_items = unrolls.reward.size
    size = num_items // learner.num_minibatches
    idx = np.random.default_rng(0).permutation(num_items).astype(np.int32)
    order = idx[: size * learner.num_minibatches].reshape(1, learner.num_minibatches, size)

    def sgd_steps():
        s = state
        for _ in range(learner.epochs):
            s, metrics = learner._sgd_epoch(s, items, order)
        return jax.block_until_ready((s, metrics))

    times["sgd_steps"] = _median(sgd_steps, repeats, warmup)
    times["rest"] = times["update"] - times["transfer"] - times["prepare"] - times["sgd_steps"]
    batch.release()

    steps = int(config.batch_unrolls) * int(config.unroll_length)
    return {
        "label": _LABEL.value,
        "device": device.device_kind,
        "platform": device.platform,
        "env": config.env.name,
        "torso": config.network.torso,
        "batch_unrolls": int(config.batch_unrolls),
        "unroll_length": int(config.unroll_length),
        "sgd_steps_per_update": learner.epochs * learner.num_minibatches,
        "batch_mb": round(sum(x.nbytes for x in jax.tree.leaves(unrolls)) / 2**20, 1),
        **{f"{k}_ms": round(v * 1e3, 2) for k, v in times.items()},
        "learn_sps": round(steps / (times["gather"] + times["update"])),
    }


def main(argv):
    del argv
    row = measure(_CONFIG.value)
    print(
        f"learner_update {row['label']}: {row['device']} {row['env']} batch "
        f"{row['batch_unrolls']}x{row['unroll_length']} ({row['batch_mb']} MB): "
        + ", ".join(f"{k[:-3]} {v} ms" for k, v in row.items() if k.endswith("_ms"))
        + f"; learns {row['learn_sps']:,} env steps/s"
    )
    if _OUT.value:
        results_io.write("learner_update", {"rows": [row]}, _OUT.value, echo={})


if __name__ == "__main__":
    app.run(main)
