"""The trajectory store: rewards and episode ends aligned with the actions that earned them,
whole inference batches recorded at once, and complete unrolls handed to the learner by
reference to their buffers."""

import threading

import jax
import numpy as np
import pytest

from seedlike.league.players import LEARNER
from seedlike.policy import PolicyOutput
from seedlike.server import unrolls as unrolls_lib
from seedlike.server.recorder import Recorder
from seedlike.server.seats import SeatTable
from seedlike.server.trajectory_store import BatchQueue, StepRecord, Stopped, TrajectoryStore
from seedlike.server.unrolls import UnrollPool
from seedlike.types import ArraySpec, EnvSpec, Rows

SPEC = EnvSpec("test", {"obs": ArraySpec(np.float32, (1,))}, num_actions=3)


def rows(
    obs,
    reward,
    terminated=None,
    truncated=None,
    env_id=None,
    player_id=None,
    acting=None,
    game_over=None,
):
    n = len(obs)
    terminated = np.zeros(n, bool) if terminated is None else np.asarray(terminated)
    truncated = np.zeros(n, bool) if truncated is None else np.asarray(truncated)
    done = terminated | truncated
    return Rows(
        obs={"obs": np.asarray(obs, np.float32).reshape(n, 1)},
        extras={},
        reward=np.asarray(reward, np.float32),
        terminated=terminated,
        truncated=truncated,
        env_id=np.arange(n, dtype=np.int32) if env_id is None else np.asarray(env_id, np.int32),
        player_id=np.zeros(n, np.int32) if player_id is None else np.asarray(player_id, np.int32),
        acting=~done if acting is None else np.asarray(acting),
        game_over=done if game_over is None else np.asarray(game_over),
    )


class Server:
    """What the inference pipeline does around the store, for sessions of `spec`: seats from a
    SeatTable, steps placed by the pool, the recorder's work, and the policy's outputs given by
    the test (action; logp = -action; value = 10 obs). `store` None: statistics only."""

    def __init__(self, store, initial_carry=lambda n: (), step_carry=None, spec=None):
        self.store = store
        self.pool = store.pool if store is not None else None
        spec = spec or store.spec
        self.seats = SeatTable(spec.num_players, initial_carry)
        self.recorder = Recorder(store)
        self.step_carry = step_carry  # (carry, first) -> new carry; None for feed-forward

    def open(self, session, num_envs):
        seats = self.seats.open(session, num_envs)
        if self.pool is not None:
            self.pool.open(seats)
        self.recorder.open(seats, session)

    def close(self, session):
        seats = self.seats.close(session)
        return self.recorder.close(seats, *self.pool.close(seats))

    def step_record(self, session, batch, action, version=0, policy=None):
        seat = self.seats.seats(session, batch.env_id, batch.player_id)
        ran = batch.acting | batch.terminated | batch.truncated
        first, carry, current, _ = self.seats.inputs(seat[ran])
        m = int(ran.sum())
        policy = current if policy is None else np.full(m, policy, np.int64)
        placement = self.pool.place(seat, ran) if self.pool is not None else None
        new_carry = self.step_carry(carry, first) if self.step_carry else ()
        self.seats.advance(seat[ran], (batch.terminated | batch.truncated)[ran], new_carry)
        act = np.full(m, action, np.int32)
        output = PolicyOutput(act, -act.astype(np.float32), batch.obs["obs"][ran, 0] * 10, ())
        return StepRecord.of(
            seat, batch, ran, {"obs": batch.obs["obs"][ran]}, {}, first, policy, carry, output,
            version, placement,
        )  # fmt: skip

    def feed(self, session, batch, action, version=0, policy=None):
        return self.recorder.record_batch(self.step_record(session, batch, action, version, policy))


def concatenate(records):
    """One record of several requests' rows, as the inference pipeline builds it."""
    skip = ("placement", "written", "policy_version")
    fields = [f for f in StepRecord._fields if f not in skip]
    parts = {f: [getattr(r, f) for r in records] for f in fields}
    joined = {f: jax.tree.map(lambda *x: np.concatenate(x), *parts[f]) for f in fields}
    offsets = np.cumsum([0] + [r.target.size for r in (p.placement for p in records)])
    places = [r.placement for r in records]
    joined_places = {
        f: np.concatenate([getattr(p, f) for p in places])
        for f in places[0]._fields
        if getattr(places[0], f) is not None
    }
    joined_places["done_row"] = np.concatenate([p.done_row + o for p, o in zip(places, offsets)])
    placement = places[0]._replace(**joined_places)
    return records[0]._replace(placement=placement, **joined)


