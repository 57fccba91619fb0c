"""Evaluation matches are reproducible: envpool returns rows in whatever order its threads
finished, and evaluations put them in env order first (seedlike.envs.in_env_order)."""

import numpy as np

from seedlike.envs import in_env_order
from seedlike.league import games, players
from seedlike.types import Rows


def test_rows_are_sorted_by_env_then_player_and_every_field_follows():
    env_id = np.array([3, 0, 3, 1, 0], np.int32)
    player_id = np.array([1, 1, 0, 0, 0], np.int32)
    n = len(env_id)
    rows = Rows(
        obs={"board": np.arange(n * 2, dtype=np.float32).reshape(n, 2)},
        extras={"mask": np.arange(n) % 2 == 0},
        reward=np.arange(n, dtype=np.float32),
        terminated=np.array([1, 0, 0, 0, 1], bool),
        truncated=np.zeros(n, bool),
        env_id=env_id,
        player_id=player_id,
        acting=np.array([0, 1, 1, 1, 0], bool),
        game_over=np.zeros(n, bool),
    )
    out = in_env_order(rows)
    order = [4, 1, 3, 2, 0]  # (0,0) (0,1) (1,0) (3,0) (3,1)
    np.testing.assert_array_equal(out.env_id, [0, 0, 1, 3, 3])
    np.testing.assert_array_equal(out.player_id, [0, 1, 0, 0, 1])
    np.testing.assert_array_equal(out.obs["board"], rows.obs["board"][order])
    np.testing.assert_array_equal(out.extras["mask"], rows.extras["mask"][order])
    for field in ("reward", "terminated", "acting"):
        np.testing.assert_array_equal(getattr(out, field), getattr(rows, field)[order])


def test_a_match_with_the_same_seed_is_the_same_match():
    """Random draws are taken in row order: before the sort, three matches of the same seed
    counted different games (-59, -56 and -59 net wins, 29-31 first moves, of 64)."""
    results = [
        games.play_match(
            "ConnectFour-v1", players.RandomAgent(), games.make_agent("scripted"), 64, seed=5
        )
        for _ in range(3)
    ]
    for result in results[1:]:
        assert result.outcomes == results[0].outcomes
        assert result.first_mover == results[0].first_mover
    assert len(results[0].outcomes) == 64 and 0 < sum(results[0].first_mover) < 64
