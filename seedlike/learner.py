"""The learner process (learner.py): its parts, wired together once (`build`), the learner loop
(`train`), and the process around them (`main`: signals, the stop grace, one-line errors).

A row flows one way: gRPC handlers (seedlike.rpc.streams, one per actor stream; with stream front
ends in processes of their own, which hand checked rows over through shared memory,
seedlike.rpc.hub) -> the inference pipeline (seedlike.server.inference: batching, policy,
trajectory store) -> learner batches
(seedlike.server.trajectory_store.BatchQueue) -> the learner loop here, which publishes every new
policy version back to inference, snapshots it into the league, and writes metrics and
checkpoints.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import gc
import json
import logging
import os
import signal
import sys
import threading
import time

import jax
import numpy as np

from networks import make_network
from seedlike import checkpoint as ckpt_lib
from seedlike import cli, envs
from seedlike import config as config_lib
from seedlike.algos import ALGORITHMS, unroll_overlap
from seedlike.league import roles
from seedlike.league.evaluation import Evaluation, EvaluationThread
from seedlike.league.league import League, PeerSnapshots
from seedlike.league.players import LEARNER
from seedlike.learning import train_state as ts
from seedlike.learning.update import Interrupted, Learner
from seedlike.metrics import MetricsWriter, run_summary, write_config, write_summary
from seedlike.policy import PolicyRegistry
from seedlike.rpc import security
from seedlike.rpc.listen import start_inference
from seedlike.rpc.streams import Transport
from seedlike.runtime import distributed, procstats, xla_flags
from seedlike.runtime.storage import StorageError
from seedlike.server import inference, influence
from seedlike.server.anneal import Annealing
from seedlike.server.curriculum import Curriculum
from seedlike.server.episodes import EpisodeBoard
from seedlike.server.exploration import Exploration
from seedlike.server.matchmaking import Matchmaker
from seedlike.server.return_scale import ReturnScale
from seedlike.server.trajectory_store import BatchQueue, TrajectoryStore
from seedlike.server.unrolls import UnrollPool
from seedlike.teams import Teams
from seedlike.types import LEGAL_ACTION_MASK

REPLAY_FILE = "replay.npz"  # a replay algorithm's contents, with save_replay (checkpoints/)


def make_return_scale(config, meta: dict) -> ReturnScale | None:
    """The reward scaling of `<algo>.normalize_rewards` (None: off), with a checkpoint's running
    statistics."""
    algo = config[config.algo]
    if not algo.normalize_rewards:
        return None
    scale = ReturnScale(algo.gamma, algo.normalized_reward_clip)
    if "return_scale" in meta:
        scale.load_state_dict(meta["return_scale"])
    return scale


@dataclasses.dataclass
class Interval:
    """What the learner loop accumulates between two metrics rows."""

    start: float
    env_steps: int
    unrolls_emitted: int
    update_metrics: list = dataclasses.field(default_factory=list)  # each update's
    staleness: list = dataclasses.field(default_factory=list)
    consumed: int = 0  # learning steps consumed by gradient steps, every epoch counted
    learn_s: float = 0.0
    cpu_s: float = dataclasses.field(default_factory=lambda: procstats.usage().cpu_s)


@dataclasses.dataclass
class LearnerProcess:
    """Everything the learner process runs, built once from the config."""

    config: object
    logdir: str
    learner: Learner
    checkpointer: ckpt_lib.Checkpointer | None  # None on learner processes other than 0
    registry: PolicyRegistry
    league: League | None
    evaluator: EvaluationThread | None
    batches: BatchQueue
    store: TrajectoryStore
    service: inference.InferenceService
    server: object  # grpc.Server
    metrics: MetricsWriter
    lockstep: distributed.Lockstep
    peers: distributed.PeerWatch
    episodes_total: int
    episode_board: EpisodeBoard
    # League roles: the state an exploiter resets to, and the thread reading the other roles'
    # snapshots (seedlike.league.roles); None otherwise.
    initial_state: object = None
    league_peers: object = None

    def env_steps(self) -> int:
        """Rows received from actors since the run began, across restarts (with several learner
        processes: by all of them, as of the last update)."""
        return self.lockstep.env_steps(self.service.env_steps)

    def learn(self, batch, interval: Interval) -> None:
        """One update from a learner batch (seedlike.server.trajectory_store.LearnerBatch);
        publishes the new policy version and gives the batch's buffers back."""
        learner = self.learner
        start = time.perf_counter()
        try:
            unrolls = batch.unroll(learner.batch_device)
        finally:
            batch.release()  # unroll() copied what the update reads
        interval.staleness.append(_staleness(learner.policy_version, unrolls))
        interval.update_metrics.append(learner.update(unrolls, batch.identity))
        interval.consumed += learner.samples(unrolls)
        self.registry.publish(learner.policy_version, learner.policy_params())
        if self.league is not None and self.league.after_update(
            learner.policy_version, self.env_steps(), learner.policy_params
        ):
            # An exploiter starts again, as a new version.
            learner.reset(self.league.reset_state(self.initial_state))
            self.registry.publish(learner.policy_version, learner.policy_params())
        interval.learn_s += time.perf_counter() - start

    def log(self, interval: Interval, now: float) -> dict:
        row = metrics_row(self, interval, now)
        self.episodes_total += row["episodes"]
        row["episodes_total"] = self.episodes_total
        self.metrics.write(row)
        return row

    def save(self, reason: str) -> None:
        state = self.learner.state()
        if self.checkpointer is None:
            # Process 0 saves the state every learner process holds; the fingerprint shows it.
            logging.info(
                "process %d at policy version %d (%s; params %s): process 0 saves",
                jax.process_index(),
                self.learner.policy_version,
                reason,
                ckpt_lib.params_fingerprint(state.params),
            )
            return
        meta = {
            "env_steps": self.env_steps(),
            "episodes": self.episodes_total,
            "policy_version": self.learner.policy_version,
            # Lets inference_server.py, surgery and evaluation rebuild the network.
            "config": json.loads(self.config.to_json()),
        }
        curriculum = self.service.matchmaker.curriculum
        if curriculum is not None:
            meta["curriculum"] = curriculum.state_dict()
        if self.service.recorder.return_scale is not None:
            meta["return_scale"] = self.service.recorder.return_scale.state_dict()
        if self.league is not None:
            meta["league"] = self.league.state_dict()
            if self.evaluator is not None:
                meta["evaluation"] = self.evaluator.state_dict()
        self.checkpointer.save(self.learner.policy_version, state, meta)
        if self.learner.save_replay:
            self.learner.write_replay(os.path.join(self.checkpointer.directory, REPLAY_FILE))
        if reason != "interval":
            self.checkpointer.wait()  # the last save: committed before the process ends
        logging.info(
            "checkpoint %d %s (%s; params %s)",
            self.learner.policy_version,
            "writing in the background" if reason == "interval" else "saved",
            reason,
            ckpt_lib.params_fingerprint(state.params),
        )


