"""The learner service: holds the replicated TrainState and turns batches of unrolls into updates.

One call of `update` is one policy version: prepare (advantages, normalizer statistics) on every
device, then `epochs` passes of `num_minibatches` sgd_steps over the whole batch, each pass one
pmapped call (a scan over its minibatches). The batch crosses to the devices once per update (every
local device holds its host's whole batch; with one accelerator the observations arrive already
stacked on it, see `batch_device`) and each sgd step gathers its minibatch there, from sample
indices shuffled on the host within each learner host's block of the batch; with one host that is
the whole batch, so N devices compute the same update as one device. With several hosts
(seedlike.runtime.distributed) each learns from its own actors' unrolls, and the pmap's gradient
average spans every device of every host: 2 hosts x 1 device compute the same update as 1 host x 2
devices given shuffle_blocks=2 (tests/learning/test_multihost.py).

Minibatches hold independent steps for feed-forward PPO, and whole unrolls for recurrent networks
(replayed from the carry stored at the unroll start) and for V-trace (whose targets need the
current values along the unroll).
"""

from __future__ import annotations

import functools
import logging
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np

from networks import heads, normalization
from seedlike.algos import ALGORITHMS, UNROLLS, batches
from seedlike.learning import train_state as ts
from seedlike.runtime import devices as devices_lib
from seedlike.types import Unroll


