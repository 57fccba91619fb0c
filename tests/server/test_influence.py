"""The bounds on one actor's influence over a learner batch (seedlike.server.influence) and the
advantage bound of batch preparation (seedlike.learning.train_state.make_prepare)."""

import collections

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from seedlike.algos import ppo
from seedlike.learning import train_state as ts
from seedlike.learning.update import _untaught
from seedlike.server import influence
from seedlike.server.episodes import EpisodeBoard
from seedlike.types import Unroll


def test_relabel_is_dense_in_order_of_first_appearance():
    labels, ids = influence.relabel(np.array([70, 3, 70, 9, 3]))
    np.testing.assert_array_equal(labels, [0, 1, 0, 2, 1])
    np.testing.assert_array_equal(ids, [70, 3, 9])
    assert labels.dtype == np.int32


def test_loss_mask_holds_an_identity_to_what_the_median_one_delivered_in_the_window():
    identity = np.array([5] * 10 + [1] * 3 + [2] * 3)  # 16 unrolls: counts 10, 3, 3
    offered = {5: 10, 1: 3, 2: 3}  # the window: this batch alone
    keep = influence.loss_mask(identity, 3, factor=1.0, offered=offered, counted={})
    np.testing.assert_array_equal(keep, [True] * 3 + [False] * 7 + [True] * 6)
    assert influence.loss_mask(identity, 3, 2.0, offered=offered, counted={}).sum() == 12
    assert influence.loss_mask(identity, 3, 0.0, offered=offered, counted={}).all()  # off
    # Earlier batches of the window: identity 5 delivered 40 more (2 counted), the others 3 each.
    offered = {5: 50, 1: 6, 2: 6}
    counted = {5: 2, 1: 3, 2: 3}
    keep = influence.loss_mask(identity, 3, 1.0, offered=offered, counted=counted)
    np.testing.assert_array_equal(keep, [True] * 4 + [False] * 6 + [True] * 6)
    # An identity that fills a whole batch alone: the median of the window holds it.
    keep = influence.loss_mask(np.zeros(12, np.int64), 3, 1.0, offered={0: 60, 1: 4, 2: 4})
    assert keep.sum() == 4
    # Two identities cannot be told apart: no median rule, only max_share and the equal split.
    two = {5: 10, 1: 3}
    assert influence.loss_mask(identity[:13], 2, 1.0, offered=two, counted={}).all()
    np.testing.assert_array_equal(
        influence.loss_mask(identity[:13], 2, 1.0, max_share=0.25, offered=two, counted={}),
        [True] * 7 + [False] * 3 + [True] * 3,  # 0.25 x 13 -> 4, raised to the split 7
    )


def round_robin(identity, batch):
    """The reference: rounds, each taking the next unroll of every identity with one left (the
    round's in order of arrival), until the batch is full; positions in arrival order."""
    queues = {}
    for position, who in enumerate(identity):
        queues.setdefault(who, []).append(position)
    taken = []
    while len(taken) < batch:
        heads = sorted(q.pop(0) for q in queues.values() if q)
        taken += heads[: batch - len(taken)]
    return sorted(taken)


def test_mixed_batch_takes_the_identities_in_turn_and_waits_for_the_ones_delivering():
    # Identity 3's request completed 6 unrolls at once, before 1's and 2's single ones.
    burst = np.array([3] * 6 + [1, 2])
    np.testing.assert_array_equal(round_robin(np.array([0, 1, 1, 1, 0, 0]), 3), [0, 1, 2])
    np.testing.assert_array_equal(influence.mixed_batch(burst, 4, active=3, hold=4), [0, 1, 6, 7])
    assert influence.mixed_batch(burst[:7], 4, active=3, hold=4) is None  # 2 has none yet
    assert influence.mixed_batch(burst[:7], 4, active=2, hold=4) is None  # 1 has 1 of its 2
    np.testing.assert_array_equal(influence.mixed_batch(burst[:7], 4, 3, hold=3), [0, 1, 2, 6])
    np.testing.assert_array_equal(influence.mixed_batch(burst, 4, 3, hold=0), [0, 1, 2, 3])
    assert influence.mixed_batch(burst[:3], 4, 1, hold=4) is None  # not a batch yet
    np.testing.assert_array_equal(influence.mixed_batch(burst[:6], 4, 1, hold=4), [0, 1, 2, 3])
    rng = np.random.default_rng(0)
    branches = collections.Counter()
    for trial in range(200):
        identity = rng.choice([5, 9, 2, 7], size=int(rng.integers(8, 40)), p=[0.6, 0.2, 0.1, 0.1])
        hold = (0, 9, 64)[trial % 3]  # arrival order; waits while fewer than 16; always waits
        got = influence.mixed_batch(identity, 7, active=4, hold=hold)
        ref = round_robin(identity, 7)
        counts = collections.Counter(identity[ref].tolist())
        mixed = len(counts) == 4  # every identity its equal split of 7 (1)
        if hold == 0:
            np.testing.assert_array_equal(got, np.arange(7))
        elif mixed or identity.size >= 7 + hold:  # or enough waiting to go anyway
            np.testing.assert_array_equal(got, ref)
        else:
            assert got is None
        branches[hold, mixed, got is None] += 1
    assert {(9, True, False), (9, False, False), (64, False, True)} <= set(branches)


