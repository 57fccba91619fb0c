"""Per-stage CPU costs of seedlike's path, each stage timed alone (used by atari_throughput.py and
scale_model.py)."""

import os
import resource
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _timed(fn, repeats: int) -> tuple[float, float]:
    """(seconds per call, cores used) of fn()."""
    fn()
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for _ in range(repeats):
        fn()
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
    return wall / repeats, cpu / wall


def breakdown(env: str, config_file: str = "atari_ppo.py") -> dict:
    """Microseconds of CPU time per env step for each stage of seedlike's path (one actor's
    message of env.num_envs rows; inference batches two such messages)."""
    import jax
    import numpy as np

    from networks import make_network
    from seedlike.config import load_config_file
    from seedlike.envs.envpool_env import make_env_spec
    from seedlike.policy import PolicyRunner

    config = load_config_file(os.path.join(ROOT, "configs", config_file))
    config.unlock()
    config.env.name = env
    spec = make_env_spec(config.env)
    network = make_network(config.network, spec)
    n = int(config.env.num_envs)  # rows per actor message
    out, message = _wire_stages(config, spec, n)

    params = {"params": network.init(jax.random.key(0)), "obs_norm": network.init_obs_norm()}
    runner = PolicyRunner(network)
    batch = 2 * n  # both actors in one call, as the batcher does
    obs = {k: np.zeros((batch, *a.shape), a.dtype) for k, a in spec.observation.items()}
    first = np.zeros(batch, bool)
    s, cores = _timed(lambda: runner.step(params, obs, {}, (), first), 100)
    out["server_inference"] = s * cores / batch * 1e6
    us, full = _store_stage(config, spec, n, message)
    out["server_trajectory_store"] = us
    out["learner_update"] = _update_stage(config, network, full[0])
    out["total"] = sum(out.values())
    return {k: round(v, 1) for k, v in out.items()}


def _wire_stages(config, spec, n: int):
    """The actor's env step and encoding, the server's decoding and reply (microseconds of CPU
    per env step), and one step message."""
    import numpy as np

    from seedlike.envs.envpool_env import EnvpoolAdapter
    from seedlike.rpc import codec
    from seedlike.rpc import seedlike_pb2 as pb

    out = {}
    actor = EnvpoolAdapter(config.env, spec, 0)
    actor.reset()
    rng = np.random.default_rng(0)

    def env_step():
        rows = actor.recv()
        actor.send(rng.integers(0, spec.num_actions, rows.reward.shape[0]).astype(np.int32), rows)

    s, cores = _timed(env_step, 200)
    out["actor_env_step"] = s * cores / n * 1e6
    rows = actor.recv()
    message = codec.encode_step(0, rows)
    data = message.SerializeToString()
    s, cores = _timed(lambda: codec.encode_step(0, rows).SerializeToString(), 500)
    out["actor_encode"] = s * cores / n * 1e6
    s, cores = _timed(lambda: codec.decode_step(codec.parse_actor_message(data).step, spec, n), 500)
    out["server_decode_validate"] = s * cores / n * 1e6
    reply = pb.ServerMessage(actions=pb.ActionBatch(action=codec.encode(np.zeros(n, np.int32))))
    s, cores = _timed(lambda: reply.SerializeToString(), 500)
    out["server_encode_reply"] = s * cores / n * 1e6
    return out, message


def _store_stage(config, spec, n: int, message):
    """Microseconds of CPU per env step the trajectory store takes to record a message's rows,
    and the full learner batches it made."""
    import numpy as np

    from seedlike.policy import PolicyOutput
    from seedlike.rpc import codec
    from seedlike.server.trajectory_store import BatchQueue, StepRecord, TrajectoryStore
    from seedlike.server.unrolls import UnrollPool

    # The store records into the pool's unroll buffers and hands complete unrolls to the learner
    # by reference. Two slots: the store reserves the next batch inside the record() that fills
    # one, before this loop (the learner here) can take it.
    batches = BatchQueue(slots=2)
    pool = UnrollPool(spec, config.unroll_length)
    store = TrajectoryStore(pool, config.batch_unrolls, batches)
    seats = np.arange(n)
    pool.open(seats)
    store.open(seats)
    rows = codec.decode_step(message.step, spec, n)
    zeros, ones = np.zeros(n, np.float32), np.ones(n, bool)
    output = PolicyOutput(zeros.astype(np.int32), zeros, zeros, ())
    full = []

    def record():
        step = StepRecord.of(
            seats, rows, ones, rows.obs, {}, ~ones, np.full(n, -1), (), output, 0,
            pool.place(seats, ones),
        )  # fmt: skip
        store.write_steps(step)
        batch = batches.next_batch(timeout=0)  # the learner takes each full batch
        if batch is not None:
            full.append(batch.unroll())
            batch.release()

    s, cores = _timed(record, 500)
    return s * cores / n * 1e6, full


def _update_stage(config, network, stacked) -> float:
    """Microseconds of CPU per env step of one learner update on one device."""
    import jax

    from seedlike.learning.update import Learner

    learner = Learner(
        config, network, window_s=config.server.fair_window_s, devices=jax.local_devices()[:1]
    )
    learner.set_state(learner.init_state(jax.random.key(0)))
    steps = config.batch_unrolls * config.unroll_length
    s, cores = _timed(lambda: learner.update(stacked), 3)
    return s * cores / steps * 1e6
