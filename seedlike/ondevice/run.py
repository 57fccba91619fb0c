"""The host side of an on-device run: builds the program, calls it for as many updates at a time
as fill a log interval, and between calls writes what a SEED run writes (metrics.jsonl rows,
the console line with its ETA, wandb, checkpoints, config.json and the summary). A stop request
(Ctrl-C, SIGTERM) ends the run after the call in flight, with a checkpoint.

A checkpoint holds the TrainState as a SEED run's does (evaluate.py, surgery and init_from read
it alike) and, beside it, the envs' states, the recurrent carry and the PRNG key (the "device"
item): a run stopped and resumed gives the parameters of one that was never stopped, bit for bit
on the same machine (tests/ondevice/test_run.py).

Several hosts (config.distributed, seedlike.runtime.distributed) run one program: the pmap spans
every process's devices, each process steps the envs of its own devices, and the gradients and
statistics are averaged over all of them, so 2 processes of 1 device compute what 1 process of 2
does (tests/ondevice/test_multihost.py). Process 0's clock sizes the calls and times the
checkpoints (`agree_call` before each call); process 0 writes the rows, the summary and the
checkpoints, which hold every device's envs (gathered), so a run resumes on any layout of as many
devices.
"""

from __future__ import annotations

import dataclasses
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
from seedlike.league.league import bots_of
from seedlike.learning import train_state as ts
from seedlike.metrics import MetricsWriter, run_summary, write_config, write_summary
from seedlike.ondevice import opponents, selfplay
from seedlike.ondevice import program as program_lib
from seedlike.ondevice import rollout as rollout_lib
from seedlike.runtime import distributed
from seedlike.runtime.devices import ComputeGuard

FIRST_CALL_UPDATES = 1  # the first call compiles; each later one is sized by the one before


def check(config) -> None:
    """ConfigError (one line) for a config the on-device runtime cannot run as written."""
    config_lib.validate(config)
    spec = config_lib.env_spec(config)
    config_lib.validate_network(config, spec)
    algo, backend = config.algo, config.env.backend
    replay = BATCHES[ALGORITHMS[algo].batch] != ON_POLICY
    here = ", ".join(n for n, a in ALGORITHMS.items() if BATCHES[a.batch] == ON_POLICY)
    games = spec.num_players == 2
    unsupported = {
        f"algo={algo!r} (it learns from a replay; {here} run here)": replay,
        "population.size > 1": config.population.size > 1,
        "a two-player game with seeds > 1 (one league per run)": games and config.seeds > 1,
        "a two-player game on several processes": games and config.distributed.num_processes > 1,
        "league.shared_games (an exploiter's actors playing the main agent's live policy)": games
        and bool(config.league.shared_games),
        "a two-player game with league.max_snapshots = 0 (its snapshots are stacked on the "
        "device: give a bound)": games and int(config.league.max_snapshots) < 1,
        "a two-player game with a recurrent network (opponents hold no state there)": games
        and config.network.core != "none",
        "network.action_squash (the env gets the policy's sample clipped to its bounds)": bool(
            spec.continuous and config.network.action_squash
        ),
    }
    named = [what for what, used in unsupported.items() if used]
    if named:
        raise config_lib.ConfigError(
            f"env.backend={backend!r} runs on the device, which does not take "
            f"{', '.join(named)} yet: leave them at their defaults (docs/ondevice.md)"
        )
    for bot in config.league.bots if games else ():
        known = selfplay.BOTS.get(bot)
        if known is None or (known.envs and spec.name not in known.envs):
            plays = [n for n, b in selfplay.BOTS.items() if not b.envs or spec.name in b.envs]
            raise config_lib.ConfigError(
                f"league.bots has {bot!r}, which does not play {spec.name} on the device; "
                f"choose from {plays}"
            )


@dataclasses.dataclass
class Agent:
    """One of the run's config.seeds agents: its own config (its seed, seeds=1), directory,
    checkpoints and counters."""

    config: object
    logdir: str
    checkpointer: ckpt_lib.Checkpointer | None  # None on processes > 0 (process 0 saves)
    env_steps: int = 0
    episodes: int = 0
    version: int = 0  # counted on the host (an update discarded as non-finite leaves it)