def test_reward_scales_bring_an_identity_above_scale_times_the_median_rate_down_to_it():
    reward = np.array([[1.0, -0.5], [0.2, 0.0], [1e6, -1e6], [0.0, 3.0], [0.0, -0.7]])
    valid = np.array([[1, 1], [1, 1], [1, 1], [1, 1], [1, 0]], bool)
    sums = influence.reward_sums(reward, valid, np.array([0, 1, 2, 3, 0]))
    # Rows of one identity add up; the invalid step's reward does not count.
    assert sums == {0: (1.5, 3.0), 1: (0.2, 2.0), 2: (2e6, 2.0), 3: (3.0, 2.0)}
    rates = {who: a / n for who, (a, n) in sums.items()}  # 0.5, 0.1, 1e6, 1.5
    bound = 2.0 * np.median(list(rates.values()))  # 2 x 1.0
    assert influence.reward_scales(rates, scale=2.0) == {2: pytest.approx(bound / 1e6)}
    # Below the floor nothing is scaled; scale 0 is off.
    assert influence.reward_scales({0: 0.0, 1: 0.0, 2: 0.9}, scale=2.0, floor=1.0) == {}
    assert influence.reward_scales({0: 0.0, 1: 0.0, 2: 5.0}, 2.0, 1.0) == {2: pytest.approx(0.2)}
    assert influence.reward_scales(rates, scale=0.0) == {}
    # Two identities: each held to scale x the other's (the smaller) rate, above the floor; so
    # one of two flooding +-1e6 is brought to 2 x the honest rate, and one sending nothing can
    # bring the other down to the floor's rate only. One identity is the run: never scaled.
    assert influence.reward_scales({0: 1.0, 9: 1e6}, 2.0) == {9: pytest.approx(2e-6)}
    assert influence.reward_scales({0: 5.0, 9: 0.0}, 2.0, 1.0) == {0: pytest.approx(0.2)}
    assert influence.reward_scales({0: 1.0, 9: 0.0}, 2.0, 1.0) == {}  # CartPole's rate: 1
    assert influence.reward_scales({9: 1e6}, 2.0) == {}


def _unrolls(reward: np.ndarray) -> Unroll:
    b, t = reward.shape
    zeros = np.zeros((b, t + 1), np.float32)
    return Unroll(
        obs={}, extras={}, action=np.zeros((b, t + 1), np.int32), behaviour_logp=zeros,
        behaviour_value=zeros, valid=np.ones((b, t + 1), bool), first=np.zeros((b, t + 1), bool),
        policy_version=np.zeros((b, t + 1), np.int32), reward=reward.astype(np.float32),
        terminated=np.zeros((b, t), bool), truncated=np.zeros((b, t), bool), carry=(),
    )  # fmt: skip


def test_window_sums_equal_a_scan_of_the_window_at_every_step():
    rng = np.random.default_rng(0)
    sums, added, window_s = influence.WindowSums(), [], 5.0
    for now in np.cumsum(rng.uniform(0.0, 1.0, 300)):
        sums.expire(now - window_s)
        values = {
            int(who): (float(rng.integers(0, 6)), float(rng.integers(1, 4)))
            for who in rng.choice(5, 2, replace=False)
        }
        sums.add(now, values)
        added.append((now, values))
        scanned: dict = {}
        for when, seen in added:
            if when >= now - window_s:
                for who, (a, n) in seen.items():
                    total = scanned.get(who, (0.0, 0.0))
                    scanned[who] = (total[0] + a, total[1] + n)
        # Whole numbers: the running totals are exact on either side.
        assert sums.means() == {who: a / n for who, (a, n) in scanned.items()}


