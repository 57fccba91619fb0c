"""Scripted Connect Four agents, and the envpool ConnectFour-v1 format they rely on (1.2.5)."""

import numpy as np

from seedlike.league import connect_four, random_actions
from seedlike.league.connect_four import MINE, THEIRS, scripted_actions, winning_moves


def make_env(num_envs=1, seed=0):
    import envpool

    return envpool.make("ConnectFour-v1", env_type="gymnasium", num_envs=num_envs, seed=seed)


def row_of(info, env, player):
    """Index of the (env, player) row in a step's observation and reward."""
    players = info["players"]
    return int(np.flatnonzero((players["env_id"] == env) & (players["id"] == player))[0])


def cells(plane):
    return sorted(map(tuple, np.argwhere(plane).tolist()))


def test_envpool_connect_four_observation_format():
    env = make_env()
    obs, info = env.reset()
    assert obs.shape == (2, 6, 7, 2) and obs.dtype == np.bool_
    assert info["players"]["env_id"].tolist() == [0, 0] and info["players"]["id"].tolist() == [0, 1]
    assert env.action_space.n == 7 and not obs.any()
    first = int(info["current_player"][0])  # who starts is random per episode
    second = 1 - first

    obs, reward, terminated, _, info = env.step(np.array([3]))
    # Plane 0 is the row's own stones, plane 1 the opponent's; stones fall to row 5 (the bottom).
    assert cells(obs[row_of(info, 0, first), :, :, MINE]) == [(5, 3)]
    assert cells(obs[row_of(info, 0, first), :, :, THEIRS]) == []
    assert cells(obs[row_of(info, 0, second), :, :, THEIRS]) == [(5, 3)]
    assert cells(obs[row_of(info, 0, second), :, :, MINE]) == []
    assert int(info["current_player"][0]) == second
    assert reward.tolist() == [0.0, 0.0] and not terminated[0]

    obs, *_, info = env.step(np.array([3]))  # the second stone stacks on the first
    assert cells(obs[row_of(info, 0, second), :, :, MINE]) == [(4, 3)]
    assert cells(obs[row_of(info, 0, first), :, :, THEIRS]) == [(4, 3)]
    obs, *_, info = env.step(np.array([6]))  # actions are columns
    assert cells(obs[row_of(info, 0, first), :, :, MINE]) == [(5, 3), (5, 6)]


def test_envpool_connect_four_terminal_rewards_and_full_columns():
    env = make_env(seed=1)
    _, info = env.reset()
    first = int(info["current_player"][0])
    for column in [0, 1, 0, 1, 0, 1]:
        env.step(np.array([column]))
    obs, reward, terminated, truncated, info = env.step(np.array([0]))  # four in column 0
    assert terminated[0] and not truncated[0]
    assert reward[row_of(info, 0, first)] == 1.0 and reward[row_of(info, 0, 1 - first)] == -1.0
    assert obs[row_of(info, 0, first), 2:, 0, MINE].all()  # the terminal board is observed
    # The next step is the auto-reset: its action is ignored, the board empty, rewards 0.
    obs, reward, terminated, _, info = env.step(np.array([5]))
    assert not obs.any() and reward.tolist() == [0.0, 0.0] and not terminated[0]
    assert info["elapsed_step"][0] == 0

    mover = int(info["current_player"][0])
    for _ in range(6):
        _, _, _, _, info = env.step(np.array([2]))
    assert info["legal_action_mask"][0].tolist() == [True, True, False, True, True, True, True]
    assert int(info["current_player"][0]) == mover  # six moves later
    _, reward, terminated, _, info = env.step(np.array([2]))  # illegal: the mover loses
    assert terminated[0] and reward[row_of(info, 0, mover)] == -1.0


def board(mine=(), theirs=()):
    """obs bool [1, 6, 7, 2] from (row, column) cells, row 5 at the bottom."""
    obs = np.zeros((1, 6, 7, 2), np.bool_)
    for r, c in mine:
        obs[0, r, c, MINE] = True
    for r, c in theirs:
        obs[0, r, c, THEIRS] = True
    return obs


def legal_of(obs):
    return ~(obs[:, 0, :, MINE] | obs[:, 0, :, THEIRS])  # a column is full when its top is


def choices(obs, seeds=20):
    return {
        int(scripted_actions(obs, legal_of(obs), np.random.default_rng(s))[0]) for s in range(seeds)
    }