def store_of(horizon, spec=SPEC, batch_unrolls=1, carry_template=(), slots=10_000, **kwargs):
    batches = BatchQueue(slots=slots)
    pool = UnrollPool(spec, horizon)
    return TrajectoryStore(pool, batch_unrolls, batches, carry_template, **kwargs), batches


def emitted(batches):
    """Every unroll of every full batch, in order."""
    out = []
    for batch in iter(lambda: batches.next_batch(timeout=0), None):
        unrolls = batch.unroll()
        batch.release()
        out += [jax.tree.map(lambda x, i=i: x[i], unrolls) for i in range(unrolls.action.shape[0])]
    return out


def test_rewards_and_dones_align_with_the_actions_that_earned_them():
    store, batches = store_of(horizon=4)
    server = Server(store)
    server.open(1, num_envs=1)
    # Episode: obs 0 -a0-> r1 obs 1 -a1-> r2 obs 2 -a2-> r3 obs 3 (terminal); reset obs 10 ...
    server.feed(1, rows([0.0], [0.0]), action=0)
    server.feed(1, rows([1.0], [1.0]), action=1)
    server.feed(1, rows([2.0], [2.0]), action=2)
    episodes = server.feed(1, rows([3.0], [3.0], terminated=[True]), action=0)
    assert list(zip(episodes.episode_return, episodes.length)) == [(6.0, 3)]
    assert not emitted(batches)
    server.feed(1, rows([10.0], [0.0]), action=1)
    (u,) = emitted(batches)
    np.testing.assert_array_equal(u.obs["obs"][:, 0], [0, 1, 2, 3, 10])
    np.testing.assert_array_equal(u.action, [0, 1, 2, 0, 1])
    np.testing.assert_array_equal(u.reward, [1, 2, 3, 0])  # r_t is the outcome of action t
    np.testing.assert_array_equal(u.terminated, [False, False, True, False])
    np.testing.assert_array_equal(u.valid, [True, True, True, False, True])  # a3 was ignored
    np.testing.assert_array_equal(u.first, [True, False, False, False, True])
    np.testing.assert_array_equal(u.behaviour_value, [0, 10, 20, 30, 100])
    np.testing.assert_array_equal(u.behaviour_logp, -u.action)


def test_consecutive_unrolls_share_their_boundary_step():
    store, batches = store_of(horizon=3)
    server = Server(store)
    server.open(1, num_envs=1)
    for t in range(7):
        server.feed(1, rows([float(t)], [float(t)]), action=t % 3, version=t)
    out = emitted(batches)
    assert len(out) == 2
    np.testing.assert_array_equal(out[0].obs["obs"][:, 0], [0, 1, 2, 3])
    np.testing.assert_array_equal(out[1].obs["obs"][:, 0], [3, 4, 5, 6])
    np.testing.assert_array_equal(out[1].reward, [4, 5, 6])
    np.testing.assert_array_equal(out[1].policy_version, [3, 4, 5, 6])


def test_truncated_episode_keeps_final_observation_value():
    store, batches = store_of(horizon=3)
    server = Server(store)
    server.open(1, num_envs=1)
    server.feed(1, rows([0.0], [0.0]), action=0)
    server.feed(1, rows([1.0], [1.0]), action=0)
    server.feed(1, rows([2.0], [1.0], truncated=[True]), action=0)  # final obs 2 (value 20)
    server.feed(1, rows([5.0], [0.0]), action=0)
    (u,) = emitted(batches)
    np.testing.assert_array_equal(u.truncated, [False, True, False])
    np.testing.assert_array_equal(u.terminated, [False, False, False])
    assert u.valid.tolist() == [True, True, False, True]
    assert u.behaviour_value[2] == 20.0


def test_seats_are_independent_and_batches_may_be_partial():
    store, batches = store_of(horizon=2)
    server = Server(store)
    server.open(1, num_envs=2)
    server.feed(1, rows([0.0, 100.0], [0, 0]), action=0)
    server.feed(1, rows([101.0], [5.0], env_id=[1]), action=1)  # async: only env 1 stepped
    server.feed(1, rows([1.0, 102.0], [1.0, 6.0]), action=2)
    (u,) = emitted(batches)
    np.testing.assert_array_equal(u.obs["obs"][:, 0], [100, 101, 102])
    np.testing.assert_array_equal(u.reward, [5, 6])
    server.feed(1, rows([2.0], [2.0], env_id=[0]), action=0)
    (u,) = emitted(batches)
    np.testing.assert_array_equal(u.obs["obs"][:, 0], [0, 1, 2])


