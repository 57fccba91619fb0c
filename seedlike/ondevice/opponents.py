"""The league of an on-device two-player run, on the host between the program's calls: the SEED
path's League (seedlike.league.league: pool, payoff, sampler, bots, snapshots on disk, metrics)
and its snapshots as the program holds them, `league.max_snapshots` slots of stacked params.

Before each call `table()` gives the program its opponents (seedlike.ondevice.selfplay.Table):
the slots' params and the log-probability of each choice (the learner itself, each slot, each
bot), read from the league's sampler, so an episode on the device draws its opponent as a SEED
episode start does. After each call `record` keeps the games' outcomes, and at each snapshot's
version (the runtime ends a call there: `updates_until_snapshot`) `after_update` puts them
into the payoff and the sampler (OpenAI Five's qualities, PFSP's win rates) and adds the
snapshot. The probabilities stand still from one snapshot to the next.

A league role (`league.role`, started by seedlike.launch.league: one on-device run per role)
reads the other roles' snapshots from their directories in a thread of its own
(seedlike.league.league.PeerSnapshots, as a SEED role does), and they join its pool at the next
snapshot's version, with its own (`Arrivals`): the pool, the table and an exploiter's target
stand still through a period, so the games reported at its end are against the snapshots the
table held. An exploiter's reset rule (seedlike.league.roles) is judged there too, every
`league.snapshot_every` updates rather than after every update, and `after_update` says when
the run resets it.
"""

from __future__ import annotations

import os
import threading

import jax
import numpy as np

from seedlike.league import roles
from seedlike.league.evaluation import Evaluation, EvaluationThread
from seedlike.league.league import League, PeerSnapshots
from seedlike.league.players import LEARNER
from seedlike.ondevice.selfplay import Table
from seedlike.policy import PolicyRegistry


