"""How far one actor can move a learner batch: pure functions the trajectory store applies to each
full batch (host side, numpy) before the learner sees it.

The threat: an actor that passed authentication (or a buggy one) sends legal data, any value
inside the codec's bounds (seedlike.rpc.codec.Limits), from any number of envs and streams. Its
unit is the *identity*: the peer host and the actor_id it declares (every stream sharing both is
one identity, seedlike.server.inference). The actor_id is not authenticated: one host can be as
many identities as it may open streams (server.max_streams_per_peer, which bounds it). With fewer
than three identities in a batch no statistic can tell the bad one from the good, so the bounds
below hold when the bad identities are a minority of at least three.

* `loss_mask`: over a recent window (server.fair_window_s), an identity's unrolls count in the
  loss up to `factor` x what the median identity delivered in it (and up to `max_share` x B of
  each batch). The unrolls beyond stay in the batch with valid = False: they fill it, so no one
  waits for a slow actor and no honest work is refused for capacity, but they teach nothing. One
  bad identity of k >= 3 with equal honest ones holds at most factor / (factor + k - 1) of the
  counted unrolls (factor 1: 1/k), however many envs and streams it runs.
* `reward_bound`: rewards are clipped to +-max(floor, scale x the median identity's largest
  |reward| over the recent window). A bad minority's rewards lie within `scale` x what honest
  identities see; rewards a majority never sees are clipped to `floor` (1.0: the scale of
  Atari's clipped rewards, MiniGrid, CartPole and board games, so those pass untouched).

Observation statistics are bounded the same way in the learner process
(networks.normalization.IdentityWindow: per-identity moments over the window, merged by a
median), and PPO's advantages on the devices (each identity's scaled down to the median
identity's, seedlike.learning.train_state.make_prepare).
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
    # Rank of each unroll among its identity's, in batch order.
    order = np.argsort(labels, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.empty(batch, np.int64)
    rank[order] = np.arange(batch) - np.repeat(starts, counts)
    return rank < cap[labels]


def largest_rewards(reward: np.ndarray, identity: np.ndarray) -> dict:
    """Each identity's largest |reward| in reward [B, T] (identity [B]): {identity: value}."""
    per_unroll = np.abs(reward).max(axis=1, initial=0.0)
    return {int(i): float(per_unroll[identity == i].max()) for i in np.unique(identity)}


class WindowMaxima:
    """Each identity's largest value among those added in a sliding window of time.

    Per identity a deque of (time, value) with values falling from oldest to newest: a value
    that a later, larger one outlives can never be the maximum again and is dropped when that
    one is added. Adding and expiring cost O(1) per value over a run, where scanning every
    batch of the window cost O(window) per batch (a fast run's 30 s window holds hundreds)."""

    def __init__(self):
        self._values: dict = {}

    def add(self, now: float, values: dict) -> None:
        """{identity: value} seen at time `now` (not earlier than the previous add)."""
        for who, value in values.items():
            q = self._values.get(who)
            if q is None:
                q = self._values[who] = collections.deque()
            while q and q[-1][1] <= value:
                q.pop()
            q.append((now, value))

    def expire(self, before: float) -> None:
        """Forgets the values added before time `before`."""
        for who in list(self._values):
            q = self._values[who]
            while q and q[0][0] < before:
                q.popleft()
            if not q:
                del self._values[who]

    def maxima(self) -> dict:
        """{identity: its largest value in the window}."""
        return {who: q[0][1] for who, q in self._values.items()}


def reward_bound(largest: dict, scale: float, floor: float = 1.0) -> float:
    """The largest |reward| a batch keeps: max(floor, scale x the median over identities of each
    one's largest |reward| (`largest`, over a recent window, so that batches one identity filled
    alone are bounded by the others too)); scale 0: no bound (inf)."""
    if scale <= 0:
        return float("inf")
    median = float(np.median(list(largest.values()))) if largest else 0.0
    return max(float(floor), float(scale) * median)


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