def _scored(sign, action, identity, t=8, window=False):
    """make_prepare's advantages [B, t] and influence metrics for unit advantages `sign` [B, t]
    (the unrolls' rewards stand for the advantages) under the score d log pi / d logits of a
    uniform two-action policy, onehot(a) - 1/2, of the unrolls' actions [B, t + 1]; with
    `window`, the metrics' ts.WINDOW its terms."""

    def advantages(unroll):
        return unroll.reward, unroll.reward

    def score(params, obs_norm, unrolls):
        return jax.nn.one_hot(unrolls.action[:, :t], 2) - 0.5

    prepare = jax.pmap(
        ts.make_prepare(advantages, groups=identity.size, score=score, window=window),
        ts.AXIS,
        devices=jax.devices()[:1],
    )
    state = ts.TrainState({}, (), {}, *(jnp.zeros((), jnp.int32),) * 3)
    one = jax.tree.map(lambda x: x[None], (state, _unrolls(sign)._replace(action=action)))
    advantage, _, _, influence = prepare(*one, identity[None], {})
    window = influence.pop(ts.WINDOW, None)
    seen = {k: float(v[0]) for k, v in influence.items()}
    if window is not None:
        seen[ts.WINDOW] = tuple(np.asarray(x)[0] for x in window)
    return np.asarray(advantage)[0], seen


def test_prepare_scales_an_identity_with_outsized_advantages_down_to_the_median():
    """Identity 2 (unrolls 4, 5) earns 100x the others' rewards: its advantages shrink to the
    median identity's RMS, and its value targets (behaviour values 0 here) to those advantages;
    one identity is left alone; of two, the larger is held to the smaller."""
    config = ml_collections.ConfigDict({"gamma": 0.9, "gae_lambda": 0.95, "reward_clip": 0.0})
    prepare = jax.pmap(
        ts.make_prepare(ppo.advantages(config), groups=6), ts.AXIS, devices=jax.devices()[:1]
    )
    state = ts.TrainState({}, (), {}, *(jnp.zeros((), jnp.int32),) * 3)
    reward = np.random.default_rng(0).uniform(0.5, 1.5, (6, 4))
    reward[4:] *= 100.0
    identity = np.array([0, 0, 1, 1, 2, 2], np.int32)
    one = jax.tree.map(lambda x: x[None], (state, _unrolls(reward)))
    advantage, target, _, influence = prepare(*one, identity[None], {})
    advantage, target = np.asarray(advantage)[0], np.asarray(target)[0]
    # The row says how far the bound acted: identity 2's RMS was about 100x the median's.
    assert 0.005 < float(influence["influence/advantage_scale_min"][0]) < 0.02
    rms = [np.sqrt(np.mean(advantage[identity == g] ** 2)) for g in range(3)]
    np.testing.assert_allclose(rms[2], np.median(rms), rtol=1e-5)
    np.testing.assert_allclose(target, advantage, rtol=1e-6)  # zero behaviour values
    alone, alone_target, _, influence = prepare(*one, np.zeros((1, 6), np.int32), {})
    assert float(influence["influence/advantage_scale_min"][0]) == 1.0
    alone, alone_target = np.asarray(alone)[0], np.asarray(alone_target)[0]
    np.testing.assert_allclose(alone[:4], advantage[:4], rtol=1e-5)  # untouched below the median
    assert alone[4:].mean() > 50 * alone[:4].mean()
    np.testing.assert_allclose(alone_target, alone, rtol=1e-6)
    # Of two identities (0 and the flood 2), the flood is held to the other's RMS, not to the
    # mean of the two (which would leave it about half its size).
    two = np.array([0, 0, 0, 0, 2, 2], np.int32)
    pair, *_ = prepare(*one, two[None], {})
    pair = np.asarray(pair)[0]
    np.testing.assert_allclose(pair[:4], alone[:4], rtol=1e-5)
    np.testing.assert_allclose(
        np.sqrt(np.mean(pair[4:] ** 2)), np.sqrt(np.mean(alone[:4] ** 2)), rtol=1e-5
    )