class DeviceLeague:
    """Args: the run's config and logdir; `template` a policy's {"params", "obs_norm"} (the
    slots' shapes; fresh slots hold copies of it and are never drawn)."""

    def __init__(self, config, logdir: str, template):
        self.config, self.logdir = config.league, logdir
        snapshots = roles.snapshot_dir(logdir)
        self.league = League(config.league, seed=int(config.seed), snapshot_dir=snapshots)
        self.size = int(config.league.max_snapshots)
        self.template = jax.tree.map(np.asarray, template)
        self.slots: list[int | None] = [None] * self.size  # the policy id in each slot
        self.players = jax.tree.map(lambda x: np.stack([x] * self.size), self.template)
        self._table = None  # the device copy, until the slots change
        self.pending: dict[int, np.ndarray] = {}  # games not yet in the league, by opponent
        self.peers: PeerSnapshots | None = None  # a role's reader of the others' snapshots
        self.arrivals = Arrivals(self.league)
        self.registry = PolicyRegistry()  # the policy the TrueSkill evaluation rates
        self.evaluator: EvaluationThread | None = None

    def start(self, config, network, meta: dict, guard=None) -> None:
        """The league as the checkpoint's `meta` saved it (none: a new run), then its threads:
        a role's reader of the other roles' snapshots, and with league.eval_interval_s > 0 the
        TrueSkill evaluation a SEED learner runs (seedlike.league.evaluation: the published
        policy against fixed references, on host envs of the same game, beside the program)."""
        if "league" in meta:
            self.load_state_dict(meta["league"])
        role = self.league.role
        if role:
            others = [r for r in roles.OPPONENT_ROLES[role] if r != role]
            self.peers = PeerSnapshots(
                self.arrivals, self.league.role_dir, others, self.template,
                float(self.config.peer_refresh_s), guard,
            ).start()  # fmt: skip
        interval = float(self.config.eval_interval_s)
        if interval > 0:
            references = os.path.join(roles.league_dir(self.logdir), "references")
            evaluation = Evaluation(
                self.config, config.env, network, references, int(config.seed), guard
            )
            evaluation.load_state_dict(meta.get("evaluation", {}), self.template)
            self.evaluator = EvaluationThread(evaluation, self.registry, interval)
            self.evaluator.start()

    def publish(self, version: int, policy) -> None:
        """The learning policy of `version` (`policy()`: {"params", "obs_norm"} on the host), for
        the evaluation to rate; nothing is copied without one."""
        if self.evaluator is not None:
            self.registry.publish(version, policy())

    def close(self) -> None:
        for thread in (self.evaluator, self.peers):
            if thread is not None:
                thread.stop()

    def choices(self) -> list[int | None]:
        """The policy id of each of the program's choices: the learner, the slots, the bots."""
        return [LEARNER, *self.slots, *self.league.bots]

    def logits(self) -> np.ndarray:
        """The table's log-probability of each choice (`choices`)."""
        probs = self.league.probabilities()
        p = np.array([probs.get(c, 0.0) if c is not None else 0.0 for c in self.choices()])
        with np.errstate(divide="ignore"):
            return np.log(p / p.sum()).astype(np.float32)

    def table(self) -> Table:
        """The program's opponents now (the params on the device, moved once per change)."""
        if self._table is None:
            self._table = jax.device_put(self.players)
        return Table(self._table, jax.numpy.asarray(self.logits()))

    def record(self, outcomes: np.ndarray) -> None:
        """The games of a call: float32 [labels, 3], counts of (loss, draw, win) by the program's
        label (`choices`, then the games whose lane's snapshot changed under them: left out).
        They reach the league at the next snapshot (`after_update`): its state, and so the
        probabilities, then change where the run's updates are, not where its calls end, and a
        resumed run draws what an unbroken one does."""
        for choice, counts in zip(self.choices(), np.asarray(outcomes)):
            if choice is not None:
                self.pending[choice] = self.pending.get(choice, np.zeros(3)) + counts

    def updates_until_snapshot(self, version: int) -> int:
        """Updates before the next snapshot is due (the call ends there)."""
        every = int(self.config.snapshot_every)
        return every - version % every

    def after_update(self, version: int, env_steps: int, policy_params) -> bool:
        """After update `version`: at a snapshot's version the games since the last one go
        into the payoff and the sampler (opponent by opponent, results interleaved, each at the
        probability the period drew it with), then the league's schedule (a new snapshot into
        the pool and a slot; an exploiter's reset rule, on the period's games), and the other
        roles' new snapshots join. True: an exploiter resets now."""
        if version % int(self.config.snapshot_every):
            return False
        past = self.league.past_probabilities()  # the period's: the league stood still
        for choice in sorted(self.pending):
            for outcome in _interleaved(self.pending[choice]):
                self.league.record(choice, outcome, past.get(choice))
        self.pending = {}
        reset = self.league.after_update(version, env_steps, policy_params)
        self.arrivals.release()
        self._sync()
        return reset

    def _sync(self) -> None:
        """Slots of the snapshots that left the pool freed, and new snapshots put into the
        first free ones."""
        pool = self.league.pool_ids()
        self.slots = [p if p in pool else None for p in self.slots]
        new = [p for p in pool if p not in self.slots]
        for policy in new:
            self.slots[self.slots.index(None)] = policy  # the pool holds at most `size`
        self._fill([self.slots.index(p) for p in new])

    def _fill(self, indices) -> None:
        """The params of the snapshots in slots `indices` written into the table."""
        for i in indices:
            params = self.league.params(self.slots[i])
            leaves = zip(jax.tree.leaves(self.players), jax.tree.leaves(params), strict=True)
            for store, leaf in leaves:
                store[i] = np.asarray(leaf)
            self._table = None

    def state_dict(self) -> dict:
        return {
            **self.league.state_dict(),
            "device_slots": list(self.slots),
            "device_pending": [[p, *map(float, c)] for p, c in sorted(self.pending.items())],
        }

    def load_state_dict(self, state: dict) -> None:
        """The league as saved (its snapshots from disk), each in the slot it held."""
        self.league.load_state_dict(state, self.template)
        saved = [None if p is None else int(p) for p in state.get("device_slots", [])]
        saved = (saved + [None] * self.size)[: self.size]
        self.slots = [p if p in self.league.pool else None for p in saved]
        self._fill([i for i, p in enumerate(self.slots) if p is not None])
        self._sync()
        self.pending = {int(p): np.asarray(c) for p, *c in state.get("device_pending", [])}

    def evaluation_state(self) -> dict | None:
        """The TrueSkill evaluation's state after its last completed round (None without)."""
        return None if self.evaluator is None else self.evaluator.state_dict()

    def metrics(self) -> dict:
        evaluation = self.evaluator.metrics() if self.evaluator is not None else {}
        return {**self.league.take_metrics(), **evaluation}


def _interleaved(counts) -> list[int]:
    """(losses, draws, wins) as one sequence of outcomes (-1, 0, 1) with each kind spread
    evenly through it, in a fixed order: a payoff that decays before each result
    (league.payoff_decay < 1) then weighs the call's kinds alike, not the last kind most."""
    position = [(k + 0.5) / n for n in (int(round(float(c))) for c in counts) for k in range(n)]
    kinds = [o for o, c in zip((-1, 0, 1), counts) for _ in range(int(round(float(c))))]
    return [kinds[i] for i in np.argsort(position, kind="stable")]


class Arrivals:
    """What a role's PeerSnapshots adds the other roles' snapshots to: held until `release`
    (the next snapshot's version) puts them into the league's pool. A snapshot held when the run
    stops is read again from its directory on a resume (the league has not taken it)."""

    def __init__(self, league: League):
        self.league = league
        self._lock = threading.Lock()
        self._held: list[tuple[str, int, object]] = []  # (role, version, params)

    @property
    def pool(self):
        return self.league.pool  # its size bounds what PeerSnapshots reads

    def add_peer_snapshot(self, role: str, version: int, policy_params) -> None:
        with self._lock:
            self._held.append((role, int(version), policy_params))

    def skip_peer_version(self, role: str, version: int) -> None:
        self.league.skip_peer_version(role, version)

    def newest_version(self, role: str) -> int:
        with self._lock:
            held = [v for r, v, _ in self._held if r == role]
        return max([self.league.newest_version(role), *held])

    def release(self) -> None:
        """The snapshots held so far into the pool, oldest first."""
        with self._lock:
            held, self._held = self._held, []
        for role, version, params in held:
            self.league.add_peer_snapshot(role, version, params)