def test_takes_an_immediate_win():
    horizontal = board(mine=[(5, 0), (5, 1), (5, 2)], theirs=[(4, 0), (4, 1), (5, 6)])
    assert choices(horizontal) == {3}
    vertical = board(mine=[(5, 4), (4, 4), (3, 4)], theirs=[(5, 0), (5, 1), (5, 2)])
    assert choices(vertical) == {4}  # winning beats blocking column 3
    # Diagonal through (2, 3): column 3 holds three stones, so the fourth lands on row 2.
    diagonal = board(
        mine=[(5, 0), (4, 1), (3, 2), (5, 3)], theirs=[(5, 1), (5, 2), (4, 2), (4, 3), (3, 3)]
    )
    assert choices(diagonal) == {3}
    # Three in a row on row 4, but a stone in column 3 lands on row 5: no win for us there,
    # only a block of their three on row 5.
    floating = board(mine=[(4, 0), (4, 1), (4, 2)], theirs=[(5, 0), (5, 1), (5, 2)])
    assert not winning_moves(floating[..., MINE], floating.any(-1), legal_of(floating)).any()
    assert winning_moves(floating[..., THEIRS], floating.any(-1), legal_of(floating))[0, 3]
    assert choices(floating) == {3}


def test_blocks_an_immediate_threat():
    assert choices(board(mine=[(5, 0), (4, 0)], theirs=[(5, 1), (5, 2), (5, 3)])) == {4}
    open_three = board(mine=[(4, 1)], theirs=[(5, 1), (5, 2), (5, 3)])
    assert choices(open_three) == {0, 4}  # either end blocks one threat, at random
    assert choices(board(mine=[(5, 0)], theirs=[(5, 6), (4, 6), (3, 6)])) == {6}


def test_never_plays_a_full_column_and_is_batched():
    full = board(mine=[(r, 0) for r in (5, 3, 1)], theirs=[(r, 0) for r in (4, 2, 0)])
    rng = np.random.default_rng(0)
    obs = np.repeat(full, 500, axis=0)
    actions = scripted_actions(obs, legal_of(obs), rng)
    assert actions.shape == (500,) and actions.dtype == np.int32
    assert set(actions.tolist()) == set(range(1, 7))
    random = random_actions(None, legal_of(obs), rng)
    assert set(random.tolist()) == set(range(1, 7)) and random.dtype == np.int32
    np.testing.assert_array_equal(
        connect_four.has_four(np.stack([board(mine=[(5, c) for c in range(4)])[0, ..., 0]])), [True]
    )


def rows(info):
    """[num_envs, 2] index of each (env, player) row of a step."""
    players = info["players"]
    row = np.empty((players["env_id"].max() + 1, 2), np.int64)
    row[players["env_id"], players["id"]] = np.arange(players["id"].shape[0])
    return row


def play(num_games, num_envs=16, seed=0):
    """Scripted (player 0 in half of the envs, player 1 in the other) against random, through
    envpool. Returns per game (scripted moved first, scripted's reward)."""
    env = make_env(num_envs, seed)
    rng = np.random.default_rng(seed)
    scripted_player = (np.arange(num_envs) >= num_envs // 2).astype(np.int32)
    obs, info = env.reset()
    first = np.zeros(num_envs, np.int32)
    games = []
    while len(games) < num_games:
        env_id, current, row = info["env_id"], info["current_player"], rows(info)
        started = info["elapsed_step"] == 0
        first[env_id[started]] = current[started]
        legal = info["legal_action_mask"]
        scripted = scripted_actions(obs[row[env_id, current]], legal, rng)
        actions = np.where(
            current == scripted_player[env_id], scripted, random_actions(None, legal, rng)
        )
        obs, reward, terminated, truncated, info = env.step(actions, env_id)
        row = rows(info)
        for i in np.flatnonzero(terminated | truncated):
            e = info["env_id"][i]
            games.append((first[e] == scripted_player[e], reward[row[e, scripted_player[e]]]))
    return games


def test_scripted_beats_random_with_both_colours():
    games = play(200)
    moved_first = np.array([g[0] for g in games])
    won = np.array([g[1] == 1.0 for g in games])
    assert moved_first.sum() >= 60 and (~moved_first).sum() >= 60
    assert won.mean() >= 0.9
    assert won[moved_first].mean() >= 0.85 and won[~moved_first].mean() >= 0.85


def test_random_agent_plays_legal_moves_only():
    legal = np.random.default_rng(3).random((1000, 7)) < 0.3
    legal[:, 0] |= ~legal.any(1)
    actions = random_actions(None, legal, np.random.default_rng(3))
    assert legal[np.arange(1000), actions].all()