def test_prepare_scales_an_identity_whose_advantages_all_favour_one_action_to_the_median():
    """Four identities of four unrolls, advantages of one size (RMS 1) everywhere; identities 0-2
    get random signs, identity 3 +1 for action 0 and -1 for action 1 at every step. With the score
    d log pi / d logits of a uniform two-action policy (onehot(a) - 1/2), identity 3's scores all
    agree: z (their sum's length over the root of their sum of squares) is sqrt(32); its
    advantages are scaled to the tolerance (3) x the median z (at least 1) over its own. Honest
    random identities, one of 2 unrolls among ones of 8, are left alone."""
    rng = np.random.default_rng(0)
    t = 8
    seen = {}  # the last call's influence metrics

    def prepared(sign, action, identity):
        advantage, influence = _scored(sign, action, identity, t)
        seen.update(influence)
        return advantage

    identity = np.repeat(np.arange(4, dtype=np.int32), 4)
    action = rng.integers(0, 2, (16, t + 1)).astype(np.int32)
    sign = rng.choice([-1.0, 1.0], (16, t))
    sign[12:] = np.where(action[12:, :t] == 0, 1.0, -1.0)
    advantage = prepared(sign, action, identity)
    step = sign[..., None] * (np.eye(2)[action[:, :t]] - 0.5)
    z = [
        np.linalg.norm(step[identity == g].sum((0, 1)))
        / np.sqrt(np.square(step[identity == g]).sum())
        for g in range(4)
    ]
    assert z[3] == pytest.approx(np.sqrt(32)) and max(z[:3]) < 3.0
    bound = 3.0 * max(np.median(z), 1.0)
    np.testing.assert_allclose(advantage[:12], sign[:12], rtol=1e-6)
    np.testing.assert_allclose(advantage[12:], bound / z[3] * sign[12:], rtol=1e-5)
    # Two identities: the coherent one is held to the tolerance x the other's z (at least 1).
    pair = np.isin(identity, [0, 3])
    two = prepared(sign[pair], action[pair], np.repeat(np.arange(2, dtype=np.int32), 4))
    np.testing.assert_allclose(two[:4], sign[:4], rtol=1e-6)
    np.testing.assert_allclose(two[4:], 3.0 * max(z[0], 1.0) / z[3] * sign[12:], rtol=1e-5)
    advantage = prepared(sign, action, identity)  # the four again, for the metrics below
    # The row says so: the largest z, the median one, and the factor applied.
    assert seen["influence/coherence_z_max"] == pytest.approx(np.sqrt(32), rel=1e-5)
    assert seen["influence/coherence_z_median"] == pytest.approx(np.median(z), rel=1e-5)
    assert seen["influence/coherence_scale_min"] == pytest.approx(bound / z[3], rel=1e-5)
    # Honest random data, identity 0 with 2 unrolls and the others 8: all left alone.
    identity = np.repeat(np.arange(5, dtype=np.int32), [2, 8, 8, 8, 8])
    action = rng.integers(0, 2, (34, t + 1)).astype(np.int32)
    sign = rng.choice([-1.0, 1.0], (34, t))
    np.testing.assert_allclose(prepared(sign, action, identity), sign, rtol=1e-6)