def test_closing_a_session_drops_partial_unrolls_and_its_seats_are_reused_cleanly():
    store, batches = store_of(horizon=4)
    server = Server(store)
    server.open(1, num_envs=2)
    server.open(2, num_envs=1)
    for t in range(3):
        server.feed(1, rows([t, t], [1, 1]), action=0)
        server.feed(2, rows([t], [1]), action=0)
    assert server.close(1) == 6
    assert store.steps_dropped == 6 and not emitted(batches)
    server.open(3, num_envs=2)  # takes session 1's seats: they start from nothing
    for t in range(3, 6):
        server.feed(2, rows([t], [1]), action=0)
        server.feed(3, rows([50 + t, 60 + t], [1, 1]), action=1)
    (u,) = emitted(batches)
    np.testing.assert_array_equal(u.obs["obs"][:, 0], [0, 1, 2, 3, 4])
    for t in range(6, 8):
        server.feed(3, rows([50 + t, 60 + t], [1, 1]), action=1)
    out = emitted(batches)
    assert sorted(u.obs["obs"][0, 0] for u in out) == [53, 63]
    assert all(u.first[0] and u.valid.all() for u in out)


def test_one_batch_of_many_sessions_records_as_each_session_alone():
    """The store handles all rows of an inference batch at once; the result must not depend on
    how requests were grouped into batches."""
    rng = np.random.default_rng(0)
    steps = [
        {s: rows(rng.normal(size=3), rng.normal(size=3), terminated=rng.random(3) < 0.2)
         for s in (1, 2)}
        for _ in range(12)
    ]  # fmt: skip

    def run(together: bool):
        store, batches = store_of(horizon=3)
        server = Server(store)
        server.open(1, 3)
        server.open(2, 3)
        for step in steps:
            records = [server.step_record(s, step[s], action=s) for s in (1, 2)]
            if together:
                records = [concatenate(records)]
            for record in records:
                store.write_steps(record)
        return sorted(emitted(batches), key=lambda u: (u.action[0], u.obs["obs"][0, 0]))

    alone, together = run(False), run(True)
    assert len(alone) == len(together) == 18
    for a, b in zip(alone, together):
        jax.tree.map(np.testing.assert_array_equal, a, b)


def test_unrolls_fill_learner_batches_and_a_full_queue_holds_acting_back():
    store, batches = store_of(2, batch_unrolls=3, slots=1)
    server = Server(store)
    server.open(1, num_envs=4)

    def play():
        for t in range(3):
            server.feed(1, rows([t] * 4, [t] * 4), action=t, version=t)

    # The third step completes 4 unrolls: a batch of 3 goes out, and the 4th unroll waits until
    # the learner has taken that batch (one slot).
    acting = threading.Thread(target=play)
    acting.start()
    acting.join(timeout=1.0)
    assert acting.is_alive(), "acting must wait for the learner"
    batch = batches.next_batch(timeout=5).unroll()
    acting.join(timeout=5)
    assert not acting.is_alive()
    assert batch.action.shape == (3, 3) and batch.reward.shape == (3, 2)
    np.testing.assert_array_equal(batch.policy_version, [[0, 1, 2]] * 3)
    assert batches.next_batch(timeout=0) is None and store.unrolls_emitted == 4


@pytest.mark.parametrize("share", [1.0, 0.5, 0.1])
def test_one_actor_counts_for_at_most_its_share_of_a_batch(share):
    """Session 1 (4 envs, obs 1) completes 4 unrolls per round, session 2 (1 env, obs 2) one.
    Nothing is dropped and batches fill at once; with a 0.5 cap session 1's unrolls beyond 2 of
    each 4-unroll batch stay in it with valid False. A 0.1 cap (0 unrolls) is raised to an equal
    split between the two sessions (2 each)."""
    store, batches = store_of(2, batch_unrolls=4, slots=4, max_identity_share=share)
    server = Server(store)
    server.open(1, num_envs=4)
    server.open(2, num_envs=1)
    for t in range(5):  # unrolls complete at records 3 and 5 (consecutive ones share a step)
        server.feed(1, rows([1.0] * 4, [0.0] * 4), action=t)
        server.feed(2, rows([2.0], [0.0]), action=t)
    first, second = batches.next_batch(timeout=1).unroll(), batches.next_batch(timeout=1).unroll()
    assert store.unrolls_emitted == 10  # nothing dropped (the third batch is being filled)
    counted = [u.valid.any(axis=1) for u in (first, second)]
    np.testing.assert_array_equal(first.obs["obs"][:, 0, 0], [1.0] * 4)
    np.testing.assert_array_equal(second.obs["obs"][:, 0, 0], [2.0, 1.0, 1.0, 1.0])
    if share == 1.0:
        assert all(c.all() for c in counted) and store.unrolls_capped == 0
        assert store.last_batch_max_share == pytest.approx(0.75)
    else:
        np.testing.assert_array_equal(counted[0], [True, True, False, False])
        np.testing.assert_array_equal(counted[1], [True, True, True, False])
        assert store.unrolls_capped == 3 and store.last_batch_max_share == pytest.approx(2 / 3)
        server.close(2)  # alone, session 1 counts whole batches again
        for t in range(4):
            server.feed(1, rows([1.0] * 4, [0.0] * 4), action=t)
        batches.next_batch(timeout=1)  # the batch that still holds session 2's unroll
        assert batches.next_batch(timeout=1).unroll().valid.any(axis=1).all()
        assert store.last_batch_max_share == pytest.approx(1.0)