def build(config, logdir: str, bind: str = "127.0.0.1", port: int = 0) -> LearnerProcess:
    """Restores or initializes the learner, and starts serving actors and evaluation: the
    checks, then `restore`, `start_league` and `serve`, each a part of the process."""
    spec, teams = _checked(config)
    distributed.initialize(config, bind)
    if not distributed.is_primary():
        logdir = os.path.join(logdir, f"process_{jax.process_index()}")
    os.makedirs(logdir, exist_ok=True)
    for warning in config_lib.advice(config, spec, jax.default_backend()):
        logging.warning("%s", warning)
    network = make_network(config.network, spec)
    learner = ALGORITHMS[config.algo].learner()(
        config, network, window_s=config.server.fair_window_s
    )
    logging.info("learner on %d device(s): %s", learner.num_devices, learner.devices)
    checkpointer, meta, counters = restore(config, logdir, learner)
    if checkpointer is not None:  # resolved, and accepted for a resumed run: every setting
        write_config(logdir, config)
    registry = PolicyRegistry()
    registry.publish(learner.policy_version, learner.policy_params())
    league = start_league(config, logdir, network, learner, meta, teams)
    service, server, batches, store = serve(
        config, spec, network, registry, learner, league, meta, counters, (logdir, bind, port)
    )
    evaluator = None
    if league.evaluation is not None and config.league.eval_interval_s > 0:
        evaluator = EvaluationThread(league.evaluation, registry, config.league.eval_interval_s)
        evaluator.start()
    return LearnerProcess(
        config=config,
        logdir=logdir,
        learner=learner,
        checkpointer=checkpointer,
        registry=registry,
        league=league.league,
        evaluator=evaluator,
        batches=batches,
        store=store,
        service=service,
        server=server,
        metrics=_metrics_writer(config, logdir),
        lockstep=distributed.Lockstep(learner.devices, counters["env_steps"]),
        peers=distributed.PeerWatch(
            config.distributed.peer_timeout_s, on_stuck=_peer_stuck
        ).start(),
        episodes_total=counters["episodes"],
        episode_board=EpisodeBoard(int(config.log.episode_window)),
        initial_state=league.initial_state,
        league_peers=league.peers,
    )