class Learner:
    """The replicated TrainState and its update, for the algorithms that learn from each batch
    of actors' unrolls once (batch types "steps" and "unrolls": module docstring).

    Args:
      config: the run's settings (batch shape, budget), its algorithm's section and `optimizer`.
      network: a networks.Network.
      window_s: the influence window (server.fair_window_s) over which one identity's share of
        the observation statistics is bounded (networks.normalization.IdentityWindow).
      devices: the pmap's devices, every learner host's (default: jax.devices()); this process
        feeds those it owns (local_devices).
      shuffle_blocks: blocks of the batch shuffled independently, one per learner host (default:
        the number of processes). One process can reproduce a multi-host update with more.

    What every learner shares is here: the devices and the state's place, the optimizer and its
    schedule, the one sgd step of the algorithm's loss (seedlike.algos' contract), the guard
    around a failed update and the commit of a new policy version (`_commit`). A subclass for
    another batch type (seedlike.learning.replay_update.ReplayLearner) overrides `_setup`, which
    builds the programs that feed the sgd step, and `_update`.
    """

    def __init__(self, config, network, *, window_s: float, devices=None, shuffle_blocks=None):
        self._init_devices(config, network, window_s, devices, shuffle_blocks)
        head, wanted = network.module.head_spec.policy, self.algorithm.head
        if head != (wanted or head) or (not wanted and network.q):
            raise ValueError(
                f"algo={config.algo!r} learns {f'the {wanted!r} head' if wanted else 'a policy'}; "
                f"the network has {head!r} (seedlike.config.resolve sets network.policy_head)"
            )
        self.sgd_per_update = self.algorithm.sgd_steps(config)
        steps_per_update = config.batch_unrolls * config.unroll_length
        total_updates = -(-int(config.total_env_steps) // steps_per_update)
        self.optimizer = ts.make_optimizer(config.optimizer)
        loss_fn = self.algorithm.load().make_loss(network, self.algo_config, ts.AXIS)
        lr_fn = ts.make_learning_rate_fn(config.optimizer, total_updates * self.sgd_per_update)
        # Sgd steps between copies of a Q network's target parameters, where the algorithm's
        # section has target_period (rainbow, r2d2); 0: its loss reads no target.
        c = self.algo_config
        period = int(c.target_period) if "target_period" in c else 0
        self._sgd_step = ts.make_sgd_step(loss_fn, self.optimizer, lr_fn, period, int(config.seed))
        self.metric_keys = (
            *self.algorithm.metrics, "grad_norm", "learning_rate", *ts.INFLUENCE_METRICS,
            "nonfinite",
        )  # fmt: skip
        self._setup()

    def _setup(self) -> None:
        """The programs around the sgd step: advantages and observation statistics for a whole
        batch (`prepare`), and each epoch's minibatches (a scan of sgd steps)."""
        advantages = self.algorithm.load().advantages(self.algo_config)
        self.epochs = int(self.algo_config.epochs)
        self.num_minibatches = int(self.algo_config.num_minibatches)
        # Minibatches of whole unrolls: a recurrent network's, or a batch type of whole unrolls.
        self.sequences = self.network.is_recurrent or self.algorithm.batch == UNROLLS
        self._check_divisibility()
        sgd_step, take = (
            self._sgd_step,
            batches.take_unrolls if self.sequences else batches.take_steps,
        )

        def sgd_epoch(state, items, order):
            """One epoch's sgd steps: order [num_minibatches, size] indexes items."""
            return jax.lax.scan(lambda s, idx: sgd_step(s, take(items, idx)), state, order)

        # The batch stays on the devices for all its minibatches; each sgd step gathers its own.
        # An epoch is one call: with small networks, dispatching a call per sgd step cost more
        # than the step (RESULTS.md, "One call per epoch").
        self._sgd_epoch = jax.pmap(sgd_epoch, ts.AXIS, devices=self.devices)
        prepare = ts.make_prepare(
            advantages,
            groups=int(self.config.batch_unrolls),
            parts=self.num_local,
            score=_score(self.network) if advantages is not None else None,
            tolerance=float(self.config.server.coherence_tolerance),
            window=advantages is not None,
        )
        # With advantages come PPO's score, its direction bound's window and the weights.
        self._advantages = advantages is not None
        # Where the value targets regress the state values the steps were met with (a policy's
        # baseline; a "q" head's behaviour values are max_a Q, no target of the action taken).
        self._values_untaught = self.algorithm.head != "q"
        self._prepare = jax.pmap(prepare, ts.AXIS, devices=self.devices)

    def _init_devices(self, config, network, window_s, devices, shuffle_blocks) -> None:
        """What every learner holds: the config, the devices and their share of the batch, the
        compute guard and the state's place."""
        self.config = config
        self.network = network
        self.algorithm = ALGORITHMS[config.algo]
        self.algo_config = config[config.algo]
        self.devices = list(devices or jax.devices())
        self.num_devices = len(self.devices)
        me = jax.process_index()
        self.local_devices = [d for d in self.devices if d.process_index == me]
        self.num_local = len(self.local_devices)
        processes = jax.process_count()
        self.shuffle_blocks = int(shuffle_blocks or processes)
        if self.shuffle_blocks % processes or self.num_local % (self.shuffle_blocks // processes):
            raise ValueError(
                f"shuffle_blocks={self.shuffle_blocks} must be a multiple of the {processes} "
                f"processes and give each process's {self.num_local} devices whole blocks"
            )
        self._local_blocks = self.shuffle_blocks // processes
        self._first_block = me * self._local_blocks
        # Unrolls per update from this process's actors.
        self.local_batch_unrolls = config.batch_unrolls * self.num_local // self.num_devices
        self._local_sharding = jax.sharding.NamedSharding(
            jax.sharding.Mesh(np.array(self.local_devices), (ts.AXIS,)),
            jax.sharding.PartitionSpec(ts.AXIS),
        )
        # Identities are labelled per process; each process's labels get a range of their own.
        self._identity_offset = me * self.local_batch_unrolls
        self.obs_window = normalization.IdentityWindow(float(window_s), network.obs_clip)
        self.push_window = ts.DeviationWindow(float(window_s))
        server = config.server
        self.probation = ts.Probation(
            float(server.probation_s), float(server.probation_cohort_s),
            float(server.probation_hold_s),
        )  # fmt: skip
        self._state = None
        self._version = 0
        self.steps_before = 0  # the run's env steps before this process (a resumed run)
        self.save_replay = False  # a ReplayLearner's replay is saved with its checkpoints
        # Shared with the inference service: see seedlike.runtime.devices.ComputeGuard.
        self.guard = devices_lib.ComputeGuard(self.local_devices)
        # Set: the update in progress stops at its next epoch (Interrupted), unless learner
        # processes share it (they must take part in every collective of it together).
        self.interrupt: threading.Event | None = None
        self._alone = processes == 1
        # Where a learner batch's observations are stacked before `update` (LearnerBatch.unroll):
        # on an accelerator that is the only local device (its shard is the whole batch), so
        # the frames cross straight from the pool; on the host otherwise (several devices split
        # the batch there; on a CPU numpy's gather is quicker than XLA's stack).
        one = self.num_local == 1 and self.local_devices[0].platform != "cpu"
        self.batch_device = self.local_devices[0] if one else None

    def _check_divisibility(self) -> None:
        c, n, m = self.config, self.num_devices, self.num_minibatches
        if c.batch_unrolls % n:
            raise ValueError(
                f"batch_unrolls={c.batch_unrolls} must be divisible by the {n} devices"
            )
        items = c.batch_unrolls if self.sequences else c.batch_unrolls * c.unroll_length
        what = "batch_unrolls" if self.sequences else "batch_unrolls*unroll_length"
        blocks = self.shuffle_blocks
        per_block_devices = n // blocks
        if items % (blocks * m) or (items // (blocks * m)) % per_block_devices:
            where = f" in each of {blocks} host blocks" if blocks > 1 else ""
            raise ValueError(
                f"{what}={items} must split{where} into {c.algo}.num_minibatches={m} minibatches "
                f"whose size is divisible by {per_block_devices} devices"
            )

    # State ------------------------------------------------------------------------------------

    def init_state(self, rng) -> ts.TrainState:
        """A fresh state as host arrays, like a restored checkpoint's; set_state puts it on the
        devices under the guard. Compiled as one program (kept in the compilation cache): run op
        by op, a network's init is about a hundred small compilations (RESULTS.md, "Faster starts").
        The host copy is taken before anything else runs: a
        computation still running outside the guard could stall a collective (devices.py)."""
        init = jax.jit(functools.partial(ts.init_train_state, self.network, self.optimizer))
        return jax.device_get(init(rng))

    def set_state(self, state: ts.TrainState) -> None:
        """Installs an unreplicated state on this process's devices (leading axis = device)."""
        self._state = self.guard(self._replicate, state)
        self._version = int(np.asarray(state.policy_version))

    def reset(self, initial: ts.TrainState) -> None:
        """Starts again from `initial`'s params, optimizer and observation statistics (a league
        exploiter's reset) as the next policy version; the gradient-step count and the
        learning-rate schedule go on."""
        state = self.state()
        self.set_state(
            initial.replace(
                # On the host: a JAX op outside the guard could stall a collective (devices.py).
                policy_version=np.asarray(state.policy_version) + np.int32(1),
                sgd_steps=state.sgd_steps,
                lr_zero_until=state.lr_zero_until,
            )
        )

    def state(self) -> ts.TrainState:
        """The unreplicated state (device 0's copy)."""
        return self.guard(_first, self._state)

    def samples(self, unrolls: Unroll) -> int:
        """Steps the last update learned from, every epoch counted (unrolls: its batch)."""
        return unrolls.reward.size * self.epochs

    @property
    def policy_version(self) -> int:
        return self._version

    def policy_params(self):
        """What inference needs, from device 0: network params and observation statistics."""
        return self.guard(_first, {"params": self._state.params, "obs_norm": self._state.obs_norm})

    # Learning ---------------------------------------------------------------------------------

    def update(self, unrolls: Unroll, identity: np.ndarray | None = None) -> dict[str, float]:
        """One policy version from stacked unrolls [B, T+1, ...]; returns averaged metrics.

        B is local_batch_unrolls (this process's share); identity [B] the actor identity of each
        unroll (what its credentials prove, seedlike.rpc.security.identity; any values numpy
        sorts: the bounds across batches, IdentityWindow's, are kept per value; None: one
        identity, the same on every process).
        A non-finite loss or gradient leaves the state untouched and reports nonfinite=1 (on
        every process: metrics are averaged first). An exception (a collective whose peer host
        is gone) leaves it untouched too, so the last complete version can still be saved.
        """
        old_state = self._state
        try:
            return self._update(unrolls, identity, old_state)
        except BaseException:
            self._state = old_state
            raise

    def _commit(self, old_state, metrics: dict[str, float], **replace) -> bool:
        """Installs the state the update left (with `replace`'s fields) as the next policy
        version, or, where a metric is not finite, puts `old_state` back: the update discarded.
        Returns whether it was installed."""
        bad = sorted(k for k, v in metrics.items() if not np.isfinite(v))
        if bad:
            logging.error(
                "non-finite %s in learner update %d; update discarded", bad, self.policy_version
            )
            self._state = old_state
            return False
        version = self.guard(lambda v: v + 1, self._state.policy_version)
        self._state = self._state.replace(policy_version=version, **replace)
        self._version += 1
        return True

    def _update(self, unrolls: Unroll, identity, old_state) -> dict[str, float]:
        n = self.num_local
        batch, horizon = unrolls.action.shape[0], unrolls.reward.shape[1]
        names = np.zeros(batch, np.int32) if identity is None else np.asarray(identity)
        unique, labels = np.unique(names, return_inverse=True)
        labels = labels.reshape(batch).astype(np.int32)
        if identity is None:  # one identity for the whole batch, across processes
            identity = labels
        else:  # dense labels for the devices' segment sums, a range of them per process
            identity = labels + np.int32(self._identity_offset)
        moments = self._obs_moments(unrolls, names)
        weight, window = self._weights(unique.tolist(), labels, time.monotonic())

        # The sgd steps gather their minibatches on the devices, from the whole batch that every
        # local device holds (a minibatch draws from anywhere in a host's block). With one device
        # its shard is the whole batch: one transfer serves prepare and the sgd steps.
        if n == 1:
            unrolls = sharded = self.guard(self._replicate, unrolls)  # [1, B, ...]
            identity = identity[None]
        else:
            sharded = jax.tree.map(lambda x: x.reshape((n, batch // n) + x.shape[1:]), unrolls)
            identity = identity.reshape(n, batch // n)
        advantage, value_target, obs_norm, influence = self.guard(
            self._prepare, self._state, sharded, identity, moments
        )
        if not all(np.all(np.isfinite(x)) for x in jax.tree.leaves(obs_norm)):
            # Finite observations can still overflow the float32 sums (values near 1e19); the
            # loss would stay finite, so the statistics are checked themselves, never installed.
            logging.error(
                "non-finite observation statistics in update %d; discarded", self.policy_version
            )
            return {**dict.fromkeys(self.metric_keys, float("nan")), "nonfinite": 1.0}
        if n > 1:  # in batch order, to travel with the host batch
            advantage = np.asarray(advantage).reshape(batch, horizon)
            value_target = np.asarray(value_target).reshape(batch, horizon)

        weight, value_target = self._weighed(weight, unrolls, value_target)
        if self.sequences:
            if not self._advantages:
                advantage = value_target = None
            items = batches.SequenceBatch(unrolls, advantage, value_target, weight)
            num_items = batch
        else:
            items = self.guard(batches.step_source, unrolls, advantage, value_target, weight)
            num_items = batch * horizon
        if n > 1:
            items = self.guard(self._replicate, items)  # one transfer per device, no host copy
        blocks = self._local_blocks
        per_block = num_items // blocks
        rngs = [
            np.random.default_rng(
                [int(self.config.seed), self.policy_version, self._first_block + b]
            )
            for b in range(blocks)
        ]
        size = per_block // self.num_minibatches  # samples per block in each minibatch
        metrics = []
        for _ in range(self.epochs):
            orders = [r.permutation(per_block) + b * per_block for b, r in enumerate(rngs)]
            # [minibatch, block, size] -> [device, minibatch, its part]: each minibatch takes
            # `size` samples of every block, and block b's go to block b's devices.
            idx = np.stack([o.reshape(self.num_minibatches, size) for o in orders], axis=1)
            idx = idx.reshape(self.num_minibatches, n, -1).swapaxes(0, 1).astype(np.int32)
            if self._alone and self.interrupt is not None and self.interrupt.is_set():
                raise Interrupted(f"update {self.policy_version} abandoned at a stop request")
            self._state, (epoch_metrics, _) = self.guard(self._sgd_epoch, self._state, items, idx)
            metrics.append(epoch_metrics)

        # Every step's metrics and prepare's influence in one wait, not one per value.
        metrics, influence = jax.device_get((metrics, influence))
        metrics = jax.tree.map(lambda *xs: float(np.mean([x[0] for x in xs])), *metrics)
        committed = self._commit(old_state, metrics, obs_norm=obs_norm)
        deviations = influence.pop(ts.WINDOW, None)
        influence = {k: float(np.asarray(v)[0]) for k, v in influence.items()}
        if deviations is not None:
            self._add_deviations(names, deviations, time.monotonic())
        return {**metrics, **influence, **window, "nonfinite": 0.0 if committed else 1.0}

    def _weighed(self, weight, unrolls: Unroll, value_target):
        """The weights beside the batch's layout (passed whenever there are any, so that every
        process runs the same program) and the value targets with _untaught's applied."""
        if weight is None:
            return None, value_target
        if self.num_local == 1:
            weight = weight[None]  # beside the replicated unrolls [1, B, ...]
        if self._values_untaught and (weight < 1).any():
            value_target = self.guard(_untaught, weight, unrolls.behaviour_value, value_target)
        return weight, value_target

    def _weights(self, unique: list, labels: np.ndarray, now: float):
        """What each unroll of this batch counts for in the loss ([B] float32 in [0, 1]; None
        without PPO's score): its identity's window factor (tolerance / z above the tolerance,
        relative to the batch's largest) times its probation (relative to the run's most trusted
        identity); and their metrics. unique: the batch's identities in label order, labels [B]
        each unroll's."""
        if not self._advantages:
            return None, {}
        tolerance = float(self.config.server.coherence_tolerance)
        z = np.array([self.push_window.z(now, name) for name in unique])
        window = np.where(z > tolerance, tolerance / np.maximum(z, 1e-12), 1.0)
        probation = np.array(self.probation.factors(now, unique))
        # The window's factors relative to this batch's largest, as before; probation relative
        # to the run's most trusted identity: a batch of newcomers alone then counts for less
        # (batches.strength), where relative to the batch it counted in full.
        window_part = window / max(window.max(), 1e-12)
        probation_part = probation / max(self.probation.peak(now), 1e-12)
        factor = (window_part * probation_part).astype(np.float32)
        return factor[labels], {
            "influence/window_scale_min": float(window.min()),
            "influence/window_z_max": float(z.max()),
            "influence/probation_scale_min": float(probation.min()),
        }

    def _add_deviations(self, names: np.ndarray, window, now: float) -> None:
        """This batch's deviations (prepare's WINDOW, as every device holds them) into the
        window, for this process's identities where the direction bound applied."""
        deviation, noise2, many = (np.asarray(x)[0] for x in window)
        for label, name in enumerate(np.unique(names).tolist()):
            j = self._identity_offset + label
            if many[j]:
                self.push_window.add(now, name, deviation[j], float(noise2[j]))

    def _obs_moments(self, unrolls: Unroll, names: np.ndarray) -> dict:
        """This process's bounded observation moments (IdentityWindow) from the host batch: every
        step but the bootstrap one of the unrolls that count in the loss (those kept out by the
        influence caps add nothing). One copy per local device."""
        stats = self.guard(_first, self._state.obs_norm)
        if not stats:
            return {}
        steps = np.asarray(unrolls.valid)[:, :-1]
        counted = np.broadcast_to(steps.any(axis=1, keepdims=True), steps.shape)  # whole unrolls
        moments = self.obs_window.moments(
            {k: np.asarray(unrolls.obs[k])[:, :-1] for k in stats},  # maybe on the device
            counted,
            names,
            jax.tree.map(np.asarray, stats),
            time.monotonic(),
        )
        n = self.num_local
        return {
            k: tuple(np.broadcast_to(np.asarray(v, np.float32), (n, *np.shape(v))) for v in m)
            for k, m in moments.items()
        }

    def _replicate(self, tree):
        """A host tree on every local device, as a pmap argument [num_local, ...] (with one
        device, arrays already there stay there)."""

        def put(x):
            if isinstance(x, jax.Array) and self.num_local == 1:  # no trip through the host
                shards = [jax.device_put(x[None], self.local_devices[0])]
            else:
                x = np.asarray(x)[None]  # a view: each device's transfer reads the host array
                shards = [jax.device_put(x, d) for d in self.local_devices]
            return jax.make_array_from_single_device_arrays(
                (self.num_local, *shards[0].shape[1:]), self._local_sharding, shards
            )

        return jax.tree.map(put, tree)


class Interrupted(Exception):
    """A stop request ended an update; the state is the last complete version's."""


def _untaught(weight, behaviour_value, value_target):
    """The value targets with those of unrolls that weigh less than 1 (an identity on probation
    or held by the window) put back to the values they were met with: however small its weight,
    targets that pull every update would in time move the values all the way to its returns,
    where the other identities' advantages are read from them."""
    xp = np if isinstance(value_target, np.ndarray) else jnp  # host batches stay on the host
    return xp.where((weight < 1)[..., None], behaviour_value[..., :-1], value_target)


def _first(tree):
    """Device 0's copy of a replicated tree."""
    return jax.tree.map(lambda x: x[0], tree)


def _score(network):
    """fn(params, obs_norm, unrolls) -> d log pi(a|s) / d logits [B, T, ...] at each of the
    unrolls' steps under the current parameters (train_state.make_prepare's bound on how far
    one identity's advantages may push the policy)."""

    def score(params, obs_norm, unrolls):
        horizon = unrolls.reward.shape[1]
        logits, _ = batches.forward_sequence(network, params, obs_norm, unrolls, horizon)
        action = unrolls.action[:, :horizon]

        def total(x):
            return jnp.sum(heads.log_prob(x, action, network.action_sizes))

        return jax.grad(total)(jax.lax.stop_gradient(logits))

    return score