@pytest.mark.parametrize("mix_hold", [0.0, 1.0])
def test_a_request_of_many_envs_shares_each_batch_with_the_others_when_the_store_mixes(mix_hold):
    """Sessions 1 and 2 (1 env each, obs 1 and 2) act every tick, session 3 (4 envs, obs 3)
    every other one: per 4 ticks each small one completes 2 unrolls and session 3 four, at once.
    In arrival order (mix_hold 0) batches of 4 alternate between the small ones' alone and
    session 3's alone; mixed, once session 3 has delivered, every batch holds 1, 2, 3 and 3."""
    store, batches = store_of(2, batch_unrolls=4, mix_hold=mix_hold)
    server = Server(store)
    for session, envs in ((1, 1), (2, 1), (3, 4)):
        server.open(session, num_envs=envs)
    for t in range(1, 22):
        server.feed(1, rows([1.0], [0.0]), action=0)
        server.feed(2, rows([2.0], [0.0]), action=0)
        if t % 2:
            server.feed(3, rows([3.0] * 4, [0.0] * 4), action=0)
    made = []
    for batch in iter(lambda: batches.next_batch(timeout=0), None):
        made.append(sorted(batch.unroll().obs["obs"][:, 0, 0].tolist()))
        batch.release()
    assert 4 * len(made) + store.unrolls_held == store.unrolls_emitted == 40  # none lost
    if mix_hold:  # before session 3's first unrolls, the small ones' fill the first batch
        assert made == [[1, 1, 2, 2]] + [[1, 2, 3, 3]] * 8
        assert store.unrolls_held == 4  # session 3's last four, waiting for 1's and 2's next
    else:
        assert made == [[1, 1, 2, 2], [3, 3, 3, 3]] * 5


def test_an_identity_that_trickles_holds_no_batch_back_and_one_that_floods_keeps_its_newest():
    """Session 2 (1 env) completes one unroll and then idles, connected: session 1's batches
    (4 envs, 4 unrolls per round) are not held for it and nothing is dropped. Session 3 (12
    envs) then completes 12 at once beside session 1's 4: waiting, it keeps its newest B + hold
    (8), and every batch from then on holds both."""
    store, batches = store_of(2, batch_unrolls=4, mix_hold=1.0)
    server = Server(store)
    server.open(1, num_envs=4)
    server.open(2, num_envs=1)
    for t in range(21):
        server.feed(1, rows([1.0] * 4, [0.0] * 4), action=0)
        if t < 3:
            server.feed(2, rows([2.0], [0.0]), action=0)
    assert store.unrolls_emitted == 41 and store.unrolls_capped == 0
    made = []
    for batch in iter(lambda: batches.next_batch(timeout=0), None):
        made.append(sorted(batch.unroll().obs["obs"][:, 0, 0].tolist()))
        batch.release()
    assert 4 * len(made) + store.unrolls_held == 41 and store.unrolls_held < 4
    assert [1, 1, 1, 2] in made
    server.open(3, num_envs=12)
    for _ in range(3):
        server.feed(3, rows([3.0] * 12, [0.0] * 12), action=0)
        server.feed(1, rows([1.0] * 4, [0.0] * 4), action=0)
    assert store.unrolls_capped == 4  # session 3's oldest 4 of 12: beyond B + hold waiting
    for _ in range(4):
        server.feed(1, rows([1.0] * 4, [0.0] * 4), action=0)
    made = []
    for batch in iter(lambda: batches.next_batch(timeout=0), None):
        made.append(sorted(set(batch.unroll().obs["obs"][:, 0, 0].tolist())))
        batch.release()
    assert made and all(m == [1.0, 3.0] for m in made[1:])