def _checked(config):
    """(spec, teams) of a config that can run here; a ConfigError naming the setting if not."""
    config_lib.validate(config)
    spec = config_lib.env_spec(config)
    config_lib.validate_network(config, spec)
    try:
        teams = Teams.from_config(config.teams, spec)
    except ValueError as e:
        raise config_lib.ConfigError(f"invalid config: {e}") from None
    if config.seeds != 1:
        raise config_lib.ConfigError(
            f"invalid config: seeds={config.seeds} trains agents side by side in one program on "
            f"the device, and env.backend={config.env.backend!r} runs through actors; set seeds=1 "
            "(several seeds of a SEED run: python -m seedlike.launch.sweep --seeds=N)"
        )
    if teams.num_teams > 1 and not ALGORITHMS[config.algo].self_play:
        players = ", ".join(n for n, a in ALGORITHMS.items() if a.self_play)
        raise config_lib.ConfigError(
            f"invalid config: algo={config.algo!r} learns one agent; games between teams "
            f"({spec.name}: self-play, leagues) are for {players}"
        )
    if teams.num_teams > 1 and config.distributed.num_processes > 1:
        raise config_lib.ConfigError(
            "invalid config: games between teams (league, evaluation) run on one learner "
            "process; set distributed.num_processes=1"
        )
    return spec, teams


def restore(config, logdir: str, learner: Learner):
    """The learner's state from the run's latest checkpoint (process 0's, broadcast to the
    others), from `init_from`, or fresh, installed on its devices: (checkpointer (None on
    processes other than 0), the checkpoint's metadata ({} without one), the run's counters)."""
    checkpointer = None
    state, meta = learner.init_state(jax.random.key(config.seed)), {}
    if distributed.is_primary():
        checkpointer = ckpt_lib.Checkpointer(
            os.path.join(logdir, "checkpoints"), config.checkpoint.max_to_keep
        )
        checkpointer.remove_interrupted_saves()
        state, meta = _restore(checkpointer, state)
        config_lib.check_resumed(config, meta, logdir)
        if not meta and config.init_from:
            state = ckpt_lib.init_from(config.init_from, state)
        if meta and learner.save_replay:
            learner.read_replay(os.path.join(checkpointer.directory, REPLAY_FILE))
    counters = {k: int(meta.get(k, 0)) for k in ("env_steps", "episodes")}
    learner.steps_before = counters["env_steps"]  # schedules that count the run's env steps
    state, counters = distributed.broadcast_start(state, counters)
    learner.set_state(state)
    if checkpointer is None:
        logging.info(
            "state from process 0: env step %d, policy version %d (params %s)",
            counters["env_steps"],
            learner.policy_version,
            ckpt_lib.params_fingerprint(state.params),
        )
    return checkpointer, meta, counters


@dataclasses.dataclass
class LeagueParts:
    """What the league brings to a learner process (all None without games between teams)."""

    league: League | None = None
    evaluation: Evaluation | None = None
    initial_state: object = None  # an exploiter's reset state (league roles)
    peers: PeerSnapshots | None = None  # the thread reading the other roles' snapshots


