"""Learner state and the pure functions that change it: optimizer, sgd_step, batch preparation."""

from __future__ import annotations

import collections

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax

from networks import normalization
from seedlike.algos import batches

# The one pmap axis every collective in the learner reduces over.
AXIS = "devices"


@flax.struct.dataclass
class TrainState:
    params: dict
    opt_state: optax.OptState
    obs_norm: dict  # key -> normalization.RunningStats (float observation keys only)
    sgd_steps: jax.Array  # int32 scalar: gradient steps taken
    policy_version: jax.Array  # int32 scalar: learner updates made == the published version
    lr_zero_until: jax.Array  # int32 scalar: learning rate is 0 while sgd_steps < this (surgery)
    # A Q network's target parameters (the replay algorithms, seedlike.algos.rainbow), copied
    # from params every target_period sgd steps; {} for every other network.
    target_params: dict = flax.struct.field(default_factory=dict)


@flax.struct.dataclass
class TrainStateV2:
    """TrainState as checkpoints of commit 0624281 and earlier (after d4cf845) hold it: no
    target parameters (tests/fixtures/0624281). Restored into this, then upgraded."""

    params: dict
    opt_state: optax.OptState
    obs_norm: dict
    sgd_steps: jax.Array
    policy_version: jax.Array
    lr_zero_until: jax.Array

    def upgrade(self) -> TrainState:
        return TrainState(
            self.params, self.opt_state, self.obs_norm, self.sgd_steps, self.policy_version,
            self.lr_zero_until,
        )  # fmt: skip


@flax.struct.dataclass
class TrainStateV1:
    """TrainState as checkpoints of commit d4cf845 and earlier hold it: the policy version was
    called `updates` (tests/fixtures/d4cf845). Restored into this, then upgraded."""

    params: dict
    opt_state: optax.OptState
    obs_norm: dict
    sgd_steps: jax.Array
    updates: jax.Array
    lr_zero_until: jax.Array

    def upgrade(self) -> TrainStateV2:
        return TrainStateV2(
            self.params, self.opt_state, self.obs_norm, self.sgd_steps, self.updates,
            self.lr_zero_until,
        )  # fmt: skip


def older_layout(state) -> tuple[object, object] | None:
    """The layout checkpoints before `state`'s held it in, and the upgrade back to `state`'s
    (Checkpointer.restore goes back one layout at a time); None before the oldest. Only
    networks without a Q head existed before target_params."""
    if isinstance(state, TrainState):
        if state.target_params:
            return None
        old = TrainStateV2(
            state.params, state.opt_state, state.obs_norm, state.sgd_steps,
            state.policy_version, state.lr_zero_until,
        )  # fmt: skip
        return old, TrainStateV2.upgrade
    if isinstance(state, TrainStateV2):
        old = TrainStateV1(
            state.params, state.opt_state, state.obs_norm, state.sgd_steps,
            state.policy_version, state.lr_zero_until,
        )  # fmt: skip
        return old, TrainStateV1.upgrade
    return None


def make_optimizer(optimizer_config) -> optax.GradientTransformation:
    """Global-norm clipping then Adam; the learning rate is an injected hyperparameter."""

    def build(learning_rate):
        return optax.chain(
            optax.clip_by_global_norm(optimizer_config.max_grad_norm),
            optax.adam(learning_rate, eps=optimizer_config.adam_eps),
        )

    return optax.inject_hyperparams(build)(learning_rate=optimizer_config.learning_rate)


def make_learning_rate_fn(optimizer_config, total_sgd_steps: int):
    """step -> learning rate: constant or linearly annealed to 0 over total_sgd_steps."""
    base = float(optimizer_config.learning_rate)
    anneal = bool(optimizer_config.anneal_lr)
    total = float(max(int(total_sgd_steps), 1))  # a float: a huge int would overflow int32

    def learning_rate(step):
        if not anneal:
            return jnp.asarray(base, jnp.float32)
        return jnp.asarray(base, jnp.float32) * jnp.clip(1.0 - step / total, 0.0, 1.0)

    return learning_rate


def init_train_state(network, optimizer, rng) -> TrainState:
    params = network.init(rng)
    zero = jnp.zeros((), jnp.int32)
    return TrainState(
        params=params,
        opt_state=optimizer.init(params),
        obs_norm=network.init_obs_norm(),
        sgd_steps=zero,
        policy_version=zero,
        lr_zero_until=zero,
        target_params=jax.tree.map(jnp.copy, params) if network.q else {},
    )


