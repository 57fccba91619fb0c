"""How far one actor can move a learner batch: pure functions the trajectory store applies to each
full batch (host side, numpy) before the learner sees it.

The threat: an actor that passed authentication (or a buggy one) sends legal data, any value
inside the codec's bounds (seedlike.rpc.codec.Limits), from any number of envs and streams. Its
unit is the *identity*, what its credentials prove (seedlike.rpc.security.identity): the name in
its certificate, or its peer host; every stream of one identity is one voice, whatever actor_id
it declares. With fewer than three identities in a batch no statistic can tell the bad one from
the good, so the bounds below hold when the bad identities are a minority of at least three,
except the reward bound, which holds two identities to each other (below).

* `loss_mask`: over a recent window (server.fair_window_s), an identity's unrolls count in the
  loss up to `factor` x what the median identity delivered in it (and up to `max_share` x B of
  each batch). The unrolls beyond stay in the batch with valid = False: they fill it, so no one
  waits for a slow actor and no honest work is refused for capacity, but they teach nothing. One
  bad identity of k >= 3 with equal honest ones holds at most factor / (factor + k - 1) of the
  counted unrolls (factor 1: 1/k), however many envs and streams it runs.
* `reward_scales`: an identity whose mean |reward| per step over the recent window exceeds
  max(floor, scale x the median identity's) has its rewards scaled down to that bound. A bad
  minority's rewards reach the learner at most `scale` x the honest identities' rate, however
  large they are sent. With two identities, which no statistic can tell apart, the reference is
  the smaller rate: neither identity's rewards reach the learner at more than `scale` x the
  other's, and what a bad one can do to a good one by sending none is scale its rewards down to
  the floor's rate (a constant factor, signs and proportions kept). An honest actor's rare
  large reward passes at its value (floor 1.0: the scale of Atari's clipped rewards, MiniGrid,
  CartPole and board games). What is bounded is the
  rate, so one large reward in a window of small ones passes too, whoever sends it: its weight in
  a PPO update is bounded there (each identity's advantages to the median identity's RMS),
  V-trace has only its own `reward_clip`.
* `mixed_batch`: which of the complete unrolls waiting make the next batch, every identity
  delivering in turn, so that the bounds above and the learner's see each batch's identities
  side by side; `beyond_hold` bounds how many of one identity's wait.

Observation statistics are bounded the same way in the learner process
(networks.normalization.IdentityWindow: per-identity moments over the window, merged by a
median), and PPO's advantages and value targets on the devices (each identity's scaled down to
the median identity's size, and to its coherence, how consistently they favour some actions:
seedlike.learning.train_state.make_prepare).
"""

from __future__ import annotations

import collections

import numpy as np


