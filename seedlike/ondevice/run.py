"""The host side of an on-device run: builds the program, calls it for as many updates at a time
as fill a log interval, and between calls writes what a SEED run writes (metrics.jsonl rows,
the console line with its ETA, wandb, checkpoints, config.json and the summary). A stop request
(Ctrl-C, SIGTERM) ends the run after the call in flight, with a checkpoint.

A checkpoint holds the TrainState as a SEED run's does (evaluate.py, surgery and init_from read
it alike) and, beside it, the envs' states, the recurrent carry and the PRNG key (the "device"
item): a run stopped and resumed gives the parameters of one that was never stopped, bit for bit
on the same machine (tests/ondevice/test_run.py).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time

import jax
import numpy as np

from networks import make_network
from seedlike import checkpoint as ckpt_lib
from seedlike import config as config_lib
from seedlike import envs
from seedlike.algos import ALGORITHMS, BATCHES, ON_POLICY, exploration
from seedlike.learning import train_state as ts
from seedlike.metrics import MetricsWriter, run_summary, write_config, write_summary
from seedlike.ondevice import program as program_lib
from seedlike.ondevice import rollout as rollout_lib

FIRST_CALL_UPDATES = 1  # the first call compiles; each later one is sized by the one before


def check(config) -> None:
    """ConfigError (one line) for a config the on-device runtime cannot run as written."""
    config_lib.validate(config)
    config_lib.validate_network(config, config_lib.env_spec(config))
    algo, backend = config.algo, config.env.backend
    c = config[algo]
    replay = BATCHES[ALGORITHMS[algo].batch] != ON_POLICY
    here = ", ".join(n for n, a in ALGORITHMS.items() if BATCHES[a.batch] == ON_POLICY)
    unsupported = {
        f"algo={algo!r} (it learns from a replay; {here} run here)": replay,
        f"{algo}.normalize_rewards": bool(c.normalize_rewards),
        f"{algo}.reward_clip": float(c.reward_clip) != 0.0,
        "distributed.num_processes > 1 (one host's devices)": config.distributed.num_processes > 1,
        "population.size > 1": config.population.size > 1,
        "stop_at_return": config.stop_at_return is not None,
        "pause_at_env_steps": bool(config.pause_at_env_steps),
        "init_from": bool(config.init_from),
    }
    named = [what for what, used in unsupported.items() if used]
    if named:
        raise config_lib.ConfigError(
            f"env.backend={backend!r} runs on the device, which does not take "
            f"{', '.join(named)} yet: leave them at their defaults (docs/ondevice.md)"
        )


class DeviceRun:
    """The program, its state on the devices, and the counters a run reports."""

    def __init__(self, config, logdir: str):
        self.config, self.logdir = config, logdir
        self.devices = jax.local_devices()
        self.spec = envs.make_env_spec(config.env)
        self.network = make_network(config.network, self.spec)
        self.env = envs.device_env(config.env, self.spec)
        self.shape = program_lib.shape_of(config, self.network, len(self.devices))
        algorithm = ALGORITHMS[config.algo]
        self.steps_per_update = int(config.batch_unrolls) * int(config.unroll_length)
        total_updates = -(-int(config.total_env_steps) // self.steps_per_update)
        self.optimizer = ts.make_optimizer(config.optimizer)
        sgd_steps = algorithm.sgd_steps(config)
        lr_fn = ts.make_learning_rate_fn(config.optimizer, total_updates * sgd_steps)
        loss_fn = algorithm.load().make_loss(self.network, config[config.algo], ts.AXIS)
        sgd_step = ts.make_sgd_step(loss_fn, self.optimizer, lr_fn, 0, int(config.seed))
        self.program = program_lib.make_program(
            config, self.network, self.env, self.shape, sgd_step, self.devices
        )
        self.checkpointer = ckpt_lib.Checkpointer(
            os.path.join(logdir, "checkpoints"), config.checkpoint.max_to_keep
        )
        self.checkpointer.remove_interrupted_saves()
        self.env_steps = self.episodes = 0
        self.in_call = False  # the program holds (and has donated) the state
        try:
            self.state, self.acting = self._start()
        except BaseException:
            self.checkpointer.close()
            raise
        # Counted on the host (an update discarded as non-finite leaves it): no wait per row.
        self._version = int(jax.device_get(self.state.policy_version[0]))

    def _start(self):
        """The state and acting of the latest checkpoint, or fresh ones (one per device)."""
        key = jax.random.key(int(self.config.seed))
        init_key, env_key = jax.random.split(key)
        state = jax.device_get(
            jax.jit(lambda k: ts.init_train_state(self.network, self.optimizer, k))(init_key)
        )
        n = len(self.devices)
        start = jax.jit(lambda k: rollout_lib.start(self.network, self.env, self.shape.envs, k))
        acting = [start(k) for k in jax.random.split(env_key, n)]
        acting = jax.device_get(jax.tree.map(lambda *xs: np.stack(xs), *acting))
        restored = self.checkpointer.restore(state, older=ts.older_layout)
        if restored is not None:
            state, meta = restored
            config_lib.check_resumed(self.config, meta, self.logdir)
            acting = self._restore_acting(int(state.policy_version), acting)
            self.env_steps, self.episodes = int(meta["env_steps"]), int(meta.get("episodes", 0))
            logging.info(
                "resumed from %s at env step %d, policy version %d (params %s)",
                self.checkpointer.directory, self.env_steps, int(state.policy_version),
                ckpt_lib.params_fingerprint(state.params),
            )  # fmt: skip
        replicated = jax.tree.map(lambda x: np.broadcast_to(x, (n, *np.shape(x))), state)
        return self._shard(replicated), self._shard(acting)

    def _restore_acting(self, step: int, fresh):
        """The envs, carry and key saved with step; `fresh` ones where it holds none that fit (a
        checkpoint that surgery wrote, a SEED run's, another number of envs): the agent goes on
        from its parameters in new episodes, as a SEED run's actors would reconnect."""
        try:
            return self.checkpointer.restore_extra(step, fresh)
        except ckpt_lib.CheckpointError as e:  # incompatible or damaged: the state stands
            logging.warning("%s; starting fresh envs", e)
            return fresh

    def _shard(self, tree):
        """A host tree with a leading axis [devices, ...]: row i on local device i (a pmap
        argument)."""
        sharding = jax.sharding.NamedSharding(
            jax.sharding.Mesh(np.array(self.devices), (ts.AXIS,)),
            jax.sharding.PartitionSpec(ts.AXIS),
        )

        def put(x):
            x = np.asarray(x)
            shards = [jax.device_put(x[i : i + 1], d) for i, d in enumerate(self.devices)]
            return jax.make_array_from_single_device_arrays(x.shape, sharding, shards)

        return jax.tree.map(put, tree)

    @property
    def policy_version(self) -> int:
        return self._version

    def call(self, updates: int) -> program_lib.Totals:
        """`updates` policy versions; their totals (on the host)."""
        n = np.full(len(self.devices), updates, np.int32)
        self.in_call = True
        self.state, self.acting, totals = self.program(self.state, self.acting, n)
        # One transfer, then device 0's copy (every device holds the same sums).
        totals = jax.tree.map(lambda x: x[0], jax.device_get(totals))
        self.env_steps += updates * self.steps_per_update
        self.episodes += int(totals.counts["episodes"])
        self._version += updates - int(totals.counts["nonfinite"])
        self.in_call = False
        return totals

    def save(self) -> str:
        state = jax.device_get(jax.tree.map(lambda x: x[0], self.state))
        meta = {
            "env_steps": self.env_steps,
            "episodes": self.episodes,
            "policy_version": int(state.policy_version),
            "config": json.loads(self.config.to_json()),
        }
        self.checkpointer.save(int(state.policy_version), state, meta, extra=self.acting_host())
        return os.path.join(self.checkpointer.directory, str(int(state.policy_version)))

    def acting_host(self):
        """Every device's acting state, stacked [devices, ...], on the host."""
        return jax.device_get(self.acting)


def row_of(totals: program_lib.Totals, run: DeviceRun, seconds: float, steps: int) -> dict:
    """The metrics row of one call: the keys of a SEED run's row that mean the same here
    (docs/metrics.md), and updates_per_call."""
    counts = totals.counts
    kept = float(counts["updates"]) - float(counts["nonfinite"])
    episodes = float(counts["episodes"])
    per_episode = lambda key: float(counts[key]) / episodes if episodes else None  # noqa: E731
    return {
        "time": time.time(),
        "env_steps": run.env_steps,
        "policy_version": run.policy_version,
        "sps": steps / seconds if seconds > 0 else None,
        "episodes": int(episodes),
        "episode_return_mean": per_episode("episode_return_sum"),
        # One identity plays every episode (the program): the median over identities is its mean.
        "episode_return_robust": per_episode("episode_return_sum"),
        "episode_length_mean": per_episode("episode_length_sum"),
        "updates_per_call": int(counts["updates"]),
        **exploration_columns(run.config, run.network, run.env_steps),
        **{k: float(v) / kept if kept else float("nan") for k, v in totals.metrics.items()},
        "nonfinite": float(counts["nonfinite"]) / max(float(counts["updates"]), 1.0),
    }


def exploration_columns(config, network, env_steps: int) -> dict:
    """A Q network's exploration/epsilon_<i> at env_steps: slot i's rate (the rate of the envs
    holding it; program.make_epsilon), as a SEED run's rows give each slot's."""
    if not network.q:
        return {}
    c = config[config.algo]
    rates = exploration.apex_epsilons(c.epsilon, c.epsilon_alpha, c.epsilon_slots)
    anneal = float(c.anneal_steps)
    left = max(0.0, 1.0 - env_steps / anneal) if anneal > 0 else 0.0
    return {
        f"exploration/epsilon_{i}": float(exploration.annealed(r, left))
        for i, r in enumerate(rates)
    }


def train(config, logdir: str, stop: threading.Event | None = None) -> dict:
    """Trains until config.total_env_steps or until `stop` is set; returns the last row."""
    stop = stop or threading.Event()
    check(config)
    run = DeviceRun(config, logdir)
    try:
        write_config(logdir, config)
        metrics = MetricsWriter(
            logdir, config, config.log.wandb_mode, config.log.wandb_project,
            config.log.wandb_group, total_env_steps=int(config.total_env_steps),
            tensorboard=bool(config.log.tensorboard),
        )  # fmt: skip
    except BaseException:
        run.checkpointer.close()
        raise
    try:
        return _loop(run, metrics, stop)
    finally:
        _finish(run, metrics)


def _loop(run: DeviceRun, metrics: MetricsWriter, stop: threading.Event) -> dict:
    """Calls until the budget or a stop: a row after each call, checkpoints on the interval.
    A call lasts at most the log interval, a quarter of the stop grace and the checkpoint
    interval, so a stop and the checkpoints wait for no more."""
    c = run.config
    total = int(c.total_env_steps)
    limit_s = min(
        float(c.log.interval_s),
        float(c.checkpoint.stop_grace_s) / 4,
        float(c.checkpoint.interval_s),
    )
    updates, calls, row, last_save = FIRST_CALL_UPDATES, 0, {}, time.monotonic()
    while run.env_steps < total and not stop.is_set():
        left = -(-(total - run.env_steps) // run.steps_per_update)
        started, steps_before = time.monotonic(), run.env_steps
        totals = run.call(min(updates, left))
        seconds = time.monotonic() - started
        row = row_of(totals, run, seconds, run.env_steps - steps_before)
        metrics.write(row)
        calls += 1
        if calls >= 2:  # the first call compiled; each later one sizes the next
            updates = max(1, int(limit_s * row["updates_per_call"] / max(seconds, 1e-6)))
        if time.monotonic() - last_save >= float(c.checkpoint.interval_s):
            run.save()
            last_save = time.monotonic()
    return row


def _finish(run: DeviceRun, metrics: MetricsWriter) -> None:
    """The last checkpoint (unless the program failed holding the state), the summary line and
    summary.json; the writers closed whatever fails."""
    try:
        checkpoint = None
        if not run.in_call:
            checkpoint = run.save()
            run.checkpointer.wait()
        total = int(run.config.total_env_steps)
        finished = run.env_steps >= total
        outcome = "finished" if finished else "stopped (rerun with the same --logdir to resume)"
        logging.info("%s", metrics.summary(outcome, checkpoint))
        wall_s = time.time() - metrics.started
        kind = "finished" if finished else "stopped"
        summary = run_summary(run.logdir, kind, total, wall_s, checkpoint=checkpoint)
        write_summary(run.logdir, summary)
    finally:
        metrics.close()
        run.checkpointer.close()
