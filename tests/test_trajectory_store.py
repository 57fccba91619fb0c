"""The trajectory store's alignment of rewards and episode ends to the actions that earned them."""

import numpy as np

from seedlike.rpc.codec import StepRows
from seedlike.server.trajectory_store import TrajectoryStore
from seedlike.types import ArraySpec, EnvSpec

SPEC = EnvSpec("test", {"obs": ArraySpec(np.float32, (1,))}, num_actions=3)


def rows(
    obs,
    reward,
    terminated=None,
    truncated=None,
    env_id=None,
    player_id=None,
    acting=None,
    extras=None,
    game_over=None,
):
    n = len(obs)
    terminated = np.zeros(n, bool) if terminated is None else np.asarray(terminated)
    truncated = np.zeros(n, bool) if truncated is None else np.asarray(truncated)
    done = terminated | truncated
    return StepRows(
        obs={"obs": np.asarray(obs, np.float32).reshape(n, 1)},
        extras=extras or {},
        reward=np.asarray(reward, np.float32),
        terminated=terminated,
        truncated=truncated,
        env_id=np.arange(n, dtype=np.int32) if env_id is None else np.asarray(env_id, np.int32),
        player_id=np.zeros(n, np.int32) if player_id is None else np.asarray(player_id, np.int32),
        acting=~done if acting is None else np.asarray(acting),
        game_over=done if game_over is None else np.asarray(game_over),
    )


def feed(store, session, batch, action, version=0):
    n = batch.reward.shape[0]
    action = np.full(n, action, np.int32)
    return store.record(
        session, batch, action, -action.astype(np.float32), batch.obs["obs"][:, 0] * 10, version
    )


def test_rewards_and_dones_align_with_the_actions_that_earned_them():
    out = []
    store = TrajectoryStore(SPEC, horizon=4, emit=out.append)
    store.open_session(1, num_envs=1)
    # Episode: obs 0 -a0-> r1 obs 1 -a1-> r2 obs 2 -a2-> r3 obs 3 (terminal); reset obs 10 ...
    feed(store, 1, rows([0.0], [0.0]), action=0)
    feed(store, 1, rows([1.0], [1.0]), action=1)
    feed(store, 1, rows([2.0], [2.0]), action=2)
    episodes = feed(store, 1, rows([3.0], [3.0], terminated=[True]), action=0)
    assert [(e.episode_return, e.length) for e in episodes] == [(6.0, 3)]
    assert not out
    feed(store, 1, rows([10.0], [0.0]), action=1)
    assert len(out) == 1
    u = out[0]
    np.testing.assert_array_equal(u.obs["obs"][:, 0], [0, 1, 2, 3, 10])
    np.testing.assert_array_equal(u.action, [0, 1, 2, 0, 1])
    np.testing.assert_array_equal(u.reward, [1, 2, 3, 0])  # r_t is the outcome of action t
    np.testing.assert_array_equal(u.terminated, [False, False, True, False])
    np.testing.assert_array_equal(u.valid, [True, True, True, False, True])  # a3 was ignored
    np.testing.assert_array_equal(u.behaviour_value, [0, 10, 20, 30, 100])
    np.testing.assert_array_equal(u.behaviour_logp, -u.action)


def test_consecutive_unrolls_share_their_boundary_step():
    out = []
    store = TrajectoryStore(SPEC, horizon=3, emit=out.append)
    store.open_session(1, num_envs=1)
    for t in range(7):
        feed(store, 1, rows([float(t)], [float(t)]), action=t % 3, version=t)
    assert len(out) == 2
    np.testing.assert_array_equal(out[0].obs["obs"][:, 0], [0, 1, 2, 3])
    np.testing.assert_array_equal(out[1].obs["obs"][:, 0], [3, 4, 5, 6])
    np.testing.assert_array_equal(out[1].reward, [4, 5, 6])
    np.testing.assert_array_equal(out[1].policy_version, [3, 4, 5, 6])


def test_truncated_episode_keeps_final_observation_value():
    out = []
    store = TrajectoryStore(SPEC, horizon=3, emit=out.append)
    store.open_session(1, num_envs=1)
    feed(store, 1, rows([0.0], [0.0]), action=0)
    feed(store, 1, rows([1.0], [1.0]), action=0)
    feed(store, 1, rows([2.0], [1.0], truncated=[True]), action=0)  # final obs 2 (value 20)
    feed(store, 1, rows([5.0], [0.0]), action=0)
    u = out[0]
    np.testing.assert_array_equal(u.truncated, [False, True, False])
    np.testing.assert_array_equal(u.terminated, [False, False, False])
    assert u.valid.tolist() == [True, True, False, True]
    assert u.behaviour_value[2] == 20.0


def test_seats_are_independent_and_batches_may_be_partial():
    out = []
    store = TrajectoryStore(SPEC, horizon=2, emit=out.append)
    store.open_session(1, num_envs=2)
    feed(store, 1, rows([0.0, 100.0], [0, 0]), action=0)
    feed(store, 1, rows([101.0], [5.0], env_id=[1]), action=1)  # async: only env 1 stepped
    feed(store, 1, rows([1.0, 102.0], [1.0, 6.0]), action=2)
    assert len(out) == 1
    np.testing.assert_array_equal(out[0].obs["obs"][:, 0], [100, 101, 102])
    np.testing.assert_array_equal(out[0].reward, [5, 6])
    feed(store, 1, rows([2.0], [2.0], env_id=[0]), action=0)
    np.testing.assert_array_equal(out[1].obs["obs"][:, 0], [0, 1, 2])