def two_small_and_a_big_one(store, big_envs: int, big_reward: float) -> None:
    """Sessions 1 and 2 (1 env each, obs 1 and 2, reward 1) and 3 (big_envs envs, obs 3, reward
    big_reward) complete one round of horizon-2 unrolls."""
    server = Server(store)
    for session, envs in ((1, 1), (2, 1), (3, big_envs)):
        server.open(session, num_envs=envs)
    for t in range(3):
        server.feed(1, rows([1.0], [1.0]), action=t)
        server.feed(2, rows([2.0], [1.0]), action=t)
        server.feed(3, rows([3.0] * big_envs, [big_reward] * big_envs), action=t)


def test_an_actor_filling_whole_batches_counts_for_the_median_and_rewards_are_bounded():
    """Three sessions; session 3 completes 6 unrolls per round and pays 1e6 per step, the others
    one unroll each paying 1: in the 8-unroll batch session 3 counts for what the median session
    delivered (1 unroll), and its rewards are scaled to 2 x the median session's rate (2.0)."""
    store, batches = store_of(
        2, batch_unrolls=8, fair_share_factor=1.0, reward_scale=2.0, reward_floor=1.0
    )
    two_small_and_a_big_one(store, big_envs=6, big_reward=1e6)
    batch = batches.next_batch(timeout=1).unroll()
    source = batch.obs["obs"][:, 0, 0]
    np.testing.assert_array_equal(source, [1.0, 2.0] + [3.0] * 6)
    counted = batch.valid.any(axis=1)
    assert counted[:2].all() and counted[2:].sum() == 1 and store.unrolls_capped == 5
    np.testing.assert_allclose(batch.reward[2:], 2.0, rtol=1e-6)
    assert store.rewards_scaled == 12
    np.testing.assert_array_equal(batch.reward[:2], [[1.0, 1.0], [1.0, 1.0]])


def test_a_batch_one_actor_filled_alone_is_bounded_by_the_others_rewards_in_the_window():
    """Sessions 1-3 pay 1 per step and fill a batch together; then session 3 alone pays 1e6 and
    fills the next: its rewards are scaled so that its mean |reward| over the window (not its own
    batch's alone) is 2 x the median session's (1.0)."""
    store, batches = store_of(2, batch_unrolls=3, reward_scale=2.0, reward_floor=1.0)
    server = Server(store)
    for session in (1, 2, 3):
        server.open(session, num_envs=1)
    for t in range(3):
        for session in (1, 2, 3):
            server.feed(session, rows([float(session)], [1.0]), action=t)
    first = batches.next_batch(timeout=1).unroll()
    np.testing.assert_allclose(first.reward, np.ones((3, 2)))
    for t in range(3, 9):
        server.feed(3, rows([3.0], [1e6]), action=t)
    second = batches.next_batch(timeout=1).unroll()
    np.testing.assert_array_equal(second.obs["obs"][:, 0, 0], [3.0, 3.0, 3.0])
    rate = (2 * 1.0 + 6 * 1e6) / 8  # session 3's window: 2 steps paying 1, then 6 paying 1e6
    np.testing.assert_allclose(second.reward, np.full((3, 2), 1e6 * 2.0 / rate), rtol=1e-6)


def test_an_honest_actors_rare_large_reward_reaches_the_learner_at_its_value():
    """Four sessions pay 1 per step for five rounds; then session 1 meets a reward of 10, ten
    times any seen before: its batch carries 10, unscaled. A fifth session that then pays 1e6 at
    every step is brought down to twice the median rate, as before."""
    store, batches = store_of(2, batch_unrolls=4, reward_scale=2.0, reward_floor=1.0)
    server = Server(store)
    for session in (1, 2, 3, 4):
        server.open(session, num_envs=1)
    t = 0
    for t in range(11):  # five unrolls per session: five batches
        for session in (1, 2, 3, 4):
            server.feed(session, rows([float(session)], [1.0]), action=t)
    for _ in range(5):
        np.testing.assert_array_equal(batches.next_batch(timeout=1).unroll().reward, 1.0)
    for t in range(11, 13):
        for session in (1, 2, 3, 4):
            paid = 10.0 if (session, t) == (1, 11) else 1.0
            server.feed(session, rows([float(session)], [paid]), action=t)
    found = batches.next_batch(timeout=1).unroll()
    assert found.reward.max() == 10.0 and store.rewards_scaled == 0
    server.open(5, num_envs=1)
    for t in range(13, 17):
        for session in (1, 2, 3, 4, 5):
            server.feed(session, rows([float(session)], [1e6 if session == 5 else 1.0]), action=t)
    flood = [batches.next_batch(timeout=1).unroll() for _ in range(2)]
    reward = np.concatenate([b.reward for b in flood])
    source = np.concatenate([b.obs["obs"][:, 0, 0] for b in flood])
    assert 0 < np.abs(reward[source == 5.0]).max() <= 2.0 + 1e-4
    np.testing.assert_array_equal(reward[source != 5.0], 1.0)