def agent_config(config, k: int):
    """The config of agent k of a run of config.seeds: seed + k, alone (seeds=1)."""
    c = config.copy_and_resolve_references()
    c.unlock()
    c.seed, c.seeds = int(config.seed) + k, 1
    c.lock()
    return c


class DeviceRun:
    """The program, its state on the devices ([devices, seeds, ...]), and each agent's
    counters. One seed (config.seeds=1) lives in logdir itself, several in logdir/seed_<k>."""

    def __init__(self, config, logdir: str):
        self.config, self.logdir = config, logdir
        self.devices = jax.devices()  # every process's: the program's collectives span them all
        me = jax.process_index()
        self.local = [d for d in self.devices if d.process_index == me]
        self.positions = [i for i, d in enumerate(self.devices) if d.process_index == me]
        # Host work beside the program (TrueSkill games, snapshot restores) runs through it: on a
        # CPU with several devices it waits for the program (seedlike.runtime.devices).
        self.guard = ComputeGuard(self.local)
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
        # The loss's key comes from config.seed for every agent: no loss run here reads it
        # (a noisy head's; seedlike.algos).
        sgd_step = ts.make_sgd_step(loss_fn, self.optimizer, lr_fn, 0, int(config.seed))
        self.program = program_lib.make_program(
            config, self.network, self.env, self.shape, sgd_step, self.devices
        )
        # Compiled once for every agent (a new lambda per agent would compile again).
        self._init = jax.jit(lambda k: ts.init_train_state(self.network, self.optimizer, k))
        bots = bots_of(config.league) if self.spec.num_players == 2 else ()

        lanes = int(config.league.device_lanes)

        def start_envs(key, state, table):
            # A two-player game's first episodes: lanes of their own (period -1, so their games
            # stay out of the payoff: the program's lanes differ).
            lane_key = jax.random.fold_in(key, 1)
            seat = program_lib.seat_of(
                self.env, self.network, state, table, lanes, lane_key, -1, bots
            )
            return rollout_lib.start(self.network, seat, self.shape.envs, key)

        self._start_envs = jax.jit(start_envs)
        self.league = None  # a two-player game's (opponents.DeviceLeague), made with the state
        self.initial_state = None  # what a league exploiter resets to (league.roles)
        seeds = int(config.seeds)
        self.agents = []
        for k in range(seeds):
            own = logdir if seeds == 1 else os.path.join(logdir, f"seed_{k}")
            checkpointer = None
            if distributed.is_primary():
                directory = os.path.join(own, "checkpoints")
                checkpointer = ckpt_lib.Checkpointer(directory, config.checkpoint.max_to_keep)
            self.agents.append(Agent(agent_config(config, k), own, checkpointer))
        self.in_call = False  # the program holds (and has donated) the state
        self.peer_lost = False  # a collective failed: no more of them (save without gathering)
        self.reached_return = False  # config.stop_at_return held (the loop's ReturnHold)
        try:
            for agent in self.agents:
                if agent.checkpointer is not None:
                    agent.checkpointer.remove_interrupted_saves()
            self.state, self.acting = self._start()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.league is not None:
            self.league.close()
        for agent in self.agents:
            if agent.checkpointer is not None:
                agent.checkpointer.close()

    def _start(self):
        """Every agent's state and acting, from its latest checkpoint or fresh, stacked over the
        agents and then the devices (the program's [devices, seeds, ...])."""
        states, actings = zip(*(self._start_agent(a) for a in self.agents))
        steps = {a.env_steps for a in self.agents}
        if len(steps) > 1:
            raise config_lib.ConfigError(
                f"the seeds in {self.logdir} were saved at different env steps "
                f"({sorted(steps)}): one program advances them together; resume each alone "
                "(--logdir=<logdir>/seed_<k> with seeds=1) or start a new logdir"
            )
        n = len(self.local)
        state = jax.tree.map(
            lambda *xs: np.broadcast_to(np.stack(xs), (n, len(xs), *np.shape(xs[0]))), *states
        )
        acting = jax.tree.map(lambda *xs: np.stack(xs, axis=1), *actings)
        return self._shard(state), self._shard(acting)

    def _start_agent(self, agent: Agent):
        """(state, acting [local devices, ...]) of one agent on the host, restored where it has a
        checkpoint: process 0 restores, every process starts from what it restored."""
        key = jax.random.key(int(agent.config.seed))
        init_key, env_key = jax.random.split(key)
        state = jax.device_get(self._init(init_key))
        if self.spec.num_players == 2:
            policy = {"params": state.params, "obs_norm": state.obs_norm}
            self.league = opponents.DeviceLeague(agent.config, agent.logdir, policy)
        table = self.league.table() if self.league is not None else None
        keys = jax.random.split(env_key, len(self.devices))  # device i's envs, on any host
        acting = jax.device_get(
            jax.tree.map(
                lambda *xs: np.stack(xs), *(self._start_envs(k, state, table) for k in keys)
            )
        )
        restored = None if agent.checkpointer is None else agent.checkpointer.restore(
            state, older=ts.older_layout
        )  # fmt: skip
        if self.league is not None and self.league.league.rule is not None:
            self.initial_state = self._initial(agent, state)
        if restored is None and agent.config.init_from:  # fine-tuning: a new run's start
            state = ckpt_lib.init_from(agent.config.init_from, state)
        counts = {"env_steps": 0, "episodes": 0, "resumed": int(restored is not None)}
        if restored is not None:
            state, meta = restored
            config_lib.check_resumed(agent.config, meta, agent.logdir)
            counts.update(env_steps=int(meta["env_steps"]), episodes=int(meta.get("episodes", 0)))
            acting = self._restore_acting(agent, int(state.policy_version), acting)
            logging.info(
                "resumed from %s at env step %d, policy version %d (params %s)",
                agent.checkpointer.directory, counts["env_steps"], int(state.policy_version),
                ckpt_lib.params_fingerprint(state.params),
            )  # fmt: skip
        (state, acting), counts = distributed.broadcast_start((state, acting), counts)
        agent.env_steps, agent.episodes = counts["env_steps"], counts["episodes"]
        agent.version = int(state.policy_version)
        if self.league is not None:
            self.league.start(agent.config, self.network, restored[1] if restored else {},
                              self.guard)  # fmt: skip
            self.league.publish(
                agent.version, lambda: {"params": state.params, "obs_norm": state.obs_norm}
            )
        return state, jax.tree.map(lambda x: x[np.array(self.positions)], acting)

    @staticmethod
    def _initial(agent: Agent, fresh):
        """A league exploiter's reset state: the run's start (`init_from`'s params where set),
        as a SEED role's (seedlike.learner.start_league)."""
        return (
            ckpt_lib.init_from(agent.config.init_from, fresh) if agent.config.init_from else fresh
        )

    def _restore_acting(self, agent: Agent, step: int, fresh):
        """The envs, carry and key saved with step; `fresh` ones where it holds none that fit (a
        checkpoint that surgery wrote, a SEED run's, another number of envs): the agent goes on
        from its parameters in new episodes, as a SEED run's actors would reconnect."""
        try:
            return agent.checkpointer.restore_extra(step, fresh)
        except ckpt_lib.CheckpointError as e:  # incompatible or damaged: the state stands
            logging.warning("%s; starting fresh envs", e)
            return fresh

    def _shard(self, tree):
        """A host tree with a leading axis [local devices, ...]: row i on local device i (a
        pmap argument)."""
        sharding = jax.sharding.NamedSharding(
            jax.sharding.Mesh(np.array(self.local), (ts.AXIS,)),
            jax.sharding.PartitionSpec(ts.AXIS),
        )

        def put(x):
            x = np.asarray(x)
            shards = [jax.device_put(x[i : i + 1], d) for i, d in enumerate(self.local)]
            return jax.make_array_from_single_device_arrays(x.shape, sharding, shards)

        return jax.tree.map(put, tree)

    @property
    def env_steps(self) -> int:
        return self.agents[0].env_steps  # the same for every agent (`_start`)

    def call(self, updates: int) -> list[program_lib.Totals]:
        """`updates` policy versions of every agent; each agent's totals (on the host)."""
        n = np.full(len(self.local), updates, np.int32)
        table = self.league.table() if self.league is not None else None
        self.in_call = True
        self.state, self.acting, totals = self.guard(
            self.program, self.state, self.acting, n, table
        )
        # One transfer, then device 0's copy (every device holds the same sums).
        totals = jax.tree.map(lambda x: x[0], jax.device_get(totals))
        each = [jax.tree.map(lambda x, k=k: x[k], totals) for k in range(len(self.agents))]
        for agent, own in zip(self.agents, each):
            agent.env_steps += updates * self.steps_per_update
            agent.episodes += int(own.counts["episodes"])
            agent.version += updates - int(own.counts["nonfinite"])
        self.in_call = False
        if self.league is not None:  # one agent (check)
            agent = self.agents[0]
            self.league.record(each[0].counts.pop("outcomes"))
            if self.league.after_update(agent.version, agent.env_steps, self.policy):
                self._reset(agent)
            self.league.publish(agent.version, self.policy)
        return each

    def _reset(self, agent: Agent) -> None:
        """A league exploiter starts again (seedlike.league.roles): the league's reset state
        with a fresh optimizer as the next policy version, the gradient-step count and the
        learning-rate schedule going on (the SEED learner's reset). Its envs play on."""
        now = jax.device_get(jax.tree.map(lambda x: x[0, 0], self.state))
        new = self.league.league.reset_state(self.initial_state).replace(
            policy_version=np.asarray(now.policy_version) + np.int32(1),
            sgd_steps=now.sgd_steps,
            lr_zero_until=now.lr_zero_until,
        )
        n = len(self.local)
        self.state = self._shard(
            jax.tree.map(lambda x: np.broadcast_to(np.asarray(x), (n, 1, *np.shape(x))), new)
        )
        agent.version += 1

    def policy(self) -> dict:
        """The first agent's policy now, {"params", "obs_norm"} on the host (a snapshot)."""
        state = jax.device_get(jax.tree.map(lambda x: x[0, 0], self.state))
        return {"params": state.params, "obs_norm": state.obs_norm}

    def updates_before_snapshot(self) -> int | None:
        """Updates until the league's next snapshot (a call ends there); None without one."""
        if self.league is None:
            return None
        return self.league.updates_until_snapshot(self.agents[0].version)

    def save(self) -> list[str]:
        """A checkpoint for every agent (its state and every device's acting), written by
        process 0; their directories. With several processes a collective (the acting is
        gathered), unless one was lost: then process 0 saves the state alone (a resumed run
        starts fresh envs)."""
        state = jax.device_get(jax.tree.map(lambda x: x[0], self.state))
        acting = None if self.peer_lost else self.acting_host()
        if acting is not None and jax.process_count() > 1:
            acting = self._gathered(acting)
        paths = []
        if not distributed.is_primary():
            return paths
        for k, agent in enumerate(self.agents):
            own = jax.tree.map(lambda x, k=k: x[k], state)
            meta = {
                "env_steps": agent.env_steps,
                "episodes": agent.episodes,
                "policy_version": int(own.policy_version),
                "config": json.loads(agent.config.to_json()),
            }
            if self.league is not None:
                meta["league"] = self.league.state_dict()
                evaluation = self.league.evaluation_state()
                if evaluation is not None:
                    meta["evaluation"] = evaluation
            extra = None if acting is None else jax.tree.map(lambda x, k=k: x[:, k], acting)
            agent.checkpointer.save(int(own.policy_version), own, meta, extra=extra)
            paths.append(os.path.join(agent.checkpointer.directory, str(int(own.policy_version))))
        return paths

    def acting_host(self):
        """This process's devices' acting state, [local devices, seeds, ...], on the host."""
        return jax.device_get(self.acting)

    def _gathered(self, local):
        """Every process's acting, [devices, seeds, ...] in jax.devices() order (a collective)."""
        from jax.experimental import multihost_utils

        rows = multihost_utils.process_allgather(local, tiled=True)  # process after process
        order = sorted(range(len(self.devices)), key=lambda i: self.devices[i].process_index)
        back = np.argsort(order)
        return jax.tree.map(lambda x: np.asarray(x)[back], rows)


