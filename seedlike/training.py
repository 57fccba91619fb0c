"""The central server process: inference service + trajectory store + learner, wired together.

Threads: gRPC handlers (one per actor stream) -> the inference thread (batching, policy step,
trajectory store) -> a bounded queue of unrolls -> the learner loop (this function's thread), which
publishes every new policy version back to inference, writes metrics and checkpoints.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import queue
import threading
import time

import jax
import numpy as np

from networks import make_network
from seedlike import checkpoint as ckpt_lib
from seedlike import config as config_lib
from seedlike.envs.envpool_env import make_env_spec
from seedlike.league.evaluation import Evaluation, EvaluationThread
from seedlike.league.league import League
from seedlike.learner.learner import Learner
from seedlike.metrics import MetricsWriter
from seedlike.rpc.service import serve
from seedlike.server import inference
from seedlike.server.anneal import Annealing
from seedlike.server.policy import PolicyRegistry
from seedlike.server.trajectory_store import TrajectoryStore
from seedlike.types import stack_unrolls

ADDRESS_FILE = "server_address"
LEAGUE_DIR = "league"


def start_inference(
    config, spec, network, registry, store, logdir, bind, port, guard=None, league=None,
    annealing=None,
):  # fmt: skip
    """Starts the inference thread and its gRPC server; writes <logdir>/server_address.

    Returns (service, grpc server, "host:port").
    """
    service = inference.InferenceService(
        spec,
        network,
        registry,
        store,
        config.server,
        seed=config.seed,
        guard=guard,
        league=league,
        annealing=annealing,
    )
    service.start()
    server, bound = serve(service, bind, port, config.server.max_actors)
    address = f"{bind}:{bound}"
    os.makedirs(logdir, exist_ok=True)
    with open(os.path.join(logdir, ADDRESS_FILE), "w") as f:
        f.write(address + "\n")
    logging.info("serving actors on %s", address)
    return service, server, address


@dataclasses.dataclass
class _Interval:
    """Accumulates learner-side values between two metrics rows."""

    start: float
    env_steps: int
    unrolls_emitted: int
    updates: list = dataclasses.field(default_factory=list)
    staleness: list = dataclasses.field(default_factory=list)
    consumed: int = 0


def train(
    config, logdir: str, bind: str = "127.0.0.1", port: int = 0, stop: threading.Event | None = None
) -> dict:
    """Serves actors and learns until `config.total_env_steps` or until `stop` is set.

    Writes <logdir>/server_address once actors can connect. Returns the last metrics row.
    """
    config_lib.validate(config)
    stop = stop or threading.Event()
    os.makedirs(logdir, exist_ok=True)
    spec = make_env_spec(config.env)
    network = make_network(config.network, spec)
    learner = Learner(config, network)
    logging.info("learner on %d device(s): %s", learner.num_devices, learner.devices)

    checkpointer = ckpt_lib.Checkpointer(
        os.path.join(logdir, "checkpoints"), config.checkpoint.max_to_keep
    )
    initial = learner.init_state(jax.random.key(config.seed))
    restored = checkpointer.restore(initial)
    meta = {}
    if restored is None:
        learner.set_state(initial)
    else:
        state, meta = restored
        learner.set_state(state)
        logging.info(
            "resumed from %s at env step %d, policy version %d (params %s)",
            checkpointer.directory,
            meta["env_steps"],
            learner.version,
            ckpt_lib.params_fingerprint(state.params),
        )
    base_env_steps = int(meta.get("env_steps", 0))
    episodes_total = int(meta.get("episodes", 0))

    registry = PolicyRegistry()
    registry.publish(learner.version, learner.policy_params())
    league, evaluation = _make_league(config, logdir, network, learner, meta)
    unrolls: queue.Queue = queue.Queue(maxsize=config.server.queue_unrolls or config.batch_unrolls)

    def emit(unroll):
        # Blocking here stalls inference, and with it the actors: backpressure, not stale piles.
        while not stop.is_set():
            try:
                unrolls.put(unroll, timeout=0.1)
                return
            except queue.Full:
                continue

    opponents = league.opponents if league is not None else None
    annealing = Annealing.from_config(config.anneal)
    changes = (lambda n: service.changes(n)) if annealing else None  # noqa: E731
    store_spec = annealing.server_spec(spec) if annealing else spec
    store = TrajectoryStore(
        store_spec, config.unroll_length, emit, network.initial_carry, opponents, changes
    )
    service, server, _ = start_inference(
        config, spec, network, registry, store, logdir, bind, port, learner.guard, league, annealing
    )
    evaluator = None
    if evaluation is not None and config.league.eval_interval_s > 0:
        evaluator = EvaluationThread(evaluation, registry, config.league.eval_interval_s)
        evaluator.start()

    metrics = MetricsWriter(logdir, config, config.log.wandb_mode, config.log.wandb_project)
    env_steps = lambda: base_env_steps + store.rows_received  # noqa: E731
    interval = _Interval(time.monotonic(), env_steps(), 0)
    last_checkpoint = time.monotonic()
    horizon, batch_size = config.unroll_length, config.batch_unrolls
    row: dict = {}
    batch = []
    ctx = (learner, service, store, unrolls, horizon, league, evaluator)

    def save(reason: str):
        state = learner.state()
        checkpointer.save(
            learner.version,
            state,
            {
                "env_steps": env_steps(),
                "episodes": episodes_total,
                "policy_version": learner.version,
                # Lets inference_server.py, surgery and evaluation rebuild the network.
                "config": json.loads(config.to_json()),
                **_league_state(league, evaluator),
            },
        )
        logging.info(
            "checkpoint %d saved (%s; params %s)",
            learner.version,
            reason,
            ckpt_lib.params_fingerprint(state.params),
        )

    try:
        while not stop.is_set() and env_steps() < config.total_env_steps:
            service.check_alive()
            try:
                batch.append(unrolls.get(timeout=0.1))
            except queue.Empty:
                pass
            if len(batch) == batch_size:
                stacked = stack_unrolls(batch)
                batch = []
                interval.staleness.append(_staleness(learner.version, stacked))
                interval.updates.append(learner.update(stacked))
                interval.consumed += batch_size * horizon * learner.epochs
                registry.publish(learner.version, learner.policy_params())
                if league is not None and league.wants_snapshot(learner.version):
                    league.add_snapshot(learner.version, learner.policy_params())
            now = time.monotonic()
            if now - interval.start >= config.log.interval_s:
                row, episodes_total = _log(metrics, interval, now, env_steps(), episodes_total, ctx)
                interval = _Interval(now, env_steps(), store.unrolls_emitted)
            if now - last_checkpoint >= config.checkpoint.interval_s:
                save("interval")
                last_checkpoint = now
    finally:
        # Freeze the counters first, so the last metrics row and the checkpoint agree.
        finished = not stop.is_set() and env_steps() >= config.total_env_steps
        if evaluator is not None:
            evaluator.stop()
        service.stop(finished=finished)
        server.stop(grace=2.0).wait()
        try:
            row, episodes_total = _log(
                metrics, interval, time.monotonic(), env_steps(), episodes_total, ctx
            )
            save("training complete" if finished else "stop requested")
        finally:
            metrics.close()
            checkpointer.close()
    return row


def _staleness(version: int, unrolls) -> float:
    """Mean policy versions between acting and learning, over the steps that count in the loss."""
    behaviour = unrolls.policy_version[unrolls.valid]
    return float(np.mean(version - behaviour)) if behaviour.size else 0.0


def _log(metrics, interval, now, env_steps, episodes_total, ctx) -> tuple[dict, int]:
    row = _row(interval, now, env_steps, *ctx)
    episodes_total += row["episodes"]
    row["episodes_total"] = episodes_total
    metrics.write(row)
    return row, episodes_total


def _make_league(config, logdir, network, learner, meta):
    """League and TrueSkill evaluation for two-player games (None, None otherwise)."""
    if network.spec.num_players < 2:
        return None, None
    snapshots = os.path.join(logdir, LEAGUE_DIR, "snapshots")
    references = os.path.join(logdir, LEAGUE_DIR, "references")
    league = League(config.league, seed=config.seed, snapshot_dir=snapshots)
    evaluation = Evaluation(
        config.league, config.env.name, network, references, config.seed, learner.guard
    )
    if "league" in meta:
        template = learner.policy_params()
        league.load_state_dict(meta["league"], template)
        evaluation.load_state_dict(meta.get("evaluation", {}), template)
        logging.info("league restored: %d snapshots", len(league.pool))
    return league, evaluation


def _league_state(league, evaluator) -> dict:
    if league is None:
        return {}
    state = {"league": league.state_dict()}
    if evaluator is not None:
        state["evaluation"] = evaluator.state_dict()
    return state


def _row(
    interval, now, env_steps, learner, service, store, unrolls, horizon, league, evaluator
) -> dict:
    dt = max(now - interval.start, 1e-9)
    stats = service.stats.take()
    episodes = stats["episodes"]
    p50, p99 = inference.latency_summary(stats["latency_ms"])
    rfps = (store.unrolls_emitted - interval.unrolls_emitted) * horizon / dt
    cfps = interval.consumed / dt
    row = {
        "time": time.time(),
        "env_steps": env_steps,
        "learner_updates": learner.version,
        "policy_version": learner.version,
        "sps": (env_steps - interval.env_steps) / dt,
        "episodes": len(episodes),
        "episode_return_mean": float(np.mean([e.episode_return for e in episodes]))
        if episodes
        else float("nan"),
        "episode_length_mean": float(np.mean([e.length for e in episodes]))
        if episodes
        else float("nan"),
        "staleness_mean": float(np.mean(interval.staleness))
        if interval.staleness
        else float("nan"),
        "rfps": rfps,
        "cfps": cfps,
        "sample_reuse": cfps / rfps if rfps > 0 else float("nan"),
        "inference_batch_mean": inference.batch_summary(stats["batch_rows"]),
        "inference_latency_ms_p50": p50,
        "inference_latency_ms_p99": p99,
        "actors_connected": service.num_sessions,
        "unroll_queue": unrolls.qsize(),
        "steps_dropped": store.steps_dropped,
    }
    # Learner values are null in an interval without updates, so every row has the same keys.
    row.update({k: float("nan") for k in learner.metric_keys})
    if service.annealing is not None:
        row["anneal_fraction"] = service.annealing.fraction(learner.version)
    if league is not None:
        row.update(league.take_metrics())
    if evaluator is not None:
        row.update(evaluator.metrics())
    threshold = learner.config.log.get("success_threshold")
    if threshold is not None:
        row["episode_success_rate"] = (
            float(np.mean([e.episode_return > threshold for e in episodes])) if episodes else None
        )
    if interval.updates:
        keys = interval.updates[0].keys()
        row.update({k: float(np.mean([u[k] for u in interval.updates])) for k in keys})
    return row