def abstract_train_state(network, optimizer_config) -> TrainState:
    """The TrainState structure (ShapeDtypeStructs) of a network, without computing anything: what
    a checkpoint is restored into. Run op by op, a network's init dispatches about a hundred
    small compilations; tracing it costs a fraction of that (RESULTS.md, "Loading a checkpoint
    without initializing a network")."""
    optimizer = make_optimizer(optimizer_config)
    return jax.eval_shape(lambda key: init_train_state(network, optimizer, key), jax.random.key(0))


def make_sgd_step(
    loss_fn, optimizer, learning_rate_fn, target_period: int = 0, seed: int = 0,
    axis_name: str = AXIS,
):  # fmt: skip
    """Returns the pure sgd_step(state, batch) -> (state, (metrics, priority)) of any algorithm
    (seedlike.algos' contract: loss_fn(params, target_params, obs_norm, batch, key) -> (loss,
    (metrics, priority))), to be pmapped over axis_name. The loss's key (a noisy head's weight
    noise) is the step count folded into `seed`'s: the same on every device, a new one every
    step. With target_period > 0, the target parameters (a Q network's) are copied from the new
    parameters whenever the step count reaches a multiple of it."""

    def sgd_step(state: TrainState, batch):
        grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
        key = jax.random.fold_in(jax.random.key(seed), state.sgd_steps)
        (_, (metrics, priority)), grads = grad_fn(
            state.params, state.target_params, state.obs_norm, batch, key
        )
        scale = batches.strength(batch)
        if scale is not None:  # the same on every device: the heaviest weight of all of them
            scale = jax.lax.pmax(scale, axis_name)
            grads = jax.tree.map(lambda g: g * scale.astype(g.dtype), grads)
        state, metrics = apply_gradients(
            state, grads, metrics, optimizer, learning_rate_fn, axis_name
        )
        if target_period:
            copy = state.sgd_steps % target_period == 0
            target = jax.tree.map(
                lambda t, p: jnp.where(copy, p, t), state.target_params, state.params
            )
            state = state.replace(target_params=target)
        return state, (metrics, priority)

    return sgd_step


def apply_gradients(state: TrainState, grads, metrics, optimizer, learning_rate_fn, axis_name):
    """The optimizer step from this device's gradients (averaged over axis_name first): the new
    state, and the metrics averaged with grad_norm and learning_rate added."""
    grads = jax.lax.pmean(grads, axis_name)
    metrics = jax.lax.pmean(metrics, axis_name)

    lr = jnp.where(state.sgd_steps < state.lr_zero_until, 0.0, learning_rate_fn(state.sgd_steps))
    opt_state = state.opt_state
    opt_state = opt_state._replace(hyperparams={**opt_state.hyperparams, "learning_rate": lr})
    updates, opt_state = optimizer.update(grads, opt_state, state.params)
    params = optax.apply_updates(state.params, updates)

    metrics["grad_norm"] = optax.tree.norm(grads)
    metrics["learning_rate"] = lr
    state = state.replace(params=params, opt_state=opt_state, sgd_steps=state.sgd_steps + 1)
    return state, metrics


# What make_prepare reports of its bounds in each update (docs/metrics.md): the smallest factor
# an identity's advantages were scaled by for their size and for their coherence, and the
# largest identity's coherence z against the median identity's; for direction, the smallest
# factor and the largest distance (in z) of an identity's push from where the median identity
# pushes, and over a window of batches (DeviationWindow, set by the learner) the smallest factor
# and the largest z of an identity's deviations summed, and the smallest probation factor
# (Probation, set by the learner) (NaN where a bound does not apply: no
# advantages, no score, one identity alone for coherence, fewer than three for direction).
INFLUENCE_METRICS = (
    "influence/advantage_scale_min",
    "influence/coherence_scale_min",
    "influence/coherence_z_max",
    "influence/coherence_z_median",
    "influence/direction_scale_min",
    "influence/direction_z_max",
    "influence/probation_scale_min",
    "influence/window_scale_min",
    "influence/window_z_max",
)
# prepare's output (with `window`) of each identity's deviation from the median push, its noise
# squared, and whether the direction bound applied: what a DeviationWindow adds.
WINDOW = "_window"