def row_of(totals: program_lib.Totals, agent: Agent, network, seconds: float, steps: int) -> dict:
    """An agent's metrics row of one call: the keys of a SEED run's row that mean the same here
    (docs/metrics.md), and updates_per_call."""
    counts = totals.counts
    kept = float(counts["updates"]) - float(counts["nonfinite"])
    episodes = float(counts["episodes"])
    per_episode = lambda key: float(counts[key]) / episodes if episodes else None  # noqa: E731
    return {
        "time": time.time(),
        "env_steps": agent.env_steps,
        "policy_version": agent.version,
        "sps": steps / seconds if seconds > 0 else None,
        "episodes": int(episodes),
        "episode_return_mean": per_episode("episode_return_sum"),
        # One identity plays every episode (the program): the median over identities is its mean.
        "episode_return_robust": per_episode("episode_return_sum"),
        "episode_length_mean": per_episode("episode_length_sum"),
        "updates_per_call": int(counts["updates"]),
        **exploration_columns(agent.config, network, agent.env_steps),
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


def train(
    config, logdir: str, stop: threading.Event | None = None, address: str = "", on_peer_stuck=None
) -> dict:
    """Trains until config.total_env_steps or until `stop` is set; returns the last row (of
    the first seed, where config.seeds > 1: each writes its own in logdir/seed_<k>).

    With several processes (config.distributed), `address` is this host's for the collectives
    (distributed.initialize) and `on_peer_stuck(why)` ends a process left waiting in one by a
    lost peer (distributed.PeerWatch); a failed collective raises distributed.PeerLost."""
    stop = stop or threading.Event()
    distributed.initialize(config, address)
    check(config)
    run = DeviceRun(config, logdir)
    writers = []
    try:
        if distributed.is_primary():  # the rows and summaries (every process sees the same)
            if len(run.agents) > 1:
                write_config(logdir, config)  # the group's, from which a rerun resumes them all
            writers = [_writer(agent) for agent in run.agents]
    except BaseException:
        for w in writers:
            w.close()
        run.close()
        raise
    peers = distributed.PeerWatch(config.distributed.peer_timeout_s, on_stuck=on_peer_stuck)
    try:
        return _loop(run, writers, stop, peers.start())
    finally:
        peers.stop()
        _finish(run, writers)


def _writer(agent: Agent) -> MetricsWriter:
    c = agent.config
    write_config(agent.logdir, c)
    return MetricsWriter(
        agent.logdir, c, c.log.wandb_mode, c.log.wandb_project, c.log.wandb_group,
        total_env_steps=int(c.total_env_steps), tensorboard=bool(c.log.tensorboard),
    )  # fmt: skip


def _loop(run: DeviceRun, writers: list[MetricsWriter], stop, peers) -> dict:
    """Calls until the budget or a stop: a row per agent after each call, checkpoints on the
    interval. A call lasts at most the log interval, a quarter of the stop grace and the
    checkpoint interval, so a stop and the checkpoints wait for no more. With several processes
    each call's size, the checkpoints and the stop are agreed first (process 0's clock)."""
    c = run.config
    total = _budget(c)
    hold = ReturnHold(c.stop_at_return, float(c.log.stop_hold_s), len(run.agents))
    limit_s = min(
        float(c.log.interval_s),
        float(c.checkpoint.stop_grace_s) / 4,
        float(c.checkpoint.interval_s),
    )
    primary = distributed.is_primary()
    updates, calls, rows, last_save = FIRST_CALL_UPDATES, 0, [{}], time.monotonic()
    while True:
        if peers.lost:
            peers.acknowledge()
            run.peer_lost = True
            raise distributed.peer_lost(RuntimeError(peers.lost))
        due = time.monotonic() - last_save >= float(c.checkpoint.interval_s)
        # Every process sees the same rows; process 0's hold (its clock) is the run's.
        wanted = run.env_steps >= total or stop.is_set() or (primary and hold.reached)
        updates, save, stopping = _shared(run, distributed.agree_call, updates, due, wanted)
        if stopping:
            break  # _finish saves
        if save:
            run.save()
            last_save = time.monotonic()
        left = -(-(total - run.env_steps) // run.steps_per_update)
        size = min(updates, left, run.updates_before_snapshot() or left)
        started, steps_before = time.monotonic(), run.env_steps
        totals = _shared(run, run.call, size)
        seconds = time.monotonic() - started
        steps = run.env_steps - steps_before
        rows = [
            row_of(t, agent, run.network, seconds, steps) for t, agent in zip(totals, run.agents)
        ]
        if run.league is not None:
            rows[0].update(run.league.metrics())
        for writer, row in zip(writers, rows):
            writer.write(row)
        hold.update(rows, time.monotonic())
        calls += 1
        if calls >= 2:  # the first call compiled; each later one sizes the next
            updates = max(1, int(limit_s * rows[0]["updates_per_call"] / max(seconds, 1e-6)))
    run.reached_return = hold.reached
    return rows[0]


def _shared(run: DeviceRun, step, *args):
    """step(*args); with several processes, a failure is a lost or failing peer (PeerLost, one
    line; the whole error logged)."""
    try:
        return step(*args)
    except Exception as e:
        if jax.process_count() == 1:
            raise
        run.peer_lost = True
        logging.error("a step shared with the other processes failed: %s", e)
        raise distributed.peer_lost(e) from e


def _budget(config) -> int:
    """The env steps this job runs to: total_env_steps, or pause_at_env_steps where it pauses
    earlier (schedules still run to total_env_steps)."""
    total = int(config.total_env_steps)
    return min(total, int(config.pause_at_env_steps)) if config.pause_at_env_steps else total


@dataclasses.dataclass
class ReturnHold:
    """Whether every agent's return has held `target` (config.stop_at_return; None: never) for
    `hold_s` seconds (log.stop_hold_s), row after row: the SEED path's rule (seedlike.learner),
    with each agent its one identity."""

    target: float | None
    hold_s: float
    agents: int
    since: float | None = None
    reached: bool = False

    def update(self, rows: list[dict], now: float) -> None:
        returns = [r["episode_return_mean"] for r in rows]
        at = (
            [x is not None and x >= self.target for x in returns] if self.target is not None else []
        )
        if not at or not all(at):
            self.since = None
            return
        self.since = now if self.since is None else self.since
        self.reached = now - self.since >= self.hold_s


def _finish(run: DeviceRun, writers: list[MetricsWriter]) -> None:
    """The last checkpoints (unless the program failed holding the state), each agent's summary
    line and summary.json; the writers closed whatever fails."""
    try:
        checkpoints = [None] * len(run.agents)
        if not run.in_call:
            checkpoints = run.save()
            for agent in run.agents:
                if agent.checkpointer is not None:
                    agent.checkpointer.wait()
        total = int(run.config.total_env_steps)
        paused = run.env_steps >= _budget(run.config) and run.env_steps < total
        finished = run.env_steps >= total or run.reached_return or paused
        outcome = "finished" if finished else "stopped (rerun with the same --logdir to resume)"
        if paused and not run.reached_return:
            outcome = "paused at pause_at_env_steps (rerun with a larger one, or 0, to go on)"
        kind = "paused" if paused and not run.reached_return else outcome.split(" ")[0]
        for agent, writer, checkpoint in zip(run.agents, writers, checkpoints):
            logging.info("%s", writer.summary(outcome, checkpoint))
            wall_s = time.time() - writer.started
            summary = run_summary(agent.logdir, kind, total, wall_s, checkpoint=checkpoint)
            write_summary(agent.logdir, summary)
    finally:
        for writer in writers:
            writer.close()
        run.close()
