"""seedlike.scores.final_score: a run's final score, counted in rows or in episodes."""

import math

import pytest

from seedlike.scores import final_score


def test_counted_in_episodes_the_earliest_row_taken_counts_in_part():
    rows = [
        {"episodes": 10, "episode_return_mean": 1.0},
        {"episodes": 10, "episode_return_mean": 2.0},
        {"episodes": 0, "episode_return_mean": None},  # an interval in which no episode ended
        {"episodes": 10, "episode_return_mean": 3.0},
    ]
    assert final_score(rows, weight="episodes") == pytest.approx(3.0)  # 3 of 30 episodes
    # 15 episodes: the last row's 10 and 5 of the one before.
    assert final_score(rows, share=0.5, weight="episodes") == pytest.approx((30 + 10) / 15)
    assert final_score(rows, share=1.0, weight="episodes") == pytest.approx(2.0)


def test_counted_in_rows_whole_rows_are_taken_and_at_least_one():
    rows = [{"r": float(v)} for v in range(1, 16)]
    assert final_score(rows, "r", 0.1) == pytest.approx(14.5)  # 1.5 rows round up to 2
    assert final_score(rows, "r", 0.01) == pytest.approx(15.0)
    assert math.isnan(final_score([{"r": None}, {"r": float("nan")}], "r"))