class DeviationWindow:
    """Each identity's deviations from the median push (make_prepare's direction bound) summed
    over the batches of the last `seconds`, host side. Per batch a push may lie within the
    honest noise and still point the same way in every batch, which honest noise does not: the
    sum of k such deviations grows like k, their noise like sqrt(k), so z = |sum| / sqrt(sum of
    noise squared) stays about 1 for an honest identity and grows for a steady pull; the learner
    weighs an identity's next samples by tolerance / z where z exceeds the tolerance."""

    def __init__(self, seconds: float = 30.0):
        self.seconds = float(seconds)
        self._added: collections.deque = collections.deque()  # (time, name, deviation, noise2)
        self._sums: dict = {}  # name -> [sum of deviations, sum of noise squared, batches]

    def add(self, now: float, name, deviation: np.ndarray, noise2: float) -> None:
        self._added.append((now, name, deviation, noise2))
        total = self._sums.setdefault(name, [np.zeros_like(deviation), 0.0, 0])
        total[0] = total[0] + deviation
        total[1] += noise2
        total[2] += 1

    def z(self, now: float, name) -> float:
        """The identity's deviations' z over the window (0 with none in it)."""
        while self._added and self._added[0][0] < now - self.seconds:
            _, who, deviation, noise2 = self._added.popleft()
            total = self._sums[who]
            total[0] = total[0] - deviation
            total[1] -= noise2
            total[2] -= 1
            if not total[2]:
                del self._sums[who]  # float sums of nothing are not quite 0
        if name not in self._sums or self._sums[name][1] <= 0:
            return 0.0
        total = self._sums[name]
        return float(np.linalg.norm(total[0]) / np.sqrt(total[1]))


class Probation:
    """Each identity's weight in the loss (the learner's) grows with its tenure. The identities
    of the run's first `cohort_s` (its actors as they start, or reconnect to a resumed run)
    weigh 1; one that comes later (a fresh certificate, a restarted attacker) weighs nothing
    for its first `hold_s` and then grows in a line to 1 at `seconds` after its first batch. An
    identity unseen for `seconds` starts again. The learner weighs them relative to `peak`,
    the most trusted identity of the run now (1 while any trusted one is there), so identities
    that are all new teach as one alone does, and a batch of nothing but newcomers beside
    trusted ones moves the parameters by its weight (batches.strength), not as far as any other
    batch. The hold: however small its weight, a newcomer's data pulls a made policy the same
    way in every batch, and on a made policy the others' advantages are noise that pulls nowhere
    (benchmarks/RESULTS.md, issue 76)."""

    def __init__(self, seconds: float, cohort_s: float, hold_s: float = 0.0):
        if seconds > 0 and not 0 <= hold_s < seconds:
            raise ValueError(f"probation hold_s={hold_s} must lie in [0, seconds={seconds})")
        self.seconds = float(seconds)
        self.cohort_s = float(cohort_s)
        self.hold_s = float(hold_s)
        self._start: float | None = None  # the first batch's time
        self._seen: dict = {}  # name -> [first batch, last batch]

    def factors(self, now: float, names) -> list[float]:
        """The factor of each of `names` (the identities of the batch at `now`)."""
        if self.seconds <= 0:
            return [1.0] * len(names)
        if self._start is None:
            self._start = now
        for name in names:
            seen = self._seen.setdefault(name, [now, now])
            if now - seen[1] > self.seconds:
                seen[0] = now  # gone for a probation's length: a newcomer again
            seen[1] = now
        for name in [n for n, (_, last) in self._seen.items() if now - last > self.seconds]:
            del self._seen[name]
        return [self._factor(first, now) for first in (self._seen[n][0] for n in names)]

    def peak(self, now: float) -> float:
        """The largest factor among the identities seen within `seconds` (after `factors`): 1
        while any of the run's trusted ones is there, else its most senior newcomer's."""
        if self.seconds <= 0 or not self._seen:
            return 1.0
        return max(self._factor(first, now) for first, _ in self._seen.values())

    def _factor(self, first: float, now: float) -> float:
        if first <= self._start + self.cohort_s:
            return 1.0
        grown = (now - first - self.hold_s) / (self.seconds - self.hold_s)
        return min(1.0, max(0.0, grown))


def _within(push, expected, room):
    """The largest f in [0, 1] with |f push - expected| <= room, per row (or where none is,
    the f nearest to it): a bounded push keeps its direction and loses only length."""
    pp = jnp.sum(push * push, -1)
    pe = jnp.sum(push * expected, -1)
    room2 = jnp.sum(expected * expected, -1) - jnp.square(room)
    f = (pe + jnp.sqrt(jnp.maximum(pe * pe - pp * room2, 0.0))) / jnp.maximum(pp, 1e-30)
    return jnp.where(pp > 0, jnp.clip(f, 0.0, 1.0), 1.0)