def test_acting_waits_as_soon_as_a_batch_is_full_and_the_learner_has_not_taken_the_last():
    """Lockstep seats complete their unrolls together: if the store waited for the next batch's
    first unroll before blocking, a whole extra round would be acted on the old policy."""
    store, batches = store_of(2, batch_unrolls=3, slots=1)
    server = Server(store)
    server.open(1, num_envs=3)
    recorded = []

    def play():
        for t in range(6):
            server.feed(1, rows([t] * 3, [t] * 3), action=t, version=t)
            recorded.append(t)

    acting = threading.Thread(target=play)
    acting.start()
    acting.join(timeout=1.0)
    # Step 2 fills the first batch (3 unrolls) and waits for the learner to take it.
    assert acting.is_alive() and recorded == [0, 1], recorded
    batches.next_batch(timeout=5)
    acting.join(timeout=1.0)
    assert acting.is_alive() and recorded == [0, 1, 2, 3], recorded  # step 4 fills the next
    batches.next_batch(timeout=5)
    acting.join(timeout=5)
    assert recorded == list(range(6))


def test_a_closed_queue_releases_a_waiting_store():
    batches = BatchQueue(slots=1)
    batches.reserve()
    batches.close()
    with pytest.raises(Stopped):
        batches.reserve()


def test_turn_based_rewards_accumulate_for_the_waiting_player():
    """Players alternate; a player's step collects every reward until its next move."""
    spec = EnvSpec("game", {"obs": ArraySpec(np.float32, (1,))}, num_actions=3, num_players=2)
    store, batches = store_of(horizon=2, spec=spec)
    server = Server(store)
    server.open(1, num_envs=1)
    both = dict(env_id=[0, 0], player_id=[0, 1])
    server.feed(1, rows([0, 0], [0, 0], acting=[True, False], **both), action=1)  # p0 moves
    server.feed(1, rows([1, 1], [0, 0], acting=[False, True], **both), action=2)  # p1 moves
    server.feed(1, rows([2, 2], [0, 0], acting=[True, False], **both), action=0)  # p0 moves
    # p1 moves, p0 wins on its next move: terminal rows for both players.
    server.feed(1, rows([3, 3], [0, 0], acting=[False, True], **both), action=1)
    episodes = server.feed(1, rows([4, 4], [1, -1], terminated=[True, True], **both), action=0)
    assert sorted(zip(episodes.seat, episodes.episode_return, episodes.length)) == [
        (0, 1.0, 2),
        (1, -1.0, 2),
    ]
    out = emitted(batches)
    p0 = [u for u in out if u.obs["obs"][0, 0] == 0.0][0]
    np.testing.assert_array_equal(p0.obs["obs"][:, 0], [0, 2, 4])
    np.testing.assert_array_equal(p0.reward, [0, 1])
    np.testing.assert_array_equal(p0.terminated, [False, True])
    p1 = [u for u in out if u.obs["obs"][0, 0] == 1.0][0]
    np.testing.assert_array_equal(p1.obs["obs"][:, 0], [1, 3, 4])
    np.testing.assert_array_equal(p1.reward, [0, -1])
    np.testing.assert_array_equal(p1.valid, [True, True, False])


def test_only_the_learning_policy_is_trained_on_and_episodes_name_who_played():
    store, batches = store_of(horizon=2)
    server = Server(store)
    server.open(1, num_envs=2)
    for t in range(3):
        record = server.step_record(1, rows([t, t], [1, 1]), action=0)
        record = record._replace(policy=np.array([LEARNER, 7]))  # env 1: snapshot 7
        server.recorder.record_batch(record)
    ended = rows([3, 3], [1, 1], terminated=[True, True])
    episodes = server.recorder.record_batch(server.step_record(1, ended, action=0))
    # The snapshot's unroll has nothing to train on, so it never reaches the learner.
    (u,) = emitted(batches)
    assert u.valid.all() and store.unrolls_emitted == 1
    assert episodes.policy.tolist() == [LEARNER, 7]


