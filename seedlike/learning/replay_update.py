"""The learner of the replay algorithms (seedlike.algos: the batch types "transitions" and
"sequences"): each learner batch goes into this host's replay (seedlike.learning.replay), then a
fixed number of sgd steps sample from it.

One call of `update` is one policy version: insert the batch's B x T steps, then (once the replay
holds `min_fill` steps) replay_ratio x B x T / (the env steps of an sgd batch) sgd steps, each on
batch_transitions transitions (or batch_sequences sequences) sampled by priority, all in one
pmapped call (a scan), then the priorities they computed written back. The replay ratio is
thereby held exactly: the learner learns only when a batch arrives, and acting waits while it
learns (the batch queue's backpressure). Each device learns from its share of every sgd step's
samples; with several learner hosts each samples its own replay (its own actors' steps) and the
gradients are averaged over every device, as for the on-policy learner.
"""

from __future__ import annotations

import logging
import os
import time

import jax
import numpy as np

from seedlike import algos
from seedlike.learning import train_state as ts
from seedlike.learning.replay import Replay, SequenceReplay
from seedlike.learning.update import Learner
from seedlike.types import Unroll


class ReplayLearner(Learner):
    """A Learner whose update learns from the replay (module docstring), for the batch types
    "transitions" and "sequences"; the same state, sgd step, commit, publishing and guard."""

    def _setup(self) -> None:
        config, c = self.config, self.algo_config
        self.batch_device = None  # the replay keeps host arrays
        self.epochs = 1
        key, samples = algos.sgd_batch(config)
        if samples % self.num_devices:
            raise ValueError(
                f"{config.algo}.{key}={samples} must be divisible by the {self.num_devices} devices"
            )
        # Each process samples its devices' share of every sgd step's samples.
        self.local_batch = samples * self.num_local // self.num_devices
        step = self._sgd_step

        def steps_fn(state, batches):
            """sgd_per_update steps: batches [K, b, ...] on this device."""
            return jax.lax.scan(step, state, batches)

        self._steps = jax.pmap(steps_fn, ts.AXIS, devices=self.devices)
        self.total_env_steps = int(config.total_env_steps)
        self.min_fill = int(c.min_fill)
        self.beta0 = float(c.importance_exponent)
        self.replay: Replay | None = None  # allocated at the first batch (its shapes)
        own = [k for k in self.metric_keys if k not in ts.INFLUENCE_METRICS]  # no prepare here
        self.metric_keys = (*own, "replay/size", "replay/ratio", "replay/beta")
        self.consumed = 0  # env steps sampled by the last update
        self.save_replay = bool(c.save_replay)
        self._batches = 0  # learner batches inserted by this process
        self._batch_steps = self.local_batch_unrolls * int(config.unroll_length)
        self._sample_steps = algos.sample_steps(config)  # env steps in one sample
        self._saved = None  # a saved replay's arrays, loaded into the replay once it exists

    def make_replay(self, example: Unroll) -> Replay:
        """The replay of the algorithm's batch type (REPLAYS), shaped like `example`."""
        c = self.algo_config
        kwargs = dict(
            reward_clip=c.reward_clip, prioritized=c.prioritized, exponent=c.priority_exponent,
            eps=c.priority_eps, seed=int(self.config.seed) + jax.process_index(),
        )  # fmt: skip
        return REPLAYS[self.algorithm.batch](example, c, **kwargs)

    def _update(self, unrolls: Unroll, identity, old_state) -> dict[str, float]:
        """Inserts stacked unrolls [B, T+1, ...] (host arrays) and learns from the replay;
        returns the averaged metrics (replay counters only, before min_fill). `identity` is not
        needed: the influence caps' kept-out unrolls arrive invalid and are never sampled."""
        del identity
        self._batches += 1
        if self.replay is None:
            self.replay = self.make_replay(unrolls)
            if self._saved is not None:
                try:
                    self.replay.load_state_dict(self._saved)
                    logging.info("replay restored: %d transitions", self.replay.size)
                except ValueError as e:
                    logging.warning("the saved replay is not loaded (%s); refilling", e)
                self._saved = None
        replay = self.replay
        replay.insert(unrolls)
        self.consumed = 0
        counters = self._counters()
        # Counted in batches, not in what this host's replay holds: learner hosts decide alike
        # and enter every collective of the update together.
        if self._batches * self._batch_steps < self.min_fill:
            return {**dict.fromkeys(self.metric_keys, float("nan")), **counters, "nonfinite": 0.0}
        return self._learn(old_state)

    def write_replay(self, path: str) -> None:
        """Saves the replay's arrays to `path` (written whole, then renamed into place); the
        learner loop waits for it: capacity x the bytes per stored step."""
        if self.replay is None:
            return
        partial = path + ".partial.npz"
        start = time.perf_counter()
        np.savez(partial, **self.replay.state_dict())
        os.replace(partial, path)
        logging.info(
            "replay saved: %d transitions, %.0f MB in %.1f s",
            self.replay.size,
            os.path.getsize(path) / 2**20,
            time.perf_counter() - start,
        )

    def read_replay(self, path: str) -> None:
        """Loads a replay saved by write_replay when the first batch allocates the replay (a
        missing file: the replay refills)."""
        if not os.path.exists(path):
            logging.warning("no saved replay at %s: refilling %d steps first", path, self.min_fill)
            return
        with np.load(path) as saved:
            self._saved = {k: saved[k] for k in saved.files}

    def _counters(self, beta: float = float("nan")) -> dict[str, float]:
        r = self.replay
        # The row's rfps and cfps are the insert and sample rates, sample_reuse their ratio
        # over the interval; replay/ratio is the run's (this process's) since the start.
        return {
            "replay/size": float(r.size),
            "replay/ratio": r.sampled / r.inserted if r.inserted else float("nan"),
            "replay/beta": beta,
        }

    def beta(self) -> float:
        """The importance exponent now: rising linearly to 1 over the run's env steps (those
        before this process, then the batches' steps on every learner host alike)."""
        steps = self.steps_before + self._batches * self._batch_steps * jax.process_count()
        done = steps / max(self.total_env_steps, 1)
        return self.beta0 + (1.0 - self.beta0) * min(done, 1.0)

    def _learn(self, old_state) -> dict[str, float]:
        replay, n, k = self.replay, self.num_local, self.sgd_per_update
        beta = self.beta()
        idx, weight = replay.sample(k * self.local_batch, beta)
        # [K * b] -> [device, K, b / n]: each sgd step's transitions split over the devices.
        idx = idx.reshape(k, n, -1).swapaxes(0, 1)
        weight = weight.reshape(k, n, -1).swapaxes(0, 1)
        # Host arrays [device, K, b / n]: the pmap gives each local device its row.
        batch = replay.batch(idx, weight, self.policy_version)
        self._state, (metrics, priority) = self.guard(self._steps, self._state, batch)
        metrics, priority = jax.device_get((metrics, priority))
        self.consumed = k * self.local_batch * self._sample_steps
        metrics = {key: float(np.mean(v[0])) for key, v in metrics.items()}
        committed = self._commit(old_state, metrics)
        if committed:
            replay.update(idx, np.asarray(priority))
        return {**metrics, **self._counters(beta), "nonfinite": 0.0 if committed else 1.0}

    def samples(self, unrolls: Unroll) -> int:
        """Env steps the last update learned from (transitions, or sequences' steps)."""
        del unrolls
        return self.consumed


# The replay of each replay batch type (seedlike.algos.BATCHES), built from the example unroll,
# the algorithm's section and the sampling settings.
REPLAYS = {
    algos.TRANSITIONS: lambda example, c, **kw: Replay(
        example, c.capacity, c.n_step, c.gamma, **kw
    ),
    algos.SEQUENCES: lambda example, c, **kw: SequenceReplay(
        example, c.capacity, c.n_step, c.gamma, c.burn_in, **kw
    ),
}