def _direction(push, n, present, noise, tolerance):
    """make_prepare's direction bound: each identity's factor [groups] and the largest distance
    (in z) of a push from the median identity's per step x its steps (NaN below 3 identities).
    Of three identities or more, each is held to where the others push: its sum may lie at most
    `tolerance` x its noise from there. A minority pulling against the others (their z rises as
    they resist it, so the z bound alone lets it through) keeps what they share."""
    per_step = push / jnp.maximum(n, 1.0)[:, None]
    reference = jnp.nanmedian(jnp.where(present[:, None], per_step, jnp.nan), axis=0)
    expected = n[:, None] * reference
    many = present & (jnp.sum(present) >= 3)
    along = jnp.where(many, _within(push, expected, tolerance * noise), 1.0)
    distance = jnp.linalg.norm(push - expected, axis=-1) / noise
    largest = jnp.where(jnp.any(many), jnp.max(jnp.where(many, distance, -jnp.inf)), jnp.nan)
    return along, largest, expected, many


def _rms_bound(advantage, valid, identity, groups, psum):
    """make_prepare's first bound: each identity's advantages scaled down to at most the median
    identity's RMS (of two, which no median tells apart, the smaller: the median of two is
    their mean, and a flood from one of them would keep half its size), and the smallest
    factor applied."""
    mask = valid.astype(jnp.float32)
    n = psum(jax.ops.segment_sum(jnp.sum(mask, 1), identity, num_segments=groups))
    squares = jnp.sum(mask * jnp.square(advantage), 1)
    rms = jnp.sqrt(psum(jax.ops.segment_sum(squares, identity, num_segments=groups)) / n)
    present = jnp.where(n > 0, rms, jnp.nan)
    median = jnp.where(jnp.sum(n > 0) == 2, jnp.nanmin(present), jnp.nanmedian(present))
    scale = jnp.where(rms > median, median / jnp.maximum(rms, 1e-12), 1.0)
    return advantage * scale[identity][:, None], jnp.min(jnp.where(n > 0, scale, 1.0))