def test_carry_is_kept_per_seat_and_stored_at_unroll_start():
    """A counting 'carry' (carry + 1 per step) shows which carry each unroll starts from."""

    def count(carry, first):
        (c,) = carry
        return (np.where(first[:, None], 0.0, c) + 1.0,)  # what the network's reset does

    store, batches = store_of(horizon=2, carry_template=(np.zeros((1, 1), np.float32),))
    server = Server(store, lambda n: (np.zeros((n, 1), np.float32),), count)
    server.open(1, num_envs=2)
    server.feed(1, rows([0.0, 0.0], [0, 0]), 0)
    server.feed(1, rows([1.0, 1.0], [0, 0]), 0)
    # env 0 terminates: its terminal step still continues the episode's carry ...
    server.feed(1, rows([2.0, 2.0], [0, 0], terminated=[True, False]), 0)
    out = emitted(batches)
    assert len(out) == 2
    np.testing.assert_array_equal(out[0].carry[0], [0.0])  # before the very first step
    np.testing.assert_array_equal(out[0].first, [True, False, False])
    # ... and the next step starts a new episode (first=True, the network resets the carry).
    server.feed(1, rows([3.0, 3.0], [0, 0]), 0)
    server.feed(1, rows([4.0, 4.0], [0, 0]), 0)
    out = emitted(batches)
    assert len(out) == 2
    # Second unrolls start at step 2, whose incoming carry counted steps 0 and 1.
    np.testing.assert_array_equal(out[0].carry[0], [2.0])
    np.testing.assert_array_equal(out[0].first, [False, True, False])
    np.testing.assert_array_equal(out[0].valid, [False, True, True])
    np.testing.assert_array_equal(out[1].carry[0], [2.0])


@pytest.mark.parametrize("overlap", [1, 2, 3])
def test_overlapping_unrolls_repeat_their_steps_and_start_from_the_carry_before_them(overlap):
    """R2D2's overlapping sequences: with overlap o of T = 4, a seat's unrolls start 4 - o steps
    apart, repeat the last o + 1 steps of the one before (outcomes of all but the boundary step
    included) and start from the carry before their own step 0 (a counting carry: the steps since
    the episode began; with 2o >= T that step is itself a repeated one)."""

    def count(carry, first):
        (c,) = carry
        return (np.where(first[:, None], 0.0, c) + 1.0,)

    store, batches = store_of(horizon=4, carry_template=(np.zeros((1, 1), np.float32),))
    store.pool = UnrollPool(SPEC, 4, overlap=overlap)
    store, batches = TrajectoryStore(store.pool, 1, batches, store._carry_template), batches
    server = Server(store, lambda n: (np.zeros((n, 1), np.float32),), count)
    server.open(1, num_envs=1)
    for t in range(11):
        done = t == 7
        server.feed(1, rows([float(t)], [float(t)], terminated=[done]), action=t % 3, version=t)
    out = emitted(batches)
    starts = list(range(0, 7, 4 - overlap))
    np.testing.assert_array_equal([u.obs["obs"][0, 0] for u in out], starts)
    for u, start in zip(out, starts):
        steps = np.arange(start, start + 5)
        np.testing.assert_array_equal(u.obs["obs"][:, 0], steps)
        np.testing.assert_array_equal(u.reward, steps[:4] + 1)  # r_t: what t+1 reported
        np.testing.assert_array_equal(u.terminated, steps[:4] == 6)
        np.testing.assert_array_equal(u.policy_version, steps)
        np.testing.assert_array_equal(u.first, (steps == 0) | (steps == 8))
        np.testing.assert_array_equal(u.valid, steps != 7)  # the terminal step is not acted on
    # The carry before step s counts the steps since the episode began (step 8 begins one).
    carries = [s if s <= 8 else s - 8 for s in starts]
    np.testing.assert_array_equal([u.carry[0][0] for u in out], carries)
    with pytest.raises(ValueError, match="overlap=4 must lie in"):
        UnrollPool(SPEC, 4, overlap=4)


def test_lost_lives_end_learning_episodes_but_statistics_count_whole_games():
    store, _ = store_of(horizon=8)
    server = Server(store)
    server.open(1, num_envs=1)
    assert not len(server.feed(1, rows([0.0], [0.0]), action=0).seat)
    server.feed(1, rows([1.0], [2.0]), action=0)
    # A life is lost: the learning episode ends (terminated), the game goes on.
    lost = server.feed(1, rows([2.0], [1.0], terminated=[True], game_over=[False]), action=0)
    assert not len(lost.seat)
    server.feed(1, rows([3.0], [0.0]), action=0)
    server.feed(1, rows([4.0], [5.0]), action=0)
    over = server.feed(1, rows([5.0], [1.0], terminated=[True], game_over=[True]), action=0)
    assert list(zip(over.episode_return, over.length)) == [(9.0, 4)]