def start_league(config, logdir, network, learner, meta, teams) -> LeagueParts:
    """The league of games between teams (`_make_league`) and, for a league role, the state an
    exploiter resets to and the thread reading the other roles' snapshots."""
    league, evaluation = _make_league(config, logdir, network, learner, meta, teams)
    parts = LeagueParts(league, evaluation)
    if league is None or not league.role:
        return parts
    if league.rule is not None:
        parts.initial_state = learner.init_state(jax.random.key(config.seed))
        if config.init_from:
            parts.initial_state = ckpt_lib.init_from(config.init_from, parts.initial_state)
    parts.peers = PeerSnapshots(
        league,
        league.role_dir,
        [r for r in roles.OPPONENT_ROLES[league.role] if r != league.role],
        learner.policy_params(),
        config.league.peer_refresh_s,
        learner.guard,
    ).start()
    return parts


def serve(config, spec, network, registry, learner, league: LeagueParts, meta, counters, where):
    """Starts the inference pipeline for actors: who plays each episode (matchmaking with the
    league, annealing, curriculum), the trajectory store filling learner batches, and the
    service listening at `where` = (logdir, bind, port). Returns (service, server, batches,
    store)."""
    annealing = Annealing.from_config(config.anneal)
    curriculum = Curriculum.from_config(config)
    if curriculum is not None and "curriculum" in meta:
        curriculum.load_state_dict(meta["curriculum"])
        logging.info("curriculum restored: levels up to %d", curriculum.bound)
    quota = influence.ResultQuota(config.server.fair_window_s, config.server.fair_share_factor)
    matchmaker = Matchmaker(
        spec, league.league, annealing, config.seed, Teams.from_config(config.teams, spec),
        curriculum, config.log.success_threshold, quota,
    )  # fmt: skip
    # server.queue_unrolls 0 means one batch (its documented value), in whole batches either way.
    slots = -(-int(config.server.queue_unrolls or config.batch_unrolls) // config.batch_unrolls)
    batches = BatchQueue(slots)
    server_spec = annealing.server_spec(spec) if annealing else spec
    # Front ends write the observations of every step straight into the pool's shared memory.
    front_ends = Transport.from_config(config.server).front_ends
    pool = UnrollPool(
        server_spec, config.unroll_length, shared=front_ends > 0, overlap=unroll_overlap(config)
    )
    store = TrajectoryStore.from_config(
        pool, learner.local_batch_unrolls, batches, network.initial_carry(1), config.server
    )
    service = inference.InferenceService.from_config(
        config, spec=server_spec, network=network, registry=registry, store=store,
        matchmaker=matchmaker, guard=learner.guard, return_scale=make_return_scale(config, meta),
        exploration=_exploration(config, counters["env_steps"]),
    )  # fmt: skip
    server, _ = start_inference(service, config, *where)
    return service, server, batches, store


def _metrics_writer(config, logdir: str) -> MetricsWriter:
    return MetricsWriter(
        logdir,
        config,
        config.log.wandb_mode,
        config.log.wandb_project,
        config.log.wandb_group,
        total_env_steps=int(config.total_env_steps),
        tensorboard=bool(config.log.tensorboard),
        use_wandb=distributed.is_primary(),
        label=_console_label(config, logdir),
    )


def train(
    config,
    logdir: str,
    bind: str = "127.0.0.1",
    port: int = 0,
    stop: threading.Event | None = None,
    freeze_gc: bool = False,
) -> dict:
    """Serves actors and learns until `config.total_env_steps` (or `config.stop_at_return`) or
    until `stop` is set.

    Writes <logdir>/server_address once actors can connect (learner processes other than 0 of a
    multi-host run use <logdir>/process_<k>). Returns the last metrics row.

    `freeze_gc`: the process exists for this run (learner.py). Everything `build` made (JAX, XLA and
    MLIR objects, the network, the league) then lives as long as the process and is frozen: left out
    of the cyclic collector's full passes, which the serving threads trigger with their allocations
    and which otherwise scan it all while holding the interpreter lock (a profile found it most of
    the learner process's CPU outside the serving threads: RESULTS.md, "One learner host, many actor
    hosts"). A caller that trains more than once in a process leaves it off, so what one run made is
    collected after it.
    """
    stop = stop or threading.Event()
    p = build(config, logdir, bind, port)
    if freeze_gc:
        gc.freeze()
    p.learner.interrupt = stop
    interval = Interval(time.monotonic(), p.env_steps(), 0)
    last_checkpoint = time.monotonic()
    row: dict = {}
    total = int(config.total_env_steps)
    if config.pause_at_env_steps:
        total = min(total, int(config.pause_at_env_steps))
    hold = ReturnHold(config.stop_at_return, float(config.log.stop_hold_s))
    log_s, checkpoint_s = float(config.log.interval_s), float(config.checkpoint.interval_s)
    storage_failed = False
    try:
        while _loop_step(p, stop.is_set() or hold.reached, total, interval):
            now = time.monotonic()
            if now - interval.start >= log_s:
                row = p.log(interval, now)
                interval = Interval(now, p.env_steps(), p.store.unrolls_emitted)
                hold.update(p.episode_board, now)
            if now - last_checkpoint >= checkpoint_s:
                p.save("interval")
                last_checkpoint = now
    except StorageError:
        storage_failed = True
        raise
    finally:
        p.peers.stop()  # the others may now end before this one
        # Freeze the counters first, so the last metrics row and the checkpoint agree.
        finished = not stop.is_set() and (hold.reached or p.env_steps() >= total)
        _stop_serving(p, finished)
        if storage_failed:  # nothing more can be written; the entrypoint says why and exits
            p.metrics.close()
        else:
            paused = finished and not hold.reached and total < int(config.total_env_steps)
            row = _finish(p, interval, finished, paused)
    return row


@dataclasses.dataclass
class ReturnHold:
    """Whether the return has held `target` (config.stop_at_return; None: never) for `hold_s`
    seconds (log.stop_hold_s): a majority of identities' mean returns at it, row after row."""

    target: float | None
    hold_s: float
    since: float | None = None
    reached: bool = False

    def update(self, board: EpisodeBoard, now: float) -> None:
        if self.target is None or not board.reached(self.target):
            self.since = None
            return
        self.since = now if self.since is None else self.since
        self.reached = now - self.since >= self.hold_s


def _loop_step(p: LearnerProcess, stopping: bool, total: int, interval: Interval) -> bool:
    """One pass of the learner loop: the next learner batch (if one comes within 0.1 s) learned
    from, or dropped without config.learn. False once the loop should end: a stop, the budget
    reached, or an update abandoned at a stop request. Several learner processes agree on
    stopping first, and a lost one ends the run (distributed.PeerLost)."""
    p.service.check_alive()
    if p.peers.lost:
        p.peers.acknowledge()
        logging.error("a learner process is gone: %s", p.peers.lost)
        raise distributed.peer_lost(RuntimeError(p.peers.lost))
    batch = p.batches.next_batch(timeout=0.1)
    try:
        if p.lockstep.shared and (batch is not None or stopping):
            # Every process takes part in each update's collectives, so all agree first.
            try:
                stopping = p.lockstep.agree(p.service.env_steps, stopping)
            except Exception as e:  # noqa: BLE001 - only a peer can fail this psum
                # Gloo reports a peer's reset connection as a ValueError, not as
                # JaxRuntimeError: uncaught, it left a traceback and an exit that hung on the
                # dead peer.
                raise _peer_failed("the learner processes' step agreement", e) from None
        if stopping or p.env_steps() >= total:
            return False
        if batch is not None and p.config.learn:
            try:
                p.learn(batch, interval)
            except Interrupted as e:
                logging.info("%s", e)
                return False
        elif batch is not None:
            batch.release()
    except jax.errors.JaxRuntimeError as e:
        if not p.lockstep.shared:
            raise
        raise _peer_failed("a step shared by the learner processes", e) from None
    return True


def _stop_serving(p: LearnerProcess, finished: bool) -> None:
    """Stops evaluation, the league's peer reader, inference (actors are told whether the run
    finished) and the gRPC server."""
    if p.evaluator is not None:
        p.evaluator.stop()
    if p.league_peers is not None:
        p.league_peers.stop()
    p.service.stop(finished=finished)
    p.server.stop(grace_s=2.0)


def _finish(p: LearnerProcess, interval: Interval, finished: bool, paused: bool = False) -> dict:
    """The last metrics row and checkpoint, and the run's summary line."""
    try:
        row = p.log(interval, time.monotonic())
        p.save("training complete" if finished else "stop requested")
        checkpoint = None
        if p.checkpointer is not None:
            checkpoint = os.path.join(p.checkpointer.directory, str(p.learner.policy_version))
        outcome = "finished" if finished else "stopped (rerun with the same --logdir to resume)"
        if paused:
            outcome = "paused at pause_at_env_steps (rerun with a larger one, or 0, to go on)"
        logging.info("%s", p.metrics.summary(outcome, checkpoint))
        if p.checkpointer is not None:
            kind = "paused" if paused else "finished" if finished else "stopped"
            wall_s = time.time() - p.metrics.started
            summary = run_summary(p.logdir, kind, int(p.config.total_env_steps), wall_s,
                                  checkpoint=checkpoint)  # fmt: skip
            write_summary(p.logdir, summary)
        return row
    finally:
        p.metrics.close()
        if p.checkpointer is not None:
            p.checkpointer.close()


def _exploration(config, env_steps: int) -> Exploration | None:
    """The per-identity epsilons of an algorithm section with exploration settings (None for
    the others), their annealing counted from the run's first env step."""
    exploration = Exploration.from_config(config[config.algo])
    if exploration is not None:
        exploration.steps_before = int(env_steps)
    return exploration


def _console_label(config, logdir: str) -> str:
    """What marks this process's console lines where a job runs several learners: "member k"
    of a population, "process k" of a multi-host learner; "" otherwise."""
    if config.population.size > 1:
        return os.path.basename(os.path.normpath(logdir)).replace("_", " ")
    if config.league.role:
        return config.league.role.replace("_", " ")
    if config.distributed.num_processes > 1:
        return f"process {jax.process_index()}"
    return ""


def _restore(checkpointer, initial):
    """The latest checkpoint's (state, metadata), or (initial, {}) without one."""
    restored = checkpointer.restore(initial, older=ts.older_layout)
    if restored is None:
        return initial, {}
    state, meta = restored
    logging.info(
        "resumed from %s at env step %d, policy version %d (params %s)",
        checkpointer.directory,
        meta["env_steps"],
        int(state.policy_version),
        ckpt_lib.params_fingerprint(state.params),
    )
    return state, meta


def _make_league(config, logdir, network, learner, meta, teams):
    """The league of games between teams, with TrueSkill evaluation for two-player board games
    (None where there is no opponent team, and for a population member: its opponents are the
    other members)."""
    if teams.num_teams < 2 or config.population.size > 1:
        return None, None
    references = os.path.join(roles.league_dir(logdir), "references")
    league = League(config.league, seed=config.seed, snapshot_dir=roles.snapshot_dir(logdir))
    evaluation = None
    if network.spec.num_players == 2 and LEGAL_ACTION_MASK in network.spec.extras:
        evaluation = Evaluation(
            config.league, config.env, network, references, config.seed, learner.guard
        )
    if "league" in meta:
        template = learner.policy_params()
        league.load_state_dict(meta["league"], template)
        if evaluation is not None:
            evaluation.load_state_dict(meta.get("evaluation", {}), template)
        logging.info("league restored: %d snapshots", len(league.pool))
    return league, evaluation


def _staleness(version: int, unrolls) -> float:
    """Mean policy versions between acting and learning, over the steps that count in the loss
    (not step T: it only bootstraps, and is the next unroll's step 0)."""
    behaviour = unrolls.policy_version[:, :-1][unrolls.valid[:, :-1]]
    return float(np.mean(version - behaviour)) if behaviour.size else 0.0


def _mean(values) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def _finite_mean(values) -> float:
    finite = [v for v in values if np.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")


# Metrics renamed since an earlier release, old name -> new: rows carry both for one release.
METRIC_ALIASES = {"actor_share_max": "identity_share_max"}


def metrics_row(p: LearnerProcess, interval: Interval, now: float) -> dict:
    """One metrics row (docs/metrics.md) for the interval that ends `now`."""
    dt = max(now - interval.start, 1e-9)
    stats = p.service.stats.take()
    episodes = stats["episodes"]
    mine = episodes.policy == LEARNER
    board = p.episode_board
    board.add(episodes.identity[mine], episodes.episode_return[mine], episodes.length[mine])
    board.keep(p.store.connected_identities())
    threshold = p.config.log.success_threshold
    recent = board.summary(threshold, distrusted=p.store.reward_bounded)
    p50, p99 = inference.latency_summary(stats["latency_ms"])
    env_steps = p.env_steps()
    rfps = (p.store.unrolls_emitted - interval.unrolls_emitted) * p.config.unroll_length / dt
    cfps = interval.consumed / dt
    row = {
        "time": time.time(),
        "env_steps": env_steps,
        "policy_version": p.learner.policy_version,
        "sps": (env_steps - interval.env_steps) / dt,
        "episodes": int(mine.sum()),
        "episode_return_mean": recent["return"],
        "episode_return_robust": recent["robust"],
        "episode_length_mean": recent["length"],
        "episode_identities": recent["identities"],
        "staleness_mean": _mean(interval.staleness),
        "rfps": rfps,
        "cfps": cfps,
        "sample_reuse": cfps / rfps if rfps > 0 else float("nan"),
        "inference_batch_mean": inference.batch_summary(stats["batch_rows"]),
        "inference_rows_in_place": stats["rows_in_place"],
        "inference_latency_ms_p50": p50,
        "inference_latency_ms_p99": p99,
        "inference_window_ms": p.service.batcher.window_s * 1e3,
        "actors_connected": p.service.num_sessions,
        "unroll_queue": p.batches.qsize() * p.learner.local_batch_unrolls,
        "steps_dropped": p.store.steps_dropped,
        "unrolls_capped": p.store.unrolls_capped,
        "rewards_scaled": p.store.rewards_scaled,
        "unrolls_stale": p.store.unrolls_stale,
        "unrolls_held": p.store.unrolls_held,
        "identity_share_max": p.store.last_batch_max_share,
    }
    row.update({old: row[new] for old, new in METRIC_ALIASES.items()})
    row.update(_process_metrics(interval, stats, dt))
    # Learner values are null in an interval without updates, so every row has the same keys.
    row.update({k: float("nan") for k in p.learner.metric_keys})
    row.update(_part_metrics(p, env_steps))
    if threshold is not None:
        row["episode_success_rate"] = recent["success"]
    if interval.update_metrics:
        keys = interval.update_metrics[0].keys()
        # Over the updates that have the value (a replay learner's before min_fill have none).
        row.update({k: _finite_mean([u[k] for u in interval.update_metrics]) for k in keys})
    return row


def _process_metrics(interval: Interval, stats: dict, dt: float) -> dict:
    """The process's own use (memory, cores, threads, files) and each stage's busy share and
    latency over the interval."""
    own = procstats.usage()
    row = {
        "process/rss_mb": own.rss_mb,
        "process/cpu": (own.cpu_s - interval.cpu_s) / dt,
        "process/threads": own.threads,
        "process/open_files": own.open_files,
    }
    busy = {**stats["busy_s"], "learn": interval.learn_s}
    row.update({f"busy/{stage}": s / dt for stage, s in busy.items()})
    row.update({f"latency_ms/{k}": v for k, v in stats["segments_ms"].items()})
    return row


def _part_metrics(p: LearnerProcess, env_steps: int) -> dict:
    """The metrics of the parts a run may have: exploration, annealing, a curriculum, the
    league and its evaluation."""
    row = {}
    if p.service.exploration is not None:
        held = p.service.exploration.held(p.service.env_steps)
        row.update(
            {
                f"exploration/epsilon_{s}": held.get(s, float("nan"))
                for s in range(len(p.service.exploration.rates))
            }
        )
    if p.service.matchmaker.annealing is not None:
        row["anneal_fraction"] = p.service.matchmaker.annealing.fraction(p.learner.policy_version)
    curriculum = p.service.matchmaker.curriculum
    if curriculum is not None:
        curriculum.progress(env_steps)
        row.update(curriculum.take_metrics())
    if p.league is not None:
        row.update(p.league.take_metrics())
        row["league/results_capped"] = p.service.matchmaker.result_quota.capped
    if p.evaluator is not None:
        row.update(p.evaluator.metrics())
    return row


REPEAT_S = 2.0  # a stop signal this long after the first exits at once


def main(config, logdir: str, bind: str, port: int) -> None:
    """learner.py: trains until done, saving a checkpoint and stopping within
    checkpoint.stop_grace_s on SIGTERM or SIGINT (a second signal REPEAT_S or more later exits at
    once); errors a restart cannot fix end the process with one line, no traceback."""
    xla_flags.prepare()
    stop = threading.Event()
    grace_s = float(config.checkpoint.stop_grace_s)
    first_signal: list[float] = []

    def on_signal(signum, frame):
        del frame
        if first_signal:
            # Ctrl-C reaches the whole process group and train.sh passes it on too: only a
            # signal well after the first is a second request.
            if time.monotonic() - first_signal[0] > REPEAT_S:
                _exit_now(f"signal {signum} again: exiting without a final checkpoint")
            return
        first_signal.append(time.monotonic())
        logging.info("signal %d: saving a checkpoint and stopping", signum)
        stop.set()
        deadline = threading.Timer(grace_s, _stop_overdue, (grace_s, logdir))
        deadline.daemon = True
        deadline.start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    done = cli.finished_line(logdir, config)
    if done:  # nothing to serve or learn: the run has this budget's results already
        logging.info("%s", done)
        return
    try:
        if envs.on_device(config.env):  # no actors to serve: the envs run in the program
            from seedlike.ondevice import run as ondevice

            ondevice.train(config, logdir, stop, address=bind, on_peer_stuck=_peer_stuck)
        else:
            train(config, logdir, bind=bind, port=port, stop=stop, freeze_gc=True)
    except envs.UnknownEnv as e:
        raise SystemExit(f"error: {e}") from None
    except (config_lib.ConfigError, ckpt_lib.CheckpointError, security.TransportError) as e:
        raise SystemExit(f"error: {e}") from None
    except StorageError as e:
        # orbax leaves threads behind that wait forever for the failed save: exit without them.
        _exit_now(str(e))
    except distributed.PeerLost as e:
        # Its checkpoint is saved (process 0); JAX's exit handler would wait for the lost process.
        _exit_now(str(e))


def _stop_overdue(grace_s: float, logdir: str) -> None:
    """The stop grace ran out: what every thread was doing goes to a file, since the one line
    cannot say which update, compile or save held the learner."""
    stacks = os.path.join(logdir, "stop_stacks.txt")
    try:
        with open(stacks, "w") as f:
            faulthandler.dump_traceback(file=f, all_threads=True)
        where = f"; thread stacks in {stacks}"
    except OSError as e:  # the stacks still say why: on the console, above this line
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        where = f"; thread stacks above ({stacks}: {e.strerror})"
    _exit_now(
        f"the learner did not stop within {grace_s:g} s of the stop request (an update, compile "
        "or save still running); exiting without a final checkpoint, the previous one stands "
        f"(checkpoint.stop_grace_s){where}"
    )


def _peer_failed(what: str, error: Exception) -> distributed.PeerLost:
    """The PeerLost to raise for a failed collective (the whole error stays in the log; the
    entrypoint prints one line and exits). A process other than 0 exits here at once: it has
    nothing of its own to save, and JAX's coordination agent aborts it (a core dump) as soon as
    it learns that the service is gone."""
    logging.error("%s failed: %s", what, error)
    if not distributed.is_primary():
        _exit_now(str(distributed.peer_lost(error)))
    return distributed.peer_lost(error)


def _peer_stuck(why: str) -> None:
    """The learner loop waits in a collective with a lost process (distributed.PeerWatch): the
    process ends in one line; process 0's last periodic checkpoint stands."""
    logging.error("a learner process is gone: %s", why)
    _exit_now(f"{distributed.peer_lost(RuntimeError(why))} (this process was waiting for it)")


def _exit_now(message: str) -> None:
    """Prints the one-line error and exits at once: no exit handlers (threads that would never
    finish may be left behind), the log flushed first."""
    for handler in logging.getLogger().handlers:
        handler.flush()
    print(f"error: {message}", file=sys.stderr, flush=True)
    os._exit(1)