def make_prepare(
    advantages=None,
    axis_name: str = AXIS,
    groups: int = 1,
    parts: int = 1,
    score=None,
    tolerance: float = 3.0,
    window: bool = False,
):
    """Returns prepare(state, unrolls, identity, moments) -> (advantage, value_target, obs_norm,
    influence) for pmap, influence the INFLUENCE_METRICS of this batch.

    unrolls is a device shard of stacked Unrolls [B/n, T+1, ...], identity [B/n] int32 the actor
    identity of each unroll in [0, groups) (dense labels; groups: B).
    `advantages` is the algorithm's per-unroll fn(unroll) -> (advantage, value_target)
    (seedlike.algos; None: zeros, the loss computes its own); an identity whose advantages' RMS
    exceeds the median identity's is scaled down to it, so no actor outweighs the others in the
    policy gradient by the size of its rewards, and its value targets move from the values it
    acted with by those scaled advantages only (target - advantage + scaled advantage), so no
    actor drags the value function, which every identity's advantages are read from, further
    per update than the median one does: an identity whose returns differ (another level, a
    discovery) is learned at the median's pace, a flood cannot corrupt the others' baselines.
    With `score`, fn(params, obs_norm, unrolls) -> the gradient of log pi(a|s) with respect to
    the logits [B, T, ...] of each step under the current parameters, one more bound applies
    (with two identities or more): an identity whose advantage-weighted scores agree far more
    than the median identity's (of two, the other's; z, their sum's length over the root of their
    sum of squares: about 1 for scores that point every which way, about sqrt(n) for n that
    agree) is scaled down to
    `tolerance` x the median's z (at least 1; server.coherence_tolerance: at 3, honest noise
    passes untouched but for a few in a thousand batches, and an actor paid by action, z about
    sqrt(its steps), is held to it). Honest advantages at a given size point
    every which way; an actor that pays one action and fines another everywhere points the same
    way at every step, and at an equal RMS it would move the policy by its whole share of the
    batch. With three identities or more in the batch, an identity's push (its scores' sum, D =
    the logits' size) may lie at most `tolerance` x its noise from the median identity's push per
    step times its steps: scaled by the largest f in [0, 1] that brings it there (or nearest to
    it), an identity that pulls against the others keeps the part of its push they share,
    whatever its z. (A batch holds the identities the store put in it: it mixes them,
    server.mix_hold, so that one that sends whole requests of many envs does not fill batches
    alone, where neither bound could apply.) With `window` (and `score`), the influence holds
    WINDOW, what a DeviationWindow adds: each identity's deviation from where the median pushes
    (its push as this batch's bounds scaled it, minus n x the median's per step), its noise
    squared as so scaled, and whether the direction bound applied. (The window's factors, and a
    Probation's, weigh the identity's samples in the loss: the learner's, not prepare's.)
    The returned obs_norm merges `moments`, key -> (count, mean, M2) of this batch's
    observations as this process computed them (networks.normalization.IdentityWindow, given to
    each of its `parts` local devices), across processes; the learner installs it after the
    epochs, so the first epoch sees the network that produced the data.
    """

    def psum(x):
        return x if axis_name is None else jax.lax.psum(x, axis_name)

    def per_identity(x, identity):
        return psum(jax.ops.segment_sum(x, identity, num_segments=groups))

    def coherent(state, unrolls, advantage, valid, identity):
        """Advantages with the policy bound of the docstring (`score`) applied."""
        mask = valid.astype(jnp.float32)
        delta = score(state.params, state.obs_norm, unrolls)
        delta = delta.reshape(*delta.shape[:2], -1)
        n = per_identity(jnp.sum(mask, 1), identity)
        step = (mask * advantage)[..., None] * delta
        push = per_identity(jnp.sum(step, axis=1), identity)  # [groups, ...]
        squares = per_identity(jnp.sum(jnp.square(step), axis=(1, 2)), identity)
        # Summed over n steps, scores that point every which way grow like sqrt(n) x their RMS,
        # scores that agree like n x it: z = |sum| / sqrt(sum of squares) is about 1 for an
        # honest identity however many steps it sent, and about sqrt(n) for a coherent one.
        noise = jnp.sqrt(jnp.maximum(squares, 1e-30))
        z = jnp.linalg.norm(push, axis=-1) / noise
        present = n > 0
        count = jnp.sum(present)
        # Bounded at `tolerance` x the median identity's z (at least 1: honest noise):
        # identities that all agree (an env where one action is always better) keep theirs.
        # Two identities, which no median tells apart, are held to the smaller z: at least 1, so
        # an honest one (z about 1) is never scaled whatever the other sends.
        median = jnp.nanmedian(jnp.where(present, z, jnp.nan))
        smaller = jnp.min(jnp.where(present, z, jnp.inf))
        bound = tolerance * jnp.maximum(jnp.where(count >= 3, median, smaller), 1.0)
        over = present & (z > bound) & (count >= 2)
        factor = jnp.where(over, bound / jnp.maximum(z, 1e-12), 1.0)
        along, deviation, expected, many = _direction(push, n, present, noise, tolerance)
        seen = {
            "influence/coherence_scale_min": jnp.min(factor),
            "influence/coherence_z_max": jnp.max(jnp.where(present, z, -jnp.inf)),
            "influence/coherence_z_median": median,
            "influence/direction_scale_min": jnp.min(along),
            "influence/direction_z_max": deviation,
        }
        f = jnp.minimum(factor, along)
        if window:  # what a DeviationWindow adds: the push as this batch's bounds left it
            seen[WINDOW] = (f[:, None] * push - expected, jnp.square(f * noise), many)
        return advantage * f[identity][:, None], seen

    def prepare(state: TrainState, unrolls, identity, moments):
        influence = dict.fromkeys(INFLUENCE_METRICS, jnp.float32(jnp.nan))
        if advantages is not None:
            advantage, value_target = jax.vmap(advantages)(unrolls)
            valid = unrolls.valid[:, :-1]
            scaled, influence["influence/advantage_scale_min"] = _rms_bound(
                advantage, valid, identity, groups, psum
            )
            value_target = value_target - advantage + scaled
            advantage = scaled
            if score is not None:
                advantage, seen = coherent(state, unrolls, advantage, valid, identity)
                influence.update(seen)
        else:
            advantage = value_target = jnp.zeros_like(unrolls.reward)
        obs_norm = {}
        for key, stats in state.obs_norm.items():
            merged = normalization.combine_moments(*moments[key], parts, axis_name)
            obs_norm[key] = normalization.update_stats(stats, *merged)
        return advantage, value_target, obs_norm, influence

    return prepare