def relabel(identity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Identities [B] as dense int32 labels 0..k-1 (in order of first appearance), and the k
    identities in label order."""
    ids, first, labels = np.unique(identity, return_index=True, return_inverse=True)
    by_first = np.argsort(first)  # label by first appearance: deterministic per batch
    order = np.argsort(by_first)
    return order[labels].astype(np.int32), ids[by_first]


def loss_mask(
    identity: np.ndarray,
    connected: int,
    factor: float,
    max_share: float = 1.0,
    offered: dict | None = None,
    counted: dict | None = None,
) -> np.ndarray:
    """Which unrolls [B] count in the loss (bool), given each unroll's actor identity [B].

    Two caps; each identity keeps its first unrolls in batch order up to the smaller:
    * max_share: at most max_share x B of this batch, never below an equal split among the
      `connected` identities (1.0: no cap).
    * factor (0: off): over a recent window, at most factor x the median identity's unrolls
      offered in it. `offered` holds each identity's unrolls delivered in the window, this batch
      included, `counted` those that counted in it before this batch; applies with three
      identities or more in the window. An identity that fills whole batches alone is held to
      what the median one delivers, however many of its batches there are.
    """
    batch = identity.shape[0]
    labels, ids = relabel(identity)
    k = ids.size
    counts = np.bincount(labels, minlength=k)
    cap = np.full(k, batch, np.int64)
    if max_share < 1.0:
        split = -(-batch // max(int(connected), k))
        cap[:] = max(int(np.ceil(max_share * batch)), split)
    if factor > 0 and offered is not None and len(offered) >= 3:
        window_cap = factor * float(np.median(list(offered.values())))
        before = np.array([(counted or {}).get(int(i), 0) for i in ids], np.float64)
        cap = np.minimum(cap, np.maximum(np.ceil(window_cap - before), 0).astype(np.int64))
    return _ranks(labels, counts) < cap[labels]


def _ranks(labels: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Each item's rank among the items of its label (0 for the first), in array order."""
    order = np.argsort(labels, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.empty(labels.shape[0], np.int64)
    rank[order] = np.arange(labels.shape[0]) - np.repeat(starts, counts)
    return rank


def mixed_batch(identity: np.ndarray, batch: int, active: int, hold: int) -> np.ndarray | None:
    """The next learner batch from the complete unrolls waiting (identity [n], oldest first): the
    indices of `batch` of them in arrival order, or None to wait for more.

    The batch takes the identities in turn, each one's oldest first, so it holds every identity
    with unrolls waiting, as evenly as they allow: a request of many envs, whose unrolls all
    complete at once, does not fill batches alone, and the bounds that compare identities within
    a batch see all of them. It waits while one of the `active` identities (those delivering)
    would get less than an equal split, until `batch + hold` unrolls wait, and with two active
    or more it never holds one identity alone (`beyond_hold` bounds what waits then). hold 0:
    never waits, and the batch is the oldest `batch`, in arrival order.
    """
    n = identity.shape[0]
    if n < batch:
        return None
    if hold <= 0:
        return np.arange(batch)
    labels, ids = relabel(identity)
    counts = np.bincount(labels, minlength=ids.size)
    turn = np.lexsort((np.arange(n), _ranks(labels, counts)))[:batch]
    k = max(int(active), ids.size)
    if k > 1 and ids.size == 1:
        return None
    if n < batch + hold and k > 1:
        got = np.bincount(labels[turn], minlength=ids.size)
        if ids.size < k or got.min() < batch // k:
            return None
    return np.sort(turn)


def beyond_hold(identity: np.ndarray, limit: int) -> np.ndarray:
    """Which of the unrolls waiting (identity [n], oldest first) lie beyond their identity's
    newest `limit` (bool [n]): what one identity sends faster than batches with the others take
    it, released rather than kept waiting without end."""
    labels, ids = relabel(identity)
    counts = np.bincount(labels, minlength=ids.size)
    return counts[labels] - 1 - _ranks(labels, counts) >= limit


def reward_sums(reward: np.ndarray, valid: np.ndarray, identity: np.ndarray) -> dict:
    """Each identity's sum of |reward| and count of valid steps in reward [B, T] (valid [B, T],
    identity [B]): {identity: (sum, steps)}."""
    labels, ids = relabel(identity)
    size = np.abs(np.where(valid, reward, 0.0)).sum(axis=1)
    sums = np.bincount(labels, weights=size, minlength=ids.size)
    steps = np.bincount(labels, weights=valid.sum(axis=1), minlength=ids.size)
    return {int(i): (float(a), float(n)) for i, a, n in zip(ids, sums, steps)}


class WindowSums:
    """Each identity's totals of (sum, count) pairs added in a sliding window of time: a deque of
    additions and running totals per identity, O(1) per addition over a run."""

    def __init__(self):
        self._added: collections.deque = collections.deque()  # (time, {identity: (sum, n)})
        self._totals: dict = {}

    def add(self, now: float, values: dict) -> None:
        """{identity: (sum, count)} seen at time `now` (not earlier than the previous add)."""
        self._added.append((now, values))
        for who, (a, n) in values.items():
            total = self._totals.get(who, (0.0, 0.0))
            self._totals[who] = (total[0] + a, total[1] + n)

    def expire(self, before: float) -> None:
        """Forgets the values added before time `before`."""
        while self._added and self._added[0][0] < before:
            for who, (a, n) in self._added.popleft()[1].items():
                total = self._totals.get(who)
                if total is None:  # gone already (an addition of nothing)
                    continue
                left = (total[0] - a, total[1] - n)
                if left[1] <= 0:
                    del self._totals[who]
                else:
                    self._totals[who] = left

    def means(self) -> dict:
        """{identity: its sum / count in the window} (identities with a count)."""
        return {who: max(a, 0.0) / n for who, (a, n) in self._totals.items() if n > 0}


def reward_scales(rates: dict, scale: float, floor: float = 1.0) -> dict:
    """The factor (<= 1) each identity's rewards are multiplied by, from each one's mean |reward|
    per step over a recent window (`rates`): 1 up to max(floor, scale x the median identity's
    rate; with two identities the smaller one's), beyond it the factor that brings the
    identity's rate down to that bound. scale 0, or one identity: no bound ({}).

    Why a rate and not the largest reward: a flood (large rewards at every step, however many
    envs and streams) raises its identity's rate by its full size, while a rare large reward an
    honest actor meets first (the discovery exploration exists for) raises it by that reward
    divided by the steps the actor played in the window, and reaches the learner at its value.
    Why scaled and not clipped: a bounded identity keeps the signs and proportions of its
    rewards, so an honest one whose environment pays more (another level) still teaches what
    it saw, at the others' scale."""
    if scale <= 0 or len(rates) < 2:  # one identity is the run
        return {}
    values = list(rates.values())
    reference = float(np.median(values)) if len(values) >= 3 else min(values)
    bound = max(float(floor), float(scale) * reference)
    return {who: bound / rate for who, rate in rates.items() if rate > bound}


class ResultQuota:
    """League results (game outcomes) per identity over the last `seconds`: with three identities
    or more there, one identity's count at most `factor` x what the median one reported, so
    fake wins or losses from one actor move the payoff matrix and the opponent sampler by at
    most that share of the results. Results beyond are ignored (`capped`). factor 0: no cap
    (server.fair_share_factor's "off")."""

    def __init__(self, seconds: float, factor: float):
        self.seconds = float(seconds)
        self.factor = float(factor)
        self._window: collections.deque = collections.deque()  # (time, identity, admitted)
        self.capped = 0

    def admit(self, identity: np.ndarray, now: float) -> np.ndarray:
        """Which of these results (each of identity `identity`[i], in order) count."""
        while self._window and self._window[0][0] < now - self.seconds:
            self._window.popleft()
        offered = collections.Counter(o for _, o, _ in self._window)
        counted = collections.Counter(o for _, o, ok in self._window if ok)
        offered.update(identity.tolist())
        keep = np.ones(identity.size, bool)
        if self.factor > 0 and len(offered) >= 3:
            cap = self.factor * float(np.median(list(offered.values())))
            for i, who in enumerate(identity.tolist()):
                keep[i] = counted[who] < cap
                counted[who] += int(keep[i])
        for who, ok in zip(identity.tolist(), keep.tolist()):
            self._window.append((now, who, ok))
        self.capped += int(keep.size - keep.sum())
        return keep