def test_closing_a_session_drops_partial_unrolls():
    out = []
    store = TrajectoryStore(SPEC, horizon=4, emit=out.append)
    store.open_session(1, num_envs=2)
    store.open_session(2, num_envs=1)
    for t in range(3):
        feed(store, 1, rows([t, t], [1, 1]), action=0)
        feed(store, 2, rows([t], [1]), action=0)
    assert store.close_session(1) == 6
    assert store.steps_dropped == 6 and not out
    for t in range(3, 6):
        feed(store, 2, rows([t], [1]), action=0)
    assert len(out) == 1 and out[0].action.shape == (5,)
    np.testing.assert_array_equal(out[0].obs["obs"][:, 0], [0, 1, 2, 3, 4])


def test_turn_based_rewards_accumulate_for_the_waiting_player():
    """Players alternate; a player's step collects every reward until its next move."""
    spec = EnvSpec("game", {"obs": ArraySpec(np.float32, (1,))}, num_actions=3, num_players=2)
    out = []
    store = TrajectoryStore(spec, horizon=2, emit=out.append)
    store.open_session(1, num_envs=1)
    both = dict(env_id=[0, 0], player_id=[0, 1])
    feed(store, 1, rows([0, 0], [0, 0], acting=[True, False], **both), action=1)  # p0 moves
    feed(store, 1, rows([1, 1], [0, 0], acting=[False, True], **both), action=2)  # p1 moves
    feed(store, 1, rows([2, 2], [0, 0], acting=[True, False], **both), action=0)  # p0 moves
    # p1 moves, p0 wins on its next move: terminal rows for both players.
    feed(store, 1, rows([3, 3], [0, 0], acting=[False, True], **both), action=1)
    episodes = feed(store, 1, rows([4, 4], [1, -1], terminated=[True, True], **both), action=0)
    assert sorted((e.seat, e.episode_return, e.length) for e in episodes) == [
        (0, 1.0, 2),
        (1, -1.0, 2),
    ]
    p0 = [u for u in out if u.obs["obs"][0, 0] in (0.0,)][0]
    np.testing.assert_array_equal(p0.obs["obs"][:, 0], [0, 2, 4])
    np.testing.assert_array_equal(p0.reward, [0, 1])
    np.testing.assert_array_equal(p0.terminated, [False, True])
    p1 = [u for u in out if u.obs["obs"][0, 0] == 1.0][0]
    np.testing.assert_array_equal(p1.obs["obs"][:, 0], [1, 3, 4])
    np.testing.assert_array_equal(p1.reward, [0, -1])
    np.testing.assert_array_equal(p1.valid, [True, True, False])


def test_carry_is_kept_per_seat_and_stored_at_unroll_start():
    """A counting 'carry' (carry + 1 per step) shows which carry each unroll starts from."""
    out = []
    store = TrajectoryStore(
        SPEC, horizon=2, emit=out.append, initial_carry=lambda n: (np.zeros((n, 1), np.float32),)
    )
    store.open_session(1, num_envs=2)

    def step(batch, env_ids):
        mask = batch.acting | batch.terminated | batch.truncated
        first, (carry,), policy, _ = store.policy_inputs(1, batch, mask)
        assert (policy == -1).all()
        carry = np.where(first[:, None], 0.0, carry)  # what the network's reset does
        new = (carry + 1.0,)
        n = batch.reward.shape[0]
        store.record(1, batch, np.zeros(n, np.int32), np.zeros(n), np.zeros(n), 0, new)
        return first

    assert step(rows([0.0, 0.0], [0, 0]), [0, 1]).tolist() == [True, True]
    assert step(rows([1.0, 1.0], [0, 0]), [0, 1]).tolist() == [False, False]
    # env 0 terminates: its terminal step still continues the episode's carry ...
    step(rows([2.0, 2.0], [0, 0], terminated=[True, False]), [0, 1])
    assert len(out) == 2
    np.testing.assert_array_equal(out[0].carry[0], [0.0])  # before the very first step
    np.testing.assert_array_equal(out[0].first, [True, False, False])
    # ... and the next step starts a new episode (first=True, the network resets the carry).
    first = step(rows([3.0, 3.0], [0, 0]), [0, 1])
    assert first.tolist() == [True, False]
    step(rows([4.0, 4.0], [0, 0]), [0, 1])
    assert len(out) == 4
    # Second unrolls start at step 2, whose incoming carry counted steps 0 and 1.
    np.testing.assert_array_equal(out[2].carry[0], [2.0])
    np.testing.assert_array_equal(out[2].first, [False, True, False])
    np.testing.assert_array_equal(out[2].valid, [False, True, True])
    np.testing.assert_array_equal(out[3].carry[0], [2.0])


def test_lost_lives_end_learning_episodes_but_statistics_count_whole_games():
    out = []
    store = TrajectoryStore(SPEC, horizon=8, emit=out.append)
    store.open_session(1, num_envs=1)
    assert feed(store, 1, rows([0.0], [0.0]), action=0) == []
    feed(store, 1, rows([1.0], [2.0]), action=0)
    # A life is lost: the learning episode ends (terminated), the game goes on.
    lost = feed(store, 1, rows([2.0], [1.0], terminated=[True], game_over=[False]), action=0)
    assert lost == []
    feed(store, 1, rows([3.0], [0.0]), action=0)
    feed(store, 1, rows([4.0], [5.0]), action=0)
    over = feed(store, 1, rows([5.0], [1.0], terminated=[True], game_over=[True]), action=0)
    assert [(e.episode_return, e.length) for e in over] == [(9.0, 4)]