def test_prepare_holds_an_identity_that_pulls_against_the_others_to_what_they_share():
    """Three identities of four unrolls pay action 1 at some of their steps (random signs at the
    rest), a fourth pays action 0 at some of its own: it pulls against the others, and while its
    z stays below the tolerance x theirs the z bound lets it be. Its advantages are scaled by
    the largest f in [0, 1] whose push f x S lies within the tolerance (3) x its noise of the
    median identity's push per step x its steps (found here by a search over f), or the f
    nearest to it: 0 where the others agree so strongly that even no push lies further (they
    pay at every step). The three are left alone. Two identities have no such reference."""
    rng = np.random.default_rng(1)
    t = 8

    def paying(action, favoured, steps):
        """Signs of unit advantages [n, t]: +1 for `favoured` (-1 else) at the first `steps`
        steps of each identity's 32, random after."""
        sign = rng.choice([-1.0, 1.0], action.shape).reshape(-1, 32)
        paid = np.where(action.reshape(-1, 32) == favoured, 1.0, -1.0)
        sign[:, :steps] = paid[:, :steps]
        return sign.reshape(action.shape)

    identity = np.repeat(np.arange(4, dtype=np.int32), 4)
    action = rng.integers(0, 2, (16, t + 1)).astype(np.int32)
    for honest_steps, bad_steps, zero in ((12, 24, False), (32, 12, True)):
        sign = np.concatenate(
            [paying(action[:12, :t], 1, honest_steps), paying(action[12:, :t], 0, bad_steps)]
        )
        advantage, seen = _scored(sign, action, identity)
        step = sign[..., None] * (np.eye(2)[action[:, :t]] - 0.5)
        push = np.stack([step[identity == g].sum((0, 1)) for g in range(4)])
        noise = np.sqrt([np.square(step[identity == g]).sum() for g in range(4)])
        expected = 32 * np.median(push / 32, axis=0)
        f = np.linspace(0.0, 1.0, 100_001)
        distance = np.linalg.norm(f[:, None] * push[3] - expected, axis=1)
        inside = f[distance <= 3.0 * noise[3]]
        want = inside.max() if inside.size else f[np.argmin(distance)]
        assert (want < 1e-4) == zero and want < 1.0
        np.testing.assert_allclose(advantage[:12], sign[:12], rtol=1e-6)
        np.testing.assert_allclose(advantage[12:], want * sign[12:], atol=2e-5)
        assert seen["influence/direction_scale_min"] == pytest.approx(want, abs=2e-5)
        gap = np.linalg.norm(push[3] - expected) / noise[3]
        assert seen["influence/direction_z_max"] == pytest.approx(gap, rel=1e-5)
        # Its z is not what gives it away.
        assert seen["influence/coherence_scale_min"] == pytest.approx(1.0, rel=1e-6)
    # Two identities: no median tells them apart, so no such reference.
    pair = np.isin(identity, [0, 3])
    two, seen = _scored(sign[pair], action[pair], np.repeat(np.arange(2, dtype=np.int32), 4))
    assert np.isnan(seen["influence/direction_z_max"])
    assert seen["influence/direction_scale_min"] == pytest.approx(1.0, rel=1e-6)
    assert np.abs(two[4:]).min() > 0.5  # the z bound of two holds the first, not the fourth


def test_a_pull_inside_the_noise_of_every_batch_adds_up_over_the_window_and_is_held():
    """Four identities of four unrolls per batch, random signs, but identity 3 pays action 0 at
    6 of its 32 steps in every batch: per batch its push lies inside the direction bound's
    tolerance (factor 1), but it points the same way each time. Summed over the batches
    (DeviationWindow) its deviations from the median push grow like their number and their
    noise like its root: once z passes the tolerance (3) its next samples weigh 3 / z in the
    learner's loss, while the honest identities' z stays below it. Each batch's terms are
    checked against the closed form (push - expected, noise^2: the batch's own bounds left
    f = 1) and z against their sums; prepare's advantages are the batch's alone."""
    rng = np.random.default_rng(3)
    t, identity = 8, np.repeat(np.arange(4, dtype=np.int32), 4)
    window = ts.DeviationWindow(seconds=100.0)
    sums, zs, factors = np.zeros((4, 2)), [], []
    squares = np.zeros(4)
    for k in range(12):
        action = rng.integers(0, 2, (16, t + 1)).astype(np.int32)
        sign = rng.choice([-1.0, 1.0], (16, t))
        bad = sign[12:].reshape(32)
        bad[:6] = np.where(action[12:, :t].reshape(32)[:6] == 0, 1.0, -1.0)
        sign[12:] = bad.reshape(4, t)
        z = [window.z(float(k), g) for g in range(4)]
        held = np.where(np.array(z) > 3.0, 3.0 / np.maximum(z, 1e-9), 1.0)
        advantage, seen = _scored(sign, action, identity, window=True)
        assert seen["influence/direction_scale_min"] == pytest.approx(1.0)  # inside, per batch
        np.testing.assert_allclose(advantage, sign, rtol=1e-5)
        step = sign[..., None] * (np.eye(2)[action[:, :t]] - 0.5)
        push = np.stack([step[identity == g].sum((0, 1)) for g in range(4)])
        noise = np.sqrt([np.square(step[identity == g]).sum() for g in range(4)])
        expected = 32 * np.median(push / 32, axis=0)
        deviation, noise2, many = seen[ts.WINDOW]
        # Whatever the window holds: holding an identity does not cancel what holds it.
        np.testing.assert_allclose(deviation[:4], push - expected, atol=1e-4)
        np.testing.assert_allclose(noise2[:4], np.square(noise), rtol=1e-4)
        assert many[:4].all() and not many[4:].any()
        for g in range(4):
            window.add(float(k), g, deviation[g], float(noise2[g]))
        sums += deviation[:4]
        squares += noise2[:4]
        zs.append(np.linalg.norm(sums, axis=1) / np.sqrt(squares))
        factors.append(held)
    np.testing.assert_allclose([window.z(11.0, g) for g in range(4)], zs[-1], rtol=1e-4)
    assert max(np.max(z[:3]) for z in zs) < 3.0 and zs[-1][3] > 3.0
    assert factors[-1][3] < 1.0 and all((f[:3] == 1.0).all() for f in factors)
    assert window.z(200.0, 3) == 0.0  # out of the window: nothing left