def test_statistics_only_store_counts_episodes_without_unrolls():
    server = Server(None, spec=SPEC)
    server.open(1, num_envs=2)
    for t in range(3):
        server.feed(1, rows([t, t], [1, 2]), action=0)
    over = server.feed(1, rows([3, 3], [1, 2], terminated=[True, True]), action=0)
    assert over.episode_return.tolist() == [3.0, 6.0] and server.recorder.env_steps == 8


def test_a_batch_in_which_nothing_counts_never_reaches_the_learner():
    """Session 3 fills batches alone after its share of the window is used: such a batch would
    be an update of nothing (Adam's momentum would still move the parameters)."""
    store, batches = store_of(2, batch_unrolls=4, fair_share_factor=1.0)
    two_small_and_a_big_one(store, big_envs=8, big_reward=1.0)
    # 10 unrolls: [1, 2, 3, 3] (session 3's one counts), then [3, 3, 3, 3] (none can) held back.
    batch = batches.next_batch(timeout=1).unroll()
    np.testing.assert_array_equal(batch.valid.any(axis=1), [True, True, True, False])
    assert batches.next_batch(timeout=0) is None
    assert store.unrolls_capped == 5 and store.unrolls_emitted == 10


def test_unrolls_acted_too_many_versions_ago_are_kept_out_of_the_loss():
    """server.max_policy_lag: session 1's unroll was acted on version 0, session 2's on 9 and 10;
    with the newest version 10 and a lag of 5 only session 2's counts."""
    store, batches = store_of(2, batch_unrolls=2, max_policy_lag=5)
    server = Server(store)
    server.open(1, num_envs=1)
    server.open(2, num_envs=1)
    for t, (v1, v2) in enumerate([(0, 9), (0, 10), (0, 10)]):
        server.feed(1, rows([1.0], [1.0]), action=t, version=v1)
        server.feed(2, rows([2.0], [1.0]), action=t, version=v2)
    batch = batches.next_batch(timeout=1).unroll()
    np.testing.assert_array_equal(batch.obs["obs"][:, 0, 0], [1.0, 2.0])
    np.testing.assert_array_equal(batch.valid.any(axis=1), [False, True])
    assert store.unrolls_stale == 1 and store.unrolls_capped == 0  # no share cap applied


def test_a_batch_stacked_on_the_device_is_the_batch_gathered_on_the_host(monkeypatch):
    # Chunks of the smallest size (8 buffers), so that a batch's buffers come from two of them.
    monkeypatch.setattr(unrolls_lib, "CHUNK_BYTES", 1)
    store, batches = store_of(2, batch_unrolls=6)
    server = Server(store)
    server.open(1, num_envs=7)
    for t in range(5):  # two unrolls per seat: 14 buffers, two full batches
        server.feed(1, rows(np.arange(7) + 10 * t, [t] * 7), action=t)
    device = jax.local_devices()[0]
    spans = []
    for batch in iter(lambda: batches.next_batch(timeout=0), None):
        spans.append(len(set((batch.buffers // store.pool.k).tolist())))
        on_host, on_device = batch.unroll(), batch.unroll(device)
        batch.release()
        assert isinstance(on_device.obs["obs"], jax.Array)
        assert on_device.obs["obs"].devices() == {device}
        jax.tree.map(np.testing.assert_array_equal, on_host, on_device)
    assert len(spans) == 2 and max(spans) == 2


def test_pool_writes_steps_spread_over_chunks_in_any_order(monkeypatch):
    # Chunks of the smallest size (8 buffers of 3 steps: 24 steps each), three of them.
    monkeypatch.setattr(unrolls_lib, "CHUNK_BYTES", 1)
    spec = EnvSpec("test", {"obs": ArraySpec(np.uint8, (2, 3))}, num_actions=3)
    pool = UnrollPool(spec, horizon=2)
    pool.take(24)
    assert pool.k == 8 and len(pool.chunks) == 3
    flat = np.array([50, 3, 4, 30, 31, 0, 71, 70, 25, 2])  # runs within a chunk and across
    values = np.arange(flat.size * 6, dtype=np.uint8).reshape(flat.size, 2, 3)
    pool.write("obs/obs", flat, values)
    for step, value in zip(flat, values):
        chunk, local = divmod(int(step), 24)
        np.testing.assert_array_equal(pool.chunks[chunk].steps["obs/obs"][local], value)
    np.testing.assert_array_equal(pool.read("obs/obs", flat), values)
    pool.write("obs/obs", flat[:4], values[:4][::-1])  # a view that is not contiguous
    np.testing.assert_array_equal(pool.read("obs/obs", flat[:4]), values[:4][::-1])