def test_episode_board_reports_the_plain_mean_and_the_median_identity_of_recent_episodes():
    """Identity 9 reports 1,000 fake episodes of return 4,000 (finding 3 of issue 33 ended a
    stop_at_return=475 run that way, 4.8 s in); the board reports the plain mean of the recent
    episodes as `return`, the median identity's mean as `robust`, and says the target is reached
    only when most identities reach it."""
    board = EpisodeBoard(window=3)
    board.keep([1, 2, 9])
    board.add(np.full(1000, 9), np.full(1000, 4000.0), np.full(1000, 100))
    first = board.summary()
    assert first["robust"] is None and not board.reached(475.0)  # 1 of 3 has played
    assert first["return"] == 4000.0  # the plain mean is what was played, whoever played it
    board.add(np.array([1, 1, 2, 1]), np.array([10.0, 20.0, 30.0, 40.0]), np.array([1, 2, 3, 4]))
    summary = board.summary(threshold=35.0)
    # Windows: identity 1 (20, 10, 40... its last 3: 10, 20, 40), 2 (30), 9 (4,000 x 3).
    assert summary["robust"] == pytest.approx(30.0) and summary["identities"] == 3
    assert summary["return"] == pytest.approx((70.0 + 30.0 + 12000.0) / 7)  # the plain mean
    assert summary["length"] == pytest.approx((1 + 2 + 4 + 3 + 300) / 7)
    assert summary["success"] == pytest.approx(1 / 3)  # rates 1/3, 0, 1
    assert not board.reached(475.0)
    board.add(np.array([1, 2, 1, 2, 1, 2]), np.full(6, 500.0), np.full(6, 500))
    assert board.reached(475.0) and board.summary()["robust"] == pytest.approx(500.0)
    board.keep([1, 9])  # identity 2 disconnected: of two, the lower middle one
    assert board.summary()["robust"] == pytest.approx(500.0)
    one = EpisodeBoard()
    assert one.summary()["return"] is None and one.summary()["robust"] is None
    one.keep([4])
    one.add(np.array([4, 4]), np.array([1.0, 2.0]), np.array([1, 1]))
    assert one.summary()["robust"] == one.summary()["return"] == pytest.approx(1.5)
    assert one.reached(1.5)
    # Identities the reward bound is scaling do not vote while another does: one of two
    # flooding rewards (its returns -1e8) leaves the robust return to the other.
    two = EpisodeBoard()
    two.keep([1, 9])
    two.add(np.array([1, 9]), np.array([500.0, -1e8]), np.array([500, 100]))
    assert two.summary()["robust"] == pytest.approx(-1e8)  # the lower of two
    assert two.summary(distrusted={9})["robust"] == pytest.approx(500.0)
    assert two.summary(distrusted={1, 9})["robust"] == pytest.approx(-1e8)  # none left: all vote
    # Of three the median already leaves one out: the scaled one still votes.
    two.keep([1, 2, 9])
    two.add(np.array([2]), np.array([300.0]), np.array([300]))
    assert two.summary(distrusted={9})["robust"] == pytest.approx(300.0)


def test_result_quota_holds_an_identity_to_the_median_identitys_results():
    """Identity 9 reports 100 games (fake wins) while identities 1 and 2 report 5 each: 5 of its
    count, so the payoff moves by a third of the results at most; older results leave the
    window."""
    quota = influence.ResultQuota(seconds=30.0, factor=1.0)
    identity = np.array([1] * 5 + [9] * 100 + [2] * 5)
    keep = quota.admit(identity, now=0.0)
    assert keep[:5].all() and keep[5:105].sum() == 5 and keep[105:].all()
    assert quota.capped == 95
    assert not quota.admit(np.array([9]), now=10.0)[0]  # its share of the window is used
    assert quota.admit(np.array([9]), now=40.0)[0]  # the window has moved on: alone, it counts
    two = influence.ResultQuota(seconds=30.0, factor=1.0)
    assert two.admit(np.array([1] * 50 + [2]), now=0.0).all()  # two identities: no median rule


def test_result_quota_with_factor_zero_caps_nothing():
    """server.fair_share_factor 0 turns the caps off, the league results' quota included."""
    off = influence.ResultQuota(seconds=30.0, factor=0.0)
    assert off.admit(np.array([1] * 5 + [9] * 100 + [2] * 5), now=0.0).all() and not off.capped


def test_a_newcomer_weighs_its_tenure_over_the_probation_and_the_runs_first_identities_one():
    """Probation (300 s, cohort 30 s): the identities of the run's first 30 s weigh 1; one that
    joins at 100 s starts at 0 and weighs 60 / 300 at 160 s and 1 from 400 s; one unseen for
    more than 300 s is a newcomer again, cohort or not; 0 s turns it off."""
    probation = ts.Probation(seconds=300.0, cohort_s=30.0)
    assert probation.factors(0.0, ["a"]) == pytest.approx([1.0])
    assert probation.factors(20.0, ["b", "a"]) == pytest.approx([1.0, 1.0])
    assert probation.factors(100.0, ["a", "b", "c"]) == pytest.approx([1.0, 1.0, 0.0])
    assert probation.factors(160.0, ["a", "c"]) == pytest.approx([1.0, 60 / 300])
    assert probation.factors(400.0, ["c", "a"]) == pytest.approx([1.0, 1.0])
    assert probation.factors(401.0, ["b"]) == pytest.approx([0.0])  # last seen at 100 s
    assert probation.factors(402.0, ["b", "a"]) == pytest.approx([1 / 300, 1.0])
    assert ts.Probation(seconds=0.0, cohort_s=30.0).factors(5.0, ["a", "b"]) == pytest.approx(
        [1.0, 1.0]
    )
    # The run's most trusted identity now: a (the cohort) while it is there; once only
    # newcomers are left, the most senior of them.
    assert probation.peak(402.0) == pytest.approx(1.0)
    newcomers = ts.Probation(seconds=300.0, cohort_s=10.0)
    newcomers.factors(0.0, ["a"])
    newcomers.factors(100.0, ["b"])
    newcomers.factors(130.0, ["c"])
    assert newcomers.peak(130.0) == pytest.approx(1.0)  # a, seen at 0 s, is still there
    newcomers.factors(350.0, ["b", "c"])  # a unseen for 350 s: gone
    assert newcomers.peak(350.0) == pytest.approx(250 / 300)  # b's
    # With a hold of 60 s: nothing until 60 s after its first batch, then a line to 1 at 300 s.
    held = ts.Probation(seconds=300.0, cohort_s=10.0, hold_s=60.0)
    held.factors(0.0, ["a"])
    assert held.factors(100.0, ["d"]) == pytest.approx([0.0])
    assert held.factors(159.0, ["d"]) == pytest.approx([0.0])
    assert held.factors(220.0, ["d"]) == pytest.approx([60 / 240])
    assert held.factors(400.0, ["d"]) == pytest.approx([1.0])
    with pytest.raises(ValueError, match="hold_s=300.0 must lie in"):
        ts.Probation(seconds=300.0, cohort_s=10.0, hold_s=300.0)


def test_unrolls_that_weigh_less_than_one_teach_the_values_nothing():
    """An identity on probation or held by the window (weight < 1) keeps the value targets at
    the values its steps were met with (step T only bootstraps); weight 1 keeps its own."""
    behaviour = np.arange(12, dtype=np.float32).reshape(3, 4)
    target = np.full((3, 3), -1.0, np.float32)
    got = np.asarray(_untaught(np.array([1.0, 0.5, 0.0], np.float32), behaviour, target))
    np.testing.assert_allclose(got, [[-1, -1, -1], [4, 5, 6], [8, 9, 10]])
